/*
 * fake_libcuda.c - a stand-in for the CUDA driver (libcuda.so.1) with the
 * functions runtime/cuda_driver.c and cuda_stage.c use, and those a test
 * program needs to play a CUDA program (contexts, resets, managed memory),
 * so that libdistrun's CUDA paths run on machines without a GPU.  make
 * builds it as build/fake/libcuda.so (soname libcuda.so.1):
 *
 *   DISTRUN_CUDA_LIB=build/fake/libcuda.so distrun -n 3 build/tests/cuda_colls
 *
 * It is as strict as the real driver where a real GPU would be forgiving by
 * luck, and stricter where luck would hide a missing wait:
 *   - calls that need a context fail with CUDA_ERROR_INVALID_CONTEXT when
 *     none is current; streams and events belong to the context they were
 *     made in (recording or copying on another: CUDA_ERROR_INVALID_HANDLE);
 *   - "device memory" lies at addresses the host cannot touch (a PROT_NONE
 *     reservation; the bytes live elsewhere), so a device pointer handed to
 *     host code crashes at once;
 *   - asynchronous work never runs by itself: a stream's copies happen only
 *     when something waits for them (an event query after it answered "not
 *     ready" FAKE_CUDA_QUERIES times, default 2; a stream waiting on an
 *     event; a synchronising call), never before FAKE_CUDA_DELAY_MS after
 *     they were queued, and not at all while a test holds them
 *     (fake_cuda_hold).  A missing event record or stream wait loses data
 *     deterministically instead of racing;
 *   - cuMemcpy is asynchronous where the real one is: device to device, and
 *     pageable host to device (the source is copied at once, the device is
 *     written later), on the legacy default stream, which is ordered with
 *     every blocking stream of its context both ways;
 *   - stream 0x2 (CU_STREAM_PER_THREAD) is the calling thread's own stream;
 *   - FAKE_CUDA_DEVICES devices (default 1), each with its primary context;
 *     cuDevicePrimaryCtxRetain is counted per device (fake_cuda_retains),
 *     cuPointerGetAttributes in all (fake_cuda_ptr_queries);
 *   - cuDevicePrimaryCtxReset (cudaDeviceReset) kills the context's
 *     streams, events and memory (CUDA_ERROR_CONTEXT_IS_DESTROYED after);
 *   - after fork every call fails (CUDA_ERROR_NOT_INITIALIZED);
 *   - managed memory (cuMemAllocManaged) is host memory that the pointer
 *     query reports as FAKE_CUDA_MANAGED_TYPE (1 host, the default, or 2
 *     device) with IS_MANAGED set; copies into it are as late as any;
 *   - FAKE_CUDA_PTR_NEEDS_CTX=1: the pointer query needs a current context.
 * Misuse that the real driver does not report but that is a bug all the
 * same is a violation: an asynchronous copy from or to pageable host
 * memory, cuMemFreeHost of memory a queued copy still uses, a synchronising
 * call that would wait forever.  Each is printed ("fake_libcuda: ...") and
 * counted (fake_cuda_violations); FAKE_CUDA_STRICT=1 aborts at the first.
 * Not a model of performance or of kernels.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define OK 0
#define E_INVALID_VALUE 1
#define E_OUT_OF_MEMORY 2
#define E_NOT_INITIALIZED 3
#define E_INVALID_CONTEXT 201
#define E_INVALID_HANDLE 400
#define E_NOT_READY 600
#define E_CONTEXT_IS_DESTROYED 709
#define LEGACY ((void *)0x1)
#define PER_THREAD ((void *)0x2)
#define DEVICE_SPAN ((size_t)8 << 30)
#define MAXDEV 8
#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu
#define SYNC_LIMIT_MS 60000

struct stream;

typedef struct {
	int is_wait;
	char *dst;            /* copy: translated addresses */
	const char *src;
	size_t n;
	char *owned;          /* a snapshot of pageable source, freed after */
	const void *host[2];  /* the user addresses, for cuMemFreeHost */
	struct stream *on;    /* wait: run this stream ... */
	size_t upto;          /* ... up to here first */
	long long ready_ms;   /* not before (FAKE_CUDA_DELAY_MS) */
} op;

