/*
 * coll_shm_reduce.c - the reducing collectives through the segment's
 * slots and flags (coll_shm_flags.h): all_reduce, reduce and
 * reduce_scatter.
 *
 * Every rank reads in rank order, so every rank gets the same bits, and
 * the result does not depend on which rank computed it.
 *   all_reduce, small: each writes its buffer, one phase, each reduces
 *     all p slots in rank order into its own buffer (up to 8 bytes and
 *     16 ranks: not through the slots but on the lean lines, seg.h's
 *     tiny).
 *   all_reduce, large: per chunk, reduce-scatter then all-gather through
 *     the slots: each rank copies the pieces of the others into its slot,
 *     one phase, rank j reduces piece j of all ranks (its own from its
 *     buffer) in rank order and writes it into its slot and buffer, one
 *     phase, each copies the others' reduced pieces out.  Every byte is
 *     copied once in and once out; no rank waits on another's reduction
 *     except at the phase.
 *   reduce, up to 64 KiB a rank and 128 KiB for all: rooted, the root
 *     alone reduces (in place when it is rank 0, whose buffer is the
 *     first input); larger, as the all_reduce, the root alone keeping
 *     the result.  A reduce of at most DRI_SEG_INLINE bytes rides in the
 *     others' records of the call (seg.h: dri_seg_rec).
 *   reduce_scatter: per chunk, each rank copies the others' blocks into
 *     its slot, one phase, each reduces its own block of all.
 */
#include <string.h>

#include "coll_shm_flags.h"
#include "copy.h"

/* Reductions go through an accumulator of this many bytes, which stays
 * in the cache while the p inputs stream past it. */
#define ACC_BYTES ((size_t)32 << 10)
/* all_reduce: at most this many bytes per rank take the one-phase path
 * (each rank reads p buffers), and at most SMALL_TOTAL for all ranks. */
#define SMALL_BYTES ((size_t)16 << 10)
#define SMALL_TOTAL ((size_t)256 << 10)
/* reduce: at most this many bytes per rank, and ROOTED_TOTAL for all,
 * go the rooted way (the root alone reduces every slot; beyond, sharing
 * the work wins: README, Benchmarks). */
#define ROOTED_BYTES ((size_t)64 << 10)
#define ROOTED_TOTAL ((size_t)128 << 10)
/* Whether out[0 .. bytes) overlaps one of the p inputs dri_cs.in. */
static int out_is_input(const struct call *c, const char *out, size_t bytes)
{
	for (int i = 0; i < c->p; i++)
		if ((uintptr_t)out < (uintptr_t)dri_cs.in[i] + bytes &&
		    (uintptr_t)dri_cs.in[i] < (uintptr_t)out + bytes)
			return 1;
	return 0;
}

/* out[0 .. n) = in[0] op in[1] op ... op in[p - 1] (dri_cs.in), in rank order,
 * then AVG's division; also into out2 unless NULL (out2 may be an
 * input).  A piece of ACC_BYTES at a time, which stays in the cache while
 * the p inputs stream past it.  When out is the first input, the sum is
 * taken in place; when it is none of them, straight into out (the first
 * two inputs through dri_reduce3, so that no copy comes first); else out
 * is one of the others, read before it is written, and the sum goes
 * through an accumulator. */
