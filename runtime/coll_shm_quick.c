/*
 * coll_shm_quick.c - the lean way of the world's smallest blocking calls
 * through the segment's flags: a barrier and an all_reduce of at most 8
 * bytes, flat (up to DRI_SHM_FLAT_MAX ranks); and a broadcast or reduce
 * of at most DRI_SEG_INLINE bytes, whose data rides in the writers'
 * records of the call (at the end).
 * coll_shm.c's dri_shm_quick sends them here once it has their sequence
 * number.
 *
 * A barrier of 2 ranks is a line's transfer plus what a rank does
 * between seeing the other's arrival and storing its own next one
 * (docs/small-calls.md, issue 35).  The general way (dri_run_op, run_call,
 * dri_cs_phase) spent about 1,200 instructions there, building an op and
 * a call, reading the clock for a deadline no quick call reaches, and
 * looking at the rings and the abort at every look at a flag.  This one
 * does the same steps of the protocol (coll_shm_flags.c) and nothing
 * else: the copy of the call's record, the tiny data and the arrival on
 * the lean line of the phase (seg.h), then on up's line; the call's
 * record, the control block's begin, the CPU; then a short spin on each
 * peer's lean line and the check of its copy, read in the same
 * transfer; the line of the next phase taken for writing; the sum in
 * rank order; the control block's end.
 *
 * Anything else - a peer not there after a few looks, a record that is
 * not ours (a mismatch, or a peer already gone on) - hands the call on,
 * in the state the general way would have reached, to
 * dri_cs_phase_wait: the same waits (spin, rebalance, the transport's
 * sleep with its deadline, counted from then), the same checks and the
 * same messages.  So the lean way changes no behaviour, only the cost
 * of the common case.
 *
 * After a rooted call the writers did not wait in, a barrier or tiny
 * all_reduce checks it once every rank is there (dri_cs_close_quick:
 * the others' records of it, or a peer's word on up's line that it
 * checked it, DRI_SEG_PREV_CHECKED, which a rooted call's reader that
 * saw every other rank's record gives), and a tiny all_reduce writes
 * its data once the others are done with the phase four before
 * (seg.h's lean lines; all_past, after three rooted calls in a row).
 * A loop of a broadcast and an all_reduce went the general way before
 * (1.07-1.11 us a pair at n=2, Open MPI 0.93-1.03; now 0.74-0.77:
 * docs/small-calls-log-2.md).
 *
 * A reader of small rooted calls that keeps finding its writers not
 * there yet steps back once for a few us (lead_note, coll_shm_flags.h's
 * DRI_CS_STEP_NS): its looks at their lines were what held them back.
 */
#include <stddef.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "coll_shm_flags.h"
#include "ctl_write.h"
#include "reduce.h"
#include "shm.h"
#include "timeout.h"

/* Looks at a peer's up before handing the wait on: a few hundred ns,
 * beyond which the general spin (and its yields) is the better place.
 * With more ranks than CPUs a peer that is not there is most often off
 * the CPU, and with DISTRUN_SPIN_US=0 nobody spins: one look. */
#define LOOKS 32
/* How many calls ahead a small rooted call takes its record's line for
 * writing (dri_cs_take_line): far enough for a transfer to finish. */
#define TAKE_AHEAD 8
/* The looks at the others' up, in LOOKS, before a tiny all_reduce after
 * rooted calls that did not wait for them writes its data: their
 * arrival is most of the wait the call has anyway. */
#define LOOKS_BEFORE 4

/* The looks a lean call takes at a peer past the first before it hands
 * the wait on: LOOKS, or none (above). */
static int looks_max(void)
{
	return dri_cs.oversub || !dri_cs.spin_us ? 0 : LOOKS;
}

/* Whether every other rank of p is done with the phases before v (its
 * up at v, or its copy of a call whose first phase is v or later: it
 * put that copy once past the calls before), after at most `looks`
 * looks at each; dri_cs.safe is v if every up was. */
