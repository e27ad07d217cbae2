/*
 * cuda_stage.c - collectives on CUDA device buffers, and dr_barrier's
 * device_ids: what the collective layer does with the driver that
 * cuda_driver.c loads.
 *
 * The entry points hand a call on device buffers to dri_cuda_stage_op,
 * which makes it an op like any other for the scheduler: its start hook
 * runs on the caller's thread at submission, its run function on whatever
 * thread the scheduler picks, its release hook once after.
 *
 * Start (the caller's thread, in call order): checks that every buffer is
 * on the device, takes the stream selected for the device now (a later
 * dr_cuda_set_stream does not move the call) and records an event on it,
 * so that the call is ordered after exactly the work queued before it on
 * that stream, wherever it later runs.  The per-thread default stream
 * (cudaStreamPerThread, 0x2) names the calling thread's own stream in
 * every driver call, so it cannot be handed to another thread, and the
 * driver has no call that turns it into a handle that could: a blocking
 * call, which runs on the caller's thread to the end, takes it; an
 * asynchronous call, which completes on the group's progress thread, is
 * refused with DR_EINVAL.  The legacy default stream (0x1, NULL) is one
 * per context, the same on every thread, and needs nothing.
 *
 * Run: the host algorithm (op->host_run) on pinned copies, chunk by chunk,
 * with the copies on two side streams so that they overlap the network:
 *
 *   user stream ──start event──► d2h stream: copy chunk 0, 1, 2 ... in
 *   host thread:  wait chunk k's copy; host_run(chunk k) over TCP;
 *                 queue chunk k's copy back on the h2d stream; queue the
 *                 d2h copy of chunk k+NSLOT into the slot once k is back
 *   h2d stream ──done event──► user stream (later work sees the result)
 *
 * The done event is recorded after both side streams' last copies, on
 * success and on failure alike, and the next use of the same pinned slots
 * waits for it: a call that failed half-way (a timeout, a dead peer) may
 * leave copies in flight, and nothing frees or refills their memory before
 * they end.
 *
 * Element-wise collectives (all_reduce, broadcast, reduce) cut the buffer in
 * plain chunks.  all_gather and reduce_scatter cut every rank's block at
 * the same offsets, so chunk k is itself an all_gather (reduce_scatter) of
 * a smaller count: its blocks are copied to and from their places in the
 * user's buffers one block at a time.  That keeps every chunk a valid
 * collective of the host algorithm and the pinned memory bounded by
 * NSLOT chunks, whatever the buffer size.  The others (gather, scatter,
 * all_to_all, all_to_all_v) are staged whole, in one step.
 *
 * Every chunk run keeps the call's message identity (same sequence number;
 * messages between two ranks are matched in order) and passes the chunk's
 * count in op->count, so peers that cut the same way match chunk for chunk.
 * So every rank must pass the same kind of buffer (device or host) for a
 * call that is cut in more than one chunk; a rank that does not gets
 * DR_EMISMATCH from the transport (the lengths differ), not a hang.
 *
 * dr_barrier(device_ids) records an event on each listed device's stream
 * at submission and waits for them before the host barrier;
 * dr_cuda_barrier_device synchronises each listed device whole instead
 * (cuCtxSynchronize: every stream of its primary context).
 *
 * Environment: DISTRUN_CUDA_CHUNK fixes the staging chunk in bytes
 * (default: a quarter of the call, 4 to 16 MiB).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "cuda_driver.h"
#include "cuda_stage.h"

/* Pinned slots per stager: chunk k's network step runs while k+1 is being
 * copied in and k-1 copied out. */
#define NSLOT 3
/* The chunk: a quarter of the call's bytes, kept between these bounds.
 * Each chunk is a whole host collective, whose pipelined ring pays its
 * fill again (2(p-1) pieces) - fewer, larger chunks; the first chunk's
 * copy in and the last one's copy out are not overlapped - smaller
 * chunks.  DISTRUN_CUDA_CHUNK (bytes) fixes it instead. */
#define MIN_CHUNK_BYTES ((size_t)4 << 20)
#define MAX_CHUNK_BYTES ((size_t)16 << 20)

