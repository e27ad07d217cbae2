/*
 * tensor_print.h - torch's repr of a 1-D tensor, so that a C example prints
 * what `print(f"... {t}")` prints under PyTorch, character for character:
 * `tensor([ 1.5410, -0.2934, -2.1788])`, `tensor([0, 1, 2])`,
 * `tensor([1, 2, 3], device='cuda:0')`.
 *
 * Header-only (the Makefile builds one .c per example).  The rules are
 * torch/_tensor_str.py's (torch 1.13, default print options: precision 4,
 * linewidth 80, threshold 1000, edgeitems 3):
 *   - integers print as they are, right-aligned to the widest;
 *   - floats look at the finite non-zero values: if all are whole numbers,
 *     "{:.0f}." (int mode); otherwise "{:.4f}"; either switches to
 *     "{:.4e}" (sci mode) when max/min > 1000 or max > 1e8 (or, outside int
 *     mode, min < 1e-4); every element is right-aligned to the widest;
 *     nan and inf print bare, as Python prints them;
 *   - more than 1000 elements: the first and last 3, with "..." between;
 *   - elements per line: (80 - 7) / (width + 2), continuation lines
 *     indented by 8;
 *   - suffixes: device='...' unless on the CPU, then dtype=torch.X unless
 *     float32 or int64 (always for an empty tensor that is not float32).
 *
 * Checked against real torch: testdata/tensor_print/ and
 * tests/unit/test_tensor_print.c.
 */
#ifndef TENSOR_PRINT_H
#define TENSOR_PRINT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"

#define TENSOR_PRINT_PRECISION 4
#define TENSOR_PRINT_LINEWIDTH 80
#define TENSOR_PRINT_THRESHOLD 1000
#define TENSOR_PRINT_EDGEITEMS 3

static inline int tensor_is_float(dr_dtype dtype)
{
	return dtype == DR_FLOAT16 || dtype == DR_BFLOAT16 ||
	       dtype == DR_FLOAT32 || dtype == DR_FLOAT64;
}

/* Element i as a double (float dtypes; what Python's tolist() gives). */
static inline double tensor_get_float(const void *data, size_t i, dr_dtype dtype)
{
	uint16_t h;
	switch (dtype) {
	case DR_FLOAT16: {
		h = ((const uint16_t *)data)[i];
		int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
		double v = exp == 0x1f ? (mant ? NAN : INFINITY)
			 : exp == 0   ? ldexp(mant, -24)
				      : ldexp(mant | 0x400, exp - 25);
		return (h & 0x8000) ? -v : v;
	}
	case DR_BFLOAT16: {
		h = ((const uint16_t *)data)[i];
		uint32_t bits = (uint32_t)h << 16;
		float f;
		memcpy(&f, &bits, sizeof f);
		return f;
	}
	case DR_FLOAT32:
		return ((const float *)data)[i];
	default:
		return ((const double *)data)[i];
	}
}

/* Element i as an integer (integer dtypes). */
static inline long long tensor_get_int(const void *data, size_t i, dr_dtype dtype)
{
	switch (dtype) {
	case DR_INT8:
		return ((const int8_t *)data)[i];
	case DR_UINT8:
		return ((const uint8_t *)data)[i];
	case DR_INT32:
		return ((const int32_t *)data)[i];
	default:
		return ((const int64_t *)data)[i];
	}
}

/* Python's format(value, spec) for a float, spec "%.0f", "%.4f" or
 * "%*.4e": nan and inf bare (never "-nan"). */
static inline int tensor_fmt_float(char *buf, size_t size, const char *spec,
				   int width, double v)
{
	if (isnan(v))
		return snprintf(buf, size, "%*s", width, "nan");
	if (isinf(v))
		return snprintf(buf, size, "%*s", width, v < 0 ? "-inf" : "inf");
	if (spec[1] == '*')
		return snprintf(buf, size, spec, width, v);
	return snprintf(buf, size, spec, v);
}

/* _Formatter: the mode and the width every element is padded to. */
struct tensor_formatter {
	int floating, int_mode, sci_mode;
	int max_width;
};

/* Index of the k-th displayed element (first and last edgeitems when
 * summarizing). */
static inline size_t tensor_shown_index(size_t k, size_t n, int summarize)
{
	if (!summarize || k < TENSOR_PRINT_EDGEITEMS)
		return k;
	return n - 2 * TENSOR_PRINT_EDGEITEMS + k;
}

static inline void tensor_formatter_init(struct tensor_formatter *f,
					 const void *data, size_t n,
					 dr_dtype dtype, int summarize)
{
	size_t shown = summarize ? 2 * TENSOR_PRINT_EDGEITEMS : n;
	char s[64];

	f->floating = tensor_is_float(dtype);
	f->int_mode = 1;
	f->sci_mode = 0;
	f->max_width = 1;

	if (!f->floating) {
		for (size_t k = 0; k < shown; k++) {
			size_t i = tensor_shown_index(k, n, summarize);
			int len = snprintf(s, sizeof s, "%lld", tensor_get_int(data, i, dtype));
			if (len > f->max_width)
				f->max_width = len;
		}
		return;
	}

	/* min and max of |finite non-zero| values; int mode unless one has
	 * a fraction */
	double lo = INFINITY, hi = 0;
	size_t count = 0;
	for (size_t k = 0; k < shown; k++) {
		double v = tensor_get_float(data, tensor_shown_index(k, n, summarize), dtype);
		if (!isfinite(v) || v == 0)
			continue;
		count++;
		lo = fmin(lo, fabs(v));
		hi = fmax(hi, fabs(v));
		if (v != ceil(v))
			f->int_mode = 0;
	}
	if (!count)
		return;

	f->sci_mode = hi / lo > 1000.0 || hi > 1.0e8 || (!f->int_mode && lo < 1.0e-4);
	const char *spec = f->sci_mode ? "%.4e" : f->int_mode ? "%.0f" : "%.4f";
	/* the "." int mode appends */
	int extra = !f->sci_mode && f->int_mode;
	for (size_t k = 0; k < shown; k++) {
		double v = tensor_get_float(data, tensor_shown_index(k, n, summarize), dtype);
		if (!isfinite(v) || v == 0)
			continue;
		int len = tensor_fmt_float(s, sizeof s, spec, 0, v) + extra;
		if (len > f->max_width)
			f->max_width = len;
	}
}

