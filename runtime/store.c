/*
 * store.c - the rendezvous key-value store's server: rank 0 serves it on
 * a thread at MASTER_ADDR:MASTER_PORT (store_client.c is the client every
 * rank uses; store_int.h their protocol).
 *
 * It only has to carry the start-up exchange (job nonce, listening
 * addresses) and the odd agreement later (subgroups), so it is small: one
 * thread, one poll() over the clients, keys and values kept in an array.
 * A GET for a key that is not there yet is parked until a SET supplies it;
 * the client waits with its own timeout, so a store that never answers
 * cannot hang a rank.
 *
 * Nothing from outside the job is trusted.  A connection first proves the
 * job's key (auth.h's handshake, both ways); until it has, the server
 * reads only the fixed-size handshake into a fixed buffer, answers nothing
 * else, and drops it after DRI_HS_MS; at most PENDING_MAX such
 * connections are kept (the oldest goes first).  Even a client that has
 * proved the key is bounded: frame size, bytes buffered per client and in
 * total, value size, bytes stored.  Replies are queued and written as the
 * socket takes them, so a client that stops reading stalls only itself.
 *
 * Under distrun, rank 0 may find MASTER_PORT already listened on for it:
 * distrun listened before any rank existed, so that no other process
 * could take the port, and names the inherited sockets in
 * DISTRUN_STORE_FDS.  Each must be a listening TCP socket on the port
 * asked for; the store serves on duplicates of them and leaves the
 * inherited ones open, so that an init after a destroy finds them again.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "contract.h"
#include "error.h"
#include "net.h"
#include "store.h"
#include "store_int.h"
#include "wire.h"

#define FRAME_MAX (4 + 3 + KEY_MAX + VALUE_MAX) /* one request */
#define STORE_BYTES_MAX ((size_t)512 << 20)     /* all values */
#define BUFFERED_MAX ((size_t)512 << 20)        /* in + out, all clients */
#define PENDING_MAX 64                          /* unauthenticated */
#define CLIENTS_MAX 65536
#define OUT_KEEP ((size_t)64 << 10) /* a reply buffer kept when written */
#define PAUSE_MS 100                            /* listener, at EMFILE */

struct kv {
	char *key;
	unsigned char *val;
	size_t len;
};

enum { C_HELLO, C_PROOF, C_UP };

struct client {
	int fd;
	int state;
	int64_t deadline;       /* of the handshake */
	uint64_t serial;        /* order of arrival, for dropping the oldest */
	dri_hs hs;
	unsigned char hsbuf[DRI_HS_HELLO];
	size_t hs_got;
	unsigned char *in;
	size_t in_len, in_cap;
	unsigned char *out;
	size_t out_off, out_len, out_cap;
	char *waiting;          /* key of a parked GET, or NULL */
	uint32_t wait_seq;
};

struct dri_store_server {
	pthread_t thread;
	int lfd[DRI_NET_MAXFD], nlfd, stop_fd, reserve_fd;
	int64_t pause_until;
	uint8_t key[DRI_KEY_LEN];
	struct kv *kv;
	size_t nkv, cap_kv, stored;
	struct client *cl;
	size_t ncl, cap_cl, npending, buffered;
	uint64_t serial;
};

/* ------------------------------------------------------------- server */

static struct kv *kv_find(dri_store_server *s, const char *key)
{
	for (size_t i = 0; i < s->nkv; i++)
		if (!strcmp(s->kv[i].key, key))
			return &s->kv[i];
	return NULL;
}

/* Stores a copy of val under key: ST_OK, ST_NOMEM, or ST_LIMIT when the
 * store would hold more than STORE_BYTES_MAX. */
