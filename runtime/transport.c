/*
 * transport.c - connections between ranks, framed messages, matching of
 * receives, and the poll loop that moves the bytes.
 *
 * Every rank listens on one socket, on the address its peers reach it at
 * (the local end of its connection to the store: loopback for a
 * single-host job); the addresses of all ranks come from the store at
 * init.  A connection to a peer is opened only when a request first needs
 * it (so 256 ranks fit in the default fd limit) and starts with auth.h's
 * handshake: both ends prove the job's transport key, bound to both ranks
 * and fresh nonces, before a byte of anything else is read.  Until then an
 * incoming connection holds a fixed-size buffer, at most PENDING_MAX of
 * them are kept (the oldest goes first), and each is dropped after
 * DRI_HS_MS.  When two ranks connect to each other at once, the
 * connection opened by the lower rank wins: the acceptor answers the
 * proof with one byte, 1 (kept) or 0 (dropped).
 *
 * Each message is a 64-byte header (dri_wire_hdr: magic, version, the
 * call's dri_msg_id, payload length, sender) and its payload.  A receive is
 * matched against the first message from its peer with the same group (and
 * tag, for point-to-point); if the rest of the identity differs the ranks
 * made different calls and the group is aborted with DR_EMISMATCH naming
 * both.  Messages that arrive before their receive is posted wait in the
 * unexpected queue; a receive already posted gets the payload straight into
 * its buffer.
 *
 * Two calls of one seq may send each other nothing (an all_reduce waiting
 * for a rank that waits in a reduce).  So a wait for a collective's
 * message that lasts ANNOUNCE_MS sends each peer it waits for a CALL frame
 * (the header alone); the peer compares the call with its own of that seq,
 * kept from its sends and receives, at once or when it gets there, as it
 * does any message of a seq it made another call of, and fails the group
 * with DR_EMISMATCH instead of waiting for the timeout.  A monitored
 * barrier's waits announce nothing (a late rank is no mismatch): its CALL
 * frame is the monitor's word that it gave up on the rank (dri_give_up).
 *
 * Threads: one mutex guards everything; one thread at a time (the poller)
 * blocks in poll() without it, and the others wait on a condition variable
 * while the poller completes their requests too.  The poller watches every
 * connection, so a peer that dies is noticed whatever we wait for.
 *
 * Peers on this host go through shared memory instead (shm.c): the same
 * stream of frames, through a ring per pair in the job's segment, so
 * everything above the bytes (matching, mismatch checks, parking, ABORT
 * and BYE) is the same code for both.  Such a peer is up from the start
 * (the segment is the job's own: no handshake), and a wait with only
 * shared-memory peers sleeps on a futex instead of poll().  Collectives
 * of the world through the segment's flags and slots (coll_shm.c) wait
 * here too (dri_transport_flag_wait), with the same abort, death and
 * mismatch checks.
 *
 * Failure is final: a mismatch, a dead peer or a timeout aborts the whole
 * transport; connected peers get an ABORT frame (with the message) or see
 * the connection close, so they fail too instead of hanging, and later
 * calls fail at once.  A rank that leaves on purpose sends BYE first.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "copy.h"
#include "ctl.h"
#include "error.h"
#include "net.h"
#include "reduce.h"
#include "seg.h"
#include "shm.h"
#include "timeout.h"
#include "transport.h"
#include "wire.h"

#define PENDING_MAX 64   /* incoming connections not yet authenticated */
#define RECONNECT_MAX 50 /* connections dropped before the handshake ended */
#define PAUSE_MS 100     /* not watching the listener, at EMFILE */
#define CANCELLED_MAX 64 /* late messages of cancelled receives remembered */
#define SOCKBUF (4 << 20)
#define ABORT_TEXT_MAX 4096
#define ABORT_FLUSH_MAX ((size_t)256 << 10) /* rest of a frame sent at abort */
#define STAGE_LEN 16384
/* A message at least this large that arrives before its receive is posted
 * waits in the socket (the peer is "parked": not read from) instead of
 * being copied into a buffer of ours: the sender then stalls once the
 * socket buffers are full, and the payload lands straight in the
 * receive's buffer when it is posted.  Without it a rank a call ahead
 * (a broadcast's root, a gather's senders) streamed the whole next call
 * into fresh buffers, which cost a page fault per 4 KiB and a copy: the
 * 4-rank 64 MiB broadcast took 4x gloo's time. */
#define PARK_MIN ((size_t)64 << 10)
/* ... unless nothing at all happens for this long: then parked messages
 * are read into buffers after all.  That keeps eager sends working (two
 * ranks that each send a large message before posting the receive for
 * the other's would otherwise wait for each other for ever). */
#define PARK_MS 10
/* A wait for a message of a collective that has lasted this long tells
 * the peers it waits for which call it is in (a DRI_WIRE_CALL frame, once
 * per wait): two ranks in different calls of one seq may each wait for a
 * message of the other that never comes (a reduce's root against an
 * all_reduce), and no data frame would show the difference.  The peer
 * compares the call with its own of that seq, now or once it gets there,
 * and fails the group with DR_EMISMATCH instead of the timeout. */
#define ANNOUNCE_MS 50
#define CALLS_KEPT 64 /* this rank's calls kept to compare, newest */
#define HEARD_MAX 64  /* announced calls of a seq this rank is not at yet */
#define GAVE_MAX 16   /* monitored barriers whose monitor gave up on us */

enum peer_state {
	P_NONE,       /* no connection yet */
	P_CONNECTING, /* our connect() in progress */
	P_HS_SENT,    /* our HELLO sent, waiting for the challenge */
	P_HS_PROOF,   /* our proof sent, waiting for the ack byte */
	P_WAIT,       /* ours was dropped: the lower rank's is coming */
	P_UP,         /* connected */
	P_GONE,       /* said goodbye, or the transport was closed */
};

/* A message that arrived before its receive was posted. */
struct umsg {
	struct umsg *next;
	int src;
	dri_msg_id id;
	size_t len, done, cap;
	unsigned char *data;
};

struct peer {
	int fd;
	int state;
	/* sending: queue of requests, the head's header being written */
	dri_req *sq_head, *sq_tail;
	unsigned char shdr[DRI_WIRE_HDR];
	size_t shdr_done;
	int shdr_ready;
	/* receiving: header, then the payload into rx_dest */
	unsigned char rhdr[DRI_WIRE_HDR];
	size_t rhdr_got;
	int rx_active;
	dri_wire_hdr rx;
	unsigned char *rx_dest; /* NULL: discard */
	size_t rx_done;
	dri_req *rx_req;        /* or */
	struct umsg *rx_msg;    /* or neither (discard, abort text) */
	char *abort_text;
	unsigned char *stage;   /* STAGE_LEN bytes read ahead */
	size_t s_off, s_len;
	int parked;             /* rx holds a large header nobody wants yet */
	/* our DRI_WIRE_CALL frame to it, queued behind our data, and the
	 * call it named last (told: one was sent) */
	dri_req call_req;
	int told;
	uint32_t told_group;
	uint64_t told_seq;
	/* our give-up CALL frame to it, as a monitor (dri_give_up) */
	dri_req gave_req;
	int gave_busy;
	/* handshake as the connecting side */
	dri_hs hs;
	unsigned char hsbuf[DRI_HS_CHAL];
	size_t hs_got;
	int reconnects;
};

/* An incoming connection that has not proved the key yet. */
struct pending {
	int fd;
	int proving;            /* HELLO read, challenge sent */
	int rank;
	size_t got;
	int64_t deadline;
	uint64_t serial;
	dri_hs hs;
	unsigned char buf[DRI_HS_HELLO];
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int on;
	int rank, size;
	int listen_fd, wake_fd, reserve_fd;
	int64_t pause_until;
	uint64_t serial;
	uint8_t key[DRI_KEY_LEN];
	char **addrs;
	struct peer *peers;
	dri_req *posted_head, *posted_tail; /* receives, in posting order */
	struct umsg *uq_head, *uq_tail;
	struct pending *pend;
	int npend, cap_pend;
	int polling;
	int64_t spin_us;    /* spin before the first block of a wait */
	int64_t flow_us;    /* spin on after an event, before blocking */
	struct pollfd *pfd;
	int *pfd_who; /* -1 wake, -2 listen, -3 - i pending i, else peer */
	int cap_pfd;
	dr_err abort_err;
	char abort_msg[1024];
	/* receives that timed out without being fatal (monitored barrier):
	 * their message, if it comes after all, is dropped (a ring) */
	struct {
		dri_msg_id id;
		int peer;
	} cancelled[CANCELLED_MAX];
	int ncancelled, cancelled_next;
	/* this rank's calls that sent or received a message (a ring), and
	 * the calls peers announced of a seq not among them (yet) */
	dri_msg_id calls[CALLS_KEPT];
	int ncalls, calls_next;
	struct {
		int src1; /* the announcing rank + 1; 0: a free entry */
		dri_msg_id id;
	} heard[HEARD_MAX];
	/* CALL frames of a monitored barrier: its monitor gave up on this
	 * rank (dri_give_up), newest in place of the oldest */
	struct {
		int src1;
		uint32_t group_id;
		uint64_t seq;
	} gave[GAVE_MAX];
	int gave_next;
	int nheard, heard_next;
} tp = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
	.listen_fd = -1,
	.wake_fd = -1,
	.reserve_fd = -1,
};

/* Sends that were cancelled half-way keep their remaining bytes here, so
 * the frame on the wire stays whole. */
#define REQ_OWNED ((void *)1)

static void abort_locked(dr_err err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));


/* ---------------------------------------------------------- sockets */

/* TCP_NODELAY and large buffers; -1 with errno if the socket refuses. */
static int sock_tune(int fd)
{
	int one = 1, sz = SOCKBUF;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz)) < 0)
		return -1;
	return 0;
}

static void wake_locked(void)
{
	uint64_t one = 1;

	if (tp.polling && dri_shm_npeers())
		dri_shm_wake(); /* it may sleep on the futex, not in poll */
	if (tp.polling && tp.wake_fd >= 0 &&
	    write(tp.wake_fd, &one, sizeof(one)) < 0) {
		/* the counter is full: the poller wakes anyway */
	}
}

void dri_transport_wake(void)
{
	pthread_mutex_lock(&tp.mu);
	wake_locked();
	pthread_mutex_unlock(&tp.mu);
}