/* One set of side streams, events and pinned slots.  A collective takes
 * one from its device's pool for its whole run and gives it back: two
 * collectives in flight at once (two groups, two threads) never share
 * one, so neither waits for the other (which could deadlock across
 * ranks that ran them in another order). */
typedef struct stager {
	struct stager *next;
	unsigned gen;       /* the device's generation it was made in */
	CUstream d2h, h2d;
	CUevent ev_mark, ev_done, ev_d2h[NSLOT], ev_h2d[NSLOT];
	int used;           /* ev_done has been recorded */
	char *pinned;
	size_t pinned_size;
} stager;

/* What start captured on one device: the stream as selected at
 * submission, and an event recorded there then. */
typedef struct {
	int device;
	CUstream stream;
	CUevent ev;         /* NULL: none taken */
	unsigned gen;
} capture;

/* op->priv of a staged call (one capture) or a barrier (one per device). */
typedef struct {
	int whole_device;   /* barrier: cuCtxSynchronize instead of events */
	int n;
	capture c[];
} captures;

static struct {
	pthread_once_t once;
	pthread_mutex_t lock;
	stager **pool;      /* per device: free stagers */
	size_t chunk_bytes; /* DISTRUN_CUDA_CHUNK; 0: by size */
} stage_pool = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER };

static void stage_init(void)
{
	const char *cb = getenv("DISTRUN_CUDA_CHUNK");
	char *end = NULL;
	unsigned long long v = cb ? strtoull(cb, &end, 10) : 0;

	stage_pool.chunk_bytes = (cb && end != cb && !*end && v >= 4096) ? (size_t)v : 0;
	stage_pool.pool = calloc((size_t)dri_cu_ndev(), sizeof *stage_pool.pool);
}

/* CUDA usable and the staging state allocated. */
static dr_err stage_ready(void)
{
	if (!dri_cu_ready())
		return dri_cu_unavailable();
	pthread_once(&stage_pool.once, stage_init);
	if (!stage_pool.pool)
		return dri_fail(DR_ENOMEM, "out of memory for CUDA staging");
	return DR_OK;
}

/* The call's deadline (set when it started running), else timeout_ms's
 * from now. */
static int64_t call_deadline(const dri_op *op)
{
	return op->id.deadline ? op->id.deadline : dri_deadline(op->timeout_ms);
}

/* --------------------------------------------------------------- stagers */

/* Takes a stager from the pool of device (whose context is current) or
 * makes one.  Stagers of an older generation (a reset context) are
 * dropped: their streams are dead, and their pinned memory went with the
 * context. */
static dr_err stager_get(int device, stager **out)
{
	unsigned gen = dri_cu_generation(device);
	stager *s;
	CUresult r;
	const char *call;

	pthread_mutex_lock(&stage_pool.lock);
	while ((s = stage_pool.pool[device]) && s->gen != gen) {
		stage_pool.pool[device] = s->next;
		free(s);
	}
	if (s)
		stage_pool.pool[device] = s->next;
	pthread_mutex_unlock(&stage_pool.lock);
	if (s)
		goto out;

	s = calloc(1, sizeof *s);
	if (!s)
		return dri_fail(DR_ENOMEM, "out of memory for a CUDA stager");
	s->gen = gen;
	call = "cuStreamCreate";
	if ((r = dri_cu.StreamCreate(&s->d2h, CU_STREAM_NON_BLOCKING)) ||
	    (r = dri_cu.StreamCreate(&s->h2d, CU_STREAM_NON_BLOCKING)))
		goto fail;
	call = "cuEventCreate";
	if ((r = dri_cu.EventCreate(&s->ev_mark, CU_EVENT_DISABLE_TIMING)) ||
	    (r = dri_cu.EventCreate(&s->ev_done, CU_EVENT_DISABLE_TIMING)))
		goto fail;
	for (int i = 0; i < NSLOT; i++)
		if ((r = dri_cu.EventCreate(&s->ev_d2h[i], CU_EVENT_DISABLE_TIMING)) ||
		    (r = dri_cu.EventCreate(&s->ev_h2d[i], CU_EVENT_DISABLE_TIMING)))
			goto fail;
out:
	s->next = NULL;
	*out = s;
	return DR_OK;
fail:
	/* Streams and events are few and live for the process: a stager
	 * whose creation failed half-way keeps what it made. */
	free(s);
	if (dri_cu_dead(r))
		dri_cu_context_lost(device, gen);
	return dri_cu_fail(r, call, device);
}

