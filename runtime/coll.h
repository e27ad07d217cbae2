/*
 * coll.h - what the collectives beyond barrier/all_reduce/broadcast share
 * (coll_*.c, subgroup.c): argument checks of the public entry points, and
 * the index arithmetic of every schedule as small pure functions.
 *
 * The schedules are kept apart from the code that moves bytes so that a
 * unit test (tests/unit/coll_sched.c) can play them for every world size and
 * show that each rank ends with the right blocks, without a network.  All
 * ranks here are group indices (0 .. p-1); "relative" ranks count from the
 * root: vr = (r - root + p) % p.
 */
#ifndef DRI_COLL_H
#define DRI_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "group.h"
#include "reduce.h"
#include "timeout.h"

/* Results at most this many bytes take the latency-bound algorithms
 * (binomial trees, recursive doubling, Bruck, recursive halving); larger
 * ones take the bandwidth-bound ones (ring, direct, pairwise).  Where the
 * two cross on loopback TCP: see scripts/bench-coll. */
#define DRI_COLL_SMALL_BYTES ((size_t)64 << 10)

/* All_to_all posts this many pairwise steps at once, so that a large group
 * keeps a bounded number of messages in flight. */
#define DRI_A2A_WINDOW 8
/* ... unless its pieces are this large: then one step at a time. */
#define DRI_A2A_LARGE ((size_t)32 << 10)

/* ------------------------------------------------------------ arithmetic */

static inline int dri_mod(int a, int p)
{
	int m = a % p;
	return m < 0 ? m + p : m;
}

static inline int dri_is_pow2(int p)
{
	return p > 0 && (p & (p - 1)) == 0;
}

/* Start of block i when count elements are cut in p nearly equal blocks
 * (the first count % p blocks one larger); block i is [off(i), off(i+1)). */
static inline size_t dri_block_off(size_t count, int p, int i)
{
	size_t q = count / (size_t)p, rem = count % (size_t)p;
	return q * (size_t)i + ((size_t)i < rem ? (size_t)i : rem);
}

/* ------------------------------------------------------ binomial trees */

/* Parent of relative rank vr (> 0): clear its lowest set bit. */
static inline int dri_binom_parent(int vr)
{
	return vr & (vr - 1);
}

/* Children of vr are vr + m for m = 1, 2, 4, ... below dri_binom_limit(vr)
 * (its lowest set bit; p rounded up to a power of two for the root), as
 * long as vr + m < p.  Child vr + m heads a subtree of
 * dri_binom_subtree(vr + m, m, p) consecutive relative ranks. */
static inline int dri_binom_limit(int vr, int p)
{
	if (vr)
		return vr & -vr;
	int m = 1;
	while (m < p)
		m <<= 1;
	return m;
}

static inline int dri_binom_subtree(int child, int m, int p)
{
	return child + m <= p ? m : p - child;
}

/* ------------------------------------------------------------- rings */

/* Ring all_gather step s (0 .. p-2): rank r sends block
 * dri_ring_ag_send(r, s, p) to r + 1 and receives block
 * dri_ring_ag_send(r - 1, s, p) from r - 1. */
static inline int dri_ring_ag_send(int r, int s, int p)
{
	return dri_mod(r - s, p);
}

/* ------------------------------------------------- recursive doubling */

/* Recursive doubling all_gather (p a power of two), step with distance d
 * (1, 2, 4 ... p/2): partner r ^ d; rank r holds the d blocks starting at
 * dri_rd_start(r, d) and receives the partner's d blocks, which start at
 * dri_rd_start(r ^ d, d). */
static inline int dri_rd_start(int r, int d)
{
	return r & ~(d - 1);
}

/* Recursive halving reduce_scatter (p a power of two), step with distance
 * d (p/2, p/4 ... 1): rank r holds partial sums of the 2d blocks starting
 * at r & ~(2d - 1); it keeps the half holding its own block (start
 * dri_rh_keep(r, d)) and sends the other half (start dri_rh_keep(r ^ d, d))
 * to partner r ^ d. */
static inline int dri_rh_keep(int r, int d)
{
	return r & ~(d - 1);
}

/* ---------------------------------------------------------------- Bruck */

/* Bruck all_gather (any p), step with distance d (1, 2, 4 ... < p): rank
 * r, holding blocks r .. r + d - 1 (mod p) in slots 0 .. d-1 of its
 * scratch, sends the first dri_bruck_n(d, p) slots to r - d and receives as
 * many into slots d .. from r + d.  At the end slot i holds block r + i. */
static inline int dri_bruck_n(int d, int p)
{
	return d < p - d ? d : p - d;
}