dr_err dri_transport_listen(const char *host, int rank, int world_size,
			    int *port)
{
	int fds[DRI_NET_MAXFD], nfd, fd;
	const char *spin;
	dr_err err;

	if (tp.on || tp.listen_fd >= 0)
		return dri_fail(DR_EALREADY, "transport already started");
	err = dri_net_listen(host, 0, fds, &nfd);
	if (err)
		return dri_fail(err, "rank %d: transport: %s", rank,
				dr_last_error());
	fd = fds[0];
	for (int k = 1; k < nfd; k++)
		close(fds[k]); /* one address is all the peers are told */
	/* accepted sockets inherit the buffer sizes */
	if (sock_tune(fd) < 0) {
		int e = errno;
		close(fd);
		return dri_fail(DR_ESYS, "rank %d: listening socket: %s", rank,
				dri_strerror(e));
	}
	*port = dri_net_port(fd);
	tp.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (tp.wake_fd < 0) {
		int e = errno;
		close(fd);
		return dri_fail(DR_ESYS, "eventfd: %s", dri_strerror(e));
	}
	tp.reserve_fd = dri_net_reserve();
	tp.pause_until = 0;
	tp.listen_fd = fd;
	tp.rank = rank;
	tp.size = world_size;
	/* A wake-up from a blocking poll costs tens of microseconds on a VM,
	 * more than the message, so a wait polls for a while first.  The
	 * spin yields the core between polls, so a peer that shares the core
	 * (ranks outnumber cores, or the machine is busy) runs at once: a
	 * busy spin without the yield keeps that peer off the core until the
	 * spin ends (distrun.3, DISTRUN_SPIN_US, gives the measurements). */
	spin = getenv("DISTRUN_SPIN_US");
	if (spin && *spin)
		tp.spin_us = tp.flow_us = atoll(spin);
	else {
		tp.spin_us = 100;
		/* Once bytes are moving, another poll is likely to find more:
		 * worth a few microseconds even on a crowded machine. */
		tp.flow_us = 10;
	}
	return DR_OK;
}

dr_err dri_transport_start(char **addrs, const uint8_t key[32])
{
	dr_err err;

	pthread_mutex_lock(&tp.mu);
	tp.peers = calloc((size_t)tp.size, sizeof(*tp.peers));
	if (!tp.peers) {
		pthread_mutex_unlock(&tp.mu);
		return dri_fail(DR_ENOMEM, "out of memory for %d peers", tp.size);
	}
	/* Strips the shared-memory part of every address. */
	err = dri_shm_start(tp.rank, tp.size, addrs);
	if (err) {
		free(tp.peers);
		tp.peers = NULL;
		pthread_mutex_unlock(&tp.mu);
		return err;
	}
	for (int i = 0; i < tp.size; i++) {
		tp.peers[i].fd = -1;
		if (dri_shm_is_peer(i))
			tp.peers[i].state = P_UP;
	}
	/* Every peer in shared memory: nobody has a reason to connect, so
	 * nobody is listened to (and no stranger waits in the backlog). */
	if (tp.size > 1 && !dri_shm_ntcp() && tp.listen_fd >= 0) {
		close(tp.listen_fd);
		tp.listen_fd = -1;
	}
	tp.addrs = addrs;
	memcpy(tp.key, key, DRI_KEY_LEN);
	__atomic_store_n(&tp.abort_err, DR_OK, __ATOMIC_RELEASE);
	tp.abort_msg[0] = 0;
	tp.on = 1;
	pthread_mutex_unlock(&tp.mu);
	return DR_OK;
}

/* Splits "host:port" (host may be "[v6]"), resolves, connects without
 * blocking.  Returns the fd or -1 with errno. */
