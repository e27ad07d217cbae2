/*
 * cuda.c - CUDA in libdistrun: the driver library loaded at run time,
 * stream synchronisation for dr_barrier(device_ids), and device buffers in
 * the collectives, staged through pinned host memory.
 *
 * One libdistrun binary serves machines with and without CUDA, so nothing
 * here links against CUDA or includes its headers: the driver API
 * (libcuda.so.1, installed with the driver, the same on every toolkit
 * version) is dlopen'ed once, on first need, and the few types and
 * functions used are declared below with their ABI names (cuMemAlloc_v2
 * ...).  The driver API rather than libcudart because libcudart comes in
 * one soname per toolkit version (and programs built by nvcc link their own
 * copy statically), while every CUDA program on a machine goes through the
 * same libcuda.so.1; the runtime API's cudaStream_t is the driver's
 * CUstream, and working in each device's primary context
 * (cuDevicePrimaryCtxRetain) shares the context the runtime API uses.
 *
 * Without CUDA (no library, cuInit fails, no device, or DISTRUN_CUDA=0)
 * dr_cuda_available() is 0 and every CUDA request fails with DR_ENOCUDA
 * "CUDA not available: <why>".  A program that never touched CUDA pays
 * nothing: dri_cuda_ptr_device() does not load (or cuInit) the driver
 * unless the process has already loaded libcuda.so.1 itself, since no
 * pointer can be device memory before that.
 *
 * Staging (dri_cuda_run_staged): a collective on device buffers runs the
 * host algorithm (op->run) on pinned copies, chunk by chunk, with the
 * copies on two side streams so that they overlap the network:
 *
 *   user stream ──event──► d2h stream: copy chunk 0, 1, 2 ... into slots
 *   host thread:  wait chunk k's copy; op->run(chunk k) over TCP;
 *                 queue chunk k's copy back on the h2d stream; queue the
 *                 d2h copy of chunk k+NSLOT into the slot once k is back
 *   h2d stream ──event──► user stream (later work sees the result)
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
 * Environment: DISTRUN_CUDA=0 turns CUDA off; DISTRUN_CUDA_LIB names
 * another driver library (tests: the toolkit's stub, a fake);
 * DISTRUN_CUDA_CHUNK fixes the staging chunk in bytes (default: a quarter
 * of the call, 4 to 16 MiB).
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"

/* ------------------------------------------------- the driver API, by hand */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2

/* The ABI names (cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on); the
 * unsuffixed cuMemcpy, cuMemcpyAsync, cuEventRecord, cuStreamWaitEvent are
 * the legacy-default-stream variants, which is what a NULL stream means
 * here. */
#define CU_FUNCS(XX)                                                          \
	XX(Init, "cuInit", (unsigned flags))                                  \
	XX(DeviceGetCount, "cuDeviceGetCount", (int *n))                      \
	XX(DeviceGet, "cuDeviceGet", (CUdevice *dev, int ordinal))            \
	XX(GetErrorName, "cuGetErrorName", (CUresult e, const char **s))      \
	XX(GetErrorString, "cuGetErrorString", (CUresult e, const char **s))  \
	XX(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                \
	   (CUcontext *ctx, CUdevice dev))                                    \
	XX(CtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx))            \
	XX(CtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext *ctx))             \
	XX(PointerGetAttributes, "cuPointerGetAttributes",                    \
	   (unsigned n, int *attrs, void **data, CUdeviceptr p))              \
	XX(StreamCreate, "cuStreamCreate", (CUstream *s, unsigned flags))     \
	XX(EventCreate, "cuEventCreate", (CUevent *e, unsigned flags))        \
	XX(EventRecord, "cuEventRecord", (CUevent e, CUstream s))             \
	XX(EventQuery, "cuEventQuery", (CUevent e))                           \
	XX(StreamWaitEvent, "cuStreamWaitEvent",                              \
	   (CUstream s, CUevent e, unsigned flags))                           \
	XX(MemcpyAsync, "cuMemcpyAsync",                                      \
	   (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))          \
	XX(Memcpy, "cuMemcpy", (CUdeviceptr dst, CUdeviceptr src, size_t n))  \
	XX(MemHostAlloc, "cuMemHostAlloc", (void **p, size_t n, unsigned fl)) \
	XX(MemFreeHost, "cuMemFreeHost", (void *p))                           \
	XX(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr *p, size_t n))             \
	XX(MemFree, "cuMemFree_v2", (CUdeviceptr p))

