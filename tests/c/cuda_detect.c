/*
 * cuda_detect.c - a program that uses CUDA on its own, as programs do
 * (through the CUDA runtime, which loads the driver and makes the device's
 * primary context current), and hands device memory to dr_all_reduce
 * without ever calling a dr_cuda_* function: libdistrun must notice that
 * the driver is in the process, recognise the pointer and stage it.
 *
 *   cuda_detect [--managed] [LIB]
 *
 * The driver is LIB, loaded by path under whatever name it has (libcuda.so
 * or libcuda.so.1: libdistrun must find either), else what
 * DISTRUN_CUDA_LIB names (tests/cuda.bats: the fake driver of
 * testdata/fake_libcuda.c); without either it prints "skip - ..." and
 * exits 0.  --managed takes managed memory (cuMemAllocManaged), which the
 * host can read but which the collective must still stage, since its
 * content is what the stream will have written.
 *
 * The input reaches the buffer by an asynchronous copy from pinned memory
 * on the default stream that nothing waits for: the collective must order
 * itself after it.  Prints "ok - rank R: ..." when every element holds the
 * sum over ranks.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"

#define COUNT 100000

typedef unsigned long long dptr;

static struct {
	int (*init)(unsigned);
	int (*retain)(void **, int);
	int (*set_current)(void *);
	int (*alloc)(dptr *, size_t);
	int (*alloc_managed)(dptr *, size_t, unsigned);
	int (*host_alloc)(void **, size_t, unsigned);
	int (*copy)(dptr, dptr, size_t);
	int (*copy_async)(dptr, dptr, size_t, void *);
	int (*sync)(void);
} cu;

static int load(void *h)
{
	*(void **)&cu.init = dlsym(h, "cuInit");
	*(void **)&cu.retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&cu.set_current = dlsym(h, "cuCtxSetCurrent");
	*(void **)&cu.alloc = dlsym(h, "cuMemAlloc_v2");
	*(void **)&cu.alloc_managed = dlsym(h, "cuMemAllocManaged");
	*(void **)&cu.host_alloc = dlsym(h, "cuMemHostAlloc");
	*(void **)&cu.copy = dlsym(h, "cuMemcpy");
	*(void **)&cu.copy_async = dlsym(h, "cuMemcpyAsync");
	*(void **)&cu.sync = dlsym(h, "cuCtxSynchronize");
	return cu.init && cu.retain && cu.set_current && cu.alloc &&
		cu.alloc_managed && cu.host_alloc && cu.copy && cu.copy_async &&
		cu.sync;
}

int main(int argc, char **argv)
{
	int managed = argc > 1 && !strcmp(argv[1], "--managed");
	const char *lib = argc > 1 + managed ? argv[1 + managed] :
		getenv("DISTRUN_CUDA_LIB");
	void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_GLOBAL) : NULL;
	void *ctx = NULL;
	dptr d = 0;
	int32_t *host = NULL;
	size_t bytes = COUNT * sizeof(int32_t);

	if (!h) {
		printf("skip - no driver library given\n");
		return 0;
	}
	if (!load(h) || cu.init(0) || cu.retain(&ctx, 0) || cu.set_current(ctx) ||
	    (managed ? cu.alloc_managed(&d, bytes, 1) : cu.alloc(&d, bytes)) ||
	    cu.host_alloc((void **)&host, bytes, 0)) {
		fprintf(stderr, "%s: cannot allocate memory\n", lib);
		return 1;
	}
	if (dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "init: %s\n", dr_last_error());
		return 1;
	}
	int rank = dr_get_rank(), n = dr_get_world_size();
	for (int i = 0; i < COUNT; i++)
		host[i] = (rank + 1) * (i % 7 + 1);
	/* Queued, not waited for: the collective must order itself after it
	 * (the fake driver copies only when something waits). */
	cu.copy_async(d, (dptr)(uintptr_t)host, bytes, NULL);

	dr_err err = dr_all_reduce((void *)(uintptr_t)d, COUNT, DR_INT32, DR_SUM,
				   NULL, NULL);
	if (err) {
		printf("not ok - rank %d: all_reduce on %s memory: %s\n", rank,
		       managed ? "managed" : "device", dr_last_error());
		return 1;
	}
	/* As a CUDA program reads its results: managed memory directly after
	 * synchronising, device memory by a copy. */
	if (managed) {
		cu.sync();
		memcpy(host, (void *)(uintptr_t)d, bytes);
	} else {
		cu.copy((dptr)(uintptr_t)host, d, bytes);
	}
	for (int i = 0; i < COUNT; i++)
		if (host[i] != n * (n + 1) / 2 * (i % 7 + 1)) {
			printf("not ok - rank %d: element %d is %d, expected %d\n",
			       rank, i, host[i], n * (n + 1) / 2 * (i % 7 + 1));
			return 1;
		}
	dr_destroy_process_group();
	printf("ok - rank %d: %s memory found and reduced\n", rank,
	       managed ? "managed" : "device");
	return 0;
}
