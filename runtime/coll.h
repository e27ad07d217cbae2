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

/* From this many ranks (DISTRUN_TREE_FROM sets another number) the small
 * barrier, all_reduce and all_gather over messages take trees
 * (2 (p - 1) messages) instead of dissemination, recursive doubling and
 * Bruck (p lg p): each message wakes a process, and on many ranks the
 * wake-ups are the cost (docs/benchmarks.md, "Many ranks over TCP"). */
#define DRI_COLL_MANY_RANKS 256

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

/* Every public entry point of the collectives and point-to-point, and the
 * arguments it takes, in one table: coll_common.c checks each call's
 * arguments from its row before anything is sent, so a bad call fails on
 * its rank alone with DR_EINVAL (DR_ENOINIT, DR_ENOTMEMBER, DR_ENOTSUP)
 * naming the call and the argument, and its peers never see it.  A call
 * takes only the checks its row names; tests/c/api_fuzz.c drives every
 * row with out-of-range values.
 *
 *   XX(ID, name, args, root, buf1, buf2)
 *
 * args: DRI_A_* below.  root: the name of its root argument (a world
 * rank of the group), NULL if none.  buf1 (sendbuf, or buf for a call
 * with one buffer) and buf2 (recvbuf): how many elements each holds,
 * DRI_B_*. */
enum {
	DRI_A_DTYPE = 1 << 0,   /* dtype in range */
	DRI_A_OP = 1 << 1,      /* a reduction op in range, valid for dtype */
	DRI_A_PEER = 1 << 2,    /* peer: a world rank of the group, not us */
	DRI_A_ANY = 1 << 3,     /* ... or DR_ANY_SOURCE */
	DRI_A_TAG = 1 << 4,     /* tag >= 0 */
	DRI_A_MEMBER = 1 << 5,  /* the caller must be in the group */
	DRI_A_WORK = 1 << 6,    /* work must not be NULL (asynchronous only) */
	DRI_A_DEVICES = 1 << 7, /* device_ids: n >= 0, not NULL when n > 0 */
	DRI_A_DEVICE1 = 1 << 8, /* ... and n >= 1 */
	DRI_A_COUNTS = 1 << 9,  /* send_counts, recv_counts: both, group size
				 * each, summing to what fits in memory, the
				 * piece to itself the same in both */
};
enum {
	DRI_B_NONE,       /* no such buffer */
	DRI_B_ONE,        /* count elements */
	DRI_B_GROUP,      /* count x group size */
	DRI_B_ROOT_GROUP, /* count x group size on the root; ignored (may be
			   * NULL) elsewhere, but its size is checked on
			   * every rank, so that all fail alike */
	DRI_B_COUNTS,     /* the sum of send_counts (buf1) or recv_counts */
};
#define DRI_ENTRY_MAP(XX)                                                      \
	XX(ALL_REDUCE, "dr_all_reduce", DRI_A_DTYPE | DRI_A_OP, NULL,          \
	   DRI_B_ONE, DRI_B_NONE)                                              \
	XX(BROADCAST, "dr_broadcast", DRI_A_DTYPE, "src", DRI_B_ONE,           \
	   DRI_B_NONE)                                                         \
	XX(REDUCE, "dr_reduce", DRI_A_DTYPE | DRI_A_OP, "dst", DRI_B_ONE,      \
	   DRI_B_NONE)                                                         \
	XX(ALL_GATHER, "dr_all_gather", DRI_A_DTYPE, NULL, DRI_B_ONE,          \
	   DRI_B_GROUP)                                                        \
	XX(GATHER, "dr_gather", DRI_A_DTYPE, "dst", DRI_B_ONE,                 \
	   DRI_B_ROOT_GROUP)                                                   \
	XX(SCATTER, "dr_scatter", DRI_A_DTYPE, "src", DRI_B_ROOT_GROUP,        \
	   DRI_B_ONE)                                                          \
	XX(REDUCE_SCATTER, "dr_reduce_scatter", DRI_A_DTYPE | DRI_A_OP, NULL,  \
	   DRI_B_GROUP, DRI_B_ONE)                                             \
	XX(ALL_TO_ALL, "dr_all_to_all", DRI_A_DTYPE, NULL, DRI_B_GROUP,        \
	   DRI_B_GROUP)                                                        \
	XX(ALL_TO_ALL_V, "dr_all_to_all_v", DRI_A_DTYPE | DRI_A_COUNTS, NULL,  \
	   DRI_B_COUNTS, DRI_B_COUNTS)                                         \
	XX(BARRIER, "dr_barrier", DRI_A_DEVICES, NULL, DRI_B_NONE, DRI_B_NONE) \
	XX(CUDA_BARRIER_DEVICE, "dr_cuda_barrier_device",                      \
	   DRI_A_DEVICES | DRI_A_DEVICE1, NULL, DRI_B_NONE, DRI_B_NONE)        \
	XX(MONITORED_BARRIER, "dr_monitored_barrier", 0, NULL, DRI_B_NONE,     \
	   DRI_B_NONE)                                                         \
	XX(SEND, "dr_send", DRI_A_DTYPE | DRI_A_PEER | DRI_A_TAG |             \
	   DRI_A_MEMBER, NULL, DRI_B_ONE, DRI_B_NONE)                          \
	XX(RECV, "dr_recv", DRI_A_DTYPE | DRI_A_PEER | DRI_A_ANY | DRI_A_TAG | \
	   DRI_A_MEMBER, NULL, DRI_B_ONE, DRI_B_NONE)                          \
	XX(ISEND, "dr_isend", DRI_A_DTYPE | DRI_A_PEER | DRI_A_TAG |           \
	   DRI_A_MEMBER | DRI_A_WORK, NULL, DRI_B_ONE, DRI_B_NONE)             \
	XX(IRECV, "dr_irecv", DRI_A_DTYPE | DRI_A_PEER | DRI_A_ANY |           \
	   DRI_A_TAG | DRI_A_MEMBER | DRI_A_WORK, NULL, DRI_B_ONE, DRI_B_NONE)

