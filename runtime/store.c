/*
 * store.c - the rendezvous key-value store: rank 0 serves it on a thread at
 * MASTER_ADDR:MASTER_PORT, every rank is a client.
 *
 * It only has to carry the start-up exchange (job id, listening addresses)
 * and the odd agreement later (subgroups), so it is small: one thread, one
 * poll() over the clients, keys and values kept in an array.  A GET for a
 * key that is not there yet is parked until a SET supplies it; the client
 * waits with its own timeout, so a store that never answers cannot hang a
 * rank.
 *
 * Frames, both ways: u32 length of what follows (little-endian), then for a
 * request u8 command, u16 key length, key, value; for a reply u8 status (0
 * ok) and the value.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dri.h"

enum { CMD_SET = 1, CMD_GET = 2, CMD_ADD = 3 };
#define FRAME_MAX (64u << 20)

struct kv {
	char *key;
	unsigned char *val;
	size_t len;
};

struct client {
	int fd;
	unsigned char *in;
	size_t in_len, in_cap;
	char *waiting; /* key of a parked GET, or NULL */
};

struct dri_store_server {
	pthread_t thread;
	int listen_fd, stop_fd;
	struct kv *kv;
	size_t nkv, cap_kv;
	struct client *cl;
	size_t ncl, cap_cl;
};

struct dri_store {
	int fd;
};

/* ------------------------------------------------------------ helpers */

static void le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* Writes all of buf, waiting up to timeout_ms for room; -1 on failure. */
static int write_all(int fd, const void *buf, size_t len, int64_t timeout_ms)
{
	const char *p = buf;
	int64_t deadline = dri_now_ms() + timeout_ms;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pf = { fd, POLLOUT, 0 };
			int64_t left = deadline - dri_now_ms();
			if (left <= 0)
				return -1;
			poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
			continue;
		}
		return -1;
	}
	return 0;
}

/* Reads exactly len bytes; 0 ok, -1 error or EOF, -2 timeout. */
static int read_all(int fd, void *buf, size_t len, int64_t deadline)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -1;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		struct pollfd pf = { fd, POLLIN, 0 };
		int64_t left = deadline - dri_now_ms();
		if (left <= 0)
			return -2;
		poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
	}
	return 0;
}

/* ------------------------------------------------------------- server */

static struct kv *kv_find(dri_store_server *s, const char *key)
{
	for (size_t i = 0; i < s->nkv; i++)
		if (!strcmp(s->kv[i].key, key))
			return &s->kv[i];
	return NULL;
}

static struct kv *kv_put(dri_store_server *s, const char *key,
			 const void *val, size_t len)
{
	struct kv *e = kv_find(s, key);
	unsigned char *copy = malloc(len ? len : 1);

	if (!copy)
		return NULL;
	memcpy(copy, val, len);
	if (!e) {
		if (s->nkv == s->cap_kv) {
			size_t cap = s->cap_kv ? 2 * s->cap_kv : 64;
			struct kv *n = realloc(s->kv, cap * sizeof(*n));
			if (!n) {
				free(copy);
				return NULL;
			}
			s->kv = n;
			s->cap_kv = cap;
		}
		e = &s->kv[s->nkv];
		e->key = strdup(key);
		if (!e->key) {
			free(copy);
			return NULL;
		}
		s->nkv++;
	} else {
		free(e->val);
	}
	e->val = copy;
	e->len = len;
	return e;
}

static int reply(int fd, int status, const void *val, size_t len)
{
	unsigned char h[5];

	le32(h, (uint32_t)(len + 1));
	h[4] = (unsigned char)status;
	if (write_all(fd, h, 5, 5000) < 0)
		return -1;
	return len ? write_all(fd, val, len, 5000) : 0;
}

static void client_drop(dri_store_server *s, size_t i)
{
	close(s->cl[i].fd);
	free(s->cl[i].in);
	free(s->cl[i].waiting);
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
			(void)reply(w->fd, 0, val, len);
		}
	}
}

