/*
 * coll_shm_flags.c - the phase/flag engine of the world's collectives
 * through the job's segment (coll_shm.c runs them, coll_shm_reduce.c and
 * coll_shm_move.c are the algorithms, coll_shm_direct.c the single
 * copy, coll_shm_state.c its state and where the ranks run): phases,
 * the flags that mark them, the slots' halves, the records of the calls
 * and their mismatch check, and the waits.
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
 * wait for everyone that is known without looking (dri_cs.safe), and only a
 * rooted call can make it wait.  Up to 16 ranks, the end of each half
 * holds NSUB / 2 small slots, which small rooted calls take in turn.
 *
 * Rooted calls (up to 16 ranks): a broadcast's (a scatter's) root copies
 * its data in, arrives and returns at once; the others wait for the
 * root's up word alone, copy out, then arrive (saying they are done with
 * it).  A gather's (a small reduce's) others copy in, arrive and return;
 * the root waits for them all, copies out (reduces) and arrives.  With
 * the small slots a root runs up to NSUB calls ahead of its slowest
 * reader.  A broadcast or reduce of at most DRI_SEG_INLINE bytes needs
 * no slot: its writers put the data in their record of the call (seg.h:
 * dri_seg_rec, a line each), and a reader waits on that record instead
 * of the writer's up word, so that what it checks and what it reads come
 * in one transfer (up still moves, for whoever sleeps on it).  The
 * record is written again DRI_SEG_CALLS calls later, once every rank is
 * past the call (settle): such a root runs up to LAG calls ahead.  The
 * lean way (coll_shm_quick.c) takes these calls when blocking; its
 * readers publish their arrival later (dri_cs_arrive_later).
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
 * may use moves (rebalance, coll_shm_state.c).
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
 * there, or through the abort (looked at when a call starts).  A peer
 * with nothing left to check says so in its copy on up's line
 * (DRI_SEG_ALL_CHECKED): a rank that reads the peers' up (low_up) then
 * closes the calls of its own before that copy's with no look at their
 * records (peer_checked).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "coll_shm_flags.h"
#include "shm.h"
#include "timeout.h"
#include "transport.h"

/* Up to DRI_SHM_FLAT_MAX ranks every rank looks at every other's flag;
 * beyond, a tree with TREE_K children per rank (shm.h: shm.c watches
 * the processes of the same ranks). */
#define TREE_K DRI_SHM_TREE_K

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

/* Rank peer's record of call rec (a call with coll 0 when it has
 * another there: another seq, or with strict, another first phase). */
static void rec_call(const struct call *c, const struct rec *rec, int peer,
		     int strict, dri_msg_id *id)
{
	if (peer == c->r) {
		*id = rec->id;
		return;
	}
	if (strict && !c->tree && dri_cs.seen[peer].n1 == rec->n + 1) {
		*id = dri_cs.seen[peer].id;
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
	return theirs.coll && !dri_cs_same_call(&c->rec.id, &theirs);
}

/* The tree's child of the first phase whose call differs from ours. */
static int child_differs(const struct call *c, int child)
{
	dri_msg_id theirs;

	if (!c->first)
		return 0;
	rec_call(c, &c->rec, child, 1, &theirs);
	return !dri_cs_same_call(&c->rec.id, &theirs);
}

/* The first rank of child's subtree that has not arrived at c->e, as
 * deep as it goes: the one to name and to watch (child itself if its
 * children all have). */
static int missing_below(const struct call *c, int child)
{
	for (int k = 1; k <= TREE_K && TREE_K * child + k < c->p; k++)
		if (load(&dri_cs_blk(TREE_K * child + k)->up) < c->e) {
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
			       c->rec.id.seq, c->rec.first, &dri_cs.seen[peer].id))
		memset(&dri_cs.seen[peer].id, 0, sizeof(dri_cs.seen[peer].id));
	dri_cs.seen[peer].n1 = c->rec.n + 1;
}

/* A call whose data rides in records (c->inl), at its first phase: 1
 * once peer's record of it is there and is our call (kept for check_all
 * as see_call keeps it), -1 if it is another call, or peer's up went
 * past the phase without it (then it made other calls before), 0 while
 * it is not there yet. */
