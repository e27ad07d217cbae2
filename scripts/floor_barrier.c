/*
 * floor_barrier.c - the least the small calls of N processes on this
 * machine can cost: a cache line per process in an anonymous shared
 * mapping, written by that process alone, nothing else (no library, no
 * checks, no timeout).  Each call's floor is timed as
 * scripts/bench-anchor times libdistrun and MPI: the mean over a loop of
 * ITERS calls, the clock read before and after the loop only (a clock
 * read costs about as much as a round here, and a shared array of times
 * would make the processes fight over its lines).  What a process
 * prints is the slowest process's loop.
 *
 * The calls (each process's line holds its count `up`, its data, and
 * the CPU it runs on when crowded):
 *   barrier      store up = e; wait until every other's up >= e (for
 *                N = 2 the two-flag floor: one line each, each spins on
 *                the other's);
 *   allreduce    4 bytes: the value into val[e & 1] of the own line,
 *                then up = e; wait for every up >= e; sum the values in
 *                rank order (the same line brings flag and data);
 *   broadcast    4 bytes from process 0: it writes val[e % K] and up,
 *                and runs ahead of the slowest reader by up to K - 1
 *                calls; a reader waits for 0's up, copies, stores its up;
 *   reduce       4 bytes to process 0: the others write val[e % K] and
 *                up and go on (up to K - 1 calls ahead of 0); 0 waits
 *                for them all, sums in rank order, stores its up.
 * Waiting pauses; when the processes outnumber the CPUs they may run on,
 * it yields at every look while one it waits for said it runs on this
 * CPU, and every 64th look else (as coll_shm_flags.c does: yielding to a
 * process that waits too only costs a switch).
 *
 *   floor_barrier N [ITERS]    prints, for each call above,
 *                              "op=OP n=N bytes=B us=X loop_us=X
 *                              iters=ITERS": X the slowest process's
 *                              mean per call over the loop, after
 *                              ITERS / 10 untimed calls (bytes 0 for the
 *                              barrier, 4 for the others)
 *   floor_barrier handoff      prints "op=handoff us=X": two processes
 *                              pinned to one CPU pass a turn back and
 *                              forth with sched_yield; X is one pass, the
 *                              switch that ranks sharing a CPU pay
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define MAXP 64
/* Calls a rooted call's writer may run ahead of its readers. */
#define K 4

/* One process's line: written by it alone. */
struct line {
	uint64_t up;
	float val[K];
	int32_t cpu;
	double loop;           /* its loop's seconds, once done */
} __attribute__((aligned(64)));

enum { BARRIER, ALLREDUCE, BROADCAST, REDUCE, NCALLS };
static const char *const names[NCALLS] = {
	"barrier", "allreduce", "broadcast", "reduce"
};

struct shared {
	struct line ln[NCALLS][MAXP];
	struct line start[MAXP]; /* a barrier before each call's loop */
};

static struct shared *s;
static int p, r, crowded, mycpu;

/* Waits until line l's up reaches e (crowded: yields as the file's
 * comment says). */
static void await_up(const struct line *l, uint64_t e)
{
	for (unsigned k = 0; __atomic_load_n(&l->up, __ATOMIC_ACQUIRE) < e; k++) {
		if (crowded && (k % 64 == 63 ||
				__atomic_load_n(&l->cpu, __ATOMIC_RELAXED) == mycpu))
			sched_yield();
		else
			relax();
	}
}

