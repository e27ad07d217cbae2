/*
 * rooted_bench.c - small rooted calls in a loop, timed as the anchor loop
 * is (scripts/anchor_bench.c): the clock before and after ITERS calls
 * only, the slowest rank's mean.  bench_coll times each call and takes
 * the median of the slowest rank's; for a broadcast whose root runs
 * ahead of its readers that is a reader's wait, not what a loop of them
 * costs, which is what this gives.  scripts/mpi/rooted_mpi_bench.c is
 * the same loop on MPI; scripts/bench-anchor sets them side by side
 * with the floor (scripts/floor_barrier.c), and scripts/bench-ab-small
 * two builds' loops.
 *
 *   distrun -n N build/bench/rooted_bench [ITERS [BYTES]]
 *
 * Prints from rank 0 "op=broadcast n=N bytes=B us=X" and the same for
 * reduce (float32 SUM to rank 0; broadcast from rank 0), after 1000
 * unmeasured calls of each; then "op=answered ..." for ITERS / 10
 * rounds of a broadcast that every other rank answers with a send of
 * the same bytes to rank 0, which receives them in rank order: a root
 * that waits for its readers between its calls, the loop a reader's
 * step back (coll_shm_flags.h, DRI_CS_STEP_NS) could slow; then
 * "op=bcast_ar ..." and "op=reduce_ar ..." for ITERS rounds of that
 * rooted call followed by an all_reduce of the same bytes (float32
 * SUM): a training step's small calls, the time of a round (the pair).
 * An error ends it with the call's message and status 1.
 */
#include <distrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static void check(dr_err e, const char *what)
{
	if (e) {
		fprintf(stderr, "rooted_bench: %s: %s: %s\n", what,
			dr_err_name(e), dr_last_error());
		exit(1);
	}
}

static dr_err call(int reduce, float *buf, size_t count)
{
	return reduce ? dr_reduce(buf, count, DR_FLOAT32, DR_SUM, 0, NULL, NULL)
		      : dr_broadcast(buf, count, DR_FLOAT32, 0, NULL, NULL);
}

/* A broadcast from rank 0 that every other rank answers (main above). */
static void answered(int rank, float *buf, size_t count, int rounds)
{
	const int p = dr_get_world_size();
	double t;

	check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
	t = now_s();
	for (int i = 0; i < rounds; i++) {
		check(dr_broadcast(buf, count, DR_FLOAT32, 0, NULL, NULL),
		      "broadcast");
		if (rank)
			check(dr_send(buf, count, DR_FLOAT32, 0, 0, NULL),
			      "send");
		for (int j = 1; !rank && j < p; j++)
			check(dr_recv(buf, count, DR_FLOAT32, j, 0, NULL,
				      NULL), "recv");
	}
	t = now_s() - t;
	check(dr_all_reduce(&t, 1, DR_FLOAT64, DR_MAX, NULL, NULL),
	      "all_reduce");
	if (rank == 0)
		printf("op=answered n=%d bytes=%zu us=%.3f\n", p, count * 4,
		       t / rounds * 1e6);
}

/* ITERS rounds of a rooted call and an all_reduce (main above). */
static void paired(int reduce, int rank, float *buf, size_t count, int iters)
{
	float ar[64] = { 1 };
	double t = 0;

	/* 1000 unmeasured rounds, then the clock */
	for (int i = 0; i < 1000 + iters; i++) {
		if (i == 1000) {
			check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
			t = now_s();
		}
		check(call(reduce, buf, count), "rooted call");
		check(dr_all_reduce(ar, count, DR_FLOAT32, DR_SUM, NULL, NULL),
		      "all_reduce");
	}
	t = now_s() - t;
	check(dr_all_reduce(&t, 1, DR_FLOAT64, DR_MAX, NULL, NULL),
	      "all_reduce");
	if (rank == 0)
		printf("op=%s n=%d bytes=%zu us=%.3f\n",
		       reduce ? "reduce_ar" : "bcast_ar", dr_get_world_size(),
		       count * 4, t / iters * 1e6);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 100000;
	long bytes = argc > 2 ? atol(argv[2]) : 4;
	static const char *const name[2] = { "broadcast", "reduce" };
	float buf[64] = { 1 };
	size_t count;
	int rank;

	if (iters < 1 || bytes < 4 || bytes > (long)sizeof(buf)) {
		fprintf(stderr, "usage: rooted_bench [ITERS >= 1 [BYTES 4 to "
			"%zu]]\n", sizeof(buf));
		return 2;
	}
	count = (size_t)bytes / 4;
	check(dr_init_process_group(NULL, NULL), "init");
	rank = dr_get_rank();
	for (int op = 0; op < 2; op++) {
		double t;

		for (int i = 0; i < 1000; i++)
			check(call(op, buf, count), name[op]);
		check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
		t = now_s();
		for (int i = 0; i < iters; i++)
			check(call(op, buf, count), name[op]);
		t = now_s() - t;
		check(dr_all_reduce(&t, 1, DR_FLOAT64, DR_MAX, NULL, NULL),
		      "all_reduce");
		if (rank == 0)
			printf("op=%s n=%d bytes=%zu us=%.3f\n", name[op],
			       dr_get_world_size(), count * 4, t / iters * 1e6);
	}
	answered(rank, buf, count, iters / 10 ? iters / 10 : 1);
	paired(0, rank, buf, count, iters);
	paired(1, rank, buf, count, iters);
	check(dr_destroy_process_group(), "destroy");
	return 0;
}