/* Pinned slots per stager: chunk k's network step runs while k+1 is being
 * copied in and k-1 copied out. */
#define NSLOT 3
/* The chunk: a quarter of the call's bytes, kept between these bounds.
 * Each chunk is a whole host collective, whose pipelined ring pays its
 * fill again (2(p-1) pieces) - fewer, larger chunks; the first chunk's
 * copy in and the last one's copy out are not overlapped - smaller
 * chunks.  For 64 MiB the two costs balance near 16 MiB.
 * DISTRUN_CUDA_CHUNK (bytes) fixes it instead. */
#define MIN_CHUNK_BYTES ((size_t)4 << 20)
#define MAX_CHUNK_BYTES ((size_t)16 << 20)

/* One set of side streams, events and pinned slots.  A collective takes
 * one from its device's pool for its whole run and gives it back: two
 * collectives in flight at once (two groups, two threads) never share
 * one, so neither waits for the other (which could deadlock across
 * ranks that ran them in another order). */
typedef struct stager {
	struct stager *next;
	CUstream d2h, h2d;
	CUevent ev_start, ev_done, ev_d2h[NSLOT], ev_h2d[NSLOT];
	int used;           /* ev_done has been recorded */
	char *pinned;
	size_t pinned_size;
} stager;

typedef struct {
	pthread_mutex_t lock;
	CUcontext ctx;      /* primary context, retained once, kept */
	CUstream stream;    /* dr_cuda_set_stream's; NULL = legacy default */
	stager *pool;       /* free stagers */
} cu_device;

enum { CU_UNLOADED, CU_OK, CU_FAILED };

static struct {
#define CU_XX_PTR(name, sym, args) CUresult (*name) args;
	CU_FUNCS(CU_XX_PTR)
#undef CU_XX_PTR
	void *lib;
	int ndev;
	cu_device *dev;
	size_t chunk_bytes;  /* DISTRUN_CUDA_CHUNK; 0: by size */
	char why[256];
} cu;

static atomic_int cu_state = CU_UNLOADED;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static CUdeviceptr dptr(const void *p)
{
	return (CUdeviceptr)(uintptr_t)p;
}

static const char *cu_lib_name(void)
{
	const char *s = getenv("DISTRUN_CUDA_LIB");
	return s && *s ? s : "libcuda.so.1";
}

/* Names of the errors cuInit gives on a machine where CUDA cannot work,
 * for when the driver cannot name them itself (the stub library). */
