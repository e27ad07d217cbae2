/*
 * coll_broadcast.c - dr_broadcast: binomial tree from the root, pipelined
 * in pieces when large.
 *
 * Relative rank vr = (r - root) mod p receives from its parent (vr with
 * its lowest set bit cleared) and sends to children vr + m, largest
 * subtree first.  A large buffer goes in pieces of BCAST_PIECE bytes, and
 * each piece is forwarded as soon as it has arrived, so the tree's levels
 * work at once instead of one after another: about lg p + pieces steps
 * instead of lg p * pieces.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "coll_shm.h"
#include "coll_hier.h"

#define BCAST_PIECE ((size_t)512 << 10)

dr_err dri_broadcast_flat(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, root = dri_group_index(g, op->root);
	int vr = dri_mod(g->rank - root, p), lim = dri_binom_limit(vr, p);
	size_t bytes = op->count * dr_dtype_size(op->dtype);
	size_t np = bytes ? (bytes + BCAST_PIECE - 1) / BCAST_PIECE : 1;
	int child[32], nc = 0;
	char *buf = op->buf;
	dri_req *rr = NULL, *sr = NULL;
	dr_err err = DR_ENOMEM;

	if (p == 1)
		return DR_OK;
	if (dri_shm_coll(op, &err)) /* all on one host: coll_shm.c */
		return err;
	for (int m = lim >> 1; m >= 1; m >>= 1)
		if (vr + m < p)
			child[nc++] = dri_peer(g, dri_mod(vr + m + root, p));
	rr = malloc(np * sizeof(*rr));
	sr = malloc((nc ? (size_t)nc : 1) * np * sizeof(*sr));
	if (!rr || !sr)
		goto out;
	if (vr) {
		int parent = dri_peer(g, dri_mod(dri_binom_parent(vr) + root, p));
		for (size_t j = 0; j < np; j++) {
			size_t st = j * BCAST_PIECE;
			size_t n = bytes - st < BCAST_PIECE ? bytes - st : BCAST_PIECE;
			err = dri_irecv(&rr[j], &op->id, parent, buf + st, n);
			if (err)
				goto out;
		}
	}
	err = DR_OK;
	for (size_t j = 0; j < np; j++) {
		size_t st = j * BCAST_PIECE;
		size_t n = bytes - st < BCAST_PIECE ? bytes - st : BCAST_PIECE;
		if (vr) {
			err = dri_waitall(&rr[j], 1);
			if (err)
				goto out;
		}
		for (int c = 0; c < nc; c++) {
			err = dri_isend(&sr[j * nc + c], &op->id, child[c],
					buf + st, n);
			if (err)
				goto out;
		}
	}
	if (nc)
		err = dri_waitall(sr, (int)(np * nc));
out:
	free(rr);
	free(sr);
	return err;
}

static dr_err broadcast_run(dri_op *op)
{
	if (dri_hier_wanted(op))
		return dri_hier_broadcast(op, dri_broadcast_flat);
	return dri_broadcast_flat(op);
}

dr_err dr_broadcast(void *buf, size_t count, dr_dtype dtype, int src,
		    dr_group *group, dr_work **work)
{
	dri_args a = { .group = group, .dtype = dtype, .root = src,
			.buf1 = buf, .count = count, .work = work };
	dri_op op;
	dr_group *g;
	dr_err err = dri_args_check(DRI_E_BROADCAST, &a, &g);

	if (err)
		return err;
	memset(&op, 0, sizeof(op));
	dri_coll_op(&op, broadcast_run, DRI_BROADCAST, g, NULL, buf, count,
		    dtype, -1, src);
	return dri_submit(&op, work);
}
