/*
 * p2p.c - point-to-point messages: dr_send, dr_recv, dr_isend, dr_irecv.
 *
 * These post transport requests directly instead of going through the
 * group's ordered queue of collectives: an irecv posted before the matching
 * isend on both ranks must not wait for anything, and p2p carries no
 * sequence number (messages of one pair and tag arrive in the order sent).
 * The asynchronous forms are driven by the progress thread.
 *
 * Host memory only: the transport reads and writes the buffer with the
 * CPU, and staging through pinned memory (as the collectives do) would
 * need a completion step for isend/irecv that nothing here has; a CUDA
 * pointer is refused with DR_ENOTSUP before anything is posted.
 */
#include <string.h>

#include "coll.h"
#include "ctl.h"
#include "cuda_driver.h"

/* Checks the arguments common to all four calls and fills the id. */
static dr_err p2p_prepare(const char *call, const void *buf, size_t count,
			  dr_dtype dtype, int peer, int tag, dr_group *group,
			  int any_ok, dri_msg_id *id, size_t *len)
{
	dr_group *g;
	dr_err err = dri_coll_check(call, group, &g, dtype, -1);

	if (err)
		return err;
	if (g->rank < 0)
		return dri_fail(DR_ENOTMEMBER, "%s: rank %d is not a member of "
				"the group", call, dri_world_rank());
	if (!(any_ok && peer == DR_ANY_SOURCE)) {
		if (peer == dri_world_rank())
			return dri_fail(DR_EINVAL, "%s: rank %d cannot send "
					"to itself", call, peer);
		if (dri_group_index(g, peer) < 0)
			return dri_fail(DR_EINVAL, "%s: rank %d is not in the "
					"group (world size %d)", call, peer,
					dri_world_size());
	}
	if (tag < 0)
		return dri_fail(DR_EINVAL, "%s: tag %d is negative", call, tag);
	err = dri_coll_check_buf(call, buf, count, 1, dtype, "buf");
	if (err)
		return err;
	/* The transport reads and writes buf with the CPU. */
	if (count && dri_cuda_ptr_device(buf) >= 0)
		return dri_fail(DR_ENOTSUP, "%s: point-to-point on CUDA device "
				"memory is not supported; stage through host "
				"memory", call);
	err = dri_transport_check();
	if (err)
		return err;
	memset(id, 0, sizeof(*id));
	id->group_id = g->id;
	id->coll = DRI_P2P;
	id->count = count;
	id->dtype = dtype;
	id->op = -1;
	id->root = -1;
	id->tag = tag;
	*len = count * dr_dtype_size(dtype);
	return DR_OK;
}

dr_err dr_send(const void *buf, size_t count, dr_dtype dtype, int dst,
	       int tag, dr_group *group)
{
	dri_msg_id id;
	size_t len;
	dr_err err = p2p_prepare("dr_send", buf, count, dtype, dst, tag, group,
				 0, &id, &len);

	if (err)
		return err;
	dri_ctl_begin(&id, dst, 1);
	err = dri_send(&id, dst, buf, len);
	dri_ctl_end(err);
	return err;
}

dr_err dr_recv(void *buf, size_t count, dr_dtype dtype, int src, int tag,
	       dr_group *group, int *out_src)
{
	dri_msg_id id;
	dri_req r;
	size_t len;
	dr_err err = p2p_prepare("dr_recv", buf, count, dtype, src, tag, group,
				 1, &id, &len);

	if (err)
		return err;
	dri_ctl_begin(&id, src, 0);
	err = dri_irecv(&r, &id, src, buf, len);
	if (!err)
		err = dri_waitall(&r, 1);
	dri_ctl_end(err);
	if (!err && out_src)
		*out_src = r.source;
	return err;
}

static dr_err p2p_async(int is_send, const char *call, void *buf,
			size_t count, dr_dtype dtype, int peer, int tag,
			dr_group *group, dr_work **work)
{
	dri_msg_id id;
	size_t len;
	dr_work *w;
	dr_err err;

	if (!work)
		return dri_fail(DR_EINVAL, "%s: work is NULL", call);
	*work = NULL;
	err = p2p_prepare(call, buf, count, dtype, peer, tag, group, !is_send,
			  &id, &len);
	if (err)
		return err;
	w = dri_work_p2p_new();
	if (!w)
		return DR_ENOMEM;
	err = is_send ? dri_isend(dri_work_req(w), &id, peer, buf, len)
		      : dri_irecv(dri_work_req(w), &id, peer, buf, len);
	if (err) {
		dri_work_req(w)->complete = 1; /* never posted: nothing to wait for */
		dr_work_free(w);
		return err;
	}
	dri_work_p2p_start(w);
	*work = w;
	return DR_OK;
}

dr_err dr_isend(const void *buf, size_t count, dr_dtype dtype, int dst,
		int tag, dr_group *group, dr_work **work)
{
	return p2p_async(1, "dr_isend", (void *)buf, count, dtype, dst, tag,
			 group, work);
}

dr_err dr_irecv(void *buf, size_t count, dr_dtype dtype, int src, int tag,
		dr_group *group, dr_work **work)
{
	return p2p_async(0, "dr_irecv", buf, count, dtype, src, tag, group,
			 work);
}
