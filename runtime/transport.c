/*
 * transport.c - the loop that moves every peer's bytes, the waits of
 * calls, abort and stop; the entry points of transport.h.
 *
 * The transport is built in rooms (links.h draws them): tcp.c makes the
 * connections to peers on other hosts (the HMAC handshake), link_shm.c
 * reaches peers on this host through the segment's rings (shm.c), and
 * both are link operations (send, receive, poll fd, start state) behind
 * one table; frames.c writes and reads the stream of frames over either,
 * match.c places what arrives (receives, the unexpected queue, parking),
 * announce.c keeps the calls made and announced.  They return what they
 * find (an error to abort with, a peer whose connection came up, a
 * parked message to read) to this file, which acts on it.
 *
 * Threads: one mutex guards everything; one thread at a time (the poller)
 * blocks in poll() without it, and the others wait on a condition variable
 * while the poller completes their requests too.  The poller watches every
 * connection, so a peer that dies is noticed whatever we wait for.
 *
 * Peers on this host go through shared memory: the same stream of frames,
 * so everything above the bytes (matching, mismatch checks, parking, ABORT
 * and BYE) is the same code for both.  Such a peer is up from the start
 * (the segment is the job's own: no handshake), and a wait with only
 * shared-memory peers sleeps on a futex instead of poll().  Collectives
 * of the world through the segment's flags and slots (coll_shm.c) wait
 * here too (dri_transport_flag_wait), with the same abort, death and
 * mismatch checks.
 *
 * A wait for a message of a collective that has lasted ANNOUNCE_MS
 * (wait.c) tells the peers it waits for which call it is in (announce.c
 * says why).
 *
 * Failure is final: a mismatch, a dead peer or a timeout aborts the whole
 * transport; connected peers get an ABORT frame (with the message) or see
 * the connection close, so they fail too instead of hanging, and later
 * calls fail at once.  A rank that leaves on purpose sends BYE first.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "announce.h"
#include "clock.h"
#include "error.h"
#include "frames.h"
#include "links.h"
#include "match.h"
#include "seg.h"
#include "shm.h"
#include "tcp.h"
#include "transport.h"
#include "wire.h"

/* A large message that arrives before its receive is posted is parked
 * (match.c) ... unless nothing at all happens for this long: then parked
 * messages are read into buffers after all.  That keeps eager sends
 * working (two ranks that each send a large message before posting the
 * receive for the other's would otherwise wait for each other for ever). */
#define PARK_MS 10

/* The poll set's entries that are no peer (tcp.h's are below these). */
#define WHO_WAKE (-1)

/* The loop's state: the lock, the poller, the abort. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int on;
	int wake_fd;
	int polling;
	int64_t spin_us;    /* spin before the first block of a wait */
	int64_t flow_us;    /* spin on after an event, before blocking */
	struct pollfd *pfd;
	int *pfd_who; /* WHO_WAKE, tcp.h's, else the peer */
	int cap_pfd;
	dr_err abort_err;
	char abort_msg[1024];
} loop = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
	.wake_fd = -1,
};

#define RANK dri_links.rank
#define SIZE dri_links.size

