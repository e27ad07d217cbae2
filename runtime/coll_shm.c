/*
 * coll_shm.c - the world's collectives through the job's segment, when
 * every rank shares this host's segment: flags and slots in shared
 * memory instead of messages through the rings.
 *
 * A call is a sequence of phases.  In each, a rank writes what the others
 * need into its own slot, arrives (stores the phase number in its block's
 * up word), waits until every rank has arrived, then reads the others'
 * slots.  Up to DRI_SHM_FLAT_MAX ranks, each rank looks at every other's
 * up word; beyond, a tree of flags (arity TREE_K): a rank arrives once
 * its children have, the root then releases its children through its
 * down word, and they theirs, so that a phase costs O(1) flags per rank
 * and wakes only the ranks that wait on the flag that changed.
 *
 * Slots: each rank has two halves of dri_shm_slot_bytes() (seg.h).  A
 * "use" of a half is one chunk of a call: written before a phase, read
 * after it (and after the next one, for the large all_reduce's result).
 * Uses alternate halves, the same on every rank, so a half is written
 * again only two uses later.  Before it writes, a rank checks that every
 * other rank's up word shows it done with the half's last use (past the
 * phase after it; for a rooted use, at its phase): after phases that
 * wait for everyone that is known without looking (S.safe), and only a
 * rooted call can make it wait.  Up to 16 ranks, the end of each half
 * holds NSUB / 2 small slots, which small rooted calls take in turn.
 *
 * Rooted calls (up to 16 ranks): a broadcast's (a scatter's) root copies
 * its data in, arrives and returns at once; the others wait for the
 * root's up word alone, copy out, then arrive (saying they are done with
 * it).  A gather's (a small reduce's) others copy in, arrive and return;
 * the root waits for them all, copies out (reduces) and arrives.  With
 * the small slots a root runs up to LAG calls ahead of its slowest
 * reader.  A broadcast or reduce of at most DRI_SEG_INLINE bytes needs
 * no slot: its writers put the data in their record of the call (seg.h:
 * dri_seg_rec, a line each), and a reader waits on that record instead
 * of the writer's up word, so that what it checks and what it reads come
 * in one transfer (up still moves, for whoever sleeps on it).  The
 * record is written again DRI_SEG_CALLS calls later, once every rank is
 * past the call (settle).
 *
 * Algorithms (every rank reads in rank order, so every rank gets the same
 * bits, and the result does not depend on which rank computed it):
 *   all_reduce, small: each writes its buffer, one phase, each reduces
 *     all p slots in rank order into its own buffer (up to 8 bytes and
 *     16 ranks: not through the slots but on up's line, seg.h's tiny).
 *   all_reduce, large: per chunk, reduce-scatter then all-gather through
 *     the slots: each rank copies the pieces of the others into its slot,
 *     one phase, rank j reduces piece j of all ranks (its own from its
 *     buffer) in rank order and writes it into its slot and buffer, one
 *     phase, each copies the others' reduced pieces out.  Every byte is
 *     copied once in and once out; no rank waits on another's reduction
 *     except at the phase.
 *   broadcast: rooted; in a tree, the root copies a chunk in, one phase,
 *     the others copy it out while the root copies the next one into the
 *     other half.
 *   reduce, up to 64 KiB a rank and 128 KiB for all: rooted, the root
 *     alone reduces (in place when it is rank 0, whose buffer is the
 *     first input).
 *   gather, scatter: rooted; in a tree one phase per chunk.
 *   reduce_scatter, all_gather, all_to_all, large reduce: the same
 *     pattern, one or two phases per chunk.
 *   all_to_all_v (up to DRI_SEG_A2AV_MAX ranks): the counts first (every
 *     rank's send and receive counts in its block, checked by every rank
 *     at the first phase), then the single copy or rounds through the
 *     slots, chosen from every rank's counts (a2av_shm).
 *
 * Single copy: a flat broadcast, all_gather, gather, scatter,
 *   all_to_all or all_to_all_v whose readers read at least DIRECT_MIN
 *   bytes of a rank (a broadcast or gather: at most ROOTED_DIRECT_MAX in
 *   all) skips the slots: every rank publishes the address of what is
 *   read of it (seg.h: xaddr), one phase (the call's check), each reader
 *   copies straight from the others' buffers into its own with
 *   process_vm_readv, one phase (nobody returns while its buffer is
 *   read).  One copy instead of two, and no chunks.  The first such call
 *   of a process group probes first (probe_direct): it goes this way
 *   only if every rank could read every other's memory right (ptrace
 *   rules, pid namespaces and seccomp can forbid it) and, unless
 *   DISTRUN_SHM_DIRECT=on, one copy was measured faster than two.
 *
 * Waiting: a rank first spins on the flag without the transport's lock
 * (pausing and yielding every 16th look; when ranks outnumber the cores
 * it may use, yielding at every look while a rank it waits for said it
 * runs on its CPU, else pausing and yielding every YIELD_EVERY-th), for
 * DISTRUN_SPIN_US at most; then it waits in the transport
 * (dri_transport_flag_wait), which sleeps on the rank's doorbell futex
 * and looks at the launcher's abort word, the peers' processes, the
 * deadline and messages that show a mismatched call.  An arriving rank
 * wakes only the ranks it may be waited for by, and only if they sleep.
 * When the ranks of this host outnumber its CPUs more than
 * SPIN_MAX_PER_CPU to one, a waiting rank sleeps at once: with that many
 * spinning, the rank waited for rarely gets a CPU (the measurements that
 * set the limit: README, Benchmarks).  Every rank says which CPU it
 * runs on, and a waiting rank whose CPU has more ranks than another it
 * may use moves (rebalance).
 *
 * A rank reads a peer's record of the call the moment it sees the
 * peer's up reach the call's first phase (the same line: no transfer
 * of its own), and checks them once all have arrived (see_call).
 *
 * Mismatches: before it arrives at a call's first phase, a rank
 * publishes the call (seq, collective, count, dtype, op, root) in the
 * record of the call's number (seg.h).  Once all have arrived there,
 * each compares every rank's call with rank 0's (in a tree, a rank
 * compares its children's with its own) and fails the group with
 * DR_EMISMATCH naming both, lower rank first; a peer waiting for a
 * message of that seq from us sees our published call instead
 * (transport.c).  A rooted call does not wait for everyone: a reader
 * compares its root's record (also while it waits: two ranks that each
 * take the other for the root do not wait for ever), and every rank
 * checks every rank's record of it at the next phase that waits for all,
 * or LAG calls later at the latest (settle), having waited until every
 * rank is past it.  A rank that returned at once learns of a mismatch
 * there, or through the abort (looked at when a call starts).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "clock.h"
#include "coll.h"
#include "coll_shm.h"
#include "copy.h"
#include "cuda_driver.h"
#include "shm.h"
#include "transport.h"

/* Up to DRI_SHM_FLAT_MAX ranks every rank looks at every other's flag;
 * beyond, a tree with TREE_K children per rank (shm.h: shm.c watches
 * the processes of the same ranks). */
#define TREE_K DRI_SHM_TREE_K
/* Reductions go through an accumulator of this many bytes, which stays
 * in the cache while the p inputs stream past it. */
#define ACC_BYTES ((size_t)32 << 10)
/* Ranks per CPU beyond which a waiting rank sleeps at once instead of
 * spinning first (unless DISTRUN_SPIN_US is set). */
#define SPIN_MAX_PER_CPU 16
/* all_reduce: at most this many bytes per rank take the one-phase path
 * (each rank reads p buffers), and at most SMALL_TOTAL for all ranks. */
#define SMALL_BYTES ((size_t)16 << 10)
#define SMALL_TOTAL ((size_t)256 << 10)
/* reduce: at most this many bytes per rank, and ROOTED_TOTAL for all,
 * go the rooted way (the root alone reduces every slot; beyond, sharing
 * the work wins: README, Benchmarks). */
#define ROOTED_BYTES ((size_t)64 << 10)
#define ROOTED_TOTAL ((size_t)128 << 10)
/* A rank checks a rooted call's records this many calls later (seg.h
 * keeps DRI_SEG_CALLS of each rank's): how far a broadcast's root may
 * run ahead of its slowest reader. */
#define LAG (DRI_SEG_CALLS / 2)
/* Rooted calls of at most SUB_BYTES go through one of NSUB small slots
 * at the end of the halves (NSUB / 2 in each, with halves of at least
 * SUB_HALF_MIN bytes: up to 16 ranks), taken in turn, so that LAG of
 * them can be in flight: a half is written again after two uses, a
 * small slot after NSUB.  The other uses keep off them. */
#define NSUB 16
#define SUB_BYTES ((size_t)16 << 10)
#define SUB_HALF_MIN ((size_t)1 << 20)
/* Single copy: a flat non-reducing call whose readers read pieces of at
 * least DIRECT_MIN bytes of a rank reads them with process_vm_readv,
 * DIRECT_PIECE at a time, once the probe (PROBE_BYTES of every other
 * rank) found that it works and wins; pieces of DIRECT_SURE bytes and
 * more once it found that it works.  Those no longer fit the caches,
 * where two copies move twice the bytes through memory that one does:
 * process_vm_readv of 1 MiB ran at 16.5 GB/s against 27.4 for memcpy
 * (13.7 for two), of 32 MiB 10.4 against 13.6 (cma_rate, Intel), where
 * the probe's 256 KiB, in the caches, go either way from one run to the
 * next (a 64 MiB all_to_all of 2 ranks took 7.3 ms one way and 12.7 the
 * other). */
#define DIRECT_MIN ((size_t)32 << 10)
#define DIRECT_SURE ((size_t)1 << 20)
#define DIRECT_PIECE ((size_t)4 << 20)
#define PROBE_BYTES ((size_t)256 << 10)
/* A broadcast or a gather, where the readers of a rank's buffer (or the
 * root reading the others') read more than this in all, goes through
 * the slots: there the copying in is shared out and overlaps the
 * copying out, which beats one copy done alone by a slower syscall
 * (README, Benchmarks). */
