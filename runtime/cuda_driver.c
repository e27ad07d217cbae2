/*
 * cuda_driver.c - the CUDA driver in libdistrun: found and loaded at run
 * time, its function table, the devices' primary contexts, what a pointer
 * is, and the public dr_cuda_* calls that are plain driver work (alloc,
 * free, memcpy, the stream to order against).  It knows nothing of
 * collectives; cuda_stage.c builds the staging of device buffers on it.
 *
 * One libdistrun binary serves machines with and without CUDA, so nothing
 * here links against CUDA or includes its headers: the driver API (libcuda,
 * installed with the driver, the same on every toolkit version) is
 * dlopen'ed once, on first need, and the functions used are declared in
 * cuda_driver.h with their ABI names.  The driver API rather than
 * libcudart because libcudart comes in one soname per toolkit version (and
 * programs built by nvcc link their own copy statically), while every CUDA
 * program on a machine goes through the same libcuda; the runtime API's
 * cudaStream_t is the driver's CUstream, and working in each device's
 * primary context shares the context the runtime API uses.
 *
 * Without CUDA (no library, cuInit fails, no device, or DISTRUN_CUDA=0)
 * dr_cuda_available() is 0 and every CUDA request fails with DR_ENOCUDA
 * "CUDA not available: <why>".  A program that never touched CUDA pays
 * nothing: dri_cuda_ptr_device() loads nothing (and calls no cuInit)
 * unless the process has loaded the driver itself, under either name
 * (libcuda.so.1, or libcuda.so as some loaders and JITs open it), since no
 * pointer can be device memory before that.  A child forked after the
 * parent used CUDA cannot use it (the driver does not survive fork): there
 * every request fails with DR_ENOCUDA saying so.
 *
 * Contexts: a device's primary context is retained when libdistrun first
 * works on that device, never for a pointer query (retaining device 0's in
 * every rank of an 8-GPU node costs each rank hundreds of MiB there).  A
 * context reset since (cudaDeviceReset) is noticed, retained again, and the
 * device's generation advances so that streams and events made before are
 * never used again.
 *
 * Environment: DISTRUN_CUDA=0 turns CUDA off; DISTRUN_CUDA_LIB names
 * another driver library (tests: the toolkit's stub, a fake).
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_driver.h"

struct dri_cu_api dri_cu;

typedef struct {
	CUevent ev;
	unsigned gen;
} pooled_event;

typedef struct {
	pthread_mutex_t lock;
	CUcontext ctx;      /* primary context, retained once, kept */
	unsigned gen;       /* advanced when the context was reset */
	CUstream stream;    /* dr_cuda_set_stream's; NULL = legacy default */
	pooled_event *events;
	int nevents, cap_events;
} cu_device;

enum { CU_UNLOADED, CU_OK, CU_FAILED };

static struct {
	void *lib;
	int ndev;
	cu_device *dev;
	char why[640];
} cu;

static atomic_int cu_state = CU_UNLOADED;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
/* Set in the child of a fork after CUDA was loaded (pthread_atfork). */
static volatile sig_atomic_t cu_forked;
/* Where the process itself loaded the driver, seen in the link map. */
static pthread_mutex_t found_mu = PTHREAD_MUTEX_INITIALIZER;
static char found_path[512];

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
	if (dri_cu.GetErrorName && dri_cu.GetErrorName(r, &name) != CUDA_SUCCESS)
		name = NULL;
	if (dri_cu.GetErrorString && dri_cu.GetErrorString(r, &desc) != CUDA_SUCCESS)
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

dr_err dri_cu_fail(CUresult r, const char *call, int device)
{
	return dri_fail(DR_ECUDA, "%s on cuda:%d failed: %s", call, device,
			cu_errstr(r));
}

int dri_cu_dead(CUresult r)
{
	return r == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
		r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_INVALID_HANDLE;
}

/* ----------------------------------------------- finding the library */

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

/* The driver under any of its names, or the library DISTRUN_CUDA_LIB
 * names. */
static int is_driver_name(const char *base)
{
	const char *want = getenv("DISTRUN_CUDA_LIB");
	if (want && *want)
		return !strcmp(base, base_name(want));
	return !strcmp(base, "libcuda.so") || !strncmp(base, "libcuda.so.", 11);
}