static int connect_addr(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints, *res = NULL;
	size_t hl;
	int fd = -1, rc;

	if (!colon || (hl = (size_t)(colon - addr)) >= sizeof(host)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(host, addr, hl);
	host[hl] = 0;
	if (host[0] == '[' && hl > 1 && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = 0;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if (getaddrinfo(host, colon + 1, &hints, &res) || !res) {
		errno = EHOSTUNREACH;
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out;
	if (sock_tune(fd) < 0) {
		int e = errno;
		close(fd);
		fd = -1;
		errno = e;
		goto out;
	}
	do
		rc = connect(fd, res->ai_addr, res->ai_addrlen);
	while (rc < 0 && errno == EINTR);
	if (rc < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		fd = -1;
		errno = e;
	}
out:
	freeaddrinfo(res);
	return fd;
}

/* The bytes to and from peer i: its socket, or its rings in the segment.
 * Both return what the socket calls would, with EAGAIN for a full or
 * empty ring (a ring never reports end of file). */
static ssize_t peer_sendmsg(int i, const struct msghdr *mh)
{
	size_t n;

	if (!dri_shm_is_peer(i))
		return sendmsg(tp.peers[i].fd, mh, MSG_NOSIGNAL);
	n = dri_shm_sendv(i, mh->msg_iov, (int)mh->msg_iovlen, 0);
	if (!n) {
		errno = EAGAIN;
		return -1;
	}
	return (ssize_t)n;
}

static ssize_t peer_recv(int i, void *buf, size_t len)
{
	size_t n;

	if (!dri_shm_is_peer(i))
		return recv(tp.peers[i].fd, buf, len, 0);
	n = dri_shm_recv(i, buf, len);
	if (!n) {
		errno = EAGAIN;
		return -1;
	}
	return (ssize_t)n;
}

/* ---------------------------------------------------- request lists */

static void req_finish(dri_req *r, dr_err st)
{
	if (r->priv == REQ_OWNED) {
		free(r);
		return;
	}
	r->status = st;
	__atomic_store_n(&r->complete, 1, __ATOMIC_RELEASE);
}

static void posted_unlink(dri_req *r)
{
	dri_req **pp = &tp.posted_head, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			if (tp.posted_tail == r)
				tp.posted_tail = prev;
			r->next = NULL;
			return;
		}
}

static void uq_unlink(struct umsg *m)
{
	struct umsg **pp = &tp.uq_head, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			if (tp.uq_tail == m)
				tp.uq_tail = prev;
			return;
		}
}

/* Buffers of unexpected messages are kept for reuse: a fresh large
 * malloc is a fresh mapping, and faulting its pages in (then unmapping
 * them) costs more than the network on a busy VM; pieces of a pipelined
 * collective come in the same few sizes again and again. */
#define POOL_SLOTS 128
#define POOL_MAX ((size_t)4 << 20)    /* largest buffer kept */
#define POOL_BYTES ((size_t)64 << 20) /* most memory kept */

static struct {
	void *p;
	size_t cap;
} pool[POOL_SLOTS];
static size_t pool_bytes;

static void *buf_get(size_t len, size_t *cap)
{
	int best = -1;

	for (int i = 0; i < POOL_SLOTS; i++)
		if (pool[i].p && pool[i].cap >= len &&
		    (best < 0 || pool[i].cap < pool[best].cap))
			best = i;
	if (best >= 0) {
		void *p = pool[best].p;
		*cap = pool[best].cap;
		pool[best].p = NULL;
		pool_bytes -= *cap;
		return p;
	}
	*cap = len ? len : 1;
	return malloc(*cap);
}

static void buf_put(void *p, size_t cap)
{
	if (p && cap >= 4096 && cap <= POOL_MAX &&
	    pool_bytes + cap <= POOL_BYTES)
		for (int i = 0; i < POOL_SLOTS; i++)
			if (!pool[i].p) {
				pool[i].p = p;
				pool[i].cap = cap;
				pool_bytes += cap;
				return;
			}
	free(p);
}

static void pool_drain(void)
{
	for (int i = 0; i < POOL_SLOTS; i++) {
		free(pool[i].p);
		pool[i].p = NULL;
	}
	pool_bytes = 0;
}

static void umsg_free(struct umsg *m)
{
	buf_put(m->data, m->cap);
	free(m);
}

/* Same matching class: group, and for point-to-point the tag. */
static int id_key_match(const dri_msg_id *want, const dri_msg_id *got)
{
	if (want->group_id != got->group_id)
		return 0;
	if ((want->coll == DRI_P2P) != (got->coll == DRI_P2P))
		return 0;
	return want->coll != DRI_P2P || want->tag == got->tag;
}


/* Whether a message from peer i with id is the late one of a receive
 * that timed out (it is then forgotten: it comes once). */
static int cancelled_take(int i, const dri_msg_id *id)
{
	for (int k = 0; k < tp.ncancelled; k++)
		if (tp.cancelled[k].peer == i && dri_msg_id_equal(&tp.cancelled[k].id, id)) {
			tp.cancelled[k].peer = -1;
			return 1;
		}
	return 0;
}


/* Checks a message from src against the receive r; aborts on mismatch. */
static int check_match(const dri_req *r, int src, const dri_msg_id *id,
		       uint64_t len)
{
	char why[768];

	if (!dri_msg_mismatch(&r->id, r->len, id, len, src, tp.rank, why,
			      sizeof(why)))
		return 1;
	abort_locked(DR_EMISMATCH, "%s", why);
	return 0;
}

/* -------------------------------------------------------- abort */

static void close_peer(struct peer *p)
{
	if (p->fd >= 0) {
		shutdown(p->fd, SHUT_RDWR);
		close(p->fd);
	}
	p->fd = -1;
}

static void send_frame_best_effort(int i, const dri_wire_hdr *h,
				   const void *payload)
{
	unsigned char b[DRI_WIRE_HDR];
	struct iovec iov[2];
	struct msghdr mh;

	dri_wire_encode(h, b);
	iov[0].iov_base = b;
	iov[0].iov_len = sizeof(b);
	iov[1].iov_base = (void *)payload;
	iov[1].iov_len = h->len;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = h->len ? 2 : 1;
	/* A frame that does not fit in the socket buffer whole would leave
	 * the stream torn; the close then tells the peer instead (on shared
	 * memory: the launcher's abort word, or the death watch). */
	if (dri_shm_is_peer(i))
		dri_shm_sendv(i, iov, (int)mh.msg_iovlen, 1);
	else
		(void)!sendmsg(tp.peers[i].fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Writes the rest of peer p's half-written frame without waiting, if it
 * is at most ABORT_FLUSH_MAX bytes and the socket takes it all; 1 if it
 * did (the stream is whole again). */
static int finish_frame(struct peer *p)
{
	dri_req *r = p->sq_head;
	size_t rh = DRI_WIRE_HDR - p->shdr_done, rp = r ? r->len - r->done : 0;
	struct iovec iov[2];
	struct msghdr mh;
	ssize_t n;

	if (!r || rh + rp > ABORT_FLUSH_MAX)
		return 0;
	iov[0].iov_base = p->shdr + p->shdr_done;
	iov[0].iov_len = rh;
	iov[1].iov_base = (char *)r->buf + r->done;
	iov[1].iov_len = rp;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	if (dri_shm_is_peer((int)(p - tp.peers)))
		n = (ssize_t)dri_shm_sendv((int)(p - tp.peers), iov, 2, 1);
	else
		n = sendmsg(p->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0 || (size_t)n != rh + rp)
		return 0;
	p->shdr_ready = 0;
	return 1;
}

static void fail_all_locked(dr_err err)
{
	dri_req *r, *next;
	struct umsg *m, *mn;

	for (r = tp.posted_head; r; r = next) {
		next = r->next;
		r->next = NULL;
		req_finish(r, err);
	}
	tp.posted_head = tp.posted_tail = NULL;
	for (m = tp.uq_head; m; m = mn) {
		mn = m->next;
		umsg_free(m);
	}
	tp.uq_head = tp.uq_tail = NULL;
	for (int i = 0; tp.peers && i < tp.size; i++) {
		struct peer *p = &tp.peers[i];
		for (r = p->sq_head; r; r = next) {
			next = r->next;
			r->next = NULL;
			req_finish(r, err);
		}
		p->sq_head = p->sq_tail = NULL;
		if (p->rx_req)
			req_finish(p->rx_req, err);
		p->rx_req = NULL;
		p->rx_msg = NULL; /* freed with the queue */
		free(p->abort_text);
		p->abort_text = NULL;
		p->rx_active = 0;
		p->parked = 0;
	}
}

static void abort_locked(dr_err err, const char *fmt, ...)
{
	va_list ap;
	dri_wire_hdr h;

	if (tp.abort_err)
		return;
	va_start(ap, fmt);
	vsnprintf(tp.abort_msg, sizeof(tp.abort_msg), fmt, ap);
	va_end(ap);
	__atomic_store_n(&tp.abort_err, err, __ATOMIC_RELEASE);
	memset(&h, 0, sizeof(h));
	h.magic = DRI_WIRE_MAGIC;
	h.version = DRI_WIRE_VERSION;
	h.kind = DRI_WIRE_ABORT;
	h.src = tp.rank;
	h.err = err;
	h.len = strlen(tp.abort_msg);
	for (int i = 0; tp.peers && i < tp.size; i++) {
		struct peer *p = &tp.peers[i];
		int torn = p->shdr_ready && (p->shdr_done ||
					     (p->sq_head && p->sq_head->done));
		/* A half-written frame cannot be followed by another: finish
		 * it first if the rest is small enough to go at once, so that
		 * the peer learns why instead of taking a close mid-message
		 * for a crash. */
		if (p->state == P_UP && torn && finish_frame(p))
			torn = 0;
		if (p->state == P_UP && !torn) {
			send_frame_best_effort(i, &h, tp.abort_msg);
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
			send_frame_best_effort(i, &h, tp.abort_msg);
			shutdown(p->fd, SHUT_WR);
		} else {
			close_peer(p);
		}
		p->state = P_GONE;
	}
	for (int i = 0; i < tp.npend; i++)
		close(tp.pend[i].fd);
	tp.npend = 0;
	if (tp.listen_fd >= 0)
		close(tp.listen_fd);
	tp.listen_fd = -1;
	fail_all_locked(err);
	pthread_cond_broadcast(&tp.cv);
	wake_locked();
}

void dri_transport_abort(dr_err err, const char *msg)
{
	pthread_mutex_lock(&tp.mu);
	abort_locked(err, "%s", msg);
	pthread_mutex_unlock(&tp.mu);
}

dr_err dri_transport_check(void)
{
	dr_err err;

	/* Every call asks: no lock while nothing has failed. */
	if (!__atomic_load_n(&tp.abort_err, __ATOMIC_ACQUIRE))
		return DR_OK;
	pthread_mutex_lock(&tp.mu);
	err = tp.abort_err;
	if (err)
		dri_fail(DR_EABORTED, "process group aborted: %s", tp.abort_msg);
	pthread_mutex_unlock(&tp.mu);
	return err ? DR_EABORTED : DR_OK;
}

/* ------------------------------------------------------ connecting */

static void start_connect(int i)
{
	struct peer *p = &tp.peers[i];

	p->fd = connect_addr(tp.addrs[i]);
	if (p->fd < 0) {
		abort_locked(DR_EPEER, "rank %d: cannot connect to rank %d at "
			     "%s: %s%s", tp.rank, i, tp.addrs[i], dri_strerror(errno),
			     errno == EMFILE || errno == ENFILE ?
			     " (the open file limit, ulimit -n, is too low)" : "");
		return;
	}
	p->state = P_CONNECTING;
	p->hs_got = 0;
	wake_locked();
}

/* Makes sure a request to or from peer i can progress. */
static int peer_usable(int i, const char *what)
{
	struct peer *p = &tp.peers[i];

	if (p->state == P_GONE) {
		abort_locked(DR_EPEER, "rank %d: cannot %s rank %d: it has "
			     "left the process group", tp.rank, what, i);
		return 0;
	}
	if (p->state == P_NONE)
		start_connect(i);
	dri_shm_watch(i); /* a shared-memory peer: its death, as a close */
	return !tp.abort_err;
}

static void flush_peer(int i);
static void on_readable(int i);

static void peer_up(int i, int fd)
{
	struct peer *p = &tp.peers[i];

	p->fd = fd;
	p->state = P_UP;
	p->rhdr_got = 0;
	p->rx_active = 0;
	p->parked = 0;
	p->s_off = p->s_len = 0;
	if (p->sq_head)
		flush_peer(i);
}

static void peer_lost(int i, const char *why)
{
	abort_locked(DR_EPEER, "rank %d: lost the connection to rank %d (%s): "
		     "did it crash or exit without dr_destroy_process_group?",
		     tp.rank, i, why);
}

/* A read or write on peer i's socket failed with e. */
static void peer_io_error(int i, int e)
{
	if (e == EBADF)
		abort_locked(DR_EPEER, "rank %d: the socket to rank %d (fd %d) "
			     "was closed under the transport", tp.rank, i,
			     tp.peers[i].fd);
	else
		peer_lost(i, dri_strerror(e));
}

/* Sends a handshake message whole (the socket is fresh: it fits). */
static int hs_send(int fd, const void *b, size_t n)
{
	ssize_t k;

	do
		k = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (k < 0 && errno == EINTR);
	return k == (ssize_t)n ? 0 : -1;
}

/* Our connection to peer i was closed before the handshake ended: the
 * peer may have dropped it to make room (PENDING_MAX, or out of fds), so
 * connect again, a bounded number of times. */
static void hs_retry(int i, const char *why)
{
	struct peer *p = &tp.peers[i];

	if (p->reconnects++ >= RECONNECT_MAX) {
		peer_lost(i, why);
		return;
	}
	close(p->fd);
	p->fd = -1;
	p->state = P_NONE;
	start_connect(i);
}

/* Our connect() completed (or failed): send the HELLO. */
static void on_connected(int i)
{
	struct peer *p = &tp.peers[i];
	int err = 0;
	socklen_t el = sizeof(err);
	dr_err e;

	if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err) {
		abort_locked(DR_EPEER, "rank %d: cannot connect to rank %d at "
			     "%s: %s (has it exited?)", tp.rank, i, tp.addrs[i],
			     dri_strerror(err));
		return;
	}
	e = dri_hs_hello(&p->hs, DRI_HS_TRANSPORT, tp.rank, tp.size);
	if (e) {
		abort_locked(e, "rank %d: %s", tp.rank, dr_last_error());
		return;
	}
	if (hs_send(p->fd, p->hs.hello, DRI_HS_HELLO) < 0) {
		hs_retry(i, "handshake not sent");
		return;
	}
	p->hs_got = 0;
	p->state = P_HS_SENT;
}

/* Reads peer i's challenge; when whole, checks it and sends our proof. */
static void on_challenge(int i)
{
	struct peer *p = &tp.peers[i];
	unsigned char proof[DRI_HS_PROOF];
	int srv;
	ssize_t n;
	dr_err e;

	do
		n = recv(p->fd, p->hsbuf + p->hs_got, DRI_HS_CHAL - p->hs_got, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (n <= 0 && p->hs_got == DRI_NET_NOFD_LEN &&
	    !memcmp(p->hsbuf, DRI_NET_NOFD, DRI_NET_NOFD_LEN)) {
		abort_locked(DR_ESYS, "rank %d: rank %d at %s is out of file "
			     "descriptors and closed our connection: raise its "
			     "open file limit (ulimit -n)", tp.rank, i,
			     tp.addrs[i]);
		return;
	}
	if (n <= 0) {
		hs_retry(i, "closed during the handshake");
		return;
	}
	p->hs_got += (size_t)n;
	if (p->hs_got < DRI_HS_CHAL)
		return;
	e = dri_hs_answer(&p->hs, tp.key, p->hsbuf, &srv, proof);
	if (e) {
		abort_locked(e, "rank %d: rank %d at %s: %s", tp.rank, i,
			     tp.addrs[i], dr_last_error());
		return;
	}
	if (srv != i) {
		abort_locked(DR_EPROTO, "rank %d: the process at %s (rank %d's "
			     "address) says it is rank %d", tp.rank, tp.addrs[i],
			     i, srv);
		return;
	}
	if (hs_send(p->fd, proof, sizeof(proof)) < 0) {
		peer_lost(i, "handshake not sent");
		return;
	}
	p->state = P_HS_PROOF;
}

static void on_ack(int i)
{
	struct peer *p = &tp.peers[i];
	unsigned char c;
	ssize_t n;

	do
		n = recv(p->fd, &c, 1, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (n <= 0) {
		peer_lost(i, "closed during the handshake");
		return;
	}
	if (c == 1) {
		peer_up(i, p->fd);
		return;
	}
	/* Dropped: the lower rank's own connection to us wins. */
	close(p->fd);
	p->fd = -1;
	p->state = P_WAIT;
}

static void pending_close(int k)
{
	close(tp.pend[k].fd);
	tp.pend[k].fd = -1;
}

/* Closes the pending connections marked -1, keeping the order. */
static void pending_compact(void)
{
	int w = 0;

	for (int k = 0; k < tp.npend; k++)
		if (tp.pend[k].fd >= 0)
			tp.pend[w++] = tp.pend[k];
	tp.npend = w;
}

static void on_accept(void)
{
	for (;;) {
		int fd = dri_net_accept(tp.listen_fd, &tp.reserve_fd,
					tp.npend > 0);
		int one = 1;
		if (fd == DRI_ACCEPT_FULL) {
			pending_close(0); /* the oldest */
			pending_compact();
			continue;
		}
		if (fd == DRI_ACCEPT_DROPPED)
			continue;
		if (fd == DRI_ACCEPT_PAUSE) {
			tp.pause_until = dri_now_ms() + PAUSE_MS;
			return;
		}
		if (fd < 0)
			return;
		if (tp.npend >= PENDING_MAX) {
			/* The oldest goes: a real peer answers at once, a
			 * flood of idle connections only pushes itself out. */
			pending_close(0);
			pending_compact();
		}
		if (tp.npend == tp.cap_pend) {
			int cap = tp.cap_pend ? 2 * tp.cap_pend : 16;
			struct pending *np = realloc(tp.pend, cap * sizeof(*np));
			if (!np) {
				close(fd);
				return;
			}
			tp.pend = np;
			tp.cap_pend = cap;
		}
		if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))) {
			close(fd);
			continue;
		}
		tp.pend[tp.npend] = (struct pending){
			.fd = fd,
			.deadline = dri_now_ms() + DRI_HS_MS,
			.serial = tp.serial++,
		};
		tp.npend++;
	}
}

/* Reads an incoming handshake; returns 1 when pending slot k is done
 * (kept or dropped).  Nothing that has not proved the key gets more than
 * the challenge. */
static int on_pending(int k)
{
	struct pending *pe = &tp.pend[k];
	size_t want = pe->proving ? DRI_HS_PROOF : DRI_HS_HELLO;
	ssize_t n;
	int r, size;
	unsigned char ack;

	do
		n = recv(pe->fd, pe->buf + pe->got, want - pe->got, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0)
		goto drop;
	pe->got += (size_t)n;
	if (pe->got < want)
		return 0;
	pe->got = 0;
	if (!pe->proving) {
		if (dri_hs_challenge(&pe->hs, tp.key, pe->buf, DRI_HS_TRANSPORT,
				     tp.rank, &r, &size) ||
		    size != tp.size || r < 0 || r >= tp.size || r == tp.rank ||
		    hs_send(pe->fd, pe->hs.chal, DRI_HS_CHAL) < 0)
			goto drop;
		pe->rank = r;
		pe->proving = 1;
		return 0;
	}
	if (!dri_hs_verify(&pe->hs, tp.key, pe->buf))
		goto drop;
	r = pe->rank;
	struct peer *p = &tp.peers[r];
	if (p->state == P_GONE || p->state == P_UP)
		ack = 0;
	else if (r < tp.rank)
		ack = 1; /* the lower rank's connection wins */
	else
		ack = p->state == P_NONE || p->state == P_WAIT;
	if (hs_send(pe->fd, &ack, 1) < 0 || !ack)
		goto drop;
	if (p->fd >= 0)
		close(p->fd); /* our own, which lost */
	peer_up(r, pe->fd);
	return 1;
drop:
	close(pe->fd);
	return 1;
}

/* -------------------------------------------------------- sending */

/* Takes the announcements (CALL frames) out of peer i's send queue: the
 * peer has gone (it said BYE, or its socket refuses writes), and what it
 * is no longer there to hear is no error of this job.  Whether anything
 * else is left is the caller's to judge. */
static void drop_calls_locked(struct peer *p)
{
	dri_req **pp = &p->sq_head;

	p->sq_tail = NULL;
	while (*pp) {
		dri_req *r = *pp;
		if (r->kind == DRI_WIRE_CALL) {
			if (r == p->sq_head)
				p->shdr_ready = 0;
			*pp = r->next;
			r->next = NULL;
			req_finish(r, DR_OK);
			continue;
		}
		p->sq_tail = r;
		pp = &r->next;
	}
}

static void flush_peer(int i)
{
	struct peer *p = &tp.peers[i];

	while (p->sq_head && p->state == P_UP) {
		dri_req *r = p->sq_head;
		struct iovec iov[2];
		struct msghdr mh;
		ssize_t n;
		int k = 0;

		if (!p->shdr_ready) {
			dri_wire_hdr h;
			memset(&h, 0, sizeof(h));
			h.magic = DRI_WIRE_MAGIC;
			h.version = DRI_WIRE_VERSION;
			h.kind = (uint16_t)r->kind;
			h.id = r->id;
			h.len = r->len;
			h.src = tp.rank;
			dri_wire_encode(&h, p->shdr);
			p->shdr_ready = 1;
			p->shdr_done = 0;
		}
		if (p->shdr_done < DRI_WIRE_HDR) {
			iov[k].iov_base = p->shdr + p->shdr_done;
			iov[k++].iov_len = DRI_WIRE_HDR - p->shdr_done;
		}
		if (r->done < r->len) {
			iov[k].iov_base = (char *)r->buf + r->done;
			iov[k++].iov_len = r->len - r->done;
		}
		if (k) {
			memset(&mh, 0, sizeof(mh));
			mh.msg_iov = iov;
			mh.msg_iovlen = (size_t)k;
			n = peer_sendmsg(i, &mh);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return;
				/* The peer may have said why before it went:
				 * an ABORT frame waiting to be read names the
				 * real cause. */
				int e = errno;
				if (e != EBADF)
					on_readable(i);
				if (tp.abort_err || p->state != P_UP)
					return;
				/* A peer that finished and closed refuses our
				 * announcement of a call it already served: what
				 * it sent before is still ours to read, and
				 * reading decides (its BYE, or a reset). */
				if (e == EPIPE || e == ECONNRESET) {
					drop_calls_locked(p);
					if (!p->sq_head)
						return;
				}
				peer_io_error(i, e);
				return;
			}
			size_t h = DRI_WIRE_HDR - p->shdr_done;
			if ((size_t)n < h) {
				p->shdr_done += (size_t)n;
				continue;
			}
			p->shdr_done = DRI_WIRE_HDR;
			r->done += (size_t)n - h;
			if (r->done < r->len)
				continue;
		}
		p->sq_head = r->next;
		if (!p->sq_head)
			p->sq_tail = NULL;
		r->next = NULL;
		p->shdr_ready = 0;
		req_finish(r, DR_OK);
	}
}