/* Handles one whole request; -1 drops the client. */
static int serve_request(dri_store_server *s, struct client *c,
			 const unsigned char *req, size_t len)
{
	char key[1024];
	size_t klen;
	struct kv *e;

	if (len < 3)
		return -1;
	klen = (size_t)req[1] | (size_t)req[2] << 8;
	if (klen >= sizeof(key) || 3 + klen > len)
		return -1;
	memcpy(key, req + 3, klen);
	key[klen] = 0;
	const unsigned char *val = req + 3 + klen;
	size_t vlen = len - 3 - klen;

	switch (req[0]) {
	case CMD_SET:
		if (!kv_put(s, key, val, vlen))
			return reply(c->fd, 1, NULL, 0);
		if (reply(c->fd, 0, NULL, 0) < 0)
			return -1;
		wake_getters(s, key, val, vlen);
		return 0;
	case CMD_GET:
		e = kv_find(s, key);
		if (e)
			return reply(c->fd, 0, e->val, e->len);
		free(c->waiting);
		c->waiting = strdup(key);
		return c->waiting ? 0 : -1;
	case CMD_ADD: {
		int64_t cur = 0, delta = 0;
		if (vlen != 8)
			return -1;
		memcpy(&delta, val, 8);
		e = kv_find(s, key);
		if (e && e->len == 8)
			memcpy(&cur, e->val, 8);
		cur += delta;
		if (!kv_put(s, key, &cur, 8))
			return reply(c->fd, 1, NULL, 0);
		if (reply(c->fd, 0, &cur, 8) < 0)
			return -1;
		wake_getters(s, key, &cur, 8);
		return 0;
	}
	}
	return -1;
}

/* Reads what a client sent and serves every whole request in it. */
static int client_read(dri_store_server *s, struct client *c)
{
	for (;;) {
		if (c->in_cap - c->in_len < 4096) {
			size_t cap = c->in_cap ? 2 * c->in_cap : 8192;
			unsigned char *n = realloc(c->in, cap);
			if (!n)
				return -1;
			c->in = n;
			c->in_cap = cap;
		}
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
	}
	size_t off = 0;
	while (c->in_len - off >= 4) {
		uint32_t flen = rd32(c->in + off);
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

static void *server_main(void *arg)
{
	dri_store_server *s = arg;
	struct pollfd *pf = NULL;
	size_t cap = 0;

	for (;;) {
		size_t n = 2 + s->ncl;
		if (n > cap) {
			struct pollfd *np = realloc(pf, n * sizeof(*np));
			if (!np)
				break;
			pf = np;
			cap = n;
		}
		pf[0] = (struct pollfd){ s->stop_fd, POLLIN, 0 };
		pf[1] = (struct pollfd){ s->listen_fd, POLLIN, 0 };
		for (size_t i = 0; i < s->ncl; i++)
			pf[2 + i] = (struct pollfd){ s->cl[i].fd, POLLIN, 0 };
		if (poll(pf, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[0].revents)
			break;
		/* Clients first, from the back, so that dropping one (which
		 * moves the last into its slot) keeps indices valid. */
		for (size_t i = s->ncl; i-- > 0;)
			if (pf[2 + i].revents && client_read(s, &s->cl[i]) < 0)
				client_drop(s, i);
		if (pf[1].revents) {
			int fd;
			while ((fd = accept4(s->listen_fd, NULL, NULL,
					     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
				if (s->ncl == s->cap_cl) {
					size_t c2 = s->cap_cl ? 2 * s->cap_cl : 16;
					struct client *nc =
						realloc(s->cl, c2 * sizeof(*nc));
					if (!nc) {
						close(fd);
						continue;
					}
					s->cl = nc;
					s->cap_cl = c2;
				}
				int one = 1;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
					   sizeof(one));
				s->cl[s->ncl++] = (struct client){ fd, NULL, 0, 0, NULL };
			}
		}
	}
	free(pf);
	return NULL;
}

dr_err dri_store_server_start(const char *host, int port,
			      dri_store_server **out)
{
	struct addrinfo hints, *res = NULL, *ai;
	char ps[16];
	dri_store_server *s;
	int fd = -1, one = 1, rc;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return dri_fail(DR_ENOMEM, "out of memory");
	snprintf(ps, sizeof(ps), "%d", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host && *host ? host : NULL, ps, &hints, &res);
	if (rc) {
		free(s);
		return dri_fail(DR_EENV, "store address %s:%d: %s",
				host ? host : "*", port, gai_strerror(rc));
	}
	errno = EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
			    SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, SOMAXCONN) == 0)
			break;
		int e = errno;
		close(fd);
		fd = -1;
		errno = e;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		int e = errno;
		free(s);
		return dri_fail(DR_ECONN, "rank 0 cannot host the store on port "
				"%d: %s", port, strerror(e));
	}
	s->listen_fd = fd;
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0 ||
	    pthread_create(&s->thread, NULL, server_main, s)) {
		if (s->stop_fd >= 0)
			close(s->stop_fd);
		close(fd);
		free(s);
		return dri_fail(DR_ESYS, "cannot start the store thread");
	}
	*out = s;
	return DR_OK;
}