typedef struct ctx {
	int dev;
	int active;
	unsigned gen;         /* bumped by a reset: older handles are dead */
	struct stream *legacy;
} ctx;

typedef struct stream {
	unsigned magic;
	ctx *c;
	unsigned gen;
	int nonblocking;
	op *ops;
	size_t n, cap, done;
} stream;

typedef struct {
	unsigned magic;
	ctx *c;
	unsigned gen;
	stream *s;            /* NULL until recorded */
	size_t upto;
	int queries;
} event;

typedef struct {
	char *dev;            /* address handed out */
	char *mem;            /* where the bytes are */
	size_t n;
	int device;
} alloc;

typedef struct {
	char *p;
	size_t n;
	int managed;          /* else pinned */
	int device;
} hostmem;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inited, forked, ndev = 1, strict, queries_needed = 2,
	   ptr_needs_ctx, managed_type = 1;
static long long delay_ms;
static int held;
static int violations;
static int retains[MAXDEV];
static ctx ctxs[MAXDEV];
static char *span;         /* reserved, never accessible */
static size_t span_used;
static alloc allocs[4096];
static int nallocs;
static hostmem hosts[512];
static int nhosts;
static stream *streams[1024]; /* every stream made, legacy and per-thread too */
static int nstreams;
/* Every event made: handles stay valid memory after a reset kills them
 * (the real driver frees its own; a program may still hold them). */
static event *events[8192];
static int nevents;

static __thread ctx *cur_stack[16];
static __thread int cur_n;
static __thread stream *ptds[MAXDEV];
static __thread unsigned ptds_gen[MAXDEV];

/* ------------------------------------------------------- test controls */

static void violation(const char *fmt, ...)
{
	va_list ap;
	char buf[256];
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	violations++;
	fprintf(stderr, "fake_libcuda: %s\n", buf);
	if (strict)
		abort();
}

/* Violations so far; how often device dev's primary context was retained;
 * hold (1) or release (0) every queued copy. */
int fake_cuda_violations(void) { return violations; }
int fake_cuda_retains(int dev)
{
	return dev >= 0 && dev < MAXDEV ? retains[dev] : -1;
}
void fake_cuda_hold(int on)
{
	pthread_mutex_lock(&mu);
	held = on;
	pthread_mutex_unlock(&mu);
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int env_int(const char *name, int dflt)
{
	const char *s = getenv(name);
	return s && *s ? atoi(s) : dflt;
}

static void on_fork_child(void) { forked = 1; }

__attribute__((constructor)) static void fake_setup(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

/* ----------------------------------------------------------- lookups */

static ctx *cur(void)
{
	return cur_n ? cur_stack[cur_n - 1] : NULL;
}

/* What a call that needs a live current context answers without one. */
static CUresult need_ctx(void)
{
	ctx *c = cur();
	if (forked)
		return E_NOT_INITIALIZED;
	if (!inited)
		return E_NOT_INITIALIZED;
	if (!c)
		return E_INVALID_CONTEXT;
	return c->active ? OK : E_CONTEXT_IS_DESTROYED;
}

static alloc *find_dev(const void *p)
{
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].mem && (const char *)p >= allocs[i].dev &&
		    (const char *)p < allocs[i].dev + allocs[i].n)
			return &allocs[i];
	return NULL;
}

static hostmem *find_host(const void *p)
{
	for (int i = 0; i < nhosts; i++)
		if ((const char *)p >= hosts[i].p &&
		    (const char *)p < hosts[i].p + hosts[i].n)
			return &hosts[i];
	return NULL;
}

static int in_span(const void *p)
{
	return span && (const char *)p >= span && (const char *)p < span + DEVICE_SPAN;
}

/* The bytes behind an address, device or host; NULL for a device address
 * outside every allocation. */
static char *translate(CUdeviceptr a, size_t n)
{
	char *p = (char *)(uintptr_t)a;
	if (in_span(p)) {
		alloc *al = find_dev(p);
		if (!al || p + n > al->dev + al->n)
			return NULL;
		return al->mem + (p - al->dev);
	}
	return p;
}

