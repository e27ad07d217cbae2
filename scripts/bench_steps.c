/*
 * bench_steps.c - what each step of a small blocking call costs on its
 * own (issue 35: where a barrier's time over the floor goes), each timed
 * in a loop of ITERS on one rank, the least of REPS loops (a loop the
 * scheduler interrupted only looks slower): the steps every blocking
 * call of the world takes before and after its flags (coll_shm.c's quick
 * path), and the clocks and CPU queries it may read.
 *
 *   distrun -n 1 build/bench/bench_steps [ITERS]
 *
 * Prints "step=NAME ns=X" per step; then the whole barrier and 4-byte
 * all_reduce of one rank ("step=barrier_n1", "step=all_reduce4_n1"):
 * with no peer they take the general way (dri_submit, no flags), what
 * every call pays that the quick way does not skip.  On a shared
 * machine run it under `chrt -f 1`.
 */
#include <distrun.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"
#include "ctl.h"
#include "cuda_driver.h"
#include "group.h"
#include "reduce.h"
#include "timeout.h"
#include "transport.h"

#define REPS 7

static int yes(void *arg)
{
	return arg != NULL;
}

static volatile long sink;

static long iters;

/* The least ns per iteration of REPS loops of body (a statement). */
#define TIME(name, body)                                                     \
	do {                                                                 \
		double best = 1e9;                                           \
		for (int rep_ = 0; rep_ < REPS; rep_++) {                     \
			double t0_ = now_s();                                \
			for (long i_ = 0; i_ < iters; i_++) {                \
				body;                                        \
			}                                                    \
			double t_ = (now_s() - t0_) / (double)iters * 1e9;   \
			best = t_ < best ? t_ : best;                        \
		}                                                            \
		printf("step=%s ns=%.1f\n", name, best);                     \
	} while (0)

int main(int argc, char **argv)
{
	dri_msg_id id = { .coll = DRI_BARRIER, .dtype = -1, .op = -1,
			  .root = -1 };
	float x = 1.0f, y = 2.0f;
	uint64_t seq;
	struct timespec ts;

	/* a small buffer from the heap, a large one of its own mapping */
	float *small = malloc(64), *big = malloc(1 << 20);
	iters = argc > 1 ? atol(argv[1]) : 200000;
	if (!small || !big)
		return 1;
	if (iters < 1 || dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "bench_steps: %s\n",
			iters < 1 ? "usage: bench_steps [ITERS]" : dr_last_error());
		return 1;
	}
	TIME("clock_gettime_coarse",
	     (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts), sink += ts.tv_nsec));
	TIME("clock_gettime", (clock_gettime(CLOCK_MONOTONIC, &ts),
			       sink += ts.tv_nsec));
	TIME("sched_getcpu", sink += sched_getcpu());
	TIME("cuda_ptr_device (stack)", sink += dri_cuda_ptr_device(&x));
	TIME("cuda_ptr_device (heap)", sink += dri_cuda_ptr_device(small));
	TIME("cuda_ptr_device (own mapping)", sink += dri_cuda_ptr_device(big));
	TIME("transport_check", sink += dri_transport_check());
	TIME("world_take_seq (compare-and-swap)",
	     sink += dri_world_take_seq(yes, &x, &seq));
	TIME("deadline", sink += dri_deadline(dri_timeout_ms()));
	TIME("ctl_begin+end", (id.seq = (uint64_t)i_,
			       dri_ctl_begin(&id, -1, 0), dri_ctl_end(DR_OK)));
	TIME("reduce 1 float", (dri_reduce(&x, &y, 1, DR_FLOAT32, DR_SUM),
				dri_reduce_finish(&x, 1, DR_FLOAT32, DR_SUM, 2)));
	TIME("barrier_n1", sink += dr_barrier(NULL, NULL, NULL, 0));
	TIME("all_reduce4_n1",
	     sink += dr_all_reduce(&x, 1, DR_FLOAT32, DR_SUM, NULL, NULL));
	dr_destroy_process_group();
	free(small);
	free(big);
	return 0;
}
