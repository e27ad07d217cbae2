/*
 * tcp.c - the TCP link (links.h): the listening socket, connections to
 * peers on other hosts, and auth.h's handshake on each.
 *
 * Every rank listens on one socket, on the address its peers reach it at
 * (the local end of its connection to the store: loopback for a
 * single-host job); the addresses of all ranks come from the store at
 * init.  A connection to a peer is opened only when a request first needs
 * it (so 256 ranks fit in the default fd limit) and starts with auth.h's
 * handshake: both ends prove the job's transport key, bound to both ranks
 * and fresh nonces, before a byte of anything else is read.  Until then an
 * incoming connection holds a fixed-size buffer, at most PENDING_MAX of
 * them are kept (when all are taken, the oldest goes once it has had
 * HS_GRACE_MS; until then new ones wait in the kernel's backlog), and each
 * is dropped after DRI_HS_MS; a peer whose connection is dropped before
 * the handshake ended connects again (RECONNECT_MAX times).  When two
 * ranks connect to each other at once, the
 * connection opened by the lower rank wins: the acceptor answers the
 * proof with one byte, 1 (kept) or 0 (dropped).
 *
 * The loop (transport.c) owns the poll: it asks this file for the
 * listener's and the pending connections' entries and hands their events
 * back, and it hands the events of a peer whose handshake is under way to
 * dri_tcp_handshake.  What comes back is an error to abort with (the
 * message set), or the peer whose connection came up (its queue is the
 * loop's to flush).  Called with transport.c's lock held.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "links.h"
#include "net.h"
#include "tcp.h"

#define PENDING_MAX 64   /* incoming connections not yet authenticated */
#define RECONNECT_MAX 50 /* connections dropped before the handshake ended */
#define PAUSE_MS 100     /* not watching the listener, at EMFILE */
#define HS_GRACE_MS 250  /* a pending connection's time before it may be
			  * dropped to make room */
#define SOCKBUF (4 << 20)

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

/* The TCP side of this rank's transport. */
static struct {
	int listen_fd, reserve_fd;
	int64_t pause_until;
	uint64_t serial;
	uint8_t key[DRI_KEY_LEN];
	char **addrs;
	struct pending *pend;
	int npend, cap_pend;
	int done_pend, accept; /* this poll round's: see dri_tcp_poll_done */
} tcp = {
	.listen_fd = -1,
	.reserve_fd = -1,
};

#define RANK dri_links.rank

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

/* ------------------------------------------------------ the TCP link */

static ssize_t tcp_send(int peer, const struct iovec *iov, int n, int all)
{
	struct msghdr mh;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = (struct iovec *)iov;
	mh.msg_iovlen = (size_t)n;
	/* all: a frame that does not fit in the socket buffer whole would
	 * leave the stream torn; the close then tells the peer instead. */
	return sendmsg(PEER(peer)->fd, &mh,
		       MSG_NOSIGNAL | (all ? MSG_DONTWAIT : 0));
}

static ssize_t tcp_recv(int peer, void *buf, size_t len)
{
	return recv(PEER(peer)->fd, buf, len, 0);
}

static int tcp_poll_fd(int peer)
{
	return PEER(peer)->fd;
}

static enum dri_peer_state tcp_start(int peer)
{
	(void)peer;
	return P_NONE; /* connected when a request first needs it */
}

const struct dri_link_ops dri_link_tcp = {
	.name = "tcp",
	.send = tcp_send,
	.recv = tcp_recv,
	.poll_fd = tcp_poll_fd,
	.start = tcp_start,
};

/* ------------------------------------------------- start and stop */

dr_err dri_tcp_listen(const char *host, int rank, int *port)
{
	int fds[DRI_NET_MAXFD], nfd, fd;
	dr_err err;

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
	tcp.reserve_fd = dri_net_reserve();
	tcp.pause_until = 0;
	tcp.listen_fd = fd;
	return DR_OK;
}

int dri_tcp_listening(void)
{
	return tcp.listen_fd >= 0;
}

void dri_tcp_start(char **addrs, const uint8_t key[DRI_KEY_LEN], int ntcp)
{
	/* Every peer in shared memory: nobody has a reason to connect, so
	 * nobody is listened to (and no stranger waits in the backlog). */
	if (dri_links.size > 1 && !ntcp && tcp.listen_fd >= 0) {
		close(tcp.listen_fd);
		tcp.listen_fd = -1;
	}
	tcp.addrs = addrs;
	memcpy(tcp.key, key, DRI_KEY_LEN);
}

