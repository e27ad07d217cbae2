/*
 * call_pairs.c - two different collectives of one seq: rank 1 makes call
 * A, every other rank call B, each of COUNT floats; then up to three
 * barriers.  Every rank prints the first error it gets,
 *
 *   rank R: DR_EMISMATCH: rank 0 called ... but rank 1 called ... (seq 1)
 *
 * and exits 0 if that is DR_EMISMATCH, 1 otherwise (another error, or
 * none).  A rank still in init when the others abort the group gets the
 * error there, and says so.  Pairs in which ranks wait for messages the other call never
 * sends (a reduce's root against an all_reduce) fail on the transport's
 * announcement of the call (transport.c), not at the timeout.
 *
 *   call_pairs A B COUNT
 *
 * Calls: barrier, monitored_barrier, all_reduce, all_reduce_max,
 * all_reduce_i32, broadcast, broadcast1, reduce, reduce1, all_gather,
 * gather, gather1, scatter, scatter1, reduce_scatter, all_to_all,
 * all_to_all_v (a trailing 1: rooted at rank 1, else at rank 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"

static dr_err call(const char *name, size_t c, float *s, float *r, int n)
{
	size_t k = strlen(name);
	int root = k && name[k - 1] == '1';
	char base[64];
	size_t *counts = malloc(2 * (size_t)n * sizeof(size_t));
	dr_err e;

	if (!counts || k >= sizeof(base)) {
		free(counts);
		return DR_ENOMEM;
	}
	memcpy(base, name, k + 1);
	if (root)
		base[k - 1] = 0;
	for (int i = 0; i < 2 * n; i++)
		counts[i] = c;
	if (!strcmp(base, "barrier"))
		e = dr_barrier(NULL, NULL, NULL, 0);
	else if (!strcmp(base, "monitored_barrier"))
		e = dr_monitored_barrier(NULL, 0, 0);
	else if (!strcmp(base, "all_reduce"))
		e = dr_all_reduce(s, c, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(base, "all_reduce_max"))
		e = dr_all_reduce(s, c, DR_FLOAT32, DR_MAX, NULL, NULL);
	else if (!strcmp(base, "all_reduce_i32"))
		e = dr_all_reduce(s, c, DR_INT32, DR_SUM, NULL, NULL);
	else if (!strcmp(base, "broadcast"))
		e = dr_broadcast(s, c, DR_FLOAT32, root, NULL, NULL);
	else if (!strcmp(base, "reduce"))
		e = dr_reduce(s, c, DR_FLOAT32, DR_SUM, root, NULL, NULL);
	else if (!strcmp(base, "all_gather"))
		e = dr_all_gather(s, r, c, DR_FLOAT32, NULL, NULL);
	else if (!strcmp(base, "gather"))
		e = dr_gather(s, r, c, DR_FLOAT32, root, NULL, NULL);
	else if (!strcmp(base, "scatter"))
		e = dr_scatter(s, r, c, DR_FLOAT32, root, NULL, NULL);
	else if (!strcmp(base, "reduce_scatter"))
		e = dr_reduce_scatter(s, r, c, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(base, "all_to_all"))
		e = dr_all_to_all(s, r, c, DR_FLOAT32, NULL, NULL);
	else if (!strcmp(base, "all_to_all_v"))
		e = dr_all_to_all_v(s, counts, r, counts + n, DR_FLOAT32, NULL,
				    NULL);
	else {
		fprintf(stderr, "call_pairs: unknown call '%s'\n", name);
		exit(2);
	}
	free(counts);
	return e;
}

int main(int argc, char **argv)
{
	int rank, n;
	size_t c;
	float *s, *r;
	dr_err e;

	if (argc != 4) {
		fprintf(stderr, "usage: call_pairs A B COUNT\n");
		return 2;
	}
	c = strtoul(argv[3], NULL, 10);
	if ((e = dr_init_process_group(NULL, NULL))) {
		/* The others may find the mismatch, and abort the group,
		 * before this rank is through init (its last exchange). */
		const char *env = getenv("RANK");

		printf("rank %s: %s: %s (in init)\n", env ? env : "?",
		       dr_err_name(e), dr_last_error());
		return e == DR_EMISMATCH ? 0 : 1;
	}
	rank = dr_get_rank();
	n = dr_get_world_size();
	s = calloc((c + 1) * (size_t)n, sizeof(float));
	r = calloc((c + 1) * (size_t)n, sizeof(float));
	if (!s || !r)
		return 1;
	e = call(rank == 1 ? argv[1] : argv[2], c, s, r, n);
	/* a call that returned at once learns of it at a later one */
	for (int k = 0; !e && k < 3; k++)
		e = dr_barrier(NULL, NULL, NULL, 0);
	printf("rank %d: %s: %s\n", rank, dr_err_name(e),
	       e ? dr_last_error() : "no error");
	fflush(stdout);
	dr_destroy_process_group();
	free(s);
	free(r);
	return e == DR_EMISMATCH ? 0 : 1;
}