/* _Formatter.format: one element, padded to the common width. */
static inline void tensor_format_elem(const struct tensor_formatter *f,
				      char *buf, size_t size, const void *data,
				      size_t i, dr_dtype dtype)
{
	char s[64];
	if (!f->floating) {
		snprintf(s, sizeof s, "%lld", tensor_get_int(data, i, dtype));
	} else {
		double v = tensor_get_float(data, i, dtype);
		if (f->sci_mode) {
			tensor_fmt_float(s, sizeof s, "%*.4e", f->max_width, v);
		} else if (f->int_mode) {
			int len = tensor_fmt_float(s, sizeof s, "%.0f", 0, v);
			if (isfinite(v) && len < (int)sizeof s - 1)
				strcat(s, ".");
		} else {
			tensor_fmt_float(s, sizeof s, "%.4f", 0, v);
		}
	}
	snprintf(buf, size, "%*s", f->max_width, s);
}

/* A growing string: plain C11, no open_memstream, so the header builds
 * with -std=c11 and nothing else defined. */
struct tensor_buf {
	char *s;
	size_t len, cap;
	int failed;
};

static inline void tensor_puts(struct tensor_buf *b, const char *s)
{
	size_t n = strlen(s);
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 128;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->s, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n + 1);
	b->len += n;
}

/* Appends a suffix the way _add_suffixes does: on the same line while it
 * stays within the line width, else on a new indented line. */
static inline void tensor_add_suffix(struct tensor_buf *b, size_t *last_line_len,
				     const char *suffix)
{
	size_t len = strlen(suffix);
	if (*last_line_len + len + 2 > TENSOR_PRINT_LINEWIDTH) {
		tensor_puts(b, ",\n       ");
		*last_line_len = 7 + len;
	} else {
		tensor_puts(b, ", ");
		*last_line_len += len + 2;
	}
	tensor_puts(b, suffix);
}

/* torch's repr of the 1-D tensor of n elements of dtype at data, e.g.
 * "tensor([ 1.5410, -0.2934, -2.1788])".  device: NULL or "cpu" for a CPU
 * tensor, else its name ("cuda:0").  Returns a string the caller frees, or
 * NULL (out of memory, or an invalid dtype). */
static inline char *tensor_str(const void *data, size_t n, dr_dtype dtype,
			       const char *device)
{
	if ((unsigned)dtype >= DR_DTYPE_COUNT_)
		return NULL;

	struct tensor_buf b = { NULL, 0, 0, 0 };
	tensor_puts(&b, "tensor([");
	size_t line_start = 0; /* offset of the last newline, 0 if none */
	if (n > 0) {
		int summarize = n > TENSOR_PRINT_THRESHOLD;
		struct tensor_formatter f;
		tensor_formatter_init(&f, data, n, dtype, summarize);

		int per_line = (TENSOR_PRINT_LINEWIDTH - 7) / (f.max_width + 2);
		if (per_line < 1)
			per_line = 1;
		size_t shown = summarize ? 2 * TENSOR_PRINT_EDGEITEMS + 1 : n;
		char elem[80];
		for (size_t k = 0; k < shown; k++) {
			if (k > 0 && k % (size_t)per_line == 0) {
				tensor_puts(&b, ",\n");
				line_start = b.len - 1;
				tensor_puts(&b, "        ");
			} else if (k > 0) {
				tensor_puts(&b, ", ");
			}
			if (summarize && k == TENSOR_PRINT_EDGEITEMS) {
				tensor_puts(&b, " ...");
				continue;
			}
			size_t i = summarize && k > TENSOR_PRINT_EDGEITEMS
					   ? n - (shown - k) : k;
			tensor_format_elem(&f, elem, sizeof elem, data, i, dtype);
			tensor_puts(&b, elem);
		}
	}
	tensor_puts(&b, "]");

	/* torch computes the last line's length as len - rfind("\n") + 1 */
	size_t last_line_len = line_start ? b.len - line_start + 1 : b.len + 2;
	if (device && strcmp(device, "cpu")) {
		char suffix[96];
		snprintf(suffix, sizeof suffix, "device='%s'", device);
		tensor_add_suffix(&b, &last_line_len, suffix);
	}
	if (dtype != DR_FLOAT32 && (dtype != DR_INT64 || n == 0)) {
		char suffix[64];
		snprintf(suffix, sizeof suffix, "dtype=torch.%s", dr_dtype_name(dtype));
		tensor_add_suffix(&b, &last_line_len, suffix);
	}
	tensor_puts(&b, ")");
	if (b.failed) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

#endif /* TENSOR_PRINT_H */
