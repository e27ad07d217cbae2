/*
 * cma_rate.c - what one copy between processes costs on this machine:
 * process_vm_readv(2) of another process's buffer against memcpy of the
 * same bytes, by one process alone and by two reading each other's at
 * once (as the ranks of a single-copy all_gather do).  The figures behind
 * DISTRUN_SHM_DIRECT's choices (README, Benchmarks, "Single copy").
 *
 *   cma_rate [KIB ...]   sizes in KiB (default 64 1024 32768); per size
 *                        prints "bytes=B alone_pvr_GBps=X memcpy_GBps=Y
 *                        both_pvr_GBps=Z" (best of 10, Z the slower side)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

#define REPS 10

struct shared {
	pid_t pid[2];
	uint64_t addr[2];
	int go, done;
	double gbps[2];
};

/* Best GB/s of REPS reads of n bytes at src in pid into dst. */
static double pvr_rate(pid_t pid, char *dst, uint64_t src, size_t n)
{
	double best = 1e30;

	for (int r = 0; r < REPS; r++) {
		struct iovec l = { dst, n }, rm = { (void *)(uintptr_t)src, n };
		double t = now_s();

		if (process_vm_readv(pid, &l, 1, &rm, 1, 0) != (ssize_t)n) {
			perror("cma_rate: process_vm_readv");
			exit(1);
		}
		t = now_s() - t;
		best = t < best ? t : best;
	}
	return (double)n / best / 1e9;
}

static double memcpy_rate(char *dst, const char *src, size_t n)
{
	double best = 1e30;

	for (int r = 0; r < REPS; r++) {
		double t = now_s();

		memcpy(dst, src, n);
		t = now_s() - t;
		best = t < best ? t : best;
	}
	return (double)n / best / 1e9;
}

static void barrier(struct shared *s, int *k)
{
	__atomic_add_fetch(&s->go, 1, __ATOMIC_SEQ_CST);
	*k += 2;
	while (__atomic_load_n(&s->go, __ATOMIC_SEQ_CST) < *k)
		;
}

static void one_size(size_t n)
{
	struct shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char *a = malloc(n), *b = malloc(n);
	int me = 0, k = 0;
	pid_t child;

	if (s == MAP_FAILED || !a || !b) {
		fprintf(stderr, "cma_rate: out of memory\n");
		exit(1);
	}
	memset(a, 1, n);
	memset(b, 2, n);
	s->pid[0] = getpid();
	if ((child = fork()) < 0) {
		perror("cma_rate: fork");
		exit(1);
	}
	me = child == 0;
	if (me) {
		s->pid[1] = getpid();
		memset(a, 3, n); /* its own pages, not the parent's */
	}
	__atomic_store_n(&s->addr[me], (uint64_t)(uintptr_t)a, __ATOMIC_SEQ_CST);
	barrier(s, &k);
	if (me) {
		/* alone: the child reads the parent's, which waits */
		double alone = pvr_rate(s->pid[0], b, s->addr[0], n);
		double copy = memcpy_rate(b, a, n);

		barrier(s, &k);
		s->gbps[1] = pvr_rate(s->pid[0], b, s->addr[0], n);
		barrier(s, &k);
		printf("bytes=%zu alone_pvr_GBps=%.2f memcpy_GBps=%.2f "
		       "both_pvr_GBps=%.2f\n", n, alone, copy,
		       s->gbps[0] < s->gbps[1] ? s->gbps[0] : s->gbps[1]);
		fflush(stdout);
		_exit(0);
	}
	barrier(s, &k);
	s->gbps[0] = pvr_rate(s->pid[1], b, s->addr[1], n);
	barrier(s, &k);
	waitpid(child, NULL, 0);
	free(a);
	free(b);
	munmap(s, sizeof(*s));
}

int main(int argc, char **argv)
{
	static const char *dflt[] = { "64", "1024", "32768" };
	const char **sizes = argc > 1 ? (const char **)argv + 1 : dflt;
	int n = argc > 1 ? argc - 1 : 3;

	for (int i = 0; i < n; i++) {
		long kib = atol(sizes[i]);

		if (kib < 1 || kib > (1L << 22)) {
			fprintf(stderr, "cma_rate: size '%s' KiB: 1 to 4194304\n",
				sizes[i]);
			return 2;
		}
		one_size((size_t)kib << 10);
	}
	return 0;
}