static const struct {
	int code;
	const char *name, *desc;
} cu_init_errors[] = {
	{ 3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ 34, "CUDA_ERROR_STUB_LIBRARY", "the CUDA driver is a stub library" },
	{ 35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "driver older than the runtime" },
	{ 46, "CUDA_ERROR_DEVICES_UNAVAILABLE", "all CUDA devices are busy or unavailable" },
	{ 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ 999, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

static const char *cu_errstr(CUresult r)
{
	static __thread char buf[160];
	const char *name = NULL, *desc = NULL;
	if (cu.GetErrorName && cu.GetErrorName(r, &name) != CUDA_SUCCESS)
		name = NULL;
	if (cu.GetErrorString && cu.GetErrorString(r, &desc) != CUDA_SUCCESS)
		desc = NULL;
	for (size_t i = 0; !name && i < sizeof cu_init_errors / sizeof cu_init_errors[0]; i++)
		if (cu_init_errors[i].code == r) {
			name = cu_init_errors[i].name;
			desc = cu_init_errors[i].desc;
		}
	if (name)
		snprintf(buf, sizeof buf, "%s (%s)", name, desc ? desc : "no description");
	else
		snprintf(buf, sizeof buf, "CUDA error %d", r);
	return buf;
}

static dr_err cu_fail(CUresult r, const char *call, int device)
{
	return dri_fail(DR_ECUDA, "%s on cuda:%d failed: %s", call, device,
			cu_errstr(r));
}

static void cu_load(void)
{
	const char *off = getenv("DISTRUN_CUDA");
	const char *lib = cu_lib_name();
	int n = 0;
	CUresult r;

	if (off && (!strcmp(off, "0") || !strcmp(off, "off"))) {
		snprintf(cu.why, sizeof cu.why, "disabled by DISTRUN_CUDA=%s", off);
		goto fail;
	}
	cu.lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!cu.lib) {
		const char *e = dlerror();
		/* dlerror names the library and the reason. */
		snprintf(cu.why, sizeof cu.why, "cannot load the CUDA driver: %s",
			 e ? e : lib);
		goto fail;
	}
#define CU_XX_SYM(name, sym, args)                                            \
	*(void **)&cu.name = dlsym(cu.lib, sym);                              \
	if (!cu.name) {                                                       \
		snprintf(cu.why, sizeof cu.why,                               \
			 "%s has no %s (driver too old?)", lib, sym);         \
		goto fail;                                                    \
	}
	CU_FUNCS(CU_XX_SYM)
#undef CU_XX_SYM
	r = cu.Init(0);
	if (r != CUDA_SUCCESS) {
		snprintf(cu.why, sizeof cu.why, "cuInit failed: %s", cu_errstr(r));
		goto fail;
	}
	r = cu.DeviceGetCount(&n);
	if (r != CUDA_SUCCESS || n <= 0) {
		snprintf(cu.why, sizeof cu.why, "%s",
			 r != CUDA_SUCCESS ? cu_errstr(r) : "no CUDA device found");
		goto fail;
	}
	cu.dev = calloc((size_t)n, sizeof *cu.dev);
	if (!cu.dev) {
		snprintf(cu.why, sizeof cu.why, "out of memory");
		goto fail;
	}
	for (int i = 0; i < n; i++)
		pthread_mutex_init(&cu.dev[i].lock, NULL);
	cu.ndev = n;

	const char *cb = getenv("DISTRUN_CUDA_CHUNK");
	char *end = NULL;
	unsigned long long v = cb ? strtoull(cb, &end, 10) : 0;
	cu.chunk_bytes = (cb && end != cb && !*end && v >= 4096) ? (size_t)v : 0;
	atomic_store(&cu_state, CU_OK);
	return;
fail:
	/* Keep the library loaded even when unusable: unloading a driver that
	 * may have started threads is riskier than a mapping we never use. */
	atomic_store(&cu_state, CU_FAILED);
}

/* Loads on first call; 1 when CUDA is usable. */
static int cu_ready(void)
{
	pthread_once(&cu_once, cu_load);
	return atomic_load(&cu_state) == CU_OK;
}

static dr_err cu_unavailable(void)
{
	return dri_fail(DR_ENOCUDA, "CUDA not available: %s", cu.why);
}

/* Makes device's primary context current on this thread (push; the caller
 * pops with cu_leave).  The context is retained on first use and kept. */
static dr_err cu_enter(int device)
{
	cu_device *d = &cu.dev[device];
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_lock(&d->lock);
	if (!d->ctx) {
		CUdevice h;
		r = cu.DeviceGet(&h, device);
		if (r == CUDA_SUCCESS)
			r = cu.DevicePrimaryCtxRetain(&d->ctx, h);
	}
	pthread_mutex_unlock(&d->lock);
	if (r != CUDA_SUCCESS)
		return cu_fail(r, "cuDevicePrimaryCtxRetain", device);
	r = cu.CtxPushCurrent(d->ctx);
	if (r != CUDA_SUCCESS)
		return cu_fail(r, "cuCtxPushCurrent", device);
	return DR_OK;
}

static void cu_leave(void)
{
	CUcontext c;
	cu.CtxPopCurrent(&c);
}

static CUstream cu_user_stream(int device)
{
	cu_device *d = &cu.dev[device];
	pthread_mutex_lock(&d->lock);
	CUstream s = d->stream ? d->stream : CU_STREAM_LEGACY;
	pthread_mutex_unlock(&d->lock);
	return s;
}

/* Waits for an event without cuEventSynchronize, which has no timeout:
 * polls, yielding at first (a copy of a chunk takes tens of microseconds),
 * then sleeping with a growing pause so a long kernel costs no CPU. */
static dr_err cu_wait_event(CUevent ev, int device, int64_t deadline,
			    const char *what)
{
	long pause_ns = 2000;
	for (int i = 0;; i++) {
		CUresult r = cu.EventQuery(ev);
		if (r == CUDA_SUCCESS)
			return DR_OK;
		if (r != CUDA_ERROR_NOT_READY)
			return cu_fail(r, "cuEventQuery", device);
		if (dri_now_ms() >= deadline)
			return dri_fail(DR_ETIMEDOUT,
					"timed out waiting for %s on cuda:%d",
					what, device);
		if (i < 64) {
			sched_yield();
			continue;
		}
		struct timespec ts = { 0, pause_ns };
		nanosleep(&ts, NULL);
		if (pause_ns < 1000000)
			pause_ns *= 2;
	}
}

static int64_t deadline_after(int64_t timeout_ms)
{
	return dri_now_ms() + (timeout_ms > 0 ? timeout_ms : dri_op_timeout_ms());
}

/* --------------------------------------------------------------- stagers */

static void stager_destroy(stager *s)
{
	/* Only for a stager whose creation failed half-way: streams and events
	 * are few and live for the process, so a stager is never destroyed
	 * otherwise. */
	if (s->pinned)
		cu.MemFreeHost(s->pinned);
	free(s);
}

/* Takes a stager from the pool of device (whose context is current) or
 * makes one. */
static dr_err stager_get(int device, stager **out)
{
	cu_device *d = &cu.dev[device];
	stager *s;
	CUresult r;
	const char *call;

	pthread_mutex_lock(&d->lock);
	s = d->pool;
	if (s)
		d->pool = s->next;
	pthread_mutex_unlock(&d->lock);
	if (s)
		goto out;

	s = calloc(1, sizeof *s);
	if (!s)
		return dri_fail(DR_ENOMEM, "out of memory for a CUDA stager");
	call = "cuStreamCreate";
	if ((r = cu.StreamCreate(&s->d2h, CU_STREAM_NON_BLOCKING)) ||
	    (r = cu.StreamCreate(&s->h2d, CU_STREAM_NON_BLOCKING)))
		goto fail;
	call = "cuEventCreate";
	if ((r = cu.EventCreate(&s->ev_start, CU_EVENT_DISABLE_TIMING)) ||
	    (r = cu.EventCreate(&s->ev_done, CU_EVENT_DISABLE_TIMING)))
		goto fail;
	for (int i = 0; i < NSLOT; i++)
		if ((r = cu.EventCreate(&s->ev_d2h[i], CU_EVENT_DISABLE_TIMING)) ||
		    (r = cu.EventCreate(&s->ev_h2d[i], CU_EVENT_DISABLE_TIMING)))
			goto fail;
out:
	s->next = NULL;
	*out = s;
	return DR_OK;
fail:
	stager_destroy(s);
	return cu_fail(r, call, device);
}

static void stager_put(int device, stager *s)
{
	cu_device *d = &cu.dev[device];
	pthread_mutex_lock(&d->lock);
	s->next = d->pool;
	d->pool = s;
	pthread_mutex_unlock(&d->lock);
}

/* Pinned memory of at least n bytes.  Growing frees the old block, so the
 * caller must know that no copy still uses it (true between calls: a call
 * starts by ordering its copies after the previous call's ev_done, and a
 * grow happens only before a call's first copy, after waiting for it). */
static dr_err stager_reserve(stager *s, int device, size_t n, int64_t deadline)
{
	CUresult r;
	dr_err err;
	if (s->pinned_size >= n)
		return DR_OK;
	if (s->used && (err = cu_wait_event(s->ev_done, device, deadline,
					    "the previous staged copy")))
		return err;
	if (s->pinned)
		cu.MemFreeHost(s->pinned);
	s->pinned = NULL;
	s->pinned_size = 0;
	r = cu.MemHostAlloc((void **)&s->pinned, n, CU_MEMHOSTALLOC_PORTABLE);
	if (r != CUDA_SUCCESS) {
		s->pinned = NULL;
		return cu_fail(r, "cuMemHostAlloc", device);
	}
	s->pinned_size = n;
	return DR_OK;
}

/* ------------------------------------------------------- public and dri_ */

int dr_cuda_available(void)
{
	return cu_ready();
}

int dr_cuda_device_count(void)
{
	return cu_ready() ? cu.ndev : 0;
}

dr_err dr_cuda_set_stream(int device, void *stream)
{
	if (!cu_ready())
		return cu_unavailable();
	if (device < 0 || device >= cu.ndev)
		return dri_fail(DR_EINVAL,
				"dr_cuda_set_stream: device %d out of range (%d CUDA device%s)",
				device, cu.ndev, cu.ndev == 1 ? "" : "s");
	pthread_mutex_lock(&cu.dev[device].lock);
	cu.dev[device].stream = stream;
	pthread_mutex_unlock(&cu.dev[device].lock);
	return DR_OK;
}

/* The device of p; -1 for host memory (and without CUDA). */
static int cu_ptr_device_loaded(const void *p)
{
	unsigned memtype = 0;
	int ordinal = -1;
	int attrs[2] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
			 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL };
	void *data[2] = { &memtype, &ordinal };

	/* Unlike cuPointerGetAttribute, the plural form succeeds on memory
	 * CUDA does not know (plain host memory), leaving memtype 0.  It needs
	 * no current context with unified addressing; should a driver want
	 * one, ask again from device 0's primary context rather than take a
	 * device pointer for a host one. */
	if (cu.PointerGetAttributes(2, attrs, data, dptr(p)) != CUDA_SUCCESS) {
		CUresult r = (CUresult)-1;
		memtype = 0;
		ordinal = -1;
		if (cu_enter(0) == DR_OK) {
			r = cu.PointerGetAttributes(2, attrs, data, dptr(p));
			cu_leave();
		}
		if (r != CUDA_SUCCESS)
			return -1;
	}
	if (memtype != CU_MEMORYTYPE_DEVICE || ordinal < 0 || ordinal >= cu.ndev)
		return -1;
	return ordinal;
}

