/*
 * store_client.c - the rendezvous key-value store's client: every rank
 * (rank 0 too) talks through one to the server rank 0 runs (store.c; the
 * protocol in store_int.h).
 *
 * It connects with retries until its timeout (the server may start
 * later), proves the job's key (auth.h's handshake, both ways), then
 * sends one request at a time and reads its reply.  Every wait has the
 * caller's deadline, so a store that never answers cannot hang a rank,
 * and a reply that carries another request's number (a GET that timed
 * out, answered late) is discarded.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "error.h"
#include "net.h"
#include "store.h"
#include "store_int.h"
#include "timeout.h"
#include "wire.h"

struct dri_store {
	int fd;
	uint32_t seq;
};

/* ------------------------------------------------------------ helpers */

/* Writes all of buf before deadline; 0, -1 error (errno), -2 timeout. */
static int write_all(int fd, const void *buf, size_t len, int64_t deadline)
{
	const char *p = buf;

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
				return -2;
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
		if (poll(&pf, 1, (int)(left > 1000 ? 1000 : left)) > 0 &&
		    (pf.revents & POLLNVAL))
			return -1;
	}
	return 0;
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

/* The client's side of the handshake on a connected fd: DR_OK, DR_EAUTH
 * (the server does not have the key: final), or DR_ECONN with errno-like
 * detail in the message (dropped: worth another try). */
static dr_err client_handshake_run(int fd, const uint8_t key[DRI_KEY_LEN],
				   int rank, int64_t deadline)
{
	unsigned char chal[DRI_HS_CHAL], proof[DRI_HS_PROOF], ok = 0;
	int64_t hs_deadline = dri_now_ms() + DRI_HS_MS;
	dri_hs hs;
	int srv, rc;
	dr_err err;

	if (hs_deadline < deadline)
		deadline = hs_deadline;
	err = dri_hs_hello(&hs, DRI_HS_STORE, rank, 0);
	if (err)
		return err;
	if (write_all(fd, hs.hello, DRI_HS_HELLO, deadline) < 0)
		return dri_fail(DR_ECONN, "handshake not sent: %s", dri_strerror(errno));
	rc = read_all(fd, chal, DRI_NET_NOFD_LEN, deadline);
	if (rc == 0 && !memcmp(chal, DRI_NET_NOFD, DRI_NET_NOFD_LEN))
		return dri_fail(DR_ESYS, "the store is out of file descriptors "
				"and closed this connection: raise the open "
				"file limit (ulimit -n) of the rank that serves "
				"it (rank 0)");
	if (rc == 0)
		rc = read_all(fd, chal + DRI_NET_NOFD_LEN,
			      sizeof(chal) - DRI_NET_NOFD_LEN, deadline);
	if (rc < 0)
		return dri_fail(DR_ECONN, "the store %s during the handshake",
				rc == -2 ? "did not answer" : "closed the connection");
	err = dri_hs_answer(&hs, key, chal, &srv, proof);
	if (err)
		return err;
	if (write_all(fd, proof, sizeof(proof), deadline) < 0 ||
	    read_all(fd, &ok, 1, deadline) < 0 || ok != 1)
		return dri_fail(DR_ECONN, "the store dropped the connection "
				"during the handshake");
	return DR_OK;
}

dr_err dri_store_connect(const char *host, int port,
			 const uint8_t key[DRI_KEY_LEN], int rank,
			 int64_t timeout_ms, dri_store **out)
{
	struct addrinfo hints, *res = NULL;
	char ps[16], why[512] = "";
	int64_t deadline = dri_now_ms() + timeout_ms;
	int rc, fd = -1, one = 1;
	dr_err err;

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
			if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
				int e = errno;
				freeaddrinfo(res);
				return dri_fail(DR_ESYS, "cannot connect to the "
						"store at %s:%d: %s (the open file "
						"limit, ulimit -n, is too low)",
						host, port, dri_strerror(e));
			}
			if (fd < 0) {
				snprintf(why, sizeof(why), "%s", dri_strerror(errno));
				continue;
			}
			if (connect_until(fd, ai, deadline) == 0) {
				err = client_handshake_run(fd, key, rank, deadline);
				if (!err)
					goto connected;
				snprintf(why, sizeof(why), "%s", dr_last_error());
				if (err != DR_ECONN) {
					close(fd);
					freeaddrinfo(res);
					return dri_fail(err, "store at %s:%d: %s",
							host, port, why);
				}
			} else {
				snprintf(why, sizeof(why), "%s", dri_strerror(errno));
			}
			close(fd);
			fd = -1;
		}
		if (dri_now_ms() >= deadline)
			break;
		usleep(20000);
	}
	freeaddrinfo(res);
	return dri_fail(DR_ETIMEDOUT, "cannot reach the store at %s:%d within "
			"%lld ms: %s", host, port, (long long)timeout_ms, why);
