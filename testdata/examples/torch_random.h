/*
 * torch_random.h - torch's CPU random number generator, so that a C program
 * draws the same numbers as `torch.manual_seed(s); torch.randn(n)`.
 *
 * Header-only (the Makefile builds one .c per example).  What torch 1.13
 * does on the CPU, and so what this file does:
 *   - the generator is a 32-bit Mersenne Twister (mt19937) seeded with the
 *     low 32 bits of the seed; random64() joins two draws, the first as the
 *     high half;
 *   - a uniform double is (random64() & (2^53 - 1)) * 2^-53, a uniform float
 *     (random() & (2^24 - 1)) * 2^-24;
 *   - randn(n) with n < 16 draws each element from normal_distribution
 *     <double>: Box-Muller on two uniform doubles u1, u2, giving
 *     r cos(2 pi u1) and caching r sin(2 pi u1) (r = sqrt(-2 log(1 - u2)))
 *     for the next draw; manual_seed drops the cached value;
 *   - randn(n) with n >= 16 fills n uniform floats, then turns each block of
 *     16 into normals, pairing element j with j + 8 (Box-Muller in float,
 *     with the Cephes log/sin/cos of torch's AVX2 kernel, which x86-64
 *     builds of torch pick on any CPU with AVX2); when n is not a multiple
 *     of 16, the last 16 are drawn afresh and transformed again.
 *
 * Values checked against real torch: testdata/torch_random/ and
 * tests/unit/test_torch_random.c.  Needs -lm.
 */
#ifndef TORCH_RANDOM_H
#define TORCH_RANDOM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* c10::pi<double>; M_PI is not C11 */
#define TORCH_PI 3.14159265358979323846

#define TORCH_MT_N 624
#define TORCH_MT_M 397

typedef struct {
	uint32_t state[TORCH_MT_N];
	int next;              /* index of the next word of state to temper */
	int have_normal;       /* a cached second Box-Muller sample */
	double next_normal;
} torch_generator;

/* torch.manual_seed(seed). */
static inline void torch_manual_seed(torch_generator *g, uint64_t seed)
{
	g->state[0] = (uint32_t)seed;
	for (uint32_t j = 1; j < TORCH_MT_N; j++) {
		uint32_t prev = g->state[j - 1];
		g->state[j] = 1812433253u * (prev ^ (prev >> 30)) + j;
	}
	g->next = TORCH_MT_N; /* regenerate on the first draw */
	g->have_normal = 0;
	g->next_normal = 0;
}

static inline void torch_mt_twist(torch_generator *g)
{
	for (int i = 0; i < TORCH_MT_N; i++) {
		uint32_t y = (g->state[i] & 0x80000000u) |
			     (g->state[(i + 1) % TORCH_MT_N] & 0x7fffffffu);
		uint32_t v = g->state[(i + TORCH_MT_M) % TORCH_MT_N] ^ (y >> 1);
		g->state[i] = (y & 1) ? v ^ 0x9908b0dfu : v;
	}
	g->next = 0;
}

