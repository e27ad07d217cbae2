/*
 * coll_limits.c - collectives at the limits of a job, as every rank of
 * it: `distrun -n N build/tests/coll_limits MODE [ARG]`.
 *
 *   smoke          as many ranks as the machine holds (4096 here):
 *                  barrier, all_reduce, all_gather, (up to 64 ranks)
 *                  all_to_all, and every rank sending to rank 0 at once;
 *                  the last rank says how many descriptors it holds
 *                  after all_gather and at the end (connections are
 *                  made lazily)
 *   oom FILE       rank 0 runs out of memory inside an all_reduce: its
 *                  peers fail at once with its reason, not at the timeout
 *                  (rank 1 creates FILE when done)
 *
 * Prints "rank R: ok, N checks" (smoke) and exits 0, or names the first
 * difference and exits 1; oom prints each rank's error.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "distrun.h"
#include "check.h"

#define alloc CHECK_ALLOC

static int rank, world;
static long checks;

static void mode_smoke(void)
{
	int64_t v = rank + 1, sum = (int64_t)world * (world + 1) / 2;
	int32_t *all = alloc((size_t)world * sizeof(int32_t));
	int32_t me = rank;

	CHECK_OK(dr_barrier(NULL, NULL, NULL, 0));
	CHECK_OK(dr_all_reduce(&v, 1, DR_INT64, DR_SUM, NULL, NULL));
	if (v != sum)
		FAIL("all_reduce: %" PRId64 ", want %" PRId64, v, sum);
	CHECK_OK(dr_all_gather(&me, all, 1, DR_INT32, NULL, NULL));
	for (int r = 0; r < world; r++)
		if (all[r] != r)
			FAIL("all_gather: slot %d holds %d", r, all[r]);
	/* the peers barrier, all_reduce and all_gather talked to: no rank
	 * can have left yet (its closed connections would be gone) */
	if (rank == world - 1)
		printf("rank %d: after all_gather, %d file descriptors open\n",
		       rank, check_dir_entries("/proc/self/fd") - 1);
	/* all_to_all in several windows of pairwise steps (it touches every
	 * peer, so not on the largest jobs) */
	if (world <= 64) {
		int32_t *in = alloc((size_t)world * sizeof(int32_t));
		for (int r = 0; r < world; r++)
			in[r] = rank * 1000 + r;
		CHECK_OK(dr_all_to_all(in, all, 1, DR_INT32, NULL, NULL));
		for (int r = 0; r < world; r++)
			if (all[r] != r * 1000 + rank)
				FAIL("all_to_all: slot %d holds %d", r, all[r]);
		free(in);
	}
	/* every rank sends to rank 0 at once: as many connections to one
	 * listener as there are ranks (tcp.c's pending slots and backlog) */
	if (rank == 0) {
		uint8_t *seen = alloc((size_t)world);
		memset(seen, 0, (size_t)world);
		for (int k = 1; k < world; k++) {
			int32_t got = -1;
			int src = -1;
			CHECK_OK(dr_recv(&got, 1, DR_INT32, DR_ANY_SOURCE, 7, NULL,
					 &src));
			if (src <= 0 || src >= world || got != src || seen[src]++)
				FAIL("fan-in: %d from rank %d", got, src);
		}
		free(seen);
	} else {
		CHECK_OK(dr_send(&me, 1, DR_INT32, 0, 7, NULL));
	}
	CHECK_OK(dr_barrier(NULL, NULL, NULL, 0));
	free(all);
	if (rank == world - 1) { /* connections are made lazily: how many? */
		int fds = check_dir_entries("/proc/self/fd");

		printf("rank %d: %d file descriptors open in a world of %d\n", rank,
		       fds - 1, world);
	}
}

/* Rank 0 runs out of memory in the middle of a large all_reduce (its
 * address space capped just above what it uses).  Rank 1 must learn it at
 * once, with rank 0's reason: rank 0 stays in the job (it waits for a
 * message from rank 1), so rank 1 would otherwise wait for its part until
 * the timeout. */
#ifdef __SANITIZE_THREAD__
/* mode oom needs malloc to fail by returning NULL, as it does without a
 * sanitizer (ThreadSanitizer's allocator aborts the program instead). */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "allocator_may_return_null=1";
}
#endif

static void mode_oom(const char *done_file)
{
#ifdef __SANITIZE_ADDRESS__
	(void)done_file;
	printf("rank %d: skip: the sanitizer needs its address space\n", rank);
#else
	size_t count = (size_t)16 << 20;
	float *buf = alloc(count * sizeof(float));
	dr_err err;

	memset(buf, 0, count * sizeof(float));
	/* Rank 1 may still be leaving this barrier when rank 0 fails. */
	err = dr_barrier(NULL, NULL, NULL, 0);
	if (!err && rank == 0) {
		unsigned long pages = 0;
		FILE *f = fopen("/proc/self/statm", "r");
		if (!f || fscanf(f, "%lu", &pages) != 1)
			FAIL("cannot read /proc/self/statm");
		fclose(f);
		struct rlimit rl;
		getrlimit(RLIMIT_AS, &rl);
		rl.rlim_cur = pages * (rlim_t)sysconf(_SC_PAGESIZE) + (8 << 20);
		if (setrlimit(RLIMIT_AS, &rl))
			FAIL("setrlimit");
	}
	if (!err)
		err = dr_all_reduce(buf, count, DR_FLOAT32, DR_SUM, NULL, NULL);
	printf("rank %d: failed: %s: %s\n", rank, dr_err_name(err),
	       err ? dr_last_error() : "");
	/* Rank 0 stays, without driving the transport, until rank 1 is done
	 * (or two minutes pass). */
	if (rank == 0) {
		for (int i = 0; i < 1200 && access(done_file, F_OK); i++)
			usleep(100000);
	} else {
		FILE *f = fopen(done_file, "w");
		if (f)
			fclose(f);
	}
	free(buf);
#endif
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "smoke";

	setvbuf(stdout, NULL, _IOLBF, 0);
	rank = getenv("RANK") ? atoi(getenv("RANK")) : -1;
	CHECK_OK(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	world = dr_get_world_size();
	if (!strcmp(mode, "smoke"))
		mode_smoke();
	else if (!strcmp(mode, "oom"))
		mode_oom(argc > 2 ? argv[2] : "oom-done");
	else
		FAIL("unknown mode %s", mode);
	dr_destroy_process_group();
	if (strcmp(mode, "oom"))
		printf("rank %d: ok, %ld checks\n", rank, checks);
	return 0;
}
