/*
 * test_reduce.c - runtime/reduce.c against a plain reference, for every
 * dtype x op.
 *
 * The reference is written another way than the kernels: integers are
 * widened to 64 bits and wrapped back by masking; float16 and bfloat16 are
 * decoded with ldexp, combined exactly in double, and rounded with
 * nearbyint (ties to even) at the format's precision and exponent range,
 * so a mistake in reduce.c's bit tricks (or in its claim that rounding via
 * float is as good as rounding once) shows up as a mismatch.  int8/uint8
 * pairs are tried exhaustively, the wider types on edge values and random
 * bits (which include NaNs, infinities and subnormals for the floats).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "reduce.h"
#include "runner.h"

#define N_RANDOM 20000

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
	/* xorshift64*: reproducible, good enough to spread bit patterns */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static int is_float(dr_dtype t)
{
	return t == DR_FLOAT16 || t == DR_BFLOAT16 || t == DR_FLOAT32 ||
	       t == DR_FLOAT64;
}

/* ------------------------------------------------- reference floats */

/* Decodes an IEEE-style binary format of p significand bits (implicit bit
 * included) and ebits exponent bits. */
static double decode_bits(uint32_t bits, int p, int ebits)
{
	int width = p + ebits; /* including the sign */
	uint32_t frac = bits & ((1u << (p - 1)) - 1);
	uint32_t exp = (bits >> (p - 1)) & ((1u << ebits) - 1);
	int sign = (bits >> (width - 1)) & 1;
	int bias = (1 << (ebits - 1)) - 1;
	double v;
	if (exp == (1u << ebits) - 1)
		v = frac ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexp((double)frac, 1 - bias - (p - 1));
	else
		v = ldexp((double)(frac | (1u << (p - 1))), (int)exp - bias - (p - 1));
	return sign ? -v : v;
}

/* Rounds an exact x to nearest-even in a format of p bits of precision,
 * least normal exponent emin and greatest emax. */
static double round_to_format(double x, int p, int emin, int emax)
{
	if (isnan(x) || isinf(x) || x == 0)
		return x;
	int e;
	frexp(fabs(x), &e);
	int lead = e - 1 < emin ? emin : e - 1;
	double v = ldexp(nearbyint(ldexp(x, p - 1 - lead)), lead - (p - 1));
	double max_finite = ldexp(2 - ldexp(1, 1 - p), emax);
	if (fabs(v) > max_finite)
		return copysign(INFINITY, x);
	if (v == 0)
		return copysign(0.0, x);
	return v;
}

static double get_float(const void *buf, size_t i, dr_dtype t)
{
	switch (t) {
	case DR_FLOAT16:
		return decode_bits(((const uint16_t *)buf)[i], 11, 5);
	case DR_BFLOAT16:
		return decode_bits(((const uint16_t *)buf)[i], 8, 8);
	case DR_FLOAT32:
		return ((const float *)buf)[i];
	default:
		return ((const double *)buf)[i];
	}
}

static double round_dtype(double x, dr_dtype t)
{
	switch (t) {
	case DR_FLOAT16:
		return round_to_format(x, 11, -14, 15);
	case DR_BFLOAT16:
		return round_to_format(x, 8, -126, 127);
	case DR_FLOAT32:
		return (float)x; /* double holds the exact sum/product of floats
				    closely enough: 53 >= 2 * 24 + 2 */
	default:
		return x;
	}
}

static double ref_float(dr_op op, double x, double y, dr_dtype t)
{
	switch (op) {
	case DR_SUM:
	case DR_AVG:
		return round_dtype(x + y, t);
	case DR_PRODUCT:
		return round_dtype(x * y, t);
	case DR_MIN:
		return isnan(x) || isnan(y) ? NAN : fmin(x, y);
	case DR_MAX:
		return isnan(x) || isnan(y) ? NAN : fmax(x, y);
	default:
		return NAN;
	}
}

/* ----------------------------------------------- reference integers */

static int int_bits(dr_dtype t)
{
	return t == DR_INT8 || t == DR_UINT8 ? 8 : t == DR_INT32 ? 32 : 64;
}