static dr_err reduce_ordered(const struct call *c, char *out, char *out2,
			     size_t n)
{
	dr_dtype dt = c->op->dtype;
	size_t es = dr_dtype_size(dt), step = ACC_BYTES / es;
	char *acc;
	uint64_t small[4];
	dr_err err = DR_OK;

	if (out == dri_cs.in[0] && !out2) {
		/* in place: the result starts as the first input */
		for (size_t a = 0; a < n && !err; a += step) {
			size_t k = n - a < step ? n - a : step;

			for (int i = 1; i < c->p && !err; i++)
				err = dri_reduce(out + a * es, dri_cs.in[i] + a * es, k,
						 dt, c->op->redop);
			dri_reduce_finish(out + a * es, k, dt, c->op->redop, c->p);
		}
		return err;
	}
	if (c->p >= 2 && !out_is_input(c, out, n * es)) {
		for (size_t a = 0; a < n && !err; a += step) {
			size_t k = n - a < step ? n - a : step;

			err = dri_reduce3(out + a * es, dri_cs.in[0] + a * es,
					  dri_cs.in[1] + a * es, k, dt, c->op->redop);
			for (int i = 2; i < c->p && !err; i++)
				err = dri_reduce(out + a * es, dri_cs.in[i] + a * es, k,
						 dt, c->op->redop);
			dri_reduce_finish(out + a * es, k, dt, c->op->redop, c->p);
			if (out2)
				dri_copy(out2 + a * es, out + a * es, k * es);
		}
		return err;
	}
	/* A few words (the small calls' path: all_reduce_tiny, a rooted
	 * reduce in records) sum on the stack: scratch costs more than the
	 * sum. */
	if (n * es <= sizeof(small))
		acc = (char *)small;
	else if (!(acc = dri_scratch_get(ACC_BYTES)))
		return DR_ENOMEM;
	for (size_t a = 0; a < n && !err; a += step) {
		size_t k = n - a < step ? n - a : step;

		dri_copy(acc, dri_cs.in[0] + a * es, k * es);
		for (int i = 1; i < c->p && !err; i++)
			err = dri_reduce(acc, dri_cs.in[i] + a * es, k, dt, c->op->redop);
		dri_reduce_finish(acc, k, dt, c->op->redop, c->p);
		dri_copy(out + a * es, acc, k * es);
		if (out2)
			dri_copy(out2 + a * es, acc, k * es);
	}
	if (acc != (char *)small)
		dri_scratch_put(acc);
	return err;
}

/* Small all_reduce and reduce: every buffer in a slot, one phase, every
 * rank (reduce: the root) reduces them all in rank order. */
static dr_err reduce_small(struct call *c, int all)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype);
	int h;
	dr_err err;

	if ((err = dri_cs_next_half(c, 1, &h)))
		return err;
	dri_copy(dri_cs_slot(c->r, h), op->buf, n);
	if ((err = dri_cs_phase(c)))
		return err;
	if (!all && c->r != op->root)
		return DR_OK;
	for (int i = 0; i < c->p; i++)
		dri_cs.in[i] = i == c->r ? op->buf : dri_cs_slot(i, h);
	return reduce_ordered(c, op->buf, NULL, op->count);
}

/* Large all_reduce (all) and reduce (to op->root): chunks of a half,
 * reduce-scattered then gathered through the slots. */
static dr_err reduce_large(struct call *c, int all)
{
	const dri_op *op = c->op;
	size_t es = dr_dtype_size(op->dtype), chunk = dri_cs.chunk / es;
	char *buf = op->buf;
	int p = c->p, r = c->r, root = all ? -1 : op->root;
	dr_err err = DR_OK;

	for (size_t c0 = 0; c0 < op->count && !err; c0 += chunk) {
		size_t len = op->count - c0 < chunk ? op->count - c0 : chunk;
		size_t mo = dri_block_off(len, p, r), mn = dri_block_off(len, p, r + 1) - mo;
		char *base = buf + c0 * es;
		int h;

		if ((err = dri_cs_next_half(c, 1, &h)))
			break;
		for (int i = 0; i < p; i++) {
			size_t o = dri_block_off(len, p, i);
			size_t m = dri_block_off(len, p, i + 1) - o;

			if (i != r)
				dri_copy(dri_cs_slot(r, h) + o * es, base + o * es,
					 m * es);
		}
		if ((err = dri_cs_phase(c)))
			break;
		for (int i = 0; i < p; i++)
			dri_cs.in[i] = (i == r ? base : dri_cs_slot(i, h)) + mo * es;
		/* Our piece of the result: into our slot for the others, and
		 * into our buffer if the result is ours to keep. */
		if (r == root)
			err = reduce_ordered(c, base + mo * es, NULL, mn);
		else
			err = reduce_ordered(c, dri_cs_slot(r, h) + mo * es,
					     all ? base + mo * es : NULL, mn);
		if (err || (err = dri_cs_phase(c)))
			break;
		if (!all && r != root)
			continue;
		for (int i = 0; i < p; i++) {
			size_t o = dri_block_off(len, p, i);
			size_t m = dri_block_off(len, p, i + 1) - o;

			if (i != r)
				dri_copy(base + o * es, dri_cs_slot(i, h) + o * es,
					 m * es);
		}
	}
	return err;
}

/* all_reduce of at most 8 bytes, flat: each rank's data on its lean
 * line of the phase's parity (seg.h: tiny), which a peer that sees it
 * arrive there has already; written again four phases later, once every
 * rank has arrived at the one after it (done reading it: after rooted
 * calls, await_all makes sure). */
