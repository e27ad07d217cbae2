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

static const struct {
	const char *name;
	unsigned args;
	const char *root;
	int buf1, buf2;
} entries[DRI_E_COUNT_] = {
#define DRI_XX_ENTRY(id, name, args, root, b1, b2) \
	[DRI_E_##id] = { name, args, root, b1, b2 },
	DRI_ENTRY_MAP(DRI_XX_ENTRY)
#undef DRI_XX_ENTRY
};

const char *dri_entry_name(dri_entry e)
{
	return (unsigned)e < DRI_E_COUNT_ ? entries[e].name : "?";
}

/* No buffer is larger than this: offsets and sizes computed from it
 * (2 x bytes, bytes + a header) cannot wrap either. */
#define BYTES_MAX (SIZE_MAX >> 4)

/* A buffer of count x mult elements of dtype (es bytes each) must have a
 * size that fits in memory without wrapping (a wrapped size would send or
 * reduce the wrong number of bytes), and may be NULL only when empty. */
static dr_err check_buf(const char *call, const void *buf, size_t count,
			size_t mult, size_t es, const char *what)
{
	if (mult && count > BYTES_MAX / es / mult)
		return dri_fail(DR_EINVAL, "%s: count %zu is too large (%s of "
				"%zu x %zu bytes would not fit in memory)", call,
				count, what, count, mult * es);
	if (!buf && count && mult)
		return dri_fail(DR_EINVAL, "%s: %s is NULL but holds %zu "
				"elements", call, what, count * mult);
	return DR_OK;
}

/* The count arrays of all_to_all_v; their sums in *sum1, *sum2. */
static dr_err check_counts(const char *call, const dri_args *a,
			   const dr_group *g, size_t es, size_t *sum1,
			   size_t *sum2)
{
	size_t lim = BYTES_MAX / es;

	if (!a->send_counts || !a->recv_counts)
		return dri_fail(DR_EINVAL, "%s: %s is NULL", call,
				a->send_counts ? "recv_counts" : "send_counts");
	*sum1 = *sum2 = 0;
	for (int i = 0; i < g->size; i++) {
		if (a->send_counts[i] > lim - *sum1 ||
		    a->recv_counts[i] > lim - *sum2)
			return dri_fail(DR_EINVAL, "%s: counts add up to more "
					"than memory (send_counts[%d] = %zu, "
					"recv_counts[%d] = %zu)", call, i,
					a->send_counts[i], i, a->recv_counts[i]);
		*sum1 += a->send_counts[i];
		*sum2 += a->recv_counts[i];
	}
	if (g->rank >= 0 && a->send_counts[g->rank] != a->recv_counts[g->rank])
		return dri_fail(DR_EINVAL, "%s: send_counts[%d] = %zu but "
				"recv_counts[%d] = %zu (this rank's piece to "
				"itself)", call, g->rank,
				a->send_counts[g->rank], g->rank,
				a->recv_counts[g->rank]);
	return DR_OK;
}

/* Buffer k (1 or 2) of call e, holding spec elements. */
static dr_err check_spec(dri_entry e, const dri_args *a, const dr_group *g,
			 int k, size_t es, size_t sum)
{
	const char *call = entries[e].name;
	int spec = k == 1 ? entries[e].buf1 : entries[e].buf2;
	const void *buf = k == 1 ? a->buf1 : a->buf2;
	const char *what = entries[e].buf2 == DRI_B_NONE ? "buf" :
			   k == 1 ? "sendbuf" : "recvbuf";

	switch (spec) {
	case DRI_B_ONE:
		return check_buf(call, buf, a->count, 1, es, what);
	case DRI_B_GROUP:
		return check_buf(call, buf, a->count, (size_t)g->size, es, what);
	case DRI_B_ROOT_GROUP:
		return check_buf(call, a->root == dri_world_rank() ? buf : "",
				 a->count, (size_t)g->size, es, what);
	case DRI_B_COUNTS:
		return check_buf(call, buf, sum, 1, es, what);
	default:
		return DR_OK;
	}
}

/* The peer and tag of a point-to-point call. */
static dr_err check_peer(dri_entry e, const dri_args *a, const dr_group *g)
{
	const char *call = entries[e].name;
	unsigned f = entries[e].args;

	if ((f & DRI_A_MEMBER) && g->rank < 0)
		return dri_fail(DR_ENOTMEMBER, "%s: rank %d is not a member of "
				"the group", call, dri_world_rank());
	if ((f & DRI_A_PEER) && !((f & DRI_A_ANY) && a->peer == DR_ANY_SOURCE)) {
		if (a->peer == dri_world_rank())
			return dri_fail(DR_EINVAL, "%s: rank %d cannot send "
					"to itself", call, a->peer);
		if (dri_group_index(g, a->peer) < 0)
			return dri_fail(DR_EINVAL, "%s: rank %d is not in the "
					"group (world size %d)", call, a->peer,
					dri_world_size());
	}
	if ((f & DRI_A_TAG) && a->tag < 0)
		return dri_fail(DR_EINVAL, "%s: tag %d is negative", call, a->tag);
	return DR_OK;
}

dr_err dri_args_check(dri_entry e, const dri_args *a, dr_group **out)
{
	const char *call;
	unsigned f;
	size_t es = 1, sum1 = 0, sum2 = 0;
	dr_group *g;
	dr_err err;

	if ((unsigned)e >= DRI_E_COUNT_)
		return dri_fail(DR_EINVAL, "internal: entry %d", (int)e);
	call = entries[e].name;
	f = entries[e].args;
	if (a->work)
		*a->work = NULL;
	if ((f & DRI_A_WORK) && !a->work)
		return dri_fail(DR_EINVAL, "%s: work is NULL", call);
	if ((err = dri_coll_group(call, a->group, &g)))
		return err;
	if ((err = check_peer(e, a, g)))
		return err;
	if (f & DRI_A_DTYPE) {
		if ((unsigned)a->dtype >= DR_DTYPE_COUNT_)
			return dri_fail(DR_EINVAL, "%s: invalid dtype %d", call,
					(int)a->dtype);
		es = dr_dtype_size(a->dtype);
	}
	if (f & DRI_A_OP) {
		/* As an int: an enum holds -7 or INT_MIN as well. */
		if (a->op < 0 || a->op >= DR_OP_COUNT_)
			return dri_fail(DR_EINVAL, "%s: invalid op %d", call,
					a->op);
		err = dri_reduce_check(a->dtype, (dr_op)a->op);
		if (err)
			return dri_fail(err, "%s: op %s does not apply to %s",
					call, dr_op_name((dr_op)a->op),
					dr_dtype_name(a->dtype));
	}
	if (entries[e].root && dri_group_index(g, a->root) < 0)
		return dri_fail(DR_EINVAL, "%s: %s %d is not a rank of the "
				"group (size %d)", call, entries[e].root,
				a->root, g->size);
	if ((f & DRI_A_COUNTS) &&
	    (err = check_counts(call, a, g, es, &sum1, &sum2)))
		return err;
	if ((err = check_spec(e, a, g, 1, es, sum1)) ||
	    (err = check_spec(e, a, g, 2, es, sum2)))
		return err;
	if ((f & DRI_A_DEVICES) &&
	    (a->n_device_ids < ((f & DRI_A_DEVICE1) ? 1 : 0) ||
	     (a->n_device_ids > 0 && !a->device_ids)))
		return dri_fail(DR_EINVAL, "%s: %d device ids at %p%s", call,
				a->n_device_ids, (const void *)a->device_ids,
				(f & DRI_A_DEVICE1) ? ": it needs at least one" :
				"");
	*out = g;
	return DR_OK;
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
	reqs = dri_scratch_get((size_t)p * sizeof(*reqs));
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
	dri_scratch_put(reqs);
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

void dri_scratch_drop(void)
{
	pthread_mutex_lock(&scratch_mu);
	while (scratch_free) {
		union scratch_hdr *b = scratch_free;
		scratch_free = b->h.next;
		free(b);
	}
	scratch_bytes = 0;
	scratch_n = 0;
	pthread_mutex_unlock(&scratch_mu);
}