#define ROOTED_DIRECT_MAX ((size_t)4 << 20)
/* With more ranks than CPUs, a broadcast of less than this goes through
 * the slots (where its root does not wait for the readers: measured
 * 1.13-1.17x faster from 64 to 256 KiB on 4 ranks on 2 cores; 1 MiB
 * went 1.6x faster the single-copy way). */
#define BCAST_CROWDED_MIN ((size_t)512 << 10)
/* A gather of less than this per rank goes through the slots too, where
 * its non-roots write and return (32 KiB a rank on 2 ranks: 1.04x
 * faster there; 64 KiB: 1.1x slower). */
#define GATHER_DIRECT_MIN ((size_t)64 << 10)

/* A call as this rank made it: its number among the calls through the
 * flags (its record's place, seg.h), first and last phase, and whether
 * it is still to be checked against every rank's (a rooted call that
 * did not wait for them all). */
struct rec {
	uint64_t n, first, last;
	dri_msg_id id;
	int open;
};

/* This process's place in the sequence of phases and uses (the same on
 * every rank), and its settings.  Only the world group's calls come
 * here, one at a time (group.c orders them). */
static struct {
	uint64_t phase;
	unsigned use;
	uint64_t ncall;        /* calls through the flags */
	uint64_t safe;         /* every other rank's up has reached it */
	uint64_t need[2];      /* half h is written again once every
				* other rank's up reaches need[h] */
	unsigned sub;          /* small slots used */
	uint64_t need_sub[NSUB]; /* the same for the small slots */
	size_t sub_bytes;      /* of each small slot (0: none) */
	size_t sub_off;        /* where they start in a half */
	struct rec past[LAG];  /* the last LAG calls, by n % LAG */
	unsigned open;         /* bit k: past[k].open (close_past) */
	unsigned waits;        /* oversubscribed: waits that looked at
				* rebalancing, counted */
	int configured, off, oversub;
	int cpu;               /* 1 + the CPU last published (seg.h: cpu) */
	cpu_set_t allowed;     /* the CPUs it may run on, as last seen */
	int nallowed;          /* how many (0: unknown) */
	uint64_t allowed_n;    /* S.ncall when last seen */
	int64_t moved_ms;      /* when rebalance last moved this thread */
	unsigned generation;   /* dri_shm_generation() configured for */
	int64_t spin_us;
	int direct_mode;       /* dri_shm_direct_mode() */
	int direct;            /* single copy: 1 yes, -1 no, 0 not probed */
	uint64_t a2av;         /* all_to_all_v calls through the flags */
	int crowded;           /* the probe found a rank with more ranks
				* than CPUs (the same on every rank) */
	size_t chunk;          /* bytes of a half used per phase */
	const char *in[DRI_SEG_SHM_MAX]; /* reduction inputs, rank order */
	int nblk;              /* ranks blk holds (0: none yet) */
	dri_seg_rank *blk[DRI_SEG_SHM_MAX]; /* dri_shm_blk(i), kept */
	/* Flat: the record of the call in flight of each rank, read the
	 * moment its up was seen at the call's first phase (the same line,
	 * the same transfer), for the check once all have arrived; valid
	 * while n1 is the call's number + 1. */
	struct {
		uint64_t n1;
		dri_msg_id id;
	} seen[DRI_SHM_FLAT_MAX];
} S;

static dri_seg_rank *blk_of(int i)
{
	return S.blk[i];
}

/* The call being run. */
struct call {
	const dri_op *op;
	int p, r;
	int tree, first;
	int from;              /* flat: the rank waited for, -1: all */
	int half;              /* of the current use, -1 before the first */
	int sub;               /* its small slot, or -1 (a whole half) */
	uint64_t e;            /* the phase waited for */
	int cursor, stage;     /* how far waiting_for got */
	int armed;             /* waiting in the transport: tell dri_shm_wait
				* which flag (spinning: no need) */
	int bad;               /* a rank whose call differs, or -1 */
	int taking;            /* flat, rooted: waiting for every writer
				* without having arrived (take(c, -1)) */
	int inl;               /* flat, rooted: the data rides in the
				* writers' records of the call (seg.h:
				* dri_seg_rec), which the readers wait for */
	const void *inl_src;   /* what begin puts in ours (inl_len bytes) */
	size_t inl_len;
	int64_t t0;            /* when it started (the deadline is in op->id) */
	struct rec rec;        /* this call */
};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* The CPUs this thread may use, into S.allowed; 0 if unknown. */
static int allowed_get(void)
{
	S.allowed_n = S.ncall;
	S.nallowed = sched_getaffinity(0, sizeof(S.allowed), &S.allowed)
			     ? 0 : CPU_COUNT(&S.allowed);
	return S.nallowed;
}

static void configure(void)
{
	const char *e = getenv("DISTRUN_SHM_COLL"), *spin = getenv("DISTRUN_SPIN_US");

	S.off = e && !strcmp(e, "0");
	/* Spin, unless ranks crowd the CPUs more than SPIN_MAX_PER_CPU to
	 * one: then every spinning rank keeps the one it waits for off its
	 * CPU, and sleeping at once wins (see the file's comment). */
	if (spin && *spin)
		S.spin_us = atoll(spin);
	else
		S.spin_us = dri_shm_ranks_per_cpu() > SPIN_MAX_PER_CPU ? 0 : 100;
	if (S.spin_us < 0)
		S.spin_us = 0;
	S.oversub = dri_shm_oversubscribed();
	S.cpu = -1;
	S.moved_ms = 0;
	allowed_get();
	S.direct_mode = dri_shm_direct_mode();
	S.direct = S.direct_mode == DRI_SHM_DIRECT_OFF ? -1 : 0;
	S.crowded = 0;
	S.chunk = dri_shm_slot_bytes();
	S.sub_bytes = S.chunk >= SUB_HALF_MIN ? SUB_BYTES : 0;
	S.chunk -= NSUB / 2 * S.sub_bytes;
	S.sub_off = S.chunk;
	if ((e = getenv("DISTRUN_SHM_CHUNK")) && atoll(e) >= 4096 &&
	    (size_t)atoll(e) < S.chunk)
		S.chunk = (size_t)atoll(e) / 64 * 64;
	/* A new process group: every rank's flags start from 0 again. */
	S.phase = S.ncall = S.safe = S.a2av = 0;
	S.use = S.sub = 0;
	memset(S.need, 0, sizeof(S.need));
	memset(S.need_sub, 0, sizeof(S.need_sub));
	memset(S.past, 0, sizeof(S.past));
	S.open = S.waits = 0;
	S.nblk = 0;
	memset(S.seen, 0, sizeof(S.seen));
	S.generation = dri_shm_generation();
	S.configured = 1;
}

/* ------------------------------------------------------------ flags */

