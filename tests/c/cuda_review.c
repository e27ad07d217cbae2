/*
 * cuda_review.c - the cases of the review of libdistrun's CUDA paths
 * against the real driver's behaviour (issue 15), each run on the strict
 * fake driver (testdata/fake_libcuda.c), where the behaviour that breaks
 * on a real GPU breaks deterministically:
 *
 *   DISTRUN_CUDA_LIB=build/fake/libcuda.so distrun -n 2 \
 *       build/tests/cuda_review CASE
 *
 * CASE is one of
 *   capture      an asynchronous call orders itself after the stream
 *                selected when it was made, though it runs after a later
 *                dr_cuda_set_stream (its progress thread held up meanwhile)
 *   per-thread   cudaStreamPerThread selected: a blocking call and an
 *                asynchronous barrier(device_ids) follow the caller's own
 *                stream; an asynchronous collective is refused
 *   memcpy       dr_cuda_memcpy is done when it returns, also device to
 *                device and from pageable memory (where cuMemcpy is not)
 *   no-retain    (FAKE_CUDA_DEVICES=2 FAKE_CUDA_PTR_NEEDS_CTX=1) a rank
 *                that works on cuda:1 never retains cuda:0's context
 *   reset        after cudaDeviceReset (cuDevicePrimaryCtxReset), noticed
 *                by libdistrun or after the program used the device again
 *                first, collectives on new device memory work
 *   barrier-device  dr_cuda_barrier_device waits for a copy on a stream
 *                that dr_barrier(device_ids) does not look at
 * Prints "ok - rank R: CASE ..." or "not ok - rank R: CASE: why", exits 1
 * on failure; "skip - ..." where the driver is not the fake.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"

#define COUNT 50000
#define STREAM_PER_THREAD ((void *)0x2)

typedef unsigned long long dptr;

static struct {
	int (*retain)(void **, int);
	int (*push)(void *);
	int (*pop)(void **);
	int (*stream_create)(void **, unsigned);
	int (*copy_async)(dptr, dptr, size_t, void *);
	int (*host_alloc)(void **, size_t, unsigned);
	int (*ctx_sync)(void);
	int (*reset)(int);
	void (*hold)(int);
	int (*retains)(int);
} cu;

static int rank, n, failed;
static const char *what;

/* Says why the case failed; returns 1 (for `return fail(...)`). */
static int fail(const char *why, dr_err err)
{
	failed = 1;
	printf("not ok - rank %d: %s: %s%s%s\n", rank, what, why,
	       err ? ": " : "", err ? dr_last_error() : "");
	return 1;
}

/* device's primary context, as the CUDA runtime retains it for the
 * program; IN_CTX runs a driver call with it current. */
static void *ctx_of(int device)
{
	void *c = NULL;
	cu.retain(&c, device);
	return c;
}
#define IN_CTX(device, stmt)                                                  \
	do {                                                                  \
		void *c_ = ctx_of(device), *p_;                               \
		cu.push(c_);                                                  \
		stmt;                                                         \
		cu.pop(&p_);                                                  \
	} while (0)

static void *new_stream(int device)
{
	void *s = NULL;
	IN_CTX(device, cu.stream_create(&s, 1 /* non-blocking */));
	return s;
}

static int32_t *pinned(int device)
{
	void *p = NULL;
	IN_CTX(device, cu.host_alloc(&p, COUNT * sizeof(int32_t), 0));
	return p;
}

static int32_t input(int r, int i)
{
	return (r + 1) * (i % 11 + 1);
}

static int32_t sum(int i)
{
	return n * (n + 1) / 2 * (i % 11 + 1);
}

/* The device buffer d (after every stream of device is done) against the
 * sum over ranks. */
