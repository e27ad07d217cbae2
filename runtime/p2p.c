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

/* Checks the arguments of call e (dri_args_check) and fills the id. */
static dr_err p2p_prepare(dri_entry e, const void *buf, size_t count,
			  dr_dtype dtype, int peer, int tag, dr_group *group,
			  dr_work **work, dri_msg_id *id, size_t *len)
{
	dri_args a = { .group = group, .dtype = dtype, .peer = peer,
			.tag = tag, .buf1 = buf, .count = count, .work = work };
	const char *call = dri_entry_name(e);
	dr_group *g;
	dr_err err = dri_args_check(e, &a, &g);

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
	dr_err err = p2p_prepare(DRI_E_SEND, buf, count, dtype, dst, tag,
				 group, NULL, &id, &len);

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
	dr_err err = p2p_prepare(DRI_E_RECV, buf, count, dtype, src, tag,
				 group, NULL, &id, &len);

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

static dr_err p2p_async(int is_send, void *buf, size_t count,
			dr_dtype dtype, int peer, int tag, dr_group *group,
			dr_work **work)
{
	dri_msg_id id;
	size_t len;
	dr_work *w;
	dr_err err;

	err = p2p_prepare(is_send ? DRI_E_ISEND : DRI_E_IRECV, buf, count,
			  dtype, peer, tag, group, work, &id, &len);
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
	return p2p_async(1, (void *)buf, count, dtype, dst, tag, group, work);
}

dr_err dr_irecv(void *buf, size_t count, dr_dtype dtype, int src, int tag,
		dr_group *group, dr_work **work)
{
	return p2p_async(0, buf, count, dtype, src, tag, group, work);
}
