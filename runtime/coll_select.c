/*
 * coll_select.c - which algorithm runs each collective: one table, a row
 * per collective, and the ways it names are tried in this order:
 *
 *   quick         a small blocking call of the world, all on this host:
 *                 through the segment's flags at once, without the dri_op
 *                 that dri_submit copies and orders (dri_coll_quick, from
 *                 the entry point; coll_shm.c's dri_shm_quick);
 *   shared memory every other call of the world, all on this host, up to
 *                 the row's number of ranks: flags and slots in the
 *                 segment (coll_shm.c);
 *   two levels    ranks on several hosts, where dri_hier_wanted says that
 *                 the exchanges between hosts saved pay (coll_hier.c);
 *   flat          messages between the ranks, the algorithm chosen by
 *                 size here (the chooser functions below the table; the
 *                 algorithms are in each collective's own file).
 *
 * The size rules are measured ones (README's benchmarks and
 * docs/benchmarks.md): small messages take the latency-bound algorithms
 * (lg p steps), large ones those that move each byte the fewest times;
 * from DRI_COLL_MANY_RANKS ranks the small barrier, all_reduce and
 * all_gather take binomial trees (2 lg p steps but 2 (p - 1) messages,
 * not p lg p: on many ranks each message's wake-up is what costs).
 * Each collective's file keeps its entry point and its algorithms; none
 * chooses among them.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "coll_hier.h"
#include "coll_shm.h"
#include "seg.h"
#include "shm.h"

typedef dr_err (*algo_fn)(dri_op *op);

struct row {
	int quick;        /* may take the quick path ... */
	size_t quick_max; /* ... with at most this many bytes */
	int shm_max;      /* through the segment up to this many ranks; 0: not */
	algo_fn hier;     /* two levels, or NULL */
	algo_fn flat;     /* messages: the chooser by size */
};

/* ------------------------------------------------ the flat choosers */

/* From how many ranks the small calls take the trees: DISTRUN_TREE_FROM,
 * read at init (dri_coll_configure), or DRI_COLL_MANY_RANKS. */
static int tree_from = DRI_COLL_MANY_RANKS;

dr_err dri_coll_configure(void)
{
	const char *s = getenv("DISTRUN_TREE_FROM");
	char *end;
	long v;

	if (!s || !*s) {
		v = DRI_COLL_MANY_RANKS;
	} else {
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || *end || end == s || v < 2 || v > INT_MAX)
			return dri_fail(DR_EENV, "DISTRUN_TREE_FROM='%s': use a "
					"number of ranks, 2 or more", s);
	}
	__atomic_store_n(&tree_from, (int)v, __ATOMIC_RELAXED);
	return DR_OK;
}

/* Whether the small calls of group g take the trees. */
static int many(const dr_group *g)
{
	return g->size >= __atomic_load_n(&tree_from, __ATOMIC_RELAXED);
}

static dr_err barrier_flat(dri_op *op)
{
	return many(op->group) ? dri_barrier_tree(op)
			       : dri_barrier_dissemination(op);
}

/* The second half of the trees' all_reduce and all_gather: count
 * elements of op->buf broadcast from group index 0 down the binomial tree
 * the first half went up (each pair's two messages go opposite ways, so
 * they cannot be taken for each other). */
static dr_err down_from_first(const dri_op *op, size_t count)
{
	dri_op sub = *op;

	sub.root = dri_peer(op->group, 0);
	sub.count = count;
	return dri_broadcast_binomial(&sub);
}

/* A small all_reduce on many ranks: reduced up the tree to group index 0
 * and finished there. */
static dr_err all_reduce_tree(dri_op *op)
{
	dr_err err = dri_reduce_tree(op, 0);

	if (err)
		return err;
	if (op->group->rank == 0)
		dri_reduce_finish(op->buf, op->count, op->dtype, op->redop,
				  op->group->size);
	return down_from_first(op, op->count);
}

/* A small all_gather on many ranks (our block already in place in out):
 * gathered up the tree to group index 0. */
static dr_err all_gather_tree(const dri_op *op, char *out, size_t blk)
{
	dri_op sub = *op;
	dr_err err;

	sub.sendbuf = out + (size_t)op->group->rank * blk;
	err = dri_gather_tree(&sub, 0, blk);
	return err ? err : down_from_first(op, op->count * (size_t)op->group->size);
}

static dr_err all_reduce_flat(dri_op *op)
{
	size_t bytes = op->count * dr_dtype_size(op->dtype);

	if (op->group->size == 1) {
		dri_reduce_finish(op->buf, op->count, op->dtype, op->redop, 1);
		return DR_OK;
	}
	if (bytes <= DRI_COLL_SMALL_BYTES || op->count < (size_t)op->group->size)
		return many(op->group) ? all_reduce_tree(op)
				       : dri_all_reduce_rd(op);
	if (dri_is_pow2(op->group->size))
		return dri_all_reduce_halving(op);
	return dri_all_reduce_ring(op);
}

static dr_err reduce_flat(dri_op *op)
{
	const dr_group *g = op->group;
	int root = dri_group_index(g, op->root);
	size_t n = op->count * dr_dtype_size(op->dtype);
	dr_err err = DR_OK;

	if (g->size > 1) {
		if (n <= DRI_COLL_SMALL_BYTES || op->count < (size_t)g->size)
			err = dri_reduce_tree(op, root);
		else
			err = dri_reduce_pieces(op, root);
	}
	if (!err && g->rank == root)
		dri_reduce_finish(op->buf, op->count, op->dtype, op->redop,
				  g->size);
	return err;
}

