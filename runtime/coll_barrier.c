/*
 * coll_barrier.c - dr_barrier: dissemination over the group.
 *
 * Round k (distance 1, 2, 4 ... < p): send an empty message to r + d and
 * wait for the one from r - d.  After ceil(lg p) rounds every rank has
 * heard, directly or not, from every other, whatever p is; no rank is a
 * hot spot, and each round costs one message latency.
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