static void arrive(struct line *l, uint64_t e)
{
	if (crowded) {
		mycpu = sched_getcpu() + 1;
		__atomic_store_n(&l->cpu, mycpu, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&l->up, e, __ATOMIC_RELEASE);
}

/* One call number e of kind `call` on lines ln; *x is the data. */
static void one(int call, struct line *ln, uint64_t e, float *x)
{
	float sum = 0;

	switch (call) {
	case BARRIER:
		arrive(&ln[r], e);
		for (int j = 0; j < p; j++)
			if (j != r)
				await_up(&ln[j], e);
		break;
	case ALLREDUCE:
		ln[r].val[e & 1] = *x;
		arrive(&ln[r], e);
		for (int j = 0; j < p; j++) {
			if (j != r)
				await_up(&ln[j], e);
			sum += j == r ? *x : ln[j].val[e & 1];
		}
		*x = sum / (float)p;
		break;
	case BROADCAST:
		if (r == 0) {
			/* the slot e % K was read at e - K by everyone */
			for (int j = 1; j < p; j++)
				if (e > K)
					await_up(&ln[j], e - K);
			ln[0].val[e % K] = *x;
			arrive(&ln[0], e);
		} else {
			await_up(&ln[0], e);
			*x = ln[0].val[e % K];
			arrive(&ln[r], e);
		}
		break;
	case REDUCE:
		if (r) {
			if (e > K)
				await_up(&ln[0], e - K);
			ln[r].val[e % K] = *x;
			arrive(&ln[r], e);
		} else {
			for (int j = 0; j < p; j++) {
				if (j)
					await_up(&ln[j], e);
				sum += j ? ln[j].val[e % K] : *x;
			}
			*x = sum / (float)p;
			arrive(&ln[0], e);
		}
		break;
	}
}

/* Two processes on the CPU this one runs on take turns on a counter. */
static int handoff(void)
{
	const long n = 200000;
	volatile long *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cpu_set_t one;
	double t0;
	pid_t c;
	int me;

	if (w == MAP_FAILED) {
		perror("floor_barrier: mmap");
		return 1;
	}
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
	if (sched_setaffinity(0, sizeof(one), &one)) {
		perror("floor_barrier: sched_setaffinity");
		return 1;
	}
	t0 = now_s();
	if ((c = fork()) < 0) {
		perror("floor_barrier: fork");
		return 1;
	}
	me = c == 0;
	for (long v; (v = *w) < n;) {
		if ((v & 1) == me)
			*w = v + 1;
		sched_yield();
	}
	if (me)
		_exit(0);
	waitpid(c, NULL, 0);
	printf("op=handoff us=%.2f\n", (now_s() - t0) / (double)n * 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	long iters = argc > 2 ? atol(argv[2]) : 100000;
	uint64_t warm, start = 0;
	cpu_set_t cpus;
	float x = 1.0f;

	if (argc > 1 && !strcmp(argv[1], "handoff"))
		return handoff();
	p = argc > 1 ? atoi(argv[1]) : 0;
	if (p < 1 || p > MAXP || iters < 1) {
		fprintf(stderr, "usage: floor_barrier N(1..%d) [ITERS] | handoff\n",
			MAXP);
		return 2;
	}
	sched_getaffinity(0, sizeof(cpus), &cpus);
	crowded = p > CPU_COUNT(&cpus);
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED) {
		perror("floor_barrier: mmap");
		return 1;
	}
	for (int i = 1; i < p; i++) {
		pid_t c = fork();

		if (c < 0) {
			perror("floor_barrier: fork");
			return 1;
		}
		if (c == 0) {
			/* Spinning for ever on a process that died (killed, or
			 * its output closed) would eat a CPU: die with it. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() == 1)
				_exit(1);
			r = i;
			break;
		}
	}
	warm = (uint64_t)iters / 10;
	for (int call = 0; call < NCALLS; call++) {
		struct line *ln = s->ln[call];
		double t0, worst = 0;

		/* Everyone here before anyone times (the ones forked last). */
		one(BARRIER, s->start, ++start, &x);
		for (uint64_t e = 1; e <= warm; e++)
			one(call, ln, e, &x);
		t0 = now_s();
		for (uint64_t e = warm + 1; e <= warm + (uint64_t)iters; e++)
			one(call, ln, e, &x);
		ln[r].loop = now_s() - t0;
		/* Every loop done (and its time written) before 0 reads. */
		one(BARRIER, s->start, ++start, &x);
		if (r)
			continue;
		for (int j = 0; j < p; j++)
			worst = ln[j].loop > worst ? ln[j].loop : worst;
		printf("op=%s n=%d bytes=%d us=%.3f loop_us=%.3f iters=%ld\n",
		       names[call], p, call == BARRIER ? 0 : 4,
		       worst / (double)iters * 1e6, worst / (double)iters * 1e6,
		       iters);
		fflush(stdout);
	}
	if (r)
		return x < 0; /* (x used: the sums are not optimised out) */
	while (wait(NULL) > 0)
		;
	return 0;
}