/* Whether the process has loaded the driver library (through the CUDA
 * runtime, or us), for dri_cuda_ptr_device, which every collective calls.
 * Not dlopen(RTLD_NOLOAD): for a library that is not loaded it searches
 * the disk, about ten system calls a time.  dl_iterate_phdr walks the
 * loaded objects in memory, and its count of objects ever loaded
 * (dlpi_adds, on the first object) tells when nothing was loaded since the
 * last walk, so the usual answer costs one callback. */
struct lib_scan {
	unsigned long long adds;  /* dlpi_adds seen */
	int first_only, found;
};

static int lib_scan_one(struct dl_phdr_info *info, size_t size, void *data)
{
	struct lib_scan *sc = data;
	if (size < offsetof(struct dl_phdr_info, dlpi_subs))
		return 1; /* too old a libc to tell: the caller walks in full */
	sc->adds = info->dlpi_adds;
	if (sc->first_only)
		return 1;
	if (info->dlpi_name && *info->dlpi_name &&
	    is_driver_name(base_name(info->dlpi_name))) {
		pthread_mutex_lock(&found_mu);
		snprintf(found_path, sizeof found_path, "%s", info->dlpi_name);
		pthread_mutex_unlock(&found_mu);
		sc->found = 1;
		return 1;
	}
	return 0;
}

static int cu_lib_in_process(void)
{
	static atomic_ullong clean_adds; /* dlpi_adds of the last empty walk */
	struct lib_scan sc = { 0, 1, 0 };

	dl_iterate_phdr(lib_scan_one, &sc);
	if (sc.adds && sc.adds == atomic_load(&clean_adds))
		return 0;
	sc.first_only = 0;
	dl_iterate_phdr(lib_scan_one, &sc);
	if (!sc.found)
		atomic_store(&clean_adds, sc.adds);
	return sc.found;
}

/* ------------------------------------------------------------ loading */

static void cu_on_fork_child(void)
{
	cu_forked = 1;
}

/* Opens the driver: DISTRUN_CUDA_LIB, else the one the process loaded,
 * else libcuda.so.1, else libcuda.so. */
static void *cu_open(char *tried, size_t size)
{
	const char *want = getenv("DISTRUN_CUDA_LIB");
	char path[sizeof found_path];
	void *h;

	if (want && *want) {
		snprintf(tried, size, "%s", want);
		return dlopen(want, RTLD_NOW | RTLD_LOCAL);
	}
	cu_lib_in_process();
	pthread_mutex_lock(&found_mu);
	snprintf(path, sizeof path, "%s", found_path);
	pthread_mutex_unlock(&found_mu);
	if (*path && (h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(tried, size, "%s", path);
		return h;
	}
	snprintf(tried, size, "libcuda.so.1");
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h && (h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL)))
		snprintf(tried, size, "libcuda.so");
	return h;
}

static void cu_load(void)
{
	const char *off = getenv("DISTRUN_CUDA");
	char lib[sizeof found_path];
	int n = 0;
	CUresult r;

	if (off && (!strcmp(off, "0") || !strcmp(off, "off"))) {
		snprintf(cu.why, sizeof cu.why, "disabled by DISTRUN_CUDA=%s", off);
		goto fail;
	}
	cu.lib = cu_open(lib, sizeof lib);
	if (!cu.lib) {
		const char *e = dlerror();
		/* dlerror names the library and the reason. */
		snprintf(cu.why, sizeof cu.why, "cannot load the CUDA driver: %s",
			 e ? e : lib);
		goto fail;
	}
#define CU_XX_SYM(name, sym, args)                                            \
	*(void **)&dri_cu.name = dlsym(cu.lib, sym);                          \
	if (!dri_cu.name) {                                                   \
		snprintf(cu.why, sizeof cu.why,                               \
			 "%.500s has no %s (driver too old?)", lib, sym);      \
		goto fail;                                                    \
	}
	DRI_CU_FUNCS(CU_XX_SYM)
#undef CU_XX_SYM
	r = dri_cu.Init(0);
	if (r != CUDA_SUCCESS) {
		snprintf(cu.why, sizeof cu.why, "cuInit failed: %s", cu_errstr(r));
		goto fail;
	}
	r = dri_cu.DeviceGetCount(&n);
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
		if (pthread_mutex_init(&cu.dev[i].lock, NULL)) {
			snprintf(cu.why, sizeof cu.why, "cannot make a lock");
			goto fail;
		}
	cu.ndev = n;
	/* Without the handler a forked child would use the parent's
	 * driver state, which the driver does not allow. */
	if (pthread_atfork(NULL, NULL, cu_on_fork_child)) {
		snprintf(cu.why, sizeof cu.why, "cannot register the fork "
			 "handler (pthread_atfork: out of memory)");
		goto fail;
	}
	atomic_store(&cu_state, CU_OK);
	return;
fail:
	/* Keep the library loaded even when unusable: unloading a driver that
	 * may have started threads is riskier than a mapping we never use. */
	atomic_store(&cu_state, CU_FAILED);
}