void dri_tcp_abort(void)
{
	for (int i = 0; i < tcp.npend; i++)
		close(tcp.pend[i].fd);
	tcp.npend = 0;
	if (tcp.listen_fd >= 0)
		close(tcp.listen_fd);
	tcp.listen_fd = -1;
}

void dri_tcp_stop(int nranks)
{
	dri_tcp_abort();
	if (tcp.reserve_fd >= 0)
		close(tcp.reserve_fd);
	tcp.reserve_fd = -1;
	free(tcp.pend);
	tcp.pend = NULL;
	tcp.cap_pend = 0;
	if (tcp.addrs) {
		for (int i = 0; i < nranks; i++)
			free(tcp.addrs[i]);
		free(tcp.addrs);
	}
	tcp.addrs = NULL;
}

/* Reads and drops what peer p sent and we did not read (up to a bound):
 * closing a socket with unread data sends a reset, which can destroy the
 * ABORT or BYE frame we sent before the peer reads it, and the peer would
 * then blame a crash. */
void dri_tcp_drain(struct dri_peer *p)
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

void dri_tcp_settle(void)
{
	int64_t deadline = dri_now_ms() + 2000;

	while (dri_now_ms() < deadline) {
		int busy = 0;
		for (int i = 0; i < dri_links.size; i++) {
			struct dri_peer *p = PEER(i);
			int q = 0;
			if (!p || p->fd < 0 || p->state != P_UP ||
			    p->ops != &dri_link_tcp)
				continue;
			dri_tcp_drain(p);
			if (ioctl(p->fd, SIOCOUTQ, &q) == 0 && q > 0)
				busy = 1;
		}
		if (!busy)
			return;
		poll(NULL, 0, 1);
	}
}

/* ------------------------------------------------------ connecting */

dr_err dri_tcp_connect(int i)
{
	struct dri_peer *p = PEER(i);

	p->fd = connect_addr(tcp.addrs[i]);
	if (p->fd < 0)
		return dri_fail(DR_EPEER, "rank %d: cannot connect to rank %d "
				"at %s: %s%s", RANK, i, tcp.addrs[i],
				dri_strerror(errno),
				errno == EMFILE || errno == ENFILE ?
				" (the open file limit, ulimit -n, is too "
				"low)" : "");
	p->state = P_CONNECTING;
	p->hs_got = 0;
	return DR_OK;
}

/* Peer i's connection is up on fd: the stream starts afresh. */
static void peer_up(int i, int fd)
{
	struct dri_peer *p = PEER(i);

	p->fd = fd;
	p->state = P_UP;
	p->rhdr_got = 0;
	p->rx_active = 0;
	dri_peer_park(p, 0);
	p->s_off = p->s_len = 0;
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
static dr_err hs_retry(int i, const char *why)
{
	struct dri_peer *p = PEER(i);

	if (p->reconnects++ >= RECONNECT_MAX)
		return dri_peer_lost(i, why);
	close(p->fd);
	p->fd = -1;
	p->state = P_NONE;
	return dri_tcp_connect(i);
}

/* Our connect() completed (or failed): send the HELLO. */
static dr_err on_connected(int i)
{
	struct dri_peer *p = PEER(i);
	int err = 0;
	socklen_t el = sizeof(err);
	dr_err e;

	if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err)
		return dri_fail(DR_EPEER, "rank %d: cannot connect to rank %d "
				"at %s: %s (has it exited?)", RANK, i,
				tcp.addrs[i], dri_strerror(err));
	e = dri_hs_hello(&p->hs, DRI_HS_TRANSPORT, RANK, dri_links.size);
	if (e)
		return dri_fail(e, "rank %d: %s", RANK, dr_last_error());
	if (hs_send(p->fd, p->hs.hello, DRI_HS_HELLO) < 0)
		return hs_retry(i, "handshake not sent");
	p->hs_got = 0;
	p->state = P_HS_SENT;
	return DR_OK;
}

