/*
 * coll_shm.c - the world's collectives through the job's segment, when
 * every rank shares this host's segment: flags and slots in shared
 * memory instead of messages through the rings.
 *
 * This file is the entry: whether a call can go this way now
 * (dri_shm_coll; which calls may, and up to how many ranks, is
 * coll_select.c's table), the quick path of small blocking calls
 * (dri_shm_quick), and which flags algorithm runs each collective
 * (run_call).  The rest:
 *   coll_shm_flags.h/.c   the phase/flag engine: phases, slots, records
 *                         of the calls and their mismatch check, waits;
 *   coll_shm_direct.c     single copy (process_vm_readv);
 *   coll_shm_reduce.c     all_reduce, reduce, reduce_scatter;
 *   coll_shm_move.c       broadcast, gather, scatter, all_to_all(_v).
 */
#include <string.h>

#include "coll.h"
#include "coll_shm.h"
#include "coll_shm_flags.h"
#include "ctl_write.h"
#include "cuda_driver.h"
#include "shm.h"
#include "transport.h"

static dr_err barrier_shm(struct call *c)
{
	return dri_cs_phase(c);
}

static dr_err run_call(dri_op *op);
static dr_err run(struct call *c);

int dri_shm_coll(dri_op *op, dr_err *err)
{
	const dr_group *g = op->group;
	int fresh;

	if (!dri_cs.configured || dri_cs.generation != dri_shm_generation())
		dri_cs_configure();
	/* (which calls, and up to how many ranks: coll_select.c's table) */
	if (dri_cs.off || op->id.group_id || !dri_shm_all_local() ||
	    g->size > DRI_SEG_SHM_MAX)
		return 0;
	fresh = dri_cs.nblk != g->size;
	if (fresh) {
		for (int i = 0; i < g->size; i++)
			dri_cs.blk[i] = dri_shm_blk(i);
		dri_cs.nblk = g->size;
		dri_cs_warm(g->rank, 0);
	}
	*err = run_call(op);
	if (fresh)
		dri_cs_warm(g->rank, 1);
	return 1;
}

/* Runs op through the flags (dri_shm_coll found that it applies). */
static dr_err run_call(dri_op *op)
{
	const dr_group *g = op->group;
	struct call c;

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
	return run(&c);
}

/* Runs call c (its op, p, r, tree, first, from/half/sub -1 and t0 or
 * undated set; its number is taken here) as its collective's algorithm,
 * the rooted calls before it settled first; keeps its record for
 * settle. */
static dr_err run(struct call *c)
{
	const dri_op *op = c->op;
	dr_err err;

	c->rec.n = dri_cs.ncall++;
	c->rec.id = op->id;
	/* A rooted call may have returned before the others saw it: an
	 * abort since (a peer's mismatch, its death) fails this one. */
	if (dri_cs_any_open()) {
		if (dri_shm_pending() &&
		    (err = dri_transport_stale_check(&op->id)))
			return err;
		if (!c->tree && (err = dri_cs_settle(c)))
			return err;
	}
	switch (op->id.coll) {
	case DRI_BARRIER:
		err = barrier_shm(c);
		break;
	case DRI_ALL_REDUCE:
		err = dri_cs_all_reduce(c);
		break;
	case DRI_BROADCAST:
		err = dri_cs_broadcast(c);
		break;
	case DRI_REDUCE:
		err = dri_cs_reduce(c);
		break;
	case DRI_ALL_GATHER:
		err = dri_cs_gather(c, -1);
		break;
	case DRI_GATHER:
		err = dri_cs_gather(c, op->root);
		break;
	case DRI_SCATTER:
		err = dri_cs_spread(c, 0);
		break;
	case DRI_REDUCE_SCATTER:
		err = dri_cs_reduce_scatter(c);
		break;
	case DRI_ALL_TO_ALL_V:
		err = dri_cs_a2av(c);
		break;
	default:
		err = dri_cs_spread(c, 1);
		break;
	}
	/* A call with no data still meets the others once: its flags carry
	 * the mismatch check, and every rank's phases stay in step.  (On an
	 * error, the caller aborts the group: the others wait for us.) */
	if (!err && c->first)
		err = dri_cs_phase(c);
	dri_cs_keep(&c->rec);
	return err;
}

