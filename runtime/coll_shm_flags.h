/*
 * coll_shm_flags.h - inside the world's collectives through the job's
 * segment: what the phase/flag engine (coll_shm_flags.c) gives the
 * algorithms (coll_shm_reduce.c, coll_shm_move.c), the single copy
 * (coll_shm_direct.c) and the entry (coll_shm.c).  Only those include it;
 * coll_shm.h is what the rest of the runtime sees.
 *
 * An algorithm gets a struct call, takes a half or a small slot for
 * each use (dri_cs_next_half, dri_cs_next_sub), writes its own slot,
 * and meets the others with dri_cs_phase (everyone) or, flat and rooted,
 * dri_cs_post (a writer), dri_cs_take then dri_cs_done (a reader).  The
 * mismatch check, the waits, aborts and deadlines come with those.
 */
#ifndef DRI_COLL_SHM_FLAGS_H
#define DRI_COLL_SHM_FLAGS_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "coll.h"
#include "seg.h"
#include "shm.h"

/* A rank checks a rooted call's records this many calls later (seg.h
 * keeps DRI_SEG_CALLS of each rank's): how far a broadcast's root may
 * run ahead of its slowest reader. */
#define LAG (DRI_SEG_CALLS / 2)
/* A bit for each of them. */
typedef unsigned __int128 dri_cs_bits;
_Static_assert(sizeof(dri_cs_bits) * 8 >= LAG, "a bit for each kept call");
/* The lean way's reader of a small rooted call publishes at least every
 * OWE_MAX-th arrival (dri_cs_arrive_later); fewer than LAG, so that a
 * writer's settle, which waits for the call LAG calls back, never waits
 * for an arrival owed by a rank that makes no more calls. */
#define OWE_MAX 16
/* A reader of small rooted calls (the lean way's) that finds its writers
 * not there yet at its first look, call after call from the same root,
 * is in lock-step with them: its looks take the lines they are writing,
 * and each call pays two transfers of a line in turn.  After `every`
 * such reads in a row (struct dri_cs_lead) it keeps off their lines for
 * DRI_CS_STEP_NS once, in which they run ahead of it (about 40 calls
 * at the 0.1 us a call of the fast mode here; LAG at most) and, the
 * faster side once nobody takes their lines, stay ahead
 * (docs/small-calls-log-2.md).  A step after which they are behind again within
 * DRI_CS_LEAD_JUDGE reads did not help (the writers wait for this rank:
 * a request and its answer) and doubles `every`, up to
 * DRI_CS_LEAD_EVERY_MAX, so that such a loop loses at most a step in
 * that many calls; one that helped sets it back to DRI_CS_LEAD_EVERY. */
#define DRI_CS_LEAD_EVERY 1u
#define DRI_CS_LEAD_JUDGE 8u
#define DRI_CS_LEAD_EVERY_MAX 4096u
#define DRI_CS_STEP_NS 4000
/* Rooted calls of at most SUB_BYTES go through one of NSUB small slots
 * at the end of the halves (NSUB / 2 in each, with halves of at least
 * SUB_HALF_MIN bytes: up to 16 ranks), taken in turn, so that NSUB of
 * them can be in flight (fewer than LAG: the slots, not the records,
 * bound a small call's lead): a half is written again after two uses, a
 * small slot after NSUB.  The other uses keep off them. */
#define NSUB 16
#define SUB_BYTES ((size_t)16 << 10)
#define SUB_HALF_MIN ((size_t)1 << 20)
/* Single copy (coll_shm_direct.c): a flat non-reducing call whose
 * readers read pieces of at least DIRECT_MIN bytes of a rank reads them
 * with process_vm_readv once the probe found that it works and wins;
 * pieces of DIRECT_SURE bytes and more once it found that it works.
 * Those no longer fit the caches, where two copies move twice the bytes
 * through memory that one does: process_vm_readv of 1 MiB ran at 16.5
 * GB/s against 27.4 for memcpy (13.7 for two), of 32 MiB 10.4 against
 * 13.6 (cma_rate, Intel), where the probe's 256 KiB, in the caches, go
 * either way from one run to the next (a 64 MiB all_to_all of 2 ranks
 * took 7.3 ms one way and 12.7 the other). */
#define DIRECT_MIN ((size_t)32 << 10)
#define DIRECT_SURE ((size_t)1 << 20)

/* A call as this rank made it: its number among the calls through the
 * flags (its record's place, seg.h), first and last phase, and whether
 * it is still to be checked against every rank's (a rooted call that
 * did not wait for them all). */
struct rec {
	uint64_t n, first, last;
	dri_msg_id id;
	int open;
};