static void req_init(dri_req *req, const dri_msg_id *id, int peer,
		     int is_send, void *buf, size_t len)
{
	req->next = NULL;
	req->id = *id;
	req->peer = peer;
	req->is_send = is_send;
	req->buf = buf;
	req->len = len;
	req->done = 0;
	req->source = -1;
	req->kind = DRI_WIRE_DATA;
	req->complete = 0;
	req->status = DR_OK;
	req->priv = NULL;
}

/* ------------------------------------------------- announced calls */

/* The group fails with DR_EMISMATCH: rank a called ida, rank b idb, of
 * the same seq.  The order is the messages' (wire.c): the sender first,
 * then the rank that waits for its message; the flags name the lower
 * rank first (coll_shm.c). */
static void calls_differ_locked(int a, const dri_msg_id *ida, int b,
				const dri_msg_id *idb)
{
	char da[256], db[256];

	dri_msg_id_describe(ida, da, sizeof(da));
	dri_msg_id_describe(idb, db, sizeof(db));
	abort_locked(DR_EMISMATCH, "rank %d called %s but rank %d called %s "
		     "(seq %llu)", a, da, b, db, (unsigned long long)ida->seq);
}

/* Whether two ids of one group and seq name the same call (the tag
 * aside: a call over two levels of hosts tags its messages once it has
 * a plan, coll_hier.c; and an all_to_all_v's count, which each of its
 * messages sets to the piece of its pair, coll_alltoall.c, checked
 * there). */
