/*
 * floor_barrier.c - the least a barrier of N processes on this machine
 * can cost: a flag per process in an anonymous shared mapping, nothing
 * else (no library, no checks, no timeout), timed as bench_coll times
 * distrun's (per iteration, the slowest process's time; the median over
 * the iterations).  Waiting pauses; when the processes outnumber the
 * CPUs they may run on, it yields at every look while one it waits for
 * said it runs on this CPU, and every 64th look else (as coll_shm.c
 * does: yielding to a process that waits too only costs a switch).
 * scripts/bench-coll prints it beside the barrier's table, so that a
 * target below it reads as out of reach on this machine.
 *
 *   floor_barrier N [ITERS]    prints "op=barrier n=N bytes=0 loop_us=L
 *                              us=X": L the mean of the loop on process 0
 *                              past its first tenth (as
 *                              scripts/bench-anchor times), X the
 *                              median over the iterations of the
 *                              slowest process's time (as bench_coll)
 *   floor_barrier handoff      prints "op=handoff us=X": two processes
 *                              pinned to one CPU pass a turn back and
 *                              forth with sched_yield; X is one pass, the
 *                              switch that ranks sharing a CPU pay
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define MAXP 64

struct shared {
	struct { uint64_t up; int32_t cpu; char pad[52]; } flag[MAXP];
	double t[]; /* [iteration][process] */
};

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
	int p = argc > 1 ? atoi(argv[1]) : 0, r = 0, crowded;
	long iters = argc > 2 ? atol(argv[2]) : 20000;
	struct shared *s;
	cpu_set_t cpus;
	double *m, loop0, loop;
	uint64_t warm;

	if (argc > 1 && !strcmp(argv[1], "handoff"))
		return handoff();
	if (p < 1 || p > MAXP || iters < 1) {
		fprintf(stderr, "usage: floor_barrier N(1..%d) [ITERS]\n", MAXP);
		return 2;
	}
	sched_getaffinity(0, sizeof(cpus), &cpus);
	crowded = p > CPU_COUNT(&cpus);
	s = mmap(NULL, sizeof(*s) + sizeof(double) * (size_t)(iters * p),
		 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
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
			r = i;
			break;
		}
	}
	/* The loop's mean leaves out its first tenth, where the processes
	 * forked last have not started yet. */
	warm = (uint64_t)iters / 10;
	loop0 = now_s();
	for (uint64_t e = 1; e <= (uint64_t)iters; e++) {
		double t0 = now_s();

		if (e == warm + 1)
			loop0 = t0;

		int me = sched_getcpu() + 1;

		__atomic_store_n(&s->flag[r].cpu, me, __ATOMIC_RELAXED);
		__atomic_store_n(&s->flag[r].up, e, __ATOMIC_SEQ_CST);
		for (unsigned k = 0;; k++) {
			int done = 1, due = 0;

			for (int j = 0; j < p; j++)
				if (__atomic_load_n(&s->flag[j].up, __ATOMIC_ACQUIRE) < e) {
					done = 0;
					due |= __atomic_load_n(&s->flag[j].cpu,
							       __ATOMIC_RELAXED) == me;
				}
			if (done)
				break;
			if (crowded && (due || k % 64 == 63))
				sched_yield();
#if defined(__x86_64__) || defined(__i386__)
			else
				__builtin_ia32_pause();
#endif
		}
		s->t[(e - 1) * (uint64_t)p + (uint64_t)r] = now_s() - t0;
	}
	loop = (now_s() - loop0) / (double)((uint64_t)iters - warm);
	if (r)
		return 0;
	while (wait(NULL) > 0)
		;
	m = malloc(sizeof(*m) * (size_t)iters);
	if (!m)
		return 1;
	for (long i = 0; i < iters; i++) {
		m[i] = 0;
		for (int j = 0; j < p; j++)
			if (s->t[i * p + j] > m[i])
				m[i] = s->t[i * p + j];
	}
	qsort(m, (size_t)iters, sizeof(*m), cmp_double);
	printf("op=barrier n=%d bytes=0 loop_us=%.2f us=%.2f iters=%ld\n", p,
	       loop * 1e6, m[iters / 2] * 1e6, iters);
	return 0;
}