/* Whether the process has loaded the driver library (through the CUDA
 * runtime, or us), for dri_cuda_ptr_device, which every collective calls.
 * Not dlopen(RTLD_NOLOAD): for a library that is not loaded it searches
 * the disk, about ten system calls a time.  dl_iterate_phdr walks the
 * loaded objects in memory, and its count of objects ever loaded
 * (dlpi_adds, on the first object) tells when nothing was loaded since the
 * last walk, so the usual answer costs one callback. */
struct lib_scan {
	const char *base;         /* basename of the library sought */
	unsigned long long adds;  /* dlpi_adds seen */
	int first_only, found;
};

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

static int lib_scan_one(struct dl_phdr_info *info, size_t size, void *data)
{
	struct lib_scan *sc = data;
	if (size < offsetof(struct dl_phdr_info, dlpi_subs))
		return 1; /* too old a libc to tell: the caller walks in full */
	sc->adds = info->dlpi_adds;
	if (sc->first_only)
		return 1;
	if (info->dlpi_name && !strcmp(base_name(info->dlpi_name), sc->base)) {
		sc->found = 1;
		return 1;
	}
	return 0;
}

static int cu_lib_in_process(void)
{
	static atomic_ullong clean_adds; /* dlpi_adds of the last empty walk */
	struct lib_scan sc = { base_name(cu_lib_name()), 0, 1, 0 };

	dl_iterate_phdr(lib_scan_one, &sc);
	if (sc.adds && sc.adds == atomic_load(&clean_adds))
		return 0;
	sc.first_only = 0;
	dl_iterate_phdr(lib_scan_one, &sc);
	if (!sc.found)
		atomic_store(&clean_adds, sc.adds);
	return sc.found;
}

