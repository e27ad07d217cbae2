/*
 * bench_util.h - what the benchmark programs of scripts/ share: the
 * clock they time with, the pause of their spins and the order they
 * sort their times in (for medians).  Header only: floor_barrier.c and
 * arrive_cost.c link nothing else.
 */
#ifndef DRI_BENCH_UTIL_H
#define DRI_BENCH_UTIL_H

#include <time.h>

/* CLOCK_MONOTONIC in seconds. */
static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The pause of a spin on a flag (as runtime/shm.h's dri_cpu_relax). */
static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* qsort's comparison of doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

#endif