static int all_past(int p, int r, uint64_t v, int looks)
{
	int up = 1;

	for (int i = 0; i < p; i++) {
		const dri_seg_rank *b = dri_cs.blk[i];
		int n = 0;

		if (i == r)
			continue;
		while (__atomic_load_n(&b->up, __ATOMIC_ACQUIRE) < v &&
		       __atomic_load_n(&b->last.phase, __ATOMIC_ACQUIRE) < v) {
			if (n++ >= looks)
				return 0;
			dri_cpu_relax();
		}
		up &= __atomic_load_n(&b->up, __ATOMIC_ACQUIRE) >= v;
	}
	if (up)
		dri_cs.safe = v;
	return 1;
}

int dri_cs_lean_ok(int p, int r, int tiny)
{
	/* Flat; the call LAG back settled (dri_cs_settle_quick, before
	 * the arrival: a root that runs ahead would write its record's
	 * line again LAG calls after ours); for the tiny data, every rank
	 * at the phase three before the call's (dri_cs_tiny_past): after
	 * three rooted calls that did not wait for the others, a short
	 * look at them.  The later rooted calls still open are closed once
	 * every rank is there (dri_cs_close_quick). */
	return p <= DRI_SHM_FLAT_MAX &&
	       (!dri_cs.open || dri_cs_settle_quick(p, r, dri_cs.ncall)) &&
	       (!tiny || dri_cs.safe >= dri_cs_tiny_past(dri_cs.phase + 1) ||
		all_past(p, r, dri_cs_tiny_past(dri_cs.phase + 1),
			 LOOKS_BEFORE * looks_max()));
}

/* Whether rank i has arrived at e with our call in its record (its copy
 * on its lean line of e; if it went on to e + 2 since, a later call's
 * copy there saying that it checked this one against ours, or else the
 * record of the call's number): 1; 0 if not after `looks` looks, or its
 * record is not ours.
 * *prev set if the copy said that rank i checked the call before ours
 * against every rank's (DRI_SEG_PREV_CHECKED). */
static int arrived(int i, uint64_t e, const dri_msg_id *id, int k, int looks,
		   int *prev)
{
	const dri_seg_rank *b = dri_cs.blk[i];
	const dri_seg_lean *l = &b->lean[e & 1];
	dri_msg_id theirs;

	for (int n = 0; __atomic_load_n(&l->up, __ATOMIC_ACQUIRE) < e; n++) {
		if (n >= looks)
			return 0;
		dri_cpu_relax();
	}
	if (dri_shm_read_raw(&l->last, id->seq, e, &theirs)) {
		*prev |= !!(theirs.coll & DRI_SEG_PREV_CHECKED);
		theirs.coll &= ~(uint32_t)DRI_SEG_MARKS;
		return dri_cs_same_call(&theirs, id);
	}
	/* It went on two phases: the record is another line, one more
	 * transfer, unless the copy says that our call was checked by it
	 * already. */
	if (dri_shm_checked_at(&l->last, id->seq))
		return 1;
	return dri_shm_read_at(&b->call[k].c, id->seq, e, &theirs) &&
	       dri_cs_same_call(&theirs, id);
}

/* n (1 to DRI_SEG_INLINE) bytes: the sizes a dtype has copied as one
 * load and one store, not through memcpy's call. */
static void copy8(void *dst, const void *src, size_t n)
{
	switch (n) {
	case 1: memcpy(dst, src, 1); break;
	case 2: memcpy(dst, src, 2); break;
	case 4: memcpy(dst, src, 4); break;
	case 8: memcpy(dst, src, 8); break;
	default: memcpy(dst, src, n); break;
	}
}

/* The reduction of the tiny data (at most DRI_SEG_INLINE bytes), every
 * rank's in rank order, as reduce_ordered sums it (the same result on
 * every rank): ours from buf, rank i's at offset off of its block (an
 * all_reduce's on its lean line, a reduce's in its record of the
 * call). */
static dr_err tiny_sum(const dri_msg_id *id, void *buf, size_t bytes, int p,
		       int r, size_t off)
{
	dr_dtype dt = (dr_dtype)id->dtype;
	dr_op op = (dr_op)id->op;
	uint64_t acc[DRI_SEG_INLINE / sizeof(uint64_t)];
	dr_err err = DR_OK;

	copy8(acc, r ? (const char *)dri_cs.blk[0] + off : buf, bytes);
	for (int i = 1; i < p && !err; i++) {
		const void *in = i == r ? buf : (const char *)dri_cs.blk[i] + off;

		err = dri_reduce(acc, in, id->count, dt, op);
	}
	dri_reduce_finish(acc, id->count, dt, op, p);
	copy8(buf, acc, bytes);
	return err;
}