static void stager_put(int device, stager *s)
{
	pthread_mutex_lock(&stage_pool.lock);
	s->next = stage_pool.pool[device];
	stage_pool.pool[device] = s;
	pthread_mutex_unlock(&stage_pool.lock);
}

/* Pinned memory of at least n bytes.  Growing frees the old block only
 * after the previous call's last copies (ev_done, recorded by every call,
 * failed ones too, after all of its copies) are done. */
static dr_err stager_reserve(stager *s, int device, size_t n, int64_t deadline)
{
	CUresult r;
	dr_err err;
	if (s->pinned_size >= n)
		return DR_OK;
	if (s->used && (err = dri_cu_wait_event(s->ev_done, device, deadline,
						"the previous staged copy")))
		return err;
	if (s->pinned)
		dri_cu.MemFreeHost(s->pinned);
	s->pinned = NULL;
	s->pinned_size = 0;
	r = dri_cu.MemHostAlloc((void **)&s->pinned, n, CU_MEMHOSTALLOC_PORTABLE);
	if (r != CUDA_SUCCESS) {
		s->pinned = NULL;
		return dri_cu_fail(r, "cuMemHostAlloc", device);
	}
	s->pinned_size = n;
	return DR_OK;
}

/* ------------------------------------------------ capture at submission */

/* Records an event on device's selected stream into c (the device's
 * context entered here). */
static dr_err capture_one(const char *call, int device, int async, capture *c)
{
	dr_err err;

	c->device = device;
	c->stream = dri_cu_user_stream(device);
	c->ev = NULL;
	if (async && c->stream == CU_STREAM_PER_THREAD)
		return dri_fail(DR_EINVAL, "%s: the stream selected for cuda:%d is "
				"cudaStreamPerThread, the calling thread's own "
				"stream, which another thread cannot name: an "
				"asynchronous call on device buffers needs a "
				"stream of its own (dr_cuda_set_stream) or a "
				"blocking call", call, device);
	if ((err = dri_cu_enter(device)))
		return err;
	err = dri_cu_record(device, c->stream, &c->ev, &c->gen);
	dri_cu_leave();
	return err;
}

static captures *captures_new(int n)
{
	captures *cp = calloc(1, sizeof *cp + (size_t)(n > 0 ? n : 1) * sizeof(capture));
	if (!cp)
		dri_fail(DR_ENOMEM, "out of memory");
	else
		cp->n = n;
	return cp;
}

static void captures_release(dri_op *op)
{
	captures *cp = op->priv;
	if (!cp)
		return;
	for (int i = 0; i < cp->n; i++)
		if (cp->c[i].ev)
			dri_cu_event_put(cp->c[i].device, cp->c[i].ev, cp->c[i].gen);
	free(cp);
	op->priv = NULL;
}

/* ----------------------------------------------------------------- staging */

/* How one collective maps onto staging: which layout, and how big. */
typedef struct {
	dri_op *op;
	stager *st;
	int device;
	CUstream user;
	size_t esz;        /* bytes per element */
	int n, r;          /* group size and rank */
	int is_root;       /* this rank is op->root */
	size_t chunk;      /* elements per chunk (per block for gather/rs) */
	size_t slot_bytes; /* pinned bytes per slot */
} staging;

/* Queues chunk (off, ck)'s copies between the user's buffers and slot:
 * in (device to host, on the d2h stream, then records ev_d2h[slot]) or
 * out (host to device, on the h2d stream, then records ev_h2d[slot]).  A
 * part the rank does not send or receive is not copied; the event is
 * recorded all the same, since the host waits for it before using the
 * slot (in) and the slot's next copy in waits for it (out). */
