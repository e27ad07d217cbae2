/*
 * coll_gather.c - dr_all_gather and dr_gather.
 *
 * all_gather: small results take lg p steps, by recursive doubling on a
 * power-of-two group (in place in the caller's recvbuf) or Bruck's
 * algorithm otherwise (in scratch, rotated at the end); large ones go round
 * a ring, p-1 steps each moving one block straight between the callers'
 * buffers, so that every rank only ever talks to its two neighbours.
 *
 * gather: small messages climb a binomial tree (each inner rank forwards
 * its whole subtree in one message); large ones go directly to the root,
 * which posts every receive at once into its recvbuf.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "copy.h"

dr_err dri_all_gather_rd(const dri_op *op, char *out, size_t blk)
{
	const dr_group *g = op->group;
	int r = g->rank;

	for (int d = 1; d < g->size; d <<= 1) {
		int partner = r ^ d;
		dr_err err = dri_sendrecv(&op->id, dri_peer(g, partner),
					  out + (size_t)dri_rd_start(r, d) * blk,
					  (size_t)d * blk, dri_peer(g, partner),
					  out + (size_t)dri_rd_start(partner, d) * blk,
					  (size_t)d * blk);
		if (err)
			return err;
	}
	return DR_OK;
}

dr_err dri_all_gather_bruck(const dri_op *op, char *out, size_t blk)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	char *tmp = dri_scratch_get((size_t)p * blk);
	dr_err err = DR_ENOMEM;

	if (!tmp)
		goto out;
	dri_copy(tmp, out + (size_t)r * blk, blk);
	for (int d = 1; d < p; d <<= 1) {
		size_t nb = (size_t)dri_bruck_n(d, p) * blk;

		err = dri_sendrecv(&op->id, dri_peer(g, dri_mod(r - d, p)), tmp,
				   nb, dri_peer(g, dri_mod(r + d, p)),
				   tmp + (size_t)d * blk, nb);
		if (err)
			goto out;
	}
	/* Slot i holds block r + i: two contiguous runs. */
	dri_copy(out + (size_t)r * blk, tmp, (size_t)(p - r) * blk);
	dri_copy(out, tmp + (size_t)(p - r) * blk, (size_t)r * blk);
	err = DR_OK;
out:
	dri_scratch_put(tmp);
	return err;
}

/* Every receive of the ring lands in its final place, so all are posted
 * up front, and step s sends the block step s-1 received as soon as it is
 * in.  (Cutting blocks in pieces forwarded one by one only absorbs the
 * skew between ranks, since every link is busy at every step anyway; on
 * 2 cores with 4 ranks 512 KiB pieces made a 64 MiB all_gather 4x slower.) */
dr_err dri_all_gather_ring(const dri_op *op, char *out, size_t blk)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank, n = p - 1, nrecv = 0, nsent = 0;
	int right = dri_peer(g, dri_mod(r + 1, p));
	int left = dri_peer(g, dri_mod(r - 1, p));
	dri_req *rr = dri_scratch_get(2 * (size_t)n * sizeof(*rr)), *sr = rr ? rr + n : NULL;
	dr_err err = DR_ENOMEM;

	if (!rr)
		return err;
	err = DR_OK;
	for (int s = 0; s < n && !err; s++) {
		err = dri_irecv(&rr[s], &op->id, left,
				out + (size_t)dri_ring_ag_send(r - 1, s, p) * blk, blk);
		if (!err)
			nrecv++;
	}
	for (int s = 0; s < n && !err; s++) {
		/* step 0 sends our block straight from sendbuf, and copies it
		 * into place while it travels */
		const char *src = s ? out + (size_t)dri_ring_ag_send(r, s, p) * blk
				    : (const char *)op->sendbuf;
		if (s > 0)
			err = dri_waitall(&rr[s - 1], 1);
		if (!err)
			err = dri_isend(&sr[s], &op->id, right, src, blk);
		if (!err)
			nsent++;
		if (s == 0 && src != out + (size_t)r * blk)
			memmove(out + (size_t)r * blk, src, blk);
	}
	if (!err)
		err = dri_waitall(&rr[n - 1], 1);
	/* On success this only waits for the sends; after an error (which
	 * aborts the transport) every request is already finished, and this
	 * makes sure none is left pointing into freed memory. */
	if (nsent) {
		dr_err serr = dri_waitall(sr, nsent);
		if (!err)
			err = serr;
	}
	if (err && nrecv)
		dri_waitall(rr, nrecv);
	dri_scratch_put(rr);
	return err;
}

dr_err dri_gather_tree(const dri_op *op, int root, size_t blk)
{
	const dr_group *g = op->group;
	int p = g->size, vr = dri_mod(g->rank - root, p);
	int span = vr ? dri_binom_subtree(vr, dri_binom_limit(vr, p), p) : p;
	char *tmp = NULL;
	dr_err err = DR_OK;

	if (span == 1) /* a leaf sends its own block as it is */
		return dri_send(&op->id,
				dri_peer(g, dri_mod(dri_binom_parent(vr) + root, p)),
				op->sendbuf, blk);
	tmp = dri_scratch_get((size_t)span * blk);
	if (!tmp)
		return DR_ENOMEM;
	dri_copy(tmp, op->sendbuf, blk);
	for (int m = 1; m < dri_binom_limit(vr, p) && vr + m < p; m <<= 1) {
		int child = vr + m;

		err = dri_recv(&op->id, dri_peer(g, dri_mod(child + root, p)),
			       tmp + (size_t)m * blk,
			       (size_t)dri_binom_subtree(child, m, p) * blk);
		if (err)
			goto out;
	}
	if (vr) {
		err = dri_send(&op->id,
			       dri_peer(g, dri_mod(dri_binom_parent(vr) + root, p)),
			       tmp, (size_t)span * blk);
		goto out;
	}
	/* Slot j holds relative rank j, i.e. group rank root + j. */
	dri_copy((char *)op->buf + (size_t)root * blk, tmp,
		 (size_t)(p - root) * blk);
	dri_copy(op->buf, tmp + (size_t)(p - root) * blk, (size_t)root * blk);
out:
	dri_scratch_put(tmp);
	return err;
}

dr_err dri_gather_direct(const dri_op *op, int root, size_t blk)
{
	return dri_rooted_direct(op, root, blk, 1);
}
