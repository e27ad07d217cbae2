/*
 * anchor_bench.c - ../shared/anchors/mpi_bench.c, the project's anchor
 * benchmark, line for line on libdistrun: the same loops, the same
 * output, so that scripts/bench-anchor sets it beside the MPI original
 * (scripts/mpi/anchor_mpi_bench.c) measured the same way.
 *
 *   distrun -n N build/bench/anchor_bench [ITERS [MAXBYTES [WARMUP]]]
 *
 * Prints, from rank 0, "op=barrier n=N bytes=0 us=X" (the mean of ITERS
 * barriers after WARMUP unmeasured ones, 50 as the original; 0 times a
 * loop right after init, as a program that makes a few hundred calls
 * sees it: scripts/bench-anchor's "300 after init") and for 4 B, 64 B,
 * ... up to
 * MAXBYTES (times 16) "op=allreduce n=N bytes=B us=X algbw_GBps=A
 * busbw_GBps=W" (the mean of ITERS float32 sums in place, 10 from
 * 1 MiB).  An error ends it with the call's message and status 1.
 */
#include <distrun.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

static void check(dr_err e, const char *what)
{
	if (e) {
		fprintf(stderr, "anchor_bench: %s: %s: %s\n", what, dr_err_name(e),
			dr_last_error());
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 1000;
	size_t maxbytes = argc > 2 ? strtoull(argv[2], NULL, 10) : (64u << 20);
	int warmup = argc > 3 ? atoi(argv[3]) : 50;
	int rank, n;
	float *buf;
	double t0, t;

	if (iters < 1 || maxbytes < 4 || warmup < 0) {
		fprintf(stderr, "usage: anchor_bench [ITERS >= 1 [MAXBYTES >= 4 "
			"[WARMUP >= 0]]]\n");
		return 2;
	}
	check(dr_init_process_group(NULL, NULL), "init");
	rank = dr_get_rank();
	n = dr_get_world_size();
	for (int i = 0; i < warmup; i++)
		check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
	t0 = now_s();
	for (int i = 0; i < iters; i++)
		check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
	t = (now_s() - t0) / iters;
	if (rank == 0)
		printf("op=barrier n=%d bytes=0 us=%.2f\n", n, t * 1e6);
	if (!(buf = malloc(maxbytes)))
		return 1;
	for (size_t i = 0; i < maxbytes / 4; i++)
		buf[i] = 1.0f;
	for (size_t bytes = 4; bytes <= maxbytes; bytes *= 16) {
		size_t cnt = bytes / 4;
		int it = bytes >= (1u << 20) ? 10 : iters;

		check(dr_all_reduce(buf, cnt, DR_FLOAT32, DR_SUM, NULL, NULL),
		      "all_reduce");
		check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
		t0 = now_s();
		for (int i = 0; i < it; i++)
			check(dr_all_reduce(buf, cnt, DR_FLOAT32, DR_SUM, NULL, NULL),
			      "all_reduce");
		t = (now_s() - t0) / it;
		if (rank == 0)
			printf("op=allreduce n=%d bytes=%zu us=%.2f algbw_GBps=%.3f "
			       "busbw_GBps=%.3f\n", n, bytes, t * 1e6,
			       bytes / t / 1e9, bytes / t / 1e9 * 2.0 * (n - 1) / n);
	}
	free(buf);
	check(dr_destroy_process_group(), "destroy");
	return 0;
}
