/*
 * coll_allreduce.c - dr_all_reduce: recursive doubling for small buffers,
 * a pipelined ring (reduce-scatter, then all-gather) for large ones.
 *
 * Small (up to DRI_COLL_SMALL_BYTES, or fewer elements than ranks): lg p
 * exchanges of the whole buffer.  When p is not a power of two, the first
 * 2 * (p - p') ranks fold pairwise first (the even one hands its buffer to
 * the odd one and sits out) and get the result back at the end.
 *
 * Large, p a power of two: Rabenseifner's algorithm, recursive halving
 * then recursive doubling (lg p pairwise steps each way).  Large, other p:
 * the buffer is cut in p blocks; p - 1 ring steps reduce-scatter them, so
 * rank r ends owning block r + 1 fully reduced, and p - 1 more gather them
 * back.  In both, every receive of the call is posted before any data can
 * come, so all of it lands in place (no unexpected-queue copies).  Each block travels in pieces of RING_PIECE bytes and a
 * piece is forwarded as soon as it has arrived (and been reduced), so the
 * network, the reduction and the next step overlap.  Every rank sends and
 * receives 2 (p - 1) / p of the buffer: the bandwidth optimum.
 *
 * AVG reduces as SUM and divides once at the end (dri_reduce_finish), on
 * the owned block in the ring, so every rank gets the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

#define RING_PIECE ((size_t)512 << 10)

dr_err dri_all_reduce_rd(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank, pof2 = 1, rem, newr;
	size_t bytes = op->count * dr_dtype_size(op->dtype);
	void *tmp;
	dr_err err = DR_OK;

	while (pof2 * 2 <= p)
		pof2 *= 2;
	rem = p - pof2;
	tmp = dri_scratch_get(bytes);
	if (!tmp)
		return DR_ENOMEM;
	if (r < 2 * rem) {
		if (r % 2 == 0) {
			err = dri_send(&op->id, dri_peer(g, r + 1), op->buf, bytes);
			newr = -1;
		} else {
			err = dri_recv(&op->id, dri_peer(g, r - 1), tmp, bytes);
			if (!err)
				err = dri_reduce(op->buf, tmp, op->count, op->dtype,
						 op->redop);
			newr = r / 2;
		}
	} else {
		newr = r - rem;
	}
	for (int mask = 1; !err && newr >= 0 && mask < pof2; mask <<= 1) {
		int np = newr ^ mask;
		int peer = dri_peer(g, np < rem ? np * 2 + 1 : np + rem);
		err = dri_sendrecv(&op->id, peer, op->buf, bytes, peer, tmp, bytes);
		if (!err)
			err = dri_reduce(op->buf, tmp, op->count, op->dtype,
					 op->redop);
	}
	if (!err && r < 2 * rem) {
		if (r % 2)
			err = dri_send(&op->id, dri_peer(g, r - 1), op->buf, bytes);
		else
			err = dri_recv(&op->id, dri_peer(g, r + 1), op->buf, bytes);
	}
	if (!err)
		dri_reduce_finish(op->buf, op->count, op->dtype, op->redop, p);
	dri_scratch_put(tmp);
	return err;
}

/* Piece j of block b: element range [*start, *start + *n). */
static void piece(const size_t *off, size_t pe, int b, size_t j,
		  size_t *start, size_t *n)
{
	size_t s = off[b] + j * pe;

	*start = s;
	*n = s >= off[b + 1] ? 0 : (off[b + 1] - s < pe ? off[b + 1] - s : pe);
}