static int rec_here(const struct call *c, int peer)
{
	int k = (int)(c->rec.n % DRI_SEG_CALLS);
	dri_msg_id *id = &dri_cs.seen[peer].id;

	if (!dri_shm_read_rec(peer, k, c->rec.id.seq, c->e, id)) {
		/* up after the record: a record written between the two
		 * reads is there now */
		if (load(&dri_cs_blk(peer)->up) < c->e)
			return 0;
		if (!dri_shm_read_rec(peer, k, c->rec.id.seq, c->e, id))
			return -1;
	}
	dri_cs.seen[peer].n1 = c->rec.n + 1;
	return dri_cs_same_call(&c->rec.id, id) ? 1 : -1;
}

/* waiting_for's look at peer's record (c->inl, first phase): 1 if it
 * is there and our call; 0 if not yet (dri_shm_wait then sleeps on its
 * up); -1 if it differs (c->bad names peer). */
static int inl_look(struct call *c, int peer)
{
	int k = rec_here(c, peer);

	if (!k)
		want(c, &dri_cs_blk(peer)->up, c->e);
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
		dri_seg_rank *b = dri_cs_blk(c->from);

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
			b = dri_cs_blk(c->cursor);
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
			b = dri_cs_blk(child);
			if (load(&b->up) < c->e) {
				want(c, &b->up, c->e);
				return missing_below(c, child);
			}
			if (child_differs(c, child)) {
				c->bad = child;
				return -1;
			}
		}
		publish(&dri_cs_blk(c->r)->up, c->e);
		if (c->r)
			dri_shm_ring_peer(tree_parent(c->r));
		c->stage = 1;
	}
	if (c->stage == 1) {
		if (c->r) {
			dri_seg_rank *b = dri_cs_blk(tree_parent(c->r));

			if (load(&b->down) < c->e) {
				want(c, &b->down, c->e);
				/* The root waits for someone: name that
				 * rank (and watch it) rather than our
				 * parent. */
				return missing_below(c, 0) ? missing_below(c, 0)
							   : tree_parent(c->r);
			}
		}
		publish(&dri_cs_blk(c->r)->down, c->e);
		for (int k = 1; k <= TREE_K && TREE_K * c->r + k < c->p; k++)
			dri_shm_ring_peer(TREE_K * c->r + k);
		c->stage = 2;
	}
	return -1;
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
	if (c->tree || dri_cs.cpu <= 0)
		return 1;
	for (int i = 0; i < c->p; i++) {
		const dri_seg_rank *b;
		int32_t k;

		if (i == c->r)
			continue;
		b = dri_cs_blk(i);
		k = __atomic_load_n(&b->cpu, __ATOMIC_RELAXED);
		if ((k == dri_cs.cpu || k <= 0) && load(&b->up) < c->e)
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

/* Spins on the flags without the transport's lock, for dri_cs.spin_us at
 * most; 1 once the phase is passed, 0 to wait in the transport
 * (something for it to look at: a ring, the launcher's abort). */
static int spin_wait(struct call *c)
{
	int64_t end = 0;

	for (unsigned k = 0;; k++) {
		int w = waiting_for(c);

		if (c->wake) {
			/* dri_cs_phase's arrival: the others' lines came in
			 * while ours went out; now its order before the
			 * look at the sleepers (dri_cs_wake). */
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			dri_cs_wake(c->p);
			c->wake = 0;
		}
		if (w < 0)
			return 1;
		if (dri_shm_pending() || !dri_cs.spin_us)
			return 0;
		if (k % 16 == 15) {
			int64_t t = dri_now_ns() / 1000;

			if (!end)
				end = t + dri_cs.spin_us;
			else if (t >= end)
				return 0;
		}
		/* Yield now and then even with a core each: on a busy
		 * machine the rank we wait for may share ours. */
		if (dri_cs.oversub) {
			/* Every 8th wait: moves are rare (MOVE_MS apart),
			 * and this is on every call's path. */
			if (k == 0 && symmetric(c) && !(dri_cs.waits++ % 8))
				dri_cs_rebalance(c);
			if (k % YIELD_EVERY == YIELD_EVERY - 1 || sibling_due(c))
				sched_yield();
			else
				dri_cpu_relax();
		} else if (k % 16 == 15) {
			if (k == 15)
				dri_cs_rebalance(c);
			sched_yield();
		} else {
			dri_cpu_relax();
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
		if (!zero.coll || !dri_cs_same_call(&zero, &other))
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
		if (i != c->r && (dri_cs.seen[i].n1 != c->rec.n + 1 ||
				  !dri_cs_same_call(&dri_cs.seen[i].id, &c->rec.id)))
			return 0;
	return 1;
}

/* Past call o is checked (or about to be): no longer open. */
static void close_past(struct rec *o)
{
	o->open = 0;
	dri_cs.open &= ~((dri_cs_bits)1 << (o->n % LAG));
}

/* The next phase; at the call's first, its record (seg.h), which the
 * peers read once up shows the phase. */
static void begin(struct call *c)
{
	dri_cs_note_cpu(c->r);
	c->e = ++dri_cs.phase;
	c->rec.last = c->e;
	if (c->first) {
		c->rec.first = c->e;
		dri_cs_put_call(c->r, c->rec.n, &c->op->id, c->e, c->inl_src,
				c->inl_len);
	}
}

/* Arrives at c->e (flat) and wakes whoever may wait for it. */
static void arrive(struct call *c)
{
	dri_cs_arrive_at(c->r, c->e, c->p);
}

void dri_cs_arrive_at(int r, uint64_t e, int p)
{
	dri_cs_mirror(r, e);
	publish(&dri_cs_blk(r)->up, e);
	dri_cs_wake(p);
}

void dri_cs_arrive_later(int r, uint64_t e, int p)
{
	if (++dri_cs.owing < OWE_MAX) {
		dri_cs.owed = e;
		return;
	}
	dri_cs.owing = 0;
	dri_cs.owed = 0;
	dri_cs_arrive_at(r, e, p);
}

/* The arrival dri_cs_arrive_later left owed, unless a later one has
 * covered it. */
static void pay(const struct call *c)
{
	if (!dri_cs.owed)
		return;
	if (dri_cs.owed > load(&dri_cs_blk(c->r)->up))
		dri_cs_arrive_at(c->r, dri_cs.owed, c->p);
	dri_cs.owed = 0;
	dri_cs.owing = 0;
}

/* Waits until waiting_for says the phase c->e is passed (for c->from,
 * flat), spinning first. */
static dr_err await(struct call *c)
{
	dr_err err = DR_OK;

	/* (a rank that waits has arrived wherever it has been) */
	pay(c);
	c->cursor = c->stage = 0;
	c->bad = -1;
	c->armed = 0;
	if (spin_wait(c))
		return DR_OK;
	c->armed = 1;
	if (c->undated) {
		dri_op *op = c->undated;

		op->id.timeout_ms = dri_timeout_ms();
		op->id.deadline = dri_deadline(op->id.timeout_ms);
		c->t0 = op->id.deadline - op->id.timeout_ms;
		c->undated = NULL;
	}
	err = dri_transport_flag_wait(&c->op->id, waiting_for, c, c->t0,
				      dri_cs.spin_us > 0);
	c->armed = 0;
	dri_shm_want(NULL, 0);
	return err;
}

/* The lowest of the other ranks' up (flat).  The copies on the same
 * lines come with them: one that says its rank found every call of its
 * own before it the same on every rank (DRI_SEG_ALL_CHECKED) is kept in
 * dri_cs.thru_seq and thru_phase (peer_checked), dri_cs.marked saying
 * whether this look found one. */
static uint64_t low_up(int p, int r)
{
	uint64_t low = UINT64_MAX, seq, phase;

	dri_cs.marked = 0;
	for (int i = 0; i < p; i++)
		if (i != r) {
			const dri_seg_rank *b = dri_cs_blk(i);
			uint64_t u = load(&b->up);

			low = u < low ? u : low;
			if (dri_shm_all_checked(&b->last, &seq, &phase)) {
				dri_cs.marked = 1;
				if (phase > dri_cs.thru_phase) {
					dri_cs.thru_phase = phase;
					dri_cs.thru_seq = seq;
				}
			}
		}
	return low;
}

/* Whether past call o is known to be the same on every rank from a
 * peer's word (low_up): every call of that peer's before a later seq
 * and a phase past o's was checked against every rank's.  (The phase:
 * its calls before that one are then as many as ours up to o, o's
 * place among them included; a peer whose calls went another way than
 * ours, the flags or not, would have found a record that differs.) */
static int peer_checked(const struct rec *o)
{
	return o->id.seq < dri_cs.thru_seq && o->last < dri_cs.thru_phase;
}

/* Waits until every other rank's up has reached v (flat).  What it
 * finds is kept: after rooted calls the others are often well past v,
 * and then the next calls need not look (a look is a transfer of a line
 * the other keeps writing). */
dr_err dri_cs_await_all(struct call *c, uint64_t v)
{
	uint64_t e = c->e, low;
	int first = c->first;
	dr_err err;

	if (v <= dri_cs.safe)
		return DR_OK;
	low = low_up(c->p, c->r);
	if (low >= v) {
		dri_cs.safe = low;
		return DR_OK;
	}
	c->e = v;
	c->from = -1;
	c->first = 0;
	err = await(c);
	c->e = e;
	c->first = first;
	if (!err)
		dri_cs.safe = v;
	return err;
}

/* The current use's slot may be written again once every other rank's
 * up reaches need. */
static void used(const struct call *c, uint64_t need)
{
	if (c->sub >= 0)
		dri_cs.need_sub[c->sub] = need;
	else if (c->half >= 0)
		dri_cs.need[c->half] = need;
}

/* One phase: arrive (this rank's writes for it are done), wait until
 * every rank has.  The current half may be written again once every
 * rank arrives at a later phase (it reads before that). */
dr_err dri_cs_phase(struct call *c)
{
	begin(c);
	/* Flat: arrive by a plain store, the fence and the wake-ups after
	 * the first look at the others (spin_wait), as the quick way does
	 * (coll_shm_quick.c: a transfer less than an xchg's). */
	if (!c->tree) {
		dri_cs_mirror(c->r, c->e);
		__atomic_store_n(&dri_cs_blk(c->r)->up, c->e, __ATOMIC_RELEASE);
		c->wake = 1;
	}
	return dri_cs_phase_wait(c);
}

dr_err dri_cs_phase_wait(struct call *c)
{
	dr_err err;

	c->from = -1;
	if ((err = await(c)))
		return err;
	if (c->bad >= 0)
		return mismatch(c, &c->rec, c->r < c->bad ? c->r : c->bad,
				c->r < c->bad ? c->bad : c->r);
	if (c->first && !c->tree) {
		/* Every rank is past the rooted calls before this one too:
		 * check them now rather than LAG calls later (oldest first). */
		for (int k = LAG; k >= 1 && dri_cs.open; k--) {
			struct rec *o = &dri_cs.past[(c->rec.n + LAG - k) % LAG];

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
	if (c->e > dri_cs.safe)
		dri_cs.safe = c->e;
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
void dri_cs_post(struct call *c)
{
	begin(c);
	arrive(c);
	c->first = 0;
	c->rec.open = 1;
	used(c, c->e);
}

/* Waits until rank from (-1: every other) has arrived at the next
 * phase; the caller then reads and posts (done). */
dr_err dri_cs_take(struct call *c, int from)
{
	begin(c);
	return dri_cs_take_wait(c, from);
}

dr_err dri_cs_take_wait(struct call *c, int from)
{
	dr_err err;

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
	c->rec.open |= dri_cs_reader_open(c->p, from);
	used(c, c->e);
	/* A root runs ahead: its record of our next call is likely there
	 * already; fetch it while we copy and arrive. */
	if (c->inl && from >= 0)
		__builtin_prefetch(&dri_cs_blk(from)->call[(c->rec.n + 1) %
							  DRI_SEG_CALLS]);
	return DR_OK;
}

void dri_cs_done(struct call *c)
{
	arrive(c);
}

/* Call rec.n - LAG, if it was rooted: wait until every rank is past it
 * and check every rank's record of it against rank 0's.  The look at
 * the others' up words that this takes often finds them past later
 * rooted calls too (a broadcast's readers follow close behind its
 * root): those are checked now as well, oldest first, so that the next
 * calls need not look again (docs/small-calls.md). */
dr_err dri_cs_settle(struct call *c)
{
	struct rec *o = &dri_cs.past[c->rec.n % LAG];
	dr_err err;

	if (!o->open)
		return DR_OK;
	if ((err = dri_cs_await_all(c, o->last)))
		return err;
	for (int k = LAG; k >= 1 && dri_cs.open; k--) {
		struct rec *q = &dri_cs.past[(c->rec.n + LAG - k) % LAG];

		if (q->open && q->n < c->rec.n && q->last <= dri_cs.safe) {
			close_past(q);
			if (!peer_checked(q) && (err = check_all(c, q)))
				return err;
		}
	}
	return DR_OK;
}

/* Whether every other rank's record of past call o is there and is o's
 * call (each rank past it: the records are not written again yet). */
static int records_same(int p, int r, const struct rec *o)
{
	int k = (int)(o->n % DRI_SEG_CALLS);
	dri_msg_id theirs;

	for (int i = 0; i < p; i++)
		if (i != r &&
		    !(dri_shm_read_at(&dri_cs_blk(i)->call[k].c, o->id.seq,
				      o->first, &theirs) &&
		      dri_cs_same_call(&theirs, &o->id)))
			return 0;
	return 1;
}

int dri_cs_settle_quick(int p, int r, uint64_t n)
{
	if (!dri_cs.open)
		return 1;
	/* (a message or an abort to look at first: run_call's way) */
	if (dri_shm_pending())
		return 0;
	return dri_cs_settle_flags(p, r, n);
}

int dri_cs_settle_flags(int p, int r, uint64_t n)
{
	struct rec *o = &dri_cs.past[n % LAG];

	if (!o->open)
		return 1;
	/* The others' up lines, where every rank must be past o; looked
	 * at again, while a peer's word (low_up) keeps coming, once it no
	 * longer covers o: a line a peer writes at each call, read once
	 * in many calls (docs/small-calls-log-2.md), not o's record of every other
	 * rank, read at each. */
	if (o->last > dri_cs.safe || (dri_cs.marked && !peer_checked(o))) {
		uint64_t low = low_up(p, r);

		if (low > dri_cs.safe)
			dri_cs.safe = low;
		if (o->last > dri_cs.safe)
			return 0;
	}
	if (!peer_checked(o) && !records_same(p, r, o))
		return 0;
	close_past(o);
	return 1;
}

int dri_cs_close_quick(int p, int r, uint64_t n, uint64_t seq, int checked)
{
	/* the open ones by their bits, in any order: the general way,
	 * which a call that differs goes on to, names the oldest */
	for (dri_cs_bits b = dri_cs.open; b; b &= b - 1) {
		uint64_t lo = (uint64_t)b;
		int j = lo ? __builtin_ctzll(lo)
			   : 64 + __builtin_ctzll((uint64_t)(b >> 64));
		struct rec *o = &dri_cs.past[j];

		if (o->n >= n)
			continue;
		/* (a peer that checked the call before ours against every
		 * rank's said so in its copy of ours: no record to read) */
		if (!(checked && o->id.seq + 1 == seq) &&
		    !records_same(p, r, o))
			return 0;
		close_past(o);
	}
	return 1;
}

void dri_cs_keep(const struct rec *rec)
{
	dri_cs_bits bit = (dri_cs_bits)1 << (rec->n % LAG);

	dri_cs.past[rec->n % LAG] = *rec;
	if (rec->open)
		dri_cs.open |= bit;
	else
		dri_cs.open &= ~bit;
}

/* Whether one of the last LAG calls is still to be checked. */
int dri_cs_any_open(void)
{
	return dri_cs.open != 0;
}

/* The half of the slots for the next use (every rank takes the same);
 * writes: this rank will write its own, so the readers of its last use
 * must be done with it. */
dr_err dri_cs_next_half(struct call *c, int writes, int *h)
{
	*h = c->half = (int)(dri_cs.use++ & 1);
	c->sub = -1;
	if (!writes || c->tree)
		return DR_OK;
	return dri_cs_await_all(c, dri_cs.need[*h]);
}

/* The next small slot, for a rooted call of at most dri_cs.sub_bytes bytes
 * (flat); cur_slot gives it. */
dr_err dri_cs_next_sub(struct call *c, int writes)
{
	int j = (int)(dri_cs.sub++ % NSUB);

	c->sub = j;
	c->half = j & 1;
	return writes ? dri_cs_await_all(c, dri_cs.need_sub[j]) : DR_OK;
}

char *dri_cs_slot(int r, int h)
{
	return dri_shm_slot(r, h);
}

/* Rank r's slot of the current use: its half, or its small slot. */
char *dri_cs_cur_slot(const struct call *c, int r)
{
	char *p = dri_shm_slot(r, c->half);

	return c->sub < 0 ? p : p + dri_cs.sub_off +
				 (size_t)(c->sub >> 1) * dri_cs.sub_bytes;
}

/* The data in rank r's record of the current call (c->inl), there until
 * the call is settled (seg.h: call). */
char *dri_cs_inl_data(const struct call *c, int r)
{
	return (char *)dri_cs_blk(r)->call[c->rec.n % DRI_SEG_CALLS].data;
}
