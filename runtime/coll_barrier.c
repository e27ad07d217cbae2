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
#include "coll_shm.h"
#include "coll_hier.h"

static dr_err barrier_flat(dri_op *op)
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

static dr_err barrier_run(dri_op *op)
{
	dr_err err;

	/* Device work first: the barrier's promise covers it. */
	if ((err = dri_cuda_barrier_wait(op)))
		return err;
	/* All on one host: flags in the segment, no messages (coll_shm.c). */
	if (dri_shm_coll(op, &err))
		return err;
	if (dri_hier_wanted(op))
		return dri_hier_barrier(op, barrier_flat);
	return barrier_flat(op);
}

/* dr_barrier and dr_cuda_barrier_device: the same barrier, after the
 * listed devices' streams (marked at submission) or the devices whole. */
static dr_err barrier_submit(dri_entry e, dr_group *group, dr_work **work,
			     const int *device_ids, int n_device_ids,
			     int whole_device)
{
	dri_args a = { .group = group, .device_ids = device_ids,
			.n_device_ids = n_device_ids, .work = work };
	const char *call = dri_entry_name(e);
	dri_op op;
	dr_group *g;
	dr_err err;

	/* Blocking, of the world, no devices: most often at once through
	 * the segment's flags. */
	if (e == DRI_E_BARRIER && !work && !n_device_ids &&
	    (!group || group == dri_world()) &&
	    dri_shm_quick(DRI_BARRIER, NULL, 0, (dr_dtype)-1, DR_SUM, &err))
		return err;
	err = dri_args_check(e, &a, &g);
	if (err)
		return err;
	memset(&op, 0, sizeof(op));
	dri_coll_op(&op, barrier_run, DRI_BARRIER, g, NULL, NULL, 0,
		    (dr_dtype)-1, -1, -1);
	if (n_device_ids) {
		/* Fail here, on this rank alone, not in the background
		 * where the peers would wait for us until the timeout. */
		err = dri_cuda_barrier_op(&op, call, device_ids, n_device_ids,
					  whole_device);
		if (err)
			return err;
	}
	return dri_submit(&op, work);
}

dr_err dr_barrier(dr_group *group, dr_work **work, const int *device_ids,
		  int n_device_ids)
{
	return barrier_submit(DRI_E_BARRIER, group, work, device_ids,
			      n_device_ids, 0);
}

dr_err dr_cuda_barrier_device(dr_group *group, dr_work **work,
			      const int *device_ids, int n_device_ids)
{
	return barrier_submit(DRI_E_CUDA_BARRIER_DEVICE, group, work,
			      device_ids, n_device_ids, 1);
}
