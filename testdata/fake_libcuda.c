/*
 * fake_libcuda.c - a stand-in for the CUDA driver (libcuda.so.1) with the
 * twenty functions runtime/cuda.c uses, so that the staging of device
 * buffers can be tested on machines without a GPU:
 *
 *   cc -shared -fPIC -o libfakecuda.so testdata/fake_libcuda.c
 *   DISTRUN_CUDA_LIB=$PWD/libfakecuda.so distrun -n 3 build/tests/cuda_colls
 *
 * It is strict where a real GPU would be forgiving by luck:
 *   - "device memory" lies at addresses the host cannot touch (a PROT_NONE
 *     reservation; the bytes live elsewhere), so a device pointer handed
 *     to host code crashes at once;
 *   - asynchronous copies do nothing until something waits for them: an
 *     event query (which answers "not ready" once first), a stream waiting
 *     on an event, or a synchronous cuMemcpy (which drains the legacy
 *     stream, as the real one does).  A missing event record or stream
 *     wait therefore loses data deterministically instead of racing.
 * One device, one context; not a model of performance or of kernels.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define OK 0
#define E_INVALID_VALUE 1
#define E_OUT_OF_MEMORY 2
#define E_NOT_READY 600
#define LEGACY ((void *)0x1)
#define DEVICE_SPAN ((size_t)8 << 30)

typedef struct {
	int is_wait;
	char *dst;            /* copy: translated addresses */
	const char *src;
	size_t n;
	struct stream *on;    /* wait: flush this stream ... */
	size_t upto;          /* ... up to here first */
} op;

typedef struct stream {
	op *ops;
	size_t n, cap, done;
} stream;

typedef struct {
	stream *s;
	size_t upto;
	int queries;
} event;

typedef struct {
	char *dev;            /* address handed out */
	char *mem;            /* where the bytes are */
	size_t n;
} alloc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static stream legacy;
static char *span;         /* reserved, never accessible */
static size_t span_used;
static alloc allocs[4096];
static int nallocs;
static struct { void *p; size_t n; } pinned[256];
static int npinned;
static stream *streams[256];
static int nstreams;

static alloc *find_dev(const void *p)
{
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].mem && (const char *)p >= allocs[i].dev &&
		    (const char *)p < allocs[i].dev + allocs[i].n)
			return &allocs[i];
	return NULL;
}

/* The bytes behind an address, device or host; NULL for a device address
 * outside every allocation. */
static char *translate(CUdeviceptr a, size_t n)
{
	char *p = (char *)(uintptr_t)a;
	if (span && p >= span && p < span + DEVICE_SPAN) {
		alloc *al = find_dev(p);
		if (!al || p + n > al->dev + al->n)
			return NULL;
		return al->mem + (p - al->dev);
	}
	return p;
}

static stream *stream_of(void *s)
{
	return (!s || s == LEGACY) ? &legacy : (stream *)s;
}

static void flush(stream *s, size_t upto)
{
	while (s->done < upto) {
		op *o = &s->ops[s->done++];
		if (o->is_wait)
			flush(o->on, o->upto);
		else
			memmove(o->dst, o->src, o->n);
	}
}

/* Freeing memory waits for all work, as cuMemFree does. */
static void flush_all(void)
{
	flush(&legacy, legacy.n);
	for (int i = 0; i < nstreams; i++)
		flush(streams[i], streams[i]->n);
}

static CUresult push(stream *s, op o)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		op *ops = realloc(s->ops, cap * sizeof *ops);
		if (!ops)
			return E_OUT_OF_MEMORY;
		s->ops = ops;
		s->cap = cap;
	}
	s->ops[s->n++] = o;
	return OK;
}

CUresult cuInit(unsigned flags)
{
	(void)flags;
	pthread_mutex_lock(&mu);
	if (!span) {
		void *p = mmap(NULL, DEVICE_SPAN, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		span = p == MAP_FAILED ? NULL : p;
	}
	pthread_mutex_unlock(&mu);
	return span ? OK : E_OUT_OF_MEMORY;
}

CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(int *dev, int ordinal)
{
	*dev = ordinal;
	return ordinal == 0 ? OK : E_INVALID_VALUE;
}
CUresult cuGetErrorName(CUresult e, const char **s)
{
	*s = e == E_NOT_READY ? "CUDA_ERROR_NOT_READY" :
		e == E_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" :
		"CUDA_ERROR_INVALID_VALUE";
	return OK;
}
CUresult cuGetErrorString(CUresult e, const char **s)
{
	(void)e;
	*s = "fake driver error";
	return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	static int the_ctx;
	(void)dev;
	*ctx = &the_ctx;
	return OK;
}
CUresult cuCtxPushCurrent_v2(void *ctx) { (void)ctx; return OK; }
CUresult cuCtxPopCurrent_v2(void **ctx) { *ctx = NULL; return OK; }

CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data,
				CUdeviceptr ptr)
{
	const void *p = (const void *)(uintptr_t)ptr;
	int type = 0;
	pthread_mutex_lock(&mu);
	if (find_dev(p))
		type = 2;
	for (int i = 0; i < npinned && !type; i++)
		if ((const char *)p >= (char *)pinned[i].p &&
		    (const char *)p < (char *)pinned[i].p + pinned[i].n)
			type = 1;
	pthread_mutex_unlock(&mu);
	for (unsigned i = 0; i < n; i++) {
		if (attrs[i] == 2 && type)
			*(unsigned *)data[i] = (unsigned)type;
		if (attrs[i] == 9 && type)
			*(int *)data[i] = 0;
	}
	return OK;
}

