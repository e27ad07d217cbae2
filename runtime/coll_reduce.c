/*
 * coll_reduce.c - dr_reduce: the reduction of every rank's buffer lands on
 * one root; every other rank's buffer is left as it was (gloo reduces in
 * place on every rank; torch documents the others as undefined, we keep
 * them intact so that a caller can reuse its data).
 *
 * Small messages go up a binomial tree rooted at the root (ceil(lg p)
 * steps; each inner rank reduces its subtree into scratch memory).  Large
 * ones are reduce-scattered among all ranks and the blocks gathered
 * straight into the root's buffer, so that no rank sends or reduces more
 * than about twice the data, however large p.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "copy.h"

dr_err dri_reduce_tree(const dri_op *op, int root)
{
	const dr_group *g = op->group;
	int p = g->size, vr = dri_mod(g->rank - root, p);
	size_t es = dr_dtype_size(op->dtype), n = op->count * es;
	char *acc = vr ? dri_scratch_get(n) : op->buf;
	char *tmp = dri_scratch_get(n);
	dr_err err = DR_ENOMEM;

	if (!acc || !tmp)
		goto out;
	if (vr)
		dri_copy(acc, op->buf, n);
	for (int m = 1; m < dri_binom_limit(vr, p) && vr + m < p; m <<= 1) {
		int child = dri_mod(vr + m + root, p);

		err = dri_recv(&op->id, dri_peer(g, child), tmp, n);
		if (err)
			goto out;
		err = dri_reduce(acc, tmp, op->count, op->dtype, op->redop);
		if (err)
			goto out;
	}
	if (vr) {
		int parent = dri_mod(dri_binom_parent(vr) + root, p);
		err = dri_send(&op->id, dri_peer(g, parent), acc, n);
		if (err)
			goto out;
	}
	err = DR_OK;
out:
	if (vr)
		dri_scratch_put(acc);
	dri_scratch_put(tmp);
	return err;
}

dr_err dri_reduce_pieces(const dri_op *op, int root)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	size_t es = dr_dtype_size(op->dtype);
	size_t *off = dri_scratch_get((size_t)(p + 1) * sizeof(*off));
	dri_req *reqs = dri_scratch_get((size_t)p * sizeof(*reqs));
	char *mine = NULL, *buf = op->buf;
	int nreq = 0;
	dr_err err = DR_ENOMEM;

	if (!off || !reqs)
		goto out;
	for (int i = 0; i <= p; i++)
		off[i] = dri_block_off(op->count, p, i);
	mine = dri_scratch_get((off[r + 1] - off[r]) * es);
	if (!mine)
		goto out;
	err = dri_reduce_scatter_blocks(op, op->buf, off, mine);
	if (err)
		goto out;
	if (r != root) {
		err = dri_send(&op->id, dri_peer(g, root), mine,
			       (off[r + 1] - off[r]) * es);
		goto out;
	}
	/* The root's own input has been read by now: gather over it. */
	for (int i = 0; i < p; i++) {
		if (i == r)
			continue;
		err = dri_irecv(&reqs[nreq], &op->id, dri_peer(g, i),
				buf + off[i] * es, (off[i + 1] - off[i]) * es);
		if (err)
			break;
		nreq++;
	}
	err = dri_coll_wait(reqs, nreq, err);
	if (!err)
		dri_copy(buf + off[r] * es, mine, (off[r + 1] - off[r]) * es);
out:
	dri_scratch_put(mine);
	dri_scratch_put(reqs);
	dri_scratch_put(off);
	return err;
}