static int64_t get_int(const void *buf, size_t i, dr_dtype t)
{
	switch (t) {
	case DR_INT8:
		return ((const int8_t *)buf)[i];
	case DR_UINT8:
		return ((const uint8_t *)buf)[i];
	case DR_INT32:
		return ((const int32_t *)buf)[i];
	default:
		return ((const int64_t *)buf)[i];
	}
}

/* Keeps the low bits of v and reads them as the dtype would. */
static int64_t wrap_to(uint64_t v, dr_dtype t)
{
	int bits = int_bits(t);
	if (bits == 64) {
		int64_t r;
		memcpy(&r, &v, sizeof r);
		return r;
	}
	uint64_t mask = (UINT64_C(1) << bits) - 1, top = UINT64_C(1) << (bits - 1);
	v &= mask;
	if (t == DR_UINT8)
		return (int64_t)v;
	return (int64_t)(v ^ top) - (int64_t)top;
}

static int64_t ref_int(dr_op op, int64_t x, int64_t y, dr_dtype t)
{
	uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
	switch (op) {
	case DR_SUM:
	case DR_AVG:
		return wrap_to(ux + uy, t);
	case DR_PRODUCT:
		return wrap_to(ux * uy, t);
	case DR_MIN:
		return x < y ? x : y;
	case DR_MAX:
		return x > y ? x : y;
	case DR_BAND:
		return wrap_to(ux & uy, t);
	case DR_BOR:
		return wrap_to(ux | uy, t);
	default:
		return wrap_to(ux ^ uy, t);
	}
}

/* ------------------------------------------------------- the checker */

/* out = a; dri_reduce(out, b); every element must equal the reference. */
static int check_op(dr_dtype t, dr_op op, const void *a, const void *b, size_t n)
{
	size_t sz = dr_dtype_size(t);
	unsigned char *out = malloc(n * sz + 1);
	CHECK(out);
	memcpy(out, a, n * sz);
	dr_err err = dri_reduce(out, b, n, t, op);
	if (err) {
		free(out);
		CHECKF(0, "%s %s: %s (%s)", dr_dtype_name(t), dr_op_name(op),
		       dr_strerror(err), dr_last_error());
	}
	/* The three-operand form gives the same bits (NaN payloads too). */
	unsigned char *out3 = malloc(n * sz + 1);
	CHECK(out3);
	memset(out3, 0x5a, n * sz + 1);
	err = dri_reduce3(out3, a, b, n, t, op);
	int same3 = !err && !memcmp(out3, out, n * sz) && out3[n * sz] == 0x5a;
	free(out3);
	if (!same3) {
		free(out);
		CHECKF(0, "%s %s: dri_reduce3 (%s) differs from dri_reduce over "
		       "%zu elements", dr_dtype_name(t), dr_op_name(op),
		       dr_strerror(err), n);
	}
	for (size_t i = 0; i < n; i++) {
		if (is_float(t)) {
			double x = get_float(a, i, t), y = get_float(b, i, t);
			double want = ref_float(op, x, y, t);
			double got = get_float(out, i, t);
			int same = isnan(want) ? isnan(got)
					       : got == want && (op == DR_MIN || op == DR_MAX ||
								 signbit(got) == signbit(want));
			if (!same) {
				free(out);
				CHECKF(0, "%s %s [%zu]: %.9g op %.9g gave %.9g, want %.9g",
				       dr_dtype_name(t), dr_op_name(op), i, x, y, got, want);
			}
		} else {
			int64_t x = get_int(a, i, t), y = get_int(b, i, t);
			int64_t want = ref_int(op, x, y, t), got = get_int(out, i, t);
			if (got != want) {
				free(out);
				CHECKF(0, "%s %s [%zu]: %lld op %lld gave %lld, want %lld",
				       dr_dtype_name(t), dr_op_name(op), i, (long long)x,
				       (long long)y, (long long)got, (long long)want);
			}
		}
	}
	free(out);
	return 0;
}