static CUresult stage(staging *g, size_t off, size_t ck, int slot, int in)
{
	dri_op *op = g->op;
	stager *s = g->st;
	size_t bytes = ck * g->esz, at = off * g->esz;
	char *p = s->pinned + (size_t)slot * g->slot_bytes;
	char *user = NULL;          /* the user's side of block 0 */
	size_t upitch = 0, spitch = 0;
	int nblocks = 1;
	CUresult r = CUDA_SUCCESS;

	switch (op->id.coll) {
	case DRI_ALL_REDUCE:
		user = (char *)op->buf + at;
		break;
	case DRI_BROADCAST:
		/* The root only sends, the others only receive. */
		if (g->is_root == in)
			user = (char *)op->buf + at;
		break;
	case DRI_REDUCE:
		/* Everyone sends; only the root receives. */
		if (in || g->is_root)
			user = (char *)op->buf + at;
		break;
	case DRI_ALL_GATHER:
		/* In: this rank's piece to its place among the n blocks of the
		 * slot; out: every block to its place in recvbuf. */
		if (in) {
			user = (char *)op->sendbuf + at;
			p += (size_t)g->r * bytes;
		} else {
			user = (char *)op->buf + at;
			upitch = op->count * g->esz;
			spitch = bytes;
			nblocks = g->n;
		}
		break;
	case DRI_REDUCE_SCATTER:
		/* In: the n blocks of sendbuf; out: the result after them. */
		if (in) {
			user = (char *)op->sendbuf + at;
			upitch = op->count * g->esz;
			spitch = bytes;
			nblocks = g->n;
		} else {
			user = (char *)op->buf + at;
			p += (size_t)g->n * bytes;
		}
		break;
	default:
		break;
	}
	for (int j = 0; user && j < nblocks && r == CUDA_SUCCESS; j++) {
		char *u = user + (size_t)j * upitch, *h = p + (size_t)j * spitch;
		r = in ? dri_cu.MemcpyAsync(dri_cu_ptr(h), dri_cu_ptr(u), bytes, s->d2h) :
			dri_cu.MemcpyAsync(dri_cu_ptr(u), dri_cu_ptr(h), bytes, s->h2d);
	}
	if (r != CUDA_SUCCESS)
		return r;
	return in ? dri_cu.EventRecord(s->ev_d2h[slot], s->d2h) :
		dri_cu.EventRecord(s->ev_h2d[slot], s->h2d);
}

/* The host algorithm on chunk (off, ck) held in slot. */
static dr_err run_chunk(staging *g, size_t ck, int slot)
{
	dri_op h = *g->op;
	char *p = g->st->pinned + (size_t)slot * g->slot_bytes;

	h.device = -1;
	h.count = ck;
	switch (h.id.coll) {
	case DRI_ALL_GATHER:
		h.sendbuf = p + (size_t)g->r * ck * g->esz;
		h.buf = p;
		break;
	case DRI_REDUCE_SCATTER:
		h.sendbuf = p;
		h.buf = p + (size_t)g->n * ck * g->esz;
		break;
	default:
		/* In place: sendbuf is the entry point's placeholder, kept. */
		h.buf = p;
		break;
	}
	return h.host_run(&h);
}

/* Elements in chunk k (the last one may be short). */
static size_t chunk_len(const staging *g, size_t k)
{
	size_t off = k * g->chunk;
	return g->op->count - off < g->chunk ? g->op->count - off : g->chunk;
}

static dr_err run_chunked(staging *g, int64_t deadline)
{
	dri_op *op = g->op;
	stager *s = g->st;
	size_t total = op->count;
	size_t nchunks = total ? (total + g->chunk - 1) / g->chunk : 1;
	size_t depth = nchunks < NSLOT ? nchunks : NSLOT;
	dr_err err = DR_OK;
	CUresult r;
	const char *call = "cuMemcpyAsync";

	for (size_t k = 0; k < depth; k++)
		if ((r = stage(g, k * g->chunk, chunk_len(g, k), (int)k, 1)))
			goto cuda_fail;
	for (size_t k = 0; k < nchunks; k++) {
		int slot = (int)(k % NSLOT);
		size_t ck = chunk_len(g, k);

		if ((err = dri_cu_wait_event(s->ev_d2h[slot], g->device, deadline,
					     "a device-to-host copy")))
			return err;
		if ((err = run_chunk(g, ck, slot)))
			return err;
		if ((r = stage(g, k * g->chunk, ck, slot, 0)))
			goto cuda_fail;
		if (k + NSLOT < nchunks) {
			call = "cuStreamWaitEvent";
			if ((r = dri_cu.StreamWaitEvent(s->d2h, s->ev_h2d[slot], 0)))
				goto cuda_fail;
			call = "cuMemcpyAsync";
			if ((r = stage(g, (k + NSLOT) * g->chunk,
				       chunk_len(g, k + NSLOT), slot, 1)))
				goto cuda_fail;
		}
	}
	return DR_OK;
cuda_fail:
	return dri_cu_fail(r, call, g->device);
}

