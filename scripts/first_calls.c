/*
 * first_calls.c - where the time of a short loop right after init goes
 * (issue 35's "300 after init"): every rank times each of its first
 * ITERS blocking barriers, then each of ITERS 4-byte all_reduces, one
 * by one, and says which calls were slow.  bench-anchor's dr300 times
 * such a loop whole, on rank 0; this shows whether its excess over the
 * long loop is a warm-up of the library (every call slower at first),
 * a few calls that wait for the scheduler (the first: the ranks leave
 * init's closing barrier at different times; the last: a rank that has
 * left the loop runs on while the others wait for a CPU), or spread.
 *
 *   distrun -n N build/bench/first_calls [ITERS [whole]]   (default 300)
 *
 * Prints per rank and op, after both loops, "rank=R op=OP n=WORLD
 * calls=N first_us=A second_us=B last_us=Z mid_us=M max_us=X max_at=I
 * total_us=T": the first, second and last call, the mean of the others
 * (what the loop would cost without its ends), the slowest and its
 * index, and the loop's time.  Timing each call puts a clock read and a
 * store between the calls (30-50 ns here, a fifth of a 2-rank barrier):
 * with "whole", each loop is timed as the anchor times its long one,
 * the clock read before and after it and nothing inside, and the lines
 * are "rank=R op=OP n=WORLD calls=N total_us=T" (bench-anchor's dr300;
 * the per-call run gives its first calls' line).  An error ends it with
 * the call's message and status 1.
 */
#include <distrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static void check(dr_err e, const char *what)
{
	if (e) {
		fprintf(stderr, "first_calls: %s: %s: %s\n", what,
			dr_err_name(e), dr_last_error());
		exit(1);
	}
}

/* The n call times t[1..n] - t[0..n-1] of op on rank r, summed up. */
static void report(int r, const char *op, int n, const double *t)
{
	double max = 0, mid = 0;
	int at = 0;

	for (int i = 0; i < n; i++) {
		double d = t[i + 1] - t[i];

		if (d > max) {
			max = d;
			at = i;
		}
		/* the middle calls' mean: the loop without its ends (a mean,
		 * as the loop's: with more ranks than CPUs a call costs a
		 * switch or none, in turns, and a median would pick one) */
		if (i >= 2 && i < n - 1)
			mid += d;
	}
	printf("rank=%d op=%s n=%d calls=%d first_us=%.1f second_us=%.1f "
	       "last_us=%.1f mid_us=%.2f max_us=%.1f max_at=%d total_us=%.1f\n",
	       r, op, dr_get_world_size(), n, (t[1] - t[0]) * 1e6,
	       (t[2] - t[1]) * 1e6, (t[n] - t[n - 1]) * 1e6,
	       mid / (n - 3) * 1e6, max * 1e6, at, (t[n] - t[0]) * 1e6);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 300, r;
	int whole = argc > 2 && !strcmp(argv[2], "whole");
	double *tb, *ta;
	float x = 1.0f;

	if (n < 10 || argc > 3 || (argc == 3 && !whole)) {
		fprintf(stderr, "usage: first_calls [ITERS >= 10 [whole]]\n");
		return 2;
	}
	tb = malloc(sizeof(*tb) * ((size_t)n + 1));
	ta = malloc(sizeof(*ta) * ((size_t)n + 1));
	if (!tb || !ta) {
		fprintf(stderr, "first_calls: out of memory\n");
		return 1;
	}
	check(dr_init_process_group(NULL, NULL), "init");
	r = dr_get_rank();
	if (whole) {
		double t0 = now_s(), t1, t2;

		for (int i = 0; i < n; i++)
			check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
		t1 = now_s();
		for (int i = 0; i < n; i++)
			check(dr_all_reduce(&x, 1, DR_FLOAT32, DR_SUM, NULL,
					    NULL), "all_reduce");
		t2 = now_s();
		printf("rank=%d op=barrier n=%d calls=%d total_us=%.1f\n", r,
		       dr_get_world_size(), n, (t1 - t0) * 1e6);
		printf("rank=%d op=allreduce n=%d calls=%d total_us=%.1f\n", r,
		       dr_get_world_size(), n, (t2 - t1) * 1e6);
		check(dr_destroy_process_group(), "destroy");
		free(tb);
		free(ta);
		return 0;
	}
	tb[0] = now_s();
	for (int i = 0; i < n; i++) {
		check(dr_barrier(NULL, NULL, NULL, 0), "barrier");
		tb[i + 1] = now_s();
	}
	ta[0] = now_s();
	for (int i = 0; i < n; i++) {
		check(dr_all_reduce(&x, 1, DR_FLOAT32, DR_SUM, NULL, NULL),
		      "all_reduce");
		ta[i + 1] = now_s();
	}
	/* printed after both loops: no rank's output runs inside them */
	report(r, "barrier", n, tb);
	report(r, "allreduce", n, ta);
	check(dr_destroy_process_group(), "destroy");
	free(tb);
	free(ta);
	return 0;
}
