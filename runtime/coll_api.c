/*
 * coll_api.c - the collectives' entry points (dr_barrier, dr_all_reduce,
 * ... distrun.h): each checks its arguments against its row of
 * coll.h's table (dri_args_check), tries the quick path where its row
 * in coll_select.c allows one, fills the dri_op and submits it, to run
 * now or on the group's progress thread (group.c), through
 * dri_coll_run's choice of algorithm.
 *
 * The layers of the collectives, top first: these entry points;
 * coll_select.c, which chooses; the algorithms, one file per collective
 * (coll_allreduce.c ...), the segment's (coll_shm*.c) and the two levels'
 * (coll_hier.c); coll_common.c under them all.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "cuda_stage.h"

/* ------------------------------------------------ barrier and dr_cuda_barrier_device */

static dr_err barrier_run(dri_op *op)
{
	dr_err err;

	/* Device work first: the barrier's promise covers it. */
	if ((err = dri_cuda_barrier_wait(op)))
		return err;
	return dri_coll_run(op);
}

/* dr_barrier and dr_cuda_barrier_device: the same barrier, after the
 * listed devices' streams (marked at submission) or the devices whole. */
static dr_err barrier_submit(dri_entry e, dr_group *group, dr_work **work,
			     const int *device_ids, int n_device_ids,
			     int whole_device)
{
	dri_args a;
	dri_op op;
	dr_group *g;
	dr_err err;

	/* Blocking, of the world, no devices: most often at once through
	 * the segment's flags. */
	if (e == DRI_E_BARRIER && !work && !n_device_ids &&
	    (!group || group == dri_world()) &&
	    dri_coll_quick(DRI_BARRIER, NULL, 0, (dr_dtype)-1, DR_SUM, -1, &err))
		return err;
	a = (dri_args){ .group = group, .device_ids = device_ids,
			.n_device_ids = n_device_ids, .work = work };
	err = dri_args_check(e, &a, &g);
	if (err)
		return err;
	memset(&op, 0, sizeof(op));
	dri_coll_op(&op, barrier_run, DRI_BARRIER, g, NULL, NULL, 0,
		    (dr_dtype)-1, -1, -1);
	if (n_device_ids) {
		/* Fail here, on this rank alone, not in the background
		 * where the peers would wait for us until the timeout. */
		err = dri_cuda_barrier_op(&op, dri_entry_name(e), device_ids,
					  n_device_ids, whole_device);
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

/* ------------------------------------------------ all_reduce */

dr_err dr_all_reduce(void *buf, size_t count, dr_dtype dtype, dr_op redop,
		     dr_group *group, dr_work **work)
{
	dri_args a = { .group = group, .dtype = dtype, .op = (int)redop,
			.buf1 = buf, .count = count, .work = work };
	dri_op op;
	dr_group *g;
	dr_err err = dri_args_check(DRI_E_ALL_REDUCE, &a, &g);

	if (err)
		return err;
	if (!work && g == dri_world() &&
	    dri_coll_quick(DRI_ALL_REDUCE, buf, count, dtype, redop, -1, &err))
		return err;
	memset(&op, 0, sizeof(op));
	dri_coll_op(&op, dri_coll_run, DRI_ALL_REDUCE, g, NULL, buf, count,
		    dtype, (int)redop, -1);
	return dri_submit(&op, work);
}

/* ------------------------------------------------ broadcast */

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
	if (!work && g == dri_world() &&
	    dri_coll_quick(DRI_BROADCAST, buf, count, dtype, DR_SUM, src, &err))
		return err;
	memset(&op, 0, sizeof(op));
	dri_coll_op(&op, dri_coll_run, DRI_BROADCAST, g, NULL, buf, count,
		    dtype, -1, src);
	return dri_submit(&op, work);
}

/* ------------------------------------------------ reduce */

dr_err dr_reduce(void *buf, size_t count, dr_dtype dtype, dr_op redop,
		 int dst, dr_group *group, dr_work **work)
{
	dri_args a = { .group = group, .dtype = dtype, .op = (int)redop,
			.root = dst, .buf1 = buf, .count = count, .work = work };
	dri_op op = { 0 };
	dr_group *g;
	dr_err err = dri_args_check(DRI_E_REDUCE, &a, &g);

	if (err)
		return err;
	if (!work && g == dri_world() &&
	    dri_coll_quick(DRI_REDUCE, buf, count, dtype, redop, dst, &err))
		return err;
	dri_coll_op(&op, dri_coll_run, DRI_REDUCE, g, NULL, buf, count, dtype,
		    (int)redop, dst);
	return dri_submit(&op, work);
}

/* ------------------------------------------------ all_gather and gather */

/* The checks and dri_op of both calls; root is ignored for all_gather. */
static dr_err gather_submit(dri_coll coll, const void *sendbuf,
			    void *recvbuf, size_t count, dr_dtype dtype,
			    int root, dr_group *group, dr_work **work)
{
	dri_args a = { .group = group, .dtype = dtype, .root = root,
			.buf1 = sendbuf, .buf2 = recvbuf, .count = count,
			.work = work };
	dri_op op = { 0 };
	dr_group *g;
	dr_err err = dri_args_check(coll == DRI_ALL_GATHER ? DRI_E_ALL_GATHER :
				    DRI_E_GATHER, &a, &g);

	if (err)
		return err;
	dri_coll_op(&op, dri_coll_run, coll, g, sendbuf, recvbuf, count, dtype, -1, root);
	return dri_submit(&op, work);
}

dr_err dr_all_gather(const void *sendbuf, void *recvbuf, size_t count,
		     dr_dtype dtype, dr_group *group, dr_work **work)
{
	return gather_submit(DRI_ALL_GATHER, sendbuf, recvbuf, count, dtype,
			     -1, group, work);
}

dr_err dr_gather(const void *sendbuf, void *recvbuf, size_t count,
		 dr_dtype dtype, int dst, dr_group *group, dr_work **work)
{
	return gather_submit(DRI_GATHER, sendbuf, recvbuf, count, dtype, dst,
			     group, work);
}

/* ------------------------------------------------ scatter */

dr_err dr_scatter(const void *sendbuf, void *recvbuf, size_t count,
		  dr_dtype dtype, int src, dr_group *group, dr_work **work)
{
	dri_args a = { .group = group, .dtype = dtype, .root = src,
			.buf1 = sendbuf, .buf2 = recvbuf, .count = count,
			.work = work };
	dri_op op = { 0 };
	dr_group *g;
	dr_err err = dri_args_check(DRI_E_SCATTER, &a, &g);

	if (err)
		return err;
	dri_coll_op(&op, dri_coll_run, DRI_SCATTER, g, sendbuf, recvbuf, count,
		    dtype, -1, src);
	return dri_submit(&op, work);
}

/* ------------------------------------------------ reduce_scatter */

dr_err dr_reduce_scatter(const void *sendbuf, void *recvbuf, size_t count,
			 dr_dtype dtype, dr_op redop, dr_group *group,
			 dr_work **work)
{
	dri_args a = { .group = group, .dtype = dtype, .op = (int)redop,
			.buf1 = sendbuf, .buf2 = recvbuf, .count = count,
			.work = work };
	dri_op op = { 0 };
	dr_group *g;
	dr_err err = dri_args_check(DRI_E_REDUCE_SCATTER, &a, &g);

	if (err)
		return err;
	dri_coll_op(&op, dri_coll_run, DRI_REDUCE_SCATTER, g, sendbuf,
		    recvbuf, count, dtype, (int)redop, -1);
	return dri_submit(&op, work);
}

/* ------------------------------------------------ all_to_all and all_to_all_v */

static dr_err all_to_all_submit(dri_entry e, const void *sendbuf,
				const size_t *send_counts, void *recvbuf,
				const size_t *recv_counts, size_t count,
				dr_dtype dtype, dr_group *group, dr_work **work)
{
	dri_args a = { .group = group, .dtype = dtype, .buf1 = sendbuf,
			.buf2 = recvbuf, .count = count,
			.send_counts = send_counts, .recv_counts = recv_counts,
			.work = work };
	dri_op op = { 0 };
	dr_group *g;
	dr_err err = dri_args_check(e, &a, &g);

	if (err)
		return err;
	if (send_counts) {
		op.counts = malloc(2 * (size_t)g->size * sizeof(*op.counts));
		if (!op.counts)
			return dri_fail(DR_ENOMEM, "%s: out of memory",
					dri_entry_name(e));
		memcpy(op.counts, send_counts, (size_t)g->size * sizeof(size_t));
		memcpy(op.counts + g->size, recv_counts,
		       (size_t)g->size * sizeof(size_t));
	}
	dri_coll_op(&op, dri_coll_run,
		    send_counts ? DRI_ALL_TO_ALL_V : DRI_ALL_TO_ALL, g, sendbuf,
		    recvbuf, count, dtype, -1, -1);
	return dri_submit(&op, work);
}

dr_err dr_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
		     dr_dtype dtype, dr_group *group, dr_work **work)
{
	return all_to_all_submit(DRI_E_ALL_TO_ALL, sendbuf, NULL, recvbuf, NULL,
				 count, dtype, group, work);
}

dr_err dr_all_to_all_v(const void *sendbuf, const size_t *send_counts,
		       void *recvbuf, const size_t *recv_counts,
		       dr_dtype dtype, dr_group *group, dr_work **work)
{
	return all_to_all_submit(DRI_E_ALL_TO_ALL_V, sendbuf, send_counts,
				 recvbuf, recv_counts, 0, dtype, group, work);
}

/* ------------------------------------------------ monitored_barrier */

dr_err dr_monitored_barrier(dr_group *group, int64_t timeout_ms,
			    int wait_all_ranks)
{
	dri_args a = { .group = group };
	dri_op op = { 0 };
	dr_group *g;
	dr_err err = dri_args_check(DRI_E_MONITORED_BARRIER, &a, &g);

	if (err)
		return err;
	dri_coll_op(&op, dri_coll_run, DRI_MONITORED_BARRIER, g, NULL, NULL,
		    0, (dr_dtype)-1, -1, -1);
	op.count = wait_all_ranks != 0; /* not part of the identity */
	op.timeout_ms = timeout_ms > 0 ? timeout_ms : dri_timeout_ms();
	return dri_submit(&op, NULL);
}