int dri_cu_ready(void)
{
	pthread_once(&cu_once, cu_load);
	return atomic_load(&cu_state) == CU_OK && !cu_forked;
}

dr_err dri_cu_unavailable(void)
{
	if (cu_forked && atomic_load(&cu_state) == CU_OK)
		return dri_fail(DR_ENOCUDA, "CUDA not available: CUDA state was "
				"inherited across fork (the driver cannot be used "
				"in a child of a process that used it: exec the "
				"child, or start CUDA only after fork)");
	return dri_fail(DR_ENOCUDA, "CUDA not available: %s", cu.why);
}

int dri_cu_ndev(void)
{
	return cu.ndev;
}

/* ----------------------------------------------------------- contexts */

/* (Re)takes the primary context of device; d->lock held. */
static CUresult retain_locked(cu_device *d, int device)
{
	CUdevice h;
	CUcontext c = NULL;
	CUresult r = dri_cu.DeviceGet(&h, device);
	if (r == CUDA_SUCCESS)
		r = dri_cu.DevicePrimaryCtxRetain(&c, h);
	if (r != CUDA_SUCCESS)
		return r;
	if (d->ctx)
		d->gen++; /* a reset context: what was made in it is gone */
	d->ctx = c;
	return CUDA_SUCCESS;
}

dr_err dri_cu_enter(int device)
{
	cu_device *d = &cu.dev[device];
	CUresult r = CUDA_SUCCESS;
	CUcontext ctx;
	unsigned flags = 0;
	int active = 1;

	pthread_mutex_lock(&d->lock);
	/* A context we retained is active unless it was reset since. */
	if (d->ctx && dri_cu.DevicePrimaryCtxGetState(device, &flags, &active) ==
	    CUDA_SUCCESS && !active)
		r = retain_locked(d, device);
	else if (!d->ctx)
		r = retain_locked(d, device);
	ctx = d->ctx;
	pthread_mutex_unlock(&d->lock);
	if (r != CUDA_SUCCESS)
		return dri_cu_fail(r, "cuDevicePrimaryCtxRetain", device);
	r = dri_cu.CtxPushCurrent(ctx);
	if (r != CUDA_SUCCESS)
		return dri_cu_fail(r, "cuCtxPushCurrent", device);
	return DR_OK;
}

void dri_cu_leave(void)
{
	CUcontext c;
	dri_cu.CtxPopCurrent(&c);
}

unsigned dri_cu_generation(int device)
{
	cu_device *d = &cu.dev[device];
	pthread_mutex_lock(&d->lock);
	unsigned g = d->gen;
	pthread_mutex_unlock(&d->lock);
	return g;
}

void dri_cu_context_lost(int device, unsigned gen)
{
	cu_device *d = &cu.dev[device];
	pthread_mutex_lock(&d->lock);
	if (d->gen == gen)
		d->gen++;
	pthread_mutex_unlock(&d->lock);
}

CUcontext dri_cu_context(int device)
{
	cu_device *d = &cu.dev[device];
	pthread_mutex_lock(&d->lock);
	CUcontext c = d->ctx;
	pthread_mutex_unlock(&d->lock);
	return c;
}