static uint64_t load(const uint64_t *w)
{
	return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

static void publish(uint64_t *w, uint64_t v)
{
	/* Sequentially consistent: a peer that raises its waiting flag and
	 * then reads w, against our store and then our read of its flag
	 * (dri_shm_ring_peer), cannot both miss. */
	__atomic_store_n(w, v, __ATOMIC_SEQ_CST);
}

static int tree_parent(int r)
{
	return (r - 1) / TREE_K;
}

/* dri_shm_wait sleeps only while *w < v. */
static void want(const struct call *c, const uint64_t *w, uint64_t v)
{
	if (c->armed)
		dri_shm_want(w, v);
}

/* Whether two published calls are the same call. */
static int same_call(const dri_msg_id *a, const dri_msg_id *b)
{
	return a->coll == b->coll && a->count == b->count &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

/* Rank peer's record of call rec (a call with coll 0 when it has
 * another there: another seq, or with strict, another first phase). */
static void rec_call(const struct call *c, const struct rec *rec, int peer,
		     int strict, dri_msg_id *id)
{
	if (peer == c->r) {
		*id = rec->id;
		return;
	}
	if (strict && !c->tree && S.seen[peer].n1 == rec->n + 1) {
		*id = S.seen[peer].id;
		return;
	}
	/* Of a past call, the record alone: the copy on up's line is of a
	 * later call, and the peer writes that line at every call. */
	if (!(rec == &c->rec ? dri_shm_read_call : dri_shm_read_rec)(
		    peer, (int)(rec->n % DRI_SEG_CALLS), rec->id.seq,
		    strict ? rec->first : 0, id))
		memset(id, 0, sizeof(*id));
}

/* Whether peer's record of this call is there and differs from ours. */
static int call_differs(const struct call *c, int peer)
{
	dri_msg_id theirs;

	if (!c->first)
		return 0;
	rec_call(c, &c->rec, peer, 1, &theirs);
	return theirs.coll && !same_call(&c->rec.id, &theirs);
}

/* The tree's child of the first phase whose call differs from ours. */
static int child_differs(const struct call *c, int child)
{
	dri_msg_id theirs;

	if (!c->first)
		return 0;
	rec_call(c, &c->rec, child, 1, &theirs);
	return !same_call(&c->rec.id, &theirs);
}

/* The first rank of child's subtree that has not arrived at c->e, as
 * deep as it goes: the one to name and to watch (child itself if its
 * children all have). */
static int missing_below(const struct call *c, int child)
{
	for (int k = 1; k <= TREE_K && TREE_K * child + k < c->p; k++)
		if (load(&blk_of(TREE_K * child + k)->up) < c->e) {
			child = TREE_K * child + k;
			k = 0;
		}
	return child;
}

/* Keeps rank peer's record of the call (flat, first phase: its up has
 * reached it), for check_all. */
static void see_call(const struct call *c, int peer)
{
	if (!dri_shm_read_call(peer, (int)(c->rec.n % DRI_SEG_CALLS),
			       c->rec.id.seq, c->rec.first, &S.seen[peer].id))
		memset(&S.seen[peer].id, 0, sizeof(S.seen[peer].id));
	S.seen[peer].n1 = c->rec.n + 1;
}

/* A call whose data rides in records (c->inl), at its first phase: 1
 * once peer's record of it is there and is our call (kept for check_all
 * as see_call keeps it), -1 if it is another call, or peer's up went
 * past the phase without it (then it made other calls before), 0 while
 * it is not there yet. */
static int rec_here(const struct call *c, int peer)
{
	int k = (int)(c->rec.n % DRI_SEG_CALLS);
	dri_msg_id *id = &S.seen[peer].id;

	if (!dri_shm_read_rec(peer, k, c->rec.id.seq, c->e, id)) {
		/* up after the record: a record written between the two
		 * reads is there now */
		if (load(&blk_of(peer)->up) < c->e)
			return 0;
		if (!dri_shm_read_rec(peer, k, c->rec.id.seq, c->e, id))
			return -1;
	}
	S.seen[peer].n1 = c->rec.n + 1;
	return same_call(&c->rec.id, id) ? 1 : -1;
}

/* waiting_for's look at peer's record (c->inl, first phase): 1 if it
 * is there and our call; 0 if not yet (dri_shm_wait then sleeps on its
 * up); -1 if it differs (c->bad names peer). */
static int inl_look(struct call *c, int peer)
{
	int k = rec_here(c, peer);

	if (!k)
		want(c, &blk_of(peer)->up, c->e);
	else if (k < 0)
		c->bad = peer;
	return k;
}

/* The rank still waited for at phase c->e, or -1 once the phase is
 * passed (then, in a tree, this rank has arrived and released its
 * children).  Tells dri_shm_wait which flag to sleep on. */
static int waiting_for(void *arg)
{
	struct call *c = arg;

	if (!c->tree && c->from >= 0) {
		dri_seg_rank *b = blk_of(c->from);

		if (c->inl && c->first)
			return inl_look(c, c->from) ? -1 : c->from;
		if (load(&b->up) >= c->e)
			return -1;
		/* It waits too (it takes itself for a reader), or for
		 * something else: its record says so. */
		if (call_differs(c, c->from)) {
			c->bad = c->from;
			return -1;
		}
		want(c, &b->up, c->e);
		return c->from;
	}
	if (!c->tree) {
		for (; c->cursor < c->p; c->cursor++) {
			dri_seg_rank *b;

			if (c->cursor == c->r)
				continue;
			b = blk_of(c->cursor);
			if (c->inl && c->first) {
				int k = inl_look(c, c->cursor);

				if (k <= 0)
					return k ? -1 : c->cursor;
				continue;
			}
			if (load(&b->up) < c->e) {
				/* A rooted reader of all does not arrive
				 * first: a peer that does not either (the
				 * root of another call) shows it in its
				 * record alone. */
				if (c->taking && call_differs(c, c->cursor)) {
					c->bad = c->cursor;
					return -1;
				}
				want(c, &b->up, c->e);
				return c->cursor;
			}
			if (c->first)
				see_call(c, c->cursor);
		}
		return -1;
	}
	if (c->stage == 0) {
		for (; c->cursor < TREE_K; c->cursor++) {
			int child = TREE_K * c->r + 1 + c->cursor;
			dri_seg_rank *b;

			if (child >= c->p)
				break;
			b = blk_of(child);
			if (load(&b->up) < c->e) {
				want(c, &b->up, c->e);
				return missing_below(c, child);
			}
			if (child_differs(c, child)) {
				c->bad = child;
				return -1;
			}
		}
		publish(&blk_of(c->r)->up, c->e);
		if (c->r)
			dri_shm_ring_peer(tree_parent(c->r));
		c->stage = 1;
	}
	if (c->stage == 1) {
		if (c->r) {
			dri_seg_rank *b = blk_of(tree_parent(c->r));

			if (load(&b->down) < c->e) {
				want(c, &b->down, c->e);
				/* The root waits for someone: name that
				 * rank (and watch it) rather than our
				 * parent. */
				return missing_below(c, 0) ? missing_below(c, 0)
							   : tree_parent(c->r);
			}
		}
		publish(&blk_of(c->r)->down, c->e);
		for (int k = 1; k <= TREE_K && TREE_K * c->r + k < c->p; k++)
			dri_shm_ring_peer(TREE_K * c->r + k);
		c->stage = 2;
	}
	return -1;
}

/* Publishes the CPU this rank runs on, if it changed (seg.h: cpu). */
static void note_cpu(const struct call *c)
{
	int k = sched_getcpu();

	k = k < 0 ? 0 : k + 1;
	if (k != S.cpu) {
		S.cpu = k;
		__atomic_store_n(&blk_of(c->r)->cpu, k, __ATOMIC_RELAXED);
	}
}

/* With no more ranks than CPUs, two can still end up queued on one CPU
 * while another idles: a wake-up puts the woken rank on the waker's CPU
 * (the rendezvous' last reply does), and the kernel's balancer leaves a
 * task that ran within the last half millisecond where it is, which a
 * spinning rank always has, for 10 ms and more.  Every phase then costs
 * a switch (measured: a barrier of 2 ranks right after init 6-12 us
 * instead of 0.4, in 4 to 8 of 16 runs).  So a waiting rank looks where
 * the ranks of its call said they run (seg.h: cpu) and, if its CPU has
 * more of them than another it may use, moves to the one with the
 * fewest: it allows itself that CPU alone, which makes the kernel move
 * it at once, then every CPU it had again.  Ranks that share a CPU do
 * not run at once, so the first to wait moves and the others see it
 * gone.  With more ranks than CPUs the same holds for their share:
 * 3 ranks on one of 2 CPUs and 1 on the other cost a switch more each
 * call than 2 and 2, so one of the 3 moves (the spin that does not
 * yield to ranks elsewhere makes the kernel's balancing slower still);
 * there rebalance runs at every wait, and looks at the CPUs it may use
 * every ALLOWED_CALLS calls while that was one.  A rank moves at most
 * once every MOVE_MS.  Flat calls only (up
 * to DRI_SHM_FLAT_MAX ranks). */
#define MOVE_MS 10
#define ALLOWED_CALLS 32

static void rebalance(const struct call *c)
{
	int32_t pub[DRI_SHM_FLAT_MAX];
	int here = 0, best = -1, best_n = DRI_SHM_FLAT_MAX + 1, used = 0;
	cpu_set_t one;
	int64_t now;

	if (c->tree)
		return;
	/* Where we are now: the kernel may have moved us since the call
	 * began (and another rank that looks may take us for still here). */
	note_cpu(c);
	if (S.cpu <= 0)
		return;
	for (int i = 0; i < c->p; i++) {
		pub[i] = i == c->r ? S.cpu
			 : __atomic_load_n(&blk_of(i)->cpu, __ATOMIC_RELAXED);
		here += pub[i] == S.cpu;
	}
	if (here < 2)
		return;
	if (S.nallowed < 2 || !CPU_ISSET(S.cpu - 1, &S.allowed)) {
		/* One CPU allowed when last seen, or not ours: look again
		 * (the set may have changed since: taskset -p, cgroups),
		 * at every call that waits long with a CPU each, every
		 * ALLOWED_CALLS calls where ranks outnumber the CPUs
		 * (there every call looks here). */
		if (S.oversub && S.ncall - S.allowed_n < ALLOWED_CALLS)
			return;
		if (allowed_get() < 2 || !CPU_ISSET(S.cpu - 1, &S.allowed))
			return;
	}
	/* The fewest ranks on another CPU we may use: none if the ranks
	 * use fewer of them than there are (the usual case, with more
	 * CPUs than ranks, costs no walk of the set), else the least
	 * crowded of theirs.  O(p^2) with p <= DRI_SHM_FLAT_MAX. */
	for (int i = 0; i < c->p; i++) {
		int n = 0, seen = 0;

		if (pub[i] <= 0 || !CPU_ISSET(pub[i] - 1, &S.allowed))
			continue;
		for (int j = 0; j < c->p; j++) {
			n += pub[j] == pub[i];
			seen |= j < i && pub[j] == pub[i];
		}
		if (seen)
			continue;
		used++;
		if (pub[i] != S.cpu && n < best_n) {
			best = pub[i] - 1;
			best_n = n;
		}
	}
	if (used < S.nallowed)
		best_n = 0;
	/* Only if that evens them out: here - 1 on ours, best_n + 1 there. */
	if (best_n + 1 >= here)
		return;
	now = dri_now_ms();
	if (S.moved_ms && now - S.moved_ms < MOVE_MS)
		return;
	if (!best_n) {
		best = -1;
		for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
			int taken = 0;

			if (!CPU_ISSET(cpu, &S.allowed))
				continue;
			for (int i = 0; i < c->p && !taken; i++)
				taken = pub[i] == cpu + 1;
			if (!taken) {
				best = cpu;
				break;
			}
		}
	}
	if (best < 0)
		return;
	/* The set may have changed since configure (taskset -p, cgroups):
	 * move only within the one we have now, and give it back. */
	if (!allowed_get() || !CPU_ISSET(best, &S.allowed))
		return;
	CPU_ZERO(&one);
	CPU_SET(best, &one);
	/* Say where we go first: a rank that shares our CPU runs the moment
	 * we leave it, and must not take us for still there and move too. */
	S.cpu = best + 1;
	__atomic_store_n(&blk_of(c->r)->cpu, S.cpu, __ATOMIC_RELAXED);
	if (!sched_setaffinity(0, sizeof(one), &one)) {
		(void)sched_setaffinity(0, sizeof(S.allowed), &S.allowed);
		S.moved_ms = now;
	}
	note_cpu(c);
}

/* With more ranks than CPUs (flat calls): whether a rank that has not
 * reached c->e said it runs on this rank's CPU, or said nothing.  Only
 * then does yielding let it on; otherwise the ranks still to come run
 * elsewhere, and a yield would only hand the CPU to a sibling that has
 * arrived and waits too (measured on 4 ranks on 2 CPUs: 1.65 switches
 * a call a CPU, 0.66 us each, where 1 does).  A CPU published at the
 * call's begin may be stale (the kernel moved the rank since): the
 * spin yields every YIELD_EVERY looks whatever it finds. */
#define YIELD_EVERY 64
static int sibling_due(const struct call *c)
{
	if (c->tree || S.cpu <= 0)
		return 1;
	for (int i = 0; i < c->p; i++) {
		const dri_seg_rank *b;
		int32_t k;

		if (i == c->r)
			continue;
		b = blk_of(i);
		k = __atomic_load_n(&b->cpu, __ATOMIC_RELAXED);
		if ((k == S.cpu || k <= 0) && load(&b->up) < c->e)
			return 1;
	}
	return 0;
}

/* Whether every rank of call c does the same work and waits for all:
 * where ranks outnumber the CPUs, only such calls even them out
 * (rebalance).  A rooted call's ranks do not begin together (the CPUs
 * they published are of other moments), and its root works more. */
static int symmetric(const struct call *c)
{
	switch (c->op->id.coll) {
	case DRI_BARRIER:
	case DRI_ALL_REDUCE:
	case DRI_ALL_GATHER:
	case DRI_REDUCE_SCATTER:
	case DRI_ALL_TO_ALL:
	case DRI_ALL_TO_ALL_V:
		return 1;
	default:
		return 0;
	}
}

/* Spins on the flags without the transport's lock, for S.spin_us at
 * most; 1 once the phase is passed, 0 to wait in the transport
 * (something for it to look at: a ring, the launcher's abort). */
static int spin_wait(struct call *c)
{
	int64_t end = 0;

	for (unsigned k = 0;; k++) {
		if (waiting_for(c) < 0)
			return 1;
		if (dri_shm_pending() || !S.spin_us)
			return 0;
		if (k % 16 == 15) {
			int64_t t = dri_now_ns() / 1000;

			if (!end)
				end = t + S.spin_us;
			else if (t >= end)
				return 0;
		}
		/* Yield now and then even with a core each: on a busy
		 * machine the rank we wait for may share ours. */
		if (S.oversub) {
			/* Every 8th wait: moves are rare (MOVE_MS apart),
			 * and this is on every call's path. */
			if (k == 0 && symmetric(c) && !(S.waits++ % 8))
				rebalance(c);
			if (k % YIELD_EVERY == YIELD_EVERY - 1 || sibling_due(c))
				sched_yield();
			else
				cpu_relax();
		} else if (k % 16 == 15) {
			if (k == 15)
				rebalance(c);
			sched_yield();
		} else {
			cpu_relax();
		}
	}
}

/* DR_EMISMATCH naming ranks a and b (a < b) and their calls rec; the
 * group is aborted.  If a message shows the difference, transport.c
 * names it. */
static dr_err mismatch(const struct call *c, const struct rec *rec, int a,
		       int b)
{
	dri_msg_id ia, ib;
	char da[256], db[256], msg[640];
	dr_err err;

	if ((err = dri_transport_stale_check(&c->op->id)))
		return err;
	rec_call(c, rec, a, 0, &ia);
	rec_call(c, rec, b, 0, &ib);
	dri_msg_id_describe(&ia, da, sizeof(da));
	dri_msg_id_describe(&ib, db, sizeof(db));
	snprintf(msg, sizeof(msg), "rank %d called %s but rank %d called %s "
		 "(seq %llu)", a, ia.coll ? da : "another call", b,
		 ib.coll ? db : "another call",
		 (unsigned long long)rec->id.seq);
	dri_transport_abort(DR_EMISMATCH, msg);
	return dri_fail(DR_EMISMATCH, "%s", msg);
}

/* Every rank's record of call rec against rank 0's (flat; every rank
 * has arrived at its last phase). */
static dr_err check_all(const struct call *c, const struct rec *rec)
{
	dri_msg_id zero, other;

	rec_call(c, rec, 0, 1, &zero);
	for (int i = 1; i < c->p; i++) {
		rec_call(c, rec, i, 1, &other);
		if (!zero.coll || !same_call(&zero, &other))
			return mismatch(c, rec, 0, i);
	}
	return DR_OK;
}

/* Whether every other rank's record of this call, read when its up
 * reached the call's first phase (see_call), is our call: then every
 * rank made the same call, and check_all has nothing to find (it looks
 * again, and names who differs, only when this says no). */
static int same_as_seen(const struct call *c)
{
	for (int i = 0; i < c->p; i++)
		if (i != c->r && (S.seen[i].n1 != c->rec.n + 1 ||
				  !same_call(&S.seen[i].id, &c->rec.id)))
			return 0;
	return 1;
}

/* Past call o is checked (or about to be): no longer open. */
static void close_past(struct rec *o)
{
	o->open = 0;
	S.open &= ~(1u << (o->n % LAG));
}

/* Publishes call id of first phase e in rec: seq 0 while the fields
 * change (a reader takes it for none).  Release stores only: the store
 * to up that follows (seq_cst) orders them for the waiters. */
static void write_rec(dri_seg_call *rec, const dri_msg_id *id, uint64_t e,
		      unsigned char *data, const void *src, size_t n)
{
	__atomic_store_n(&rec->seq, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	if (n)
		memcpy(data, src, n);
	__atomic_store_n(&rec->coll, (int32_t)id->coll, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->count, id->count, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->dtype, id->dtype, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->op, id->op, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->root, id->root, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->phase, e, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->seq, id->seq + 1, __ATOMIC_RELEASE);
}

/* The next phase; at the call's first, its record (seg.h), which the
 * peers read once up shows the phase. */
static void begin(struct call *c)
{
	note_cpu(c);
	c->e = ++S.phase;
	c->rec.last = c->e;
	if (c->first) {
		const dri_msg_id *id = &c->op->id;
		dri_seg_rec *rec =
			&blk_of(c->r)->call[c->rec.n % DRI_SEG_CALLS];

		c->rec.first = c->e;
		write_rec(&rec->c, id, c->e, rec->data, c->inl_src, c->inl_len);
		/* and its copy on up's line (seg.h) */
		write_rec(&blk_of(c->r)->last, id, c->e, NULL, NULL, 0);
	}
}

/* Arrives at c->e (flat) and wakes whoever may wait for it. */
static void arrive(struct call *c)
{
	publish(&blk_of(c->r)->up, c->e);
	for (int i = 0; i < c->p; i++)
		dri_shm_ring_peer(i);
}

/* Waits until waiting_for says the phase c->e is passed (for c->from,
 * flat), spinning first. */
static dr_err await(struct call *c)
{
	dr_err err = DR_OK;

	c->cursor = c->stage = 0;
	c->bad = -1;
	c->armed = 0;
	if (spin_wait(c))
		return DR_OK;
	c->armed = 1;
	err = dri_transport_flag_wait(&c->op->id, waiting_for, c, c->t0,
				      S.spin_us > 0);
	c->armed = 0;
	dri_shm_want(NULL, 0);
	return err;
}

/* Waits until every other rank's up has reached v (flat).  What it
 * finds is kept: after rooted calls the others are often well past v,
 * and then the next calls need not look (a look is a transfer of a line
 * the other keeps writing). */
static dr_err await_all(struct call *c, uint64_t v)
{
	uint64_t e = c->e, low = UINT64_MAX;
	int first = c->first;
	dr_err err;

	if (v <= S.safe)
		return DR_OK;
	for (int i = 0; i < c->p; i++)
		if (i != c->r) {
			uint64_t u = load(&blk_of(i)->up);

			low = u < low ? u : low;
		}
	if (low >= v) {
		S.safe = low;
		return DR_OK;
	}
	c->e = v;
	c->from = -1;
	c->first = 0;
	err = await(c);
	c->e = e;
	c->first = first;
	if (!err)
		S.safe = v;
	return err;
}

/* The current use's slot may be written again once every other rank's
 * up reaches need. */
static void used(const struct call *c, uint64_t need)
{
	if (c->sub >= 0)
		S.need_sub[c->sub] = need;
	else if (c->half >= 0)
		S.need[c->half] = need;
}

/* One phase: arrive (this rank's writes for it are done), wait until
 * every rank has.  The current half may be written again once every
 * rank arrives at a later phase (it reads before that). */
static dr_err phase(struct call *c)
{
	dr_err err;

	begin(c);
	if (!c->tree)
		arrive(c);
	c->from = -1;
	if ((err = await(c)))
		return err;
	if (c->bad >= 0)
		return mismatch(c, &c->rec, c->r < c->bad ? c->r : c->bad,
				c->r < c->bad ? c->bad : c->r);
	if (c->first && !c->tree) {
		/* Every rank is past the rooted calls before this one too:
		 * check them now rather than LAG calls later (oldest first). */
		for (int k = LAG; k >= 1 && S.open; k--) {
			struct rec *o = &S.past[(c->rec.n + LAG - k) % LAG];

			if (o->open && o->n < c->rec.n) {
				close_past(o);
				if ((err = check_all(c, o)))
					return err;
			}
		}
		if (!same_as_seen(c) && (err = check_all(c, &c->rec)))
			return err;
	}
	c->first = 0;
	if (c->e > S.safe)
		S.safe = c->e;
	if (c->half >= 0)
		used(c, c->e + 1);
	return DR_OK;
}

/* Rooted calls (flat): a rank that only writes (a broadcast's root, a
 * reduce's others) arrives and goes on; one that reads waits for the
 * writers only, reads, then arrives (take, then post).  Nobody waits
 * for the readers here: the next write of the half (two uses later)
 * waits until they are done with it (next_half), and LAG calls later
 * every rank checks that every rank made the same call (settle). */
static void post(struct call *c)
{
	begin(c);
	arrive(c);
	c->first = 0;
	c->rec.open = 1;
	used(c, c->e);
}

/* Waits until rank from (-1: every other) has arrived at the next
 * phase; the caller then reads and posts (done). */
static dr_err take(struct call *c, int from)
{
	dr_err err;

	begin(c);
	c->from = from;
	c->taking = from < 0;
	err = await(c);
	c->from = -1;
	c->taking = 0;
	if (err)
		return err;
	if (c->bad >= 0)
		from = c->bad;
	/* (c->inl: waiting_for compared the records) */
	if (c->bad >= 0 ||
	    (c->first && from >= 0 && !c->inl && call_differs(c, from)))
		return mismatch(c, &c->rec, c->r < from ? c->r : from,
				c->r < from ? from : c->r);
	if (c->first && from < 0 && (err = check_all(c, &c->rec)))
		return err;
	c->first = 0;
	/* A reader of one rank has not seen the others' calls. */
	c->rec.open |= from >= 0;
	used(c, c->e);
	return DR_OK;
}

static void done(struct call *c)
{
	arrive(c);
}

/* Call rec.n - LAG, if it was rooted: wait until every rank is past it
 * and check every rank's record of it against rank 0's. */
static dr_err settle(struct call *c)
{
	struct rec *o = &S.past[c->rec.n % LAG];
	dr_err err;

	if (!o->open)
		return DR_OK;
	close_past(o);
	if ((err = await_all(c, o->last)))
		return err;
	return check_all(c, o);
}

/* Whether one of the last LAG calls is still to be checked. */
static int any_open(void)
{
	return S.open != 0;
}

/* The half of the slots for the next use (every rank takes the same);
 * writes: this rank will write its own, so the readers of its last use
 * must be done with it. */
static dr_err next_half(struct call *c, int writes, int *h)
{
	*h = c->half = (int)(S.use++ & 1);
	c->sub = -1;
	if (!writes || c->tree)
		return DR_OK;
	return await_all(c, S.need[*h]);
}

/* The next small slot, for a rooted call of at most S.sub_bytes bytes
 * (flat); cur_slot gives it. */
static dr_err next_sub(struct call *c, int writes)
{
	int j = (int)(S.sub++ % NSUB);

	c->sub = j;
	c->half = j & 1;
	return writes ? await_all(c, S.need_sub[j]) : DR_OK;
}

static char *slot(int r, int h)
{
	return dri_shm_slot(r, h);
}

/* Rank r's slot of the current use: its half, or its small slot. */
static char *cur_slot(const struct call *c, int r)
{
	char *p = dri_shm_slot(r, c->half);

	return c->sub < 0 ? p : p + S.sub_off + (size_t)(c->sub >> 1) * S.sub_bytes;
}

/* The data in rank r's record of the current call (c->inl), there until
 * the call is settled (seg.h: call). */
static char *inl_data(const struct call *c, int r)
{
	return (char *)blk_of(r)->call[c->rec.n % DRI_SEG_CALLS].data;
}

/* Whether out[0 .. bytes) overlaps one of the p inputs S.in. */
static int out_is_input(const struct call *c, const char *out, size_t bytes)
{
	for (int i = 0; i < c->p; i++)
		if ((uintptr_t)out < (uintptr_t)S.in[i] + bytes &&
		    (uintptr_t)S.in[i] < (uintptr_t)out + bytes)
			return 1;
	return 0;
}

/* out[0 .. n) = in[0] op in[1] op ... op in[p - 1] (S.in), in rank order,
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
	dr_err err = DR_OK;

	if (out == S.in[0] && !out2) {
		/* in place: the result starts as the first input */
		for (size_t a = 0; a < n && !err; a += step) {
			size_t k = n - a < step ? n - a : step;

			for (int i = 1; i < c->p && !err; i++)
				err = dri_reduce(out + a * es, S.in[i] + a * es, k,
						 dt, c->op->redop);
			dri_reduce_finish(out + a * es, k, dt, c->op->redop, c->p);
		}
		return err;
	}
	if (c->p >= 2 && !out_is_input(c, out, n * es)) {
		for (size_t a = 0; a < n && !err; a += step) {
			size_t k = n - a < step ? n - a : step;

			err = dri_reduce3(out + a * es, S.in[0] + a * es,
					  S.in[1] + a * es, k, dt, c->op->redop);
			for (int i = 2; i < c->p && !err; i++)
				err = dri_reduce(out + a * es, S.in[i] + a * es, k,
						 dt, c->op->redop);
			dri_reduce_finish(out + a * es, k, dt, c->op->redop, c->p);
			if (out2)
				dri_copy(out2 + a * es, out + a * es, k * es);
		}
		return err;
	}
	if (!(acc = dri_scratch_keep(ACC_BYTES)))
		return DR_ENOMEM;
	for (size_t a = 0; a < n && !err; a += step) {
		size_t k = n - a < step ? n - a : step;

		dri_copy(acc, S.in[0] + a * es, k * es);
		for (int i = 1; i < c->p && !err; i++)
			err = dri_reduce(acc, S.in[i] + a * es, k, dt, c->op->redop);
		dri_reduce_finish(acc, k, dt, c->op->redop, c->p);
		dri_copy(out + a * es, acc, k * es);
		if (out2)
			dri_copy(out2 + a * es, acc, k * es);
	}
	return err;
}