/* Collectives staged whole: [send part | receive part] in one block. */
static dr_err run_whole(staging *g, int64_t deadline)
{
	dri_op *op = g->op;
	stager *s = g->st;
	dri_op h = *op;
	size_t sbytes = 0, rbytes = 0;
	size_t cnt = op->count * g->esz;
	dr_err err;
	CUresult r = CUDA_SUCCESS;

	switch (op->id.coll) {
	case DRI_GATHER:
		sbytes = cnt;
		rbytes = g->is_root ? cnt * (size_t)g->n : 0;
		break;
	case DRI_SCATTER:
		sbytes = g->is_root ? cnt * (size_t)g->n : 0;
		rbytes = cnt;
		break;
	case DRI_ALL_TO_ALL:
		sbytes = rbytes = cnt * (size_t)g->n;
		break;
	case DRI_ALL_TO_ALL_V:
		for (int j = 0; j < g->n; j++) {
			sbytes += op->counts[j] * g->esz;
			rbytes += op->counts[g->n + j] * g->esz;
		}
		break;
	default:
		return dri_fail(DR_ENOTSUP, "%s does not take CUDA device buffers",
				dri_coll_name((dri_coll)op->id.coll));
	}
	if ((err = stager_reserve(s, g->device, sbytes + rbytes + 1, deadline)))
		return err;
	/* Parts a rank does not use still point at valid (pinned) memory, as
	 * the entry points' placeholders do. */
	h.device = -1;
	h.sendbuf = s->pinned;
	h.buf = s->pinned + sbytes;
	if (sbytes && op->sendbuf)
		r = dri_cu.MemcpyAsync(dri_cu_ptr(s->pinned), dri_cu_ptr(op->sendbuf),
				       sbytes, s->d2h);
	if (r == CUDA_SUCCESS)
		r = dri_cu.EventRecord(s->ev_d2h[0], s->d2h);
	if (r != CUDA_SUCCESS)
		return dri_cu_fail(r, "cuMemcpyAsync", g->device);
	if ((err = dri_cu_wait_event(s->ev_d2h[0], g->device, deadline,
				     "a device-to-host copy")))
		return err;
	if ((err = h.host_run(&h)))
		return err;
	if (rbytes && op->buf)
		r = dri_cu.MemcpyAsync(dri_cu_ptr(op->buf), dri_cu_ptr(s->pinned + sbytes),
				       rbytes, s->h2d);
	if (r != CUDA_SUCCESS)
		return dri_cu_fail(r, "cuMemcpyAsync", g->device);
	return DR_OK;
}

/* Records ev_done after every copy of the call on both side streams and
 * orders the user's stream after it: on success later work sees the
 * result; on failure nothing reuses the slots, or touches the user's
 * buffers, while a copy of this call is still in flight. */
static CUresult stage_finish(staging *g)
{
	stager *s = g->st;
	CUresult r = dri_cu.EventRecord(s->ev_mark, s->d2h);
	if (r == CUDA_SUCCESS)
		r = dri_cu.StreamWaitEvent(s->h2d, s->ev_mark, 0);
	if (r == CUDA_SUCCESS)
		r = dri_cu.EventRecord(s->ev_done, s->h2d);
	if (r == CUDA_SUCCESS)
		s->used = 1;
	if (r == CUDA_SUCCESS)
		r = dri_cu.StreamWaitEvent(g->user, s->ev_done, 0);
	return r;
}