CUstream dri_cu_user_stream(int device)
{
	cu_device *d = &cu.dev[device];
	pthread_mutex_lock(&d->lock);
	CUstream s = d->stream ? d->stream : CU_STREAM_LEGACY;
	pthread_mutex_unlock(&d->lock);
	return s;
}

/* ------------------------------------------------------------- events */

dr_err dri_cu_event_get(int device, CUevent *ev, unsigned *gen)
{
	cu_device *d = &cu.dev[device];
	CUresult r;

	pthread_mutex_lock(&d->lock);
	*gen = d->gen;
	while (d->nevents > 0) {
		pooled_event pe = d->events[--d->nevents];
		/* An event of a reset context is dead: dropped (nothing can
		 * destroy it any more). */
		if (pe.gen == d->gen) {
			pthread_mutex_unlock(&d->lock);
			*ev = pe.ev;
			return DR_OK;
		}
	}
	pthread_mutex_unlock(&d->lock);
	r = dri_cu.EventCreate(ev, CU_EVENT_DISABLE_TIMING);
	return r == CUDA_SUCCESS ? DR_OK : dri_cu_fail(r, "cuEventCreate", device);
}

void dri_cu_event_put(int device, CUevent ev, unsigned gen)
{
	cu_device *d = &cu.dev[device];

	pthread_mutex_lock(&d->lock);
	if (gen == d->gen) {
		if (d->nevents == d->cap_events) {
			int cap = d->cap_events ? 2 * d->cap_events : 8;
			pooled_event *p = realloc(d->events, (size_t)cap * sizeof *p);
			if (p) {
				d->events = p;
				d->cap_events = cap;
			}
		}
		/* (out of memory: the event is dropped, a small leak) */
		if (d->nevents < d->cap_events)
			d->events[d->nevents++] = (pooled_event){ ev, gen };
	}
	pthread_mutex_unlock(&d->lock);
}

dr_err dri_cu_record(int device, CUstream s, CUevent *ev, unsigned *gen)
{
	CUresult r = CUDA_SUCCESS;
	dr_err err;

	for (int attempt = 0; attempt < 2; attempt++) {
		if ((err = dri_cu_event_get(device, ev, gen)))
			return err;
		r = dri_cu.EventRecord(*ev, s);
		if (r == CUDA_SUCCESS)
			return DR_OK;
		if (!dri_cu_dead(r))
			break;
		/* A reset context: drop what the pools hold, try again. */
		dri_cu_context_lost(device, *gen);
	}
	dri_cu_event_put(device, *ev, *gen);
	*ev = NULL;
	return dri_cu_fail(r, "cuEventRecord on the selected stream", device);
}

/* Polls, yielding at first (a copy of a chunk takes tens of microseconds),
 * then sleeping with a growing pause so a long kernel costs no CPU. */
dr_err dri_cu_wait_event(CUevent ev, int device, int64_t deadline,
			 const char *what)
{
	long pause_ns = 2000;
	for (int i = 0;; i++) {
		CUresult r = dri_cu.EventQuery(ev);
		if (r == CUDA_SUCCESS)
			return DR_OK;
		if (r != CUDA_ERROR_NOT_READY)
			return dri_cu_fail(r, "cuEventQuery", device);
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

/* One cuCtxSynchronize on a helper thread; whoever of the two finishes
 * last frees it, so a waiter that gives up leaves nothing dangling. */
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	CUcontext ctx;
	CUresult r;
	int done, refs;
} ctx_sync;

static void ctx_sync_unref(ctx_sync *s)
{
	pthread_mutex_lock(&s->mu);
	int left = --s->refs;
	pthread_mutex_unlock(&s->mu);
	if (!left) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		free(s);
	}
}

static void *ctx_sync_main(void *arg)
{
	ctx_sync *s = arg;
	CUcontext c;
	CUresult r = dri_cu.CtxPushCurrent(s->ctx);
	if (r == CUDA_SUCCESS) {
		r = dri_cu.CtxSynchronize();
		dri_cu.CtxPopCurrent(&c);
	}
	pthread_mutex_lock(&s->mu);
	s->r = r;
	s->done = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	ctx_sync_unref(s);
	return NULL;
}