/* dri_shm_quick's test, once the world is idle (dri_world_take_seq):
 * what dri_shm_coll would find, from what its first call set up (that
 * call takes the usual way; rooted calls left to settle are settled in
 * run_call either way).  dri_cs is the world's calls' state, which the
 * world's progress thread writes while it runs one: read only here,
 * after it. */
static int quick_ok(void *arg)
{
	const dr_group *g = arg;

	return dri_cs.configured && dri_cs.generation == dri_shm_generation() &&
	       !dri_cs.off && dri_cs.nblk == g->size && dri_shm_all_local();
}

/* A blocking broadcast or reduce of at most DRI_SEG_INLINE bytes (its
 * number taken), flat: the engine's steps (run: settle, then post, or
 * take and done) without what a call through dri_submit and dri_run_op
 * adds around them: the copy and order of the op, the thread's control
 * block record (the world slot instead), the deadline (set only if a
 * wait goes into the transport, from then: await in coll_shm_flags.c).
 * Its control block, abort rule and errors are dri_run_op's. */
static dr_err quick_rooted(dri_op *op)
{
	const dr_group *g = op->group;
	struct call c = { .op = op, .p = g->size, .r = g->rank, .first = 1,
			  .from = -1, .half = -1, .sub = -1, .undated = op };

	dri_ctl_world_begin(&op->id);
	dri_ctl_world_adopt();
	return dri_call_end(op->id.coll, run(&c));
}

/* How long the end of init waits at most for the others to leave its
 * closing barrier: their work after it (dri_cs_warm), or their next
 * slice with more ranks than CPUs.  Nothing depends on it but the time
 * of the first call. */
#define LEAVE_WAIT_NS 4000000

void dri_shm_coll_leave_init(int rank)
{
	dr_group *g = dri_world();

	/* (where the small calls take the lean way: dri_shm_quick's test) */
	if (g && g->size <= DRI_SHM_FLAT_MAX && quick_ok(g))
		(void)dri_cs_leave(rank, LEAVE_WAIT_NS);
}

int dri_shm_quick(dri_coll coll, void *buf, size_t count, dr_dtype dtype,
		  dr_op redop, int root, dr_err *err)
{
	dr_group *g = dri_world();
	uint64_t seq;
	dri_op op;

	/* (which calls, and how small: coll_select.c's table) */
	if (!g || g->size > DRI_SHM_FLAT_MAX)
		return 0;
	if (count && dri_cuda_ptr_device(buf) >= 0)
		return 0;
	/* dri_submit's order: a failed group fails the call before it
	 * takes a number. */
	if ((*err = dri_transport_check()))
		return 1;
	if (!dri_world_take_seq(quick_ok, g, &seq))
		return 0;
	if (root < 0 && dri_cs_lean_ok(g->size, g->rank,
				      coll == DRI_ALL_REDUCE)) {
		*err = dri_cs_lean(g, seq, coll, buf, count, dtype, redop);
		return 1;
	}
	if (root >= 0 && dri_cs_lean_rooted(g, seq, coll, buf, count, dtype,
					    redop, root, err))
		return 1;
	/* the op as dri_coll_op fills it */
	memset(&op, 0, sizeof(op));
	op.id.seq = seq;
	op.id.coll = coll;
	op.id.count = count;
	op.id.dtype = coll == DRI_BARRIER ? -1 : (int32_t)dtype;
	op.id.op = coll == DRI_ALL_REDUCE || coll == DRI_REDUCE ? (int32_t)redop
								: -1;
	op.id.root = root;
	op.group = g;
	op.sendbuf = dri_or_empty(NULL);
	op.buf = dri_or_empty(buf);
	op.count = count;
	op.dtype = dtype;
	op.redop = redop;
	op.root = root;
	op.device = -1;
	if (root >= 0) {
		*err = quick_rooted(&op);
		return 1;
	}
	op.run = run_call;
	*err = dri_run_op(&op);
	return 1;
}
