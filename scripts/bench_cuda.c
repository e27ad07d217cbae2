/*
 * bench_cuda.c - all_reduce on CUDA device buffers: median time per call
 * and bus bandwidth, by size.  Run under distrun (scripts/bench-gpu):
 *
 *   distrun --raw -n 4 build/bench/bench_cuda [MAXBYTES [MINBYTES]] [--host]
 *
 * Sizes go from MINBYTES (default 4) to MAXBYTES (default 64 MiB) by 16x,
 * float32 sum, every rank on cuda:(LOCAL_RANK % devices).  One timed call
 * is: host barrier, start clock, dr_all_reduce on the device buffer, wait
 * until the result is in device memory (a 4-byte copy back, ordered after
 * it on the stream), stop clock; the time of a call is the slowest rank's,
 * and rank 0 prints the median over the calls, in the same line format as
 * scripts/bench_gloo_cuda.py so that scripts/bench-gpu can pair them.
 * --host runs the same on host buffers (what staging costs on top).
 * Without CUDA it prints "skip - CUDA not available: ..." and exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "distrun.h"

#define MAXITERS 200

static int iterations(size_t bytes)
{
	return bytes >= (1u << 20) ? 12 : bytes >= (64u << 10) ? 50 : MAXITERS;
}

static int check(dr_err err, const char *what)
{
	if (!err)
		return 0;
	fprintf(stderr, "bench_cuda: %s: %s\n", what, dr_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	size_t maxb = (size_t)64 << 20, minb = 4;
	int host = 0, npos = 0;
	double times[MAXITERS];
	const char *lr = getenv("LOCAL_RANK");

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--host"))
			host = 1;
		else if (npos++ == 0)
			maxb = strtoull(argv[i], NULL, 0);
		else
			minb = strtoull(argv[i], NULL, 0);
	}
	if (minb < 4 || maxb < minb) {
		fprintf(stderr, "usage: bench_cuda [MAXBYTES [MINBYTES]] [--host]\n");
		return 2;
	}
	if (check(dr_init_process_group(NULL, NULL), "init"))
		return 1;
	int rank = dr_get_rank(), n = dr_get_world_size();
	if (!host && !dr_cuda_available()) {
		dr_cuda_set_stream(0, NULL);
		if (rank == 0)
			printf("skip - %s\n", dr_last_error());
		dr_destroy_process_group();
		return 0;
	}
	int dev = host ? -1 : (lr ? atoi(lr) : rank) % dr_cuda_device_count();
	float *hbuf = malloc(maxb);
	void *dbuf = NULL;
	float probe;
	if (!hbuf)
		return 1;
	for (size_t i = 0; i < maxb / 4; i++)
		hbuf[i] = 1.0f;
	if (!host && (check(dr_cuda_alloc(dev, maxb, &dbuf), "alloc") ||
		      check(dr_cuda_memcpy(dbuf, hbuf, maxb), "memcpy")))
		return 1;
	void *buf = host ? (void *)hbuf : dbuf;

	for (size_t b = minb; b <= maxb; b *= 16) {
		size_t count = b / 4;
		int it = iterations(b);
		for (int w = 0; w < 3; w++)
			if (check(dr_all_reduce(buf, count, DR_FLOAT32, DR_SUM, NULL, NULL),
				  "all_reduce"))
				return 1;
		for (int i = 0; i < it; i++) {
			if (check(dr_barrier(NULL, NULL, NULL, 0), "barrier"))
				return 1;
			double t0 = now_s();
			if (check(dr_all_reduce(buf, count, DR_FLOAT32, DR_SUM, NULL, NULL),
				  "all_reduce"))
				return 1;
			if (!host && check(dr_cuda_memcpy(&probe, dbuf, sizeof probe), "sync"))
				return 1;
			times[i] = now_s() - t0;
		}
		if (check(dr_all_reduce(times, (size_t)it, DR_FLOAT64, DR_MAX, NULL, NULL),
			  "all_reduce of the times"))
			return 1;
		qsort(times, (size_t)it, sizeof times[0], cmp_double);
		double med = it % 2 ? times[it / 2] :
			(times[it / 2 - 1] + times[it / 2]) / 2;
		if (rank == 0) {
			printf("op=allreduce impl=%s n=%d bytes=%zu median_us=%.2f "
			       "busbw_GBps=%.3f\n", host ? "distrun-host" : "distrun-cuda",
			       n, b, med * 1e6, (double)b / med / 1e9 * 2 * (n - 1) / n);
			fflush(stdout);
		}
		if (b > maxb / 16)
			break;
	}
	dr_cuda_free(dbuf);
	free(hbuf);
	dr_destroy_process_group();
	return 0;
}