dr_err dri_all_reduce_ring(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank, steps = p - 1;
	int right = dri_peer(g, dri_mod(r + 1, p));
	int left = dri_peer(g, dri_mod(r - 1, p));
	size_t es = dr_dtype_size(op->dtype), pe = RING_PIECE / es, np, st, n;
	size_t nreq, slot = 1;
	char *buf = op->buf, *tmp = NULL;
	size_t *off = NULL;
	dri_req *rr = NULL, *sr = NULL, *ag = NULL;
	dr_err err = DR_ENOMEM;

	if (!pe)
		pe = 1;
	off = malloc((size_t)(p + 1) * sizeof(*off));
	if (!off)
		goto out;
	for (int i = 0; i <= p; i++)
		off[i] = dri_block_off(op->count, p, i);
	np = (off[1] - off[0] + pe - 1) / pe;
	if (!np)
		np = 1;
	nreq = (size_t)steps * np;
	/* A slot holds a piece, or a whole block when blocks are smaller:
	 * 1 MiB over 255 ranks needs 254 slots of 4 KiB, not of 512 KiB. */
	for (int i = 0; i < p; i++)
		if (off[i + 1] - off[i] > slot)
			slot = off[i + 1] - off[i];
	if (slot > pe)
		slot = pe;
	/* A slot per step and piece, so that every receive of the call can
	 * be posted before any data comes: all of it lands where it belongs
	 * instead of in the unexpected queue. */
	tmp = dri_scratch_get(nreq * slot * es);
	rr = malloc(nreq * sizeof(*rr));
	sr = malloc(nreq * sizeof(*sr));
	ag = malloc(nreq * sizeof(*ag));
	if (!tmp || !rr || !sr || !ag)
		goto out;

	/* Reduce-scatter: step s sends block r - s and receives block
	 * r - s - 1 into its slots.  All-gather: step s receives block r - s
	 * straight into buf.  Its data can only come once this rank's share of
	 * that block has left (it is in the final value), so posting it now
	 * is safe.  Receives from left are matched in the order posted,
	 * which is the order left sends in. */
	for (int s = 0; s < steps; s++)
		for (size_t j = 0; j < np; j++) {
			piece(off, pe, dri_mod(r - s - 1, p), j, &st, &n);
			err = dri_irecv(&rr[(size_t)s * np + j], &op->id, left,
					tmp + ((size_t)s * np + j) * slot * es, n * es);
			if (err)
				goto out;
		}
	for (int s = 0; s < steps; s++)
		for (size_t j = 0; j < np; j++) {
			piece(off, pe, dri_mod(r - s, p), j, &st, &n);
			err = dri_irecv(&ag[(size_t)s * np + j], &op->id, left,
					buf + st * es, n * es);
			if (err)
				goto out;
		}
	for (size_t j = 0; j < np; j++) {
		piece(off, pe, r, j, &st, &n);
		err = dri_isend(&sr[j], &op->id, right, buf + st * es, n * es);
		if (err)
			goto out;
	}
	for (int s = 0; s < steps; s++) {
		int rb = dri_mod(r - s - 1, p);
		for (size_t j = 0; j < np; j++) {
			size_t k = (size_t)s * np + j;
			err = dri_waitall(&rr[k], 1);
			if (err)
				goto out;
			piece(off, pe, rb, j, &st, &n);
			err = dri_reduce(buf + st * es, tmp + k * slot * es, n,
					 op->dtype, op->redop);
			if (err)
				goto out;
			/* Forward the piece just reduced. */
			if (s + 1 < steps)
				err = dri_isend(&sr[k + np], &op->id, right,
						buf + st * es, n * es);
			if (err)
				goto out;
		}
	}
	err = dri_waitall(sr, (int)nreq);
	if (err)
		goto out;
	{
		int own = dri_mod(r + 1, p);
		dri_reduce_finish(buf + off[own] * es, off[own + 1] - off[own],
				  op->dtype, op->redop, p);
	}

	/* All-gather: step s sends block r + 1 - s; a piece received at step
	 * s is forwarded at step s + 1. */
	for (size_t j = 0; j < np; j++) {
		piece(off, pe, dri_mod(r + 1, p), j, &st, &n);
		err = dri_isend(&sr[j], &op->id, right, buf + st * es, n * es);
		if (err)
			goto out;
	}
	for (int s = 0; s < steps; s++)
		for (size_t j = 0; j < np; j++) {
			size_t k = (size_t)s * np + j;
			err = dri_waitall(&ag[k], 1);
			if (err)
				goto out;
			if (s + 1 == steps)
				continue;
			piece(off, pe, dri_mod(r - s, p), j, &st, &n);
			err = dri_isend(&sr[k + np], &op->id, right,
					buf + st * es, n * es);
			if (err)
				goto out;
		}
	err = dri_waitall(sr, (int)nreq);
out:
	if (err)
		dri_abandon(err);
	dri_scratch_put(tmp);
	free(off);
	free(rr);
	free(sr);
	free(ag);
	return err;
}

/* Pieces in the element range of blocks [b, b + nb): at least one, so
 * that both sides of an exchange post the same messages even when the
 * range is empty. */
static size_t range_pieces(const size_t *off, int b, int nb, size_t pe)
{
	size_t len = off[b + nb] - off[b];

	return len ? (len + pe - 1) / pe : 1;
}

/* Length of piece j of a range of len elements. */
static size_t piece_len(size_t len, size_t j, size_t pe)
{
	size_t s = j * pe;

	return s >= len ? 0 : (len - s < pe ? len - s : pe);
}

/* Posts the receives of pieces of blocks [b, b + nb) from peer into dst
 * (element 0 of the range at dst); *k counts the requests. */
static dr_err post_range_recvs(const dri_op *op, int peer, const size_t *off,
			       int b, int nb, size_t pe, char *dst,
			       dri_req *reqs, size_t *k)
{
	size_t es = dr_dtype_size(op->dtype), len = off[b + nb] - off[b];
	size_t n = range_pieces(off, b, nb, pe);
	dr_err err = DR_OK;

	for (size_t j = 0; j < n && !err; j++)
		err = dri_irecv(&reqs[(*k)++], &op->id, peer, dst + j * pe * es,
				piece_len(len, j, pe) * es);
	return err;
}

