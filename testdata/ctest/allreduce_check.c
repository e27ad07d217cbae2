/*
 * allreduce_check - an MPI-style test program for testdata/ctest: every
 * rank contributes rank + 1, all_reduce sums, and each rank checks the sum
 * is n(n+1)/2.  `--break-rank R` makes rank R contribute 100 more, so the
 * check fails; rank R reports it and exits 1 at once, the others only
 * after 60 s (a launcher stops them long before), so the launcher names
 * rank R as the failing one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distrun.h"

int main(int argc, char **argv)
{
	int broken = -1, rank, n;
	int32_t v;

	if (argc == 3 && !strcmp(argv[1], "--break-rank"))
		broken = atoi(argv[2]);
	if (dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "init: %s\n", dr_last_error());
		return 2;
	}
	rank = dr_get_rank();
	n = dr_get_world_size();
	v = rank + 1 + (rank == broken ? 100 : 0);
	if (dr_all_reduce(&v, 1, DR_INT32, DR_SUM, NULL, NULL)) {
		fprintf(stderr, "all_reduce: %s\n", dr_last_error());
		return 2;
	}
	if (v != n * (n + 1) / 2) {
		if (rank != broken)
			sleep(60);  /* stopped by the launcher before that */
		fprintf(stderr, "rank %d: sum %d, expected %d\n", rank,
			(int)v, n * (n + 1) / 2);
		return 1;
	}
	printf("rank %d: sum %d ok\n", rank, (int)v);
	dr_destroy_process_group();
	return 0;
}