int dri_cuda_ptr_device(const void *p)
{
	int state = atomic_load(&cu_state);

	if (!p || state == CU_FAILED)
		return -1;
	if (state == CU_UNLOADED && !cu_lib_in_process())
		return -1;
	if (!cu_ready())
		return -1;
	return cu_ptr_device_loaded(p);
}

dr_err dr_cuda_alloc(int device, size_t bytes, void **ptr)
{
	CUdeviceptr p = 0;
	CUresult r;
	dr_err err;

	if (!ptr)
		return dri_fail(DR_EINVAL, "dr_cuda_alloc: ptr is NULL");
	*ptr = NULL;
	if (!cu_ready())
		return cu_unavailable();
	if (device < 0 || device >= cu.ndev)
		return dri_fail(DR_EINVAL,
				"dr_cuda_alloc: device %d out of range (%d CUDA device%s)",
				device, cu.ndev, cu.ndev == 1 ? "" : "s");
	if ((err = cu_enter(device)))
		return err;
	r = cu.MemAlloc(&p, bytes ? bytes : 1);
	cu_leave();
	if (r != CUDA_SUCCESS)
		return cu_fail(r, "cuMemAlloc", device);
	*ptr = (void *)(uintptr_t)p;
	return DR_OK;
}

dr_err dr_cuda_free(void *ptr)
{
	CUresult r;
	dr_err err;
	int device;

	if (!ptr)
		return DR_OK;
	if (!cu_ready())
		return cu_unavailable();
	device = cu_ptr_device_loaded(ptr);
	if (device < 0)
		return dri_fail(DR_EINVAL, "dr_cuda_free: %p is not CUDA device memory",
				ptr);
	if ((err = cu_enter(device)))
		return err;
	r = cu.MemFree(dptr(ptr));
	cu_leave();
	return r == CUDA_SUCCESS ? DR_OK : cu_fail(r, "cuMemFree", device);
}