/* ---------------------------------------------------------- pairwise */

/* Pairwise exchange step k (1 .. p-1): send to r + k, receive from r - k. */
static inline int dri_pair_to(int r, int k, int p)
{
	return dri_mod(r + k, p);
}
static inline int dri_pair_from(int r, int k, int p)
{
	return dri_mod(r - k, p);
}

/* --------------------------------------------------- group arithmetic */

/* World rank of group index i. */
static inline int dri_peer(const dr_group *g, int i)
{
	return g->ranks ? g->ranks[i] : i;
}

/* Group index of a world rank, -1 if it is not a member. */
int dri_group_index(const dr_group *g, int world_rank);

/* group.c's (R): a group of the given world ranks, copied; NULL when out
 * of memory. */
dr_group *dri_group_create(uint32_t id, const int *ranks, int n);
void dri_group_free(dr_group *group);

/* ------------------------------------------------ entry-point checks */

/* Checks that the process group is initialized (DR_ENOINIT) and resolves
 * group (NULL = world) into *out. */
dr_err dri_coll_group(const char *call, dr_group *group, dr_group **out);
/* Resolves group (NULL = world) and checks what every collective checks:
 * initialized (DR_ENOINIT), dtype in range and, when op >= 0, op in range
 * and applicable to dtype; names the call in the message.  *out receives
 * the group. */
dr_err dri_coll_check(const char *call, dr_group *group, dr_group **out,
		      dr_dtype dtype, int op);
/* root (a world rank) must be a member of g: DR_EINVAL otherwise. */
dr_err dri_coll_check_root(const char *call, const dr_group *g, int root,
			   const char *what);
/* The one check of a buffer argument, used by every collective and
 * point-to-point entry point: a buffer of count x mult elements of dtype
 * (mult: the group size for gather's recvbuf and the like, else 1) must
 * have a size that fits in memory without wrapping (DR_EINVAL naming the
 * count otherwise: a wrapped size would send or reduce the wrong number
 * of bytes), and may be NULL only when it is empty. */
dr_err dri_coll_check_buf(const char *call, const void *buf, size_t count,
			  size_t mult, dr_dtype dtype, const char *what);

/* Fills what every collective's dri_op holds: run, the identity of its
 * messages (redop and root -1 when the call has none), group, buffers
 * (NULL replaced by dri_or_empty), count, dtype, and the device of buf (or
 * sendbuf when buf is NULL). */
void dri_coll_op(dri_op *op, dr_err (*run)(dri_op *), dri_coll coll,
		 dr_group *g, const void *sendbuf, void *buf, size_t count,
		 dr_dtype dtype, int redop, int root);

/* Runs gather or scatter (op->root its root): a copy on a group of one,
 * tree(op, root index, piece bytes) for small messages, direct() for large
 * ones. */
typedef dr_err (*dri_rooted_fn)(const dri_op *op, int root, size_t blk);
dr_err dri_rooted_run(dri_op *op, dri_rooted_fn tree, dri_rooted_fn direct);

/* The large-message gather (gather != 0) or scatter: every piece goes
 * directly between the root and its rank, the root posting all at once. */
dr_err dri_rooted_direct(const dri_op *op, int root, size_t blk, int gather);

/* Waits for the n requests posted so far (none: nothing to wait for) and
 * returns err if a post already failed, else the wait's status. */
dr_err dri_coll_wait(dri_req *reqs, int n, dr_err err);

/* Scratch memory of n bytes (at least 1, so that a zero count still gets a
 * valid pointer); NULL with dr_last_error set when out of memory. */
void *dri_scratch(size_t n);

/* Scratch for data (large buffers): as dri_scratch, but released with
 * dri_scratch_put, which keeps a few blocks (DRI_SCRATCH_CACHE bytes at
 * most) for the next call.  Fresh memory costs a page fault per page on
 * first touch; at 64 MiB that was 6x the time of the collective itself.
 * Thread-safe; NULL is a no-op for put. */
#define DRI_SCRATCH_CACHE ((size_t)256 << 20)
void *dri_scratch_get(size_t n);
void dri_scratch_put(void *p);

/* p itself, or a valid dummy address when p is NULL (a zero count), so
 * that memcpy and friends never see NULL. */
void *dri_or_empty(const void *p);

/* Reduce-scatter of in (whose blocks are cut at off[0 .. p]) over the
 * group of op: out receives block r of the reduction (not yet
 * dri_reduce_finish'ed).  in is only read; out must not overlap it. */
dr_err dri_reduce_scatter_blocks(const dri_op *op, const void *in,
				 const size_t *off, void *out);

#endif /* DRI_COLL_H */