/* ------------------------------------------------------ single copy */

/* The address rank i published (seg.h: xaddr or probe_addr). */
static uint64_t peer_addr(int i, int probe)
{
	dri_seg_rank *b = blk_of(i);

	return __atomic_load_n(probe ? &b->probe_addr : &b->xaddr,
			       __ATOMIC_RELAXED);
}

/* n bytes at src in rank peer's memory into dst; 0, or the errno. */
static int cma_copy(int peer, void *dst, uint64_t src, size_t n)
{
	pid_t pid = __atomic_load_n(&blk_of(peer)->pid, __ATOMIC_ACQUIRE);

	for (size_t o = 0; o < n;) {
		size_t k = n - o < DIRECT_PIECE ? n - o : DIRECT_PIECE;
		struct iovec l = { (char *)dst + o, k };
		struct iovec r = { (void *)(uintptr_t)(src + o), k };
		ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? errno : EIO;
		o += (size_t)got;
		if (o < n && dri_transport_check())
			return ECANCELED;
	}
	return 0;
}

/* cma_copy of rank peer's published buffer at offset off, as an error
 * of call c: the job's (an abort a peer sent before it left, which the
 * rings may hold still; a death) if it has one, else the failed read. */
static dr_err cma_read(const struct call *c, int peer, void *dst, size_t off,
		       size_t n)
{
	int e = cma_copy(peer, dst, peer_addr(peer, 0) + off, n);
	dr_err err;

	if (!e)
		return DR_OK;
	if ((err = dri_transport_stale_check(&c->op->id)))
		return err;
	return dri_fail(DR_EPEER, "reading rank %d's buffer (process_vm_readv): "
			"%s", peer, strerror(e));
}