/* Every op that applies to t over the pairs (a[i], b[i]). */
static int check_all_ops(dr_dtype t, const void *a, const void *b, size_t n)
{
	for (int op = 0; op < DR_OP_COUNT_; op++) {
		if (is_float(t) && op >= DR_BAND)
			continue;
		if (check_op(t, (dr_op)op, a, b, n))
			return 1;
	}
	return 0;
}

/* Interesting values of each width, as bit patterns. */
static const uint64_t edges64[] = {
	0, 1, 2, 3, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff,
	0x7fffffff, 0x80000000, 0xffffffff, 0x100000000,
	0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff,
	0xfffffffffffffffe, 0x123456789abcdef0,
};
static const uint16_t edges16[] = {
	0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00,
	0x3c01, 0x6800, 0x6801, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00,
	0x7c01, 0xfe00, 0x3555, 0x0200, 0x0002, 0x4000, 0x7f80, 0xff80,
	0x7f7f, 0x0080, 0x007f, 0x3f80, 0x7fc0,
};

/* a: random bits and edges; b: the same, shifted, so edges meet edges. */
static void fill_pairs(dr_dtype t, void *a, void *b, size_t n)
{
	size_t sz = dr_dtype_size(t);
	for (size_t i = 0; i < n; i++) {
		uint64_t va = rnd(), vb = rnd();
		if (i < 400) {
			if (sz == 2) {
				size_t k = sizeof edges16 / sizeof *edges16;
				va = edges16[i % k];
				vb = edges16[(i / k) % k];
			} else {
				size_t k = sizeof edges64 / sizeof *edges64;
				va = edges64[i % k];
				vb = edges64[(i / k) % k];
			}
		} else if (t == DR_FLOAT32 && i % 3) {
			/* random floats of moderate range, not only NaN-heavy bits */
			float fa = (float)((double)(int64_t)va / 1e15);
			float fb = (float)((double)(int64_t)vb / 1e15);
			memcpy(&va, &fa, 4);
			memcpy(&vb, &fb, 4);
		} else if (t == DR_FLOAT64 && i % 3) {
			double da = (double)(int64_t)va / 1e15, db = (double)(int64_t)vb / 1e15;
			memcpy(&va, &da, 8);
			memcpy(&vb, &db, 8);
		}
		/* little-endian: the low bytes of va are the element */
		memcpy((char *)a + i * sz, &va, sz);
		memcpy((char *)b + i * sz, &vb, sz);
	}
}

/* ------------------------------------------------------------ tests */

static int test_names_and_sizes(void)
{
	static const struct { dr_dtype t; size_t size; const char *name; } d[] = {
		{ DR_INT8, 1, "int8" },       { DR_UINT8, 1, "uint8" },
		{ DR_INT32, 4, "int32" },     { DR_INT64, 8, "int64" },
		{ DR_FLOAT16, 2, "float16" }, { DR_BFLOAT16, 2, "bfloat16" },
		{ DR_FLOAT32, 4, "float32" }, { DR_FLOAT64, 8, "float64" },
	};
	for (size_t i = 0; i < sizeof d / sizeof *d; i++) {
		CHECK(dr_dtype_size(d[i].t) == d[i].size);
		CHECK(!strcmp(dr_dtype_name(d[i].t), d[i].name));
	}
	static const char *const ops[] = { "sum", "avg", "product", "min",
					   "max", "band", "bor", "bxor" };
	for (int op = 0; op < DR_OP_COUNT_; op++)
		CHECK(!strcmp(dr_op_name((dr_op)op), ops[op]));
	CHECK(dr_dtype_size(DR_DTYPE_COUNT_) == 0);
	CHECK(dr_dtype_size((dr_dtype)-1) == 0);
	CHECK(!strcmp(dr_dtype_name((dr_dtype)99), "invalid"));
	CHECK(!strcmp(dr_op_name((dr_op)-3), "invalid"));
	return 0;
}

/* int8 and uint8: all 65536 pairs, every op. */
static int test_bytes_every_pair(void)
{
	uint8_t a[65536], b[65536];
	for (int i = 0; i < 65536; i++) {
		a[i] = (uint8_t)(i & 0xff);
		b[i] = (uint8_t)(i >> 8);
	}
	CHECK(!check_all_ops(DR_INT8, a, b, 65536));
	CHECK(!check_all_ops(DR_UINT8, a, b, 65536));
	return 0;
}