static int kv_put(dri_store_server *s, const char *key, const void *val,
		  size_t len)
{
	struct kv *e = kv_find(s, key);
	size_t old = e ? e->len : 0;
	unsigned char *copy;

	if (s->stored - old + len > STORE_BYTES_MAX)
		return ST_LIMIT;
	copy = malloc(len ? len : 1);
	if (!copy)
		return ST_NOMEM;
	memcpy(copy, val, len);
	if (!e) {
		if (s->nkv == s->cap_kv) {
			size_t cap = s->cap_kv ? 2 * s->cap_kv : 64;
			struct kv *n = realloc(s->kv, cap * sizeof(*n));
			if (!n) {
				free(copy);
				return ST_NOMEM;
			}
			s->kv = n;
			s->cap_kv = cap;
		}
		e = &s->kv[s->nkv];
		e->key = strdup(key);
		if (!e->key) {
			free(copy);
			return ST_NOMEM;
		}
		e->val = NULL;
		s->nkv++;
	}
	free(e->val);
	e->val = copy;
	e->len = len;
	s->stored = s->stored - old + len;
	return ST_OK;
}

/* Grows a buffer to hold need bytes (doubling), keeping s->buffered. */
static int buf_reserve(dri_store_server *s, unsigned char **b, size_t *cap,
		       size_t need)
{
	size_t nc = *cap ? *cap : 4096;
	unsigned char *nb;

	if (need <= *cap)
		return 0;
	while (nc < need)
		nc *= 2;
	if (s->buffered - *cap + nc > BUFFERED_MAX)
		return -1;
	nb = realloc(*b, nc);
	if (!nb)
		return -1;
	s->buffered = s->buffered - *cap + nc;
	*b = nb;
	*cap = nc;
	return 0;
}

/* Writes what the socket takes of a reply (header h, then val) with
 * nothing queued before it: the bytes written, or -1 on error. */
static ssize_t reply_direct(int fd, unsigned char *h, const void *val,
			    size_t len)
{
	struct iovec iov[2] = { { h, 9 }, { (void *)val, len } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	ssize_t n;

	do
		n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	return n;
}

/* Sends a reply, or queues what the socket does not take at once; -1
 * (drop the client) on a write error or if it cannot be buffered.  A
 * value goes to the socket from where it is stored: the same large value
 * answered to every rank (the addresses, 4096 ranks x 160 KB) is not
 * copied once per client. */
static int reply(dri_store_server *s, struct client *c, uint32_t seq,
		 int status, const void *val, size_t len)
{
	unsigned char h[9];
	size_t sent = 0, hs, vs, need;
	ssize_t n;

	dri_put32(h, (uint32_t)(len + 5));
	dri_put32(h + 4, seq);
	h[8] = (unsigned char)status;
	if (c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
		if (c->fd >= 0) { /* (-1: dri_store_feed's, which reads out) */
			if ((n = reply_direct(c->fd, h, val, len)) < 0)
				return -1;
			sent = (size_t)n;
			if (sent == 9 + len)
				return 0;
		}
	}
	/* the rest: of the header (if any), then of the value */
	hs = sent < 9 ? sent : 9;
	vs = sent - hs;
	need = c->out_len + (9 - hs) + (len - vs);
	if (buf_reserve(s, &c->out, &c->out_cap, need) < 0)
		return -1;
	memcpy(c->out + c->out_len, h + hs, 9 - hs);
	if (len > vs)
		memcpy(c->out + c->out_len + (9 - hs),
		       (const unsigned char *)val + vs, len - vs);
	c->out_len = need;
	return 0;
}

/* A large reply buffer, once written, goes: the total budget counts
 * capacity, and thousands of ranks each holding one would use it up. */
static void out_release(dri_store_server *s, struct client *c)
{
	if (c->out_off != c->out_len || c->out_cap <= OUT_KEEP)
		return;
	s->buffered -= c->out_cap;
	free(c->out);
	c->out = NULL;
	c->out_cap = c->out_off = c->out_len = 0;
}

/* Writes what the socket takes of the client's replies; -1 on error. */
static int client_flush(dri_store_server *s, struct client *c)
{
	if (c->fd < 0)
		return 0; /* dri_store_feed's: the caller takes the replies */
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off,
				 c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		return -1;
	}
	out_release(s, c);
	return 0;
}

static void client_drop(dri_store_server *s, size_t i)
{
	struct client *c = &s->cl[i];

	close(c->fd);
	s->buffered -= c->in_cap + c->out_cap;
	free(c->in);
	free(c->out);
	free(c->waiting);
	if (c->state != C_UP)
		s->npending--;
	s->cl[i] = s->cl[--s->ncl];
}