/* Where rank i's tiny data of phase e is, in its block (dri_cs_tiny). */
static size_t tiny_off(uint64_t e)
{
	return (size_t)((const char *)dri_cs_tiny(0, e) -
			(const char *)dri_cs.blk[0]);
}

dr_err dri_cs_lean(dr_group *g, uint64_t seq, dri_coll coll, void *buf,
		   size_t count, dr_dtype dtype, dr_op redop)
{
	const int p = g->size, r = g->rank;
	dri_seg_rank *me = dri_cs.blk[r];
	size_t bytes = coll == DRI_ALL_REDUCE ? count * dr_dtype_size(dtype) : 0;
	dri_msg_id id = { .coll = coll, .seq = seq, .count = count,
			  .dtype = coll == DRI_ALL_REDUCE ? (int32_t)dtype : -1,
			  .op = coll == DRI_ALL_REDUCE ? (int32_t)redop : -1,
			  .root = -1 };
	uint64_t n = dri_cs.ncall++, e;
	dri_seg_lean *lean;
	int32_t mark;
	int k = (int)(n % DRI_SEG_CALLS);
	int looks = looks_max(), i = 0, prev = 0;
	dr_err err;

	/* begin and arrive (coll_shm_flags.c), all_reduce_tiny's data: the
	 * stores to the lean line of the phase (the record's copy, the
	 * data, up) together, so that the line, which the others read as
	 * they wait, is taken from them once; it was taken back for
	 * writing as the call before ended (seg.h).  Then up's line, for a
	 * peer that waits the general way (nobody reads it meanwhile). */
	e = ++dri_cs.phase;
	lean = &me->lean[e & 1];
	mark = dri_cs_copy_mark(&id);
	dri_cs_write_rec(&lean->last, &id, e, mark, NULL, NULL, 0);
	if (bytes)
		copy8(&lean->tiny[(e >> 1) & 1], buf, bytes);
	__atomic_store_n(&lean->up, e, __ATOMIC_RELEASE);
	dri_cs_write_rec(&me->last, &id, e, mark, NULL, NULL, 0);
	/* Arrive with a plain store, and look at the others before the
	 * fence that orders it before the wake-ups: their lines come in
	 * while ours goes out (one transfer's time, not two in turn; the
	 * floor's way).  Sleepers are looked for either way. */
	__atomic_store_n(&me->up, e, __ATOMIC_RELEASE);
	/* What nobody waits for comes after the arrival, while the
	 * others' lines come in: the last peer's arrival to ours is the
	 * round's period, the rest of the call is not (docs/small-calls-log-2.md).
	 * The record of the call's number is read only once the copy is
	 * of a later call, or the call is past (settle, which a call
	 * that differs fails either way). */
	dri_cs_put_rec(r, n, &id, e, NULL, 0);
	dri_ctl_world_begin(&id);
	dri_cs_note_cpu(r);
	for (; i < p; i++)
		if (i != r && !arrived(i, e, &id, k, looks, &prev))
			break;
	/* Every rank here: each is done with our line of e + 1 (they read
	 * it at e - 1), which our next call writes; the transfer that
	 * takes it back runs while this call ends and the next begins
	 * (seg.h), instead of after that call's stores. */
	if (i == p)
		dri_cs_take_line(&me->lean[(e + 1) & 1]);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	dri_cs_wake(p);
	/* (a rooted call still open that is not ours on every rank: the
	 * general way's check names who differs) */
	if (i == p &&
	    (!dri_cs.open || dri_cs_close_quick(p, r, n, seq, prev))) {
		if (e > dri_cs.safe)
			dri_cs.safe = e;
		/* (a tiny sum fails only for what dri_args_check rejects) */
		if (!bytes ||
		    !(err = tiny_sum(&id, buf, bytes, p, r, tiny_off(e)))) {
			/* every rank's call is ours: the next copy says so */
			dri_cs.checked = seq + 1;
			dri_ctl_world_end();
			return DR_OK;
		}
		dri_ctl_world_adopt();
	} else {
		/* The general way from here (run_call's struct call after
		 * dri_cs_phase's begin and arrive), its deadline from the
		 * first wait that goes into the transport. */
		dri_op op = { .id = id, .group = g, .buf = buf, .count = count,
			      .dtype = dtype, .redop = redop, .root = -1,
			      .device = -1 };
		struct call c = { .op = &op, .p = p, .r = r, .first = 1,
				  .from = -1, .half = -1, .sub = -1, .e = e,
				  .undated = &op };

		c.rec.n = n;
		c.rec.first = c.rec.last = e;
		c.rec.id = op.id;
		dri_ctl_world_adopt();
		err = dri_cs_phase_wait(&c);
		if (!err && bytes)
			err = tiny_sum(&id, buf, bytes, p, r, tiny_off(e));
	}
	return dri_call_end(coll, err);
}