/* Device-like: device memory, or managed memory (written late like it). */
static int devlike(const void *p)
{
	hostmem *h;
	return in_span(p) || ((h = find_host(p)) && h->managed);
}

static stream *stream_new(ctx *c, int nonblocking)
{
	stream *s;
	if (nstreams == (int)(sizeof streams / sizeof streams[0]))
		return NULL;
	s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->magic = STREAM_MAGIC;
	s->c = c;
	s->gen = c->gen;
	s->nonblocking = nonblocking;
	streams[nstreams++] = s;
	return s;
}

/* The stream a handle names in context c (the current one): NULL or 0x1
 * its legacy stream, 0x2 this thread's own.  *r says why not. */
static stream *stream_of(void *h, ctx *c, CUresult *r)
{
	stream *s;
	int d = c->dev;
	*r = OK;
	if (!h || h == LEGACY)
		return c->legacy;
	if (h == PER_THREAD) {
		if (!ptds[d] || ptds_gen[d] != c->gen) {
			ptds[d] = stream_new(c, 0);
			ptds_gen[d] = c->gen;
		}
		if (!ptds[d])
			*r = E_OUT_OF_MEMORY;
		return ptds[d];
	}
	s = h;
	if (s->magic != STREAM_MAGIC) {
		*r = E_INVALID_HANDLE;
		return NULL;
	}
	if (s->gen != s->c->gen || !s->c->active) {
		*r = E_CONTEXT_IS_DESTROYED;
		return NULL;
	}
	if (s->c != c) {
		*r = E_INVALID_HANDLE;
		return NULL;
	}
	return s;
}

static event *event_of(void *h, CUresult *r)
{
	event *e = h;
	*r = OK;
	if (!e || e->magic != EVENT_MAGIC) {
		*r = E_INVALID_HANDLE;
		return NULL;
	}
	if (e->gen != e->c->gen || !e->c->active) {
		*r = E_CONTEXT_IS_DESTROYED;
		return NULL;
	}
	return e;
}

/* --------------------------------------------------------- execution */

static CUresult push_raw(stream *s, op o)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		op *ops = realloc(s->ops, cap * sizeof *ops);
		if (!ops)
			return E_OUT_OF_MEMORY;
		s->ops = ops;
		s->cap = cap;
	}
	o.ready_ms = now_ms() + delay_ms;
	s->ops[s->n++] = o;
	return OK;
}

/* Queues o on s with the legacy stream's implicit ordering: work on the
 * legacy stream waits for every blocking stream of its context, and work
 * on a blocking stream waits for the legacy stream. */
static CUresult push(stream *s, op o)
{
	CUresult r = OK;
	ctx *c = s->c;
	if (s == c->legacy) {
		for (int i = 0; i < nstreams && !r; i++) {
			stream *t = streams[i];
			if (t != s && t->c == c && t->gen == c->gen &&
			    !t->nonblocking && t->done < t->n)
				r = push_raw(s, (op){ .is_wait = 1, .on = t, .upto = t->n });
		}
	} else if (!s->nonblocking && c->legacy->done < c->legacy->n) {
		r = push_raw(s, (op){ .is_wait = 1, .on = c->legacy,
				      .upto = c->legacy->n });
	}
	return r ? r : push_raw(s, o);
}

/* Runs s up to op upto, as far as time and holds allow; 1 when there. */
static int run(stream *s, size_t upto)
{
	long long t = now_ms();
	/* (upto past the end: what was there was discarded by a reset) */
	while (s->done < upto && s->done < s->n) {
		op *o = &s->ops[s->done];
		if (held || o->ready_ms > t)
			return 0;
		if (o->is_wait) {
			if (!run(o->on, o->upto))
				return 0;
		} else if (o->dst) {
			memmove(o->dst, o->src, o->n);
		}
		free(o->owned);
		o->owned = NULL;
		s->done++;
	}
	return 1;
}

/* Waits (the lock dropped meanwhile) until s has run up to upto; a wait
 * that would never end is a violation. */