/* Answers the GETs parked on key with its new value. */
static void wake_getters(dri_store_server *s, const char *key,
			 const void *val, size_t len)
{
	for (size_t i = 0; i < s->ncl; i++) {
		struct client *w = &s->cl[i];
		if (w->waiting && !strcmp(w->waiting, key)) {
			free(w->waiting);
			w->waiting = NULL;
			if (reply(s, w, w->wait_seq, ST_OK, val, len) < 0 ||
			    client_flush(s, w) < 0)
				shutdown(w->fd, SHUT_RDWR); /* poll drops it */
		}
	}
}

/* Handles one whole request; -1 drops the client. */
static int serve_request(dri_store_server *s, struct client *c,
			 const unsigned char *req, size_t len)
{
	char key[KEY_MAX + 1];
	size_t klen;
	struct kv *e;
	uint32_t seq;
	int st;

	if (len < 7)
		return -1;
	seq = dri_get32(req);
	req += 4;
	len -= 4;
	klen = (size_t)req[1] | (size_t)req[2] << 8;
	if (klen > KEY_MAX || 3 + klen > len)
		return -1;
	memcpy(key, req + 3, klen);
	key[klen] = 0;
	const unsigned char *val = req + 3 + klen;
	size_t vlen = len - 3 - klen;

	switch (req[0]) {
	case CMD_SET:
		st = vlen > VALUE_MAX ? ST_LIMIT : kv_put(s, key, val, vlen);
		if (reply(s, c, seq, st, NULL, 0) < 0)
			return -1;
		if (st == ST_OK)
			wake_getters(s, key, val, vlen);
		return 0;
	case CMD_GET:
		e = kv_find(s, key);
		if (e)
			return reply(s, c, seq, ST_OK, e->val, e->len);
		free(c->waiting);
		c->waiting = strdup(key);
		c->wait_seq = seq;
		return c->waiting ? 0 : -1;
	case CMD_ADD: {
		uint64_t cur = 0, delta = 0;
		int64_t v;
		if (vlen != 8)
			return -1;
		memcpy(&delta, val, 8);
		e = kv_find(s, key);
		if (e && e->len == 8)
			memcpy(&cur, e->val, 8);
		cur += delta; /* unsigned: wraps instead of overflowing */
		v = (int64_t)cur;
		st = kv_put(s, key, &v, 8);
		if (reply(s, c, seq, st, &v, st == ST_OK ? 8 : 0) < 0)
			return -1;
		if (st == ST_OK)
			wake_getters(s, key, &v, 8);
		return 0;
	}
	}
	return -1;
}

/* The handshake of a client that has not proved the key yet: reads into
 * its fixed buffer only; -1 drops it. */