static void abort_locked(dr_err err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void read_locked(int i);

/* A lost peer (DR_EPEER: its connection closed, its process exited) is
 * often not the cause but the last step of a failure elsewhere: a rank
 * that saw a mismatch sends every peer an ABORT frame and the peers pass
 * it on, but one whose stream to us was mid-frame (a large message half
 * in the ring or the socket) can only close it, and leaves.  So before
 * failing with the loss, read what the other peers already sent, and
 * give them EXPLAIN_MS to say why (and the launcher's abort word): their
 * reason wins.  A peer that truly crashed costs that much time once. */
#define EXPLAIN_MS 100

static int explaining; /* under loop.mu: no nested sweep */

static void explain_locked(void)
{
	int64_t end = dri_now_ms() + EXPLAIN_MS;
	char msg[DRI_SEG_ABORT_MSG + 1];

	explaining = 1;
	for (;;) {
		dr_err e = dri_shm_aborted(msg, sizeof(msg));

		if (e) {
			abort_locked(e, "%s", msg);
			break;
		}
		for (int i = 0; i < SIZE && !loop.abort_err; i++)
			if (PEER(i) && PEER(i)->state == P_UP && !PEER(i)->parked)
				read_locked(i);
		if (loop.abort_err || dri_now_ms() >= end)
			break;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	explaining = 0;
}

/* What a room returned: an error aborts with its message; a lost peer
 * first looks for the reason (above). */
static void fail_locked(dr_err e)
{
	char why[sizeof(loop.abort_msg)];

	if (!e || loop.abort_err)
		return;
	/* A second loss while looking: the first is named.  (A peer's ABORT
	 * that passes on a loss it saw is a reason, frames.c marks it.) */
	if (e == DR_EPEER && explaining &&
	    !strstr(dr_last_error(), DRI_REPORTED_BY))
		return;
	snprintf(why, sizeof(why), "%s", dr_last_error());
	if (e == DR_EPEER)
		explain_locked();
	abort_locked(e, "%s", why);
}

static void wake_locked(void)
{
	uint64_t one = 1;

	if (loop.polling && dri_shm_npeers())
		dri_shm_wake(); /* it may sleep on the futex, not in poll */
	if (loop.polling && loop.wake_fd >= 0 &&
	    write(loop.wake_fd, &one, sizeof(one)) < 0) {
		/* the counter is full: the poller wakes anyway */
	}
}

void dri_transport_wake(void)
{
	pthread_mutex_lock(&loop.mu);
	wake_locked();
	pthread_mutex_unlock(&loop.mu);
}

dr_err dri_transport_listen(const char *host, int rank, int world_size,
			    int *port)
{
	const char *spin;
	dr_err err;

	if (loop.on || dri_tcp_listening())
		return dri_fail(DR_EALREADY, "transport already started");
	loop.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop.wake_fd < 0)
		return dri_fail(DR_ESYS, "eventfd: %s", dri_strerror(errno));
	err = dri_tcp_listen(host, rank, port);
	if (err) {
		close(loop.wake_fd);
		loop.wake_fd = -1;
		return err;
	}
	RANK = rank;
	SIZE = world_size;
	/* A wake-up from a blocking poll costs tens of microseconds on a VM,
	 * more than the message, so a wait polls for a while first.  The
	 * spin yields the core between polls, so a peer that shares the core
	 * (ranks outnumber cores, or the machine is busy) runs at once: a
	 * busy spin without the yield keeps that peer off the core until the
	 * spin ends (distrun.3, DISTRUN_SPIN_US, gives the measurements). */
	spin = getenv("DISTRUN_SPIN_US");
	if (spin && *spin)
		loop.spin_us = loop.flow_us = atoll(spin);
	else {
		loop.spin_us = 100;
		/* Once bytes are moving, another poll is likely to find more:
		 * worth a few microseconds even on a crowded machine. */
		loop.flow_us = 10;
	}
	return DR_OK;
}

static const struct dri_link_ops *link_of(int i)
{
	return dri_shm_is_peer(i) ? &dri_link_shm : &dri_link_tcp;
}

dr_err dri_transport_start(char **addrs, const uint8_t key[32])
{
	dr_err err;

	pthread_mutex_lock(&loop.mu);
	dri_links.link_of = link_of;
	dri_links.peer = calloc((size_t)SIZE, sizeof(*dri_links.peer));
	if (!dri_links.peer) {
		pthread_mutex_unlock(&loop.mu);
		return dri_fail(DR_ENOMEM, "out of memory for %d peers", SIZE);
	}
	/* Strips the shared-memory part of every address. */
	err = dri_shm_start(RANK, SIZE, addrs);
	if (err) {
		free(dri_links.peer);
		dri_links.peer = NULL;
		pthread_mutex_unlock(&loop.mu);
		return err;
	}
	/* A peer in shared memory is up at once (its ring may bring
	 * bytes before we deal with it): its record is made now; the
	 * others' when first used. */
	for (int i = 0; i < SIZE; i++)
		if (i != RANK && dri_shm_is_peer(i) && !dri_peer_get(i)) {
			err = DR_ENOMEM;
			dri_peers_free();
			dri_shm_stop();
			pthread_mutex_unlock(&loop.mu);
			return err;
		}
	dri_tcp_start(addrs, key, dri_shm_ntcp());
	__atomic_store_n(&loop.abort_err, DR_OK, __ATOMIC_RELEASE);
	loop.abort_msg[0] = 0;
	loop.on = 1;
	pthread_mutex_unlock(&loop.mu);
	return DR_OK;
}

/* -------------------------------------------------------- abort */

static void fail_all_locked(dr_err err)
{
	dri_req *r, *next;

	dri_match_fail_all(err);
	for (int i = 0; dri_links.peer && i < SIZE; i++) {
		struct dri_peer *p = PEER(i);
		if (!p)
			continue;
		for (r = p->sq_head; r; r = next) {
			next = r->next;
			r->next = NULL;
			dri_req_finish(r, err);
		}
		p->sq_head = p->sq_tail = NULL;
		if (p->rx_req)
			dri_req_finish(p->rx_req, err);
		p->rx_req = NULL;
		p->rx_msg = NULL; /* freed with the queue */
		free(p->abort_text);
		p->abort_text = NULL;
		p->rx_active = 0;
		dri_peer_park(p, 0);
	}
}

static void vabort_locked(dr_err err, const char *fmt, va_list ap)
{
	dri_wire_hdr h;

	if (loop.abort_err)
		return;
	vsnprintf(loop.abort_msg, sizeof(loop.abort_msg), fmt, ap);
	__atomic_store_n(&loop.abort_err, err, __ATOMIC_RELEASE);
	memset(&h, 0, sizeof(h));
	h.magic = DRI_WIRE_MAGIC;
	h.version = DRI_WIRE_VERSION;
	h.kind = DRI_WIRE_ABORT;
	h.src = RANK;
	h.err = err;
	h.len = strlen(loop.abort_msg);
	for (int i = 0; dri_links.peer && i < SIZE; i++) {
		struct dri_peer *p = PEER(i);
		if (!p)
			continue;
		int torn = p->shdr_ready && (p->shdr_done ||
					     (p->sq_head && p->sq_head->done));
		/* A half-written frame cannot be followed by another: finish
		 * it first if the rest is small enough to go at once, so that
		 * the peer learns why instead of taking a close mid-message
		 * for a crash. */
		if (p->state == P_UP && torn && dri_frames_finish(i))
			torn = 0;
		if (p->state == P_UP && !torn) {
			dri_frames_send_whole(i, &h, loop.abort_msg);
			/* Half-close and keep the fd until stop: closing with
			 * unread data would send a reset, which can destroy
			 * the frame before the peer reads it. */
			if (p->fd >= 0)
				shutdown(p->fd, SHUT_WR);
		} else if (p->state == P_HS_PROOF && p->fd >= 0) {
			/* Our proof is out and the peer may take this
			 * connection (it then counts it up and reads on):
			 * the frame follows the proof, so that it learns why
			 * rather than seeing an up connection close.  If it
			 * drops the connection instead, nothing is lost. */
			dri_frames_send_whole(i, &h, loop.abort_msg);
			shutdown(p->fd, SHUT_WR);
		} else {
			dri_peer_close(p);
		}
		p->state = P_GONE;
	}
	dri_tcp_abort();
	fail_all_locked(err);
	pthread_cond_broadcast(&loop.cv);
	wake_locked();
}

static void abort_locked(dr_err err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vabort_locked(err, fmt, ap);
	va_end(ap);
}

void dri_loop_abort(dr_err err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vabort_locked(err, fmt, ap);
	va_end(ap);
}

void dri_transport_abort(dr_err err, const char *msg)
{
	pthread_mutex_lock(&loop.mu);
	abort_locked(err, "%s", msg);
	pthread_mutex_unlock(&loop.mu);
}

dr_err dri_transport_check(void)
{
	dr_err err;

	/* Every call asks: no lock while nothing has failed. */
	if (!__atomic_load_n(&loop.abort_err, __ATOMIC_ACQUIRE))
		return DR_OK;
	pthread_mutex_lock(&loop.mu);
	err = loop.abort_err;
	if (err)
		dri_fail(DR_EABORTED, "process group aborted: %s", loop.abort_msg);
	pthread_mutex_unlock(&loop.mu);
	return err ? DR_EABORTED : DR_OK;
}

/* ---------------------------------------------- the rooms' events */

/* Peer i's connection came up (tcp.c): what waits for it goes out. */
static void peer_up_locked(int i)
{
	if (i >= 0 && PEER(i) && PEER(i)->sq_head)
		fail_locked(dri_frames_flush(i));
}

/* Peer i's parked message is read after all: into receive r, or (r NULL)
 * into a buffer of the unexpected queue. */
static void unpark_locked(int i, dri_req *r)
{
	fail_locked(dri_frames_unpark(i, r));
	wake_locked(); /* a poller blocked now must watch it for input again */
}

static void read_locked(int i)
{
	fail_locked(dri_frames_read(i));
}

static void flush_locked(int i)
{
	fail_locked(dri_frames_flush(i));
}

/* Makes sure a request to or from peer i can progress. */
static int peer_usable(int i, const char *what)
{
	struct dri_peer *p = dri_peer_get(i);

	if (!p) {
		abort_locked(DR_ENOMEM, "%s", dr_last_error());
		return 0;
	}
	if (p->state == P_GONE) {
		abort_locked(DR_EPEER, "rank %d: cannot %s rank %d: it has "
			     "left the process group", RANK, what, i);
		return 0;
	}
	if (p->state == P_NONE) {
		fail_locked(dri_tcp_connect(i));
		if (!loop.abort_err)
			wake_locked(); /* the poller must watch it */
	}
	dri_shm_watch(i); /* a shared-memory peer: its death, as a close */
	return !loop.abort_err;
}

/* -------------------------------------------------------- sending */

/* Puts send r at the end of peer i's queue; written at once if it is
 * next on an up connection, else when the connection comes up or
 * drains. */
static void sq_push_locked(int i, dri_req *r)
{
	struct dri_peer *p = PEER(i);

	if (p->sq_tail)
		p->sq_tail->next = r;
	else
		p->sq_head = r;
	p->sq_tail = r;
	if (p->state == P_UP && p->sq_head == r)
		flush_locked(i);
	if (!r->complete)
		wake_locked(); /* the poller must watch for POLLOUT */
}

/* Queues a CALL frame of id to peer i in its request r (a slot of the
 * peer's own), behind what we sent it. */
static void queue_call_locked(int i, dri_req *r, const dri_msg_id *id)
{
	dri_req_init(r, id, i, 1, NULL, 0);
	r->kind = DRI_WIRE_CALL;
	sq_push_locked(i, r);
}

/* A wait of a collective has lasted ANNOUNCE_MS: each peer that one of
 * its requests still waits for is told the call (once per call). */
static void announce_locked(const dri_req *reqs, int n)
{
	for (int k = 0; k < n && !loop.abort_err; k++)
		if (dri_call_tell(&reqs[k]))
			queue_call_locked(reqs[k].peer,
					  &PEER(reqs[k].peer)->call_req,
					  &reqs[k].id);
}

dr_err dri_isend(dri_req *req, const dri_msg_id *id, int peer,
		 const void *buf, size_t len)
{
	dri_req_init(req, id, peer, 1, (void *)buf, len);
	pthread_mutex_lock(&loop.mu);
	if (!loop.on || peer < 0 || peer >= SIZE || peer == RANK) {
		pthread_mutex_unlock(&loop.mu);
		return dri_fail(DR_EINVAL, "send to rank %d: not a peer of rank "
				"%d (world size %d)", peer, RANK, SIZE);
	}
	if (loop.abort_err || !peer_usable(peer, "send to")) {
		dri_req_finish(req, loop.abort_err);
		pthread_mutex_unlock(&loop.mu);
		return DR_OK; /* the wait reports it */
	}
	fail_locked(dri_match_note(id));
	if (loop.abort_err) {
		dri_req_finish(req, loop.abort_err);
		pthread_mutex_unlock(&loop.mu);
		return DR_OK;
	}
	sq_push_locked(peer, req);
	pthread_mutex_unlock(&loop.mu);
	return DR_OK;
}

void dri_give_up(const dri_msg_id *id, int peer)
{
	struct dri_peer *p;

	pthread_mutex_lock(&loop.mu);
	if (!loop.on || loop.abort_err || peer < 0 || peer >= SIZE ||
	    peer == RANK)
		goto out;
	p = dri_peer_get(peer);
	if (!p || p->state == P_GONE)
		goto out; /* (out of memory: the monitor still fails the call) */
	if (p->gave_busy && !p->gave_req.complete)
		goto out; /* one in flight: the peer is far behind anyway */
	/* Not connected: it waits in the queue, without a connection of
	 * ours (a rank that died must not fail the group through it), for
	 * the late rank's own connection (peer_up_locked sends it). */
	p->gave_busy = 1;
	queue_call_locked(peer, &p->gave_req, id);
out:
	pthread_mutex_unlock(&loop.mu);
}

/* -------------------------------------------------------- receiving */

dr_err dri_irecv(dri_req *req, const dri_msg_id *id, int peer, void *buf,
		 size_t len)
{
	dr_err err;
	int got;

	dri_req_init(req, id, peer, 0, buf, len);
	pthread_mutex_lock(&loop.mu);
	if (!loop.on || peer == RANK || peer >= SIZE ||
	    (peer < 0 && peer != DR_ANY_SOURCE)) {
		pthread_mutex_unlock(&loop.mu);
		return dri_fail(DR_EINVAL, "receive from rank %d: not a peer of "
				"rank %d (world size %d)", peer, RANK, SIZE);
	}
	if (loop.abort_err) {
		dri_req_finish(req, loop.abort_err);
		goto out;
	}
	fail_locked(dri_match_note(id));
	if (loop.abort_err) {
		dri_req_finish(req, loop.abort_err);
		goto out;
	}
	got = dri_match_post(req, &err);
	fail_locked(err);
	if (got >= 0)
		unpark_locked(got, req);
	if (got != DRI_MATCH_POSTED)
		goto out;
	/* A parked message of another kind stands in front of what this
	 * receive waits for: read it into a buffer. */
	for (int i = peer < 0 ? 0 : peer;
	     dri_links.nparked && i < (peer < 0 ? SIZE : peer + 1); i++)
		if (PEER(i) && PEER(i)->parked)
			unpark_locked(i, NULL);
	/* Connect to the sender ourselves, so that its death is noticed
	 * even if it never connects to us. */
	if (peer >= 0)
		peer_usable(peer, "receive from");
out:
	pthread_mutex_unlock(&loop.mu);
	return DR_OK;
}

/* ---------------------------------------------------------- the loop */

/* One round of poll() with the lock released; the caller holds the lock
 * and loop.polling is 0.  Returns how many descriptors had events. */
static int poll_once(int wait_ms)
{
	int n = 0, need = 2 + dri_tcp_npoll() + SIZE, parked = 0;
	int rc;
	int64_t now;

	if (need > loop.cap_pfd) {
		struct pollfd *np = realloc(loop.pfd, need * sizeof(*np));
		int *nw = np ? realloc(loop.pfd_who, need * sizeof(*nw)) : NULL;
		if (np)
			loop.pfd = np;
		if (!nw) {
			abort_locked(DR_ENOMEM, "out of memory for poll set");
			return 0;
		}
		loop.pfd_who = nw;
		loop.cap_pfd = need;
	}
	now = dri_now_ms();
	loop.pfd[n] = (struct pollfd){ loop.wake_fd, POLLIN, 0 };
	loop.pfd_who[n++] = WHO_WAKE;
	if (dri_shm_poll_fd() >= 0) { /* a ring write wakes us too */
		loop.pfd[n] = (struct pollfd){ dri_shm_poll_fd(), POLLIN, 0 };
		loop.pfd_who[n++] = WHO_WAKE;
	}
	n = dri_tcp_poll_add(loop.pfd, loop.pfd_who, n, now, &wait_ms);
	for (int i = 0; i < SIZE; i++) {
		struct dri_peer *p = PEER(i);
		int fd = p ? p->ops->poll_fd(i) : -1;
		short ev;
		if (fd < 0 || p->state == P_GONE)
			continue;
		if (p->state == P_CONNECTING)
			ev = POLLOUT;
		else /* parked: only whether it hangs up */
			ev = (p->parked ? 0 : POLLIN) | POLLRDHUP |
			     (p->state == P_UP && p->sq_head ? POLLOUT : 0);
		parked += p->parked;
		loop.pfd[n] = (struct pollfd){ fd, ev, 0 };
		loop.pfd_who[n++] = i;
	}
	if (parked && wait_ms > PARK_MS)
		wait_ms = PARK_MS;
	loop.polling = 1;
	pthread_mutex_unlock(&loop.mu);
	rc = poll(loop.pfd, (nfds_t)n, wait_ms);
	pthread_mutex_lock(&loop.mu);
	loop.polling = 0;
	if (rc == 0 && parked && wait_ms == PARK_MS)
		for (int i = 0; i < SIZE && !loop.abort_err; i++)
			if (PEER(i) && PEER(i)->parked)
				unpark_locked(i, NULL); /* see PARK_MS */
	if (rc >= 0 && !loop.abort_err) {
		now = dri_now_ms();
		for (int k = 0; k < n && !loop.abort_err; k++) {
			short re = loop.pfd[k].revents;
			int who = loop.pfd_who[k], up = -1;
			if (who <= DRI_TCP_LISTENER) {
				fail_locked(dri_tcp_poll_event(who, re,
							       loop.pfd[k].fd,
							       now, &up));
				if (!loop.abort_err)
					peer_up_locked(up);
				continue;
			}
			if (!re)
				continue;
			if (re & POLLNVAL) {
				/* A descriptor of ours was closed under us (by
				 * the program?): polling it again would spin. */
				if (who >= 0) {
					PEER(who)->fd = -1;
					abort_locked(DR_EPEER, "rank %d: the socket "
						     "to rank %d (fd %d) was closed "
						     "under the transport", RANK,
						     who, loop.pfd[k].fd);
				} else {
					loop.wake_fd = -1;
					abort_locked(DR_ESYS, "rank %d: the "
						     "transport's wake-up "
						     "descriptor (fd %d) was "
						     "closed under it", RANK,
						     loop.pfd[k].fd);
				}
				continue;
			}
			if (who == WHO_WAKE) {
				uint64_t v; /* the eventfd, or shm's datagrams */
				while (read(loop.pfd[k].fd, &v, sizeof(v)) > 0 &&
				       loop.pfd[k].fd != loop.wake_fd)
					;
			} else {
				struct dri_peer *p = PEER(who);
				if (p->fd != loop.pfd[k].fd)
					continue; /* replaced meanwhile */
				if (p->state == P_CONNECTING ||
				    p->state == P_HS_SENT ||
				    p->state == P_HS_PROOF) {
					fail_locked(dri_tcp_handshake(who, &up));
					if (!loop.abort_err)
						peer_up_locked(up);
				} else if (p->state == P_UP) {
					if (re & POLLOUT)
						flush_locked(who);
					if (loop.abort_err)
						continue;
					if (p->parked &&
					    (re & (POLLRDHUP | POLLHUP | POLLERR)))
						unpark_locked(who, NULL); /* read what it said last */
					else if (re & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))
						read_locked(who);
				}
			}
		}
		dri_tcp_poll_done(!loop.abort_err);
	}
	pthread_cond_broadcast(&loop.cv);
	return rc > 0 ? rc : 0;
}