/* Keeps off the writers' lines for DRI_CS_STEP_NS (dri_cs.lead). */
static void step_back(void)
{
	const int64_t until = dri_now_ns() + DRI_CS_STEP_NS;

	do {
		for (int j = 0; j < 16; j++)
			dri_cpu_relax();
	} while (dri_now_ns() < until);
}

/* Whether rank i's record of call n (index k) is there for phase e and is
 * our call, after at most `looks` looks; *ahead cleared if it was not
 * there at the first, and then, if *step is 1, a step back before the
 * next look (*step 2 after it: one a call). */
static int rec_arrived(int i, uint64_t e, const dri_msg_id *id, int k,
		       int looks, int *ahead, int *step)
{
	const dri_seg_call *c = &dri_cs.blk[i]->call[k].c;
	dri_msg_id theirs;

	for (int n = 0; !dri_shm_read_at(c, id->seq, e, &theirs); n++) {
		*ahead = 0;
		if (n >= looks)
			return 0;
		if (*step == 1) {
			step_back();
			*step = 2;
		} else {
			dri_cpu_relax();
		}
	}
	return dri_cs_same_call(&theirs, id);
}

/* The reader's lock-step count after a read (dri_cs.lead): ahead, its
 * writers were there at its first look; stepped, it stepped back. */
static void lead_note(dri_coll coll, int root, int ahead, int stepped)
{
	struct dri_cs_lead *l = &dri_cs.lead;

	if (root != l->root || (int)coll != l->coll) {
		l->root = root;
		l->coll = (int)coll;
		l->behind = l->judge = 0;
	} else if (stepped) {
		l->behind = 0;
		l->judge = 1;
	} else if (l->judge && !ahead) {
		/* behind again before DRI_CS_LEAD_JUDGE reads: the step
		 * did not help (the writers wait for this rank) */
		if (l->every < DRI_CS_LEAD_EVERY_MAX)
			l->every *= 2;
		l->judge = 0;
		l->behind = 1;
	} else if (l->judge) {
		if (++l->judge > DRI_CS_LEAD_JUDGE) {
			l->every = DRI_CS_LEAD_EVERY;
			l->judge = 0;
		}
	} else {
		l->behind = ahead ? 0 : l->behind + 1;
	}
}