static dr_err post_range_sends(const dri_op *op, int peer, const size_t *off,
			       int b, int nb, size_t pe, dri_req *reqs,
			       size_t *k)
{
	size_t es = dr_dtype_size(op->dtype), len = off[b + nb] - off[b];
	size_t n = range_pieces(off, b, nb, pe);
	char *src = (char *)op->buf + off[b] * es;
	dr_err err = DR_OK;

	for (size_t j = 0; j < n && !err; j++)
		err = dri_isend(&reqs[(*k)++], &op->id, peer, src + j * pe * es,
				piece_len(len, j, pe) * es);
	return err;
}

/* Rabenseifner's all_reduce for p a power of two: reduce-scatter by
 * recursive halving (step d: exchange with r ^ d the half of the current
 * blocks the other keeps), then all-gather by recursive doubling.  The
 * same bytes as the ring but lg p pairwise steps instead of p - 1 steps
 * around the ring: when ranks outnumber cores, a pair can finish a step
 * while the others wait for a core, instead of the whole ring waiting for
 * its slowest member at every step. */
dr_err dri_all_reduce_halving(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	size_t es = dr_dtype_size(op->dtype), pe = RING_PIECE / es;
	size_t nrr = 0, nrs = 0, nar = 0, nas = 0, tlen = 0, kr, ks, t;
	char *buf = op->buf, *tmp;
	size_t *off;
	dri_req *rr = NULL, *rs = NULL, *ar = NULL, *as = NULL;
	dr_err err = DR_ENOMEM;

	if (!pe)
		pe = 1;
	off = malloc((size_t)(p + 1) * sizeof(*off));
	if (!off)
		return dri_fail(DR_ENOMEM, "out of memory");
	for (int i = 0; i <= p; i++)
		off[i] = dri_block_off(op->count, p, i);
	for (int d = p >> 1; d >= 1; d >>= 1) {
		int keep = dri_rh_keep(r, d);
		nrr += range_pieces(off, keep, d, pe);
		nrs += range_pieces(off, dri_rh_keep(r ^ d, d), d, pe);
		tlen += off[keep + d] - off[keep];
		nar += range_pieces(off, dri_rd_start(r ^ d, d), d, pe);
		nas += range_pieces(off, dri_rd_start(r, d), d, pe);
	}
	tmp = dri_scratch_get(tlen * es);
	rr = malloc(nrr * sizeof(*rr));
	rs = malloc(nrs * sizeof(*rs));
	ar = malloc(nar * sizeof(*ar));
	as = malloc(nas * sizeof(*as));
	if (!tmp || !rr || !rs || !ar || !as)
		goto out;

	/* Every receive first, in the order each partner sends: its
	 * reduce-scatter piece, then its all-gather pieces (which land in
	 * buf only after this rank's own contribution to them has left). */
	kr = t = 0;
	for (int d = p >> 1; d >= 1; d >>= 1) {
		int keep = dri_rh_keep(r, d);
		err = post_range_recvs(op, dri_peer(g, r ^ d), off, keep, d, pe,
				       tmp + t * es, rr, &kr);
		if (err)
			goto out;
		t += off[keep + d] - off[keep];
	}
	kr = 0;
	for (int d = 1; d < p; d <<= 1) {
		int from = dri_rd_start(r ^ d, d);
		err = post_range_recvs(op, dri_peer(g, r ^ d), off, from, d, pe,
				       buf + off[from] * es, ar, &kr);
		if (err)
			goto out;
	}

	kr = ks = t = 0;
	for (int d = p >> 1; d >= 1; d >>= 1) {
		int keep = dri_rh_keep(r, d), partner = dri_peer(g, r ^ d);
		size_t k0 = ks, len = off[keep + d] - off[keep];
		size_t n = range_pieces(off, keep, d, pe);
		err = post_range_sends(op, partner, off, dri_rh_keep(r ^ d, d), d,
				       pe, rs, &ks);
		for (size_t j = 0; j < n && !err; j++, kr++) {
			err = dri_waitall(&rr[kr], 1);
			if (!err)
				err = dri_reduce(buf + (off[keep] + j * pe) * es,
						 tmp + (t + j * pe) * es,
						 piece_len(len, j, pe), op->dtype,
						 op->redop);
		}
		if (!err)
			err = dri_waitall(&rs[k0], (int)(ks - k0));
		if (err)
			goto out;
		t += len;
	}
	dri_reduce_finish(buf + off[r] * es, off[r + 1] - off[r], op->dtype,
			  op->redop, p);

	kr = ks = 0;
	for (int d = 1; d < p; d <<= 1) {
		int from = dri_rd_start(r ^ d, d), partner = dri_peer(g, r ^ d);
		size_t k0 = ks, r0 = kr;
		err = post_range_sends(op, partner, off, dri_rd_start(r, d), d, pe,
				       as, &ks);
		kr += range_pieces(off, from, d, pe);
		if (!err)
			err = dri_waitall(&ar[r0], (int)(kr - r0));
		if (!err)
			err = dri_waitall(&as[k0], (int)(ks - k0));
		if (err)
			goto out;
	}
	err = DR_OK;
out:
	if (err)
		dri_abandon(err);
	dri_scratch_put(tmp);
	free(off);
	free(rr);
	free(rs);
	free(ar);
	free(as);
	return err;
}
