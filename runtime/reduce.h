/*
 * reduce.h - element-wise reduction kernels for every dtype x op
 * (reduce.c); dr_dtype_size and the names are public (distrun.h).
 *
 * Layer 0: pure computation, no state.
 */
#ifndef DRI_REDUCE_H
#define DRI_REDUCE_H

#include <stddef.h>

#include "distrun.h"

/* inout[i] = inout[i] OP in[i] for i < count.  AVG reduces as SUM (the
 * division is dri_reduce_finish's).  DR_ENOTSUP for a bitwise op on a
 * float dtype, DR_EINVAL for values out of range. */
dr_err dri_reduce(void *inout, const void *in, size_t count, dr_dtype dtype,
		  dr_op op);
/* out[i] = a[i] OP b[i]: the same bits as copying a to out and then
 * dri_reduce(out, b).  a and b may overlap each other, not out
 * (DR_EINVAL). */
dr_err dri_reduce3(void *out, const void *a, const void *b, size_t count,
		   dr_dtype dtype, dr_op op);
/* Checks that op applies to dtype (bitwise ops refuse floats). */
dr_err dri_reduce_check(dr_dtype dtype, dr_op op);
/* After the last dri_reduce of an AVG over n ranks: divides by n once
 * (integers: truncating division as torch's gloo does).  No-op for the
 * other ops. */
void dri_reduce_finish(void *buf, size_t count, dr_dtype dtype, dr_op op, int n);

#endif

