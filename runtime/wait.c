/*
 * wait.c - the waits of calls: until a call's requests complete
 * (dri_waitall), until the segment's flags say its peers are there
 * (dri_transport_flag_wait), with the call's deadline, the announcement
 * of the call to the peers it waits for (announce.c), and the checks that
 * name a mismatch with the collectives through the flags.  The waiting
 * itself is the loop's (loop.h: one step at a time, under its lock).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "announce.h"
#include "clock.h"
#include "copy.h"
#include "ctl.h"
#include "error.h"
#include "links.h"
#include "loop.h"
#include "match.h"
#include "shm.h"
#include "timeout.h"
#include "transport.h"

/* A wait for a message of a collective that has lasted this long tells
 * the peers it waits for which call it is in (a DRI_WIRE_CALL frame, once
 * per wait): two ranks in different calls of one seq may each wait for a
 * message of the other that never comes (a reduce's root against an
 * all_reduce), and no data frame would show the difference.  The peer
 * compares the call with its own of that seq, now or once it gets there,
 * and fails the group with DR_EMISMATCH instead of the timeout. */
#define ANNOUNCE_MS 50

#define RANK dri_links.rank
#define SIZE dri_links.size

/* "; not yet in this call: rank 5 (...)" for a timeout's message: the rank
 * we wait on may only be the neighbour of the one that holds the call up
 * (a stopped rank's peers wait on each other in a ring), so say which
 * ranks of this host have not come (ctl.c); "" if none is known. */
static void behind(const dri_msg_id *id, char *out, size_t len)
{
	size_t n;

	if (id->coll == DRI_P2P || len < 3) {
		out[0] = 0;
		return;
	}
	memcpy(out, "; ", 3);
	n = dri_ctl_behind(id->group_id, id->seq, RANK, out + 2, len - 2);
	if (!n)
		out[0] = 0;
}

static int64_t now_us(void)
{
	return dri_now_ns() / 1000;
}

/* Removes an incomplete request from wherever the transport holds it. */
static void cancel_locked(dri_req *r)
{
	if (r->complete)
		return;
	if (!r->is_send) {
		dri_match_cancel(r);
	} else if (r->peer >= 0 && r->peer < SIZE) {
		struct dri_peer *p = PEER(r->peer);
		if (!p)
			return; /* (never queued: it was failed at once) */
		dri_req **pp = &p->sq_head, *prev = NULL;
		for (; *pp && *pp != r; prev = *pp, pp = &(*pp)->next)
			;
		if (*pp) {
			if (r == p->sq_head && p->shdr_ready) {
				/* Half on the wire: finish it from a copy. */
				size_t rest = r->len - r->done;
				dri_req *c = malloc(sizeof(*c) + rest);
				if (c) {
					*c = *r;
					c->buf = (char *)(c + 1);
					dri_copy(c->buf,
						 (char *)r->buf + r->done,
						 rest);
					c->len = rest;
					c->done = 0;
					c->priv = DRI_REQ_OWNED;
					*pp = c;
					if (p->sq_tail == r)
						p->sq_tail = c;
				} else {
					dri_loop_abort(DR_ENOMEM, "out of memory");
				}
			} else {
				*pp = r->next;
				if (p->sq_tail == r)
					p->sq_tail = prev;
			}
		}
	}
	r->next = NULL;
	r->status = DR_ETIMEDOUT;
}

void dri_req_abandon(dri_req *r, dr_err st)
{
	dri_loop_lock();
	if (!__atomic_load_n(&r->complete, __ATOMIC_ACQUIRE)) {
		cancel_locked(r);
		r->status = st;
		__atomic_store_n(&r->complete, 1, __ATOMIC_RELEASE);
	}
	dri_loop_unlock();
}

/* A receive of a call of the world group from a peer that is in the
 * world call of the same seq through flags instead (coll_shm.c): the
 * peer will never send it, so the calls differ.  Looked at before each
 * sleep.  The lower rank is named first, as the flags name them. */
