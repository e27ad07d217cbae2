/*
 * coll_alltoall.c - dr_all_to_all and dr_all_to_all_v.
 *
 * Pairwise exchange: at step k (1 .. p-1) rank r sends its piece for r + k
 * and receives the piece of r - k, so that every rank sends to and
 * receives from exactly one peer per step and no link carries two
 * messages at once.  For small pieces DRI_A2A_WINDOW steps are posted
 * together, which hides their latency while bounding what is in flight on
 * a large group; pieces of DRI_A2A_LARGE bytes and more go one step at a
 * time.  Pieces go straight from sendbuf to the peer and straight into
 * recvbuf; only an in-place call copies its input first.
 *
 * With variable splits every message's header carries its own element
 * count, so a rank expecting another count from a peer than the peer sends
 * fails with DR_EMISMATCH instead of reading a wrong piece.  Empty pieces
 * are sent too: that is what lets the receiver tell "nothing" from "not yet".
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "copy.h"

/* Copies n bytes (no overlap) a MiB at a time, moving the network along
 * in between: a 32 MiB piece copied in one go would leave the sockets full
 * and the peers idle for the whole copy (2 ranks, 64 MiB: a quarter of the
 * call). */
static void copy_progressing(char *dst, const char *src, size_t n)
{
	const size_t chunk = (size_t)1 << 20;

	for (size_t o = 0; o < n; o += chunk) {
		dri_copy(dst + o, src + o, n - o < chunk ? n - o : chunk);
		if (n - o > chunk)
			dri_transport_progress(0);
	}
}

dr_err dri_all_to_all_pairwise(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	size_t es = dr_dtype_size(op->dtype);
	size_t *soff = dri_scratch_get((size_t)(p + 1) * 2 * sizeof(*soff));
	size_t *roff = soff ? soff + p + 1 : NULL;
	const char *in = op->sendbuf;
	char *out = op->buf, *copy = NULL;
	dri_req reqs[2 * DRI_A2A_WINDOW];
	dri_msg_id ids[2 * DRI_A2A_WINDOW];
	int window = DRI_A2A_WINDOW;
	dr_err err = DR_ENOMEM;

	if (!soff)
		goto out;
	soff[0] = roff[0] = 0;
	for (int i = 0; i < p; i++) {
		soff[i + 1] = soff[i] + (op->counts ? op->counts[i] : op->count);
		roff[i + 1] = roff[i] + (op->counts ? op->counts[p + i] : op->count);
	}
	/* In place: the pieces we receive would overwrite ones not yet sent. */
	if ((uintptr_t)out < (uintptr_t)in + soff[p] * es &&
	    (uintptr_t)in < (uintptr_t)out + roff[p] * es) {
		in = copy = dri_scratch_get(soff[p] * es);
		if (!copy)
			goto out;
		dri_copy(copy, op->sendbuf, soff[p] * es);
	}
	/* Large pieces go one step at a time, as Open MPI's pairwise
	 * exchange does: with every step in flight, a 64 MiB all_to_all on
	 * 4 ranks took 1.5-2.5x longer here, the streams only fighting over
	 * the cores. */
	if ((soff[p] > roff[p] ? soff[p] : roff[p]) * es / (size_t)p >= DRI_A2A_LARGE)
		window = 1;
	err = DR_OK;
	/* (a group of one goes round once, for its own piece) */
	for (int k0 = 1; k0 == 1 || (k0 < p && !err); k0 += window) {
		int n = 0;

		for (int k = k0; k < p && k < k0 + window && !err; k++) {
			int to = dri_pair_to(r, k, p), from = dri_pair_from(r, k, p);
			size_t sn = soff[to + 1] - soff[to];
			size_t rn = roff[from + 1] - roff[from];

			ids[n] = ids[n + 1] = op->id;
			if (op->counts) {
				ids[n].count = sn;
				ids[n + 1].count = rn;
			}
			/* The send first: our piece is on its way before
			 * we spend time taking in the peer's (a large one
			 * that came early waits in the socket, see
			 * transport.c, so the receive still lands in
			 * place). */
			err = dri_isend(&reqs[n], &ids[n], dri_peer(g, to),
					in + soff[to] * es, sn * es);
			if (err)
				break;
			n++;
			err = dri_irecv(&reqs[n], &ids[n], dri_peer(g, from),
					out + roff[from] * es, rn * es);
			if (!err)
				n++;
		}
		/* Our own piece, while the first step's bytes move (a group
		 * of one has posted nothing: in place, in and out are one). */
		if (k0 == 1 && p > 1)
			copy_progressing(out + roff[r] * es, in + soff[r] * es,
					 (soff[r + 1] - soff[r]) * es);
		else if (k0 == 1)
			memmove(out + roff[r] * es, in + soff[r] * es,
				(soff[r + 1] - soff[r]) * es);
		err = dri_coll_wait(reqs, n, err);
	}
out:
	dri_scratch_put(copy);
	dri_scratch_put(soff);
	return err;
}
