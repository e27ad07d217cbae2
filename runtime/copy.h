/*
 * copy.h - dri_copy, memcpy for the runtime's bulk copies (slots, rings,
 * messages), without the case where glibc's memcpy is ten times slower.
 *
 * glibc (2.36, Debian 12) copies from 4 KiB up to about 512 KiB (on the
 * AMD EPYC measured) with `rep movsb`.  That runs at 1.3-1.8 GB/s
 * instead of 24-33 in the cache (1.4 against 5.3 from memory) when the
 * destination is 1 to 31 bytes ahead of the source modulo 4 KiB:
 * exactly the case of a buffer from malloc (16 bytes past a page, as
 * every large one is) filled from a page-aligned slot or ring of the
 * segment.  A loop of vector loads and stores has no such case, so it
 * takes those copies (README, Benchmarks: "Copies 16 bytes apart");
 * every other copy stays memcpy's.
 *
 * This is the bottom layer: it depends on nothing of distrun.
 */
#ifndef DRI_COPY_H
#define DRI_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__) && defined(__GNUC__)
/* Copies of at least this many bytes are checked (below it glibc does
 * not use rep movsb). */
#define DRI_COPY_CHECK_MIN 2048
/* The window of (dst - src) mod 4 KiB that takes the loop. */
#define DRI_COPY_NEAR 64

/* Whether dri_copy takes the loop for these arguments. */
static inline int dri_copy_loops(const void *dst, const void *src, size_t n)
{
	uintptr_t d = ((uintptr_t)dst - (uintptr_t)src) & 4095;

	return n >= DRI_COPY_CHECK_MIN && d != 0 && d < DRI_COPY_NEAR;
}
#else
static inline int dri_copy_loops(const void *dst, const void *src, size_t n)
{
	(void)dst, (void)src, (void)n;
	return 0;
}
#endif

/* The loop (copy.c): 32-byte loads and stores where the CPU has AVX, else
 * 16-byte; the two are also there by name for the tests. */
void *dri_copy_near(void *dst, const void *src, size_t n);
void *dri_copy_sse2(void *dst, const void *src, size_t n);
void *dri_copy_avx(void *dst, const void *src, size_t n);
/* Whether this CPU and its OS run AVX (the ymm registers saved). */
int dri_cpu_avx(void);

/* memcpy(dst, src, n), the two not overlapping. */
static inline void *dri_copy(void *dst, const void *src, size_t n)
{
	if (!dri_copy_loops(dst, src, n))
		return memcpy(dst, src, n);
	return dri_copy_near(dst, src, n);
}

#endif /* DRI_COPY_H */