connected:
	freeaddrinfo(res);
	/* Non-blocking (from socket()), so that every read and write
	 * honours its timeout. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
		int e = errno;
		close(fd);
		return dri_fail(DR_ESYS, "store socket: TCP_NODELAY: %s",
				dri_strerror(e));
	}
	dri_store *st = calloc(1, sizeof(*st));
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

/* Sends one request and reads its reply (value malloc'ed into *val).
 * Replies to earlier requests that timed out are read and discarded. */
static dr_err roundtrip(dri_store *st, int cmd, const char *key,
			const void *val, size_t vlen, void **rval,
			size_t *rlen, int64_t timeout_ms)
{
	size_t klen = strlen(key), flen = 7 + klen + vlen;
	int64_t deadline = dri_now_ms() + timeout_ms;
	unsigned char *f, h[9];
	unsigned char *r = NULL;
	uint32_t n, seq = ++st->seq;
	int rc;

	if (klen > KEY_MAX)
		return dri_fail(DR_EINVAL, "store key too long");
	if (vlen > VALUE_MAX)
		return dri_fail(DR_EINVAL, "store: value for key '%s' is %zu "
				"bytes, more than %zu", key, vlen, VALUE_MAX);
	f = malloc(4 + flen);
	if (!f)
		return dri_fail(DR_ENOMEM, "out of memory");
	dri_put32(f, (uint32_t)flen);
	dri_put32(f + 4, seq);
	f[8] = (unsigned char)cmd;
	f[9] = (unsigned char)klen;
	f[10] = (unsigned char)(klen >> 8);
	memcpy(f + 11, key, klen);
	if (vlen)
		memcpy(f + 11 + klen, val, vlen);
	rc = write_all(st->fd, f, 4 + flen, deadline);
	free(f);
	if (rc < 0)
		return dri_fail(DR_ECONN, "store: cannot send request for key "
				"'%s': %s", key, rc == -2 ? "timed out" :
				dri_strerror(errno));
	for (;;) {
		rc = read_all(st->fd, h, 9, deadline);
		if (rc == -2)
			return dri_fail(DR_ETIMEDOUT, "store: timed out after "
					"%lld ms waiting for key '%s'",
					(long long)timeout_ms, key);
		n = dri_get32(h);
		if (rc < 0 || n < 5 || n - 5 > VALUE_MAX)
			return dri_fail(DR_ECONN, "store: connection to rank 0 "
					"lost waiting for key '%s' (has rank 0 "
					"exited, or failed in its init?)", key);
		r = malloc(n - 4);
		if (!r)
			return dri_fail(DR_ENOMEM, "out of memory");
		rc = read_all(st->fd, r, n - 5, deadline);
		if (rc < 0) {
			free(r);
			return dri_fail(rc == -2 ? DR_ETIMEDOUT : DR_ECONN,
					"store: reply for key '%s' cut short", key);
		}
		if (dri_get32(h + 4) == seq)
			break;
		free(r); /* the late answer to a request that timed out */
	}
	if (h[8]) {
		free(r);
		return dri_fail(h[8] == ST_LIMIT ? DR_EINVAL : DR_ENOMEM,
				"store: rank 0 could not store '%s' (%s)", key,
				h[8] == ST_LIMIT ? "the store is full" :
				"out of memory");
	}
	r[n - 5] = 0;
	if (rval) {
		*rval = r;
		*rlen = n - 5;
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