static dr_err all_gather_flat(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size;
	size_t blk = op->count * dr_dtype_size(op->dtype);
	char *out = op->buf;

	if (p > 1 && blk * (size_t)p > DRI_COLL_SMALL_BYTES)
		return dri_all_gather_ring(op, out, blk); /* places our block */
	if (out + (size_t)g->rank * blk != (const char *)op->sendbuf)
		memmove(out + (size_t)g->rank * blk, op->sendbuf, blk);
	if (p == 1)
		return DR_OK;
	if (many(g))
		return all_gather_tree(op, out, blk);
	if (dri_is_pow2(p))
		return dri_all_gather_rd(op, out, blk);
	return dri_all_gather_bruck(op, out, blk);
}

/* gather and scatter: small ones by a binomial tree, large ones straight
 * between the root and each rank. */
static dr_err rooted_flat(dri_op *op, dri_rooted_fn tree, dri_rooted_fn direct)
{
	const dr_group *g = op->group;
	int root = dri_group_index(g, op->root);
	size_t blk = op->count * dr_dtype_size(op->dtype);

	if (g->size == 1) {
		memmove(op->buf, op->sendbuf, blk);
		return DR_OK;
	}
	if (blk * (size_t)g->size <= DRI_COLL_SMALL_BYTES)
		return tree(op, root, blk);
	return direct(op, root, blk);
}

static dr_err gather_flat(dri_op *op)
{
	return rooted_flat(op, dri_gather_tree, dri_gather_direct);
}

static dr_err scatter_flat(dri_op *op)
{
	return rooted_flat(op, dri_scatter_tree, dri_scatter_direct);
}

/* ----------------------------------------------------- two levels */

static dr_err hier_barrier(dri_op *op)
{
	return dri_hier_barrier(op, barrier_flat);
}

static dr_err hier_all_reduce(dri_op *op)
{
	return dri_hier_all_reduce(op, reduce_flat, all_reduce_flat,
				   dri_broadcast_binomial);
}

static dr_err hier_broadcast(dri_op *op)
{
	return dri_hier_broadcast(op, dri_broadcast_binomial);
}

static dr_err hier_all_gather(dri_op *op)
{
	return dri_hier_all_gather(op, dri_broadcast_binomial);
}

/* ------------------------------------------------------- the table */

#define SHM DRI_SEG_SHM_MAX
/* all_to_all_v's counts travel in the records of the call: a flat
 * exchange of a few ranks only */
#define SHM_A2AV (DRI_SHM_FLAT_MAX < DRI_SEG_A2AV_MAX ? DRI_SHM_FLAT_MAX : \
		  DRI_SEG_A2AV_MAX)

static const struct row rows[DRI_COLL_COUNT_] = {
	[DRI_BARRIER] = { .quick = 1, .shm_max = SHM, .hier = hier_barrier,
			  .flat = barrier_flat },
	[DRI_ALL_REDUCE] = { .quick = 1, .quick_max = sizeof(uint64_t),
			     .shm_max = SHM, .hier = hier_all_reduce,
			     .flat = all_reduce_flat },
	[DRI_BROADCAST] = { .quick = 1, .quick_max = DRI_SEG_INLINE,
			    .shm_max = SHM, .hier = hier_broadcast,
			    .flat = dri_broadcast_binomial },
	[DRI_REDUCE] = { .quick = 1, .quick_max = DRI_SEG_INLINE,
			 .shm_max = SHM, .flat = reduce_flat },
	[DRI_ALL_GATHER] = { .shm_max = SHM, .hier = hier_all_gather,
			     .flat = all_gather_flat },
	[DRI_GATHER] = { .shm_max = SHM, .flat = gather_flat },
	[DRI_SCATTER] = { .shm_max = SHM, .flat = scatter_flat },
	[DRI_REDUCE_SCATTER] = { .shm_max = SHM,
				 .flat = dri_reduce_scatter_equal },
	[DRI_ALL_TO_ALL] = { .shm_max = SHM, .flat = dri_all_to_all_pairwise },
	[DRI_ALL_TO_ALL_V] = { .shm_max = SHM_A2AV,
			       .flat = dri_all_to_all_pairwise },
	/* its own protocol, with a timeout of its own: messages only */
	[DRI_MONITORED_BARRIER] = { .flat = dri_monitored_run },
};

int dri_coll_quick(dri_coll coll, void *buf, size_t count, dr_dtype dtype,
		   dr_op redop, int root, dr_err *err)
{
	const struct row *w = &rows[coll];

	if (!w->quick || (count && count * dr_dtype_size(dtype) > w->quick_max))
		return 0;
	return dri_shm_quick(coll, buf, count, dtype, redop, root, err);
}

dr_err dri_coll_run(dri_op *op)
{
	const struct row *w = &rows[op->id.coll];
	dr_err err;

	if (op->group->size <= w->shm_max && dri_shm_coll(op, &err))
		return err;
	if (w->hier && dri_hier_wanted(op))
		return w->hier(op);
	return w->flat(op);
}
