/*
 * coll_barrier.c - dr_barrier: dissemination over the group.
 *
 * Round k (distance 1, 2, 4 ... < p): send an empty message to r + d and
 * wait for the one from r - d.  After ceil(lg p) rounds every rank has
 * heard, directly or not, from every other, whatever p is; no rank is a
 * hot spot, and each round costs one message latency.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

static dr_err barrier_run(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	dr_err err;

	/* Device work first: the barrier's promise covers it. */
	if (op->n_device_ids) {
		err = dri_cuda_sync_devices(op->device_ids, op->n_device_ids);
		if (err)
			return err;
	}
	for (int d = 1; d < p; d <<= 1) {
		err = dri_sendrecv(&op->id, dri_peer(g, dri_mod(r + d, p)), NULL, 0,
				   dri_peer(g, dri_mod(r - d, p)), NULL, 0);
		if (err)
			return err;
	}
	return DR_OK;
}

dr_err dr_barrier(dr_group *group, dr_work **work, const int *device_ids,
		  int n_device_ids)
{
	dri_op op;
	dr_group *g;
	dr_err err;

	if (work)
		*work = NULL;
	err = dri_coll_check("dr_barrier", group, &g, DR_UINT8, -1);
	if (err)
		return err;
	if (n_device_ids < 0 || (n_device_ids > 0 && !device_ids))
		return dri_fail(DR_EINVAL, "dr_barrier: %d device ids at %p",
				n_device_ids, (const void *)device_ids);
	memset(&op, 0, sizeof(op));
	dri_coll_op(&op, barrier_run, DRI_BARRIER, g, NULL, NULL, 0,
		    (dr_dtype)-1, -1, -1);
	if (n_device_ids) {
		/* Fail here, on this rank alone, not in the background
		 * where the peers would wait for us until the timeout. */
		int ndev = dr_cuda_device_count();
		if (!ndev) {
			/* Without CUDA this only says why it is absent. */
			(void)dri_cuda_sync_devices(device_ids, n_device_ids);
			return dri_fail(DR_ENOCUDA, "dr_barrier: device_ids given "
					"but %s", dr_last_error());
		}
		for (int i = 0; i < n_device_ids; i++)
			if (device_ids[i] < 0 || device_ids[i] >= ndev)
				return dri_fail(DR_EINVAL, "dr_barrier: device_ids[%d] "
						"= %d: out of range (%d CUDA "
						"device%s)", i, device_ids[i],
						ndev, ndev == 1 ? "" : "s");
		op.device_ids = malloc((size_t)n_device_ids * sizeof(int));
		if (!op.device_ids)
			return dri_fail(DR_ENOMEM, "out of memory");
		memcpy(op.device_ids, device_ids, (size_t)n_device_ids * sizeof(int));
		op.n_device_ids = n_device_ids;
	}
	return dri_submit(&op, work);
}