void dri_store_server_stop(dri_store_server *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	(void)!write(s->stop_fd, &one, sizeof(one));
	pthread_join(s->thread, NULL);
	while (s->ncl)
		client_drop(s, s->ncl - 1);
	for (size_t i = 0; i < s->nkv; i++) {
		free(s->kv[i].key);
		free(s->kv[i].val);
	}
	free(s->kv);
	free(s->cl);
	close(s->listen_fd);
	close(s->stop_fd);
	free(s);
}

int dri_store_server_port(const dri_store_server *s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(s->listen_fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	return ntohs(ss.ss_family == AF_INET6 ?
		     ((struct sockaddr_in6 *)&ss)->sin6_port :
		     ((struct sockaddr_in *)&ss)->sin_port);
}

/* ------------------------------------------------------------- client */

/* connect() on a non-blocking fd, waiting for it until deadline (a
 * blocking connect to an address nobody answers takes the kernel's time,
 * seconds to minutes, whatever our timeout); 0, or -1 with errno. */
static int connect_until(int fd, const struct addrinfo *ai, int64_t deadline)
{
	struct pollfd pf = { .fd = fd, .events = POLLOUT };
	socklen_t elen = sizeof(int);
	int e = 0;

	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return 0;
	if (errno != EINPROGRESS && errno != EINTR)
		return -1;
	for (;;) {
		int64_t left = deadline - dri_now_ms();
		int rc;

		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		rc = poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
		if (rc > 0)
			break;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) < 0)
		return -1;
	errno = e;
	return e ? -1 : 0;
}