static int same_call_id(const dri_msg_id *a, const dri_msg_id *b)
{
	return a->coll == b->coll &&
	       (a->count == b->count || a->coll == DRI_ALL_TO_ALL_V) &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

/* This rank's call of the group and seq of id, if it is kept. */
static const dri_msg_id *call_made(const dri_msg_id *id)
{
	for (int k = 0; k < tp.ncalls; k++) {
		const dri_msg_id *c = &tp.calls[k];

		if (c->seq == id->seq && c->group_id == id->group_id)
			return c;
	}
	return NULL;
}

/* A send or receive of call id is posted: the call is kept (once), and
 * what peers announced of its seq is compared with it. */
static void note_call_locked(const dri_msg_id *id)
{
	int last = (tp.calls_next + CALLS_KEPT - 1) % CALLS_KEPT;

	if (id->coll == DRI_P2P)
		return;
	if (tp.ncalls && tp.calls[last].seq == id->seq &&
	    tp.calls[last].group_id == id->group_id)
		return;
	if (call_made(id))
		return;
	tp.calls[tp.calls_next] = *id;
	tp.calls_next = (tp.calls_next + 1) % CALLS_KEPT;
	if (tp.ncalls < CALLS_KEPT)
		tp.ncalls++;
	for (int k = 0; tp.nheard && k < HEARD_MAX; k++)
		if (tp.heard[k].src1 && tp.heard[k].id.seq == id->seq &&
		    tp.heard[k].id.group_id == id->group_id) {
			int src = tp.heard[k].src1 - 1;

			tp.heard[k].src1 = 0;
			tp.nheard--;
			if (!same_call_id(&tp.heard[k].id, id)) {
				/* src waits for a message of ours */
				calls_differ_locked(tp.rank, id, src,
						    &tp.heard[k].id);
				return;
			}
		}
	/* A message of this seq that came first: it may be one that no
	 * receive of this call will take. */
	for (struct umsg *m = tp.uq_head; m; m = m->next)
		if (m->id.coll != DRI_P2P && m->id.seq == id->seq &&
		    m->id.group_id == id->group_id && !same_call_id(&m->id, id)) {
			/* (the abort frees the queue, m too) */
			calls_differ_locked(m->src, &m->id, tp.rank, id);
			return;
		}
	for (int i = 0; i < tp.size; i++) {
		const dri_msg_id *q = &tp.peers[i].rx.id;

		if (tp.peers[i].parked && q->coll != DRI_P2P &&
		    q->seq == id->seq && q->group_id == id->group_id &&
		    !same_call_id(q, id)) {
			calls_differ_locked(i, q, tp.rank, id);
			return;
		}
	}
}

/* Whether monitor i gave up on this rank in the monitored barrier id. */
static int gave_up_on_us(int i, const dri_msg_id *id)
{
	for (int k = 0; k < GAVE_MAX; k++)
		if (tp.gave[k].src1 == i + 1 &&
		    tp.gave[k].group_id == id->group_id &&
		    tp.gave[k].seq == id->seq)
			return 1;
	return 0;
}

/* A monitored barrier's CALL frame from peer i: only its monitor sends
 * one (dri_give_up; announce_locked does not announce these barriers),
 * once it gave up on this rank.  Our receive of its verdict, posted now
 * or later, ends as timed out (not fatal: the group goes on). */
static void gave_up_locked(int i, const dri_msg_id *id)
{
	dri_req *r;

	tp.gave[tp.gave_next].src1 = i + 1;
	tp.gave[tp.gave_next].group_id = id->group_id;
	tp.gave[tp.gave_next].seq = id->seq;
	tp.gave_next = (tp.gave_next + 1) % GAVE_MAX;
	for (r = tp.posted_head; r; r = r->next)
		if (r->peer == i && r->len && !r->is_send &&
		    r->id.coll == DRI_MONITORED_BARRIER &&
		    r->id.group_id == id->group_id && r->id.seq == id->seq) {
			posted_unlink(r);
			req_finish(r, DR_ETIMEDOUT);
			return;
		}
}

/* Peer i's DRI_WIRE_CALL frame: the call it waits in, against ours of
 * that seq, or kept until this rank gets there. */
static void on_call(int i)
{
	const dri_wire_hdr *h = &tp.peers[i].rx;
	const dri_msg_id *mine;
	int k;

	if (h->len || h->id.coll == DRI_P2P) {
		abort_locked(DR_EPROTO, "rank %d: garbled call announcement "
			     "from rank %d", tp.rank, i);
		return;
	}
	if ((mine = call_made(&h->id))) {
		/* i waits for a message of ours */
		if (!same_call_id(mine, &h->id))
			calls_differ_locked(tp.rank, mine, i, &h->id);
		else if (h->id.coll == DRI_MONITORED_BARRIER)
			gave_up_locked(i, &h->id);
		return;
	}
	if (h->id.coll == DRI_MONITORED_BARRIER)
		gave_up_locked(i, &h->id);
	/* Not there yet (or long past): kept, in a free entry or in place
	 * of one in turn. */
	for (k = 0; k < HEARD_MAX && tp.heard[k].src1; k++)
		;
	if (k == HEARD_MAX) {
		k = tp.heard_next;
		tp.heard_next = (tp.heard_next + 1) % HEARD_MAX;
		tp.nheard--;
	}
	tp.heard[k].src1 = i + 1;
	tp.heard[k].id = h->id;
	tp.nheard++;
}

/* Puts send r at the end of peer i's queue; written at once if it is
 * next on an up connection, else when the connection comes up or
 * drains. */
static void sq_push_locked(int i, dri_req *r)
{
	struct peer *p = &tp.peers[i];

	if (p->sq_tail)
		p->sq_tail->next = r;
	else
		p->sq_head = r;
	p->sq_tail = r;
	if (p->state == P_UP && p->sq_head == r)
		flush_peer(i);
	if (!r->complete)
		wake_locked(); /* the poller must watch for POLLOUT */
}

/* Queues a CALL frame of id to peer i in its request r (a slot of the
 * peer's own), behind what we sent it. */
static void queue_call_locked(int i, dri_req *r, const dri_msg_id *id)
{
	req_init(r, id, i, 1, NULL, 0);
	r->kind = DRI_WIRE_CALL;
	sq_push_locked(i, r);
}

/* A wait of a collective has lasted ANNOUNCE_MS: each peer that one of
 * its requests still waits for is told the call (once per call). */
static void announce_locked(const dri_req *reqs, int n)
{
	for (int k = 0; k < n && !tp.abort_err; k++) {
		const dri_req *r = &reqs[k];
		struct peer *p;

		/* (a monitored barrier's CALL frame says its monitor gave
		 * up: dri_give_up) */
		if (r->complete || r->id.coll == DRI_P2P ||
		    r->id.coll == DRI_MONITORED_BARRIER || r->peer < 0 ||
		    r->peer == tp.rank || r->peer >= tp.size)
			continue;
		p = &tp.peers[r->peer];
		if (p->state != P_UP ||
		    (p->told && p->told_group == r->id.group_id &&
		     p->told_seq == r->id.seq) ||
		    (p->told && !p->call_req.complete))
			continue;
		p->told = 1;
		p->told_group = r->id.group_id;
		p->told_seq = r->id.seq;
		queue_call_locked(r->peer, &p->call_req, &r->id);
	}
}

dr_err dri_isend(dri_req *req, const dri_msg_id *id, int peer,
		 const void *buf, size_t len)
{
	req_init(req, id, peer, 1, (void *)buf, len);
	pthread_mutex_lock(&tp.mu);
	if (!tp.on || peer < 0 || peer >= tp.size || peer == tp.rank) {
		pthread_mutex_unlock(&tp.mu);
		return dri_fail(DR_EINVAL, "send to rank %d: not a peer of rank "
				"%d (world size %d)", peer, tp.rank, tp.size);
	}
	if (tp.abort_err || !peer_usable(peer, "send to")) {
		req_finish(req, tp.abort_err);
		pthread_mutex_unlock(&tp.mu);
		return DR_OK; /* the wait reports it */
	}
	note_call_locked(id);
	if (tp.abort_err) {
		req_finish(req, tp.abort_err);
		pthread_mutex_unlock(&tp.mu);
		return DR_OK;
	}
	sq_push_locked(peer, req);
	pthread_mutex_unlock(&tp.mu);
	return DR_OK;
}

void dri_give_up(const dri_msg_id *id, int peer)
{
	struct peer *p;

	pthread_mutex_lock(&tp.mu);
	if (!tp.on || tp.abort_err || peer < 0 || peer >= tp.size ||
	    peer == tp.rank || tp.peers[peer].state == P_GONE)
		goto out;
	p = &tp.peers[peer];
	if (p->gave_busy && !p->gave_req.complete)
		goto out; /* one in flight: the peer is far behind anyway */
	/* Not connected: it waits in the queue, without a connection of
	 * ours (a rank that died must not fail the group through it), for
	 * the late rank's own connection (peer_up sends it). */
	p->gave_busy = 1;
	queue_call_locked(peer, &p->gave_req, id);
out:
	pthread_mutex_unlock(&tp.mu);
}

/* -------------------------------------------------------- receiving */

static void rx_into_req(int i, dri_req *r);
static void rx_into_umsg(int i);

/* Peer i's parked message is read after all: into receive r, or (r NULL)
 * into a buffer of the unexpected queue. */
static void unpark(int i, dri_req *r)
{
	struct peer *p = &tp.peers[i];

	p->parked = 0;
	p->rx_active = 1;
	if (r)
		rx_into_req(i, r);
	else
		rx_into_umsg(i);
	if (!tp.abort_err)
		on_readable(i);
	wake_locked(); /* a poller blocked now must watch it for input again */
}

dr_err dri_irecv(dri_req *req, const dri_msg_id *id, int peer, void *buf,
		 size_t len)
{
	struct umsg *m;

	req_init(req, id, peer, 0, buf, len);
	pthread_mutex_lock(&tp.mu);
	if (!tp.on || peer == tp.rank || peer >= tp.size ||
	    (peer < 0 && peer != DR_ANY_SOURCE)) {
		pthread_mutex_unlock(&tp.mu);
		return dri_fail(DR_EINVAL, "receive from rank %d: not a peer of "
				"rank %d (world size %d)", peer, tp.rank, tp.size);
	}
	if (tp.abort_err) {
		req_finish(req, tp.abort_err);
		goto out;
	}
	note_call_locked(id);
	if (tp.abort_err) {
		req_finish(req, tp.abort_err);
		goto out;
	}
	for (m = tp.uq_head; m; m = m->next)
		if ((peer < 0 || m->src == peer) && id_key_match(id, &m->id))
			break;
	/* The monitor gave up on us: the verdict, if it came, is the
	 * message of this seq; anything later waits for its own call. */
	if (id->coll == DRI_MONITORED_BARRIER && len && peer >= 0 &&
	    !(m && m->id.seq == id->seq) && gave_up_on_us(peer, id)) {
		req_finish(req, DR_ETIMEDOUT);
		goto out;
	}
	if (m) {
		struct peer *p = &tp.peers[m->src];
		uq_unlink(m);
		if (!check_match(req, m->src, &m->id, m->len)) {
			if (p->rx_msg == m)
				p->rx_msg = NULL;
			umsg_free(m);
			goto out;
		}
		req->source = m->src;
		if (len)
			dri_copy(buf, m->data, m->done);
		if (m->done == m->len) {
			req->done = len;
			req_finish(req, DR_OK);
		} else {
			/* Still arriving: the rest goes straight to buf. */
			p->rx_msg = NULL;
			p->rx_req = req;
			p->rx_dest = buf;
		}
		umsg_free(m);
		goto out;
	}
	/* Next in line: a parked message (the peer's, or any peer's for
	 * DR_ANY_SOURCE). */
	for (int i = peer < 0 ? 0 : peer; i < (peer < 0 ? tp.size : peer + 1); i++)
		if (tp.peers[i].parked && id_key_match(id, &tp.peers[i].rx.id)) {
			unpark(i, req);
			goto out;
		}
	if (tp.posted_tail)
		tp.posted_tail->next = req;
	else
		tp.posted_head = req;
	tp.posted_tail = req;
	/* A parked message of another kind stands in front of what this
	 * receive waits for: read it into a buffer. */
	for (int i = peer < 0 ? 0 : peer; i < (peer < 0 ? tp.size : peer + 1); i++)
		if (tp.peers[i].parked)
			unpark(i, NULL);
	/* Connect to the sender ourselves, so that its death is noticed
	 * even if it never connects to us. */
	if (peer >= 0)
		peer_usable(peer, "receive from");
out:
	pthread_mutex_unlock(&tp.mu);
	return DR_OK;
}

/* The most bytes one message of call id can carry: a rank sends a peer
 * at most every rank's share of the call's count, of the widest dtype
 * (all_gather's recursive doubling sends half of it), plus slack for the
 * small fixed-size messages of barriers and agreements.  A length from
 * the wire above it is a broken or hostile peer, never a buffer to
 * allocate. */
static uint64_t msg_len_max(const dri_msg_id *id)
{
	uint64_t per = ((uint64_t)tp.size + 1) * 8, c = id->count + 1;

	if (id->count >= UINT64_MAX / per)
		return UINT64_MAX;
	return c * per + 65536;
}

/* A header arrived from peer i: decide where its payload goes. */
static void on_header(int i)
{
	struct peer *p = &tp.peers[i];
	dri_wire_hdr *h = &p->rx;
	dri_req *r;
	char what[256];

	p->rx_req = NULL;
	p->rx_msg = NULL;
	p->rx_dest = NULL;
	p->rx_done = 0;
	p->rx_active = 1;
	if (h->kind == DRI_WIRE_ABORT) {
		if (h->len > ABORT_TEXT_MAX) {
			abort_locked(DR_EPROTO, "rank %d: oversized abort "
				     "message from rank %d", tp.rank, i);
			return;
		}
		p->abort_text = calloc(1, h->len + 1);
		if (!p->abort_text) {
			abort_locked(DR_ENOMEM, "out of memory");
			return;
		}
		p->rx_dest = (unsigned char *)p->abort_text;
		return;
	}
	if (h->kind == DRI_WIRE_CALL) {
		on_call(i); /* no payload: done once this returns */
		return;
	}
	if (h->len > msg_len_max(&h->id) || h->len > (uint64_t)SIZE_MAX / 2) {
		dri_msg_id_describe(&h->id, what, sizeof(what));
		abort_locked(DR_EPROTO, "rank %d: rank %d announced a %llu-byte "
			     "message in %s: more than that call can send",
			     tp.rank, i, (unsigned long long)h->len, what);
		return;
	}
	if (cancelled_take(i, &h->id))
		return; /* read and dropped (rx_dest NULL) */
	for (r = tp.posted_head; r; r = r->next)
		if ((r->peer < 0 || r->peer == i) && id_key_match(&r->id, &h->id))
			break;
	if (r) {
		posted_unlink(r);
		rx_into_req(i, r);
		return;
	}
	/* Nobody wants it yet: of a call this rank made otherwise, nobody
	 * will (the calls differ). */
	if (h->id.coll != DRI_P2P) {
		const dri_msg_id *mine = call_made(&h->id);

		if (mine && !same_call_id(mine, &h->id)) {
			calls_differ_locked(i, &h->id, tp.rank, mine);
			return;
		}
	}
	/* Park a large message nobody wants yet, unless a receive from this
	 * peer is waiting for something behind it in the stream. */
	for (r = tp.posted_head; r; r = r->next)
		if (r->peer < 0 || r->peer == i)
			break;
	if (h->len >= PARK_MIN && !r) {
		p->rx_active = 0;
		p->parked = 1;
		return;
	}
	rx_into_umsg(i);
}

/* The payload of peer i's current message goes into receive r. */
static void rx_into_req(int i, dri_req *r)
{
	struct peer *p = &tp.peers[i];

	if (!check_match(r, i, &p->rx.id, p->rx.len)) {
		req_finish(r, DR_EMISMATCH);
		return;
	}
	r->source = i;
	p->rx_req = r;
	p->rx_dest = r->buf;
}

/* The payload of peer i's current message goes into a buffer of the
 * unexpected queue. */
static void rx_into_umsg(int i)
{
	struct peer *p = &tp.peers[i];
	dri_wire_hdr *h = &p->rx;
	struct umsg *m = calloc(1, sizeof(*m));
	if (m)
		m->data = buf_get(h->len, &m->cap);
	if (!m || !m->data) {
		free(m);
		abort_locked(DR_ENOMEM, "rank %d: out of memory for a %llu-byte "
			     "message from rank %d", tp.rank,
			     (unsigned long long)h->len, i);
		return;
	}
	m->src = i;
	m->id = h->id;
	m->len = h->len;
	if (tp.uq_tail)
		tp.uq_tail->next = m;
	else
		tp.uq_head = m;
	tp.uq_tail = m;
	p->rx_msg = m;
	p->rx_dest = m->data;
}

static void on_payload_done(int i)
{
	struct peer *p = &tp.peers[i];

	p->rx_active = 0;
	if (p->rx.kind == DRI_WIRE_ABORT) {
		char *t = p->abort_text;
		p->abort_text = NULL;
		dr_err e = p->rx.err > DR_OK && p->rx.err < DR_ERR_COUNT_ ?
			   (dr_err)p->rx.err : DR_EABORTED;
		/* Name the rank that saw it first, once. */
		if (t && strstr(t, " (reported by rank "))
			abort_locked(e, "%s", t);
		else
			abort_locked(e, "%s (reported by rank %d)", t ? t : "", i);
		free(t);
		return;
	}
	if (p->rx_req) {
		p->rx_req->done = p->rx_req->len;
		req_finish(p->rx_req, DR_OK);
	} else if (p->rx_msg) {
		p->rx_msg->done = p->rx_msg->len;
	}
	p->rx_req = NULL;
	p->rx_msg = NULL;
}

/* A whole header has arrived in p->rhdr. */
static void on_header_bytes(int i)
{
	struct peer *p = &tp.peers[i];

	p->rhdr_got = 0;
	if (dri_wire_decode(p->rhdr, &p->rx) || p->rx.src != i) {
		abort_locked(DR_EPROTO, "rank %d: garbled message from rank %d: "
			     "%s", tp.rank, i, p->rx.src != i ? "wrong sender" :
			     dr_last_error());
		return;
	}
	if (p->rx.kind != DRI_WIRE_BYE) {
		on_header(i);
		return;
	}
	/* Left on purpose; requests that still need it fail when they are
	 * made or waited for. */
	close_peer(p);
	p->state = P_GONE;
	drop_calls_locked(p);
	for (dri_req *r = tp.posted_head; r; r = r->next)
		if (r->peer == i) {
			abort_locked(DR_EPEER, "rank %d: rank %d left the process "
				     "group while this rank waits for it", tp.rank, i);
			return;
		}
	if (p->sq_head)
		abort_locked(DR_EPEER, "rank %d: rank %d left the process group "
			     "before receiving this rank's message", tp.rank, i);
}

/* Payload bytes arrived (into rx_dest already, or to be copied from src). */
static void on_payload_bytes(int i, const unsigned char *src, size_t n)
{
	struct peer *p = &tp.peers[i];

	if (src && p->rx_dest)
		dri_copy(p->rx_dest + p->rx_done, src, n);
	p->rx_done += n;
	if (p->rx_msg)
		p->rx_msg->done = p->rx_done;
	if (p->rx_done == p->rx.len)
		on_payload_done(i);
}

/* Reads what peer i sent.  Small frames come through a staging buffer, so
 * one recv() takes several of them; a large payload goes straight into
 * the receive's buffer.  A short read means the socket is drained (poll is
 * level-triggered: it says when more comes), which saves the recv() that
 * would only return EAGAIN. */
static void on_readable(int i)
{
	struct peer *p = &tp.peers[i];
	int drained = 0;
	ssize_t n;

	if (!p->stage && !(p->stage = malloc(STAGE_LEN))) {
		abort_locked(DR_ENOMEM, "out of memory");
		return;
	}
	while (p->state == P_UP && !tp.abort_err && !p->parked) {
		size_t avail = p->s_len - p->s_off, want, k;
		if (p->rx_active && p->rx_done == p->rx.len) {
			on_payload_done(i);
			continue;
		}
		if (avail) {
			const unsigned char *src = p->stage + p->s_off;
			if (!p->rx_active) {
				k = DRI_WIRE_HDR - p->rhdr_got;
				k = k < avail ? k : avail;
				memcpy(p->rhdr + p->rhdr_got, src, k);
				p->s_off += k;
				p->rhdr_got += k;
				if (p->rhdr_got == DRI_WIRE_HDR)
					on_header_bytes(i);
			} else {
				k = p->rx.len - p->rx_done;
				k = k < avail ? k : avail;
				p->s_off += k;
				on_payload_bytes(i, src, k);
			}
			continue;
		}
		if (drained)
			return;
		want = p->rx_active ? p->rx.len - p->rx_done : 0;
		if (want >= STAGE_LEN && p->rx_dest) {
			n = peer_recv(i, p->rx_dest + p->rx_done, want);
			if (n > 0) {
				drained = (size_t)n < want;
				on_payload_bytes(i, NULL, (size_t)n);
				continue;
			}
		} else {
			n = peer_recv(i, p->stage, STAGE_LEN);
			if (n > 0) {
				p->s_off = 0;
				p->s_len = (size_t)n;
				drained = (size_t)n < STAGE_LEN;
				continue;
			}
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0)
			peer_io_error(i, errno);
		else if (!p->rx_active && !p->rhdr_got)
			peer_lost(i, "connection closed");
		else
			peer_lost(i, "connection closed mid-message");
		return;
	}
}

/* ---------------------------------------------------------- the loop */

/* One round of poll() with the lock released; the caller holds the lock
 * and tp.polling is 0.  Returns how many descriptors had events. */
static int poll_once(int wait_ms)
{
	int n = 0, need = 3 + tp.npend + tp.size, parked = 0;
	int rc;
	int64_t now;

	if (need > tp.cap_pfd) {
		struct pollfd *np = realloc(tp.pfd, need * sizeof(*np));
		int *nw = np ? realloc(tp.pfd_who, need * sizeof(*nw)) : NULL;
		if (np)
			tp.pfd = np;
		if (!nw) {
			abort_locked(DR_ENOMEM, "out of memory for poll set");
			return 0;
		}
		tp.pfd_who = nw;
		tp.cap_pfd = need;
	}
	now = dri_now_ms();
	tp.pfd[n] = (struct pollfd){ tp.wake_fd, POLLIN, 0 };
	tp.pfd_who[n++] = -1;
	if (dri_shm_poll_fd() >= 0) { /* a ring write wakes us too */
		tp.pfd[n] = (struct pollfd){ dri_shm_poll_fd(), POLLIN, 0 };
		tp.pfd_who[n++] = -1;
	}
	if (tp.listen_fd >= 0 && now >= tp.pause_until) {
		tp.pfd[n] = (struct pollfd){ tp.listen_fd, POLLIN, 0 };
		tp.pfd_who[n++] = -2;
	} else if (tp.listen_fd >= 0 && wait_ms > tp.pause_until - now) {
		wait_ms = (int)(tp.pause_until - now);
	}
	for (int k = 0; k < tp.npend; k++) {
		int64_t left = tp.pend[k].deadline - now;
		tp.pfd[n] = (struct pollfd){ tp.pend[k].fd, POLLIN, 0 };
		tp.pfd_who[n++] = -3 - k;
		if (left < 0)
			left = 0;
		if (wait_ms < 0 || left < wait_ms)
			wait_ms = (int)left;
	}
	for (int i = 0; i < tp.size; i++) {
		struct peer *p = &tp.peers[i];
		short ev;
		if (p->fd < 0 || p->state == P_GONE)
			continue;
		if (p->state == P_CONNECTING)
			ev = POLLOUT;
		else /* parked: only whether it hangs up */
			ev = (p->parked ? 0 : POLLIN) | POLLRDHUP |
			     (p->state == P_UP && p->sq_head ? POLLOUT : 0);
		parked += p->parked;
		tp.pfd[n] = (struct pollfd){ p->fd, ev, 0 };
		tp.pfd_who[n++] = i;
	}
	if (parked && wait_ms > PARK_MS)
		wait_ms = PARK_MS;
	tp.polling = 1;
	pthread_mutex_unlock(&tp.mu);
	rc = poll(tp.pfd, (nfds_t)n, wait_ms);
	pthread_mutex_lock(&tp.mu);
	tp.polling = 0;
	if (rc == 0 && parked && wait_ms == PARK_MS)
		for (int i = 0; i < tp.size && !tp.abort_err; i++)
			if (tp.peers[i].parked)
				unpark(i, NULL); /* see PARK_MS */
	if (rc >= 0 && !tp.abort_err) {
		int done_pend = 0, accept = 0;
		now = dri_now_ms();
		for (int k = 0; k < n && !tp.abort_err; k++) {
			short re = tp.pfd[k].revents;
			int who = tp.pfd_who[k];
			if (who <= -3 && !re && now >= tp.pend[-3 - who].deadline) {
				/* too slow to prove the key: dropped */
				pending_close(-3 - who);
				done_pend = 1;
				continue;
			}
			if (!re)
				continue;
			if (re & POLLNVAL) {
				/* A descriptor of ours was closed under us (by
				 * the program?): polling it again would spin. */
				if (who >= 0) {
					struct peer *p = &tp.peers[who];
					p->fd = -1;
					abort_locked(DR_EPEER, "rank %d: the socket "
						     "to rank %d (fd %d) was closed "
						     "under the transport", tp.rank,
						     who, tp.pfd[k].fd);
				} else if (who <= -3) {
					tp.pend[-3 - who].fd = -1;
					done_pend = 1;
				} else {
					if (who == -2)
						tp.listen_fd = -1;
					else
						tp.wake_fd = -1;
					abort_locked(DR_ESYS, "rank %d: the "
						     "transport's %s (fd %d) was "
						     "closed under it", tp.rank,
						     who == -2 ? "listening socket" :
						     "wake-up descriptor",
						     tp.pfd[k].fd);
				}
				continue;
			}
			if (who == -1) {
				uint64_t v; /* the eventfd, or shm's datagrams */
				while (read(tp.pfd[k].fd, &v, sizeof(v)) > 0 &&
				       tp.pfd[k].fd != tp.wake_fd)
					;
			} else if (who == -2) {
				accept = 1; /* after the loop: it moves tp.pend */
			} else if (who <= -3) {
				int idx = -3 - who;
				if (on_pending(idx)) {
					tp.pend[idx].fd = -1;
					done_pend = 1;
				}
			} else {
				struct peer *p = &tp.peers[who];
				if (p->fd != tp.pfd[k].fd)
					continue; /* replaced meanwhile */
				if (p->state == P_CONNECTING) {
					on_connected(who);
				} else if (p->state == P_HS_SENT) {
					on_challenge(who);
				} else if (p->state == P_HS_PROOF) {
					on_ack(who);
				} else if (p->state == P_UP) {
					if (re & POLLOUT)
						flush_peer(who);
					if (p->parked &&
					    (re & (POLLRDHUP | POLLHUP | POLLERR)))
						unpark(who, NULL); /* read what it said last */
					else if (re & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))
						on_readable(who);
				}
			}
		}
		if (done_pend)
			pending_compact();
		if (accept && !tp.abort_err)
			on_accept();
	}
	pthread_cond_broadcast(&tp.cv);
	return rc > 0 ? rc : 0;
}

