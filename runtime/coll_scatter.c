/*
 * coll_scatter.c - dr_scatter: piece i of the root's sendbuf goes to group
 * rank i.
 *
 * The mirror of gather: small messages go down a binomial tree (the root
 * lays its pieces out in relative-rank order once, so that every subtree is
 * one contiguous message); large ones go directly from the root's buffer,
 * every send posted at once.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "copy.h"

/* Largest number of children a binomial tree node can have. */
#define MAX_CHILDREN 32

dr_err dri_scatter_tree(const dri_op *op, int root, size_t blk)
{
	const dr_group *g = op->group;
	int p = g->size, vr = dri_mod(g->rank - root, p), nreq = 0;
	int span = vr ? dri_binom_subtree(vr, dri_binom_limit(vr, p), p) : p;
	dri_req reqs[MAX_CHILDREN];
	char *tmp = NULL;
	dr_err err = DR_ENOMEM;

	if (span == 1) /* a leaf receives its piece where it belongs */
		return dri_recv(&op->id,
				dri_peer(g, dri_mod(dri_binom_parent(vr) + root, p)),
				op->buf, blk);
	tmp = dri_scratch_get((size_t)span * blk);
	if (!tmp)
		goto out;
	if (vr) {
		err = dri_recv(&op->id,
			       dri_peer(g, dri_mod(dri_binom_parent(vr) + root, p)),
			       tmp, (size_t)span * blk);
		if (err)
			goto out;
	} else {
		const char *in = op->sendbuf;
		dri_copy(tmp, in + (size_t)root * blk,
			 (size_t)(p - root) * blk);
		dri_copy(tmp + (size_t)(p - root) * blk, in,
			 (size_t)root * blk);
	}
	err = DR_OK;
	for (int m = 1; m < dri_binom_limit(vr, p) && vr + m < p && !err; m <<= 1) {
		int child = vr + m;

		err = dri_isend(&reqs[nreq], &op->id,
				dri_peer(g, dri_mod(child + root, p)),
				tmp + (size_t)m * blk,
				(size_t)dri_binom_subtree(child, m, p) * blk);
		if (!err)
			nreq++;
	}
	err = dri_coll_wait(reqs, nreq, err);
	if (!err)
		dri_copy(op->buf, tmp, blk);
out:
	dri_scratch_put(tmp);
	return err;
}

dr_err dri_scatter_direct(const dri_op *op, int root, size_t blk)
{
	return dri_rooted_direct(op, root, blk, 0);
}
