/*
 * test_cuda.c - unit tests of runtime/cuda_driver.c and cuda_stage.c that
 * need no GPU: how the driver library is found (or not), what every CUDA
 * request answers without it, and against the strict fake driver
 * (build/fake/libcuda.so, testdata/fake_libcuda.c) what needs no process
 * group: stream checks, fork, the staging's error paths.  Each test runs
 * in its own forked process, so each sees the loader fresh (its
 * pthread_once) with the environment it sets.
 *
 * On a machine with CUDA the "not available" tests pass trivially (they
 * check only what holds there too); the device paths on a real GPU are
 * the GPU suite's (scripts/test-gpu).
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "cuda_stage.h"
#include "runner.h"

/* The toolkit's stub driver: it exports every driver function, and its
 * cuInit fails, which exercises the whole symbol table. */
#define STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

static int have_stub(void)
{
	if (access(STUB, R_OK) == 0)
		return 1;
	fprintf(stderr, "note: %s absent, test reduced\n", STUB);
	return 0;
}

/* "CUDA not available: <why>" from a request that needs CUDA. */
static const char *why_unavailable(void)
{
	dr_err err = dr_cuda_set_stream(0, NULL);
	return err == DR_ENOCUDA ? dr_last_error() : "";
}

static int test_unavailable_answers(void)
{
	void *p = (void *)1;
	int dev = 0;

	if (dr_cuda_available()) {
		CHECK(dr_cuda_device_count() > 0);
		return 0;
	}
	CHECK(dr_cuda_device_count() == 0);
	CHECK(dr_cuda_set_stream(0, NULL) == DR_ENOCUDA);
	CHECKF(!strncmp(dr_last_error(), "CUDA not available: ", 20), "%s",
	       dr_last_error());
	CHECK(dr_cuda_alloc(0, 16, &p) == DR_ENOCUDA);
	CHECK(p == NULL);
	CHECK(dr_cuda_memcpy(&dev, &dev, sizeof dev) == DR_ENOCUDA);
	CHECK(dr_cuda_free(NULL) == DR_OK);
	CHECK(dr_cuda_free(&dev) == DR_ENOCUDA);
	dri_op op;
	memset(&op, 0, sizeof op);
	CHECK(dri_cuda_barrier_op(&op, "dr_barrier", &dev, 1, 0) == DR_ENOCUDA);
	CHECKF(!strncmp(dr_last_error(), "dr_barrier: device_ids given but "
			"CUDA not available: ", 52), "%s", dr_last_error());
	CHECK(op.start == NULL && op.priv == NULL);
	return 0;
}

static int test_run_staged_without_cuda(void)
{
	dri_op op;
	int32_t x = 1;

	if (dr_cuda_available())
		return 0;
	memset(&op, 0, sizeof op);
	op.id.coll = DRI_ALL_REDUCE;
	op.buf = &x;
	op.count = 1;
	op.dtype = DR_INT32;
	op.device = 0;
	dri_cuda_stage_op(&op);
	CHECK(op.start && op.release && op.run != op.host_run);
	CHECK(op.start(&op, 0) == DR_ENOCUDA);
	CHECK(strstr(dr_last_error(), "CUDA not available"));
	op.release(&op);
	return 0;
}

static int test_host_pointers_are_host(void)
{
	int on_stack = 0;
	void *on_heap = malloc(64);
	CHECK(dri_cuda_ptr_device(NULL) == -1);
	CHECK(dri_cuda_ptr_device(&on_stack) == -1);
	CHECK(dri_cuda_ptr_device(on_heap) == -1);
	free(on_heap);
	return 0;
}

/* A program that has not loaded the driver pays nothing for the pointer
 * checks every collective makes: the driver is not even loaded. */
static int test_ptr_device_does_not_load_driver(void)
{
	int x = 0;
	if (!have_stub())
		return 0;
	setenv("DISTRUN_CUDA_LIB", STUB, 1);
	CHECK(dlopen(STUB, RTLD_NOW | RTLD_NOLOAD) == NULL);
	for (int i = 0; i < 1000; i++)
		CHECK(dri_cuda_ptr_device(&x) == -1);
	CHECK(dlopen(STUB, RTLD_NOW | RTLD_NOLOAD) == NULL);
	/* Asking for CUDA does load it. */
	CHECK(!dr_cuda_available());
	void *h = dlopen(STUB, RTLD_NOW | RTLD_NOLOAD);
	CHECK(h != NULL);
	dlclose(h);
	return 0;
}

/* Once the process has loaded the library, pointers are checked with the
 * driver (here: its cuInit fails, so they are host pointers). */