dr_err dri_cuda_check_buffers(const dri_op *op)
{
	const dr_group *grp = op->group ? op->group : dri_world();
	int self_root = grp && grp->rank >= 0 && op->root >= 0 &&
		(grp->ranks ? grp->ranks[grp->rank] : grp->rank) == op->root;
	const void *p[2] = { op->sendbuf, op->buf };
	const char *name[2] = { "sendbuf", "recvbuf" };
	int coll = (int)op->id.coll;
	int in_place = coll == DRI_ALL_REDUCE || coll == DRI_BROADCAST ||
		coll == DRI_REDUCE;

	for (int i = in_place ? 1 : 0; i < 2; i++) {
		/* NULL (a zero count) stands for no buffer at all. */
		if (!p[i] || p[i] == dri_or_empty(NULL))
			continue;
		/* Buffers a rank does not use may be anything. */
		if ((coll == DRI_GATHER && i == 1 && !self_root) ||
		    (coll == DRI_SCATTER && i == 0 && !self_root))
			continue;
		int d = dri_cuda_ptr_device(p[i]);
		char where[32] = "the host";
		if (d == op->device)
			continue;
		if (d >= 0)
			snprintf(where, sizeof where, "cuda:%d", d);
		return dri_fail(DR_EINVAL,
				"%s: %s is on %s but the other buffer is on cuda:%d; "
				"both must be on the same device",
				dri_coll_name((dri_coll)coll), name[i], where,
				op->device);
	}
	return DR_OK;
}

/* The start hook of a staged call. */
static dr_err staged_start(dri_op *op, int async)
{
	const char *call = dri_coll_name((dri_coll)op->id.coll);
	dr_err err;
	captures *cp;

	if ((err = stage_ready()))
		return err;
	if (op->device < 0 || op->device >= dri_cu_ndev())
		return dri_fail(DR_EINVAL, "%s: buffer on unknown CUDA device %d",
				call, op->device);
	if ((err = dri_cuda_check_buffers(op)))
		return err;
	if (!(cp = captures_new(1)))
		return DR_ENOMEM;
	op->priv = cp;
	return capture_one(call, op->device, async, &cp->c[0]);
}

/* The run function of a staged call. */
static dr_err staged_run(dri_op *op)
{
	captures *cp = op->priv;
	staging g;
	dr_err err;
	CUresult r;
	int64_t deadline;
	dr_group *grp = op->group ? op->group : dri_world();
	int coll = (int)op->id.coll;
	int chunked = coll == DRI_ALL_REDUCE || coll == DRI_BROADCAST ||
		coll == DRI_REDUCE || coll == DRI_ALL_GATHER ||
		coll == DRI_REDUCE_SCATTER;

	if (!cp || !cp->c[0].ev)
		return dri_fail(DR_EINVAL, "%s: a staged call that was not started",
				dri_coll_name((dri_coll)coll));
	memset(&g, 0, sizeof g);
	g.op = op;
	g.device = op->device;
	g.user = cp->c[0].stream;
	g.esz = dr_dtype_size(op->dtype);
	g.n = grp->size;
	g.r = grp->rank;
	/* The world's ranks table is NULL: the identity. */
	g.is_root = grp->rank >= 0 && op->root >= 0 &&
		(grp->ranks ? grp->ranks[grp->rank] : grp->rank) == op->root;
	if (!g.esz)
		return dri_fail(DR_EINVAL, "invalid dtype %d", (int)op->dtype);
	if (g.n <= 0 || g.r < 0)
		return dri_fail(DR_ENOTMEMBER, "this rank is not in the group");
	deadline = call_deadline(op);

	if ((err = dri_cu_enter(g.device)))
		return err;
	if ((err = stager_get(g.device, &g.st)))
		goto leave;

	/* Our copies after the user's work queued before the call, and after
	 * the previous use of this stager's slots. */
	r = dri_cu.StreamWaitEvent(g.st->d2h, cp->c[0].ev, 0);
	if (r == CUDA_SUCCESS && g.st->used)
		r = dri_cu.StreamWaitEvent(g.st->d2h, g.st->ev_done, 0);
	if (r != CUDA_SUCCESS) {
		err = dri_cu_fail(r, "cuStreamWaitEvent", g.device);
		goto put;
	}

	if (chunked) {
		size_t factor = coll == DRI_ALL_GATHER ? (size_t)g.n :
			coll == DRI_REDUCE_SCATTER ? (size_t)g.n + 1 : 1;
		size_t net = coll == DRI_REDUCE_SCATTER ? (size_t)g.n : factor;
		size_t cb = stage_pool.chunk_bytes;
		if (!cb) {
			cb = op->count * net * g.esz / 4;
			cb = cb < MIN_CHUNK_BYTES ? MIN_CHUNK_BYTES :
				cb > MAX_CHUNK_BYTES ? MAX_CHUNK_BYTES : cb;
		}
		g.chunk = cb / (net * g.esz);
		if (g.chunk == 0)
			g.chunk = 1;
		if (op->count && g.chunk > op->count)
			g.chunk = op->count;
		g.slot_bytes = g.chunk * factor * g.esz;
		/* Slots start on 256-byte boundaries, as the copy engines like. */
		g.slot_bytes = (g.slot_bytes + 255) & ~(size_t)255;
		err = stager_reserve(g.st, g.device, NSLOT * g.slot_bytes, deadline);
		if (!err)
			err = run_chunked(&g, deadline);
	} else {
		err = run_whole(&g, deadline);
	}
	r = stage_finish(&g);
	if (r != CUDA_SUCCESS && !err)
		err = dri_cu_fail(r, "cuStreamWaitEvent", g.device);
	if (r != CUDA_SUCCESS) {
		/* The slots' state is unknown: never reuse them. */
		if (dri_cu_dead(r))
			dri_cu_context_lost(g.device, g.st->gen);
		goto leave;
	}
put:
	stager_put(g.device, g.st);
leave:
	dri_cu_leave();
	return err;
}

