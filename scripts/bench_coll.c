/*
 * bench_coll.c - one rank of the collective benchmark (run under distrun by
 * scripts/bench-coll): for each collective of the table and each size from
 * MIN to MAX bytes (x16), the median over iterations of the slowest rank's
 * time per call, printed by rank 0 as
 *
 *   op=all_gather n=4 bytes=1024 us=12.30 algbw_GBps=0.083 busbw_GBps=0.062
 *
 * Sizes and bus bandwidth follow nccl-tests: bytes is the whole buffer
 * (all_gather: the gathered result; reduce_scatter and all_to_all: the
 * whole input), algbw = bytes / time, busbw = algbw * factor with factor
 * 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and
 * all_to_all, 1 for broadcast and reduce.  scripts/bench_coll_gloo.py and
 * scripts/mpi/bench_coll_mpi.c print the same lines for torch and MPI.
 *
 *   bench_coll [--ops a,b,...] [--min BYTES] [--max BYTES] [--budget-ms MS]
 *              [--sizes B1,B2,...]   (instead of MIN to MAX x16)
 *
 * Every rank runs the same number of iterations: it is derived from the
 * slowest rank's warm-up time, agreed on by an all_reduce.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "distrun.h"

struct bench {
	const char *name;
	double factor2; /* busbw factor, times n/(n-1) where it has one */
	int per_rank;   /* 1: bytes is cut in n pieces of count elements */
};

static const struct bench table[] = {
	{ "barrier", 0, 0 },
	{ "all_reduce", 2, 0 },
	{ "broadcast", -1, 0 },
	{ "reduce", -1, 0 },
	{ "all_gather", 1, 1 },
	{ "reduce_scatter", 1, 1 },
	{ "all_to_all", 1, 1 },
	{ "gather", 1, 1 },
	{ "scatter", 1, 1 },
	{ "all_to_all_v", 1, 1 }, /* even splits: all_to_all's data */
};
#define NBENCH (sizeof(table) / sizeof(table[0]))

static int rank, world;
static char *sbuf, *rbuf;
static size_t *splits; /* all_to_all_v's counts, world of them */

static dr_err run_one(int b, size_t count)
{
	switch (b) {
	case 0: return dr_barrier(NULL, NULL, NULL, 0);
	case 1: return dr_all_reduce(sbuf, count, DR_FLOAT32, DR_SUM, NULL, NULL);
	case 2: return dr_broadcast(sbuf, count, DR_FLOAT32, 0, NULL, NULL);
	case 3: return dr_reduce(sbuf, count, DR_FLOAT32, DR_SUM, 0, NULL, NULL);
	case 4: return dr_all_gather(sbuf, rbuf, count, DR_FLOAT32, NULL, NULL);
	case 5: return dr_reduce_scatter(sbuf, rbuf, count, DR_FLOAT32, DR_SUM,
					 NULL, NULL);
	case 6: return dr_all_to_all(sbuf, rbuf, count, DR_FLOAT32, NULL, NULL);
	case 7: return dr_gather(sbuf, rbuf, count, DR_FLOAT32, 0, NULL, NULL);
	case 8: return dr_scatter(sbuf, rbuf, count, DR_FLOAT32, 0, NULL, NULL);
	default:
		for (int i = 0; i < world; i++)
			splits[i] = count;
		return dr_all_to_all_v(sbuf, splits, rbuf, splits, DR_FLOAT32,
				       NULL, NULL);
	}
}

static void check(dr_err err, const char *what)
{
	if (err) {
		fprintf(stderr, "bench_coll: rank %d: %s: %s: %s\n", rank, what,
			dr_err_name(err), dr_last_error());
		exit(1);
	}
}

/* Times `b` at `bytes`; rank 0 prints the line. */
static void bench(int b, size_t bytes, double budget_s)
{
	const struct bench *t = &table[b];
	size_t count = bytes / 4;
	double warm, *times;
	int iters;

	if (t->per_rank)
		count /= (size_t)world;
	if (b && !count)
		return;
	/* warm-up (connections, scratch), then how many fit the budget */
	check(run_one(b, count), t->name);
	warm = now_s();
	check(run_one(b, count), t->name);
	warm = now_s() - warm;
	check(dr_all_reduce(&warm, 1, DR_FLOAT64, DR_MAX, NULL, NULL), "agree");
	iters = warm > 0 ? (int)(budget_s / warm) : 1000;
	iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
	times = malloc((size_t)iters * sizeof(*times));
	if (!times)
		exit(1);
	check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
	for (int i = 0; i < iters; i++) {
		double t0 = now_s();
		check(run_one(b, count), t->name);
		times[i] = now_s() - t0;
	}
	/* each iteration as long as its slowest rank took */
	check(dr_all_reduce(times, (size_t)iters, DR_FLOAT64, DR_MAX, NULL, NULL),
	      "gather times");
	qsort(times, (size_t)iters, sizeof(*times), cmp_double);
	if (rank == 0) {
		double med = times[iters / 2];
		size_t real = t->per_rank ? count * 4 * (size_t)world : count * 4;
		double alg = (double)real / med / 1e9;
		double f = t->factor2 < 0 ? 1
			 : t->factor2 * (world - 1) / (double)world;
		printf("op=%s n=%d bytes=%zu us=%.2f algbw_GBps=%.3f "
		       "busbw_GBps=%.3f iters=%d\n", t->name, world, b ? real : 0,
		       med * 1e6, b ? alg : 0, b ? alg * f : 0, iters);
		fflush(stdout);
	}
	free(times);
}

int main(int argc, char **argv)
{
	const char *ops = NULL, *sizes = NULL;
	size_t minb = 4, maxb = (size_t)64 << 20;
	double budget_s = 0.5;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ops"))
			ops = argv[i + 1];
		else if (!strcmp(argv[i], "--min"))
			minb = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--max"))
			maxb = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--sizes"))
			sizes = argv[i + 1];
		else if (!strcmp(argv[i], "--budget-ms"))
			budget_s = atof(argv[i + 1]) / 1e3;
		else {
			fprintf(stderr, "bench_coll: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (sizes) { /* the largest sets the buffers */
		maxb = 0;
		for (const char *q = sizes; *q; q += strcspn(q, ","), q += *q == ',') {
			size_t v = strtoull(q, NULL, 10);
			maxb = v > maxb ? v : maxb;
		}
	}
	check(dr_init_process_group(NULL, NULL), "init");
	rank = dr_get_rank();
	world = dr_get_world_size();
	sbuf = calloc(maxb / 4 + (size_t)world, 4);
	rbuf = calloc(maxb / 4 + (size_t)world, 4);
	splits = calloc((size_t)world, sizeof(*splits));
	if (!sbuf || !rbuf || !splits)
		return 1;
	for (size_t b = 0; b < NBENCH; b++) {
		char pat[64];
		snprintf(pat, sizeof(pat), ",%s,", table[b].name);
		if (ops) {
			char list[1024];
			snprintf(list, sizeof(list), ",%s,", ops);
			if (!strstr(list, pat))
				continue;
		}
		if (b == 0) {
			bench(0, 0, budget_s);
			continue;
		}
		if (sizes)
			for (const char *q = sizes; *q; q += strcspn(q, ","), q += *q == ',')
				bench((int)b, strtoull(q, NULL, 10), budget_s);
		else
			for (size_t bytes = minb; bytes <= maxb; bytes *= 16)
				bench((int)b, bytes, budget_s);
	}
	free(sbuf);
	free(rbuf);
	check(dr_destroy_process_group(), "destroy");
	return 0;
}