/* Waits until the poller has done a round, or ms pass. */
static void cond_wait_ms(int64_t ms)
{
	dri_cond_wait_ms(&loop.cv, &loop.mu, ms);
}

/* Reads and writes the rings that changed; returns whether any had. */
static int drain_rings_locked(void)
{
	int ready[64], n, moved = 0;

	do {
		n = dri_shm_ready(ready, 64);
		for (int k = 0; k < n && !loop.abort_err; k++) {
			int i = ready[k];

			if (PEER(i)->state != P_UP)
				continue;
			if (PEER(i)->sq_head)
				flush_locked(i);
			if (PEER(i)->state == P_UP && !loop.abort_err)
				read_locked(i);
			moved = 1;
		}
	} while (n == 64 && !loop.abort_err);
	return moved;
}

/* One step with peers in shared memory: read and write the rings that
 * changed, look at the launcher's abort word and the peers' processes,
 * then TCP (if some peers are elsewhere), then spin or sleep.  While
 * spinning, a rank that shares its core with others (ranks outnumber the
 * CPUs it may use) yields between looks, so the peer it waits for can
 * run; otherwise it pauses, and yields every 16th look: on a loaded
 * machine two ranks often share a core whatever their number, and a spin
 * that never yields keeps the peer off it until the sleep (README's
 * Benchmarks give the figures).  The sleep is on this rank's doorbell
 * futex, or, with TCP peers too, in poll() for at most a millisecond (a
 * ring write does not wake poll). */