static dr_err all_reduce_tiny(struct call *c)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype);
	dr_err err;

	if ((err = dri_cs_await_all(c, dri_cs_tiny_past(dri_cs.phase + 1))))
		return err;
	memcpy(dri_cs_tiny(c->r, dri_cs.phase + 1), op->buf, n);
	if ((err = dri_cs_phase(c)))
		return err;
	for (int i = 0; i < c->p; i++)
		dri_cs.in[i] = i == c->r ? op->buf
				    : (const char *)dri_cs_tiny(i, c->e);
	return reduce_ordered(c, op->buf, NULL, op->count);
}

dr_err dri_cs_all_reduce(struct call *c)
{
	size_t n = c->op->count * dr_dtype_size(c->op->dtype);

	if (n <= sizeof(uint64_t) && !c->tree)
		return all_reduce_tiny(c);
	if (n <= SMALL_BYTES && n * (size_t)c->p <= SMALL_TOTAL)
		return reduce_small(c, 1);
	return reduce_large(c, 1);
}

/* reduce, rooted (flat, small): each of the others writes its buffer
 * into its slot and goes on; the root waits for them all and reduces
 * the slots (its own buffer in its place) in rank order. */
static dr_err reduce_rooted(struct call *c)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype);
	int h, root = op->root;
	dr_err err = DR_OK;

	/* tiny: in the others' records of the call, no slot */
	if ((c->inl = n <= DRI_SEG_INLINE))
		;
	else if (n <= dri_cs.sub_bytes)
		err = dri_cs_next_sub(c, c->r != root);
	else
		err = dri_cs_next_half(c, c->r != root, &h);
	if (err)
		return err;
	if (c->r != root) {
		if (c->inl) {
			c->inl_src = op->buf;
			c->inl_len = n;
		} else {
			dri_copy(dri_cs_cur_slot(c, c->r), op->buf, n);
		}
		dri_cs_post(c);
		return DR_OK;
	}
	if ((err = dri_cs_take(c, -1)))
		return err;
	for (int i = 0; i < c->p; i++)
		dri_cs.in[i] = i == root ? op->buf
		        : c->inl ? dri_cs_inl_data(c, i) : dri_cs_cur_slot(c, i);
	if (!(err = reduce_ordered(c, op->buf, NULL, op->count)))
		dri_cs_done(c);
	return err;
}

dr_err dri_cs_reduce(struct call *c)
{
	size_t n = c->op->count * dr_dtype_size(c->op->dtype);

	if (!c->tree && dri_cs.sub_bytes && n <= ROOTED_BYTES &&
	    n * (size_t)c->p <= ROOTED_TOTAL)
		return reduce_rooted(c);
	if (n <= SMALL_BYTES && n * (size_t)c->p <= SMALL_TOTAL)
		return reduce_small(c, 0);
	return reduce_large(c, 0);
}

/* reduce_scatter: per chunk of the blocks, each rank copies the others'
 * blocks into its slot, one phase, each reduces its own block of all in
 * rank order. */
dr_err dri_cs_reduce_scatter(struct call *c)
{
	const dri_op *op = c->op;
	size_t es = dr_dtype_size(op->dtype), cnt = op->count;
	size_t chunk = dri_cs.chunk / es / (size_t)c->p;
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	dr_err err = DR_OK;

	if ((uintptr_t)out < (uintptr_t)in + cnt * es * (size_t)c->p &&
	    (uintptr_t)in < (uintptr_t)out + cnt * es) {
		/* recvbuf inside sendbuf (in place): reduce into scratch */
		if (!(own = dri_scratch_get(cnt * es)))
			return DR_ENOMEM; /* dri_submit aborts the group */
		out = own;
	}
	for (size_t a = 0; a < cnt && !err; a += chunk) {
		size_t k = cnt - a < chunk ? cnt - a : chunk;
		int h;

		if ((err = dri_cs_next_half(c, 1, &h)))
			break;
		for (int i = 0; i < c->p; i++)
			if (i != c->r)
				dri_copy(dri_cs_slot(c->r, h) + (size_t)i * k * es,
					 in + ((size_t)i * cnt + a) * es,
					 k * es);
		if ((err = dri_cs_phase(c)))
			break;
		for (int i = 0; i < c->p; i++)
			dri_cs.in[i] = i == c->r ? in + ((size_t)i * cnt + a) * es
					    : dri_cs_slot(i, h) + (size_t)c->r * k * es;
		err = reduce_ordered(c, out + a * es, NULL, k);
	}
	if (!err && own)
		dri_copy(op->buf, own, cnt * es);
	dri_scratch_put(own);
	return err;
}