static int expect_sums(int device, void *d, const char *name)
{
	static int32_t host[COUNT];
	char why[160];
	dr_err err;

	IN_CTX(device, cu.ctx_sync());
	if ((err = dr_cuda_memcpy(host, d, sizeof host)))
		return fail("reading the result back", err);
	for (int i = 0; i < COUNT; i++)
		if (host[i] != sum(i)) {
			snprintf(why, sizeof why, "%s: element %d is %d, expected %d",
				 name, i, host[i], sum(i));
			return fail(why, DR_OK);
		}
	return 0;
}

/* A device buffer holding this rank's input (copied from pinned memory,
 * which cuMemcpy copies before it returns). */
static void *device_input(int device)
{
	int32_t *host = pinned(device);
	size_t bytes = COUNT * sizeof(int32_t);
	void *d = NULL;
	dr_err err;

	if (!host) {
		fail("out of pinned memory", DR_OK);
		return NULL;
	}
	for (int i = 0; i < COUNT; i++)
		host[i] = input(rank, i);
	if ((err = dr_cuda_alloc(device, bytes, &d)) ||
	    (err = dr_cuda_memcpy(d, host, bytes))) {
		fail("setting up device memory", err);
		return NULL;
	}
	return d;
}

static int case_capture(void)
{
	int32_t *src = pinned(0);
	void *a = device_input(0), *b = NULL, *s1 = new_stream(0),
	     *s2 = new_stream(0);
	dr_work *w1 = NULL, *w2 = NULL;
	dr_err err;

	if (!a || !src || !s1 || !s2 ||
	    (err = dr_cuda_alloc(0, COUNT * sizeof(int32_t), &b)))
		return fail("setting up", DR_OK);
	for (int i = 0; i < COUNT; i++)
		src[i] = input(rank, i);
	/* The first call holds the progress thread (its copies are held), so
	 * the second runs only after the stream was switched. */
	cu.hold(1);
	if ((err = dr_all_reduce(a, COUNT, DR_INT32, DR_SUM, NULL, &w1))) {
		cu.hold(0);
		return fail("first all_reduce", err);
	}
	IN_CTX(0, cu.copy_async((dptr)(uintptr_t)b, (dptr)(uintptr_t)src,
				COUNT * sizeof(int32_t), s1));
	dr_cuda_set_stream(0, s1);
	err = dr_all_reduce(b, COUNT, DR_INT32, DR_SUM, NULL, &w2);
	dr_cuda_set_stream(0, s2);
	cu.hold(0);
	if (err)
		return fail("second all_reduce", err);
	if ((err = dr_work_wait(w1)) || (err = dr_work_wait(w2)))
		return fail("waiting", err);
	dr_work_free(w1);
	dr_work_free(w2);
	dr_cuda_set_stream(0, NULL);
	return expect_sums(0, a, "first call") ||
		expect_sums(0, b, "second call (its input was queued on the "
			    "stream selected at the call)");
}

static int case_per_thread(void)
{
	int32_t *src = pinned(0), *dst = pinned(0);
	void *d = NULL;
	dr_work *w = NULL;
	int dev = 0;
	dr_err err;

	if (!src || !dst || (err = dr_cuda_alloc(0, COUNT * sizeof(int32_t), &d)))
		return fail("setting up", DR_OK);
	for (int i = 0; i < COUNT; i++) {
		src[i] = input(rank, i);
		dst[i] = -1;
	}
	if ((err = dr_cuda_set_stream(0, STREAM_PER_THREAD)))
		return fail("dr_cuda_set_stream(cudaStreamPerThread)", err);
	/* Blocking: ordered after the input queued on this thread's stream. */
	IN_CTX(0, cu.copy_async((dptr)(uintptr_t)d, (dptr)(uintptr_t)src,
				COUNT * sizeof(int32_t), STREAM_PER_THREAD));
	if ((err = dr_all_reduce(d, COUNT, DR_INT32, DR_SUM, NULL, NULL)))
		return fail("blocking all_reduce", err);
	if (expect_sums(0, d, "blocking all_reduce on cudaStreamPerThread"))
		return 1;
	/* Asynchronous: the stream cannot follow the call to its thread. */
	err = dr_all_reduce(d, COUNT, DR_INT32, DR_SUM, NULL, &w);
	if (err != DR_EINVAL || !strstr(dr_last_error(), "cudaStreamPerThread")) {
		if (!err)
			dr_work_wait(w);
		dr_work_free(w);
		return fail("an asynchronous all_reduce on cudaStreamPerThread "
			    "was not refused with DR_EINVAL naming it", err);
	}
	/* An asynchronous barrier waits for this thread's stream. */
	IN_CTX(0, cu.copy_async((dptr)(uintptr_t)dst, (dptr)(uintptr_t)d,
				COUNT * sizeof(int32_t), STREAM_PER_THREAD));
	if ((err = dr_barrier(NULL, &w, &dev, 1)) || (err = dr_work_wait(w)))
		return fail("asynchronous barrier(device_ids)", err);
	dr_work_free(w);
	for (int i = 0; i < COUNT; i++)
		if (dst[i] != sum(i))
			return fail("the asynchronous barrier returned before the "
				    "copy on the caller's cudaStreamPerThread", DR_OK);
	return dr_cuda_set_stream(0, NULL) != DR_OK;
}