static int check_random_dtype(dr_dtype t)
{
	size_t n = N_RANDOM + 13; /* not a multiple of the kernels' block */
	size_t sz = dr_dtype_size(t);
	void *a = malloc(n * sz), *b = malloc(n * sz);
	CHECK(a && b);
	fill_pairs(t, a, b, n);
	int rc = check_all_ops(t, a, b, n);
	free(a);
	free(b);
	return rc;
}

static int test_int32_int64_edges_and_random(void)
{
	CHECK(!check_random_dtype(DR_INT32));
	CHECK(!check_random_dtype(DR_INT64));
	return 0;
}

static int test_float32_float64_edges_and_random(void)
{
	CHECK(!check_random_dtype(DR_FLOAT32));
	CHECK(!check_random_dtype(DR_FLOAT64));
	return 0;
}

/* float16 and bfloat16: every value against each edge value, both ways,
 * plus random pairs. */
static int test_half_every_value_against_edges(void)
{
	size_t k = sizeof edges16 / sizeof *edges16, n = 65536 * k;
	uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
	CHECK(a && b);
	for (size_t e = 0; e < k; e++)
		for (size_t v = 0; v < 65536; v++) {
			a[e * 65536 + v] = (uint16_t)v;
			b[e * 65536 + v] = edges16[e];
		}
	int rc = check_all_ops(DR_FLOAT16, a, b, n) ||
		 check_all_ops(DR_FLOAT16, b, a, n) ||
		 check_all_ops(DR_BFLOAT16, a, b, n) ||
		 check_all_ops(DR_BFLOAT16, b, a, n);
	free(a);
	free(b);
	CHECK(!rc);
	CHECK(!check_random_dtype(DR_FLOAT16));
	CHECK(!check_random_dtype(DR_BFLOAT16));
	return 0;
}

/* The same with the portable float16 code, where the CPU would let
 * reduce.c use F16C instead (each test runs in its own process, so the
 * setting holds from its first reduction on). */
static int test_half_portable_path_every_value_against_edges(void)
{
	CHECK(setenv("DISTRUN_NO_F16C", "1", 1) == 0);
	return test_half_every_value_against_edges();
}

static uint16_t reduce16(dr_dtype t, dr_op op, uint16_t x, uint16_t y)
{
	dr_err err = dri_reduce(&x, &y, 1, t, op);
	return err ? 0xdead : x;
}

