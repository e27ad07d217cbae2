/*
 * stream_order.cu - GPU test: a collective on device buffers is ordered
 * after the work queued before it on the selected stream, and the result
 * is ordered before the work queued after it, without the program
 * synchronising anything in between.  Run under distrun (scripts/test-gpu).
 *
 * On a non-blocking stream chosen with dr_cuda_set_stream, each rank
 * queues a kernel that sleeps ~100 ms and then writes its input, calls the
 * collective at once, then queues a kernel that copies the result into
 * host memory, and only then synchronises the stream and checks the
 * values.  Reading the input before the first kernel finished, or letting
 * the second kernel run before the result arrived, gives wrong values.
 * Cases: all_reduce on the legacy default stream before the program has
 * called any dr_cuda_* function, then on a stream of its own: all_reduce
 * (blocking and asynchronous; small and cut in chunks), broadcast,
 * all_gather.  Prints "ok - ..." / "not ok - ..." per case.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"

static __device__ unsigned long long global_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Sleeps ns, then buf[i] = value + i / stride for i < n. */
static __global__ void sleep_then_fill(int *buf, size_t n, int value,
				       size_t stride, unsigned long long ns)
{
	if (threadIdx.x == 0) {
		unsigned long long t0 = global_ns();
		while (global_ns() - t0 < ns)
			__nanosleep(100000);
	}
	__syncthreads();
	for (size_t i = threadIdx.x; i < n; i += blockDim.x)
		buf[i] = value + (int)(i / stride);
}

static __global__ void copy_out(const int *buf, size_t n, int *out)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		out[i] = buf[i];
}

static int rank, nranks, failures;
static cudaStream_t s;
static int *host_out; /* mapped */

static void report(int ok, const char *name, const char *detail)
{
	printf("%s - rank %d: %s%s%s\n", ok ? "ok" : "not ok", rank, name,
	       detail ? ": " : "", detail ? detail : "");
	if (!ok)
		failures++;
}

enum { ALL_REDUCE, BROADCAST, ALL_GATHER };

/* One case: fill `in` late on the stream, run the collective, copy the
 * result out on the stream, synchronise, check out[i] == expect(i). */
static void run_case(const char *name, int coll, size_t count, int async)
{
	size_t in_n = count, out_n = coll == ALL_GATHER ? count * nranks : count;
	int *in = NULL, *out = NULL;
	char detail[256];
	dr_err err;
	dr_work *w = NULL;

	cudaMalloc(&in, in_n * sizeof(int));
	out = in;
	if (coll == ALL_GATHER)
		cudaMalloc(&out, out_n * sizeof(int));
	cudaMemsetAsync(in, 0, in_n * sizeof(int), s);
	sleep_then_fill<<<1, 256, 0, s>>>(in, in_n, rank + 1, in_n, 100000000ull);

	dr_work **wp = async ? &w : NULL;
	switch (coll) {
	case ALL_REDUCE:
		err = dr_all_reduce(in, count, DR_INT32, DR_SUM, NULL, wp);
		break;
	case BROADCAST:
		err = dr_broadcast(in, count, DR_INT32, nranks - 1, NULL, wp);
		break;
	default:
		err = dr_all_gather(in, out, count, DR_INT32, NULL, wp);
		break;
	}
	if (!err && async)
		err = dr_work_wait(w);
	dr_work_free(w);
	if (err) {
		snprintf(detail, sizeof detail, "%s: %s", dr_err_name(err),
			 dr_last_error());
		report(0, name, detail);
		goto out;
	}
	copy_out<<<64, 256, 0, s>>>(out, out_n, host_out);
	cudaStreamSynchronize(s);
	for (size_t i = 0; i < out_n; i++) {
		int want = coll == ALL_REDUCE ? nranks * (nranks + 1) / 2 :
			coll == BROADCAST ? nranks : (int)(i / count) + 1;
		if (host_out[i] != want) {
			snprintf(detail, sizeof detail,
				 "element %zu is %d, expected %d", i, host_out[i], want);
			report(0, name, detail);
			goto out;
		}
	}
	report(1, name, NULL);
out:
	cudaStreamSynchronize(s);
	if (out != in)
		cudaFree(out);
	cudaFree(in);
}

int main(void)
{
	const char *lr = getenv("LOCAL_RANK");
	size_t big = (size_t)5 << 20; /* 20 MiB of int32: several chunks */

	int ndev = 0;
	/* Ask the CUDA runtime, not libdistrun: the first case checks that
	 * libdistrun finds cudaMalloc'd memory by itself, the way a program
	 * that never calls dr_cuda_* meets it. */
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("skip - CUDA not available\n");
		return 77;
	}
	if (dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "init: %s\n", dr_last_error());
		return 1;
	}
	rank = dr_get_rank();
	nranks = dr_get_world_size();
	int dev = (lr ? atoi(lr) : rank) % ndev;
	cudaSetDevice(dev);
	if (cudaHostAlloc((void **)&host_out, big * (size_t)nranks * sizeof(int),
			  cudaHostAllocMapped) != cudaSuccess) {
		fprintf(stderr, "rank %d: cudaHostAlloc failed\n", rank);
		return 1;
	}
	s = 0; /* the legacy default stream, libdistrun's default */
	run_case("all_reduce on cudaMalloc'd memory, legacy stream", ALL_REDUCE, 1000, 0);

	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	dr_err err = dr_cuda_set_stream(dev, (void *)s);
	if (err) {
		fprintf(stderr, "rank %d: dr_cuda_set_stream: %s\n", rank,
			dr_last_error());
		return 1;
	}

	run_case("all_reduce waits for the stream and feeds it, small", ALL_REDUCE, 1000, 0);
	run_case("all_reduce waits for the stream and feeds it, chunked", ALL_REDUCE, big, 0);
	run_case("async all_reduce waits for the stream and feeds it", ALL_REDUCE, big, 1);
	run_case("broadcast waits for the stream and feeds it", BROADCAST, big, 0);
	run_case("all_gather waits for the stream and feeds it", ALL_GATHER, big / 4, 0);

	dr_cuda_set_stream(dev, NULL);
	cudaStreamDestroy(s);
	cudaFreeHost(host_out);
	dr_destroy_process_group();
	printf("rank %d: %s\n", rank, failures ? "FAILED" : "passed");
	return failures ? 1 : 0;
}