CUresult cuStreamCreate(void **s, unsigned flags)
{
	CUresult r = E_OUT_OF_MEMORY;
	(void)flags;
	pthread_mutex_lock(&mu);
	if (nstreams < (int)(sizeof streams / sizeof streams[0]) &&
	    (*s = calloc(1, sizeof(stream)))) {
		streams[nstreams++] = *s;
		r = OK;
	}
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuEventCreate(void **e, unsigned flags)
{
	(void)flags;
	*e = calloc(1, sizeof(event));
	return *e ? OK : E_OUT_OF_MEMORY;
}
CUresult cuEventRecord(void *e, void *s)
{
	event *ev = e;
	pthread_mutex_lock(&mu);
	ev->s = stream_of(s);
	ev->upto = ev->s->n;
	ev->queries = 0;
	pthread_mutex_unlock(&mu);
	return OK;
}
CUresult cuEventQuery(void *e)
{
	event *ev = e;
	CUresult r = OK;
	pthread_mutex_lock(&mu);
	if (ev->s && ev->s->done < ev->upto) {
		if (ev->queries++ == 0)
			r = E_NOT_READY;
		else
			flush(ev->s, ev->upto);
	}
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags)
{
	event *ev = e;
	CUresult r = OK;
	(void)flags;
	pthread_mutex_lock(&mu);
	if (ev->s)
		r = push(stream_of(s), (op){ .is_wait = 1, .on = ev->s,
					     .upto = ev->upto });
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s)
{
	CUresult r;
	pthread_mutex_lock(&mu);
	char *d = translate(dst, n), *sp = translate(src, n);
	r = (!d || !sp) ? E_INVALID_VALUE :
		push(stream_of(s), (op){ .dst = d, .src = sp, .n = n });
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult r = OK;
	pthread_mutex_lock(&mu);
	char *d = translate(dst, n), *sp = translate(src, n);
	flush(&legacy, legacy.n);
	if (!d || !sp)
		r = E_INVALID_VALUE;
	else
		memmove(d, sp, n);
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
	CUresult r = OK;
	(void)flags;
	pthread_mutex_lock(&mu);
	if (npinned == (int)(sizeof pinned / sizeof pinned[0]) || !(*p = malloc(n)))
		r = E_OUT_OF_MEMORY;
	else
		pinned[npinned].p = *p, pinned[npinned++].n = n;
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuMemFreeHost(void *p)
{
	pthread_mutex_lock(&mu);
	flush_all();
	for (int i = 0; i < npinned; i++)
		if (pinned[i].p == p) {
			pinned[i] = pinned[--npinned];
			free(p);
			break;
		}
	pthread_mutex_unlock(&mu);
	return OK;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	CUresult r = E_OUT_OF_MEMORY;
	size_t rounded = (n + 4095) & ~(size_t)4095;
	pthread_mutex_lock(&mu);
	if (span && nallocs < (int)(sizeof allocs / sizeof allocs[0]) &&
	    span_used + rounded <= DEVICE_SPAN) {
		char *mem = malloc(n);
		if (mem) {
			allocs[nallocs++] = (alloc){ span + span_used, mem, n };
			*p = (CUdeviceptr)(uintptr_t)(span + span_used);
			span_used += rounded;
			r = OK;
		}
	}
	pthread_mutex_unlock(&mu);
	return r;
}
CUresult cuMemFree_v2(CUdeviceptr p)
{
	CUresult r = E_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	flush_all();
	alloc *al = find_dev((void *)(uintptr_t)p);
	if (al && al->dev == (char *)(uintptr_t)p) {
		free(al->mem);
		al->mem = NULL; /* the address range is never reused */
		r = OK;
	}
	pthread_mutex_unlock(&mu);
	return r;
}