/* Named rounding cases, so a failure reads as the rule that broke. */
static int test_half_rounding_edge_cases(void)
{
	/* 2048 + 1 = 2049, halfway between 2048 and 2050: ties to even */
	CHECK(reduce16(DR_FLOAT16, DR_SUM, 0x6800, 0x3c00) == 0x6800);
	/* 2050 + 1 = 2051, halfway between 2050 and 2052: up to even */
	CHECK(reduce16(DR_FLOAT16, DR_SUM, 0x6801, 0x3c00) == 0x6802);
	/* 65504 + 16 = 65520, halfway to 65536: overflows to infinity */
	CHECK(reduce16(DR_FLOAT16, DR_SUM, 0x7bff, 0x4c00) == 0x7c00);
	/* 65504 + 8 stays 65504 */
	CHECK(reduce16(DR_FLOAT16, DR_SUM, 0x7bff, 0x4800) == 0x7bff);
	/* smallest subnormal 2^-24 times 0.5: 2^-25 ties to even, to +0 */
	CHECK(reduce16(DR_FLOAT16, DR_PRODUCT, 0x0001, 0x3800) == 0x0000);
	/* 2^-24 times 1.5: 1.5 units ties to 2 units */
	CHECK(reduce16(DR_FLOAT16, DR_PRODUCT, 0x0001, 0x3e00) == 0x0002);
	/* subnormal + subnormal carries into the smallest normal */
	CHECK(reduce16(DR_FLOAT16, DR_SUM, 0x0200, 0x0200) == 0x0400);
	/* -0 + -0 = -0; +0 + -0 = +0 */
	CHECK(reduce16(DR_FLOAT16, DR_SUM, 0x8000, 0x8000) == 0x8000);
	CHECK(reduce16(DR_FLOAT16, DR_SUM, 0x0000, 0x8000) == 0x0000);
	/* inf - inf is NaN */
	CHECK((reduce16(DR_FLOAT16, DR_SUM, 0x7c00, 0xfc00) & 0x7fff) > 0x7c00);
	/* a signalling NaN comes out quiet */
	CHECK((reduce16(DR_FLOAT16, DR_SUM, 0x7c01, 0x3c00) & 0x7e00) == 0x7e00);
	CHECK((reduce16(DR_FLOAT16, DR_MIN, 0x7c01, 0x3c00) & 0x7e00) == 0x7e00);

	/* bfloat16: 256 + 1 ties to even (256), 258 + 1 up to 260 */
	CHECK(reduce16(DR_BFLOAT16, DR_SUM, 0x4380, 0x3f80) == 0x4380);
	CHECK(reduce16(DR_BFLOAT16, DR_SUM, 0x4381, 0x3f80) == 0x4382);
	/* the largest finite doubled overflows to infinity */
	CHECK(reduce16(DR_BFLOAT16, DR_SUM, 0x7f7f, 0x7f7f) == 0x7f80);
	/* bfloat16 subnormals are kept, not flushed */
	CHECK(reduce16(DR_BFLOAT16, DR_SUM, 0x0001, 0x0001) == 0x0002);
	CHECK((reduce16(DR_BFLOAT16, DR_PRODUCT, 0x7f81, 0x3f80) & 0x7fc0) == 0x7fc0);
	return 0;
}

/* MIN and MAX: a NaN on either side wins, for every float dtype. */
static int test_nan_propagates_through_min_max(void)
{
	float f[2] = { 1.0f, NAN }, g[2] = { NAN, 1.0f };
	CHECK(dri_reduce(f, g, 2, DR_FLOAT32, DR_MIN) == DR_OK);
	CHECK(isnan(f[0]) && isnan(f[1]));
	double d[2] = { NAN, -1.0 }, e[2] = { 5.0, NAN };
	CHECK(dri_reduce(d, e, 2, DR_FLOAT64, DR_MAX) == DR_OK);
	CHECK(isnan(d[0]) && isnan(d[1]));
	CHECK((reduce16(DR_FLOAT16, DR_MIN, 0x3c00, 0x7e00) & 0x7fff) > 0x7c00);
	CHECK((reduce16(DR_FLOAT16, DR_MAX, 0x7e00, 0x3c00) & 0x7fff) > 0x7c00);
	CHECK((reduce16(DR_BFLOAT16, DR_MAX, 0x3f80, 0x7fc0) & 0x7fff) > 0x7f80);
	/* and infinities order as numbers */
	CHECK(reduce16(DR_FLOAT16, DR_MIN, 0xfc00, 0x3c00) == 0xfc00);
	return 0;
}

/* Integer SUM and PRODUCT wrap like two's complement. */
static int test_integer_wraparound(void)
{
	int8_t a8 = 127, b8 = 1;
	CHECK(dri_reduce(&a8, &b8, 1, DR_INT8, DR_SUM) == DR_OK && a8 == -128);
	uint8_t u = 255, v = 1;
	CHECK(dri_reduce(&u, &v, 1, DR_UINT8, DR_SUM) == DR_OK && u == 0);
	u = 16, v = 16;
	CHECK(dri_reduce(&u, &v, 1, DR_UINT8, DR_PRODUCT) == DR_OK && u == 0);
	int32_t a32 = INT32_MAX, b32 = 2;
	CHECK(dri_reduce(&a32, &b32, 1, DR_INT32, DR_PRODUCT) == DR_OK && a32 == -2);
	int64_t a64 = INT64_MIN, b64 = -1;
	CHECK(dri_reduce(&a64, &b64, 1, DR_INT64, DR_PRODUCT) == DR_OK && a64 == INT64_MIN);
	a64 = INT64_MIN, b64 = -1;
	CHECK(dri_reduce(&a64, &b64, 1, DR_INT64, DR_SUM) == DR_OK && a64 == INT64_MAX);
	return 0;
}