typedef enum {
#define DRI_XX_ENTRY(id, name, args, root, b1, b2) DRI_E_##id,
	DRI_ENTRY_MAP(DRI_XX_ENTRY)
#undef DRI_XX_ENTRY
	DRI_E_COUNT_
} dri_entry;

/* A call's arguments, as its entry point got them; those its row does not
 * name are not looked at. */
typedef struct {
	dr_group *group;           /* NULL: the world */
	dr_dtype dtype;
	int op;                    /* a dr_op, as an int: any value is checked */
	int root;                  /* world rank */
	int peer, tag;             /* point-to-point */
	const void *buf1, *buf2;   /* sendbuf (or buf), recvbuf */
	size_t count;
	const size_t *send_counts, *recv_counts;
	const int *device_ids;
	int n_device_ids;
	dr_work **work;            /* set to NULL first, when not NULL */
} dri_args;

/* "dr_all_reduce" ...: the entry point's name, as its messages give it. */
const char *dri_entry_name(dri_entry e);
/* Checks a's arguments against row e: initialized (DR_ENOINIT), the
 * group not destroyed, then each argument the row names (DR_EINVAL, or
 * DR_ENOTSUP for an op that does not apply to the dtype, DR_ENOTMEMBER
 * for point-to-point outside the group).  *out receives the group. */
dr_err dri_args_check(dri_entry e, const dri_args *a, dr_group **out);
/* Checks that the process group is initialized (DR_ENOINIT) and resolves
 * group (NULL = world) into *out (dr_new_group, which checks its list of
 * ranks itself: a bad list still takes part in the agreement). */
dr_err dri_coll_group(const char *call, dr_group *group, dr_group **out);

/* Fills what every collective's dri_op holds: run, the identity of its
 * messages (redop and root -1 when the call has none), group, buffers
 * (NULL replaced by dri_or_empty), count, dtype, and the device of buf (or
 * sendbuf when buf is NULL). */
void dri_coll_op(dri_op *op, dr_err (*run)(dri_op *), dri_coll coll,
		 dr_group *g, const void *sendbuf, void *buf, size_t count,
		 dr_dtype dtype, int redop, int root);

/* ---------------------------------------- choosing the algorithm
 * coll_select.c: one table, a row per collective (quick, shared memory,
 * two levels, flat by size).  dri_coll_run is every collective's run
 * (dri_coll_op); dri_coll_quick the entry points' try of the quick path
 * (1 with *err set when taken, 0 to take the usual way). */
