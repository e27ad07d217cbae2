/*
 * floor_barrier.c - the least a barrier of N processes on this machine
 * can cost: a flag per process in an anonymous shared mapping, nothing
 * else (no library, no checks, no timeout), timed as bench_coll times
 * distrun's (per iteration, the slowest process's time; the median over
 * the iterations).  Waiting yields the CPU at every look when the
 * processes outnumber the CPUs they may run on, else it pauses.
 * scripts/bench-coll prints it beside the barrier's table, so that a
 * target below it reads as out of reach on this machine.
 *
 *   floor_barrier N [ITERS]    prints "op=barrier n=N bytes=0 us=X"
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXP 64

struct shared {
	struct { uint64_t up; char pad[56]; } flag[MAXP];
	double t[]; /* [iteration][process] */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int p = argc > 1 ? atoi(argv[1]) : 0, r = 0, crowded;
	long iters = argc > 2 ? atol(argv[2]) : 20000;
	struct shared *s;
	cpu_set_t cpus;
	double *m;

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
	for (uint64_t e = 1; e <= (uint64_t)iters; e++) {
		double t0 = now();

		__atomic_store_n(&s->flag[r].up, e, __ATOMIC_SEQ_CST);
		for (int j = 0; j < p; j++)
			while (__atomic_load_n(&s->flag[j].up, __ATOMIC_ACQUIRE) < e) {
				if (crowded)
					sched_yield();
#if defined(__x86_64__) || defined(__i386__)
				else
					__builtin_ia32_pause();
#endif
			}
		s->t[(e - 1) * (uint64_t)p + (uint64_t)r] = now() - t0;
	}
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
	qsort(m, (size_t)iters, sizeof(*m), cmp);
	printf("op=barrier n=%d bytes=0 us=%.2f iters=%ld\n", p,
	       m[iters / 2] * 1e6, iters);
	return 0;
}
