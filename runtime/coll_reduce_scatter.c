/*
 * coll_reduce_scatter.c - dr_reduce_scatter, and the reduce-scatter step
 * that dr_reduce uses for large messages.
 *
 * A reduce-scatter moves (p-1)/p of the data through each rank, not the
 * 2(p-1)/p of an all_reduce: each rank receives only contributions to its
 * own block.  Small messages on a power-of-two group take recursive halving
 * (lg p steps, halving the data each time); otherwise pairwise exchange:
 * at step k rank r sends its input block r + k straight from the caller's
 * buffer to r + k and receives the contribution of r - k to its block, the
 * next step's receive already posted while this step's data is reduced.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "copy.h"

static dr_err rs_halving(const dri_op *op, const char *in, const size_t *off,
			 char *out)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	size_t es = dr_dtype_size(op->dtype);
	char *acc = dri_scratch_get(off[p] * es);
	char *tmp = dri_scratch_get(off[p] * es);
	dr_err err = DR_ENOMEM;

	if (!acc || !tmp)
		goto out;
	dri_copy(acc, in, off[p] * es);
	for (int d = p / 2; d >= 1; d /= 2) {
		int partner = r ^ d;
		int ks = dri_rh_keep(r, d), ss = dri_rh_keep(partner, d);
		size_t kn = off[ks + d] - off[ks], sn = off[ss + d] - off[ss];

		err = dri_sendrecv(&op->id, dri_peer(g, partner),
				   acc + off[ss] * es, sn * es,
				   dri_peer(g, partner), tmp, kn * es);
		if (err)
			goto out;
		err = dri_reduce(acc + off[ks] * es, tmp, kn, op->dtype,
				 op->redop);
		if (err)
			goto out;
	}
	dri_copy(out, acc + off[r] * es, (off[r + 1] - off[r]) * es);
	err = DR_OK;
out:
	dri_scratch_put(acc);
	dri_scratch_put(tmp);
	return err;
}

/* Posts pairwise step k: the receive of r - k's contribution to our block
 * into slot, and the send of our input block r + k. */
static dr_err rs_post(const dri_op *op, const char *in, const size_t *off,
		      int k, dri_req *two, char *slot)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank, to = dri_pair_to(r, k, p);
	size_t es = dr_dtype_size(op->dtype);
	dr_err err;

	err = dri_irecv(&two[1], &op->id, dri_peer(g, dri_pair_from(r, k, p)),
			slot, (off[r + 1] - off[r]) * es);
	if (!err)
		err = dri_isend(&two[0], &op->id, dri_peer(g, to),
				in + off[to] * es, (off[to + 1] - off[to]) * es);
	return err;
}

static dr_err rs_pairwise(const dri_op *op, const char *in, const size_t *off,
			  char *out)
{
	int p = op->group->size, r = op->group->rank;
	size_t es = dr_dtype_size(op->dtype);
	size_t mine = (off[r + 1] - off[r]) * es;
	char *tmp = dri_scratch_get(2 * mine);
	dri_req reqs[4];
	dr_err err = DR_ENOMEM;

	if (!tmp)
		goto out;
	err = rs_post(op, in, off, 1, &reqs[2], tmp + mine);
	if (err)
		goto out;
	/* our own contribution, while step 1's bytes travel */
	dri_copy(out, in + off[r] * es, mine);
	for (int k = 1; k < p; k++) {
		dri_req *cur = &reqs[(k % 2) * 2];
		char *slot = tmp + (size_t)(k % 2) * mine;

		err = dri_waitall(cur, 2);
		if (err)
			goto out;
		/* Post the next step before reducing this one, so that its
		 * bytes arrive while we add. */
		if (k + 1 < p) {
			err = rs_post(op, in, off, k + 1, &reqs[((k + 1) % 2) * 2],
				      tmp + (size_t)((k + 1) % 2) * mine);
			if (err)
				goto out;
		}
		err = dri_reduce(out, slot, mine / es, op->dtype, op->redop);
		if (err)
			goto out;
	}
	err = DR_OK;
out:
	dri_scratch_put(tmp);
	return err;
}

dr_err dri_reduce_scatter_blocks(const dri_op *op, const void *in,
				 const size_t *off, void *out)
{
	int p = op->group->size;
	size_t es = dr_dtype_size(op->dtype);

	if (p == 1) {
		dri_copy(out, in, off[1] * es);
		return DR_OK;
	}
	if (dri_is_pow2(p) && off[p] * es <= DRI_COLL_SMALL_BYTES)
		return rs_halving(op, in, off, out);
	return rs_pairwise(op, in, off, out);
}

dr_err dri_reduce_scatter_equal(dri_op *op)
{
	int p = op->group->size;
	size_t es = dr_dtype_size(op->dtype), n = op->count * es;
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	uintptr_t a = (uintptr_t)in, b = (uintptr_t)out;
	size_t *off;
	dr_err err = DR_ENOMEM;

	off = dri_scratch_get((size_t)(p + 1) * sizeof(*off));
	if (!off)
		goto out;
	for (int i = 0; i <= p; i++)
		off[i] = (size_t)i * op->count;
	/* recvbuf inside sendbuf (in place): reduce into scratch. */
	if (b < a + n * (size_t)p && a < b + n) {
		out = own = dri_scratch_get(n);
		if (!own)
			goto out;
	}
	err = dri_reduce_scatter_blocks(op, in, off, out);
	if (err)
		goto out;
	dri_reduce_finish(out, op->count, op->dtype, op->redop, p);
	if (own)
		dri_copy(op->buf, own, n);
out:
	dri_scratch_put(own);
	dri_scratch_put(off);
	return err;
}
