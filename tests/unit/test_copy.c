/*
 * test_copy.c - dri_copy (runtime/copy.h), the runtime's bulk copy: the
 * same bytes as memcpy for every size and every distance between source
 * and destination, nothing written outside the destination, and the
 * loop taken exactly for the distances glibc's rep movsb is slow at.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "runner.h"

#define AREA (3 << 20)

static unsigned char *area(unsigned seed)
{
	unsigned char *p = aligned_alloc(4096, AREA);

	if (p)
		for (size_t i = 0; i < AREA; i++)
			p[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
	return p;
}

/* Fills p[from, to) with a pattern that differs from area()'s. */
static void fill(unsigned char *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		p[i] = (unsigned char)(i * 7 + 3);
}

/* Every size near the loop's block and the check's limits, at source
 * offsets and distances that take the loop and that do not. */
static int test_copy_is_memcpy_at_every_size_and_distance(void)
{
	static const size_t sizes[] = { 0, 1, 15, 63, 64, 65, 127, 2047, 2048,
					2049, 4095, 4096, 4160, 65536, 65537,
					262143, 524288, 1048576 + 37 };
	static const size_t dists[] = { 1, 8, 15, 16, 17, 31, 32, 48, 63, 64,
					65, 100, 4000, 4032, 4080, 4095, 4096 };
	static const size_t srcs[] = { 0, 1, 16, 4095 };
	unsigned char *src = area(1), *dst = area(2), *ref = area(3);

	CHECK(src && dst && ref);
	for (size_t a = 0; a < sizeof(srcs) / sizeof(*srcs); a++)
		for (size_t d = 0; d < sizeof(dists) / sizeof(*dists); d++)
			for (size_t k = 0; k < sizeof(sizes) / sizeof(*sizes); k++) {
				/* all three page-aligned: the distances are as named */
				size_t so = srcs[a], at = 4096 + so + dists[d];
				size_t n = sizes[k], lo = at - 64, hi = at + n + 64;

				CHECK(hi <= AREA);
				fill(dst, lo, hi);
				fill(ref, lo, hi);
				memcpy(ref + at, src + so, n);
				CHECK(dri_copy(dst + at, src + so, n) == dst + at);
				/* the copy, and the bytes either side untouched */
				CHECKF(!memcmp(dst + lo, ref + lo, hi - lo),
				       "size %zu, distance %zu, source at %zu", n,
				       dists[d], so);
				/* each loop by name, whatever the CPU picks */
				fill(dst, lo, hi);
				CHECK(dri_copy_sse2(dst + at, src + so, n) == dst + at);
				CHECKF(!memcmp(dst + lo, ref + lo, hi - lo),
				       "sse2: size %zu, distance %zu, source at %zu",
				       n, dists[d], so);
				if (!dri_cpu_avx())
					continue;
				fill(dst, lo, hi);
				CHECK(dri_copy_avx(dst + at, src + so, n) == dst + at);
				CHECKF(!memcmp(dst + lo, ref + lo, hi - lo),
				       "avx: size %zu, distance %zu, source at %zu",
				       n, dists[d], so);
			}
	free(src), free(dst), free(ref);
	return 0;
}

static int test_loop_only_where_rep_movsb_is_slow(void)
{
	char *b = aligned_alloc(4096, 1 << 20);

	CHECK(b);
#if defined(__x86_64__) && defined(__SSE2__) && defined(__GNUC__)
	/* a malloc'd buffer (16 past a page) filled from a page-aligned slot */
	CHECK(dri_copy_loops(b + 4096 + 16, b, 65536));
	CHECK(dri_copy_loops(b + 1, b, 4096));
	CHECK(dri_copy_loops(b + 63, b, 2048));
	CHECK(dri_copy_loops(b + 3 * 4096 + 72, b + 64, 9000));
	/* the other way round (16 behind), the same page offset, or far */
	CHECK(!dri_copy_loops(b, b + 16, 65536));
	CHECK(!dri_copy_loops(b + 4096, b, 65536));
	CHECK(!dri_copy_loops(b + 64, b, 65536));
	CHECK(!dri_copy_loops(b + 2048, b, 65536));
	/* small copies are memcpy's */
	CHECK(!dri_copy_loops(b + 16, b, 2047));
#else
	CHECK(!dri_copy_loops(b + 16, b, 65536));
#endif
	free(b);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_copy_is_memcpy_at_every_size_and_distance),
	UNIT(test_loop_only_where_rep_movsb_is_slow),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