static void check_flag_peers_locked(const dri_req *reqs, int n)
{
	for (int k = 0; k < n && !dri_loop_error(); k++) {
		const dri_req *r = &reqs[k];
		dri_msg_id pid;

		if (r->complete || r->id.group_id || r->id.coll == DRI_P2P ||
		    !dri_shm_peer_call(r->peer, r->id.seq, &pid))
			continue;
		if (r->peer < RANK)
			dri_loop_fail(dri_calls_differ(r->peer, &pid, RANK, &r->id));
		else
			dri_loop_fail(dri_calls_differ(RANK, &r->id, r->peer, &pid));
	}
}

/* The deadline of a wait inside the call id names, and the timeout it
 * came from: the call's, or for an id without one (p2p) the job's
 * timeout from now. */
static void call_deadline(const dri_msg_id *id, int64_t *deadline,
			  int64_t *timeout_ms)
{
	if (id->deadline) {
		*deadline = id->deadline;
		*timeout_ms = id->timeout_ms;
	} else {
		*timeout_ms = dri_timeout_ms();
		*deadline = dri_deadline(*timeout_ms);
	}
}

dr_err dri_transport_flag_wait(const dri_msg_id *id, int (*waiting_for)(void *),
			       void *arg, int64_t t0_ms, int spin)
{
	int64_t timeout_ms, deadline;
	int64_t spin_end = spin && dri_loop_spin_us(0) ? now_us() + dri_loop_spin_us(0) : 0;
	int shown = -1;
	dr_err err;

	call_deadline(id, &deadline, &timeout_ms);
	dri_loop_lock();
	while (!dri_loop_error()) {
		int late = waiting_for(arg);
		int64_t now = dri_now_ms(), left = deadline - now;

		if (late < 0)
			break;
		dri_loop_fail(dri_match_stale(id, now - t0_ms));
		if (dri_loop_error())
			break;
		if (late != shown) /* for the launcher: the rank we wait for */
			dri_ctl_wait(shown = late, 0);
		if (PEER(late) && PEER(late)->state == P_GONE) {
			/* It said goodbye (destroy, or a return from main)
			 * before it came: its flag will not move, and its
			 * death is no longer watched. */
			dri_loop_abort(DR_EPEER, "rank %d: rank %d left the "
				       "process group while this rank waits "
				       "for it", RANK, late);
			break;
		}
		dri_shm_watch(late); /* its death, as for a receive from it */
		if (left <= 0) {
			char what[256], why[512];

			dri_msg_id_describe(id, what, sizeof(what));
			behind(id, why, sizeof(why));
			dri_loop_abort(DR_ETIMEDOUT, "rank %d: timed out after %lld "
				     "ms in %s (seq %llu) waiting for rank %d%s",
				     RANK, (long long)timeout_ms, what,
				     (unsigned long long)id->seq, late, why);
			break;
		}
		dri_loop_step(left, spin_end && now_us() < spin_end);
	}
	err = dri_loop_error();
	if (err)
		dri_fail(err, "%s", dri_loop_message());
	dri_loop_unlock();
	return err;
}

dr_err dri_transport_stale_check(const dri_msg_id *id)
{
	dr_err err;

	dri_loop_lock();
	if (!dri_loop_error()) {
		dri_loop_drain();
		dri_loop_fail(dri_match_stale(id, DRI_LATE_MS));
	}
	err = dri_loop_error();
	if (err)
		dri_fail(err, "%s", dri_loop_message());
	dri_loop_unlock();
	return err;
}

/* deadline 0: the earliest of the requests' calls' (call_deadline); else
 * this one, made from timeout_ms (the monitored barrier's, not fatal). */