/* Reads peer i's challenge; when whole, checks it and sends our proof. */
static dr_err on_challenge(int i)
{
	struct dri_peer *p = PEER(i);
	unsigned char proof[DRI_HS_PROOF];
	int srv;
	ssize_t n;
	dr_err e;

	do
		n = recv(p->fd, p->hsbuf + p->hs_got, DRI_HS_CHAL - p->hs_got, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return DR_OK;
	if (n <= 0 && p->hs_got == DRI_NET_NOFD_LEN &&
	    !memcmp(p->hsbuf, DRI_NET_NOFD, DRI_NET_NOFD_LEN))
		return dri_fail(DR_ESYS, "rank %d: rank %d at %s is out of "
				"file descriptors and closed our connection: "
				"raise its open file limit (ulimit -n)", RANK,
				i, tcp.addrs[i]);
	if (n <= 0)
		return hs_retry(i, "closed during the handshake");
	p->hs_got += (size_t)n;
	if (p->hs_got < DRI_HS_CHAL)
		return DR_OK;
	e = dri_hs_answer(&p->hs, tcp.key, p->hsbuf, &srv, proof);
	if (e)
		return dri_fail(e, "rank %d: rank %d at %s: %s", RANK, i,
				tcp.addrs[i], dr_last_error());
	if (srv != i)
		return dri_fail(DR_EPROTO, "rank %d: the process at %s (rank "
				"%d's address) says it is rank %d", RANK,
				tcp.addrs[i], i, srv);
	if (hs_send(p->fd, proof, sizeof(proof)) < 0)
		return dri_peer_lost(i, "handshake not sent");
	p->state = P_HS_PROOF;
	return DR_OK;
}

static dr_err on_ack(int i, int *up)
{
	struct dri_peer *p = PEER(i);
	unsigned char c;
	ssize_t n;

	do
		n = recv(p->fd, &c, 1, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return DR_OK;
	if (n <= 0) /* dropped for room before it read our proof? */
		return hs_retry(i, "closed during the handshake");
	if (c == 1) {
		peer_up(i, p->fd);
		*up = i;
		return DR_OK;
	}
	/* Dropped: the lower rank's own connection to us wins. */
	close(p->fd);
	p->fd = -1;
	p->state = P_WAIT;
	return DR_OK;
}

dr_err dri_tcp_handshake(int i, int *up)
{
	switch (PEER(i)->state) {
	case P_CONNECTING:
		return on_connected(i);
	case P_HS_SENT:
		return on_challenge(i);
	case P_HS_PROOF:
		return on_ack(i, up);
	default:
		return DR_OK;
	}
}

/* ---------------------------------------------------- accepting */

static void pending_close(int k)
{
	close(tcp.pend[k].fd);
	tcp.pend[k].fd = -1;
}

/* Closes the pending connections marked -1, keeping the order. */
static void pending_compact(void)
{
	int w = 0;

	for (int k = 0; k < tcp.npend; k++)
		if (tcp.pend[k].fd >= 0)
			tcp.pend[w++] = tcp.pend[k];
	tcp.npend = w;
}

/* When the listener may be served again: at once while a pending slot
 * is free; when they are all taken, once the oldest has had HS_GRACE_MS
 * to prove the key.  A real peer answers at once, so the room a flood of
 * idle connections takes is short; but thousands of real peers that
 * connect at once (4096 ranks sending to rank 0) wait in the kernel's
 * backlog instead of being accepted and dropped unheard by the hundred. */
static int64_t room_at(void)
{
	if (tcp.npend < PENDING_MAX)
		return 0;
	return tcp.pend[0].deadline - DRI_HS_MS + HS_GRACE_MS;
}

static void on_accept(void)
{
	for (;;) {
		if (tcp.npend >= PENDING_MAX) {
			if (dri_now_ms() < room_at())
				return; /* the rest wait in the backlog */
			/* The oldest goes: too slow for a real peer. */
			pending_close(0);
			pending_compact();
		}
		int fd = dri_net_accept(tcp.listen_fd, &tcp.reserve_fd,
					tcp.npend > 0);
		int one = 1;
		if (fd == DRI_ACCEPT_FULL) {
			pending_close(0); /* the oldest */
			pending_compact();
			continue;
		}
		if (fd == DRI_ACCEPT_DROPPED)
			continue;
		if (fd == DRI_ACCEPT_PAUSE) {
			tcp.pause_until = dri_now_ms() + PAUSE_MS;
			return;
		}
		if (fd < 0)
			return;
		if (tcp.npend == tcp.cap_pend) {
			int cap = tcp.cap_pend ? 2 * tcp.cap_pend : 16;
			struct pending *np = realloc(tcp.pend, cap * sizeof(*np));
			if (!np) {
				close(fd);
				return;
			}
			tcp.pend = np;
			tcp.cap_pend = cap;
		}
		if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))) {
			close(fd);
			continue;
		}
		tcp.pend[tcp.npend] = (struct pending){
			.fd = fd,
			.deadline = dri_now_ms() + DRI_HS_MS,
			.serial = tcp.serial++,
		};
		tcp.npend++;
	}
}