static int64_t now_us(void)
{
	return dri_now_ns() / 1000;
}

/* Waits until the poller has done a round, or ms pass. */
static void cond_wait_ms(int64_t ms)
{
	dri_cond_wait_ms(&tp.cv, &tp.mu, ms);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
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
/* Reads and writes the rings that changed; returns whether any had. */
static int drain_rings_locked(void)
{
	int ready[64], n, moved = 0;

	do {
		n = dri_shm_ready(ready, 64);
		for (int k = 0; k < n && !tp.abort_err; k++) {
			int i = ready[k];

			if (tp.peers[i].state != P_UP)
				continue;
			if (tp.peers[i].sq_head)
				flush_peer(i);
			if (tp.peers[i].state == P_UP)
				on_readable(i);
			moved = 1;
		}
	} while (n == 64 && !tp.abort_err);
	return moved;
}

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
	if (d >= 0 && tp.peers[d].state == P_UP && !tp.abort_err) {
		/* It may have said goodbye (or why it failed) just before. */
		if (!tp.peers[d].parked)
			on_readable(d);
		else
			unpark(d, NULL);
		if (tp.peers[d].state == P_UP && !tp.abort_err)
			peer_lost(d, "its process exited");
		return 1;
	}
	if (moved || tp.abort_err) {
		last_event_ms = dri_now_ms();
		pthread_cond_broadcast(&tp.cv);
		return 1;
	}
	for (int i = 0; i < tp.size; i++)
		parked += dri_shm_is_peer(i) && tp.peers[i].parked;
	if (parked && dri_now_ms() - last_event_ms >= PARK_MS) {
		/* Nothing moves: read the parked messages after all (see
		 * PARK_MS). */
		for (int i = 0; i < tp.size && !tp.abort_err; i++)
			if (dri_shm_is_peer(i) && tp.peers[i].parked)
				unpark(i, NULL);
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
		tp.polling = 1;
		pthread_mutex_unlock(&tp.mu);
		dri_shm_wait(parked && wait_ms > PARK_MS ? PARK_MS : wait_ms);
		pthread_mutex_lock(&tp.mu);
		tp.polling = 0;
		pthread_cond_broadcast(&tp.cv);
		return 0;
	}
	pthread_mutex_unlock(&tp.mu);
	if (dri_shm_oversubscribed() || ++spins % 16 == 0)
		sched_yield();
	else
		cpu_relax();
	pthread_mutex_lock(&tp.mu);
	return 0;
}