static void run_wait(stream *s, size_t upto, const char *call)
{
	long long start = now_ms();
	while (!run(s, upto)) {
		if (now_ms() - start > SYNC_LIMIT_MS) {
			violation("%s waited %d s for copies that never ran",
				  call, SYNC_LIMIT_MS / 1000);
			return;
		}
		pthread_mutex_unlock(&mu);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&mu);
	}
}

/* A synchronous call on the legacy stream: after all the work before it
 * there and, through push's ordering, on the blocking streams. */
static CUresult legacy_sync(ctx *c, const char *call)
{
	CUresult r = push(c->legacy, (op){ 0 });
	if (!r)
		run_wait(c->legacy, c->legacy->n, call);
	return r;
}

static void run_ctx(ctx *c, const char *call)
{
	for (int i = 0; i < nstreams; i++)
		if (streams[i]->c == c && streams[i]->gen == c->gen)
			run_wait(streams[i], streams[i]->n, call);
}

/* Drops what is queued on c's streams (a reset). */
static void discard_ctx(ctx *c)
{
	for (int i = 0; i < nstreams; i++) {
		stream *s = streams[i];
		if (s->c != c)
			continue;
		for (size_t k = s->done; k < s->n; k++)
			free(s->ops[k].owned);
		s->done = s->n = 0;
	}
}

/* ---------------------------------------------------- init, devices */

CUresult cuInit(unsigned flags)
{
	CUresult r = OK;
	(void)flags;
	if (forked)
		return E_NOT_INITIALIZED;
	pthread_mutex_lock(&mu);
	if (!inited) {
		void *p = mmap(NULL, DEVICE_SPAN, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		span = p == MAP_FAILED ? NULL : p;
		ndev = env_int("FAKE_CUDA_DEVICES", 1);
		if (ndev < 0 || ndev > MAXDEV)
			ndev = MAXDEV;
		strict = env_int("FAKE_CUDA_STRICT", 0);
		queries_needed = env_int("FAKE_CUDA_QUERIES", 2);
		delay_ms = env_int("FAKE_CUDA_DELAY_MS", 0);
		ptr_needs_ctx = env_int("FAKE_CUDA_PTR_NEEDS_CTX", 0);
		managed_type = env_int("FAKE_CUDA_MANAGED_TYPE", 1);
		for (int i = 0; i < ndev && span; i++) {
			ctxs[i].dev = i;
			ctxs[i].legacy = stream_new(&ctxs[i], 0);
			if (!ctxs[i].legacy)
				span = NULL;
		}
		inited = span != NULL;
		if (!inited)
			r = E_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

CUresult cuDeviceGetCount(int *n)
{
	if (forked || !inited)
		return E_NOT_INITIALIZED;
	*n = ndev;
	return OK;
}
CUresult cuDeviceGet(int *dev, int ordinal)
{
	if (forked || !inited)
		return E_NOT_INITIALIZED;
	*dev = ordinal;
	return ordinal >= 0 && ordinal < ndev ? OK : E_INVALID_VALUE;
}
CUresult cuGetErrorName(CUresult e, const char **s)
{
	switch (e) {
	case E_NOT_READY: *s = "CUDA_ERROR_NOT_READY"; break;
	case E_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case E_NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
	case E_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
	case E_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
	case E_CONTEXT_IS_DESTROYED: *s = "CUDA_ERROR_CONTEXT_IS_DESTROYED"; break;
	default: *s = "CUDA_ERROR_INVALID_VALUE"; break;
	}
	return OK;
}
CUresult cuGetErrorString(CUresult e, const char **s)
{
	(void)e;
	*s = "fake driver error";
	return OK;
}

/* ----------------------------------------------------------- contexts */

CUresult cuDevicePrimaryCtxRetain(void **c, int dev)
{
	if (forked || !inited)
		return E_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndev)
		return E_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	retains[dev]++;
	ctxs[dev].active = 1;
	*c = &ctxs[dev];
	pthread_mutex_unlock(&mu);
	return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
	(void)dev;
	return forked ? E_NOT_INITIALIZED : OK;
}
CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active)
{
	if (forked || !inited)
		return E_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndev)
		return E_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	*flags = 0;
	*active = ctxs[dev].active;
	pthread_mutex_unlock(&mu);
	return OK;
}
/* cudaDeviceReset: every stream, event and allocation of the context is
 * gone; the context comes back on the next retain. */