static int shm_step_locked(int64_t wait_ms, int spin)
{
	static int64_t last_event_ms;
	static _Thread_local unsigned spins; /* each waiting thread its own */
	char msg[DRI_SEG_ABORT_MSG + 1];
	int moved, parked = 0, d;
	dr_err e = dri_shm_aborted(msg, sizeof(msg));

	if (e) {
		abort_locked(e, "%s", msg);
		return 1;
	}
	moved = drain_rings_locked();
	d = dri_shm_dead_peer(dri_now_ms());
	if (d >= 0 && PEER(d)->state == P_UP && !loop.abort_err) {
		/* It may have said goodbye (or why it failed) just before. */
		if (!PEER(d)->parked)
			read_locked(d);
		else
			unpark_locked(d, NULL);
		if (PEER(d)->state == P_UP && !loop.abort_err)
			fail_locked(dri_peer_lost(d, "its process exited"));
		return 1;
	}
	if (moved || loop.abort_err) {
		last_event_ms = dri_now_ms();
		pthread_cond_broadcast(&loop.cv);
		return 1;
	}
	for (int i = 0; i < SIZE; i++)
		parked += dri_shm_is_peer(i) && PEER(i)->parked;
	if (parked && dri_now_ms() - last_event_ms >= PARK_MS) {
		/* Nothing moves: read the parked messages after all (see
		 * PARK_MS). */
		for (int i = 0; i < SIZE && !loop.abort_err; i++)
			if (dri_shm_is_peer(i) && PEER(i)->parked)
				unpark_locked(i, NULL);
		last_event_ms = dri_now_ms();
		return 1;
	}
	if (dri_shm_ntcp()) {
		/* A ring write wakes poll through shm's socket, where there
		 * is one (else naps of a millisecond); the cap lets the
		 * death watch and the abort word be seen. */
		int armed = !spin && dri_shm_poll_fd() >= 0, rc;
		int64_t cap = armed ? DRI_SHM_POLL_MS : 1;

		if (armed && dri_shm_poll_arm(1)) {
			dri_shm_poll_arm(0);
			return 1;
		}
		rc = poll_once(spin ? 0 : (int)(wait_ms < cap ? wait_ms : cap));
		if (armed)
			dri_shm_poll_arm(0);
		if (rc > 0) {
			last_event_ms = dri_now_ms();
			return 1;
		}
		if (!spin)
			return 0;
	}
	if (!spin) {
		loop.polling = 1;
		pthread_mutex_unlock(&loop.mu);
		dri_shm_wait(parked && wait_ms > PARK_MS ? PARK_MS : wait_ms);
		pthread_mutex_lock(&loop.mu);
		loop.polling = 0;
		pthread_cond_broadcast(&loop.cv);
		return 0;
	}
	pthread_mutex_unlock(&loop.mu);
	if (dri_shm_oversubscribed() || ++spins % 16 == 0)
		sched_yield();
	else
		dri_cpu_relax();
	pthread_mutex_lock(&loop.mu);
	return 0;
}