void dri_cuda_stage_op(dri_op *op)
{
	op->host_run = op->run;
	op->run = staged_run;
	op->start = staged_start;
	op->release = captures_release;
}

/* --------------------------------------------------------------- barrier */

static dr_err barrier_start(dri_op *op, int async)
{
	captures *cp = op->priv;
	dr_err err = DR_OK;

	(void)async; /* only the host waits: any stream will do, 0x2 too */
	if (cp->whole_device)
		return DR_OK;
	for (int i = 0; i < cp->n && !err; i++)
		err = capture_one("dr_barrier", cp->c[i].device, 0, &cp->c[i]);
	return err;
}

dr_err dri_cuda_barrier_op(dri_op *op, const char *call, const int *device_ids,
			   int n, int whole_device)
{
	captures *cp;
	dr_err err;

	if (!dri_cu_ready()) {
		dri_cu_unavailable();
		return dri_fail(DR_ENOCUDA, "%s: device_ids given but %s", call,
				dr_last_error());
	}
	if ((err = stage_ready()))
		return err;
	for (int i = 0; i < n; i++)
		if (device_ids[i] < 0 || device_ids[i] >= dri_cu_ndev())
			return dri_fail(DR_EINVAL, "%s: device_ids[%d] = %d: out of "
					"range (%d CUDA device%s)", call, i,
					device_ids[i], dri_cu_ndev(),
					dri_cu_ndev() == 1 ? "" : "s");
	if (!(cp = captures_new(n)))
		return DR_ENOMEM;
	cp->whole_device = whole_device;
	for (int i = 0; i < n; i++)
		cp->c[i].device = device_ids[i];
	op->priv = cp;
	op->start = barrier_start;
	op->release = captures_release;
	return DR_OK;
}

dr_err dri_cuda_barrier_wait(dri_op *op)
{
	captures *cp = op->priv;
	int64_t deadline = call_deadline(op);
	dr_err err = DR_OK;

	if (!cp)
		return DR_OK;
	/* Every device was marked at submission: they drain in parallel. */
	for (int i = 0; i < cp->n && !err; i++) {
		capture *c = &cp->c[i];
		if (cp->whole_device)
			err = dri_cu_sync_context(c->device, deadline);
		else if (c->ev)
			err = dri_cu_wait_event(c->ev, c->device, deadline,
						"the device's stream");
	}
	return err;
}