dr_err dri_store_connect(const char *host, int port, int64_t timeout_ms,
			 dri_store **out)
{
	struct addrinfo hints, *res = NULL;
	char ps[16];
	int64_t deadline = dri_now_ms() + timeout_ms;
	int rc, fd = -1, last = 0, one = 1;

	*out = NULL;
	snprintf(ps, sizeof(ps), "%d", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(host, ps, &hints, &res);
	if (rc)
		return dri_fail(DR_EENV, "MASTER_ADDR %s: %s", host,
				gai_strerror(rc));
	/* The server may not be up yet: retry until the deadline. */
	for (;;) {
		for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
			fd = socket(ai->ai_family, ai->ai_socktype |
				    SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				last = errno;
				continue;
			}
			if (connect_until(fd, ai, deadline) == 0)
				goto connected;
			last = errno;
			close(fd);
			fd = -1;
		}
		if (dri_now_ms() >= deadline)
			break;
		usleep(20000);
	}
	freeaddrinfo(res);
	return dri_fail(DR_ETIMEDOUT, "cannot reach the store at %s:%d within "
			"%lld ms: %s", host, port, (long long)timeout_ms,
			strerror(last));
connected:
	freeaddrinfo(res);
	/* Non-blocking (from socket()), so that every read and write
	 * honours its timeout. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	dri_store *st = malloc(sizeof(*st));
	if (!st) {
		close(fd);
		return dri_fail(DR_ENOMEM, "out of memory");
	}
	st->fd = fd;
	*out = st;
	return DR_OK;
}

void dri_store_close(dri_store *st)
{
	if (!st)
		return;
	close(st->fd);
	free(st);
}

int dri_store_fd(const dri_store *st)
{
	return st->fd;
}

/* Sends one request and reads its reply (value malloc'ed into *val). */
static dr_err roundtrip(dri_store *st, int cmd, const char *key,
			const void *val, size_t vlen, void **rval,
			size_t *rlen, int64_t timeout_ms)
{
	size_t klen = strlen(key), flen = 3 + klen + vlen;
	unsigned char *f, h[5];
	unsigned char *r = NULL;
	uint32_t n;
	int rc;

	if (klen >= 1024)
		return dri_fail(DR_EINVAL, "store key too long");
	f = malloc(4 + flen);
	if (!f)
		return dri_fail(DR_ENOMEM, "out of memory");
	le32(f, (uint32_t)flen);
	f[4] = (unsigned char)cmd;
	f[5] = (unsigned char)klen;
	f[6] = (unsigned char)(klen >> 8);
	memcpy(f + 7, key, klen);
	if (vlen)
		memcpy(f + 7 + klen, val, vlen);
	rc = write_all(st->fd, f, 4 + flen, timeout_ms);
	free(f);
	if (rc < 0)
		return dri_fail(DR_ECONN, "store: cannot send request for key "
				"'%s': %s", key, strerror(errno));
	int64_t deadline = dri_now_ms() + timeout_ms;
	rc = read_all(st->fd, h, 5, deadline);
	if (rc == -2)
		return dri_fail(DR_ETIMEDOUT, "store: timed out after %lld ms "
				"waiting for key '%s'", (long long)timeout_ms, key);
	n = rd32(h);
	if (rc < 0 || n < 1 || n > FRAME_MAX)
		return dri_fail(DR_ECONN, "store: connection to rank 0 lost "
				"waiting for key '%s' (has rank 0 exited?)", key);
	r = malloc(n);
	if (!r)
		return dri_fail(DR_ENOMEM, "out of memory");
	rc = read_all(st->fd, r, n - 1, deadline);
	if (rc < 0) {
		free(r);
		return dri_fail(rc == -2 ? DR_ETIMEDOUT : DR_ECONN,
				"store: reply for key '%s' cut short", key);
	}
	if (h[4]) {
		free(r);
		return dri_fail(DR_ENOMEM, "store: rank 0 could not store '%s'",
				key);
	}
	r[n - 1] = 0;
	if (rval) {
		*rval = r;
		*rlen = n - 1;
	} else {
		free(r);
	}
	return DR_OK;
}

dr_err dri_store_set(dri_store *st, const char *key, const void *val,
		     size_t len)
{
	return roundtrip(st, CMD_SET, key, val, len, NULL, NULL,
			 dri_timeout_ms());
}

dr_err dri_store_get(dri_store *st, const char *key, void **val, size_t *len,
		     int64_t timeout_ms)
{
	return roundtrip(st, CMD_GET, key, NULL, 0, val, len, timeout_ms);
}

dr_err dri_store_add(dri_store *st, const char *key, int64_t delta,
		     int64_t *out)
{
	void *v = NULL;
	size_t n = 0;
	dr_err err = roundtrip(st, CMD_ADD, key, &delta, 8, &v, &n,
			       dri_timeout_ms());

	if (err)
		return err;
	if (n != 8) {
		free(v);
		return dri_fail(DR_EPROTO, "store: bad reply to add '%s'", key);
	}
	if (out)
		memcpy(out, v, 8);
	free(v);
	return DR_OK;
}