static int client_handshake(dri_store_server *s, struct client *c)
{
	size_t want = c->state == C_HELLO ? DRI_HS_HELLO : DRI_HS_PROOF;
	ssize_t n;
	int rank, size;

	do
		n = recv(c->fd, c->hsbuf + c->hs_got, want - c->hs_got, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0)
		return -1;
	c->hs_got += (size_t)n;
	if (c->hs_got < want)
		return 0;
	c->hs_got = 0;
	if (c->state == C_HELLO) {
		if (dri_hs_challenge(&c->hs, s->key, c->hsbuf, DRI_HS_STORE, 0,
				     &rank, &size))
			return -1;
		/* The socket is fresh: a 68-byte write fits. */
		if (send(c->fd, c->hs.chal, DRI_HS_CHAL, MSG_NOSIGNAL |
			 MSG_DONTWAIT) != DRI_HS_CHAL)
			return -1;
		c->state = C_PROOF;
		return 0;
	}
	if (!dri_hs_verify(&c->hs, s->key, c->hsbuf))
		return -1;
	unsigned char ok = 1;
	if (send(c->fd, &ok, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
		return -1;
	c->state = C_UP;
	s->npending--;
	return 0;
}

/* Serves every whole request in the client's input, keeps the partial
 * one; -1 drops the client. */
static int serve_frames(dri_store_server *s, struct client *c)
{
	size_t off = 0;

	while (c->in_len - off >= 4) {
		uint32_t flen = dri_get32(c->in + off);
		if (flen > FRAME_MAX)
			return -1;
		if (c->in_len - off - 4 < flen)
			break;
		if (serve_request(s, c, c->in + off + 4, flen) < 0)
			return -1;
		off += 4 + flen;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	return 0;
}

/* Reads what a client sent and serves every whole request in it. */
static int client_read(dri_store_server *s, struct client *c)
{
	if (c->state != C_UP)
		return client_handshake(s, c);
	for (;;) {
		/* Room for what the frame at hand still needs, no more: a
		 * half-sent giant frame costs only what was sent. */
		size_t need = c->in_len + 4096;
		if (c->in_len >= 4) {
			uint32_t flen = dri_get32(c->in);
			if (flen > FRAME_MAX)
				return -1;
			if ((size_t)flen + 4 > need)
				need = (size_t)flen + 4;
			if (need > c->in_len + ((size_t)1 << 20))
				need = c->in_len + ((size_t)1 << 20);
		}
		if (buf_reserve(s, &c->in, &c->in_cap, need) < 0)
			return -1;
		ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n == 0)
			return -1;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -1;
		}
		c->in_len += (size_t)n;
		if (c->in_len < c->in_cap)
			break; /* drained: poll says when more comes */
	}
	if (serve_frames(s, c) < 0)
		return -1;
	return client_flush(s, c);
}

/* Drops the oldest unauthenticated client (to make room). */
static void drop_oldest_pending(dri_store_server *s)
{
	size_t best = s->ncl;

	for (size_t i = 0; i < s->ncl; i++)
		if (s->cl[i].state != C_UP &&
		    (best == s->ncl || s->cl[i].serial < s->cl[best].serial))
			best = i;
	if (best < s->ncl)
		client_drop(s, best);
}

static void accept_clients(dri_store_server *s, int lfd)
{
	for (;;) {
		int fd = dri_net_accept(lfd, &s->reserve_fd, s->npending > 0);
		int one = 1;
		if (fd == DRI_ACCEPT_FULL) {
			drop_oldest_pending(s);
			continue;
		}
		if (fd == DRI_ACCEPT_DROPPED)
			continue;
		if (fd == DRI_ACCEPT_PAUSE) {
			s->pause_until = dri_now_ms() + PAUSE_MS;
			return;
		}
		if (fd < 0)
			return;
		if (s->npending >= PENDING_MAX)
			drop_oldest_pending(s);
		if (s->ncl >= CLIENTS_MAX ||
		    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))) {
			close(fd);
			continue;
		}
		if (s->ncl == s->cap_cl) {
			size_t c2 = s->cap_cl ? 2 * s->cap_cl : 16;
			struct client *nc = realloc(s->cl, c2 * sizeof(*nc));
			if (!nc) {
				close(fd);
				continue;
			}
			s->cl = nc;
			s->cap_cl = c2;
		}
		s->cl[s->ncl++] = (struct client){
			.fd = fd,
			.state = C_HELLO,
			.deadline = dri_now_ms() + DRI_HS_MS,
			.serial = s->serial++,
		};
		s->npending++;
	}
}

static void *server_main(void *arg)
{
	dri_store_server *s = arg;
	struct pollfd *pf = NULL;
	size_t cap = 0;

	for (;;) {
		size_t n = 1 + (size_t)s->nlfd + s->ncl, base = 1 + (size_t)s->nlfd;
		int64_t now = dri_now_ms(), wait = -1;
		if (n > cap) {
			struct pollfd *np = realloc(pf, n * sizeof(*np));
			if (!np)
				break;
			pf = np;
			cap = n;
		}
		pf[0] = (struct pollfd){ s->stop_fd, POLLIN, 0 };
		for (int k = 0; k < s->nlfd; k++)
			pf[1 + k] = (struct pollfd){
				now < s->pause_until ? -1 : s->lfd[k], POLLIN, 0 };
		if (now < s->pause_until)
			wait = s->pause_until - now;
		for (size_t i = 0; i < s->ncl; i++) {
			struct client *c = &s->cl[i];
			short ev = POLLIN | (c->out_off < c->out_len ? POLLOUT : 0);
			pf[base + i] = (struct pollfd){ c->fd, ev, 0 };
			if (c->state != C_UP) {
				int64_t left = c->deadline - now;
				left = left < 0 ? 0 : left;
				if (wait < 0 || left < wait)
					wait = left;
			}
		}
		if (poll(pf, (nfds_t)n, (int)wait) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[0].revents)
			break;
		now = dri_now_ms();
		/* Clients first, from the back, so that dropping one (which
		 * moves the last into its slot) keeps indices valid. */
		for (size_t i = s->ncl; i-- > 0;) {
			struct client *c = &s->cl[i];
			short re = pf[base + i].revents;
			int bad = (re & POLLNVAL) ||
				  (c->state != C_UP && now >= c->deadline);
			if (!bad && (re & POLLOUT))
				bad = client_flush(s, c) < 0;
			if (!bad && (re & (POLLIN | POLLHUP | POLLERR)))
				bad = client_read(s, c) < 0;
			if (bad)
				client_drop(s, i);
		}
		for (int k = 0; k < s->nlfd; k++)
			if (pf[1 + k].revents)
				accept_clients(s, s->lfd[k]);
	}
	free(pf);
	return NULL;
}