/* Progress one step: poll ourselves, or let the current poller work.
 * Returns whether anything happened on our poll. */
static int step_locked(int64_t wait_ms, int spin)
{
	if (loop.polling) {
		cond_wait_ms(wait_ms < 1 ? 1 : wait_ms);
		return 0;
	}
	if (dri_shm_npeers())
		return shm_step_locked(wait_ms, spin);
	if (!spin)
		return poll_once((int)(wait_ms > 1000 ? 1000 : wait_ms)) > 0;
	if (poll_once(0) > 0)
		return 1;
	/* Nothing yet: let a peer that shares this core run (it may be the
	 * one we wait for); on a core of our own this returns at once. */
	pthread_mutex_unlock(&loop.mu);
	sched_yield();
	pthread_mutex_lock(&loop.mu);
	return 0;
}

void dri_transport_progress(int64_t timeout_ms)
{
	pthread_mutex_lock(&loop.mu);
	/* With no time to give, a poll by another thread is not waited for
	 * (a collective that copies between polls must not sleep). */
	if (loop.on && !loop.abort_err && (timeout_ms > 0 || !loop.polling))
		step_locked(timeout_ms, 0);
	pthread_mutex_unlock(&loop.mu);
}

/* ------------------------------------------------ for the waits */

void dri_loop_lock(void)
{
	pthread_mutex_lock(&loop.mu);
}