/* The single copy's reads: n bytes at offset off of every other rank's
 * published buffer into out + i * n (from < 0), or of rank from's alone
 * into out; each reader starts after itself, so that not every rank
 * reads rank 0 first. */
static dr_err direct_reads(const struct call *c, int from, char *out,
			   size_t off, size_t n)
{
	dr_err err = DR_OK;

	for (int k = 1; !err && k < c->p; k++) {
		int i = (c->r + k) % c->p;

		if (from < 0)
			err = cma_read(c, i, out + (size_t)i * n, off, n);
		else if (i == from)
			err = cma_read(c, i, out, off, n);
	}
	return err;
}

/* Word j of what rank i's probe buffer holds at phase e: the readers
 * know it, so a read that reaches another process (another pid
 * namespace) or other memory is found out. */
static uint64_t probe_word(int i, uint64_t e, size_t j)
{
	uint64_t x = ((uint64_t)i << 48 ^ e << 24 ^ j) * 0x9e3779b97f4a7c15ull;

	return x ^ x >> 29;
}

/* Whether the n bytes at p are rank i's probe pattern of phase e. */
static int probe_good(const char *p, int i, uint64_t e, size_t n)
{
	for (size_t j = 0; j < n / 8; j++) {
		uint64_t w;

		memcpy(&w, p + 8 * j, 8);
		if (w != probe_word(i, e, j))
			return 0;
	}
	return 1;
}

/* Before the first call that could go the single-copy way (after its
 * first phase e, which published every rank's probe buffer, buf here):
 * each rank times the two copies of the slots' way (its pattern into
 * its slot; one phase; each other's out of theirs) against reading each
 * other's probe buffer with process_vm_readv, and checks what it read
 * (a pid of another namespace reads another process, or nothing).  It
 * publishes what it found; one phase; calls go the single-copy way if
 * every rank read every other right: from DIRECT_MIN if one copy was
 * the faster for at least half of them (a rank the scheduler took off
 * its CPU mid-way does not decide alone) or DISTRUN_SHM_DIRECT=on, else
 * from DIRECT_SURE.  Every rank takes the same decision (S.direct). */