/* Whether fd is a listening TCP socket bound to port; NULL, or what it
 * is instead. */
static const char *inherited_bad(int fd, int port)
{
	int type = 0, proto = 0, dom = 0, acc = 0;
	socklen_t l1 = sizeof(int), l2 = sizeof(int), l3 = sizeof(int),
		  l4 = sizeof(int);
	struct stat st;

	if (fstat(fd, &st))
		return "not open";
	if (!S_ISSOCK(st.st_mode))
		return "not a socket";
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l1) ||
	    getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l2) ||
	    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l3) ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l4))
		return "not a socket it can ask about";
	if (type != SOCK_STREAM || proto != IPPROTO_TCP ||
	    (dom != AF_INET && dom != AF_INET6))
		return "not a TCP socket";
	if (!acc)
		return "not listening";
	if (dri_net_port(fd) != port)
		return "bound to another port";
	return NULL;
}

/* The listening sockets distrun made for this store (DISTRUN_STORE_FDS,
 * see the top), duplicated into fds: DR_OK with *nfds (0: none given),
 * or DR_EENV naming the one that is not what it should be. */
static dr_err inherited_listeners(int port, int fds[DRI_NET_MAXFD], int *nfds)
{
	const char *v = getenv(DRI_ENV_STORE_FDS), *p = v, *bad;
	int n = 0;

	*nfds = 0;
	if (!v || !*v || port <= 0)
		return DR_OK;
	while (*p) {
		char *end;
		long fd = strtol(p, &end, 10);

		if (end == p || fd < 0 || fd > 1 << 20 || (*end && *end != ',') ||
		    n == DRI_NET_MAXFD) {
			bad = "not a list of descriptors";
			goto fail;
		}
		bad = inherited_bad((int)fd, port);
		if (bad)
			goto fail_fd;
		fds[n] = fcntl((int)fd, F_DUPFD_CLOEXEC, 0);
		if (fds[n] < 0) {
			bad = "not to be duplicated";
			goto fail_fd;
		}
		/* The flag is the open file's: distrun set it already. */
		if (fcntl(fds[n], F_SETFL, O_NONBLOCK) < 0) {
			close(fds[n]);
			bad = "not to be made non-blocking";
			goto fail_fd;
		}
		n++;
		p = *end ? end + 1 : end;
		continue;
fail_fd:
		while (n > 0)
			close(fds[--n]);
		return dri_fail(DR_EENV, DRI_ENV_STORE_FDS "=%s: descriptor %ld "
				"is %s, not a TCP socket listening on MASTER_PORT=%d "
				"(did something between distrun and the program "
				"close or replace it?)", v, fd, bad, port);
	}
	*nfds = n;
	return DR_OK;
fail:
	while (n > 0)
		close(fds[--n]);
	return dri_fail(DR_EENV, DRI_ENV_STORE_FDS "=%s is %s", v, bad);
}