static int test_ptr_device_with_library_loaded(void)
{
	int x = 0;
	if (!have_stub())
		return 0;
	setenv("DISTRUN_CUDA_LIB", STUB, 1);
	void *h = dlopen(STUB, RTLD_NOW);
	CHECK(h != NULL);
	CHECK(dri_cuda_ptr_device(&x) == -1);
	CHECKF(strstr(why_unavailable(), "cuInit failed"), "%s", why_unavailable());
	return 0;
}

static int test_stub_driver_every_symbol(void)
{
	if (!have_stub())
		return 0;
	setenv("DISTRUN_CUDA_LIB", STUB, 1);
	CHECK(!dr_cuda_available());
	/* Every symbol resolved: the failure is cuInit's, named. */
	CHECKF(strstr(why_unavailable(), "CUDA not available: cuInit failed: CUDA_ERROR"),
	       "%s", why_unavailable());
	return 0;
}

static int test_missing_library(void)
{
	setenv("DISTRUN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
	CHECK(!dr_cuda_available());
	CHECKF(strstr(why_unavailable(),
		      "CUDA not available: cannot load the CUDA driver: "
		      "/nonexistent/libcuda.so.1: "),
	       "%s", why_unavailable());
	return 0;
}

static int test_library_without_driver_api(void)
{
	setenv("DISTRUN_CUDA_LIB", "libm.so.6", 1);
	CHECK(!dr_cuda_available());
	CHECKF(strstr(why_unavailable(), "libm.so.6 has no cuInit"), "%s",
	       why_unavailable());
	return 0;
}

static int test_disabled_by_environment(void)
{
	setenv("DISTRUN_CUDA", "0", 1);
	CHECK(!dr_cuda_available());
	CHECK(dr_cuda_device_count() == 0);
	CHECKF(!strcmp(why_unavailable(), "CUDA not available: disabled by DISTRUN_CUDA=0"),
	       "%s", why_unavailable());
	return 0;
}

/* A call whose buffers are not all where op->device says is refused with
 * a message naming the buffer; buffers the rank does not use (a
 * non-root's gather recvbuf) and NULL ones are not looked at. */
static int test_check_buffers_names_the_odd_one(void)
{
	dri_op op;
	int32_t a = 0, b = 0;

	if (dr_cuda_available())
		return 0;
	memset(&op, 0, sizeof op);
	op.id.coll = DRI_GATHER;
	op.sendbuf = &a;
	op.buf = &b;
	op.count = 1;
	op.dtype = DR_INT32;
	op.root = 5; /* no group: not this rank */
	op.device = 0;
	CHECK(dri_cuda_check_buffers(&op) == DR_EINVAL);
	CHECKF(!strcmp(dr_last_error(), "gather: sendbuf is on the host but "
		       "the other buffer is on cuda:0; both must be on the "
		       "same device"), "%s", dr_last_error());
	op.sendbuf = NULL;
	CHECK(dri_cuda_check_buffers(&op) == DR_OK);
	op.id.coll = DRI_ALL_GATHER;
	CHECK(dri_cuda_check_buffers(&op) == DR_EINVAL);
	CHECKF(strstr(dr_last_error(), "all_gather: recvbuf is on the host"),
	       "%s", dr_last_error());
	return 0;
}

/* ------------------------------------------------- on the fake driver */

static char fake_path[PATH_MAX + 32];

/* build/fake/libcuda.so beside this build/unit/test_cuda, named by
 * DISTRUN_CUDA_LIB, loaded strict; NULL (test reduced) if absent. */
static void *load_fake(int devices)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	char *slash;
	void *h;

	if (n <= 0)
		return NULL;
	exe[n] = 0;
	if (!(slash = strrchr(exe, '/')))
		return NULL;
	*slash = 0;
	snprintf(fake_path, sizeof fake_path, "%s/../fake/libcuda.so", exe);
	if (access(fake_path, R_OK)) {
		fprintf(stderr, "note: %s absent, test reduced\n", fake_path);
		return NULL;
	}
	char nd[16];
	snprintf(nd, sizeof nd, "%d", devices);
	setenv("FAKE_CUDA_DEVICES", nd, 1);
	setenv("FAKE_CUDA_STRICT", "1", 1);
	setenv("DISTRUN_CUDA_LIB", fake_path, 1);
	h = dlopen(fake_path, RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		fprintf(stderr, "note: %s: %s\n", fake_path, dlerror());
	return h;
}

#define FAKE_FN(h, type, name) ((type)dlsym((h), (name)))

/* A program that has not loaded the driver pays nothing for the pointer
 * checks every collective makes, whatever name it would load it by. */
static int test_ptr_device_leaves_fake_unloaded(void)
{
	int x = 0;
	if (!load_fake(1))
		return 0;
	/* load_fake loaded it for the others: start again without. */
	void *h = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
	dlclose(h);
	dlclose(h);
	if (dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD)) {
		fprintf(stderr, "note: cannot unload the fake, test reduced\n");
		return 0;
	}
	/* a buffer of its own mapping: neither stack nor heap, looked up */
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	for (int i = 0; i < 1000; i++)
		CHECK(dri_cuda_ptr_device(&x) == -1 && dri_cuda_ptr_device(p) == -1);
	CHECK(dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD) == NULL);
	unsetenv("DISTRUN_CUDA_LIB");
	for (int i = 0; i < 1000; i++)
		CHECK(dri_cuda_ptr_device(&x) == -1 && dri_cuda_ptr_device(p) == -1);
	munmap(p, 4096);
	CHECK(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL);
	CHECK(dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD) == NULL);
	return 0;
}

