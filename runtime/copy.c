/*
 * copy.c - dri_copy's loop (copy.h): the copies glibc's memcpy would do
 * with a slow rep movsb, done with vector loads and stores instead.
 */
#include <stdint.h>
#include <string.h>

#include "copy.h"

#if defined(__x86_64__) && defined(__SSE2__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

void *dri_copy_sse2(void *dst, const void *src, size_t n)
{
	char *d = dst;
	const char *s = src;
	size_t i = 0;

	for (; i + 64 <= n; i += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(s + i));
		__m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));

		_mm_storeu_si128((__m128i *)(d + i), a);
		_mm_storeu_si128((__m128i *)(d + i + 16), b);
		_mm_storeu_si128((__m128i *)(d + i + 32), c);
		_mm_storeu_si128((__m128i *)(d + i + 48), e);
	}
	memcpy(d + i, s + i, n - i); /* under 64 bytes: no rep movsb */
	return dst;
}

/* The head up to the destination's next 32 bytes, then aligned stores:
 * none splits a cache line. */
__attribute__((target("avx"))) void *dri_copy_avx(void *dst, const void *src,
						  size_t n)
{
	char *d = dst;
	const char *s = src;
	size_t i = (32 - ((uintptr_t)d & 31)) & 31;

	if (i > n)
		i = n;
	memcpy(d, s, i);
	for (; i + 128 <= n; i += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
		__m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
		__m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));

		_mm256_store_si256((__m256i *)(d + i), a);
		_mm256_store_si256((__m256i *)(d + i + 32), b);
		_mm256_store_si256((__m256i *)(d + i + 64), c);
		_mm256_store_si256((__m256i *)(d + i + 96), e);
	}
	return dri_copy_sse2(d + i, s + i, n - i), dst;
}

/* AVX needs the OS to save the ymm registers (OSXSAVE, XCR0 bits 1-2). */
int dri_cpu_avx(void)
{
	unsigned a, b, c, d, lo, hi;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	if (!(c & bit_AVX) || !(c & bit_OSXSAVE))
		return 0;
	__asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (lo & 6) == 6;
}

void *dri_copy_near(void *dst, const void *src, size_t n)
{
	/* racing first calls compute the same answer */
	static _Atomic int avx = -1;

	if (avx < 0)
		avx = dri_cpu_avx();
	return avx ? dri_copy_avx(dst, src, n) : dri_copy_sse2(dst, src, n);
}
#else
void *dri_copy_sse2(void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}

void *dri_copy_avx(void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}

int dri_cpu_avx(void)
{
	return 0;
}

void *dri_copy_near(void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}
#endif