dr_err dr_cuda_memcpy(void *dst, const void *src, size_t bytes)
{
	CUresult r;
	dr_err err;
	int device;

	if (!bytes)
		return DR_OK;
	if (!dst || !src)
		return dri_fail(DR_EINVAL, "dr_cuda_memcpy: %s is NULL",
				dst ? "src" : "dst");
	if (!cu_ready())
		return cu_unavailable();
	device = cu_ptr_device_loaded(dst);
	if (device < 0)
		device = cu_ptr_device_loaded(src);
	if (device < 0) {
		memmove(dst, src, bytes);
		return DR_OK;
	}
	if ((err = cu_enter(device)))
		return err;
	r = cu.Memcpy(dptr(dst), dptr(src), bytes);
	cu_leave();
	return r == CUDA_SUCCESS ? DR_OK : cu_fail(r, "cuMemcpy", device);
}

dr_err dri_cuda_sync_devices(const int *device_ids, int n)
{
	stager **st;
	int done = 0;
	dr_err err = DR_OK;
	int64_t deadline;

	if (n <= 0)
		return DR_OK;
	if (!cu_ready())
		return cu_unavailable();
	if (!device_ids)
		return dri_fail(DR_EINVAL, "device_ids is NULL but n_device_ids is %d", n);
	for (int i = 0; i < n; i++)
		if (device_ids[i] < 0 || device_ids[i] >= cu.ndev)
			return dri_fail(DR_EINVAL,
					"device_ids[%d] = %d: out of range (%d CUDA device%s)",
					i, device_ids[i], cu.ndev,
					cu.ndev == 1 ? "" : "s");
	deadline = deadline_after(0);
	st = calloc((size_t)n, sizeof *st);
	if (!st)
		return dri_fail(DR_ENOMEM, "out of memory for %d device ids", n);

	/* Mark every stream first, then wait: the devices drain in parallel. */
	for (; done < n; done++) {
		int dev = device_ids[done];
		CUresult r;
		if ((err = cu_enter(dev)))
			goto out;
		err = stager_get(dev, &st[done]);
		if (!err) {
			r = cu.EventRecord(st[done]->ev_start, cu_user_stream(dev));
			if (r != CUDA_SUCCESS) {
				stager_put(dev, st[done]);
				err = cu_fail(r, "cuEventRecord", dev);
			}
		}
		cu_leave();
		if (err)
			goto out;
	}
out:
	for (int i = 0; i < done; i++) {
		int dev = device_ids[i];
		if (!err)
			err = cu_wait_event(st[i]->ev_start, dev, deadline,
					    "the device's stream");
		stager_put(dev, st[i]);
	}
	free(st);
	return err;
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
		r = in ? cu.MemcpyAsync(dptr(h), dptr(u), bytes, s->d2h) :
			cu.MemcpyAsync(dptr(u), dptr(h), bytes, s->h2d);
	}
	if (r != CUDA_SUCCESS)
		return r;
	return in ? cu.EventRecord(s->ev_d2h[slot], s->d2h) :
		cu.EventRecord(s->ev_h2d[slot], s->h2d);
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
	return h.run(&h);
}

/* Waits until neither side stream still touches the pinned slots: after
 * an error in the middle of a pipeline, before the stager is reused. */