/* Buffers on the caller's stack or in the heap are host memory without
 * asking: no pointer query, no walk of the loaded objects, at every
 * small collective.  Device memory, managed memory and host memory of a
 * mapping of its own are still asked about. */
static int test_stack_and_heap_without_query(void)
{
	void *h = load_fake(1), *ctx = NULL, *popped;
	unsigned long long d = 0, m = 0;
	float x = 0, *heap = malloc(64), *map;
	if (!h || !heap) {
		free(heap);
		return 0;
	}
	int (*queries)(void) = FAKE_FN(h, int (*)(void), "fake_cuda_ptr_queries");
	CHECK(dr_cuda_available() && queries);
	CHECK(FAKE_FN(h, int (*)(void **, int), "cuDevicePrimaryCtxRetain")(&ctx, 0) == 0);
	CHECK(FAKE_FN(h, int (*)(void *), "cuCtxPushCurrent_v2")(ctx) == 0);
	CHECK(FAKE_FN(h, int (*)(unsigned long long *, size_t), "cuMemAlloc_v2")(&d, 64) == 0);
	CHECK(FAKE_FN(h, int (*)(unsigned long long *, size_t, unsigned),
		      "cuMemAllocManaged")(&m, 64, 1) == 0);
	FAKE_FN(h, int (*)(void **), "cuCtxPopCurrent_v2")(&popped);
	/* (a heap elsewhere than the break, as under valgrind or a
	 * sanitizer's allocator, is looked up as any mapping is) */
	int brk_heap = (uintptr_t)heap < (uintptr_t)sbrk(0);
	int q0 = queries();
	for (int i = 0; i < 100; i++) {
		CHECK(dri_cuda_ptr_device(&x) == -1);
		CHECK(dri_cuda_ptr_device(heap + 3) == -1);
	}
	CHECKF(queries() == q0 + (brk_heap ? 0 : 100), "%d pointer queries for "
	       "the stack and the heap", queries() - q0);
	CHECK(dri_cuda_ptr_device((void *)(uintptr_t)d) == 0);
	CHECK(queries() > q0);
	q0 = queries();
	dri_cuda_ptr_device((void *)(uintptr_t)m); /* device or host: asked */
	CHECK(queries() > q0);
	map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	CHECK(map != MAP_FAILED);
	q0 = queries();
	CHECK(dri_cuda_ptr_device(map) == -1);
	CHECK(queries() > q0);
	munmap(map, 4096);
	free(heap);
	return 0;
}

/* dri_cuda_ptr_prepare does, on the calling thread, the reads a first
 * pointer query would (dr_init_process_group calls it, so that the
 * program's first collective with data does not: some 130 us).  A
 * thread's stack is its own: another thread reads its own at its first
 * query. */
static void *query_on_a_thread(void *arg)
{
	float x = 0;
	int *out = arg;

	out[0] = dri_cuda_ptr_prepared();
	out[1] = dri_cuda_ptr_device(&x);
	out[2] = dri_cuda_ptr_prepared();
	return NULL;
}