static dr_err probe_direct(struct call *c, uint64_t *buf, size_t n, uint64_t e)
{
	dri_seg_rank *me = blk_of(c->r);
	char *tmp = dri_scratch_get(n);
	int64_t t0 = dri_now_ns(), in_ns, two = 0, one = 0;
	int works = tmp && buf, faster = 0;
	dr_err err;

	/* After phase e every rank is done with every slot (S.safe). */
	if (buf)
		dri_copy(slot(c->r, 0), buf, n);
	in_ns = dri_now_ns() - t0;
	if ((err = phase(c)))
		goto out;
	for (int k = 1; works && k < c->p; k++) {
		int i = (c->r + k) % c->p;

		t0 = dri_now_ns();
		dri_copy(tmp, slot(i, 0), n);
		two += in_ns + dri_now_ns() - t0;
		works = probe_good(tmp, i, e, n);
		t0 = dri_now_ns();
		works = works && !cma_copy(i, tmp, peer_addr(i, 1), n);
		one += dri_now_ns() - t0;
		works = works && probe_good(tmp, i, e, n);
	}
	faster = one < two;
	__atomic_store_n(&me->probe_verdict, (uint64_t)(works | faster << 1 |
			 dri_shm_oversubscribed() << 2), __ATOMIC_RELAXED);
	if ((err = phase(c)))
		goto out;
	works = 1;
	faster = S.crowded = 0;
	for (int i = 0; i < c->p; i++) {
		uint64_t v = __atomic_load_n(&blk_of(i)->probe_verdict,
					     __ATOMIC_RELAXED);

		works &= (int)(v & 1);
		faster += (int)(v >> 1 & 1);
		S.crowded |= (int)(v >> 2 & 1);
	}
	S.direct = !works ? -1
		   : S.direct_mode == DRI_SHM_DIRECT_ON || 2 * faster >= c->p
		   ? 1 : 2;
out:
	dri_scratch_put(tmp);
	free(buf);
	return err;
}

/* Whether pieces of `piece` bytes go the single-copy way, as the probe
 * found (S.direct: 1 from DIRECT_MIN, 2 from DIRECT_SURE). */
static int direct_for(size_t piece)
{
	return S.direct == 1 ? piece >= DIRECT_MIN
			     : S.direct == 2 && piece >= DIRECT_SURE;
}

/* For a call whose readers read pieces of `piece` bytes of the others'
 * memory (0: none that could go this way): says whether it goes the
 * single-copy way (*direct); with more ranks than CPUs on some rank
 * (S.crowded), only pieces of at least crowded_min bytes do.  If it
 * may, this rank publishes addr (the buffer its readers read) and meets
 * the others once (the call's first phase: its check), after the probe
 * if none has been made.  The call then reads (cma_read) and meets them
 * once more before it returns, so that nobody's buffer is read after
 * its call returned.  Otherwise it goes through the slots.  Every
 * condition here is the same on every rank: the call's arguments, and
 * what the probe agreed. */
static dr_err direct_start(struct call *c, size_t piece, size_t crowded_min,
			   const void *addr, int *direct)
{
	dri_seg_rank *me = blk_of(c->r);
	size_t n = S.chunk < PROBE_BYTES ? S.chunk : PROBE_BYTES;
	uint64_t *buf = NULL;
	dr_err err;

	*direct = 0;
	if (c->tree || piece < DIRECT_MIN || S.direct < 0 ||
	    (S.direct > 1 && piece < DIRECT_SURE) ||
	    (S.direct > 0 && S.crowded && piece < crowded_min))
		return DR_OK;
	__atomic_store_n(&me->xaddr, (uint64_t)(uintptr_t)addr, __ATOMIC_RELAXED);
	if (!S.direct) {
		/* The probe buffer: a pattern the readers can check. */
		if ((buf = malloc(n)))
			for (size_t j = 0; j < n / 8; j++)
				buf[j] = probe_word(c->r, S.phase + 1, j);
		__atomic_store_n(&me->probe_addr, (uint64_t)(uintptr_t)buf,
				 __ATOMIC_RELAXED);
	}
	if ((err = phase(c))) {
		free(buf);
		return err;
	}
	if (!S.direct && (err = probe_direct(c, buf, n, c->e)))
		return err;
	*direct = direct_for(piece) && (!S.crowded || piece >= crowded_min);
	return DR_OK;
}

/* ------------------------------------------------------- algorithms */

static dr_err barrier_shm(struct call *c)
{
	return phase(c);
}

/* Small all_reduce and reduce: every buffer in a slot, one phase, every
 * rank (reduce: the root) reduces them all in rank order. */
static dr_err reduce_small(struct call *c, int all)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype);
	int h;
	dr_err err;

	if ((err = next_half(c, 1, &h)))
		return err;
	dri_copy(slot(c->r, h), op->buf, n);
	if ((err = phase(c)))
		return err;
	if (!all && c->r != op->root)
		return DR_OK;
	for (int i = 0; i < c->p; i++)
		S.in[i] = i == c->r ? op->buf : slot(i, h);
	return reduce_ordered(c, op->buf, NULL, op->count);
}

/* Large all_reduce (all) and reduce (to op->root): chunks of a half,
 * reduce-scattered then gathered through the slots. */
static dr_err reduce_large(struct call *c, int all)
{
	const dri_op *op = c->op;
	size_t es = dr_dtype_size(op->dtype), chunk = S.chunk / es;
	char *buf = op->buf;
	int p = c->p, r = c->r, root = all ? -1 : op->root;
	dr_err err = DR_OK;

	for (size_t c0 = 0; c0 < op->count && !err; c0 += chunk) {
		size_t len = op->count - c0 < chunk ? op->count - c0 : chunk;
		size_t mo = dri_block_off(len, p, r), mn = dri_block_off(len, p, r + 1) - mo;
		char *base = buf + c0 * es;
		int h;

		if ((err = next_half(c, 1, &h)))
			break;
		for (int i = 0; i < p; i++) {
			size_t o = dri_block_off(len, p, i);
			size_t m = dri_block_off(len, p, i + 1) - o;

			if (i != r)
				dri_copy(slot(r, h) + o * es, base + o * es,
					 m * es);
		}
		if ((err = phase(c)))
			break;
		for (int i = 0; i < p; i++)
			S.in[i] = (i == r ? base : slot(i, h)) + mo * es;
		/* Our piece of the result: into our slot for the others, and
		 * into our buffer if the result is ours to keep. */
		if (r == root)
			err = reduce_ordered(c, base + mo * es, NULL, mn);
		else
			err = reduce_ordered(c, slot(r, h) + mo * es,
					     all ? base + mo * es : NULL, mn);
		if (err || (err = phase(c)))
			break;
		if (!all && r != root)
			continue;
		for (int i = 0; i < p; i++) {
			size_t o = dri_block_off(len, p, i);
			size_t m = dri_block_off(len, p, i + 1) - o;

			if (i != r)
				dri_copy(base + o * es, slot(i, h) + o * es,
					 m * es);
		}
	}
	return err;
}

/* all_reduce of at most 8 bytes, flat: each rank's data on its up
 * word's line (seg.h: tiny), which a peer that sees it arrive has
 * already; by the parity of the phase, so that it is written again two
 * phases later, once every rank has arrived at the one between (done
 * reading it: after a rooted call, await_all makes sure). */
static dr_err all_reduce_tiny(struct call *c)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype);
	dr_err err;

	if ((err = await_all(c, S.phase)))
		return err;
	memcpy(&blk_of(c->r)->tiny[(S.phase + 1) & 1], op->buf, n);
	if ((err = phase(c)))
		return err;
	for (int i = 0; i < c->p; i++)
		S.in[i] = i == c->r ? op->buf
				    : (const char *)&blk_of(i)->tiny[c->e & 1];
	return reduce_ordered(c, op->buf, NULL, op->count);
}

static dr_err all_reduce_shm(struct call *c)
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
	else if (n <= S.sub_bytes)
		err = next_sub(c, c->r != root);
	else
		err = next_half(c, c->r != root, &h);
	if (err)
		return err;
	if (c->r != root) {
		if (c->inl) {
			c->inl_src = op->buf;
			c->inl_len = n;
		} else {
			dri_copy(cur_slot(c, c->r), op->buf, n);
		}
		post(c);
		return DR_OK;
	}
	if ((err = take(c, -1)))
		return err;
	for (int i = 0; i < c->p; i++)
		S.in[i] = i == root ? op->buf
		        : c->inl ? inl_data(c, i) : cur_slot(c, i);
	if (!(err = reduce_ordered(c, op->buf, NULL, op->count)))
		done(c);
	return err;
}

static dr_err reduce_shm(struct call *c)
{
	size_t n = c->op->count * dr_dtype_size(c->op->dtype);

	if (!c->tree && S.sub_bytes && n <= ROOTED_BYTES &&
	    n * (size_t)c->p <= ROOTED_TOTAL)
		return reduce_rooted(c);
	if (n <= SMALL_BYTES && n * (size_t)c->p <= SMALL_TOTAL)
		return reduce_small(c, 0);
	return reduce_large(c, 0);
}

/* broadcast: the root copies a chunk into a half and goes on (flat:
 * rooted; in a tree, one phase per chunk), the others copy it out. */
static dr_err broadcast_shm(struct call *c)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype), chunk = S.chunk;
	char *buf = op->buf;
	int root = op->root, me = c->r == root, direct;
	dr_err err = DR_OK;

	if (!c->tree && n <= DRI_SEG_INLINE) {
		/* tiny: in the root's record of the call */
		c->inl = 1;
		if (me) {
			c->inl_src = buf;
			c->inl_len = n;
			post(c);
		} else if (!(err = take(c, root))) {
			memcpy(buf, inl_data(c, root), n);
			done(c);
		}
		return err;
	}
	if (!c->tree && n <= S.sub_bytes) {
		/* small: through a small slot, LAG calls in flight */
		if ((err = next_sub(c, me)))
			return err;
		if (me) {
			dri_copy(cur_slot(c, root), buf, n);
			post(c);
		} else if (!(err = take(c, root))) {
			dri_copy(buf, cur_slot(c, root), n);
			done(c);
		}
		return err;
	}
	if ((err = direct_start(c, n * (size_t)(c->p - 1) <= ROOTED_DIRECT_MAX ? n : 0,
				BCAST_CROWDED_MIN, buf, &direct)) || direct) {
		if (!err && !me)
			err = direct_reads(c, root, buf, 0, n);
		return err ? err : phase(c);
	}
	for (size_t a = 0; a < n && !err; a += chunk) {
		size_t k = n - a < chunk ? n - a : chunk;
		int h;

		if ((err = next_half(c, me, &h)))
			break;
		if (me)
			dri_copy(slot(c->r, h), buf + a, k);
		if (c->tree) {
			if (!(err = phase(c)) && !me)
				dri_copy(buf + a, slot(root, h), k);
		} else if (me) {
			post(c);
		} else if (!(err = take(c, root))) {
			dri_copy(buf + a, slot(root, h), k);
			done(c);
		}
	}
	return err;
}