static int case_memcpy(void)
{
	static int32_t pageable[COUNT];
	void *a = NULL, *b = NULL, *s = new_stream(0);
	dr_err err;

	for (int i = 0; i < COUNT; i++)
		pageable[i] = input(rank, i);
	if (!s || (err = dr_cuda_alloc(0, sizeof pageable, &a)) ||
	    (err = dr_cuda_alloc(0, sizeof pageable, &b)))
		return fail("setting up", DR_OK);
	/* Pageable to device, then device to device: both done on return,
	 * so a collective ordered on another stream reads them. */
	if ((err = dr_cuda_memcpy(a, pageable, sizeof pageable)) ||
	    (err = dr_cuda_memcpy(b, a, sizeof pageable)))
		return fail("dr_cuda_memcpy", err);
	dr_cuda_set_stream(0, s);
	err = dr_all_reduce(b, COUNT, DR_INT32, DR_SUM, NULL, NULL);
	dr_cuda_set_stream(0, NULL);
	if (err)
		return fail("all_reduce", err);
	return expect_sums(0, b, "all_reduce after dr_cuda_memcpy");
}

static int case_no_retain(void)
{
	int32_t x = rank + 1;
	void *d;
	dr_err err;

	if (dr_cuda_device_count() < 2)
		return fail("needs FAKE_CUDA_DEVICES=2", DR_OK);
	if (!(d = device_input(1)))
		return 1;
	if ((err = dr_all_reduce(d, COUNT, DR_INT32, DR_SUM, NULL, NULL)) ||
	    (err = dr_all_reduce(&x, 1, DR_INT32, DR_SUM, NULL, NULL)))
		return fail("all_reduce", err);
	if (expect_sums(1, d, "all_reduce on cuda:1"))
		return 1;
	if (x != n * (n + 1) / 2)
		return fail("host all_reduce gave a wrong sum", DR_OK);
	if (cu.retains(0) != 0) {
		char why[96];
		snprintf(why, sizeof why, "cuda:0's primary context was retained "
			 "%d time(s)", cu.retains(0));
		return fail(why, DR_OK);
	}
	return 0;
}

/* reset, then (retain_first) the program uses the device again itself
 * before libdistrun does, as cudaMalloc after cudaDeviceReset would. */
static int reset_round(int retain_first)
{
	void *d = device_input(0);
	dr_err err;

	if (!d)
		return 1;
	if ((err = dr_all_reduce(d, COUNT, DR_INT32, DR_SUM, NULL, NULL)))
		return fail("all_reduce before the reset", err);
	if (expect_sums(0, d, "before the reset"))
		return 1;
	cu.reset(0);
	if (retain_first)
		ctx_of(0);
	if (!(d = device_input(0)))
		return 1;
	if ((err = dr_all_reduce(d, COUNT, DR_INT32, DR_SUM, NULL, NULL)))
		return fail("all_reduce after the reset", err);
	if (expect_sums(0, d, "after the reset"))
		return 1;
	err = dr_cuda_free(d);
	return err ? fail("dr_cuda_free", err) : 0;
}