/* One 32-bit draw (generator->random()). */
static inline uint32_t torch_random(torch_generator *g)
{
	if (g->next >= TORCH_MT_N)
		torch_mt_twist(g);
	uint32_t y = g->state[g->next++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

/* generator->random64(): the first 32-bit draw is the high half. */
static inline uint64_t torch_random64(torch_generator *g)
{
	uint64_t hi = torch_random(g);
	uint64_t lo = torch_random(g);
	return (hi << 32) | lo;
}

static inline double torch_uniform_double(torch_generator *g)
{
	return (double)(torch_random64(g) & ((UINT64_C(1) << 53) - 1)) * 0x1p-53;
}

static inline float torch_uniform_float(torch_generator *g)
{
	return (float)(torch_random(g) & ((UINT32_C(1) << 24) - 1)) * 0x1p-24f;
}

/* at::normal_distribution<double>(0, 1), with its cached second sample. */
static inline double torch_normal_double(torch_generator *g)
{
	if (g->have_normal) {
		g->have_normal = 0;
		return g->next_normal;
	}
	double u1 = torch_uniform_double(g);
	double u2 = torch_uniform_double(g);
	double r = sqrt(-2.0 * log(1.0 - u2));
	double theta = 2.0 * TORCH_PI * u1;
	g->next_normal = r * sin(theta);
	g->have_normal = 1;
	return r * cos(theta);
}

/* torch's AVX2 kernel computes log, sin and cos with avx_mathfun.h's
 * Cephes polynomials in float, built with -mfma by a compiler that fuses
 * each multiply into the add that follows it.  These are the same
 * operations, one lane at a time, in the same order, with fmaf() where the
 * build fused (C11 mode never fuses on its own), so the results match bit
 * for bit: checked on 2^20 draws, which tell the fused sites apart. */
static inline uint32_t torch_f2u(float f)
{
	union { float f; uint32_t u; } v = { .f = f };
	return v.u;
}

static inline float torch_u2f(uint32_t u)
{
	union { uint32_t u; float f; } v = { .u = u };
	return v.f;
}

/* log256_ps for x in (0, 1]. */
static inline float torch_mathfun_log(float x)
{
	static const float p[] = {
		7.0376836292E-2f, -1.1514610310E-1f, 1.1676998740E-1f,
		-1.2420140846E-1f, 1.4249322787E-1f, -1.6668057665E-1f,
		2.0000714765E-1f, -2.4999993993E-1f, 3.3333331174E-1f,
	};
	int32_t ex = (int32_t)(torch_f2u(x) >> 23) - 0x7f;
	x = torch_u2f((torch_f2u(x) & ~0x7f800000u) | torch_f2u(0.5f));
	float e = (float)ex + 1.0f;
	if (x < 0.707106781186547524f) { /* SQRTHF */
		e -= 1.0f;
		x = (x - 1.0f) + x;
	} else {
		x = x - 1.0f;
	}
	float z = x * x;
	float y = p[0];
	for (int k = 1; k < 9; k++)
		y = fmaf(y, x, p[k]);
	y = y * x;
	y = fmaf(y, z, e * -2.12194440e-4f);
	y = fmaf(-z, 0.5f, y);
	x = x + y;
	return fmaf(e, 0.693359375f, x);
}

/* sincos256_ps for x >= 0. */
static inline void torch_mathfun_sincos(float x, float *s, float *c)
{
	uint32_t j = (uint32_t)(int32_t)(x * 1.27323954473516f); /* 4 / pi */
	j = (j + 1) & ~1u;
	float y = (float)(int32_t)j;
	uint32_t sign_sin = (j & 4) << 29;
	uint32_t sign_cos = (~(j - 2) & 4) << 29;
	int poly = (j & 2) == 0;

	/* extended precision modular arithmetic: x - y * pi / 4 */
	x = fmaf(y, -0.78515625f, x);
	x = fmaf(y, -2.4187564849853515625e-4f, x);
	x = fmaf(y, -3.77489497744594108e-8f, x);

	float z = x * x;
	float yc = 2.443315711809948E-005f;
	yc = fmaf(yc, z, -1.388731625493765E-003f);
	yc = fmaf(yc, z, 4.166664568298827E-002f);
	yc = yc * z;
	yc = fmaf(yc, z, -(z * 0.5f));
	yc = yc + 1.0f;

	float ys = -1.9515295891E-4f;
	ys = fmaf(ys, z, 8.3321608736E-3f);
	ys = fmaf(ys, z, -1.6666654611E-1f);
	ys = fmaf(ys * z, x, x);

	*s = torch_u2f(torch_f2u(poly ? ys : yc) ^ sign_sin);
	*c = torch_u2f(torch_f2u(poly ? yc : ys) ^ sign_cos);
}

/* Box-Muller over one block of 16 uniforms, in place: element j pairs with
 * j + 8 (normal_fill_16_AVX2). */
static inline void torch_normal_fill_16(float *data)
{
	const float two_pi = (float)(2.0f * TORCH_PI);
	for (int j = 0; j < 8; j++) {
		float u1 = 1.0f - data[j]; /* [0, 1) -> (0, 1] for log */
		float u2 = data[j + 8];
		float radius = sqrtf(-2.0f * torch_mathfun_log(u1));
		float s, c;
		torch_mathfun_sincos(two_pi * u2, &s, &c);
		data[j] = radius * c;
		data[j + 8] = radius * s;
	}
}

/* torch.rand(n): n uniform floats in [0, 1). */
static inline void torch_rand(torch_generator *g, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = torch_uniform_float(g);
}

/* torch.randn(n) (float32, contiguous). */
static inline void torch_randn(torch_generator *g, float *out, size_t n)
{
	if (n < 16) {
		for (size_t i = 0; i < n; i++)
			out[i] = (float)torch_normal_double(g);
		return;
	}
	torch_rand(g, out, n);
	for (size_t i = 0; i + 16 <= n; i += 16)
		torch_normal_fill_16(out + i);
	if (n % 16) {
		torch_rand(g, out + n - 16, 16);
		torch_normal_fill_16(out + n - 16);
	}
}

#endif /* TORCH_RANDOM_H */