/* all_gather (root < 0) and gather: each rank's block in chunks of a
 * half; every rank (gather: the root) copies the others' out. */
static dr_err gather_shm(struct call *c, int root)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype), chunk = S.chunk;
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	int reads = root < 0 || c->r == root;
	/* gather, flat: the others write and go on, the root reads */
	int rooted = root >= 0 && !c->tree;
	int writes = !rooted || c->r != root;
	int sub = rooted && n <= S.sub_bytes; /* then one chunk */
	int direct;
	dr_err err = DR_OK;

	if (reads && in != out + (size_t)c->r * n &&
	    (uintptr_t)in < (uintptr_t)out + n * (size_t)c->p &&
	    (uintptr_t)out < (uintptr_t)in + n) {
		/* sendbuf inside recvbuf, elsewhere than our block */
		if (!(own = dri_scratch_get(n)))
			return DR_ENOMEM; /* dri_submit aborts the group */
		dri_copy(own, in, n);
		in = own;
	}
	if ((err = direct_start(c, root < 0 || (n >= GATHER_DIRECT_MIN &&
				n * (size_t)(c->p - 1) <= ROOTED_DIRECT_MAX) ? n : 0,
				0, in, &direct)) || direct) {
		if (!err && reads)
			err = direct_reads(c, -1, out, 0, n);
		if (!err && reads && in != out + (size_t)c->r * n)
			dri_copy(out + (size_t)c->r * n, in, n);
		dri_scratch_put(own);
		return err ? err : phase(c);
	}
	for (size_t a = 0; a < n && !err; a += chunk) {
		size_t k = n - a < chunk ? n - a : chunk;
		int h;

		if ((err = sub ? next_sub(c, writes) : next_half(c, writes, &h)))
			break;
		if (writes)
			dri_copy(cur_slot(c, c->r), in + a, k);
		if (!rooted) {
			if ((err = phase(c)) || !reads)
				continue;
		} else if (writes) {
			post(c);
			continue;
		} else if ((err = take(c, -1))) {
			break;
		}
		for (int i = 0; i < c->p; i++)
			if (i != c->r)
				dri_copy(out + (size_t)i * n + a,
					 cur_slot(c, i), k);
		if (rooted)
			done(c);
	}
	if (!err && reads && in != out + (size_t)c->r * n)
		dri_copy(out + (size_t)c->r * n, in, n);
	dri_scratch_put(own);
	return err;
}

/* reduce_scatter: per chunk of the blocks, each rank copies the others'
 * blocks into its slot, one phase, each reduces its own block of all in
 * rank order. */
static dr_err reduce_scatter_shm(struct call *c)
{
	const dri_op *op = c->op;
	size_t es = dr_dtype_size(op->dtype), cnt = op->count;
	size_t chunk = S.chunk / es / (size_t)c->p;
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

		if ((err = next_half(c, 1, &h)))
			break;
		for (int i = 0; i < c->p; i++)
			if (i != c->r)
				dri_copy(slot(c->r, h) + (size_t)i * k * es,
					 in + ((size_t)i * cnt + a) * es,
					 k * es);
		if ((err = phase(c)))
			break;
		for (int i = 0; i < c->p; i++)
			S.in[i] = i == c->r ? in + ((size_t)i * cnt + a) * es
					    : slot(i, h) + (size_t)c->r * k * es;
		err = reduce_ordered(c, out + a * es, NULL, k);
	}
	if (!err && own)
		dri_copy(op->buf, own, cnt * es);
	dri_scratch_put(own);
	return err;
}

/* scatter (all == 0: the root's sendbuf) and all_to_all (every rank's):
 * piece j of a sender's sendbuf goes to rank j, in chunks of a half cut
 * in p. */
static dr_err spread_shm(struct call *c, int all)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype);
	size_t chunk = S.chunk / (size_t)c->p;
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	int root = all ? -1 : op->root;
	size_t span = all ? n * (size_t)c->p : n;
	/* scatter, flat: the root writes and goes on, the others read */
	int rooted = !all && !c->tree, writes = all || c->r == root;
	int sub = rooted && n * (size_t)c->p <= S.sub_bytes; /* one chunk */
	int direct;
	dr_err err = DR_OK;

	if ((all || c->r == root) &&
	    (uintptr_t)in < (uintptr_t)out + span &&
	    (uintptr_t)out < (uintptr_t)in + n * (size_t)c->p) {
		/* sendbuf and recvbuf overlap: send from a copy */
		if (!(own = dri_scratch_get(n * (size_t)c->p)))
			return DR_ENOMEM; /* dri_submit aborts the group */
		dri_copy(own, in, n * (size_t)c->p);
		in = own;
	}
	if ((err = direct_start(c, n, 0, in, &direct)) || direct) {
		if (!err && (all || c->r != root))
			err = direct_reads(c, all ? -1 : root, out,
					   (size_t)c->r * n, n);
		if (!err && (all || c->r == root))
			memmove(out + (all ? (size_t)c->r * n : 0),
				in + (size_t)c->r * n, n);
		dri_scratch_put(own);
		return err ? err : phase(c);
	}
	for (size_t a = 0; a < n && !err; a += chunk) {
		size_t k = n - a < chunk ? n - a : chunk;
		int h;

		if ((err = sub ? next_sub(c, writes) : next_half(c, writes, &h)))
			break;
		if (writes)
			for (int j = 0; j < c->p; j++)
				if (j != c->r)
					dri_copy(cur_slot(c, c->r) +
						 (size_t)j * k,
						 in + (size_t)j * n + a, k);
		if (!rooted) {
			if ((err = phase(c)))
				break;
		} else if (writes) {
			post(c);
			continue;
		} else if ((err = take(c, root))) {
			break;
		}
		for (int i = 0; i < c->p; i++)
			if (i != c->r && (all || i == root))
				dri_copy(out + (all ? (size_t)i * n : 0) + a,
					 cur_slot(c, i) + (size_t)c->r * k, k);
		if (rooted)
			done(c);
	}
	if (!err && (all || c->r == root))
		memmove(out + (all ? (size_t)c->r * n : 0),
			in + (size_t)c->r * n, n);
	dri_scratch_put(own);
	return err;
}

/* Rank i's count of what it sends to (send: 1) or receives from rank j
 * in the current all_to_all_v, as it published it (seg.h). */
static uint64_t a2av_count(int i, int send, int j)
{
	return __atomic_load_n(&blk_of(i)->a2av_counts[S.a2av & 1]
			       [(send ? 0 : DRI_SEG_A2AV_MAX) + j],
			       __ATOMIC_RELAXED);
}

/* After an all_to_all_v's first phase: every rank's send counts against
 * their receivers' receive counts, in the same order on every rank, so
 * that every rank names the same first pair (sender, receiver), as a
 * receiver of messages would: DR_EMISMATCH, the group aborted. */
static dr_err a2av_check(const struct call *c)
{
	for (int j = 0; j < c->p; j++)
		for (int i = 0; i < c->p; i++) {
			uint64_t sent = a2av_count(i, 1, j);
			uint64_t want = a2av_count(j, 0, i);
			dri_msg_id a = c->op->id, b = c->op->id;
			char why[768];
			dr_err err;

			if (sent == want)
				continue;
			if ((err = dri_transport_stale_check(&c->op->id)))
				return err;
			a.count = sent;
			b.count = want;
			dri_msg_mismatch(&b, 0, &a, 0, i, j, why, sizeof(why));
			dri_transport_abort(DR_EMISMATCH, why);
			return dri_fail(DR_EMISMATCH, "%s", why);
		}
	return DR_OK;
}

/* all_to_all_v (p <= DRI_SEG_A2AV_MAX): every rank publishes its send
 * and receive counts (and, for the single copy, its sendbuf); one phase
 * (the call's check, and a2av_check's).  Then every rank knows every
 * piece and takes the same way: the single copy if one piece has
 * DIRECT_MIN bytes or more and the probe allows it (each reads its
 * pieces with process_vm_readv, one phase); else through the slots, in
 * rounds as many as the largest piece needs: in each, a sender copies
 * the next part of its piece for rank j into the j-th p-th of its slot,
 * one phase, each receiver copies its parts out. */