/* What the lean way's reader of small rooted calls knows of its lead
 * (DRI_CS_STEP_NS above; coll_shm_quick.c's lead_note). */
struct dri_cs_lead {
	int root, coll;        /* of the last read (root -1: none) */
	unsigned behind;       /* reads in a row that found the writers
				* not there yet */
	unsigned every;        /* such reads before a step back */
	unsigned judge;        /* after a step: 1 + the reads since that
				* found them there; else 0 */
};

/* This process's place in the sequence of phases and uses (the same on
 * every rank), and its settings.  Only the world group's calls come
 * here, one at a time (group.c orders them). */
struct dri_cs_state {
	uint64_t phase;
	unsigned use;
	uint64_t ncall;        /* calls through the flags */
	uint64_t safe;         /* every other rank's up has reached it */
	uint64_t checked;      /* 1 + the seq of the latest call found the
				* same on every rank by this one (the lean
				* way's; seg.h: DRI_SEG_PREV_CHECKED) */
	uint64_t thru_seq, thru_phase; /* a peer found every call of its
				* own before this seq and phase the same on
				* every rank (seg.h: DRI_SEG_ALL_CHECKED;
				* low_up) */
	int marked;            /* the last look at the others' up found
				* such a word */
	uint64_t need[2];      /* half h is written again once every
				* other rank's up reaches need[h] */
	unsigned sub;          /* small slots used */
	uint64_t need_sub[NSUB]; /* the same for the small slots */
	size_t sub_bytes;      /* of each small slot (0: none) */
	size_t sub_off;        /* where they start in a half */
	struct rec past[LAG];  /* the last LAG calls, by n % LAG */
	dri_cs_bits open;      /* bit k: past[k].open (close_past) */
	unsigned waits;        /* oversubscribed: waits that looked at
				* rebalancing, counted */
	int configured, off, oversub;
	int cpu;               /* 1 + the CPU last published (seg.h: cpu) */
	cpu_set_t allowed;     /* the CPUs it may run on, as last seen */
	int nallowed;          /* how many (0: unknown) */
	uint64_t allowed_n;    /* dri_cs.ncall when last seen */
	int64_t moved_ms;      /* when rebalance last moved this thread */
	unsigned generation;   /* dri_shm_generation() configured for */
	int64_t spin_us;
	int direct_mode;       /* dri_shm_direct_mode() */
	int direct;            /* single copy: 1 yes, -1 no, 0 not probed */
	uint64_t a2av;         /* all_to_all_v calls through the flags */
	uint64_t owed;         /* an arrival not yet published
				* (dri_cs_arrive_later), or 0 */
	unsigned owing;        /* arrivals left owed since the last one */
	int prefetchw;         /* the CPU takes a line for writing ahead
				* (PREFETCHW: dri_cs_take_line) */
	int crowded;           /* the probe found a rank with more ranks
				* than CPUs (the same on every rank) */
	struct dri_cs_lead lead; /* the lean reader's lock-step count */
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
};
extern struct dri_cs_state dri_cs;


