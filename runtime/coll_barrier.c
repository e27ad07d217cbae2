/*
 * coll_barrier.c - dr_barrier as messages: dissemination, or a tree on
 * many ranks.
 *
 * Dissemination (dri_barrier_dissemination): round k (distance 1, 2,
 * 4 ... < p), send an empty message to r + d and wait for the one from
 * r - d.  After ceil(lg p) rounds every rank has heard, directly or not,
 * from every other, whatever p is; no rank is a hot spot, and each round
 * costs one message latency.
 *
 * Tree (dri_barrier_tree): every rank's arrival goes up a binomial tree
 * to rank 0 and the release comes down it: 2 lg p rounds, but 2 (p - 1)
 * messages instead of p lg p.  On many ranks that is the cost that
 * counts: each message wakes a process, and where ranks outnumber the
 * CPUs (the usual case at these sizes on one host) a wake-up is a
 * context switch, tens to hundreds of microseconds (docs/benchmarks.md,
 * "Many ranks over TCP").  coll_select.c picks it from
 * DRI_COLL_MANY_RANKS ranks.
 *
 * When every rank of the world shares this host's segment, the world's
 * barrier goes through flags there instead (dri_transport_barrier).
 *
 * With device ids the devices come first (cuda_stage.c): the listed
 * streams as they were at the call, or with dr_cuda_barrier_device the
 * whole devices.
 */
#include <string.h>

#include "coll.h"
#include "cuda_stage.h"

dr_err dri_barrier_dissemination(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	dr_err err;

	for (int d = 1; d < p; d <<= 1) {
		err = dri_sendrecv(&op->id, dri_peer(g, dri_mod(r + d, p)), NULL, 0,
				   dri_peer(g, dri_mod(r - d, p)), NULL, 0);
		if (err)
			return err;
	}
	return DR_OK;
}

dr_err dri_barrier_tree(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank, lim = dri_binom_limit(r, p), nc = 0;
	dri_req down[32];
	dr_err err = DR_OK;

	/* the arrivals of the children's subtrees, smallest first (the
	 * first to be complete); a later child's waits as a queued message */
	for (int m = 1; m < lim && r + m < p && !err; m <<= 1)
		err = dri_recv(&op->id, dri_peer(g, r + m), NULL, 0);
	if (!err && r) {
		int parent = dri_peer(g, dri_binom_parent(r));

		err = dri_sendrecv(&op->id, parent, NULL, 0, parent, NULL, 0);
	}
	/* the release, to every child at once (the largest subtree first) */
	for (int m = lim >> 1; m >= 1 && !err; m >>= 1)
		if (r + m < p && !(err = dri_isend(&down[nc], &op->id,
						     dri_peer(g, r + m), NULL, 0)))
			nc++;
	return dri_coll_wait(down, nc, err);
}
