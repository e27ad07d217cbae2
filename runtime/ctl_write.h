/*
 * ctl_write.h - the writers' side of this rank's control block (ctl.h's
 * layout) that runs on every call: the seqlock of a slot, a call's
 * start and end, the flight record's ring, and the world's blocking
 * quick calls' begin and end (coll_shm_quick.c).  Inline, because those
 * run between one arrival of a small call and the next, where the cost
 * of a call between files shows (docs/small-calls.md, issue 35); the
 * rest of the writers is ctl.c's.  Only libdistrun includes it.
 */
#ifndef DRI_CTL_WRITE_H
#define DRI_CTL_WRITE_H

#include <time.h>

#include "ctl.h"
#include "distrun.h"
#include "error.h"

/* This rank's control block in the segment (NULL: nothing published;
 * ctl.c's attach and detach set it). */
extern dri_ctl *dri_ctl_own;
/* Coarse by default: a fraction of the precise clock's cost, to the
 * kernel's tick (1-4 ms), which stall reports, time in collectives (an
 * unbiased sum over many calls) and barrier skew (>= 50 ms) need; exact
 * with DISTRUN_CTL=precise, which distrun sets for --trace. */
extern clockid_t dri_ctl_clk;

static inline int64_t dri_ctl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(dri_ctl_clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The seqlock around a slot's update: odd while written. */
static inline void dri_ctl_slot_open(dri_ctl_slot *s)
{
	__atomic_store_n(&s->ver, s->ver + 1, __ATOMIC_RELAXED);
	DRI_CTL_FENCE(__ATOMIC_RELEASE);
}

static inline void dri_ctl_slot_close(dri_ctl_slot *s)
{
	__atomic_store_n(&s->ver, s->ver + 1, __ATOMIC_RELEASE);
}

/* A call starts: into c (a slot's, open if s is set). */
static inline void dri_ctl_call_fill(dri_ctl_call *c, const dri_msg_id *id,
				     int peer, int peer_send)
{
	c->group_id = id->group_id;
	c->coll = id->coll;
	c->seq = id->seq;
	c->count = id->count;
	c->bytes = id->dtype >= 0 ? id->count * dr_dtype_size(id->dtype) : 0;
	c->dtype = id->dtype;
	c->op = id->op;
	c->root = id->root;
	c->peer = peer;
	c->peer_send = peer_send;
	c->status = 0;
	c->t_start = dri_ctl_now_ns();
	c->t_end = 0;
}

/* A call starts in slot s (NULL: none, the ring only), written into c:
 * the slot's call, or the thread's own for a group without a slot. */
static inline void dri_ctl_slot_begin(dri_ctl_slot *s, dri_ctl_call *c,
				      const dri_msg_id *id, int peer,
				      int peer_send)
{
	if (s)
		dri_ctl_slot_open(s);
	dri_ctl_call_fill(c, id, peer, peer_send);
	if (s) {
		s->state = DRI_CTL_IN_CALL;
		dri_ctl_slot_close(s);
	}
}

/* Call c ended with err at t: its slot s (if any) goes idle, and it
 * goes into the ring. */
static inline void dri_ctl_call_finish(dri_ctl_slot *s, dri_ctl_call *c,
				       dr_err err, int64_t t)
{
	dri_ctl *own = dri_ctl_own;
	dri_ctl_rec *r;
	uint64_t idx;
	int world = c->group_id == 0 && c->coll != DRI_P2P;

	if (s)
		dri_ctl_slot_open(s);
	c->t_end = t;
	c->status = err;
	if (s) {
		s->state = DRI_CTL_IDLE;
		s->ncalls++;
		s->ns_in_calls += t - c->t_start;
		dri_ctl_slot_close(s);
	}
	if (world) {
		/* The world's ring has one writer: no atomic add, the head
		 * moves once the record is whole. */
		idx = own->ring_head[DRI_CTL_WORLD];
		r = &own->ring_world[idx % DRI_CTL_RING_WORLD];
	} else {
		idx = __atomic_fetch_add(&own->ring_head[DRI_CTL_OTHER], 1,
					 __ATOMIC_RELAXED);
		r = &own->ring_other[idx % DRI_CTL_RING_OTHER];
	}
	__atomic_store_n(&r->ver, 2 * idx + 1, __ATOMIC_RELAXED);
	DRI_CTL_FENCE(__ATOMIC_RELEASE);
	r->call = *c;
	__atomic_store_n(&r->ver, 2 * idx + 2, __ATOMIC_RELEASE);
	if (world)
		__atomic_store_n(&own->ring_head[DRI_CTL_WORLD], idx + 1,
				 __ATOMIC_RELEASE);
	__atomic_store_n(&own->t_user, c->t_end, __ATOMIC_RELAXED);
}

/* ctl.h's dri_ctl_world_begin and dri_ctl_world_end. */
static inline void dri_ctl_world_begin(const dri_msg_id *id)
{
	dri_ctl_slot *s;

	if (!dri_ctl_own)
		return;
	s = &dri_ctl_own->slot[DRI_CTL_WORLD];
	dri_ctl_slot_begin(s, &s->call, id, -1, 0);
}

static inline void dri_ctl_world_end(void)
{
	dri_ctl_slot *s;

	if (!dri_ctl_own)
		return;
	s = &dri_ctl_own->slot[DRI_CTL_WORLD];
	dri_ctl_call_finish(s, &s->call, DR_OK, dri_ctl_now_ns());
}

#endif /* DRI_CTL_WRITE_H */