/* AVG: SUM steps, then one division; integers truncate toward zero. */
static int test_avg_divides_once_at_the_end(void)
{
	int32_t acc[3] = { 7, -7, 1 }, in[3] = { 0, 0, 0 };
	CHECK(dri_reduce(acc, in, 3, DR_INT32, DR_AVG) == DR_OK);
	dri_reduce_finish(acc, 3, DR_INT32, DR_AVG, 2);
	CHECK(acc[0] == 3 && acc[1] == -3 && acc[2] == 0);

	int8_t s8[2] = { 100, 100 }, t8[2] = { 100, -100 };
	CHECK(dri_reduce(s8, t8, 2, DR_INT8, DR_AVG) == DR_OK);
	dri_reduce_finish(s8, 2, DR_INT8, DR_AVG, 2);
	/* 200 wrapped to -56 before the division, as the sum in torch would */
	CHECK(s8[0] == -28 && s8[1] == 0);

	float f[2] = { 1.0f, 3.0f }, g[2] = { 2.0f, 3.0f };
	CHECK(dri_reduce(f, g, 2, DR_FLOAT32, DR_AVG) == DR_OK);
	dri_reduce_finish(f, 2, DR_FLOAT32, DR_AVG, 4);
	CHECK(f[0] == 0.75f && f[1] == 1.5f);

	uint16_t h = 0x4200; /* 3.0 */
	dri_reduce_finish(&h, 1, DR_FLOAT16, DR_AVG, 2);
	CHECK(h == 0x3e00); /* 1.5 */
	uint16_t bf = 0x4040; /* 3.0 */
	dri_reduce_finish(&bf, 1, DR_BFLOAT16, DR_AVG, 2);
	CHECK(bf == 0x3fc0);
	double d = 9.0;
	dri_reduce_finish(&d, 1, DR_FLOAT64, DR_AVG, 3);
	CHECK(d == 3.0);
	int64_t l = -9;
	dri_reduce_finish(&l, 1, DR_INT64, DR_AVG, 4);
	CHECK(l == -2);
	uint8_t ub = 255;
	dri_reduce_finish(&ub, 1, DR_UINT8, DR_AVG, 4);
	CHECK(ub == 63);

	/* other ops, and n = 1, leave the buffer alone */
	int32_t x = 9;
	dri_reduce_finish(&x, 1, DR_INT32, DR_SUM, 4);
	dri_reduce_finish(&x, 1, DR_INT32, DR_AVG, 1);
	CHECK(x == 9);
	return 0;
}

/* Bitwise ops refuse every float dtype, with a message naming both. */
static int test_bitwise_ops_refuse_floats(void)
{
	static const dr_dtype floats[] = { DR_FLOAT16, DR_BFLOAT16, DR_FLOAT32,
					   DR_FLOAT64 };
	for (size_t i = 0; i < 4; i++)
		for (int op = DR_BAND; op <= DR_BXOR; op++) {
			double a = 1.5, b = 2.5;
			CHECK(dri_reduce_check(floats[i], (dr_op)op) == DR_ENOTSUP);
			CHECK(dri_reduce(&a, &b, 1, floats[i], (dr_op)op) == DR_ENOTSUP);
			CHECK(a == 1.5); /* untouched */
			const char *msg = dr_last_error();
			CHECKF(strstr(msg, dr_op_name((dr_op)op)) &&
			       strstr(msg, dr_dtype_name(floats[i])),
			       "message: %s", msg);
		}
	for (int t = DR_INT8; t <= DR_INT64; t++)
		for (int op = 0; op < DR_OP_COUNT_; op++)
			CHECK(dri_reduce_check((dr_dtype)t, (dr_op)op) == DR_OK);
	return 0;
}

