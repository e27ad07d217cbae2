/*
 * rdzv_check.c - joins the job by whatever init method and launcher it is
 * given, then checks that the group really is the job:
 * `rdzv_check [INIT_METHOD]` (default env://).
 *
 * Every rank all_reduces its rank and a one, and prints
 *   rank R of N: ok (launcher L)
 * when the sums are p(p-1)/2 and p, so a rank that joined the wrong job,
 * or two jobs glued together, fails.  On an init failure prints
 *   init: DR_E...: message
 * and exits 1.
 */
#include <distrun.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	const char *method = argc > 1 ? argv[1] : NULL;
	int64_t v[2];
	dr_err e;
	int r, n;

	e = dr_init_process_group(NULL, method);
	if (e) {
		printf("init: %s: %s\n", dr_err_name(e), dr_last_error());
		return 1;
	}
	r = dr_get_rank();
	n = dr_get_world_size();
	v[0] = r;
	v[1] = 1;
	e = dr_all_reduce(v, 2, DR_INT64, DR_SUM, NULL, NULL);
	if (e) {
		printf("rank %d: all_reduce: %s: %s\n", r, dr_err_name(e),
		       dr_last_error());
		return 1;
	}
	if (v[0] != (int64_t)n * (n - 1) / 2 || v[1] != n) {
		printf("rank %d of %d: wrong sums %lld and %lld\n", r, n,
		       (long long)v[0], (long long)v[1]);
		return 1;
	}
	printf("rank %d of %d: ok (launcher %s)\n", r, n, dr_get_launcher());
	return dr_destroy_process_group() ? 1 : 0;
}