dr_err dri_cu_sync_context(int device, int64_t deadline)
{
	ctx_sync *s;
	pthread_t t;
	pthread_attr_t attr;
	dr_err err;

	if ((err = dri_cu_enter(device)))
		return err;
	dri_cu_leave();
	s = calloc(1, sizeof *s);
	if (!s)
		return dri_fail(DR_ENOMEM, "out of memory");
	if (pthread_mutex_init(&s->mu, NULL)) {
		free(s);
		return dri_fail(DR_ESYS, "cannot make a lock to synchronise "
				"cuda:%d", device);
	}
	if (pthread_cond_init(&s->cv, NULL)) {
		pthread_mutex_destroy(&s->mu);
		free(s);
		return dri_fail(DR_ESYS, "cannot make a condition to "
				"synchronise cuda:%d", device);
	}
	s->ctx = dri_cu_context(device);
	s->refs = 2;
	if (pthread_attr_init(&attr)) {
		s->refs = 1;
		ctx_sync_unref(s);
		return dri_fail(DR_ESYS, "cannot start a thread to synchronise "
				"cuda:%d", device);
	}
	if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) ||
	    dri_thread_start(&t, &attr, ctx_sync_main, s)) {
		pthread_attr_destroy(&attr);
		s->refs = 1;
		ctx_sync_unref(s);
		return dri_fail(DR_ESYS, "cannot start a thread to synchronise cuda:%d",
				device);
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_lock(&s->mu);
	while (!s->done && dri_now_ms() < deadline)
		dri_cond_wait_ms(&s->cv, &s->mu, deadline - dri_now_ms());
	int done = s->done;
	CUresult r = s->r;
	pthread_mutex_unlock(&s->mu);
	ctx_sync_unref(s);
	if (!done)
		return dri_fail(DR_ETIMEDOUT, "timed out waiting for the work "
				"queued on cuda:%d (cuCtxSynchronize)", device);
	return r == CUDA_SUCCESS ? DR_OK : dri_cu_fail(r, "cuCtxSynchronize", device);
}

/* --------------------------------------------------- what a pointer is */

static CUresult query_ptr(const void *p, unsigned *memtype, int *ordinal,
			  unsigned *managed)
{
	int attrs[3] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
			 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
			 CU_POINTER_ATTRIBUTE_IS_MANAGED };
	void *data[3] = { memtype, ordinal, managed };
	*memtype = 0;
	*ordinal = -1;
	*managed = 0;
	return dri_cu.PointerGetAttributes(3, attrs, data, dri_cu_ptr(p));
}

int dri_cu_ptr_device(const void *p)
{
	unsigned memtype, managed;
	int ordinal;
	CUresult r = query_ptr(p, &memtype, &ordinal, &managed);

	/* Unlike cuPointerGetAttribute, the plural form succeeds on memory
	 * CUDA does not know (plain host memory), leaving memtype 0, and with
	 * unified addressing needs no current context.  Should a driver want
	 * one, ask again in a primary context that is already active (any
	 * will do: addresses are unified), never one retained just for this;
	 * with none active there can be no device memory in them. */
	if (r != CUDA_SUCCESS) {
		CUcontext c = NULL, popped;
		if (dri_cu.CtxGetCurrent(&c) == CUDA_SUCCESS && c)
			return -1; /* it failed in a context: not ours */
		for (int i = 0; i < cu.ndev && r != CUDA_SUCCESS; i++) {
			unsigned flags = 0;
			int active = 0;
			c = dri_cu_context(i);
			if (!c && (dri_cu.DevicePrimaryCtxGetState(i, &flags, &active) !=
				   CUDA_SUCCESS || !active))
				continue;
			if (!c && dri_cu_enter(i) != DR_OK)
				continue;
			if (c && dri_cu.CtxPushCurrent(c) != CUDA_SUCCESS)
				continue;
			r = query_ptr(p, &memtype, &ordinal, &managed);
			dri_cu.CtxPopCurrent(&popped);
		}
		if (r != CUDA_SUCCESS)
			return -1;
	}
	if (ordinal < 0 || ordinal >= cu.ndev)
		return -1;
	return memtype == CU_MEMORYTYPE_DEVICE || managed ? ordinal : -1;
}

