/*
 * bench_ctl.c - what publishing a call in the control block costs (issue
 * 10: barrier latency within 2% of without): the hooks that every
 * collective runs (dri_ctl_begin, two dri_ctl_wait as the awaited peer
 * changes, dri_ctl_end), timed in a loop, with the control block and
 * without (DISTRUN_CTL=off, where each hook tests a pointer).
 *
 *   distrun -n 1 build/bench/bench_ctl [ITERATIONS]
 *
 * Prints "ctl=on ns_per_call=..." (or off); compare with a barrier's
 * latency from scripts/bench-coll.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "ctl.h"

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 2000000;
	dri_msg_id id = { .coll = DRI_BARRIER, .dtype = -1, .op = -1,
			  .root = -1 };
	const char *off = getenv("DISTRUN_CTL");
	double best = 1e9;

	if (dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "bench_ctl: %s\n", dr_last_error());
		return 1;
	}
	for (int rep = 0; rep < 5; rep++) {
		double t0 = now_s();

		for (long i = 0; i < iters; i++) {
			id.seq = (uint64_t)i;
			dri_ctl_begin(&id, -1, 0);
			dri_ctl_wait(1, 1);
			dri_ctl_wait(1, 0);
			dri_ctl_end(DR_OK);
		}
		double ns = (now_s() - t0) / iters * 1e9;
		if (ns < best)
			best = ns;
	}
	printf("ctl=%s ns_per_call=%.1f\n", off && !strcmp(off, "off") ?
	       "off" : "on", best);
	dr_destroy_process_group();
	return 0;
}
