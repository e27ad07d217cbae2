/*
 * reduce.c - the element-wise reduction kernels (inout[i] = inout[i] OP
 * in[i]) for every dtype x op of distrun.h, the single division that ends an
 * AVG, and the names and sizes of dtypes and ops.
 *
 * Choices, and why:
 *   - Integer SUM and PRODUCT wrap as two's complement, as torch's do.  They
 *     are computed in the unsigned type of the same width, where wrapping is
 *     defined, so the sanitizers stay quiet and the compiler cannot reason
 *     from "overflow never happens".
 *   - float16 and bfloat16 are reduced in float and rounded back to nearest
 *     even at each step.  float's 24-bit significand is at least 2 * 11 + 2
 *     bits, so a float sum, product or quotient of two float16 (or bfloat16)
 *     values rounded once more gives the correctly rounded result: no
 *     double-rounding error.  The conversions are written out with integer
 *     arithmetic (no _Float16) so that any C11 compiler builds them; they
 *     keep infinities, signed zeros and subnormals, and NaN stays NaN
 *     (quiet).
 *   - MIN and MAX propagate NaN, as torch.minimum/maximum and NCCL do.  Note
 *     that gloo (torch's CPU backend) does not: it uses std::min/std::max,
 *     whose result depends on the argument order; we prefer a result that
 *     does not depend on which rank holds the NaN.
 *   - AVG: torch's gloo refuses it ("Cannot use ReduceOp.AVG with Gloo").
 *     We follow NCCL: reduce as SUM, then divide once by the group size at
 *     the end (dri_reduce_finish); integers divide truncating toward zero,
 *     after the wrapping sum.
 *   - The kernels are plain counted loops over restrict pointers, so gcc -O2
 *     (gcc 12 vectorises at -O2) turns the float32/float64 SUM of a large
 *     all_reduce into packed SIMD adds; that loop runs once per chunk per
 *     step of the ring.  restrict is why inout and in must not overlap.
 *     float16 uses the CPU's F16C conversions where it has them (x86-64,
 *     checked at run time), else portable branch-free conversions that
 *     gcc vectorises too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "error.h"
#include "reduce.h"

/* ------------------------------------------------------------- names */

static const size_t dtype_sizes[DR_DTYPE_COUNT_] = {
	[DR_INT8] = 1,    [DR_UINT8] = 1,    [DR_INT32] = 4,   [DR_INT64] = 8,
	[DR_FLOAT16] = 2, [DR_BFLOAT16] = 2, [DR_FLOAT32] = 4, [DR_FLOAT64] = 8,
};

/* torch's spelling of each dtype (torch.int8, ..., torch.bfloat16). */
static const char *const dtype_names[DR_DTYPE_COUNT_] = {
	[DR_INT8] = "int8",       [DR_UINT8] = "uint8",
	[DR_INT32] = "int32",     [DR_INT64] = "int64",
	[DR_FLOAT16] = "float16", [DR_BFLOAT16] = "bfloat16",
	[DR_FLOAT32] = "float32", [DR_FLOAT64] = "float64",
};

static const char *const op_names[DR_OP_COUNT_] = {
	[DR_SUM] = "sum",   [DR_AVG] = "avg",   [DR_PRODUCT] = "product",
	[DR_MIN] = "min",   [DR_MAX] = "max",   [DR_BAND] = "band",
	[DR_BOR] = "bor",   [DR_BXOR] = "bxor",
};

size_t dr_dtype_size(dr_dtype dtype)
{
	if ((unsigned)dtype >= DR_DTYPE_COUNT_)
		return 0;
	return dtype_sizes[dtype];
}

const char *dr_dtype_name(dr_dtype dtype)
{
	if ((unsigned)dtype >= DR_DTYPE_COUNT_)
		return "invalid";
	return dtype_names[dtype];
}

const char *dr_op_name(dr_op op)
{
	if ((unsigned)op >= DR_OP_COUNT_)
		return "invalid";
	return op_names[op];
}

/* ------------------------------------------- float16 and bfloat16 */

static inline uint32_t f32_bits(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	return x;
}