static int test_prepare_does_the_first_reads(void)
{
	int got[3] = { -2, -2, -2 };
	float x = 0;
	pthread_t t;

	CHECK(!dri_cuda_ptr_prepared());
	dri_cuda_ptr_prepare();
	CHECK(dri_cuda_ptr_prepared());
	CHECK(dri_cuda_ptr_device(&x) == -1);
	CHECK(pthread_create(&t, NULL, query_on_a_thread, got) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECKF(!got[0] && got[1] == -1 && got[2], "another thread: prepared "
	       "%d, its stack buffer's device %d, then prepared %d", got[0],
	       got[1], got[2]);
	return 0;
}

/* A stream of another device's context is refused when it is selected,
 * not at its first use in the middle of a collective. */
static int test_set_stream_of_another_context(void)
{
	void *h = load_fake(2), *ctx = NULL, *s = NULL, *popped;
	if (!h)
		return 0;
	CHECK(dr_cuda_available() && dr_cuda_device_count() == 2);
	CHECK(FAKE_FN(h, int (*)(void **, int), "cuDevicePrimaryCtxRetain")(&ctx, 1) == 0);
	CHECK(FAKE_FN(h, int (*)(void *), "cuCtxPushCurrent_v2")(ctx) == 0);
	CHECK(FAKE_FN(h, int (*)(void **, unsigned), "cuStreamCreate")(&s, 1) == 0);
	FAKE_FN(h, int (*)(void **), "cuCtxPopCurrent_v2")(&popped);
	CHECK(dr_cuda_set_stream(0, s) == DR_EINVAL);
	CHECKF(strstr(dr_last_error(), "belongs to another context than cuda:0's "
		      "primary context"), "%s", dr_last_error());
	CHECK(dr_cuda_set_stream(1, s) == DR_OK);
	CHECK(dr_cuda_set_stream(0, (void *)0x2) == DR_OK);
	CHECK(dr_cuda_set_stream(0, NULL) == DR_OK);
	return 0;
}

/* A child forked after CUDA was used is told why it cannot use it; the
 * parent goes on. */
static int test_fork_after_cuda(void)
{
	void *p = NULL, *q = (void *)1;
	int x = 0, st = 0;
	if (!load_fake(1))
		return 0;
	CHECK(dr_cuda_available());
	CHECK(dr_cuda_alloc(0, 64, &p) == DR_OK);
	fflush(stderr);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int ok = !dr_cuda_available() &&
			dr_cuda_alloc(0, 64, &q) == DR_ENOCUDA && !q &&
			strstr(dr_last_error(), "CUDA state was inherited across fork") &&
			dr_cuda_memcpy(&x, p, sizeof x) == DR_ENOCUDA &&
			dri_cuda_ptr_device(&x) == -1;
		if (!ok)
			fprintf(stderr, "child: %s\n", dr_last_error());
		_exit(ok ? 0 : 1);
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(dri_cuda_ptr_device(p) == 0);
	CHECK(dr_cuda_free(p) == DR_OK);
	return 0;
}

/* gather on a group of one: the host algorithm copies sendbuf to buf. */
static dr_err copy_run(dri_op *op)
{
	memmove(op->buf, op->sendbuf, op->count * dr_dtype_size(op->dtype));
	return DR_OK;
}

static dr_err staged_gather(dr_group *g, void *send, void *recv, size_t count,
			    int64_t timeout_ms)
{
	dri_op op;
	dr_err err;

	memset(&op, 0, sizeof op);
	op.run = copy_run;
	op.id.coll = DRI_GATHER;
	op.group = g;
	op.sendbuf = send;
	op.buf = recv;
	op.count = count;
	op.dtype = DR_INT32;
	op.root = 0;
	op.device = 0;
	op.timeout_ms = timeout_ms;
	dri_cuda_stage_op(&op);
	err = op.start(&op, 0);
	if (!err)
		err = op.run(&op);
	op.release(&op);
	return err;
}

/* A staged call that times out with its copy to pinned memory still in
 * flight: the next call that grows the pinned memory must wait for that
 * copy before freeing it (the fake aborts on a free under a queued copy). */
static int test_timed_out_staging_leaves_no_copy_behind(void)
{
	void *h = load_fake(1), *s = NULL, *r = NULL;
	size_t big = (size_t)1 << 20;
	dr_group g = { .id = 0, .size = 1, .rank = 0 };
	if (!h)
		return 0;
	void (*hold)(int) = FAKE_FN(h, void (*)(int), "fake_cuda_hold");
	int (*violations)(void) = FAKE_FN(h, int (*)(void), "fake_cuda_violations");
	CHECK(hold && violations);
	CHECK(dr_cuda_alloc(0, big * 4, &s) == DR_OK);
	CHECK(dr_cuda_alloc(0, big * 4, &r) == DR_OK);
	hold(1);
	CHECK(staged_gather(&g, s, r, 1024, 300) == DR_ETIMEDOUT);
	CHECKF(strstr(dr_last_error(), "timed out waiting for a device-to-host copy"),
	       "%s", dr_last_error());
	hold(0);
	CHECKF(staged_gather(&g, s, r, big, 30000) == DR_OK, "%s", dr_last_error());
	CHECK(violations() == 0);
	return 0;
}

/* The fake is what CI checks the CUDA paths against: it must refuse what
 * the real driver refuses and flag what it lets pass. */
static int test_fake_driver_is_strict(void)
{
	void *h = load_fake(2), *c0 = NULL, *c1 = NULL, *popped, *s1 = NULL,
	     *e0 = NULL, *pin = NULL;
	unsigned long long d = 0;
	static char pageable[64];
	if (!h)
		return 0;
	setenv("FAKE_CUDA_STRICT", "0", 1);
	int (*init)(unsigned) = FAKE_FN(h, int (*)(unsigned), "cuInit");
	int (*retain)(void **, int) = FAKE_FN(h, int (*)(void **, int), "cuDevicePrimaryCtxRetain");
	int (*push)(void *) = FAKE_FN(h, int (*)(void *), "cuCtxPushCurrent_v2");
	int (*pop)(void **) = FAKE_FN(h, int (*)(void **), "cuCtxPopCurrent_v2");
	int (*alloc)(unsigned long long *, size_t) =
		FAKE_FN(h, int (*)(unsigned long long *, size_t), "cuMemAlloc_v2");
	int (*stream_create)(void **, unsigned) =
		FAKE_FN(h, int (*)(void **, unsigned), "cuStreamCreate");
	int (*event_create)(void **, unsigned) =
		FAKE_FN(h, int (*)(void **, unsigned), "cuEventCreate");
	int (*record)(void *, void *) = FAKE_FN(h, int (*)(void *, void *), "cuEventRecord");
	int (*query)(void *) = FAKE_FN(h, int (*)(void *), "cuEventQuery");
	int (*copy_async)(unsigned long long, unsigned long long, size_t, void *) =
		FAKE_FN(h, int (*)(unsigned long long, unsigned long long, size_t, void *),
			"cuMemcpyAsync");
	int (*host_alloc)(void **, size_t, unsigned) =
		FAKE_FN(h, int (*)(void **, size_t, unsigned), "cuMemHostAlloc");
	int (*free_host)(void *) = FAKE_FN(h, int (*)(void *), "cuMemFreeHost");
	int (*violations)(void) = FAKE_FN(h, int (*)(void), "fake_cuda_violations");

	CHECK(init(0) == 0);
	/* No current context: CUDA_ERROR_INVALID_CONTEXT. */
	CHECK(alloc(&d, 64) == 201);
	CHECK(retain(&c0, 0) == 0 && retain(&c1, 1) == 0 && c0 != c1);
	CHECK(push(c1) == 0);
	CHECK(stream_create(&s1, 1) == 0);
	CHECK(pop(&popped) == 0);
	CHECK(push(c0) == 0);
	CHECK(alloc(&d, 64) == 0);
	/* An event of one context cannot be recorded on another's stream. */
	CHECK(event_create(&e0, 0) == 0);
	CHECK(record(e0, s1) == 400);
	/* A copy waits until something asks for it, more than once. */
	CHECK(host_alloc(&pin, 64, 0) == 0);
	CHECK(copy_async((unsigned long long)(uintptr_t)pin, d, 64, NULL) == 0);
	CHECK(record(e0, NULL) == 0);
	CHECK(query(e0) == 600);
	CHECK(violations() == 0);
	/* Pageable memory in an asynchronous copy, and a pinned block freed
	 * under a queued copy, are flagged. */
	CHECK(copy_async(d, (unsigned long long)(uintptr_t)pageable, 64, NULL) == 0);
	CHECK(violations() == 1);
	CHECK(copy_async((unsigned long long)(uintptr_t)pin, d, 64, NULL) == 0);
	CHECK(free_host(pin) == 0);
	CHECK(violations() == 2);
	CHECK(pop(&popped) == 0);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_unavailable_answers),
	UNIT(test_run_staged_without_cuda),
	UNIT(test_host_pointers_are_host),
	UNIT(test_ptr_device_does_not_load_driver),
	UNIT(test_ptr_device_with_library_loaded),
	UNIT(test_stub_driver_every_symbol),
	UNIT(test_missing_library),
	UNIT(test_library_without_driver_api),
	UNIT(test_disabled_by_environment),
	UNIT(test_check_buffers_names_the_odd_one),
	UNIT(test_ptr_device_leaves_fake_unloaded),
	UNIT(test_stack_and_heap_without_query),
	UNIT(test_prepare_does_the_first_reads),
	UNIT(test_set_stream_of_another_context),
	UNIT(test_fork_after_cuda),
	UNIT(test_timed_out_staging_leaves_no_copy_behind),
	UNIT(test_fake_driver_is_strict),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
