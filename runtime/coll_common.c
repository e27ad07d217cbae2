/*
 * coll_common.c - argument checks shared by the public entry points of the
 * collectives in coll_*.c, and their scratch memory.
 *
 * Each entry point checks its arguments before anything is sent, so that a
 * bad call fails on the calling rank alone with a message naming the call
 * and the argument, and its peers never see a half-started collective.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "cuda_driver.h"
#include "cuda_stage.h"

int dri_group_index(const dr_group *g, int world_rank)
{
	if (!g->ranks)
		return world_rank >= 0 && world_rank < g->size ? world_rank : -1;
	for (int i = 0; i < g->size; i++)
		if (g->ranks[i] == world_rank)
			return i;
	return -1;
}

dr_err dri_coll_group(const char *call, dr_group *group, dr_group **out)
{
	if (!dri_world())
		return dri_fail(DR_ENOINIT, "%s: the default process group has "
				"not been initialized", call);
	/* A handle kept across dr_destroy_process_group (and a new init):
	 * group.c emptied it. */
	if (group && !group->priv)
		return dri_fail(DR_EINVAL, "%s: the group was destroyed with "
				"the process group", call);
	*out = group ? group : dri_world();
	return DR_OK;
}

dr_err dri_coll_check(const char *call, dr_group *group, dr_group **out,
		      dr_dtype dtype, int op)
{
	dr_err err = dri_coll_group(call, group, out);

	if (err)
		return err;
	if ((unsigned)dtype >= DR_DTYPE_COUNT_)
		return dri_fail(DR_EINVAL, "%s: invalid dtype %d", call,
				(int)dtype);
	if (op < 0)
		return DR_OK;
	if (op >= DR_OP_COUNT_)
		return dri_fail(DR_EINVAL, "%s: invalid op %d", call, op);
	err = dri_reduce_check(dtype, (dr_op)op);
	if (err)
		return dri_fail(err, "%s: op %s does not apply to %s", call,
				dr_op_name((dr_op)op), dr_dtype_name(dtype));
	return DR_OK;
}

dr_err dri_coll_check_root(const char *call, const dr_group *g, int root,
			   const char *what)
{
	if (dri_group_index(g, root) < 0)
		return dri_fail(DR_EINVAL, "%s: %s %d is not a rank of the "
				"group (size %d)", call, what, root, g->size);
	return DR_OK;
}

/* No buffer is larger than this: offsets and sizes computed from it
 * (2 x bytes, bytes + a header) cannot wrap either. */
#define BYTES_MAX (SIZE_MAX >> 4)

dr_err dri_coll_check_buf(const char *call, const void *buf, size_t count,
			  size_t mult, dr_dtype dtype, const char *what)
{
	size_t es = (unsigned)dtype < DR_DTYPE_COUNT_ ? dr_dtype_size(dtype) : 1;

	if (mult && count > BYTES_MAX / es / mult)
		return dri_fail(DR_EINVAL, "%s: count %zu is too large (%s of "
				"%zu x %zu bytes would not fit in memory)", call,
				count, what, count, mult * es);
	if (!buf && count && mult)
		return dri_fail(DR_EINVAL, "%s: %s is NULL but holds %zu "
				"elements", call, what, count * mult);
	return DR_OK;
}

void *dri_scratch(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		dri_fail(DR_ENOMEM, "out of memory for %zu bytes of scratch", n);
	return p;
}


dr_err dri_coll_wait(dri_req *reqs, int n, dr_err err)
{
	dr_err werr = n ? dri_waitall(reqs, n) : DR_OK;
	return err ? err : werr;
}

/* The device of the buffers this rank uses in the call, -1 for host
 * memory.  Both are asked: a root's gather may have its sendbuf on a
 * device and its recvbuf on the host, and taking the host path for it
 * would read device memory.  When they differ, the staged call's start
 * refuses it (dri_cuda_check_buffers) before anything is sent. */
static int coll_device(dri_coll coll, const dr_group *g, const void *sendbuf,
		       const void *buf, int root)
{
	int is_root = root >= 0 && g->rank >= 0 && dri_peer(g, g->rank) == root;
	int d = -1;

	/* A buffer the rank does not use may be anything, NULL included. */
	if (buf && !(coll == DRI_GATHER && !is_root))
		d = dri_cuda_ptr_device(buf);
	if (d < 0 && sendbuf && sendbuf != buf &&
	    !(coll == DRI_SCATTER && !is_root))
		d = dri_cuda_ptr_device(sendbuf);
	return d;
}

void dri_coll_op(dri_op *op, dr_err (*run)(dri_op *), dri_coll coll,
		 dr_group *g, const void *sendbuf, void *buf, size_t count,
		 dr_dtype dtype, int redop, int root)
{
	op->run = run;
	op->id.coll = coll;
	op->id.count = count;
	op->id.dtype = (int32_t)dtype;
	op->id.op = redop;
	op->id.root = root;
	op->group = g;
	op->sendbuf = dri_or_empty(sendbuf);
	op->buf = dri_or_empty(buf);
	op->count = count;
	op->dtype = dtype;
	op->redop = redop < 0 ? DR_SUM : (dr_op)redop;
	op->root = root;
	op->device = coll_device(coll, g, sendbuf, buf, root);
	if (op->device >= 0)
		dri_cuda_stage_op(op);
}