CUresult cuDevicePrimaryCtxReset_v2(int dev)
{
	if (forked || !inited)
		return E_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndev)
		return E_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	ctx *c = &ctxs[dev];
	discard_ctx(c);
	for (int i = 0; i < nevents; i++)
		if (events[i]->c == c)
			events[i]->s = NULL; /* what they recorded is gone */
	c->gen++;
	c->legacy->gen = c->gen;
	c->active = 0;
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].mem && allocs[i].device == dev) {
			free(allocs[i].mem);
			allocs[i].mem = NULL;
		}
	pthread_mutex_unlock(&mu);
	return OK;
}
CUresult cuCtxPushCurrent_v2(void *c)
{
	if (forked)
		return E_NOT_INITIALIZED;
	if (!c || cur_n == (int)(sizeof cur_stack / sizeof cur_stack[0]))
		return E_INVALID_VALUE;
	cur_stack[cur_n++] = c;
	return OK;
}
CUresult cuCtxPopCurrent_v2(void **c)
{
	if (forked)
		return E_NOT_INITIALIZED;
	if (!cur_n)
		return E_INVALID_CONTEXT;
	cur_n--;
	if (c)
		*c = cur_stack[cur_n];
	return OK;
}
CUresult cuCtxSetCurrent(void *c)
{
	if (forked)
		return E_NOT_INITIALIZED;
	if (!c) {
		if (cur_n)
			cur_n--;
		return OK;
	}
	if (cur_n)
		cur_stack[cur_n - 1] = c;
	else
		cur_stack[cur_n++] = c;
	return OK;
}
CUresult cuCtxGetCurrent(void **c)
{
	if (forked)
		return E_NOT_INITIALIZED;
	*c = cur();
	return OK;
}
CUresult cuCtxGetDevice(int *dev)
{
	CUresult r = need_ctx();
	if (!r)
		*dev = cur()->dev;
	return r;
}
CUresult cuCtxSynchronize(void)
{
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	run_ctx(cur(), "cuCtxSynchronize");
	pthread_mutex_unlock(&mu);
	return OK;
}

/* ------------------------------------------------------------ queries */

/* cuPointerGetAttributes calls so far (fake_cuda_ptr_queries). */
static int ptr_queries;
int fake_cuda_ptr_queries(void)
{
	return __atomic_load_n(&ptr_queries, __ATOMIC_RELAXED);
}

CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data,
				CUdeviceptr ptr)
{
	const void *p = (const void *)(uintptr_t)ptr;
	unsigned type = 0, managed = 0;
	int ordinal = -1;
	alloc *al;
	hostmem *h;

	__atomic_fetch_add(&ptr_queries, 1, __ATOMIC_RELAXED);
	if (forked || !inited)
		return E_NOT_INITIALIZED;
	if (ptr_needs_ctx && need_ctx())
		return need_ctx();
	pthread_mutex_lock(&mu);
	if ((al = find_dev(p))) {
		type = 2;
		ordinal = al->device;
	} else if ((h = find_host(p))) {
		type = h->managed ? (unsigned)managed_type : 1;
		managed = (unsigned)h->managed;
		ordinal = h->managed ? h->device : -1;
	}
	pthread_mutex_unlock(&mu);
	for (unsigned i = 0; i < n; i++) {
		if (attrs[i] == 2 && type)
			*(unsigned *)data[i] = type;
		if (attrs[i] == 8)
			*(unsigned *)data[i] = managed;
		if (attrs[i] == 9 && type)
			*(int *)data[i] = ordinal;
	}
	return OK;
}

/* ---------------------------------------------------- streams, events */