static inline float f32_from_bits(uint32_t x)
{
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

/* The float16 conversions are written without branches (masks, in the
 * manner of F. Giesen's half <-> float routines) so that the compiler can
 * vectorise the float16 kernels: with branches, or with ?: that gcc -O2
 * leaves as branches, they ran at a tenth of bfloat16's speed. */

/* c ? a : b for c in {0, 1}, as a mask. */
static inline uint32_t select_u32(uint32_t c, uint32_t a, uint32_t b)
{
	uint32_t m = 0u - c;
	return (a & m) | (b & ~m);
}

static inline float f16_to_f32(uint16_t h)
{
	uint32_t o = (uint32_t)(h & 0x7fff) << 13; /* exponent and mantissa */
	uint32_t exp = o & 0x0f800000;
	o += (127 - 15) << 23;                     /* rebias the exponent */
	/* infinity or NaN (payload kept): the exponent goes all ones */
	o += select_u32(exp == 0x0f800000, (128 - 16) << 23, 0);
	/* zero or subnormal: exact, by letting the float unit renormalise */
	float sub = f32_from_bits(o + (1 << 23)) - f32_from_bits(113u << 23);
	o = select_u32(exp == 0, f32_bits(sub), o);
	return f32_from_bits(o | (uint32_t)(h & 0x8000) << 16);
}

static inline uint16_t f32_to_f16(float f)
{
	uint32_t x = f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000;
	uint32_t ax = x & 0x7fffffff;

	/* normal: rebias, round to nearest even with the bias 0xfff plus the
	 * lowest kept bit; a carry correctly bumps the exponent, up to
	 * infinity for >= 65520 */
	uint32_t normal = (ax + (uint32_t)(-112 * (1 << 23)) + 0xfff +
			   ((ax >> 13) & 1)) >> 13;
	/* below 2^-14: adding 0.5 lines the float16 subnormal unit (2^-24) up
	 * with float's last bit, and the float addition rounds to nearest
	 * even for us */
	uint32_t sub = f32_bits(f32_from_bits(ax) + 0.5f) - 0x3f000000;
	/* NaN comes out quiet; finite values too large round to infinity */
	uint32_t special = select_u32(ax > 0x7f800000, 0x7e00, 0x7c00);
	uint32_t r = select_u32(ax < 0x38800000, sub, normal);
	r = select_u32(ax >= 0x47800000, special, r);
	return (uint16_t)(sign | r);
}

static inline float bf16_to_f32(uint16_t b)
{
	return f32_from_bits((uint32_t)b << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);
	if ((x & 0x7fffffff) > 0x7f800000) /* NaN: quiet it */
		return (uint16_t)((x >> 16) | 0x40);
	/* round to nearest even; overflow carries into infinity as it should */
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

/* ----------------------------------------------------------- kernels */

typedef void (*kernel_fn)(void *restrict inout, const void *restrict in,
			  size_t n);
typedef void (*kernel3_fn)(void *restrict out, const void *restrict a,
			   const void *restrict b, size_t n);

/* One kernel, two forms: fname, a[i] = EXPR of x = a[i], y = b[i]; and
 * fname##3, o[i] = the same EXPR (the same bits as copying a to o first).
 * One loop (KERNEL_LOOP) for both: blocks of 16 with a fixed inner trip
 * count, then the tail: gcc -O2's "very cheap" vectoriser only takes a
 * loop whose trip count it knows to be a multiple of the vector width (a
 * plain loop over n stays scalar, and so did float64 with n rounded down
 * to 16). */
#define KERNEL_LOOP(o, a, b, T, EXPR)                                         \
	size_t i = 0;                                                         \
	for (; i + 16 <= n; i += 16)                                          \
		for (size_t j = 0; j < 16; j++) {                             \
			T x = a[i + j], y = b[i + j];                         \
			o[i + j] = (T)(EXPR);                                 \
		}                                                             \
	for (; i < n; i++) {                                                  \
		T x = a[i], y = b[i];                                         \
		o[i] = (T)(EXPR);                                             \
	}
#define KERNEL(fname, T, EXPR)                                                \
	static void fname(void *restrict va, const void *restrict vb,        \
			  size_t n)                                           \
	{                                                                     \
		T *restrict a = va;                                           \
		const T *restrict b = vb;                                     \
		KERNEL_LOOP(a, a, b, T, EXPR)                                 \
	}                                                                     \
	static void fname##3(void *restrict vo, const void *restrict va,     \
			     const void *restrict vb, size_t n)               \
	{                                                                     \
		T *restrict o = vo;                                           \
		const T *restrict a = va;                                     \
		const T *restrict b = vb;                                     \
		KERNEL_LOOP(o, a, b, T, EXPR)                                 \
	}

/* Integers: T the type, U its unsigned twin for wrapping arithmetic.  The
 * conversion back from U to T is modular (gcc and clang define it so; C11
 * calls it implementation-defined, not undefined). */
#define INT_KERNELS(name, T, U)                                               \
	KERNEL(name##_sum, T, (U)((U)x + (U)y))                               \
	KERNEL(name##_prod, T, (U)((U)x * (U)y))                              \
	KERNEL(name##_min, T, y < x ? y : x)                                  \
	KERNEL(name##_max, T, y > x ? y : x)                                  \
	KERNEL(name##_band, T, x & y)                                         \
	KERNEL(name##_bor, T, x | y)                                          \
	KERNEL(name##_bxor, T, x ^ y)

INT_KERNELS(i8, int8_t, uint8_t)
INT_KERNELS(u8, uint8_t, uint8_t)
INT_KERNELS(i32, int32_t, uint32_t)
INT_KERNELS(i64, int64_t, uint64_t)

/* Floats.  MIN keeps x when x < y or x is NaN, else takes y (which is then
 * the NaN if either is): NaN wins from either side.  Written as a select
 * so the loop still vectorises. */
#define FLOAT_MIN(x, y) (((x) < (y) || (x) != (x)) ? (x) : (y))
#define FLOAT_MAX(x, y) (((x) > (y) || (x) != (x)) ? (x) : (y))

#define FLOAT_KERNELS(name, T)                                                \
	KERNEL(name##_sum, T, x + y)                                          \
	KERNEL(name##_prod, T, x * y)                                         \
	KERNEL(name##_min, T, FLOAT_MIN(x, y))                                \
	KERNEL(name##_max, T, FLOAT_MAX(x, y))

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)

/* float16 / bfloat16: widen both sides, apply the float op, round back. */
#define HALF_KERNELS(name, to_f32, from_f32)                                  \
	KERNEL(name##_sum, uint16_t, from_f32(to_f32(x) + to_f32(y)))         \
	KERNEL(name##_prod, uint16_t, from_f32(to_f32(x) * to_f32(y)))        \
	KERNEL(name##_min, uint16_t, from_f32(FLOAT_MIN(to_f32(x), to_f32(y)))) \
	KERNEL(name##_max, uint16_t, from_f32(FLOAT_MAX(to_f32(x), to_f32(y))))

HALF_KERNELS(f16, f16_to_f32, f32_to_f16)
HALF_KERNELS(bf16, bf16_to_f32, f32_to_bf16)

/* float16 on x86-64 CPUs with F16C: the hardware converts 8 values per
 * instruction, rounding to nearest even as the portable code does, much
 * faster than converting one at a time.  Picked at run time (the build targets baseline x86-64);
 * DISTRUN_NO_F16C=1 forces the portable path (the unit tests run both).
 * Results are the same bit for bit except for NaN payloads. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

/* Both forms, as KERNEL's: 8 values at a time, the tail portable. */
#define F16C_LOOP(o, a, b, VEXPR)                                             \
	size_t i = 0;                                                         \
	for (; i + 8 <= n; i += 8) {                                          \
		__m256 x = _mm256_cvtph_ps(                                   \
			_mm_loadu_si128((const __m128i *)(a + i)));           \
		__m256 y = _mm256_cvtph_ps(                                   \
			_mm_loadu_si128((const __m128i *)(b + i)));           \
		_mm_storeu_si128((__m128i *)(o + i),                          \
				 _mm256_cvtps_ph(VEXPR,                       \
						 _MM_FROUND_TO_NEAREST_INT)); \
	}
#define F16C_KERNEL(op, VEXPR)                                                \
	__attribute__((target("avx,f16c"))) static void f16c_##op(            \
		void *restrict va, const void *restrict vb, size_t n)         \
	{                                                                     \
		uint16_t *restrict a = va;                                    \
		const uint16_t *restrict b = vb;                              \
		F16C_LOOP(a, a, b, VEXPR)                                     \
		f16_##op(a + i, b + i, n - i); /* the tail */                 \
	}                                                                     \
	__attribute__((target("avx,f16c"))) static void f16c_##op##3(         \
		void *restrict vo, const void *restrict va,                   \
		const void *restrict vb, size_t n)                            \
	{                                                                     \
		uint16_t *restrict o = vo;                                    \
		const uint16_t *restrict a = va;                              \
		const uint16_t *restrict b = vb;                              \
		F16C_LOOP(o, a, b, VEXPR)                                     \
		f16_##op##3(o + i, a + i, b + i, n - i); /* the tail */       \
	}

/* min_ps/max_ps return their second operand if either is NaN, so only a
 * NaN in x needs putting back. */
#define F16C_NAN_X(r) _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))

F16C_KERNEL(sum, _mm256_add_ps(x, y))
F16C_KERNEL(prod, _mm256_mul_ps(x, y))
F16C_KERNEL(min, F16C_NAN_X(_mm256_min_ps(x, y)))
F16C_KERNEL(max, F16C_NAN_X(_mm256_max_ps(x, y)))

static int cpu_has_f16c(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	return (c & bit_F16C) && dri_cpu_avx();
}

static int use_f16c(void)
{
	/* racing first calls compute the same answer */
	static _Atomic int use = -1;
	if (use < 0) {
		const char *no = getenv("DISTRUN_NO_F16C");
		use = !(no && *no && strcmp(no, "0")) && cpu_has_f16c();
	}
	return use;
}

/* F16C's kernels for op: sum (AVG too), prod, min, max; -1 for none. */
static int f16c_index(dr_op op)
{
	if (!use_f16c())
		return -1;
	switch (op) {
	case DR_SUM:
	case DR_AVG:
		return 0;
	case DR_PRODUCT:
		return 1;
	case DR_MIN:
		return 2;
	case DR_MAX:
		return 3;
	default:
		return -1;
	}
}

static kernel_fn f16c_kernel(dr_op op)
{
	static const kernel_fn k[] = { f16c_sum, f16c_prod, f16c_min, f16c_max };
	int i = f16c_index(op);

	return i < 0 ? NULL : k[i];
}

static kernel3_fn f16c_kernel3(dr_op op)
{
	static const kernel3_fn k[] = { f16c_sum3, f16c_prod3, f16c_min3,
					f16c_max3 };
	int i = f16c_index(op);

	return i < 0 ? NULL : k[i];
}
#else
static kernel_fn f16c_kernel(dr_op op)
{
	(void)op;
	return NULL;
}

static kernel3_fn f16c_kernel3(dr_op op)
{
	(void)op;
	return NULL;
}
#endif

/* [dtype][op]; NULL where the op does not apply (bitwise on floats).  AVG
 * reduces as SUM. */
#define INT_ROW(name, f)                                                      \
	{ [DR_SUM] = name##_sum##f, [DR_AVG] = name##_sum##f,                 \
	  [DR_PRODUCT] = name##_prod##f, [DR_MIN] = name##_min##f,            \
	  [DR_MAX] = name##_max##f, [DR_BAND] = name##_band##f,               \
	  [DR_BOR] = name##_bor##f, [DR_BXOR] = name##_bxor##f }
#define FLOAT_ROW(name, f)                                                    \
	{ [DR_SUM] = name##_sum##f, [DR_AVG] = name##_sum##f,                 \
	  [DR_PRODUCT] = name##_prod##f, [DR_MIN] = name##_min##f,            \
	  [DR_MAX] = name##_max##f }
#define TABLE(f)                                                              \
	{ [DR_INT8] = INT_ROW(i8, f),        [DR_UINT8] = INT_ROW(u8, f),     \
	  [DR_INT32] = INT_ROW(i32, f),      [DR_INT64] = INT_ROW(i64, f),    \
	  [DR_FLOAT16] = FLOAT_ROW(f16, f),  [DR_BFLOAT16] = FLOAT_ROW(bf16, f), \
	  [DR_FLOAT32] = FLOAT_ROW(f32, f),  [DR_FLOAT64] = FLOAT_ROW(f64, f) }

static const kernel_fn kernels[DR_DTYPE_COUNT_][DR_OP_COUNT_] = TABLE();
static const kernel3_fn kernels3[DR_DTYPE_COUNT_][DR_OP_COUNT_] = TABLE(3);

/* ------------------------------------------------------ entry points */

dr_err dri_reduce_check(dr_dtype dtype, dr_op op)
{
	if ((unsigned)dtype >= DR_DTYPE_COUNT_)
		return dri_fail(DR_EINVAL, "invalid dtype %d", (int)dtype);
	if ((unsigned)op >= DR_OP_COUNT_)
		return dri_fail(DR_EINVAL, "invalid reduce op %d", (int)op);
	if (!kernels[dtype][op])
		return dri_fail(DR_ENOTSUP,
				"reduce op %s is not supported for dtype %s "
				"(bitwise ops take integer dtypes only)",
				op_names[op], dtype_names[dtype]);
	return DR_OK;
}

/* Whether [a, a + n) and [b, b + n) overlap. */
static int overlap(const void *a, const void *b, size_t n)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return x < y + n && y < x + n;
}

dr_err dri_reduce(void *inout, const void *in, size_t count, dr_dtype dtype,
		  dr_op op)
{
	dr_err err = dri_reduce_check(dtype, op);
	if (err)
		return err;
	if (!count)
		return DR_OK;
	if (!inout || !in)
		return dri_fail(DR_EINVAL, "reduce of %zu %s elements with a NULL buffer",
				count, dtype_names[dtype]);

	/* The kernels' restrict promise: the two ranges must not overlap. */
	size_t bytes = count * dtype_sizes[dtype];
	if (overlap(inout, in, bytes))
		return dri_fail(DR_EINVAL, "reduce buffers overlap (%p and %p, %zu bytes)",
				inout, in, bytes);

	kernel_fn fn = dtype == DR_FLOAT16 ? f16c_kernel(op) : NULL;
	(fn ? fn : kernels[dtype][op])(inout, in, count);
	return DR_OK;
}

dr_err dri_reduce3(void *out, const void *a, const void *b, size_t count,
		   dr_dtype dtype, dr_op op)
{
	dr_err err = dri_reduce_check(dtype, op);
	size_t bytes;

	if (err)
		return err;
	if (!count)
		return DR_OK;
	if (!out || !a || !b)
		return dri_fail(DR_EINVAL, "reduce of %zu %s elements with a NULL buffer",
				count, dtype_names[dtype]);
	bytes = count * dtype_sizes[dtype];
	if (overlap(out, a, bytes) || overlap(out, b, bytes))
		return dri_fail(DR_EINVAL, "reduce output overlaps an input (%p, "
				"%p and %p, %zu bytes)", out, a, b, bytes);
	kernel3_fn fn = dtype == DR_FLOAT16 ? f16c_kernel3(op) : NULL;
	(fn ? fn : kernels3[dtype][op])(out, a, b, count);
	return DR_OK;
}

void dri_reduce_finish(void *buf, size_t count, dr_dtype dtype, dr_op op, int n)
{
	if (op != DR_AVG || n <= 1 || (unsigned)dtype >= DR_DTYPE_COUNT_)
		return;

	switch (dtype) {
	case DR_INT8: {
		int8_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = (int8_t)(p[i] / n);
		break;
	}
	case DR_UINT8: {
		uint8_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = (uint8_t)(p[i] / n);
		break;
	}
	case DR_INT32: {
		int32_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = p[i] / n;
		break;
	}
	case DR_INT64: {
		int64_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = p[i] / n;
		break;
	}
	case DR_FLOAT16: {
		uint16_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = f32_to_f16(f16_to_f32(p[i]) / (float)n);
		break;
	}
	case DR_BFLOAT16: {
		uint16_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = f32_to_bf16(bf16_to_f32(p[i]) / (float)n);
		break;
	}
	case DR_FLOAT32: {
		float *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] /= (float)n;
		break;
	}
	case DR_FLOAT64: {
		double *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] /= n;
		break;
	}
	default:
		break;
	}
}