void dri_loop_unlock(void)
{
	pthread_mutex_unlock(&loop.mu);
}

dr_err dri_loop_error(void)
{
	return loop.abort_err;
}

const char *dri_loop_message(void)
{
	return loop.abort_msg;
}

void dri_loop_drain(void)
{
	drain_rings_locked();
}

void dri_loop_fail(dr_err e)
{
	fail_locked(e);
}

int dri_loop_step(int64_t wait_ms, int spin)
{
	return step_locked(wait_ms, spin);
}

void dri_loop_announce(const dri_req *reqs, int n)
{
	announce_locked(reqs, n);
}

int64_t dri_loop_spin_us(int flowing)
{
	return flowing ? loop.flow_us : loop.spin_us;
}

/* ------------------------------------------------------------- stop */

void dri_transport_stop(void)
{
	int64_t deadline;

	pthread_mutex_lock(&loop.mu);
	if (!loop.on) {
		/* Listening but never started (init failed in between): what
		 * dri_transport_listen opened goes, so init can be retried. */
		dri_tcp_stop(0);
		if (loop.wake_fd >= 0)
			close(loop.wake_fd);
		loop.wake_fd = -1;
		pthread_mutex_unlock(&loop.mu);
		return;
	}
	/* Let queued sends drain a little, so a peer gets what it was sent
	 * before it learns that we left. */
	deadline = dri_now_ms() + 2000;
	while (!loop.abort_err && dri_now_ms() < deadline) {
		int busy = 0;
		for (int i = 0; i < SIZE; i++)
			if (PEER(i) && PEER(i)->sq_head &&
			    PEER(i)->state != P_GONE &&
			    PEER(i)->state != P_NONE) /* dri_give_up's */
				busy = 1;
		if (!busy)
			break;
		step_locked(100, 0);
	}
	while (loop.polling)
		cond_wait_ms(100);
	for (int i = 0; i < SIZE; i++) {
		struct dri_peer *p = PEER(i);
		if (p && p->state == P_UP && !loop.abort_err && !p->shdr_ready) {
			dri_wire_hdr h;
			memset(&h, 0, sizeof(h));
			h.magic = DRI_WIRE_MAGIC;
			h.version = DRI_WIRE_VERSION;
			h.kind = DRI_WIRE_BYE;
			h.src = RANK;
			dri_frames_send_whole(i, &h, NULL);
		}
	}
	if (!loop.abort_err)
		dri_tcp_settle();
	for (int i = 0; i < SIZE; i++) {
		struct dri_peer *p = PEER(i);
		if (!p)
			continue;
		dri_tcp_drain(p);
		dri_peer_close(p);
		p->state = P_GONE;
	}
	dri_tcp_abort(); /* the pending connections, before fail_all */
	fail_all_locked(DR_EABORTED);
	dri_match_stop();
	dri_tcp_stop(SIZE);
	if (loop.wake_fd >= 0)
		close(loop.wake_fd);
	loop.wake_fd = -1;
	dri_peers_free();
	dri_shm_stop();
	free(loop.pfd);
	free(loop.pfd_who);
	loop.pfd = NULL;
	loop.pfd_who = NULL;
	loop.cap_pfd = 0;
	dri_calls_reset();
	loop.on = 0;
	__atomic_store_n(&loop.abort_err, DR_OK, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&loop.mu);
}