dr_err dri_store_server_start(const char *host, int port,
			      const uint8_t key[DRI_KEY_LEN],
			      dri_store_server **out)
{
	dri_store_server *s;
	dr_err err;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return dri_fail(DR_ENOMEM, "out of memory");
	memcpy(s->key, key, DRI_KEY_LEN);
	s->stop_fd = s->reserve_fd = -1;
	err = inherited_listeners(port, s->lfd, &s->nlfd);
	if (!err && !s->nlfd)
		err = dri_net_listen(host, port, s->lfd, &s->nlfd);
	if (err) {
		explicit_bzero(s->key, sizeof(s->key));
		free(s);
		return dri_fail(err, "rank 0 cannot host the store: %s",
				dr_last_error());
	}
	s->reserve_fd = dri_net_reserve();
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0 || s->reserve_fd < 0 ||
	    dri_thread_start(&s->thread, NULL, server_main, s)) {
		int e = errno;
		if (s->stop_fd >= 0)
			close(s->stop_fd);
		if (s->reserve_fd >= 0)
			close(s->reserve_fd);
		for (int k = 0; k < s->nlfd; k++)
			close(s->lfd[k]);
		explicit_bzero(s->key, sizeof(s->key));
		free(s);
		return dri_fail(DR_ESYS, "rank 0 cannot start the store: %s%s",
				dri_strerror(e), e == EMFILE || e == ENFILE ?
				" (the open file limit, ulimit -n, is too low)" : "");
	}
	*out = s;
	return DR_OK;
}

void dri_store_server_stop(dri_store_server *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	if (s->stop_fd >= 0) { /* not a dri_store_server_local */
		(void)!write(s->stop_fd, &one, sizeof(one));
		pthread_join(s->thread, NULL);
	}
	while (s->ncl)
		client_drop(s, s->ncl - 1);
	for (size_t i = 0; i < s->nkv; i++) {
		free(s->kv[i].key);
		free(s->kv[i].val);
	}
	free(s->kv);
	free(s->cl);
	for (int k = 0; k < s->nlfd; k++)
		close(s->lfd[k]);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	if (s->reserve_fd >= 0)
		close(s->reserve_fd);
	explicit_bzero(s->key, sizeof(s->key));
	free(s);
}

/* ------------------------------ request handling alone (for the fuzzer) */

dri_store_server *dri_store_server_local(void)
{
	dri_store_server *s = calloc(1, sizeof(*s));

	if (!s) {
		dri_fail(DR_ENOMEM, "out of memory");
		return NULL;
	}
	s->stop_fd = s->reserve_fd = -1;
	return s;
}

/* dri_store_feed's client id, or NULL. */
static struct client *local_client(dri_store_server *s, unsigned id,
				   size_t *idx)
{
	for (size_t i = 0; i < s->ncl; i++)
		if (s->cl[i].serial == id) {
			*idx = i;
			return &s->cl[i];
		}
	return NULL;
}

int dri_store_feed(dri_store_server *s, unsigned id, const void *in,
		   size_t len)
{
	size_t i;
	struct client *c = local_client(s, id, &i);

	if (!c) {
		if (s->ncl == s->cap_cl) {
			size_t c2 = s->cap_cl ? 2 * s->cap_cl : 16;
			struct client *nc = realloc(s->cl, c2 * sizeof(*nc));
			if (!nc)
				return -1;
			s->cl = nc;
			s->cap_cl = c2;
		}
		i = s->ncl++;
		s->cl[i] = (struct client){ .fd = -1, .state = C_UP,
					    .serial = id };
		c = &s->cl[i];
	}
	if (!len)
		return 0;
	if (buf_reserve(s, &c->in, &c->in_cap, c->in_len + len) < 0)
		goto drop;
	memcpy(c->in + c->in_len, in, len);
	c->in_len += len;
	if (serve_frames(s, c) < 0)
		goto drop;
	return 0;
drop:
	client_drop(s, i);
	return -1;
}

size_t dri_store_take(dri_store_server *s, unsigned id,
		      const unsigned char **out)
{
	size_t i, n;
	struct client *c = local_client(s, id, &i);

	*out = NULL;
	if (!c || c->out_off == c->out_len)
		return 0;
	*out = c->out + c->out_off;
	n = c->out_len - c->out_off;
	c->out_off = c->out_len;
	return n;
}

int dri_store_server_port(const dri_store_server *s)
{
	return s->nlfd ? dri_net_port(s->lfd[0]) : -1;
}
