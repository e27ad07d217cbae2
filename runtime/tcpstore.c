/*
 * tcpstore.c - a client of torch's TCPStore, so that ranks started by
 * torchrun rendezvous through the store its agent already serves at
 * MASTER_ADDR:MASTER_PORT instead of trying to bind that port themselves.
 *
 * The protocol, as torch's TCPStore.cpp / TCPStoreBackend.cpp /
 * TCPStoreLibUvBackend.cpp describe it: a request is one command byte, then
 * its arguments; a string or byte vector is a u64 length then the bytes,
 * an integer is 8 bytes, all in the host's order (little-endian on every
 * platform torch ships for; we write little-endian whatever the host).
 *   SET  key value        no reply
 *   GET  key              reply: vector (the key must exist: WAIT first)
 *   ADD  key i64          reply: i64, the new value
 *   WAIT u64 n, n keys    reply: one byte 0 once every key exists
 *   GETNUMKEYS            reply: i64
 * torch <= 2.0 numbers the commands SET 0, GET 2, ADD 3, WAIT 5,
 * GETNUMKEYS 6.  torch >= 2.1 put VALIDATE first (so SET 1, GET 3, ADD 4,
 * WAIT 6, GETNUMKEYS 7), and its server ignores (libuv backend) or drops
 * (classic backend) a connection whose first request is not VALIDATE
 * followed by the u32 magic 0x3C85F7CE.  Neither server replies to
 * anything it does not understand, so the dialect has to be found by a
 * request both answer at once:
 *   00 | CE F7 85 3C | 07 07 07 07
 * is, to a 2.x server, VALIDATE(magic) then four GETNUMKEYS: 32 bytes come
 * back.  To a 1.x server it is SET with a key length of 0x070707073C85F7CE
 * bytes, which it cannot allocate: it drops the connection at once (a
 * shorter probe would leave its single-threaded daemon blocked in recv).
 * So: 32 bytes mean 2.x; the connection closed means 1.x, confirmed on a
 * new connection by GETNUMKEYS alone; anything else is not a TCPStore.
 *
 * Every wait is bounded by the caller's timeout, and every length the
 * server sends is checked against DRI_TCPSTORE_VALUE_MAX before anything
 * is allocated for it.  What comes back is checked as far as it can be:
 * the keys under our prefix are counters that only we touch and only
 * ever raise, so an ADD of d > 0 that answers less than d, or a count
 * past 2^40, is not a TCPStore talking, and is named so (rather than
 * taken for, say, a second process with our RANK).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "rdzv.h"
#include "wire.h"

#define VALIDATE_MAGIC 0x3C85F7CEu

struct dri_tcpstore {
	int fd;
	int dialect;
	char *prefix;   /* "/" + the caller's prefix */
	char where[300]; /* "host:port" for messages */
};

const unsigned char dri_tcpstore_probe[9] = {
	0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x07, 0x07, 0x07, 0x07
};

/* Command codes per dialect, indexed by DRI_TS_*. */
static const unsigned char codes[3][5] = {
	[DRI_TCPSTORE_V1] = { 0, 2, 3, 5, 6 },
	[DRI_TCPSTORE_V2] = { 1, 3, 4, 6, 7 },
};

/* ------------------------------------------------------------ framing */

/* Appends v little-endian (torch's integers, as x86 and arm64 store
 * them), returns the end. */
static unsigned char *put_u64(unsigned char *p, uint64_t v)
{
	dri_put64(p, v);
	return p + 8;
}

static unsigned char *put_bytes(unsigned char *p, const void *s, size_t n)
{
	p = put_u64(p, n);
	if (n)
		memcpy(p, s, n);
	return p + n;
}

unsigned char *dri_tcpstore_encode(int dialect, int cmd, const char *key,
				   const void *val, size_t len, int64_t delta,
				   size_t *out_len)
{
	size_t klen = key ? strlen(key) : 0;
	unsigned char *buf, *p;

	if ((dialect != DRI_TCPSTORE_V1 && dialect != DRI_TCPSTORE_V2) ||
	    cmd < DRI_TS_SET || cmd > DRI_TS_NUMKEYS)
		return NULL;
	buf = malloc(1 + 3 * 8 + klen + len);
	if (!buf)
		return NULL;
	p = buf;
	*p++ = codes[dialect][cmd];
	switch (cmd) {
	case DRI_TS_SET:
		p = put_bytes(p, key, klen);
		p = put_bytes(p, val, len);
		break;
	case DRI_TS_GET:
		p = put_bytes(p, key, klen);
		break;
	case DRI_TS_ADD:
		p = put_bytes(p, key, klen);
		p = put_u64(p, (uint64_t)delta);
		break;
	case DRI_TS_WAIT:
		p = put_u64(p, 1);
		p = put_bytes(p, key, klen);
		break;
	}
	*out_len = (size_t)(p - buf);
	return buf;
}