static int case_reset(void)
{
	return reset_round(0) || reset_round(1);
}

static int case_barrier_device(void)
{
	void *d = NULL, *s = new_stream(0);
	int dev = 0;
	dr_work *w = NULL;
	dr_err err;

	for (int async = 0; async < 2; async++) {
		int32_t *dst = pinned(0);
		if (!(d = device_input(0)) || !dst || !s)
			return fail("setting up", DR_OK);
		for (int i = 0; i < COUNT; i++)
			dst[i] = -1;
		IN_CTX(0, cu.copy_async((dptr)(uintptr_t)dst, (dptr)(uintptr_t)d,
					COUNT * sizeof(int32_t), s));
		err = dr_cuda_barrier_device(NULL, async ? &w : NULL, &dev, 1);
		if (!err && async)
			err = dr_work_wait(w);
		dr_work_free(w);
		w = NULL;
		if (err)
			return fail("dr_cuda_barrier_device", err);
		for (int i = 0; i < COUNT; i++)
			if (dst[i] != input(rank, i))
				return fail(async ? "the asynchronous barrier returned "
					    "before a copy on another stream" :
					    "the barrier returned before a copy on "
					    "another stream", DR_OK);
	}
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(void);
} cases[] = {
	{ "capture", case_capture },
	{ "per-thread", case_per_thread },
	{ "memcpy", case_memcpy },
	{ "no-retain", case_no_retain },
	{ "reset", case_reset },
	{ "barrier-device", case_barrier_device },
};

int main(int argc, char **argv)
{
	const char *lib = getenv("DISTRUN_CUDA_LIB");
	void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_GLOBAL) : NULL;
	int (*fn)(void) = NULL;

	for (size_t i = 0; argc > 1 && i < sizeof cases / sizeof cases[0]; i++)
		if (!strcmp(argv[1], cases[i].name))
			fn = cases[i].fn;
	if (!fn) {
		fprintf(stderr, "usage: cuda_review CASE (capture, per-thread, "
			"memcpy, no-retain, reset, barrier-device)\n");
		return 2;
	}
	what = argv[1];
	*(void **)&cu.hold = h ? dlsym(h, "fake_cuda_hold") : NULL;
	if (!cu.hold) {
		printf("skip - the driver is not the fake (DISTRUN_CUDA_LIB)\n");
		return 0;
	}
	*(void **)&cu.retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&cu.push = dlsym(h, "cuCtxPushCurrent_v2");
	*(void **)&cu.pop = dlsym(h, "cuCtxPopCurrent_v2");
	*(void **)&cu.stream_create = dlsym(h, "cuStreamCreate");
	*(void **)&cu.copy_async = dlsym(h, "cuMemcpyAsync");
	*(void **)&cu.host_alloc = dlsym(h, "cuMemHostAlloc");
	*(void **)&cu.ctx_sync = dlsym(h, "cuCtxSynchronize");
	*(void **)&cu.reset = dlsym(h, "cuDevicePrimaryCtxReset_v2");
	*(void **)&cu.retains = dlsym(h, "fake_cuda_retains");
	if (!dr_cuda_available()) {
		dr_cuda_set_stream(0, NULL);
		printf("not ok - %s: %s\n", what, dr_last_error());
		return 1;
	}
	if (dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "init: %s\n", dr_last_error());
		return 1;
	}
	rank = dr_get_rank();
	n = dr_get_world_size();
	(void)fn(); /* failures are printed and counted in failed */
	dr_destroy_process_group();
	if (!failed)
		printf("ok - rank %d: %s\n", rank, what);
	return failed;
}