int dri_cs_lean_rooted(dr_group *g, uint64_t seq, dri_coll coll, void *buf,
		       size_t count, dr_dtype dtype, dr_op redop, int root,
		       dr_err *err)
{
	const int p = g->size, r = g->rank;
	const size_t bytes = count * dr_dtype_size(dtype);
	const uint64_t n = dri_cs.ncall;
	const int k = (int)(n % DRI_SEG_CALLS);
	/* a broadcast's root and a reduce's others write; the rest read
	 * the root's record (from), or every other's (-1) */
	const int from = coll == DRI_BROADCAST ? root : -1;
	int looks = looks_max(), i = 0, ahead = 1, step;
	struct rec rec = { .n = n, .open = 1,
			   .id = { .coll = coll, .seq = seq, .count = count,
				   .dtype = (int32_t)dtype,
				   .op = coll == DRI_REDUCE ? (int32_t)redop : -1,
				   .root = root } };
	const dri_msg_id *id = &rec.id;

	/* (a reduce goes this way only where the general one takes it as
	 * rooted: coll_shm_reduce.c's reduce_rooted) */
	if ((coll == DRI_REDUCE && !dri_cs.sub_bytes) ||
	    !dri_cs_settle_quick(p, r, n))
		return 0;
	/* (count 0: the copies of no bytes are still given a buffer) */
	buf = dri_or_empty(buf);
	dri_cs.ncall++;
	dri_ctl_world_begin(id);
	dri_cs_note_cpu(r);
	rec.first = rec.last = ++dri_cs.phase;
	/* The line of the record this rank writes TAKE_AHEAD calls later:
	 * the others read it last when they settled the call it holds now,
	 * LAG - TAKE_AHEAD calls ago or earlier. */
	dri_cs_take_line(&dri_cs.blk[r]->call[(k + TAKE_AHEAD) % DRI_SEG_CALLS]);
	if (from < 0 ? r != root : r == root) {
		/* post (coll_shm_flags.c), the data in the record */
		dri_cs_put_call(r, n, id, rec.first, buf, bytes);
		dri_cs_arrive_at(r, rec.first, p);
		dri_cs_keep(&rec);
		dri_ctl_world_end();
		*err = DR_OK;
		return 1;
	}
	dri_cs_put_call(r, n, id, rec.first, NULL, 0);
	step = looks && !dri_cs.lead.judge &&
	       dri_cs.lead.behind >= dri_cs.lead.every &&
	       root == dri_cs.lead.root && (int)coll == dri_cs.lead.coll;
	for (; i < p; i++)
		if (i != r && (from < 0 || i == from) &&
		    !rec_arrived(i, rec.first, id, k, looks, &ahead, &step))
			break;
	lead_note(coll, root, ahead, step == 2);
	*err = DR_OK;
	if (i < p) {
		/* The general way from here: take's wait (after begin), its
		 * deadline from the first wait in the transport. */
		dri_op op = { .id = *id, .group = g, .buf = buf, .count = count,
			      .dtype = dtype, .redop = redop, .root = root,
			      .device = -1 };
		struct call c = { .op = &op, .p = p, .r = r, .first = 1,
				  .from = -1, .half = -1, .sub = -1,
				  .e = rec.first, .inl = 1, .undated = &op };

		c.rec = rec;
		c.rec.open = 0;
		dri_ctl_world_adopt();
		*err = dri_cs_take_wait(&c, from);
		rec.open = c.rec.open;
	} else {
		/* every record ours: a reduce's root has checked them all,
		 * a broadcast's reader only its root's, all when p = 2 (its
		 * settle would read the root's record of the call again, a
		 * line the root takes for writing at about that time:
		 * docs/small-calls-log-2.md) */
		rec.open = dri_cs_reader_open(p, from);
		if (!rec.open) {
			/* Its next copy says so (the writers close the call
			 * on that word: dri_cs_close_quick), and every
			 * writer, whose record of this phase is here, is
			 * done with the phases before it: as if its up had
			 * reached this one, for a tiny all_reduce next. */
			dri_cs.checked = seq + 1;
			if (rec.first > dri_cs.safe)
				dri_cs.safe = rec.first;
		}
	}
	if (!*err) {
		if (from >= 0)
			copy8(buf, dri_cs.blk[root]->call[k].data, bytes);
		else
			*err = tiny_sum(id, buf, bytes, p, r,
					offsetof(dri_seg_rank, call) +
					(size_t)k * sizeof(dri_seg_rec) +
					offsetof(dri_seg_rec, data));
		/* take's prefetch of the writers' next records, where they
		 * run ahead: one that does not (its record of this call
		 * came after our first look) is about to write the next,
		 * and a copy of the line taken now would have to be taken
		 * back from us first, a transfer in its call
		 * (docs/small-calls-log-2.md) */
		for (int j = 0; ahead && j < p; j++)
			if (j != r && (from < 0 || j == from))
				__builtin_prefetch(&dri_cs.blk[j]->call[
					(k + 1) % DRI_SEG_CALLS]);
	}
	if (!*err)
		dri_cs_arrive_later(r, rec.first, p);
	dri_cs_keep(&rec);
	if (i == p) {
		/* (not handed over: the world slot is still ours) */
		if (!*err) {
			dri_ctl_world_end();
			return 1;
		}
		dri_ctl_world_adopt();
	}
	dri_call_end(coll, *err);
	return 1;
}