/* The start of the process's heap, the brk area (/proc/self/stat's
 * start_brk, fixed at exec): 0 until read, 1 where it cannot be. */
static uintptr_t brk_start(void)
{
	static atomic_uintptr_t lo;
	uintptr_t v = atomic_load_explicit(&lo, memory_order_relaxed);
	char buf[1024], *s;
	unsigned long long x = 0;
	FILE *f;
	int field = 2, ok = 0;

	if (v)
		return v;
	if ((f = fopen("/proc/self/stat", "re"))) {
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		buf[n] = 0;
		fclose(f);
		/* Field 2 is the command in parentheses, which may hold
		 * anything; start_brk is field 47. */
		for (s = strrchr(buf, ')'); s && *s && field < 47; s++)
			if (*s == ' ')
				field++;
		ok = s && field == 47 && sscanf(s, "%llu", &x) == 1 && x > 1;
	}
	/* A break below it is not this process's heap (valgrind keeps the
	 * program's elsewhere): unusable. */
	v = ok && (uintptr_t)sbrk(0) >= (uintptr_t)x ? (uintptr_t)x : 1;
	atomic_store_explicit(&lo, v, memory_order_relaxed);
	return v;
}

/* In the heap: from start_brk to the break now. */
static int in_brk(uintptr_t a)
{
	uintptr_t lo = brk_start();
	void *end;

	if (lo <= 1 || a < lo || (end = sbrk(0)) == (void *)-1)
		return 0;
	return a < (uintptr_t)end;
}

/* The calling thread's stack (pthread_getattr_np, once a thread):
 * [lo, hi), hi 0 until read, 1 where it cannot be. */
static _Thread_local uintptr_t stack_lo, stack_hi;

static void stack_read(void)
{
	pthread_attr_t at;
	void *base;
	size_t size;

	stack_hi = 1;
	if (!pthread_getattr_np(pthread_self(), &at)) {
		if (!pthread_attr_getstack(&at, &base, &size)) {
			stack_lo = (uintptr_t)base;
			stack_hi = stack_lo + size;
		}
		pthread_attr_destroy(&at);
	}
}

/* Whether p is host memory that no device or managed allocation can
 * share an address with: the live part of the calling thread's stack
 * (from this frame up, where the caller's buffers are; only while the
 * frame is on that stack, not on one a coroutine switched to), or the
 * heap as it is now.  Small buffers are mostly in one of them, and this
 * answers for them in a few ns what the loader's list (no driver
 * loaded) or the driver's pointer query (one loaded) answers in tens or
 * hundreds. */
static int in_host_only(const void *p)
{
	uintptr_t a = (uintptr_t)p, fr = (uintptr_t)__builtin_frame_address(0);

	if (!stack_hi)
		stack_read();
	if (fr >= stack_lo && fr < stack_hi && a >= fr && a < stack_hi)
		return 1;
	return in_brk(a);
}

void dri_cuda_ptr_prepare(void)
{
	if (!stack_hi)
		stack_read();
	(void)brk_start();
	if (atomic_load(&cu_state) == CU_UNLOADED)
		(void)cu_lib_in_process();
}

int dri_cuda_ptr_prepared(void)
{
	return stack_hi != 0 && brk_start() != 0;
}

int dri_cuda_ptr_device(const void *p)
{
	int state = atomic_load(&cu_state);

	if (!p || state == CU_FAILED || cu_forked || in_host_only(p))
		return -1;
	if (state == CU_UNLOADED && !cu_lib_in_process())
		return -1;
	if (!dri_cu_ready())
		return -1;
	return dri_cu_ptr_device(p);
}

/* ------------------------------------------------------------- public */

int dr_cuda_available(void)
{
	return dri_cu_ready();
}

int dr_cuda_device_count(void)
{
	return dri_cu_ready() ? cu.ndev : 0;
}

static dr_err check_device(const char *call, int device)
{
	if (device < 0 || device >= cu.ndev)
		return dri_fail(DR_EINVAL, "%s: device %d out of range (%d CUDA "
				"device%s)", call, device, cu.ndev,
				cu.ndev == 1 ? "" : "s");
	return DR_OK;
}