static dr_err wait_reqs(dri_req *reqs, int n, int64_t deadline,
			int64_t timeout_ms, int fatal)
{
	int64_t spin_end = dri_loop_spin_us(0) ? now_us() + dri_loop_spin_us(0) : 0;
	/* when to tell the peers our call (fatal waits: the monitored
	 * barrier's late ranks are not a mismatch); 0 once done */
	int64_t announce_at = fatal ? dri_now_ms() + ANNOUNCE_MS : 0;
	dr_err err = DR_OK;
	int i = 0, shown = -1;

	if (!deadline)
		for (int k = 0; k < n; k++) {
			int64_t d, t;

			call_deadline(&reqs[k].id, &d, &t);
			if (!deadline || d < deadline) {
				deadline = d;
				timeout_ms = t;
			}
		}
	dri_loop_lock();
	for (;;) {
		while (i < n && __atomic_load_n(&reqs[i].complete, __ATOMIC_ACQUIRE))
			i++;
		if (i == n || dri_loop_error())
			break;
		if (i != shown) /* for the launcher: the peer we wait on */
			dri_ctl_wait(reqs[shown = i].peer, reqs[i].is_send);
		int64_t left = deadline - dri_now_ms();
		if (left <= 0) {
			char what[256], why[512];
			dri_req *r = &reqs[i];
			dri_msg_id_describe(&r->id, what, sizeof(what));
			if (!fatal) {
				for (int k = i; k < n; k++)
					cancel_locked(&reqs[k]);
				dri_loop_unlock();
				return dri_fail(DR_ETIMEDOUT, "rank %d: timed out "
						"after %lld ms in %s (seq %llu) "
						"waiting to %s rank %d", RANK,
						(long long)timeout_ms, what,
						(unsigned long long)r->id.seq,
						r->is_send ? "send to" : "receive from",
						r->peer);
			}
			behind(&r->id, why, sizeof(why));
			dri_loop_abort(DR_ETIMEDOUT, "rank %d: timed out after %lld "
				     "ms in %s (seq %llu) waiting to %s rank %d%s",
				     RANK, (long long)timeout_ms, what,
				     (unsigned long long)r->id.seq,
				     r->is_send ? "send to" : "receive from",
				     r->peer, why);
			break;
		}
		/* Spin while bytes keep moving (a large message streaming
		 * in would otherwise cost a sleep and a wake-up per socket
		 * buffer's worth), block once nothing happened for spin_us. */
		int spinning = spin_end && now_us() < spin_end;
		if (!spinning && dri_shm_npeers()) {
			check_flag_peers_locked(reqs + i, n - i);
			if (dri_loop_error())
				break;
		}
		if (announce_at && !spinning) {
			int64_t now = dri_now_ms();

			if (now >= announce_at) {
				announce_at = 0;
				dri_loop_announce(reqs + i, n - i);
				if (dri_loop_error())
					break;
			} else if (announce_at - now < left) {
				left = announce_at - now;
			}
		}
		if (dri_loop_step(left, spinning) && dri_loop_spin_us(1))
			spin_end = now_us() + dri_loop_spin_us(1);
	}
	for (int k = 0; k < n && !err; k++)
		if (reqs[k].complete && reqs[k].status)
			err = reqs[k].status;
	if (!err && dri_loop_error())
		err = dri_loop_error();
	if (err)
		dri_fail(err, "%s", dri_loop_message());
	dri_loop_unlock();
	return err;
}

dr_err dri_waitall(dri_req *reqs, int n)
{
	return wait_reqs(reqs, n, 0, 0, 1);
}

dr_err dri_waitall_timeout(dri_req *reqs, int n, int64_t timeout_ms)
{
	return wait_reqs(reqs, n, dri_deadline(timeout_ms), timeout_ms, 0);
}

dr_err dri_send(const dri_msg_id *id, int peer, const void *buf, size_t len)
{
	dri_req r;
	dr_err err = dri_isend(&r, id, peer, buf, len);

	return err ? err : dri_waitall(&r, 1);
}

dr_err dri_recv(const dri_msg_id *id, int peer, void *buf, size_t len)
{
	dri_req r;
	dr_err err = dri_irecv(&r, id, peer, buf, len);

	return err ? err : dri_waitall(&r, 1);
}

dr_err dri_sendrecv(const dri_msg_id *id, int to, const void *sbuf, size_t slen,
		    int from, void *rbuf, size_t rlen)
{
	dri_req r[2];
	dr_err err;

	/* Receive first: the payload can then land in rbuf directly. */
	err = dri_irecv(&r[0], id, from, rbuf, rlen);
	if (err)
		return err;
	err = dri_isend(&r[1], id, to, sbuf, slen);
	if (err) {
		dri_loop_lock();
		cancel_locked(&r[0]);
		dri_loop_unlock();
		return err;
	}
	return dri_waitall(r, 2);
}