static int test_invalid_arguments(void)
{
	int32_t a[4] = { 0 }, b[4] = { 0 };
	CHECK(dri_reduce(a, b, 4, DR_DTYPE_COUNT_, DR_SUM) == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "dtype"));
	CHECK(dri_reduce(a, b, 4, DR_INT32, DR_OP_COUNT_) == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "op"));
	CHECK(dri_reduce_check((dr_dtype)-1, DR_SUM) == DR_EINVAL);
	/* overlapping buffers break the kernels' restrict promise */
	CHECK(dri_reduce(a, a + 1, 3, DR_INT32, DR_SUM) == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "overlap"));
	CHECK(dri_reduce(a, a, 1, DR_INT32, DR_SUM) == DR_EINVAL);
	CHECK(dri_reduce(NULL, b, 1, DR_INT32, DR_SUM) == DR_EINVAL);
	/* nothing to do is fine, even without buffers */
	CHECK(dri_reduce(NULL, NULL, 0, DR_INT32, DR_SUM) == DR_OK);
	/* adjacent is not overlapping */
	CHECK(dri_reduce(a, a + 2, 2, DR_INT32, DR_SUM) == DR_OK);
	return 0;
}

/* dri_reduce3's arguments: an output that overlaps an input is refused,
 * inputs that overlap each other are fine, NULL is refused, and it
 * checks the op as dri_reduce does. */
static int test_reduce3_arguments(void)
{
	int32_t a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out[4];

	CHECK(dri_reduce3(a + 2, a, a + 4, 4, DR_INT32, DR_SUM) == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "overlaps"));
	CHECK(dri_reduce3(a, a + 1, a + 4, 4, DR_INT32, DR_SUM) == DR_EINVAL);
	CHECK(dri_reduce3(out, a, a + 1, 4, DR_INT32, DR_SUM) == DR_OK);
	CHECK(out[0] == 3 && out[1] == 5 && out[2] == 7 && out[3] == 9);
	CHECK(dri_reduce3(out, a, a, 4, DR_INT32, DR_PRODUCT) == DR_OK);
	CHECK(out[0] == 1 && out[3] == 16);
	CHECK(dri_reduce3(NULL, a, a, 4, DR_INT32, DR_SUM) == DR_EINVAL);
	CHECK(dri_reduce3(out, NULL, a, 4, DR_INT32, DR_SUM) == DR_EINVAL);
	CHECK(dri_reduce3(NULL, NULL, NULL, 0, DR_INT32, DR_SUM) == DR_OK);
	CHECK(dri_reduce3(out, a, a, 4, DR_FLOAT32, DR_BAND) == DR_ENOTSUP);
	CHECK(dri_reduce3(out, a, a, 4, (dr_dtype)99, DR_SUM) == DR_EINVAL);
	return 0;
}

/* Lengths 0..70 exercise the kernels' blocks of 16 and every tail. */
static int test_every_length_around_the_block(void)
{
	for (size_t n = 0; n <= 70; n++) {
		float a[70], b[70];
		double c[70], d[70];
		for (size_t i = 0; i < n; i++) {
			a[i] = (float)i * 0.5f;
			b[i] = 1.0f - (float)i;
			c[i] = (double)i / 3;
			d[i] = -(double)i;
		}
		for (int op = 0; op <= DR_MAX; op++)
			if (check_op(DR_FLOAT32, (dr_op)op, a, b, n) ||
			    check_op(DR_FLOAT64, (dr_op)op, c, d, n))
				return 1;
	}
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_names_and_sizes),
	UNIT(test_bytes_every_pair),
	UNIT(test_int32_int64_edges_and_random),
	UNIT(test_float32_float64_edges_and_random),
	UNIT(test_half_every_value_against_edges),
	UNIT(test_half_portable_path_every_value_against_edges),
	UNIT(test_half_rounding_edge_cases),
	UNIT(test_nan_propagates_through_min_max),
	UNIT(test_integer_wraparound),
	UNIT(test_avg_divides_once_at_the_end),
	UNIT(test_bitwise_ops_refuse_floats),
	UNIT(test_invalid_arguments),
	UNIT(test_every_length_around_the_block),
	UNIT(test_reduce3_arguments),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