/* ------------------------------------------------------------ the wire */

/* Waits for events on fd, a second at most at a time so that the
 * caller's loop sees the deadline: -2 once the deadline has passed. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd pf = { fd, events, 0 };
	int64_t left = deadline - dri_now_ms();

	if (left <= 0)
		return -2;
	poll(&pf, 1, left > 1000 ? 1000 : (int)left);
	return 0;
}

/* Sends all of buf before deadline: 0, or -1 (errno) / -2 (time). */
static int send_by(int fd, const void *buf, size_t len, int64_t deadline)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && errno == EAGAIN) {
			if (wait_fd(fd, POLLOUT, deadline))
				return -2;
		} else {
			return -1;
		}
	}
	return 0;
}

/* Receives exactly len bytes before deadline: 0, -1 closed or failed
 * (errno 0 for an orderly close), -2 time. */
static int recv_by(int fd, void *buf, size_t len, int64_t deadline)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n == 0) {
			errno = 0;
			return -1;
		} else if (errno == EINTR) {
			continue;
		} else if (errno == EAGAIN) {
			if (wait_fd(fd, POLLIN, deadline))
				return -2;
		} else {
			return -1;
		}
	}
	return 0;
}

/* One non-blocking connection attempt to any address of host:port, bounded
 * by deadline; the socket stays non-blocking.  -1 with errno on failure,
 * -2 (message set) if host does not resolve. */
static int dial(const char *host, int port, int64_t deadline)
{
	struct addrinfo hints = { 0 }, *res = NULL, *ai;
	char serv[16];
	int fd = -1, one = 1, rc;

	hints.ai_socktype = SOCK_STREAM;
	snprintf(serv, sizeof(serv), "%d", port);
	rc = getaddrinfo(host, serv, &hints, &res);
	if (rc) {
		dri_fail(DR_ECONN, "cannot resolve '%s': %s", host,
			 rc == EAI_SYSTEM ? dri_strerror(errno) : gai_strerror(rc));
		return -2;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC |
			    SOCK_NONBLOCK, ai->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			struct pollfd pf = { fd, POLLOUT, 0 };
			int64_t left = deadline - dri_now_ms();
			int soerr = ETIMEDOUT;
			socklen_t sl = sizeof(soerr);
			if (left > 0 && poll(&pf, 1, (int)left) == 1 &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
				soerr = errno;
			if (!soerr)
				break;
			errno = soerr;
		}
		rc = errno;
		close(fd);
		fd = -1;
		errno = rc;
	}
	freeaddrinfo(res);
	/* Without it each request waits for the last one's ACK (Nagle). */
	if (fd >= 0 &&
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
		rc = errno;
		close(fd);
		fd = -1;
		errno = rc;
	}
	return fd;
}

/* Connects, retrying every 50 ms until deadline (the agent may be slow to
 * listen). */
static dr_err dial_retry(dri_tcpstore *ts, const char *host, int port,
			 int64_t deadline)
{
	for (;;) {
		ts->fd = dial(host, port, deadline);
		if (ts->fd >= 0)
			return DR_OK;
		if (ts->fd == -2) {
			ts->fd = -1;
			return dri_fail(DR_ECONN, "torch TCPStore at %s: %s",
					ts->where, dr_last_error());
		}
		if (dri_now_ms() >= deadline)
			return dri_fail(DR_ECONN, "torch TCPStore at %s: cannot "
					"connect: %s", ts->where, dri_strerror(errno));
		nanosleep(&(struct timespec){ 0, 50 * 1000000 }, NULL);
	}
}