/* Whether two published calls are the same call. */
static inline int dri_cs_same_call(const dri_msg_id *a, const dri_msg_id *b)
{
	return a->coll == b->coll && a->count == b->count &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

/* Whether a rooted call's reader keeps the call open for its settle
 * (dri_cs_settle): one that read a single rank's record (from >= 0) has
 * not seen the others' calls, unless that rank is the only other one. */
static inline int dri_cs_reader_open(int p, int from)
{
	return from >= 0 && p > 2;
}

/* Takes the line at p for writing now (PREFETCHW, where the CPU has it),
 * so that the store to it later does not wait for the line to come
 * back from a peer that read it: x86 commits stores in order, and one
 * that waits for its line holds every later store of the call. */
static inline void dri_cs_take_line(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	if (dri_cs.prefetchw)
		__asm__ __volatile__("prefetchw %0" : : "m"(*(const char *)p));
#else
	__builtin_prefetch(p, 1);
#endif
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
	int wake;              /* arrived by a plain store: the fence and the
				* wake-ups are due after the first look */
	int bad;               /* a rank whose call differs, or -1 */
	int taking;            /* flat, rooted: waiting for every writer
				* without having arrived (take(c, -1)) */
	int inl;               /* flat, rooted: the data rides in the
				* writers' records of the call (seg.h:
				* dri_seg_rec), which the readers wait for */
	const void *inl_src;   /* what begin puts in ours (inl_len bytes) */
	size_t inl_len;
	int64_t t0;            /* when it started (the deadline is in op->id) */
	dri_op *undated;       /* the quick path: op, whose deadline is set
				* only if a wait goes on into the transport,
				* from then (coll_shm.c's quick_rooted and
				* the lean ways do the rest of dri_run_op's
				* work) */
	struct rec rec;        /* this call */
};

/* ---------------------------------- the engine's state (coll_shm_state.c) */

/* At the first call of a process group (a new transport start): the
 * settings, and every flag's count from 0 again. */
void dri_cs_configure(void);
/* World rank i's block of the segment (dri_shm_blk, kept). */
static inline dri_seg_rank *dri_cs_blk(int i)
{
	return dri_cs.blk[i];
}
/* The lines of the records of the calls (seg.h: call), which each call
 * writes and reads one of, into this rank's cache: they would
 * otherwise come one a call in the first DRI_SEG_CALLS calls, cold
 * (0.45 us a call more, n=2).  Rank r's own for writing (peers 0), at
 * the first call, then the others' (peers 1), once that call is done,
 * when the others have taken theirs. */
void dri_cs_warm(int r, int peers);
/* Rank r says on its block that it has left init's closing barrier
 * (seg.h: left) and waits, at most wait_ns, for the others to say so
 * (coll_shm.h: dri_shm_coll_leave_init); returns how many had not. */
int dri_cs_leave(int r, int64_t wait_ns);
/* The CPUs this thread may use, into dri_cs.allowed (dri_cs.allowed_n:
 * the call when looked); their number, 0 if unknown. */
int dri_cs_allowed_get(void);
/* Publishes the CPU rank r runs on, if it changed (seg.h: cpu).  (Inline,
 * as the records' writes and the wake-ups below: they run on every small
 * call, between one arrival and the next, where a call's own cost shows:
 * docs/small-calls.md.) */
static inline void dri_cs_note_cpu(int r)
{
	int k = sched_getcpu();

	k = k < 0 ? 0 : k + 1;
	if (k != dri_cs.cpu) {
		dri_cs.cpu = k;
		__atomic_store_n(&dri_cs_blk(r)->cpu, k, __ATOMIC_RELAXED);
	}
}
/* A waiting rank of a flat call c whose CPU has more of the call's ranks
 * than another CPU it may use moves to the one with the fewest (at most
 * once every 10 ms; coll_shm_state.c says why). */
void dri_cs_rebalance(const struct call *c);

/* ------------------------------------------ the engine (coll_shm_flags.c) */

/* One phase: arrive (this rank's writes for it are done), wait until
 * every rank has; at the call's first, the mismatch check. */
dr_err dri_cs_phase(struct call *c);
/* The phase's steps, for the quick path (coll_shm_quick.c), which does
 * the first ones itself (after dri_cs_note_cpu) and hands the rest on
 * when a wait is not over at once: rank r's record of its n-th call
 * through the flags (id, first phase e, len bytes of data from src) and
 * the record's copy on up's line (dri_cs_put_call); the peers' wake-ups
 * after an arrival (dri_cs_wake); and the wait for every rank and the
 * checks of a phase whose begin and arrival are done (c->e set:
 * dri_cs_phase_wait).  (Inline, those on every small call's way.) */
dr_err dri_cs_phase_wait(struct call *c);

/* Publishes call id of first phase e in rec (with mark in its coll, and
 * n bytes of data from src): seq 0 while the fields change (a reader
 * takes it for none).  Release stores only: the store to up that
 * follows (a release store too) orders them for the waiters. */
static inline void dri_cs_write_rec(dri_seg_call *rec, const dri_msg_id *id,
				    uint64_t e, int32_t mark,
				    unsigned char *data, const void *src,
				    size_t n)
{
	__atomic_store_n(&rec->seq, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	if (n)
		memcpy(data, src, n);
	__atomic_store_n(&rec->coll, (int32_t)id->coll | mark, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->count, id->count, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->dtype, id->dtype, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->op, id->op, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->root, id->root, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->phase, e, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->seq, id->seq + 1, __ATOMIC_RELEASE);
}

/* Its two halves: the record of the call's number (with the data), and
 * the copy on up's line.  A peer reads the record only once the copy is
 * of a later call (dri_shm_read_blk) or the call is past (settle), so a
 * barrier or all_reduce may write it after its arrival, before the next
 * call's copy (coll_shm_quick.c). */
static inline void dri_cs_put_rec(int r, uint64_t n, const dri_msg_id *id,
				  uint64_t e, const void *src, size_t len)
{
	dri_seg_rec *rec = &dri_cs_blk(r)->call[n % DRI_SEG_CALLS];

	dri_cs_write_rec(&rec->c, id, e, 0, rec->data, src, len);
}

/* The marks of the copy of call id (seg.h's DRI_SEG_MARKS). */
static inline int32_t dri_cs_copy_mark(const dri_msg_id *id)
{
	/* (flat: in a tree a rank checks its children's records alone) */
	return (dri_cs.checked == id->seq ? DRI_SEG_PREV_CHECKED : 0) |
	       (!dri_cs.open && dri_cs.nblk <= DRI_SHM_FLAT_MAX ?
		DRI_SEG_ALL_CHECKED : 0);
}

static inline void dri_cs_put_copy(int r, const dri_msg_id *id, uint64_t e)
{
	dri_cs_write_rec(&dri_cs_blk(r)->last, id, e, dri_cs_copy_mark(id),
			 NULL, NULL, 0);
}

/* Where rank i's tiny data of phase e is (seg.h's dri_seg_lean). */
static inline uint64_t *dri_cs_tiny(int i, uint64_t e)
{
	return &dri_cs_blk(i)->lean[e & 1].tiny[(e >> 1) & 1];
}

/* The phase every other rank must have arrived at before a tiny
 * all_reduce at phase e writes its data (seg.h: four phases apart). */
static inline uint64_t dri_cs_tiny_past(uint64_t e)
{
	return e > 3 ? e - 3 : 0;
}

/* Rank r's flat arrival at e on its lean line of e's parity too (seg.h),
 * with up's line's copy: before the store to up, for the small calls'
 * waiters (coll_shm_quick.c), which look there. */
static inline void dri_cs_mirror(int r, uint64_t e)
{
	dri_seg_rank *b = dri_cs_blk(r);
	dri_seg_lean *l = &b->lean[e & 1];
	const dri_seg_call *c = &b->last; /* ours: no one else writes it */
	/* (its marks ride in coll; seq is the call's + 1, 0 for none) */
	dri_msg_id id = { .coll = (uint32_t)c->coll, .seq = c->seq - 1,
			  .count = c->count, .dtype = c->dtype, .op = c->op,
			  .root = c->root };

	dri_cs_write_rec(&l->last, &id, c->phase, 0, NULL, NULL, 0);
	__atomic_store_n(&l->up, e, __ATOMIC_RELEASE);
}

static inline void dri_cs_put_call(int r, uint64_t n, const dri_msg_id *id,
				   uint64_t e, const void *src, size_t len)
{
	dri_cs_put_rec(r, n, id, e, src, len);
	dri_cs_put_copy(r, id, e);
}

/* The wake-ups, after a store to up that a sequentially consistent
 * fence has ordered before them (dri_shm_ring_peer's waiting flag
 * against the sleeper's look at up).  (The waiting flag looked at here
 * first: most often down.) */
static inline void dri_cs_wake(int p)
{
	for (int i = 0; i < p; i++)
		if (__atomic_load_n(&dri_cs.blk[i]->waiting, __ATOMIC_SEQ_CST))
			dri_shm_ring_peer(i);
}
/* Arrives at phase e as rank r (of p) and wakes whoever may wait for it:
 * a rooted call's writer or reader (post, done). */
void dri_cs_arrive_at(int r, uint64_t e, int p);
/* The same for a reader whose writers went on without waiting for it:
 * published only every OWE_MAX-th time, or when this rank next waits
 * (its up's line is then taken from a writer that waits on it, in
 * settle, once in OWE_MAX calls, not at each; a later arrival covers an
 * owed one). */
void dri_cs_arrive_later(int r, uint64_t e, int p);
/* Rooted calls (flat): a writer arrives and goes on (post); a reader
 * waits for rank from (-1: every other) to arrive (take), reads, then
 * arrives (done). */
void dri_cs_post(struct call *c);
dr_err dri_cs_take(struct call *c, int from);
/* take's wait and checks, for the quick path, which did begin itself
 * (c->e, c->rec set) */
dr_err dri_cs_take_wait(struct call *c, int from);
void dri_cs_done(struct call *c);
/* Waits until every other rank's up has reached v (flat). */
dr_err dri_cs_await_all(struct call *c, uint64_t v);
/* Call rec.n - LAG, if it was rooted: wait until every rank is past it
 * and check every rank's record of it, and of the later rooted calls
 * every rank is found past. */
dr_err dri_cs_settle(struct call *c);
/* Whether one of the last LAG calls is still to be checked. */
int dri_cs_any_open(void);
/* dri_cs_settle for call n of rank r (of p) without a wait: 1 once
 * call n - LAG, if it was rooted, is checked (every rank past it, every
 * record of it ours: then it is closed), or there is nothing to settle;
 * 0 if that needs a wait, a look at a message or an abort, or a record
 * is not ours (the general way's settle then waits, or names who
 * differs). */
int dri_cs_settle_quick(int p, int r, uint64_t n);
/* Its look at the flags alone, once nothing waits in the transport (a
 * message, an abort): the ups, a peer's word (seg.h:
 * DRI_SEG_ALL_CHECKED), the records. */
int dri_cs_settle_flags(int p, int r, uint64_t n);
/* Closes the calls before call n (seq its number) still open, once
 * every other rank of p has arrived past them (the lean way's barrier
 * and all_reduce, all there): each checked against every other rank's
 * record of it, or, for the call just before, by a peer's word that it
 * checked it (checked: a copy of call n with DRI_SEG_PREV_CHECKED).  1
 * if all were ours; 0 at the first that is not (the general way's
 * check then names who differs). */
int dri_cs_close_quick(int p, int r, uint64_t n, uint64_t seq, int checked);
/* Keeps call rec among the last LAG, open (to check at settle) or not. */
void dri_cs_keep(const struct rec *rec);
/* The half for the next use (*h), or the next small slot; writes: this
 * rank will write its own, so it waits until the readers of its last
 * use are done with it. */
dr_err dri_cs_next_half(struct call *c, int writes, int *h);
dr_err dri_cs_next_sub(struct call *c, int writes);
/* Half h of rank r's slot; rank r's slot of the current use (its half
 * or small slot); the data in rank r's record of the current call. */
char *dri_cs_slot(int r, int h);
char *dri_cs_cur_slot(const struct call *c, int r);
char *dri_cs_inl_data(const struct call *c, int r);

/* ----------------------------------------- the lean way (coll_shm_quick.c) */

/* Whether a blocking barrier (tiny 0) or all_reduce of at most 8 bytes
 * (tiny 1) of p ranks (this one r), whose number dri_shm_quick took, may
 * go the lean way now. */
int dri_cs_lean_ok(int p, int r, int tiny);
/* Runs it (seq its number; the arguments checked) as run_call would,
 * its control block, deadline and abort rule as dri_run_op's. */
dr_err dri_cs_lean(dr_group *g, uint64_t seq, dri_coll coll, void *buf,
		   size_t count, dr_dtype dtype, dr_op redop);
/* A blocking broadcast or reduce of at most DRI_SEG_INLINE bytes (seq
 * its number; the arguments checked), flat, the lean way: settle
 * without a wait (dri_cs_settle_quick), the record with the data, the
 * arrival; a reader looks at the writers' records as the lean barrier
 * at the others' flags and hands a wait that is not over to take's.
 * 1 with *err its status, or 0 (nothing done) when settling needs the
 * general way. */
int dri_cs_lean_rooted(dr_group *g, uint64_t seq, dri_coll coll, void *buf,
		       size_t count, dr_dtype dtype, dr_op redop, int root,
		       dr_err *err);

/* --------------------------------------- single copy (coll_shm_direct.c) */

/* Whether this call's readers read pieces of `piece` bytes the single
 * copy's way (*direct); if they may, this rank publishes addr and meets
 * the others once (the call's first phase), probing first if no call
 * has.  Then the reads, and one phase more before the call returns. */
dr_err dri_cs_direct_start(struct call *c, size_t piece, size_t crowded_min,
			   const void *addr, int *direct);
/* n bytes at offset off of every other rank's published buffer into
 * out + i * n (from < 0), or of rank from's alone into out. */
dr_err dri_cs_direct_reads(const struct call *c, int from, char *out,
			   size_t off, size_t n);
/* Whether pieces of `piece` bytes go the single-copy way, as the probe
 * found. */
int dri_cs_direct_for(size_t piece);
/* n bytes at offset off of rank peer's published buffer into dst. */
dr_err dri_cs_cma_read(const struct call *c, int peer, void *dst, size_t off,
		       size_t n);

/* ------------------------------ algorithms (coll_shm_reduce.c, _move.c) */

dr_err dri_cs_all_reduce(struct call *c);
dr_err dri_cs_reduce(struct call *c);
dr_err dri_cs_reduce_scatter(struct call *c);
dr_err dri_cs_broadcast(struct call *c);
/* all_gather (root < 0) and gather */
dr_err dri_cs_gather(struct call *c, int root);
/* scatter (all == 0) and all_to_all */
dr_err dri_cs_spread(struct call *c, int all);
dr_err dri_cs_a2av(struct call *c);

#endif /* DRI_COLL_SHM_FLAGS_H */
