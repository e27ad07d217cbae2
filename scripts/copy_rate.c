/*
 * copy_rate.c - glibc's memcpy against the runtime's dri_copy
 * (runtime/copy.h) by the distance from source to destination modulo
 * 4 KiB: the figures behind dri_copy (README, Benchmarks, "Copies 16
 * bytes apart").  A buffer from malloc sits 16 bytes past a page, and a
 * slot or ring of the segment on one, so copying out of the segment into
 * such a buffer is a copy 16 bytes ahead.
 *
 *   copy_rate [KIB ...]  piece sizes in KiB (default 4 64 256 1024); per
 *                        size and distance prints "bytes=B dist=D
 *                        where=cache|memory memcpy_GBps=X dri_copy_GBps=Y"
 *                        (best of 20 passes; a pass copies 256 KiB in
 *                        the cache, or 32 MiB from memory, in pieces)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "copy.h"

#define REPS 20
#define MEM_BYTES ((size_t)32 << 20)
#define CACHE_BYTES ((size_t)256 << 10)

typedef void *(*copy_fn)(void *, const void *, size_t);

/* Best GB/s of REPS passes over total bytes in pieces of n. */
static double rate(copy_fn f, char *dst, const char *src, size_t n,
		   size_t total)
{
	double best = 1e30;

	for (int r = 0; r < REPS; r++) {
		double t = now_s();

		for (size_t o = 0; o + n <= total; o += n)
			f(dst + o, src + o, n);
		t = now_s() - t;
		if (t < best)
			best = t;
	}
	return (double)(total / n * n) / best / 1e9;
}

static void *dri_copy_fn(void *d, const void *s, size_t n)
{
	return dri_copy(d, s, n);
}

int main(int argc, char **argv)
{
	static const size_t dists[] = { 0, 16, 64, 4080 };
	size_t sizes[16] = { 4, 64, 256, 1024 }, ns = 4;
	char *src = aligned_alloc(4096, MEM_BYTES + 8192);
	char *dst = aligned_alloc(4096, MEM_BYTES + 8192);

	if (argc > 1) {
		ns = 0;
		for (int i = 1; i < argc && ns < 16; i++) {
			char *end;
			long k = strtol(argv[i], &end, 10);

			if (*end || k <= 0 || (size_t)k > MEM_BYTES >> 10) {
				fprintf(stderr, "copy_rate: bad size '%s' "
					"(KiB, 1 to %zu)\n", argv[i],
					MEM_BYTES >> 10);
				return 2;
			}
			sizes[ns++] = (size_t)k;
		}
	}
	if (!src || !dst) {
		fprintf(stderr, "copy_rate: out of memory\n");
		return 1;
	}
	memset(src, 1, MEM_BYTES + 8192);
	memset(dst, 2, MEM_BYTES + 8192);
	for (size_t i = 0; i < ns; i++)
		for (size_t d = 0; d < sizeof(dists) / sizeof(*dists); d++)
			for (int mem = 0; mem < 2; mem++) {
				size_t n = sizes[i] << 10;
				size_t total = mem ? MEM_BYTES : CACHE_BYTES;
				char *to = dst + dists[d];

				if (total < n)
					total = n;
				printf("bytes=%zu dist=%zu where=%s memcpy_GBps=%.2f "
				       "dri_copy_GBps=%.2f\n", n, dists[d],
				       mem ? "memory" : "cache",
				       rate(memcpy, to, src, n, total),
				       rate(dri_copy_fn, to, src, n, total));
			}
	free(src);
	free(dst);
	return 0;
}