/* Tells the dialects apart (see the top of the file). */
static dr_err detect(dri_tcpstore *ts, const char *host, int port,
		     int64_t deadline)
{
	unsigned char reply[DRI_TCPSTORE_PROBE_REPLY], v1 = 6;
	int rc;

	rc = send_by(ts->fd, dri_tcpstore_probe, sizeof(dri_tcpstore_probe),
		     deadline);
	if (!rc)
		rc = recv_by(ts->fd, reply, sizeof(reply), deadline);
	if (!rc) {
		/* Four key counts; anything else is not a TCPStore talking. */
		for (int i = 0; i < 4; i++)
			if (dri_get64(reply + 8 * i) >= (1ull << 40))
				goto foreign;
		ts->dialect = DRI_TCPSTORE_V2;
		return DR_OK;
	}
	if (rc == -2)
		goto silent;
	/* Dropped: a 1.x server, or not a TCPStore at all.  Ask again in the
	 * old dialect on a fresh connection. */
	close(ts->fd);
	ts->fd = -1;
	if (dial_retry(ts, host, port, deadline))
		return DR_ECONN;
	rc = send_by(ts->fd, &v1, 1, deadline);
	if (!rc)
		rc = recv_by(ts->fd, reply, 8, deadline);
	if (!rc && dri_get64(reply) < (1ull << 40)) {
		ts->dialect = DRI_TCPSTORE_V1;
		return DR_OK;
	}
	if (rc == -2)
		goto silent;
foreign:
	return dri_fail(DR_EPROTO, "%s (MASTER_ADDR:MASTER_PORT, where "
			"TORCHELASTIC_USE_AGENT_STORE=True says torchrun's agent "
			"serves a TCPStore) answers neither torch 2.x's nor 1.x's "
			"TCPStore protocol", ts->where);
silent:
	return dri_fail(DR_ETIMEDOUT, "%s (MASTER_ADDR:MASTER_PORT, where "
			"TORCHELASTIC_USE_AGENT_STORE=True says torchrun's agent "
			"serves a TCPStore) did not answer a TCPStore request "
			"within the timeout", ts->where);
}

dr_err dri_tcpstore_connect(const char *host, int port, const char *prefix,
			    int64_t timeout_ms, dri_tcpstore **out)
{
	int64_t deadline = dri_now_ms() + timeout_ms;
	dri_tcpstore *ts = calloc(1, sizeof(*ts));
	dr_err err;

	*out = NULL;
	if (!ts)
		return dri_fail(DR_ENOMEM, "out of memory");
	ts->fd = -1;
	snprintf(ts->where, sizeof(ts->where), strchr(host, ':') ? "[%s]:%d" :
		 "%s:%d", host, port);
	ts->prefix = malloc(strlen(prefix) + 2);
	if (!ts->prefix) {
		err = dri_fail(DR_ENOMEM, "out of memory");
		goto fail;
	}
	sprintf(ts->prefix, "/%s", prefix);
	err = dial_retry(ts, host, port, deadline);
	if (!err)
		err = detect(ts, host, port, deadline);
	if (err)
		goto fail;
	*out = ts;
	return DR_OK;
fail:
	dri_tcpstore_close(ts);
	return err;
}

void dri_tcpstore_close(dri_tcpstore *ts)
{
	if (!ts)
		return;
	if (ts->fd >= 0)
		close(ts->fd);
	free(ts->prefix);
	free(ts);
}

int dri_tcpstore_fd(const dri_tcpstore *ts)
{
	return ts->fd;
}

int dri_tcpstore_dialect(const dri_tcpstore *ts)
{
	return ts->dialect;
}

/* Sends one request for the caller's key (prefixed here). */
static dr_err request(dri_tcpstore *ts, int cmd, const char *key,
		      const void *val, size_t len, int64_t delta,
		      int64_t deadline)
{
	size_t klen = strlen(ts->prefix) + strlen(key) + 1, n;
	char *full = malloc(klen);
	unsigned char *buf;
	int rc;

	if (!full)
		return dri_fail(DR_ENOMEM, "out of memory");
	snprintf(full, klen, "%s%s", ts->prefix, key);
	buf = dri_tcpstore_encode(ts->dialect, cmd, full, val, len, delta, &n);
	free(full);
	if (!buf)
		return dri_fail(DR_ENOMEM, "out of memory");
	rc = send_by(ts->fd, buf, n, deadline);
	free(buf);
	if (rc)
		return dri_fail(rc == -2 ? DR_ETIMEDOUT : DR_EPEER, "torch "
				"TCPStore at %s: sending the request for '%s' "
				"failed: %s", ts->where, key, rc == -2 ?
				"timed out" : dri_strerror(errno));
	return DR_OK;
}

/* Receives len reply bytes to the request for key. */
static dr_err answer(dri_tcpstore *ts, const char *key, void *buf, size_t len,
		     int64_t deadline, int64_t timeout_ms)
{
	int rc = recv_by(ts->fd, buf, len, deadline);

	if (rc == -2)
		return dri_fail(DR_ETIMEDOUT, "torch TCPStore at %s: no answer "
				"for key '%s' within %lld ms", ts->where, key,
				(long long)timeout_ms);
	if (rc)
		return dri_fail(DR_EPEER, "torch TCPStore at %s closed the "
				"connection while answering for key '%s'%s%s "
				"(did torchrun's agent exit?)", ts->where, key,
				errno ? ": " : "", errno ? dri_strerror(errno) : "");
	return DR_OK;
}