dr_err dri_coll_run(dri_op *op);
/* DISTRUN_TREE_FROM (the ranks from which small calls take trees), at
 * init: DR_EENV naming a bad value. */
dr_err dri_coll_configure(void);
int dri_coll_quick(dri_coll coll, void *buf, size_t count, dr_dtype dtype,
		   dr_op redop, int root, dr_err *err);

/* ------------------------------------------------- the algorithms
 * Each runs op over messages, whatever its size; coll_select.c chooses. */
dr_err dri_barrier_dissemination(dri_op *op);
dr_err dri_barrier_tree(dri_op *op);       /* up and down a binomial tree */
dr_err dri_all_reduce_rd(dri_op *op);      /* recursive doubling */
dr_err dri_all_reduce_halving(dri_op *op); /* Rabenseifner, power of 2 */
dr_err dri_all_reduce_ring(dri_op *op);
dr_err dri_broadcast_binomial(dri_op *op); /* pipelined in pieces */
/* reduce to group index root, not yet dri_reduce_finish'ed */
dr_err dri_reduce_tree(const dri_op *op, int root);
dr_err dri_reduce_pieces(const dri_op *op, int root); /* rs + gather */
/* all_gather into out (blocks of blk bytes); ring places our own block,
 * rd and bruck expect it in place */
dr_err dri_all_gather_ring(const dri_op *op, char *out, size_t blk);
dr_err dri_all_gather_rd(const dri_op *op, char *out, size_t blk);
dr_err dri_all_gather_bruck(const dri_op *op, char *out, size_t blk);
/* gather and scatter (root: group index; blk: bytes a rank) */
typedef dr_err (*dri_rooted_fn)(const dri_op *op, int root, size_t blk);
dr_err dri_gather_tree(const dri_op *op, int root, size_t blk);
dr_err dri_gather_direct(const dri_op *op, int root, size_t blk);
dr_err dri_scatter_tree(const dri_op *op, int root, size_t blk);
dr_err dri_scatter_direct(const dri_op *op, int root, size_t blk);
/* reduce_scatter of equal blocks (its scratch, in place, the finish) */
dr_err dri_reduce_scatter_equal(dri_op *op);
dr_err dri_all_to_all_pairwise(dri_op *op); /* and all_to_all_v */
dr_err dri_monitored_run(dri_op *op);

/* The large-message gather (gather != 0) or scatter: every piece goes
 * directly between the root and its rank, the root posting all at once. */
dr_err dri_rooted_direct(const dri_op *op, int root, size_t blk, int gather);

/* Waits for the n requests posted so far (none: nothing to wait for) and
 * returns err if a post already failed, else the wait's status. */
dr_err dri_coll_wait(dri_req *reqs, int n, dr_err err);

/* The one scratch memory of the collectives, for data and bookkeeping
 * alike: n bytes (a zero n still gets a valid pointer), NULL with
 * dr_last_error set when out of memory; given back with dri_scratch_put,
 * which keeps a few blocks (SCRATCH_KEEP, DRI_SCRATCH_CACHE bytes at
 * most) for the next call.  Fresh memory costs a page fault per page on
 * first touch; at 64 MiB that was 6x the time of the collective itself,
 * so a call that needs scratch every time must not malloc it every time.
 * Thread-safe; NULL is a no-op for put.  dri_scratch_drop frees the
 * blocks kept (destroy). */
#define DRI_SCRATCH_CACHE ((size_t)256 << 20)
void *dri_scratch_get(size_t n);
void dri_scratch_put(void *p);
void dri_scratch_drop(void);

/* p itself, or a valid dummy address when p is NULL (a zero count), so
 * that memcpy and friends never see NULL. */
void *dri_or_empty(const void *p);

/* Reduce-scatter of in (whose blocks are cut at off[0 .. p]) over the
 * group of op: out receives block r of the reduction (not yet
 * dri_reduce_finish'ed).  in is only read; out must not overlap it.
 * A step of two collectives (reduce_scatter, a large reduce), it picks
 * its own way: halving when small on a power of two, else pairwise. */
dr_err dri_reduce_scatter_blocks(const dri_op *op, const void *in,
				 const size_t *off, void *out);

#endif /* DRI_COLL_H */
