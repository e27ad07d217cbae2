/*
 * cuda_detect.c - a program that uses CUDA on its own, as programs do
 * (through the CUDA runtime, which loads the driver), and hands device
 * memory to dr_all_reduce without ever calling a dr_cuda_* function:
 * libdistrun must notice that the driver is in the process, recognise the
 * pointer and stage it.  Here the driver is whatever DISTRUN_CUDA_LIB
 * names (tests/cuda.bats: the fake driver of testdata/fake_libcuda.c);
 * without it the program prints "skip - ..." and exits 0.
 *
 *   DISTRUN_CUDA_LIB=libfakecuda.so distrun -n 3 build/tests/cuda_detect
 *
 * The input reaches the device by an asynchronous copy on the default
 * stream that nothing waits for: the collective must order itself after it.
 * Prints "ok - rank R: ..." when every element holds the sum over ranks.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "distrun.h"

#define COUNT 100000

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_alloc_fn)(unsigned long long *, size_t);
typedef int (*cu_memcpy_fn)(unsigned long long, unsigned long long, size_t);
typedef int (*cu_memcpy_async_fn)(unsigned long long, unsigned long long,
				  size_t, void *);

int main(void)
{
	const char *lib = getenv("DISTRUN_CUDA_LIB");
	void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_GLOBAL) : NULL;
	cu_init_fn init;
	cu_alloc_fn alloc;
	cu_memcpy_fn copy;
	cu_memcpy_async_fn copy_async;
	unsigned long long d = 0;
	static int32_t host[COUNT];

	if (!h) {
		printf("skip - no driver library named by DISTRUN_CUDA_LIB\n");
		return 0;
	}
	*(void **)&init = dlsym(h, "cuInit");
	*(void **)&alloc = dlsym(h, "cuMemAlloc_v2");
	*(void **)&copy = dlsym(h, "cuMemcpy");
	*(void **)&copy_async = dlsym(h, "cuMemcpyAsync");
	if (!init || !alloc || !copy || !copy_async || init(0) ||
	    alloc(&d, sizeof host)) {
		fprintf(stderr, "%s: cannot allocate device memory\n", lib);
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
	copy_async(d, (unsigned long long)(uintptr_t)host, sizeof host, NULL);

	dr_err err = dr_all_reduce((void *)(uintptr_t)d, COUNT, DR_INT32, DR_SUM,
				   NULL, NULL);
	if (err) {
		printf("not ok - rank %d: all_reduce on device memory: %s\n", rank,
		       dr_last_error());
		return 1;
	}
	copy((unsigned long long)(uintptr_t)host, d, sizeof host);
	for (int i = 0; i < COUNT; i++)
		if (host[i] != n * (n + 1) / 2 * (i % 7 + 1)) {
			printf("not ok - rank %d: element %d is %d, expected %d\n",
			       rank, i, host[i], n * (n + 1) / 2 * (i % 7 + 1));
			return 1;
		}
	dr_destroy_process_group();
	printf("ok - rank %d: device memory found and reduced\n", rank);
	return 0;
}