static dr_err a2av_shm(struct call *c)
{
	const dri_op *op = c->op;
	int p = c->p, r = c->r, direct, pre, h0 = 0;
	size_t es = dr_dtype_size(op->dtype), lim = SIZE_MAX / es;
	/* a sender's part for each rank in a round (S.chunk >= 4096) */
	size_t q = S.chunk / (size_t)p / 64 * 64, rounds = 0;
	const size_t *sc = op->counts, *rc = op->counts + p;
	size_t stot = 0, rtot = 0, big = 0;
	/* per rank: where its piece starts in our sendbuf and recvbuf, and
	 * where our piece starts in its sendbuf */
	size_t soff[DRI_SEG_A2AV_MAX], roff[DRI_SEG_A2AV_MAX];
	size_t src[DRI_SEG_A2AV_MAX];
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	uint64_t *pub = blk_of(r)->a2av_counts[++S.a2av & 1];
	dr_err err = DR_OK;

	for (int i = 0; i < p; i++) {
		soff[i] = stot;
		roff[i] = rtot;
		stot += sc[i];
		rtot += rc[i];
		__atomic_store_n(&pub[i], (uint64_t)sc[i], __ATOMIC_RELAXED);
		__atomic_store_n(&pub[DRI_SEG_A2AV_MAX + i], (uint64_t)rc[i],
				 __ATOMIC_RELAXED);
	}
	if ((uintptr_t)in < (uintptr_t)out + rtot * es &&
	    (uintptr_t)out < (uintptr_t)in + stot * es) {
		/* sendbuf and recvbuf overlap: send from a copy */
		if (!(own = dri_scratch_get(stot * es)))
			return DR_ENOMEM; /* dri_submit aborts the group */
		dri_copy(own, in, stot * es);
		in = own;
	}
	/* Our pieces into a half now, if they could all go in one round:
	 * if every rank's can, the first phase is the only one (every rank
	 * takes the half alike; not while the probe, which writes a slot,
	 * is still to come). */
	if ((pre = S.direct != 0)) {
		size_t most = 0;

		for (int j = 0; j < p; j++)
			most = j != r && sc[j] * es > most ? sc[j] * es : most;
		if ((err = next_half(c, 1, &h0)))
			goto out;
		if (most <= q && !direct_for(most))
			for (int j = 0; j < p; j++)
				if (j != r)
					dri_copy(slot(r, h0) + (size_t)j * q,
						 in + soff[j] * es, sc[j] * es);
	}
	/* The first phase: direct_start's (and its probe), or our own. */
	if ((err = direct_start(c, S.direct < 0 ? 0 : S.direct > 1 ?
				DIRECT_SURE : DIRECT_MIN, 0, in, &direct)) ||
	    (c->first && (err = phase(c))) ||
	    (err = a2av_check(c)))
		goto out;
	for (int i = 0; i < p; i++) {
		uint64_t off = 0;

		/* i's numbers: bounded before they are used (i alone
		 * checked their sum against its memory) */
		for (int j = 0; j < p; j++) {
			uint64_t v = a2av_count(i, 1, j);

			if (j < r)
				off = v > lim - off ? lim + 1 : off + v;
			if (j != i) /* (its own piece stays at home) */
				big = v > big ? v : big;
		}
		if (off > lim || rc[i] > lim - off) {
			err = dri_fail(DR_EPEER, "rank %d's all_to_all_v send "
				       "counts add up to more than memory", i);
			dri_transport_abort(err, dr_last_error());
			goto out;
		}
		src[i] = (size_t)off;
	}
	big = big > lim ? lim : big;
	/* our own piece (from a copy if the buffers overlap) */
	memmove(out + roff[r] * es, in + soff[r] * es, sc[r] * es);
	if (direct && direct_for(big * es)) {
		for (int k = 1; !err && k < p; k++) {
			int i = (r + k) % p;

			err = cma_read(c, i, out + roff[i] * es, src[i] * es,
				       rc[i] * es);
		}
		/* nobody returns while its sendbuf is read */
		if (!err)
			err = phase(c);
		goto out;
	}
	if (pre && big * es <= q) {
		/* one round, written before the first phase */
		for (int i = 0; i < p; i++)
			if (i != r)
				dri_copy(out + roff[i] * es, slot(i, h0) +
					 (size_t)r * q, rc[i] * es);
		goto out;
	}
	if (q)
		rounds = (big * es + q - 1) / q;
	for (size_t t = 0; t < rounds && !err; t++) {
		size_t a = t * q;
		int h;

		if ((err = next_half(c, 1, &h)))
			break;
		for (int j = 0; j < p; j++)
			if (j != r && sc[j] * es > a)
				dri_copy(slot(r, h) + (size_t)j * q,
					 in + soff[j] * es + a,
					 sc[j] * es - a < q ? sc[j] * es - a
							    : q);
		if ((err = phase(c)))
			break;
		for (int i = 0; i < p; i++)
			if (i != r && rc[i] * es > a)
				dri_copy(out + roff[i] * es + a,
					 slot(i, h) + (size_t)r * q,
					 rc[i] * es - a < q ? rc[i] * es - a
							    : q);
	}
out:
	dri_scratch_put(own);
	return err;
}

/* ------------------------------------------------------------- entry */

static dr_err run_call(dri_op *op);

int dri_shm_coll(dri_op *op, dr_err *err)
{
	const dr_group *g = op->group;

	if (!S.configured || S.generation != dri_shm_generation())
		configure();
	if (S.off || op->id.group_id || !dri_shm_all_local() ||
	    g->size > DRI_SEG_SHM_MAX)
		return 0;
	switch (op->id.coll) {
	case DRI_BARRIER:
	case DRI_ALL_REDUCE:
	case DRI_BROADCAST:
	case DRI_REDUCE:
	case DRI_ALL_GATHER:
	case DRI_GATHER:
	case DRI_SCATTER:
	case DRI_REDUCE_SCATTER:
	case DRI_ALL_TO_ALL:
		break;
	case DRI_ALL_TO_ALL_V:
		if (g->size > DRI_SHM_FLAT_MAX || g->size > DRI_SEG_A2AV_MAX)
			return 0;
		break;
	default:
		return 0;
	}
	if (S.nblk != g->size) {
		for (int i = 0; i < g->size; i++)
			S.blk[i] = dri_shm_blk(i);
		S.nblk = g->size;
	}
	*err = run_call(op);
	return 1;
}

/* Runs op through the flags (dri_shm_coll found that it applies). */
static dr_err run_call(dri_op *op)
{
	const dr_group *g = op->group;
	struct call c;
	dr_err err;

	memset(&c, 0, sizeof(c));
	c.op = op;
	c.p = g->size;
	c.r = g->rank;
	c.tree = c.p > DRI_SHM_FLAT_MAX;
	c.first = 1;
	c.from = c.half = c.sub = -1;
	/* When the call started: dri_run_op set its deadline from then. */
	c.t0 = op->id.deadline ? op->id.deadline - op->id.timeout_ms
			       : dri_now_ms();
	c.rec.n = S.ncall++;
	c.rec.id = op->id;
	/* A rooted call may have returned before the others saw it: an
	 * abort since (a peer's mismatch, its death) fails this one. */
	if (any_open()) {
		if (dri_shm_pending() &&
		    (err = dri_transport_stale_check(&op->id)))
			return err;
		if (!c.tree && (err = settle(&c)))
			return err;
	}
	switch (op->id.coll) {
	case DRI_BARRIER:
		err = barrier_shm(&c);
		break;
	case DRI_ALL_REDUCE:
		err = all_reduce_shm(&c);
		break;
	case DRI_BROADCAST:
		err = broadcast_shm(&c);
		break;
	case DRI_REDUCE:
		err = reduce_shm(&c);
		break;
	case DRI_ALL_GATHER:
		err = gather_shm(&c, -1);
		break;
	case DRI_GATHER:
		err = gather_shm(&c, op->root);
		break;
	case DRI_SCATTER:
		err = spread_shm(&c, 0);
		break;
	case DRI_REDUCE_SCATTER:
		err = reduce_scatter_shm(&c);
		break;
	case DRI_ALL_TO_ALL_V:
		err = a2av_shm(&c);
		break;
	default:
		err = spread_shm(&c, 1);
		break;
	}
	/* A call with no data still meets the others once: its flags carry
	 * the mismatch check, and every rank's phases stay in step.  (On an
	 * error, the caller aborts the group: the others wait for us.) */
	if (!err && c.first)
		err = phase(&c);
	S.past[c.rec.n % LAG] = c.rec;
	if (c.rec.open)
		S.open |= 1u << (c.rec.n % LAG);
	else
		S.open &= ~(1u << (c.rec.n % LAG));
	return err;
}

/* dri_shm_quick's test, under group.c's lock once the world is idle:
 * what dri_shm_coll would find, from what its first call set up (that
 * call takes the usual way; rooted calls left to settle are settled in
 * run_call either way).  S is the world's calls' state, which the
 * world's progress thread writes while it runs one: read only here,
 * after it. */
static int quick_ok(void *arg)
{
	const dr_group *g = arg;

	return S.configured && S.generation == dri_shm_generation() &&
	       !S.off && S.nblk == g->size && dri_shm_all_local();
}

int dri_shm_quick(dri_coll coll, void *buf, size_t count, dr_dtype dtype,
		  dr_op redop, dr_err *err)
{
	dr_group *g = dri_world();
	dri_op op;

	if (!g || g->size > DRI_SHM_FLAT_MAX)
		return 0;
	if (coll == DRI_ALL_REDUCE &&
	    (count * dr_dtype_size(dtype) > sizeof(uint64_t) ||
	     dri_cuda_ptr_device(buf) >= 0))
		return 0;
	/* dri_submit's order: a failed group fails the call before it
	 * takes a number. */
	if ((*err = dri_transport_check()))
		return 1;
	memset(&op, 0, sizeof(op));
	if (!dri_world_take_seq(quick_ok, g, &op.id.seq))
		return 0;
	op.id.coll = coll;
	op.id.count = count;
	op.id.dtype = coll == DRI_ALL_REDUCE ? (int32_t)dtype : -1;
	op.id.op = coll == DRI_ALL_REDUCE ? (int32_t)redop : -1;
	op.id.root = -1;
	op.group = g;
	op.sendbuf = dri_or_empty(NULL);
	op.buf = dri_or_empty(buf);
	op.count = count;
	op.dtype = dtype;
	op.redop = redop;
	op.root = -1;
	op.device = -1;
	op.run = run_call;
	*err = dri_run_op(&op);
	return 1;
}
