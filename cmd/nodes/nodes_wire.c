/*
 * nodes_wire.c - what the launchers of a multi-node job say to each other
 * with, under the join and the job (nodes.c): the clock and deadlines,
 * whole reads and writes with a deadline, the frames (a 4-byte length and
 * a JSON object, bounded in bytes and time) and their fields, hex, the
 * hub's listener and a node's connect with retries, and the job's key and
 * per-job secret.  Nothing here knows the hub from a node; nodes_int.h
 * declares it for nodes.c alone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
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

#include "contract.h"
#include "nodes_int.h"

double nodes_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int nodes_ms_left(double deadline)
{
	double left = deadline - nodes_mono();

	if (left <= 0)
		return 0;
	return left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
}

/* Reads or writes exactly n bytes before the deadline: 0, or -1 (errno
 * ETIMEDOUT, EPIPE for EOF, or the socket's). */
int nodes_io_full(int fd, void *p, size_t n, double deadline, bool wr)
{
	unsigned char *b = p;

	while (n) {
		struct pollfd pfd = { fd, wr ? POLLOUT : POLLIN, 0 };
		ssize_t k;
		int rc = poll(&pfd, 1, nodes_ms_left(deadline));

		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -1;
		if (rc == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		k = wr ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k < 0)
			return -1;
		if (k == 0) {
			errno = EPIPE;
			return -1;
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

int nodes_send_frame(int fd, json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	unsigned char len[4];
	size_t n;
	int rc = -1;

	json_decref(msg);
	if (!s)
		return -1;
	n = strlen(s);
	if (n <= NODES_FRAME_MAX) {
		double dl = nodes_mono() + FRAME_MS / 1000.0;

		len[0] = (unsigned char)(n >> 24);
		len[1] = (unsigned char)(n >> 16);
		len[2] = (unsigned char)(n >> 8);
		len[3] = (unsigned char)n;
		rc = nodes_io_full(fd, len, 4, dl, true) ||
		     nodes_io_full(fd, s, n, dl, true) ? -1 : 0;
	}
	free(s);
	return rc;
}

/* A frame's JSON object, or NULL (EOF, timeout, oversized, not JSON). */
json_t *nodes_recv_frame(int fd, double deadline)
{
	unsigned char len[4];
	size_t n;
	char *s;
	json_t *j;

	if (nodes_io_full(fd, len, 4, deadline, false))
		return NULL;
	n = (size_t)len[0] << 24 | (size_t)len[1] << 16 | (size_t)len[2] << 8 |
	    len[3];
	if (n == 0 || n > NODES_FRAME_MAX)
		return NULL;
	s = malloc(n);
	if (!s)
		return NULL;
	if (nodes_io_full(fd, s, n, deadline, false)) {
		free(s);
		return NULL;
	}
	j = json_loadb(s, n, 0, NULL);
	free(s);
	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

const char *nodes_jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "";
}

/* An int member, or dflt when it is absent, not an integer or out of
 * int's range (never its low 32 bits). */
int nodes_jint(json_t *o, const char *k, int dflt)
{
	json_t *v = json_object_get(o, k);

	if (!json_is_integer(v) || json_integer_value(v) < INT_MIN ||
	    json_integer_value(v) > INT_MAX)
		return dflt;
	return (int)json_integer_value(v);
}

/* A status as a frame carries it: what distrun exits with, 0..255; -1
 * when the frame's is not one (a failure's 256 must not exit 0). */
int nodes_jstatus(json_t *o)
{
	int st = nodes_jint(o, "status", -1);

	return st >= 0 && st <= 255 ? st : -1;
}

void nodes_hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

int nodes_unhex(const char *s, uint8_t *out, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	if (strlen(s) != 2 * n || strspn(s, digits) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)((strchr(digits, s[2 * i]) - digits) << 4 |
				   (strchr(digits, s[2 * i + 1]) - digits));
	return 0;
}

static int tcp_socket(int family)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd >= 0 &&
	    (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	     setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))) {
		close(fd);
		return -1;
	}
	return fd;
}

int nodes_hub_listen(const char *addr, int port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai, *a;
	char ps[16];
	int fd = -1, rc, err = 0;

	snprintf(ps, sizeof(ps), "%d", port);
	rc = getaddrinfo(addr, ps, &hints, &ai);
	if (rc) {
		fprintf(stderr, "distrun: --master-addr %s: %s\n", addr,
			gai_strerror(rc));
		return -1;
	}
	for (a = ai; a; a = a->ai_next) {
		fd = tcp_socket(a->ai_family);
		if (fd < 0)
			continue;
		if (!bind(fd, a->ai_addr, a->ai_addrlen) && !listen(fd, 128))
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		fprintf(stderr, "distrun: node 0 cannot listen on %s:%d: %s%s\n",
			addr, port, strerror(err),
			err == EADDRNOTAVAIL ? " (is --master-addr an address "
			"of this host?)" : err == EADDRINUSE ? " (another job "
			"uses that --master-port?)" : "");
	return fd;
}

/* One try at connecting: the fd, or -1 with errno. */
int nodes_try_connect(const char *addr, int port, double deadline)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai, *a;
	char ps[16];
	int fd = -1, err = ECONNREFUSED;

	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(addr, ps, &hints, &ai)) {
		errno = EHOSTUNREACH;
		return -1;
	}
	for (a = ai; a && fd < 0; a = a->ai_next) {
		struct pollfd pfd;
		socklen_t sl = sizeof(err);

		fd = tcp_socket(a->ai_family);
		if (fd < 0)
			continue;
		if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0 ||
		    (connect(fd, a->ai_addr, a->ai_addrlen) && errno !=
		     EINPROGRESS)) {
			err = errno;
			goto next;
		}
		pfd = (struct pollfd){ fd, POLLOUT, 0 };
		if (poll(&pfd, 1, nodes_ms_left(deadline)) != 1 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) || err) {
			if (!err)
				err = ETIMEDOUT;
			goto next;
		}
		/* Blocking again; io_full polls, so either way works. */
		if (fcntl(fd, F_SETFL, 0) < 0) {
			err = errno;
			goto next;
		}
		break;
next:
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		errno = err;
	return fd;
}

int nodes_key_for(const struct node_plan *p, uint8_t key[DRI_KEY_LEN],
		  char *run_id, size_t n)
{
	char ident[160];

	if (p->run_id && *p->run_id)
		snprintf(run_id, n, "%s", p->run_id);
	else
		snprintf(run_id, n, "%s:%d", p->master_addr, p->port);
	snprintf(ident, sizeof(ident), "distrun nodes %s %d", run_id,
		 p->nnodes);
	if (dri_auth_store_key(ident, key)) {
		fprintf(stderr, "distrun: %s\n", dr_last_error());
		return -1;
	}
	return 0;
}

void nodes_derive_secret(const uint8_t key[DRI_KEY_LEN],
			 const uint8_t nonce[16], char out[65])
{
	uint8_t s[32];
	dri_hmac_ctx c;

	dri_hmac_init(&c, key, DRI_KEY_LEN);
	dri_hmac_update(&c, "distrun job secret", 18);
	dri_hmac_update(&c, nonce, 16);
	dri_hmac_final(&c, s);
	nodes_hex(s, sizeof(s), out);
}