static void stage_drain(staging *g, int64_t deadline)
{
	stager *s = g->st;
	if (cu.EventRecord(s->ev_start, s->d2h) == CUDA_SUCCESS)
		cu_wait_event(s->ev_start, g->device, deadline, "staging copies");
	if (cu.EventRecord(s->ev_start, s->h2d) == CUDA_SUCCESS)
		cu_wait_event(s->ev_start, g->device, deadline, "staging copies");
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

		if ((err = cu_wait_event(s->ev_d2h[slot], g->device, deadline,
					 "a device-to-host copy")))
			goto fail;
		if ((err = run_chunk(g, ck, slot)))
			goto fail;
		if ((r = stage(g, k * g->chunk, ck, slot, 0)))
			goto cuda_fail;
		if (k + NSLOT < nchunks) {
			call = "cuStreamWaitEvent";
			if ((r = cu.StreamWaitEvent(s->d2h, s->ev_h2d[slot], 0)))
				goto cuda_fail;
			call = "cuMemcpyAsync";
			if ((r = stage(g, (k + NSLOT) * g->chunk,
				       chunk_len(g, k + NSLOT), slot, 1)))
				goto cuda_fail;
		}
	}
	return DR_OK;
cuda_fail:
	err = cu_fail(r, call, g->device);
fail:
	stage_drain(g, deadline);
	return err;
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
		r = cu.MemcpyAsync(dptr(s->pinned), dptr(op->sendbuf), sbytes, s->d2h);
	if (r == CUDA_SUCCESS)
		r = cu.EventRecord(s->ev_d2h[0], s->d2h);
	if (r != CUDA_SUCCESS)
		return cu_fail(r, "cuMemcpyAsync", g->device);
	if ((err = cu_wait_event(s->ev_d2h[0], g->device, deadline,
				 "a device-to-host copy")))
		return err;
	if ((err = h.run(&h)))
		return err;
	if (rbytes && op->buf)
		r = cu.MemcpyAsync(dptr(op->buf), dptr(s->pinned + sbytes), rbytes,
				   s->h2d);
	if (r != CUDA_SUCCESS)
		return cu_fail(r, "cuMemcpyAsync", g->device);
	return DR_OK;
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

dr_err dri_cuda_run_staged(dri_op *op)
{
	staging g;
	dr_err err;
	CUresult r;
	int64_t deadline;
	dr_group *grp = op->group ? op->group : dri_world();
	int coll = (int)op->id.coll;
	int chunked = coll == DRI_ALL_REDUCE || coll == DRI_BROADCAST ||
		coll == DRI_REDUCE || coll == DRI_ALL_GATHER ||
		coll == DRI_REDUCE_SCATTER;

	if (!cu_ready())
		return cu_unavailable();
	if (op->device < 0 || op->device >= cu.ndev)
		return dri_fail(DR_EINVAL, "buffer on unknown CUDA device %d",
				op->device);
	memset(&g, 0, sizeof g);
	g.op = op;
	g.device = op->device;
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
	if ((err = dri_cuda_check_buffers(op)))
		return err;
	deadline = deadline_after(op->timeout_ms);

	if ((err = cu_enter(g.device)))
		return err;
	if ((err = stager_get(g.device, &g.st)))
		goto leave;
	g.user = cu_user_stream(g.device);

	/* Order our copies after the user's earlier work on the buffers, and
	 * after the previous use of this stager's slots. */
	r = cu.EventRecord(g.st->ev_start, g.user);
	if (r == CUDA_SUCCESS)
		r = cu.StreamWaitEvent(g.st->d2h, g.st->ev_start, 0);
	if (r == CUDA_SUCCESS && g.st->used)
		r = cu.StreamWaitEvent(g.st->d2h, g.st->ev_done, 0);
	if (r != CUDA_SUCCESS) {
		err = cu_fail(r, "cuStreamWaitEvent", g.device);
		goto put;
	}

	if (chunked) {
		size_t factor = coll == DRI_ALL_GATHER ? (size_t)g.n :
			coll == DRI_REDUCE_SCATTER ? (size_t)g.n + 1 : 1;
		size_t net = coll == DRI_REDUCE_SCATTER ? (size_t)g.n : factor;
		size_t cb = cu.chunk_bytes;
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

	/* Later work on the user's stream sees the result; the next call on
	 * this stager waits for our last copies before reusing the slots. */
	r = cu.EventRecord(g.st->ev_done, g.st->h2d);
	if (r == CUDA_SUCCESS)
		r = cu.StreamWaitEvent(g.user, g.st->ev_done, 0);
	if (r == CUDA_SUCCESS)
		g.st->used = 1;
	else if (!err)
		err = cu_fail(r, "cuStreamWaitEvent", g.device);
put:
	stager_put(g.device, g.st);
leave:
	cu_leave();
	return err;
}
