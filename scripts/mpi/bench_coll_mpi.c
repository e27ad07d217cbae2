/*
 * bench_coll_mpi.c - the MPI side of scripts/bench-coll (built there with
 * mpicc, not by the Makefile): the same collectives, sizes, timing method
 * (median of the slowest rank's time per call, iterations agreed from the
 * warm-up) and output lines as scripts/bench_coll.c.
 *
 *   mpirun -n N bench_coll_mpi [--ops a,b] [--min B] [--max B] [--budget-ms MS]
 *                              [--sizes B1,B2,...]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench_util.h"

static const struct {
	const char *name;
	double factor2; /* as bench_coll.c: -1 means 1 */
	int per_rank;
} table[] = {
	{ "barrier", 0, 0 },      { "all_reduce", 2, 0 },
	{ "broadcast", -1, 0 },   { "reduce", -1, 0 },
	{ "all_gather", 1, 1 },   { "reduce_scatter", 1, 1 },
	{ "all_to_all", 1, 1 },   { "gather", 1, 1 },
	{ "scatter", 1, 1 },      { "all_to_all_v", 1, 1 },
};
#define NBENCH (int)(sizeof(table) / sizeof(table[0]))

static int rank, world;
static float *sbuf, *rbuf;
static int *counts, *displs; /* MPI_Alltoallv's: even splits */

static void run_one(int b, int count)
{
	switch (b) {
	case 0: MPI_Barrier(MPI_COMM_WORLD); break;
	case 1: MPI_Allreduce(MPI_IN_PLACE, sbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
	case 2: MPI_Bcast(sbuf, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
	case 3: MPI_Reduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
	case 4: MPI_Allgather(sbuf, count, MPI_FLOAT, rbuf, count, MPI_FLOAT, MPI_COMM_WORLD); break;
	case 5: MPI_Reduce_scatter_block(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
	case 6: MPI_Alltoall(sbuf, count, MPI_FLOAT, rbuf, count, MPI_FLOAT, MPI_COMM_WORLD); break;
	case 7: MPI_Gather(sbuf, count, MPI_FLOAT, rbuf, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
	case 8: MPI_Scatter(sbuf, count, MPI_FLOAT, rbuf, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
	default:
		for (int i = 0; i < world; i++) {
			counts[i] = count;
			displs[i] = i * count;
		}
		MPI_Alltoallv(sbuf, counts, displs, MPI_FLOAT, rbuf, counts, displs,
			      MPI_FLOAT, MPI_COMM_WORLD);
		break;
	}
}

static void bench(int b, size_t bytes, double budget_s)
{
	size_t count = bytes / 4;
	double warm, *times;
	int iters;

	if (table[b].per_rank)
		count /= (size_t)world;
	if (b && !count)
		return;
	run_one(b, (int)count);
	warm = MPI_Wtime();
	run_one(b, (int)count);
	warm = MPI_Wtime() - warm;
	MPI_Allreduce(MPI_IN_PLACE, &warm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	iters = warm > 0 ? (int)(budget_s / warm) : 1000;
	iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
	times = malloc((size_t)iters * sizeof(*times));
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = 0; i < iters; i++) {
		double t0 = MPI_Wtime();
		run_one(b, (int)count);
		times[i] = MPI_Wtime() - t0;
	}
	MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	qsort(times, (size_t)iters, sizeof(*times), cmp_double);
	if (rank == 0) {
		double med = times[iters / 2];
		size_t real = table[b].per_rank ? count * 4 * (size_t)world : count * 4;
		double alg = b ? (double)real / med / 1e9 : 0;
		double f = table[b].factor2 < 0 ? 1 : table[b].factor2 * (world - 1) / (double)world;
		printf("op=%s n=%d bytes=%zu us=%.2f algbw_GBps=%.3f busbw_GBps=%.3f iters=%d\n",
		       table[b].name, world, b ? real : 0, med * 1e6, alg, alg * f, iters);
		fflush(stdout);
	}
	free(times);
}

int main(int argc, char **argv)
{
	const char *ops = NULL, *sizes = NULL;
	size_t minb = 4, maxb = (size_t)64 << 20;
	double budget_s = 0.5;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ops")) ops = argv[i + 1];
		else if (!strcmp(argv[i], "--min")) minb = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--max")) maxb = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--budget-ms")) budget_s = atof(argv[i + 1]) / 1e3;
		else if (!strcmp(argv[i], "--sizes")) sizes = argv[i + 1];
	}
	if (sizes) {
		maxb = 0;
		for (const char *q = sizes; *q; q += strcspn(q, ","), q += *q == ',') {
			size_t v = strtoull(q, NULL, 10);
			maxb = v > maxb ? v : maxb;
		}
	}
	sbuf = calloc(maxb / 4 + (size_t)world, 4);
	rbuf = calloc(maxb / 4 + (size_t)world, 4);
	counts = calloc((size_t)world, sizeof(*counts));
	displs = calloc((size_t)world, sizeof(*displs));
	if (!sbuf || !rbuf || !counts || !displs)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (int b = 0; b < NBENCH; b++) {
		char pat[64], list[1024];
		snprintf(pat, sizeof(pat), ",%s,", table[b].name);
		snprintf(list, sizeof(list), ",%s,", ops ? ops : "");
		if (ops && !strstr(list, pat))
			continue;
		if (b == 0) {
			bench(0, 0, budget_s);
			continue;
		}
		if (sizes)
			for (const char *q = sizes; *q; q += strcspn(q, ","), q += *q == ',')
				bench(b, strtoull(q, NULL, 10), budget_s);
		else
			for (size_t bytes = minb; bytes <= maxb; bytes *= 16)
				bench(b, bytes, budget_s);
	}
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return 0;
}