/* Reads an incoming handshake; returns 1 when pending slot k is done
 * (kept or dropped), with *up the peer whose connection it became.
 * Nothing that has not proved the key gets more than the challenge. */
static int on_pending(int k, int *up)
{
	struct pending *pe = &tcp.pend[k];
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
		if (dri_hs_challenge(&pe->hs, tcp.key, pe->buf, DRI_HS_TRANSPORT,
				     RANK, &r, &size) ||
		    size != dri_links.size || r < 0 || r >= dri_links.size ||
		    r == RANK || hs_send(pe->fd, pe->hs.chal, DRI_HS_CHAL) < 0)
			goto drop;
		pe->rank = r;
		pe->proving = 1;
		return 0;
	}
	if (!dri_hs_verify(&pe->hs, tcp.key, pe->buf))
		goto drop;
	r = pe->rank;
	struct dri_peer *p = dri_peer_get(r);
	if (!p)
		goto drop; /* out of memory: it tries again */
	if (p->state == P_GONE || p->state == P_UP)
		ack = 0;
	else if (r < RANK)
		ack = 1; /* the lower rank's connection wins */
	else
		ack = p->state == P_NONE || p->state == P_WAIT;
	if (hs_send(pe->fd, &ack, 1) < 0 || !ack)
		goto drop;
	if (p->fd >= 0)
		close(p->fd); /* our own, which lost */
	peer_up(r, pe->fd);
	*up = r;
	return 1;
drop:
	close(pe->fd);
	return 1;
}

/* ------------------------------------------------ the loop's poll */

int dri_tcp_npoll(void)
{
	return 1 + tcp.npend;
}

int dri_tcp_poll_add(struct pollfd *pfd, int *who, int n, int64_t now,
		     int *wait_ms)
{
	int64_t until = tcp.pause_until > room_at() ? tcp.pause_until :
			room_at();

	if (tcp.listen_fd >= 0 && now >= until) {
		pfd[n] = (struct pollfd){ tcp.listen_fd, POLLIN, 0 };
		who[n++] = DRI_TCP_LISTENER;
	} else if (tcp.listen_fd >= 0 && (*wait_ms < 0 ||
					  *wait_ms > until - now)) {
		*wait_ms = (int)(until - now);
	}
	for (int k = 0; k < tcp.npend; k++) {
		int64_t left = tcp.pend[k].deadline - now;
		pfd[n] = (struct pollfd){ tcp.pend[k].fd, POLLIN, 0 };
		who[n++] = DRI_TCP_PENDING - k;
		if (left < 0)
			left = 0;
		if (*wait_ms < 0 || left < *wait_ms)
			*wait_ms = (int)left;
	}
	tcp.done_pend = tcp.accept = 0;
	return n;
}

dr_err dri_tcp_poll_event(int who, short re, int fd, int64_t now, int *up)
{
	int k = DRI_TCP_PENDING - who;

	if (who <= DRI_TCP_PENDING && !re && now >= tcp.pend[k].deadline) {
		/* too slow to prove the key: dropped */
		pending_close(k);
		tcp.done_pend = 1;
		return DR_OK;
	}
	if (!re)
		return DR_OK;
	if (re & POLLNVAL) {
		/* A descriptor of ours was closed under us (by the
		 * program?): polling it again would spin. */
		if (who <= DRI_TCP_PENDING) {
			tcp.pend[k].fd = -1;
			tcp.done_pend = 1;
			return DR_OK;
		}
		tcp.listen_fd = -1;
		return dri_fail(DR_ESYS, "rank %d: the transport's listening "
				"socket (fd %d) was closed under it", RANK, fd);
	}
	if (who == DRI_TCP_LISTENER) {
		tcp.accept = 1; /* after the round: it moves tcp.pend */
	} else if (on_pending(k, up)) {
		tcp.pend[k].fd = -1;
		tcp.done_pend = 1;
	}
	return DR_OK;
}

void dri_tcp_poll_done(int accept)
{
	if (tcp.done_pend)
		pending_compact();
	if (accept && tcp.accept)
		on_accept();
	tcp.done_pend = tcp.accept = 0;
}
