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

#define BCAST_PIECE ((size_t)512 << 10)

dr_err dri_broadcast_binomial(dri_op *op)
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
