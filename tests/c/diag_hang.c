/*
 * diag_hang.c - jobs that hang or fail in the ways distrun's diagnosis
 * must explain (tests/diag.bats): `distrun -n N build/tests/diag_hang MODE`.
 *
 *   skip      rank 1 skips the barrier (world seq 1) and sleeps in
 *             compute_step; the others wait in the barrier
 *   user      every rank runs all_reduce in a loop; at the third, rank 2
 *             stays in stuck_in_user_code
 *   mismatch  ranks 0 and 1 call all_reduce, the others broadcast: the
 *             runtime fails the call on every rank (DR_EMISMATCH)
 *   kill      the last rank never enters the all_reduce; rank 1 is killed
 *             (SIGKILL, by a thread of its own) while it waits in it
 *   p2p       ranks 0 and 1 each receive from the other first: deadlock
 *   ok        three barriers, rank 0 two seconds late at the first
 *   nodump    as skip, every rank not dumpable (PR_SET_DUMPABLE 0): a
 *             user who is not root cannot trace them
 *   sigstop   every rank runs all_reduce (1024 floats) in a loop; before
 *             the 50th, rank 5 (or the last rank, if fewer) stops itself
 *             with SIGSTOP: the others' waits time out naming their
 *             neighbours, and the message must name the stopped rank
 *
 * Each rank prints "rank R ready" once past init, so that a test knows
 * the job has started.  Built with -g: the tests look for the functions
 * and lines marked HANG-LINE below in the stacks.
 */
#include <distrun.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, size;

#define TRY(call)                                                            \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_) {                                                    \
			fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call,\
				dr_err_name(e_), dr_last_error());           \
			exit(1);                                             \
		}                                                            \
	} while (0)

static void nap(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts))
		;
}

__attribute__((noinline)) static void compute_step(void)
{
	for (;;)
		nap(3600); /* HANG-LINE compute_step */
}

__attribute__((noinline)) static void stuck_in_user_code(int *n)
{
	for (;; ++*n) /* (not compute_step's code: no folding of the two) */
		nap(1800); /* HANG-LINE stuck_in_user_code */
}

static void *killer(void *arg)
{
	(void)arg;
	nap(1.0);
	kill(getpid(), SIGKILL);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	float v[4] = { 1, 2, 3, 4 };

	setvbuf(stdout, NULL, _IOLBF, 0);
	TRY(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	size = dr_get_world_size();
	printf("rank %d ready\n", rank);
	if (!strcmp(mode, "nodump")) {
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
		mode = "skip";
	}
	if (!strcmp(mode, "skip")) {
		if (rank == 1)
			compute_step();
		TRY(dr_barrier(NULL, NULL, NULL, 0)); /* HANG-LINE barrier */
	} else if (!strcmp(mode, "user")) {
		for (int i = 0;; i++) {
			if (i == 3 && rank == 2)
				stuck_in_user_code(&i);
			TRY(dr_all_reduce(v, 4, DR_FLOAT32, DR_SUM, NULL, NULL));
		}
	} else if (!strcmp(mode, "mismatch")) {
		if (rank < 2)
			TRY(dr_all_reduce(v, 4, DR_FLOAT32, DR_SUM, NULL, NULL));
		else
			TRY(dr_broadcast(v, 4, DR_FLOAT32, 0, NULL, NULL));
	} else if (!strcmp(mode, "kill")) {
		pthread_t t;

		if (rank == size - 1)
			compute_step();
		if (rank == 1)
			pthread_create(&t, NULL, killer, NULL);
		TRY(dr_all_reduce(v, 4, DR_FLOAT32, DR_SUM, NULL, NULL));
	} else if (!strcmp(mode, "p2p")) {
		int x = rank;

		if (rank < 2)
			TRY(dr_recv(&x, 1, DR_INT32, 1 - rank, 0, NULL, NULL));
		TRY(dr_barrier(NULL, NULL, NULL, 0));
	} else if (!strcmp(mode, "ok")) {
		if (rank == 0)
			nap(2.0);
		for (int i = 0; i < 3; i++)
			TRY(dr_barrier(NULL, NULL, NULL, 0));
		TRY(dr_all_reduce(v, 4, DR_FLOAT32, DR_SUM, NULL, NULL));
	} else if (!strcmp(mode, "sigstop")) {
		static float big[1024];
		int stopper = size > 5 ? 5 : size - 1;

		for (int i = 0;; i++) {
			if (i == 50 && rank == stopper)
				raise(SIGSTOP);
			TRY(dr_all_reduce(big, 1024, DR_FLOAT32, DR_SUM, NULL,
					  NULL));
		}
	} else {
		fprintf(stderr, "usage: diag_hang skip|user|mismatch|kill|p2p|ok|sigstop\n");
		return 2;
	}
	TRY(dr_destroy_process_group());
	return 0;
}