dr_err dr_cuda_set_stream(int device, void *stream)
{
	CUstream s = stream;
	CUcontext c = NULL;
	CUresult r = CUDA_SUCCESS;
	dr_err err;

	if (!dri_cu_ready())
		return dri_cu_unavailable();
	if ((err = check_device("dr_cuda_set_stream", device)))
		return err;
	/* A stream of another context would fail only at first use, in the
	 * middle of a collective: refuse it now.  The implicit streams (0x1,
	 * 0x2) exist in every context. */
	if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
		if ((err = dri_cu_enter(device)))
			return err;
		r = dri_cu.StreamGetCtx(s, &c);
		dri_cu_leave();
		if (r != CUDA_SUCCESS)
			return dri_fail(DR_EINVAL, "dr_cuda_set_stream: %p is not a "
					"usable stream: %s", stream, cu_errstr(r));
		if (c != dri_cu_context(device))
			return dri_fail(DR_EINVAL, "dr_cuda_set_stream: stream %p "
					"belongs to another context than cuda:%d's "
					"primary context (the one the CUDA runtime "
					"uses)", stream, device);
	}
	pthread_mutex_lock(&cu.dev[device].lock);
	cu.dev[device].stream = s;
	pthread_mutex_unlock(&cu.dev[device].lock);
	return DR_OK;
}

dr_err dr_cuda_alloc(int device, size_t bytes, void **ptr)
{
	CUdeviceptr p = 0;
	CUresult r;
	dr_err err;

	if (!ptr)
		return dri_fail(DR_EINVAL, "dr_cuda_alloc: ptr is NULL");
	*ptr = NULL;
	if (!dri_cu_ready())
		return dri_cu_unavailable();
	if ((err = check_device("dr_cuda_alloc", device)))
		return err;
	if ((err = dri_cu_enter(device)))
		return err;
	r = dri_cu.MemAlloc(&p, bytes ? bytes : 1);
	dri_cu_leave();
	if (r != CUDA_SUCCESS)
		return dri_cu_fail(r, "cuMemAlloc", device);
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
	if (!dri_cu_ready())
		return dri_cu_unavailable();
	device = dri_cu_ptr_device(ptr);
	if (device < 0)
		return dri_fail(DR_EINVAL, "dr_cuda_free: %p is not CUDA device memory",
				ptr);
	if ((err = dri_cu_enter(device)))
		return err;
	r = dri_cu.MemFree(dri_cu_ptr(ptr));
	dri_cu_leave();
	return r == CUDA_SUCCESS ? DR_OK : dri_cu_fail(r, "cuMemFree", device);
}

dr_err dr_cuda_memcpy(void *dst, const void *src, size_t bytes)
{
	CUresult r;
	CUevent ev;
	unsigned gen;
	dr_err err;
	int device;

	if (!bytes)
		return DR_OK;
	if (!dst || !src)
		return dri_fail(DR_EINVAL, "dr_cuda_memcpy: %s is NULL",
				dst ? "src" : "dst");
	if (!dri_cu_ready())
		return dri_cu_unavailable();
	device = dri_cu_ptr_device(dst);
	if (device < 0)
		device = dri_cu_ptr_device(src);
	if (device < 0) {
		memmove(dst, src, bytes);
		return DR_OK;
	}
	if ((err = dri_cu_enter(device)))
		return err;
	/* cuMemcpy returns before the copy is done for device to device and
	 * pageable host to device; this call promises it is done: wait for
	 * the legacy stream, on which cuMemcpy runs, up to the timeout. */
	r = dri_cu.Memcpy(dri_cu_ptr(dst), dri_cu_ptr(src), bytes);
	if (r != CUDA_SUCCESS) {
		err = dri_cu_fail(r, "cuMemcpy", device);
		goto out;
	}
	if ((err = dri_cu_record(device, CU_STREAM_LEGACY, &ev, &gen)))
		goto out;
	err = dri_cu_wait_event(ev, device, dri_now_ms() + dri_timeout_ms(),
				"dr_cuda_memcpy's copy");
	dri_cu_event_put(device, ev, gen);
out:
	dri_cu_leave();
	return err;
}