dr_err dri_tcpstore_set(dri_tcpstore *ts, const char *key, const void *val,
			size_t len, int64_t timeout_ms)
{
	if (len > DRI_TCPSTORE_VALUE_MAX)
		return dri_fail(DR_EINVAL, "torch TCPStore: value of '%s' is "
				"%zu bytes, over the %u limit", key, len,
				DRI_TCPSTORE_VALUE_MAX);
	return request(ts, DRI_TS_SET, key, val, len, 0,
		       dri_now_ms() + timeout_ms);
}

dr_err dri_tcpstore_get(dri_tcpstore *ts, const char *key, void **val,
			size_t *len, int64_t timeout_ms)
{
	int64_t deadline = dri_now_ms() + timeout_ms;
	unsigned char b[8];
	uint64_t n;
	char *v;
	dr_err err;

	/* The server answers GET for a missing key by dropping us: wait
	 * until it exists. */
	err = request(ts, DRI_TS_WAIT, key, NULL, 0, 0, deadline);
	if (!err)
		err = answer(ts, key, b, 1, deadline, timeout_ms);
	if (err)
		return err;
	if (b[0] != 0)
		return dri_fail(DR_EPROTO, "torch TCPStore at %s: unexpected "
				"answer %u to waiting for '%s'", ts->where, b[0],
				key);
	err = request(ts, DRI_TS_GET, key, NULL, 0, 0, deadline);
	if (!err)
		err = answer(ts, key, b, 8, deadline, timeout_ms);
	if (err)
		return err;
	n = dri_get64(b);
	if (n > DRI_TCPSTORE_VALUE_MAX)
		return dri_fail(DR_EPROTO, "torch TCPStore at %s: value of '%s' "
				"announced as %llu bytes, over the %u limit",
				ts->where, key, (unsigned long long)n,
				DRI_TCPSTORE_VALUE_MAX);
	v = malloc((size_t)n + 1);
	if (!v)
		return dri_fail(DR_ENOMEM, "out of memory");
	err = answer(ts, key, v, (size_t)n, deadline, timeout_ms);
	if (err) {
		free(v);
		return err;
	}
	v[n] = 0;
	*val = v;
	*len = (size_t)n;
	return DR_OK;
}

dr_err dri_tcpstore_add(dri_tcpstore *ts, const char *key, int64_t delta,
			int64_t *out, int64_t timeout_ms)
{
	int64_t deadline = dri_now_ms() + timeout_ms;
	unsigned char b[8];
	dr_err err;

	int64_t v;

	err = request(ts, DRI_TS_ADD, key, NULL, 0, delta, deadline);
	if (!err)
		err = answer(ts, key, b, 8, deadline, timeout_ms);
	if (err)
		return err;
	v = (int64_t)dri_get64(b);
	if (v >= (int64_t)1 << 40 || v <= -((int64_t)1 << 40) ||
	    (delta > 0 && v < delta))
		return dri_fail(DR_EPROTO, "torch TCPStore at %s answered adding "
				"%lld to '%s' with %lld, which no TCPStore would "
				"(is something else listening at MASTER_PORT?)",
				ts->where, (long long)delta, key, (long long)v);
	if (out)
		*out = v;
	return DR_OK;
}

/* ------------------------------------------------------- either store */

dr_err dri_kv_set(dri_kv *kv, const char *key, const void *val, size_t len)
{
	if (kv->ts)
		return dri_tcpstore_set(kv->ts, key, val, len, kv->timeout_ms);
	return dri_store_set(kv->st, key, val, len);
}

dr_err dri_kv_get(dri_kv *kv, const char *key, void **val, size_t *len,
		  int64_t timeout_ms)
{
	if (kv->ts)
		return dri_tcpstore_get(kv->ts, key, val, len, timeout_ms);
	return dri_store_get(kv->st, key, val, len, timeout_ms);
}

dr_err dri_kv_add(dri_kv *kv, const char *key, int64_t delta, int64_t *out)
{
	if (kv->ts)
		return dri_tcpstore_add(kv->ts, key, delta, out, kv->timeout_ms);
	return dri_store_add(kv->st, key, delta, out);
}

int dri_kv_fd(const dri_kv *kv)
{
	return kv->ts ? dri_tcpstore_fd(kv->ts) : dri_store_fd(kv->st);
}

void dri_kv_close(dri_kv *kv)
{
	dri_tcpstore_close(kv->ts);
	dri_store_close(kv->st);
	kv->ts = NULL;
	kv->st = NULL;
}