CUresult cuStreamCreate(void **s, unsigned flags)
{
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	*s = stream_new(cur(), flags & 1);
	pthread_mutex_unlock(&mu);
	return *s ? OK : E_OUT_OF_MEMORY;
}
CUresult cuStreamGetCtx(void *h, void **c)
{
	CUresult r = OK;
	if (forked)
		return E_NOT_INITIALIZED;
	if (!h || h == LEGACY || h == PER_THREAD) {
		r = need_ctx();
		if (!r)
			*c = cur();
		return r;
	}
	pthread_mutex_lock(&mu);
	stream *s = h;
	if (s->magic != STREAM_MAGIC)
		r = E_INVALID_HANDLE;
	else if (s->gen != s->c->gen || !s->c->active)
		r = E_CONTEXT_IS_DESTROYED;
	else
		*c = s->c;
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuStreamSynchronize(void *h)
{
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	stream *s = stream_of(h, cur(), &r);
	if (s)
		run_wait(s, s->n, "cuStreamSynchronize");
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuEventCreate(void **e, unsigned flags)
{
	CUresult r = need_ctx();
	event *ev;
	(void)flags;
	if (r)
		return r;
	ev = calloc(1, sizeof *ev);
	if (!ev)
		return E_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	ev->magic = EVENT_MAGIC;
	ev->c = cur();
	ev->gen = ev->c->gen;
	if (nevents < (int)(sizeof events / sizeof events[0]))
		events[nevents++] = ev;
	pthread_mutex_unlock(&mu);
	*e = ev;
	return OK;
}
CUresult cuEventRecord(void *e, void *h)
{
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	event *ev = event_of(e, &r);
	stream *s = ev ? stream_of(h, cur(), &r) : NULL;
	if (s && ev->c != s->c)
		r = E_INVALID_HANDLE; /* event and stream of two contexts */
	else if (s) {
		ev->s = s;
		ev->upto = s->n;
		ev->queries = 0;
	}
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuEventQuery(void *e)
{
	CUresult r;
	if (forked)
		return E_NOT_INITIALIZED;
	pthread_mutex_lock(&mu);
	event *ev = event_of(e, &r);
	if (ev && ev->s && ev->s->done < ev->upto) {
		if (ev->queries++ < queries_needed || !run(ev->s, ev->upto))
			r = E_NOT_READY;
	}
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuEventSynchronize(void *e)
{
	CUresult r;
	if (forked)
		return E_NOT_INITIALIZED;
	pthread_mutex_lock(&mu);
	event *ev = event_of(e, &r);
	if (ev && ev->s)
		run_wait(ev->s, ev->upto, "cuEventSynchronize");
	pthread_mutex_unlock(&mu);
	return r;
}
/* The event may be of another context (the real driver allows it). */
CUresult cuStreamWaitEvent(void *h, void *e, unsigned flags)
{
	CUresult r = need_ctx();
	(void)flags;
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	event *ev = event_of(e, &r);
	stream *s = ev ? stream_of(h, cur(), &r) : NULL;
	if (s && ev->s)
		r = push(s, (op){ .is_wait = 1, .on = ev->s, .upto = ev->upto });
	pthread_mutex_unlock(&mu);
	return r;
}

/* ------------------------------------------------------------- copies */

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *h)
{
	CUresult r = need_ctx();
	const void *du = (const void *)(uintptr_t)dst, *su = (const void *)(uintptr_t)src;
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	stream *s = stream_of(h, cur(), &r);
	char *d = translate(dst, n), *sp = translate(src, n);
	if (s && (!d || !sp))
		r = E_INVALID_VALUE;
	if (s && !r) {
		for (int i = 0; i < 2; i++) {
			const void *p = i ? su : du;
			if (!in_span(p) && !find_host(p))
				violation("cuMemcpyAsync %s pageable host memory %p "
					  "(the copy is synchronous on a real GPU)",
					  i ? "from" : "to", p);
		}
		r = push(s, (op){ .dst = d, .src = sp, .n = n,
				  .host = { in_span(du) ? NULL : du,
					    in_span(su) ? NULL : su } });
	}
	pthread_mutex_unlock(&mu);
	return r;
}
/* Synchronous except device to device and pageable host to device, where
 * the real one returns before the device is written. */
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult r = need_ctx();
	const void *du = (const void *)(uintptr_t)dst, *su = (const void *)(uintptr_t)src;
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	ctx *c = cur();
	char *d = translate(dst, n), *sp = translate(src, n);
	if (!d || !sp) {
		r = E_INVALID_VALUE;
	} else if (devlike(du) && devlike(su)) {
		r = push(c->legacy, (op){ .dst = d, .src = sp, .n = n });
	} else if (devlike(du) && !find_host(su)) {
		r = legacy_sync(c, "cuMemcpy");
		char *copy = malloc(n ? n : 1);
		if (r || !copy) {
			free(copy);
			r = r ? r : E_OUT_OF_MEMORY;
		} else {
			memcpy(copy, sp, n);
			r = push(c->legacy, (op){ .dst = d, .src = copy, .n = n,
						  .owned = copy });
			if (r)
				free(copy);
		}
	} else if (!(r = legacy_sync(c, "cuMemcpy"))) {
		memmove(d, sp, n);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

/* ------------------------------------------------------------- memory */

static CUresult host_alloc(void **p, size_t n, int managed)
{
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	/* Managed memory in a mapping of its own, as the driver's is: never
	 * in the heap, which libdistrun takes for host memory unasked. */
	if (nhosts == (int)(sizeof hosts / sizeof hosts[0]))
		r = E_OUT_OF_MEMORY;
	else if (managed)
		r = (*p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED
			? E_OUT_OF_MEMORY : OK;
	else if (!(*p = malloc(n ? n : 1)))
		r = E_OUT_OF_MEMORY;
	if (r)
		*p = NULL;
	if (!r)
		hosts[nhosts++] = (hostmem){ *p, n, managed, cur()->dev };
	pthread_mutex_unlock(&mu);
	return r;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
	(void)flags;
	return host_alloc(p, n, 0);
}
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags)
{
	void *q = NULL;
	CUresult r = host_alloc(&q, n, 1);
	(void)flags;
	if (!r)
		*p = (CUdeviceptr)(uintptr_t)q;
	return r;
}

static void host_free(hostmem *h)
{
	/* A copy still queued on the block would write freed memory. */
	int queued = 0;
	for (int i = 0; i < nstreams; i++) {
		stream *s = streams[i];
		for (size_t k = s->done; k < s->n; k++) {
			op *o = &s->ops[k];
			for (int j = 0; j < 2; j++)
				if (o->host[j] && (const char *)o->host[j] >= h->p &&
				    (const char *)o->host[j] < h->p + h->n) {
					queued++;
					o->dst = NULL; /* never run it */
				}
		}
	}
	if (queued)
		violation("%p freed with %d cop%s still queued on it",
			  (void *)h->p, queued, queued == 1 ? "y" : "ies");
	if (h->managed)
		munmap(h->p, h->n ? h->n : 1);
	else
		free(h->p);
	*h = hosts[--nhosts];
}

CUresult cuMemFreeHost(void *p)
{
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	hostmem *h = find_host(p);
	if (!h || h->p != p || h->managed)
		r = E_INVALID_VALUE;
	else
		host_free(h);
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	CUresult r = need_ctx();
	size_t rounded = (n + 4095) & ~(size_t)4095;
	if (r)
		return r;
	r = E_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	if (span && nallocs < (int)(sizeof allocs / sizeof allocs[0]) &&
	    span_used + rounded <= DEVICE_SPAN) {
		char *mem = malloc(n ? n : 1);
		if (mem) {
			allocs[nallocs++] = (alloc){ span + span_used, mem, n, cur()->dev };
			*p = (CUdeviceptr)(uintptr_t)(span + span_used);
			span_used += rounded;
			r = OK;
		}
	}
	pthread_mutex_unlock(&mu);
	return r;
}
/* Freeing waits for the context's work first, as cuMemFree does. */
CUresult cuMemFree_v2(CUdeviceptr p)
{
	CUresult r = need_ctx();
	void *q = (void *)(uintptr_t)p;
	if (r)
		return r;
	r = E_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	run_ctx(cur(), "cuMemFree");
	alloc *al = find_dev(q);
	hostmem *h = al ? NULL : find_host(q);
	if (al && al->dev == (char *)q) {
		free(al->mem);
		al->mem = NULL; /* the address range is never reused */
		r = OK;
	} else if (h && h->managed && h->p == q) {
		host_free(h);
		r = OK;
	}
	pthread_mutex_unlock(&mu);
	return r;
}