/* Progress one step: poll ourselves, or let the current poller work.
 * Returns whether anything happened on our poll. */
static int step_locked(int64_t wait_ms, int spin)
{
	if (tp.polling) {
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
	pthread_mutex_unlock(&tp.mu);
	sched_yield();
	pthread_mutex_lock(&tp.mu);
	return 0;
}

void dri_transport_progress(int64_t timeout_ms)
{
	pthread_mutex_lock(&tp.mu);
	/* With no time to give, a poll by another thread is not waited for
	 * (a collective that copies between polls must not sleep). */
	if (tp.on && !tp.abort_err && (timeout_ms > 0 || !tp.polling))
		step_locked(timeout_ms, 0);
	pthread_mutex_unlock(&tp.mu);
}

/* Removes an incomplete request from wherever the transport holds it. */
static void cancel_locked(dri_req *r)
{
	if (r->complete)
		return;
	if (!r->is_send) {
		if (r->peer >= 0) {
			int k = tp.cancelled_next;
			tp.cancelled[k].id = r->id;
			tp.cancelled[k].peer = r->peer;
			tp.cancelled_next = (k + 1) % CANCELLED_MAX;
			if (tp.ncancelled < CANCELLED_MAX)
				tp.ncancelled++;
		}
		posted_unlink(r);
		for (int i = 0; i < tp.size; i++)
			if (tp.peers[i].rx_req == r) {
				tp.peers[i].rx_req = NULL;
				tp.peers[i].rx_dest = NULL; /* discard the rest */
			}
	} else if (r->peer >= 0 && r->peer < tp.size) {
		struct peer *p = &tp.peers[r->peer];
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
					c->priv = REQ_OWNED;
					*pp = c;
					if (p->sq_tail == r)
						p->sq_tail = c;
				} else {
					abort_locked(DR_ENOMEM, "out of memory");
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

/* A receive of a call of the world group from a peer that is in the
 * world call of the same seq through flags instead (coll_shm.c): the
 * peer will never send it, so the calls differ.  Looked at before each
 * sleep.  The lower rank is named first, as the flags name them. */
static void check_flag_peers_locked(const dri_req *reqs, int n)
{
	for (int k = 0; k < n && !tp.abort_err; k++) {
		const dri_req *r = &reqs[k];
		dri_msg_id pid;

		if (r->complete || r->id.group_id || r->id.coll == DRI_P2P ||
		    !dri_shm_peer_call(r->peer, r->id.seq, &pid))
			continue;
		if (r->peer < tp.rank)
			calls_differ_locked(r->peer, &pid, tp.rank, &r->id);
		else
			calls_differ_locked(tp.rank, &r->id, r->peer, &pid);
	}
}

/* A message of the world group from a call at or before one that goes
 * through flags (coll_shm.c) that nobody has received: the calls
 * differed (as a receive of it would have found over TCP).  One of this very seq is given
 * LATE_MS first: the peer that sent it sees our flag as soon as it waits,
 * and names the calls in the order TCP's receiver would. */
#define LATE_MS 50
static void check_stale_locked(const dri_msg_id *id, int64_t waited_ms)
{
	dri_req r;

	memset(&r, 0, sizeof(r));
	r.id = *id;
	for (struct umsg *m = tp.uq_head; m; m = m->next)
		if (!m->id.group_id && m->id.coll != DRI_P2P &&
		    (m->id.seq < id->seq ||
		     (m->id.seq == id->seq && waited_ms >= LATE_MS))) {
			check_match(&r, m->src, &m->id, m->len);
			/* A mismatch aborts, and the abort frees the queue
			 * (m too): stop before reading m->next. */
			if (tp.abort_err)
				return;
		}
	for (int i = 0; i < tp.size && !tp.abort_err; i++) {
		struct peer *p = &tp.peers[i];

		if (p->parked && !p->rx.id.group_id && p->rx.id.coll != DRI_P2P &&
		    (p->rx.id.seq < id->seq ||
		     (p->rx.id.seq == id->seq && waited_ms >= LATE_MS)))
			check_match(&r, i, &p->rx.id, p->rx.len);
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
	int64_t spin_end = spin && tp.spin_us ? now_us() + tp.spin_us : 0;
	int shown = -1;
	dr_err err;

	call_deadline(id, &deadline, &timeout_ms);
	pthread_mutex_lock(&tp.mu);
	while (!tp.abort_err) {
		int late = waiting_for(arg);
		int64_t now = dri_now_ms(), left = deadline - now;

		if (late < 0)
			break;
		check_stale_locked(id, now - t0_ms);
		if (tp.abort_err)
			break;
		if (late != shown) /* for the launcher: the rank we wait for */
			dri_ctl_wait(shown = late, 0);
		if (tp.peers[late].state == P_GONE) {
			/* It said goodbye (destroy, or a return from main)
			 * before it came: its flag will not move, and its
			 * death is no longer watched. */
			abort_locked(DR_EPEER, "rank %d: rank %d left the process "
				     "group while this rank waits for it",
				     tp.rank, late);
			break;
		}
		dri_shm_watch(late); /* its death, as for a receive from it */
		if (left <= 0) {
			char what[256];

			dri_msg_id_describe(id, what, sizeof(what));
			abort_locked(DR_ETIMEDOUT, "rank %d: timed out after %lld "
				     "ms in %s (seq %llu) waiting for rank %d",
				     tp.rank, (long long)timeout_ms, what,
				     (unsigned long long)id->seq, late);
			break;
		}
		step_locked(left, spin_end && now_us() < spin_end);
	}
	err = tp.abort_err;
	if (err)
		dri_fail(err, "%s", tp.abort_msg);
	pthread_mutex_unlock(&tp.mu);
	return err;
}

dr_err dri_transport_stale_check(const dri_msg_id *id)
{
	dr_err err;

	pthread_mutex_lock(&tp.mu);
	if (!tp.abort_err) {
		drain_rings_locked();
		check_stale_locked(id, LATE_MS);
	}
	err = tp.abort_err;
	if (err)
		dri_fail(err, "%s", tp.abort_msg);
	pthread_mutex_unlock(&tp.mu);
	return err;
}

/* deadline 0: the earliest of the requests' calls' (call_deadline); else
 * this one, made from timeout_ms (the monitored barrier's, not fatal). */
static dr_err wait_reqs(dri_req *reqs, int n, int64_t deadline,
			int64_t timeout_ms, int fatal)
{
	int64_t spin_end = tp.spin_us ? now_us() + tp.spin_us : 0;
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
	pthread_mutex_lock(&tp.mu);
	for (;;) {
		while (i < n && __atomic_load_n(&reqs[i].complete, __ATOMIC_ACQUIRE))
			i++;
		if (i == n || tp.abort_err)
			break;
		if (i != shown) /* for the launcher: the peer we wait on */
			dri_ctl_wait(reqs[shown = i].peer, reqs[i].is_send);
		int64_t left = deadline - dri_now_ms();
		if (left <= 0) {
			char what[256];
			dri_req *r = &reqs[i];
			dri_msg_id_describe(&r->id, what, sizeof(what));
			if (!fatal) {
				for (int k = i; k < n; k++)
					cancel_locked(&reqs[k]);
				pthread_mutex_unlock(&tp.mu);
				return dri_fail(DR_ETIMEDOUT, "rank %d: timed out "
						"after %lld ms in %s (seq %llu) "
						"waiting to %s rank %d", tp.rank,
						(long long)timeout_ms, what,
						(unsigned long long)r->id.seq,
						r->is_send ? "send to" : "receive from",
						r->peer);
			}
			abort_locked(DR_ETIMEDOUT, "rank %d: timed out after %lld "
				     "ms in %s (seq %llu) waiting to %s rank %d",
				     tp.rank, (long long)timeout_ms, what,
				     (unsigned long long)r->id.seq,
				     r->is_send ? "send to" : "receive from",
				     r->peer);
			break;
		}
		/* Spin while bytes keep moving (a large message streaming
		 * in would otherwise cost a sleep and a wake-up per socket
		 * buffer's worth), block once nothing happened for spin_us. */
		int spinning = spin_end && now_us() < spin_end;
		if (!spinning && dri_shm_npeers()) {
			check_flag_peers_locked(reqs + i, n - i);
			if (tp.abort_err)
				break;
		}
		if (announce_at && !spinning) {
			int64_t now = dri_now_ms();

			if (now >= announce_at) {
				announce_at = 0;
				announce_locked(reqs + i, n - i);
				if (tp.abort_err)
					break;
			} else if (announce_at - now < left) {
				left = announce_at - now;
			}
		}
		if (step_locked(left, spinning) && tp.flow_us)
			spin_end = now_us() + tp.flow_us;
	}
	for (int k = 0; k < n && !err; k++)
		if (reqs[k].complete && reqs[k].status)
			err = reqs[k].status;
	if (!err && tp.abort_err)
		err = tp.abort_err;
	if (err)
		dri_fail(err, "%s", tp.abort_msg);
	pthread_mutex_unlock(&tp.mu);
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
		pthread_mutex_lock(&tp.mu);
		cancel_locked(&r[0]);
		pthread_mutex_unlock(&tp.mu);
		return err;
	}
	return dri_waitall(r, 2);
}

/* ------------------------------------------------------------- stop */

/* Reads and drops what peer p sent and we did not read (up to a bound):
 * closing a socket with unread data sends a reset, which can destroy the
 * ABORT or BYE frame we sent before the peer reads it, and the peer would
 * then blame a crash. */
static void drain_peer(struct peer *p)
{
	char b[16384];
	size_t total = 0;
	ssize_t n;

	if (p->fd < 0)
		return;
	while (total < ((size_t)4 << 20) &&
	       (n = recv(p->fd, b, sizeof(b), MSG_DONTWAIT)) > 0)
		total += (size_t)n;
}

/* Before the sockets close: waits (2 s at most) until every byte we
 * wrote to a TCP peer has reached it, reading meanwhile.  A socket closed
 * with unread input sends a reset, and a reset throws away what our
 * kernel still held for the peer: a peer still waiting for our last
 * message may announce its call (a CALL frame) just as we close, and
 * would lose that message. */
static void settle_sockets_locked(void)
{
	int64_t deadline = dri_now_ms() + 2000;

	while (dri_now_ms() < deadline) {
		int busy = 0;
		for (int i = 0; i < tp.size; i++) {
			struct peer *p = &tp.peers[i];
			int q = 0;
			if (p->fd < 0 || p->state != P_UP ||
			    dri_shm_is_peer(i))
				continue;
			drain_peer(p);
			if (ioctl(p->fd, SIOCOUTQ, &q) == 0 && q > 0)
				busy = 1;
		}
		if (!busy)
			return;
		poll(NULL, 0, 1);
	}
}

void dri_transport_stop(void)
{
	int64_t deadline;

	pthread_mutex_lock(&tp.mu);
	if (!tp.on) {
		/* Listening but never started (init failed in between): what
		 * dri_transport_listen opened goes, so init can be retried. */
		if (tp.listen_fd >= 0)
			close(tp.listen_fd);
		if (tp.wake_fd >= 0)
			close(tp.wake_fd);
		if (tp.reserve_fd >= 0)
			close(tp.reserve_fd);
		tp.listen_fd = tp.wake_fd = tp.reserve_fd = -1;
		pthread_mutex_unlock(&tp.mu);
		return;
	}
	/* Let queued sends drain a little, so a peer gets what it was sent
	 * before it learns that we left. */
	deadline = dri_now_ms() + 2000;
	while (!tp.abort_err && dri_now_ms() < deadline) {
		int busy = 0;
		for (int i = 0; i < tp.size; i++)
			if (tp.peers[i].sq_head &&
			    tp.peers[i].state != P_GONE &&
			    tp.peers[i].state != P_NONE) /* dri_give_up's */
				busy = 1;
		if (!busy)
			break;
		step_locked(100, 0);
	}
	while (tp.polling)
		cond_wait_ms(100);
	for (int i = 0; i < tp.size; i++) {
		struct peer *p = &tp.peers[i];
		if (p->state == P_UP && !tp.abort_err && !p->shdr_ready) {
			dri_wire_hdr h;
			memset(&h, 0, sizeof(h));
			h.magic = DRI_WIRE_MAGIC;
			h.version = DRI_WIRE_VERSION;
			h.kind = DRI_WIRE_BYE;
			h.src = tp.rank;
			send_frame_best_effort(i, &h, NULL);
		}
	}
	if (!tp.abort_err)
		settle_sockets_locked();
	for (int i = 0; i < tp.size; i++) {
		struct peer *p = &tp.peers[i];
		drain_peer(p);
		close_peer(p);
		p->state = P_GONE;
	}
	for (int i = 0; i < tp.npend; i++)
		close(tp.pend[i].fd);
	tp.npend = 0;
	fail_all_locked(DR_EABORTED);
	pool_drain();
	if (tp.reserve_fd >= 0)
		close(tp.reserve_fd);
	tp.reserve_fd = -1;
	if (tp.listen_fd >= 0)
		close(tp.listen_fd);
	if (tp.wake_fd >= 0)
		close(tp.wake_fd);
	tp.listen_fd = tp.wake_fd = -1;
	for (int i = 0; i < tp.size; i++)
		free(tp.peers[i].stage);
	free(tp.peers);
	tp.peers = NULL;
	dri_shm_stop();
	free(tp.pend);
	tp.pend = NULL;
	tp.cap_pend = 0;
	free(tp.pfd);
	free(tp.pfd_who);
	tp.pfd = NULL;
	tp.pfd_who = NULL;
	tp.cap_pfd = 0;
	if (tp.addrs) {
		for (int i = 0; i < tp.size; i++)
			free(tp.addrs[i]);
		free(tp.addrs);
	}
	tp.addrs = NULL;
	tp.ncancelled = tp.cancelled_next = 0;
	tp.ncalls = tp.calls_next = tp.nheard = tp.heard_next = 0;
	memset(tp.heard, 0, sizeof(tp.heard));
	memset(tp.gave, 0, sizeof(tp.gave));
	tp.gave_next = 0;
	tp.on = 0;
	__atomic_store_n(&tp.abort_err, DR_OK, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&tp.mu);
}