dr_err dri_rooted_run(dri_op *op, dri_rooted_fn tree, dri_rooted_fn direct)
{
	const dr_group *g = op->group;
	int root = dri_group_index(g, op->root);
	size_t blk = op->count * dr_dtype_size(op->dtype);

	if (g->size == 1) {
		memmove(op->buf, op->sendbuf, blk);
		return DR_OK;
	}
	if (blk * (size_t)g->size <= DRI_COLL_SMALL_BYTES)
		return tree(op, root, blk);
	return direct(op, root, blk);
}

dr_err dri_rooted_direct(const dri_op *op, int root, size_t blk, int gather)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank, nreq = 0;
	char *all = gather ? op->buf : (char *)op->sendbuf;
	dri_req *reqs;
	dr_err err = DR_OK;

	if (r != root)
		return gather ? dri_send(&op->id, dri_peer(g, root), op->sendbuf, blk)
			      : dri_recv(&op->id, dri_peer(g, root), op->buf, blk);
	reqs = dri_scratch((size_t)p * sizeof(*reqs));
	if (!reqs)
		return DR_ENOMEM;
	for (int i = 0; i < p && !err; i++) {
		char *piece = all + (size_t)i * blk;

		if (i == r)
			continue;
		err = gather ? dri_irecv(&reqs[nreq], &op->id, dri_peer(g, i),
					 piece, blk)
			     : dri_isend(&reqs[nreq], &op->id, dri_peer(g, i),
					 piece, blk);
		if (!err)
			nreq++;
	}
	err = dri_coll_wait(reqs, nreq, err);
	/* The root's own piece last: in place, it may be another's slot. */
	if (!err)
		memmove(gather ? all + (size_t)r * blk : op->buf,
			gather ? op->sendbuf : all + (size_t)r * blk, blk);
	free(reqs);
	return err;
}

/* A cached block: its capacity lives in a header in front of the data,
 * padded so that the data keeps malloc's alignment. */
union scratch_hdr {
	struct {
		size_t cap;
		union scratch_hdr *next;
	} h;
	max_align_t align;
};

#define SCRATCH_KEEP 8 /* blocks */

static pthread_mutex_t scratch_mu = PTHREAD_MUTEX_INITIALIZER;
static union scratch_hdr *scratch_free;
static size_t scratch_bytes;
static int scratch_n;

void *dri_scratch_get(size_t n)
{
	union scratch_hdr **pp, **best = NULL, *b;

	pthread_mutex_lock(&scratch_mu);
	/* Best fit, and not a block much larger than asked: a small call must
	 * not take the block the next large one needs. */
	for (pp = &scratch_free; *pp; pp = &(*pp)->h.next)
		if ((*pp)->h.cap >= n && (*pp)->h.cap / 2 <= n + (32 << 10) &&
		    (!best || (*pp)->h.cap < (*best)->h.cap))
			best = pp;
	if (best) {
		b = *best;
		*best = b->h.next;
		scratch_bytes -= b->h.cap;
		scratch_n--;
		pthread_mutex_unlock(&scratch_mu);
		return b + 1;
	}
	pthread_mutex_unlock(&scratch_mu);
	if (n > SIZE_MAX - sizeof(*b)) {
		dri_fail(DR_ENOMEM, "out of memory for %zu bytes of scratch", n);
		return NULL;
	}
	b = malloc(sizeof(*b) + n);
	if (!b) {
		dri_fail(DR_ENOMEM, "out of memory for %zu bytes of scratch", n);
		return NULL;
	}
	b->h.cap = n;
	return b + 1;
}

void dri_scratch_put(void *p)
{
	union scratch_hdr *b = p ? (union scratch_hdr *)p - 1 : NULL;

	if (!b)
		return;
	pthread_mutex_lock(&scratch_mu);
	/* Keep it unless that would pass the limits; then drop the smallest
	 * blocks first, since the large ones are the costly ones to fault
	 * in again. */
	while (scratch_free && (scratch_n >= SCRATCH_KEEP ||
				scratch_bytes + b->h.cap > DRI_SCRATCH_CACHE)) {
		union scratch_hdr **pp, **min = &scratch_free, *victim;
		for (pp = &scratch_free; *pp; pp = &(*pp)->h.next)
			if ((*pp)->h.cap < (*min)->h.cap)
				min = pp;
		if ((*min)->h.cap > b->h.cap)
			break;
		victim = *min;
		*min = victim->h.next;
		scratch_bytes -= victim->h.cap;
		scratch_n--;
		free(victim);
	}
	if (scratch_n < SCRATCH_KEEP &&
	    scratch_bytes + b->h.cap <= DRI_SCRATCH_CACHE) {
		b->h.next = scratch_free;
		scratch_free = b;
		scratch_bytes += b->h.cap;
		scratch_n++;
		b = NULL;
	}
	pthread_mutex_unlock(&scratch_mu);
	free(b);
}
