/*
 * nodes.c - the launchers of a multi-node job, connected to node 0's.
 *
 * nodes.h says what happens; this file owns the sockets.  The hub runs a
 * small poll loop while the nodes join: every connection must finish the
 * handshake within DRI_HS_MS and send its JOIN before the join deadline,
 * at most PENDING_MAX unauthenticated connections are held at once (when
 * full, the oldest still waiting for its HELLO goes, told NODES_BUSY, so
 * that a flood of idle connections cannot keep a node out; the node
 * tries again until its join deadline), and a connection that breaks a
 * rule is closed without an answer.  After the
 * join the listener is closed: a node cannot join a job that has started.
 * Frames are small and rare (join, start, fail, end, stop, bye), so they
 * are read whole with a short deadline once poll says one is coming.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "nodes.h"
#include "rendezvous.h"

#define PENDING_MAX 64
#define FRAME_MS 5000

enum { C_HELLO, C_PROOF, C_JOIN, C_UP, C_ENDED, C_CLOSED };

/* What the first failure was: a rank's, a lost distrun (both worth a
 * restart under --max-restarts), or a stop (a signal, --timeout). */
enum { FAIL_OTHER, FAIL_RANK, FAIL_LOST };

struct conn {
	int fd;
	int state;
	int node;               /* claimed in the handshake, checked at JOIN */
	double deadline;
	uint64_t serial;        /* order of arrival: the oldest is dropped */
	dri_hs hs;
	unsigned char buf[DRI_HS_HELLO + DRI_HS_CHAL];
	size_t have;
};

struct nodes {
	bool hub;
	int nnodes, node_rank;
	uint8_t key[DRI_KEY_LEN];
	int hub_fd;             /* spoke: the connection to the hub */
	struct conn *node;      /* hub: per node rank (0 unused) */
	int *nproc;
	/* The first failure anywhere (hub), or the stop we were told of. */
	bool failed;
	int fail_node, fail_rank, fail_status, fail_kind;
	char fail_desc[160];
	int final_status;       /* spoke: from the hub's bye */
	char hub_desc[128];     /* spoke: "the distrun of node 0 (ADDR) ..." */
	bool got_bye;
	struct rdzv_keep *keep; /* etcd's node 0: renews the round's lease */
};

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int ms_left(double deadline)
{
	double left = deadline - mono();

	if (left <= 0)
		return 0;
	return left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
}

/* Reads or writes exactly n bytes before the deadline: 0, or -1 (errno
 * ETIMEDOUT, EPIPE for EOF, or the socket's). */
static int io_full(int fd, void *p, size_t n, double deadline, bool wr)
{
	unsigned char *b = p;

	while (n) {
		struct pollfd pfd = { fd, wr ? POLLOUT : POLLIN, 0 };
		ssize_t k;
		int rc = poll(&pfd, 1, ms_left(deadline));

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

static int send_frame(int fd, json_t *msg)
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
		double dl = mono() + FRAME_MS / 1000.0;

		len[0] = (unsigned char)(n >> 24);
		len[1] = (unsigned char)(n >> 16);
		len[2] = (unsigned char)(n >> 8);
		len[3] = (unsigned char)n;
		rc = io_full(fd, len, 4, dl, true) ||
		     io_full(fd, s, n, dl, true) ? -1 : 0;
	}
	free(s);
	return rc;
}

/* A frame's JSON object, or NULL (EOF, timeout, oversized, not JSON). */
static json_t *recv_frame(int fd, double deadline)
{
	unsigned char len[4];
	size_t n;
	char *s;
	json_t *j;

	if (io_full(fd, len, 4, deadline, false))
		return NULL;
	n = (size_t)len[0] << 24 | (size_t)len[1] << 16 | (size_t)len[2] << 8 |
	    len[3];
	if (n == 0 || n > NODES_FRAME_MAX)
		return NULL;
	s = malloc(n);
	if (!s)
		return NULL;
	if (io_full(fd, s, n, deadline, false)) {
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

static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "";
}

/* An int member, or dflt when it is absent, not an integer or out of
 * int's range (never its low 32 bits). */
static int jint(json_t *o, const char *k, int dflt)
{
	json_t *v = json_object_get(o, k);

	if (!json_is_integer(v) || json_integer_value(v) < INT_MIN ||
	    json_integer_value(v) > INT_MAX)
		return dflt;
	return (int)json_integer_value(v);
}

/* A status as a frame carries it: what distrun exits with, 0..255; -1
 * when the frame's is not one (a failure's 256 must not exit 0). */
static int jstatus(json_t *o)
{
	int st = jint(o, "status", -1);

	return st >= 0 && st <= 255 ? st : -1;
}

static void hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

static int unhex(const char *s, uint8_t *out, size_t n)
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

static int hub_listen(const char *addr, int port)
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
static int try_connect(const char *addr, int port, double deadline)
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
		if (poll(&pfd, 1, ms_left(deadline)) != 1 ||
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

static int key_for(const struct node_plan *p, uint8_t key[DRI_KEY_LEN],
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

static void derive_secret(const uint8_t key[DRI_KEY_LEN], const uint8_t
			  nonce[16], char out[65])
{
	uint8_t s[32];
	dri_hmac_ctx c;

	dri_hmac_init(&c, key, DRI_KEY_LEN);
	dri_hmac_update(&c, "distrun job secret", 18);
	dri_hmac_update(&c, nonce, 16);
	dri_hmac_final(&c, s);
	hex(s, sizeof(s), out);
}

/* ---------------------------------------------------------- the hub */

int nodes_read_join(int fd, int node, double deadline, int *nproc)
{
	json_t *j = recv_frame(fd, deadline);
	int rc = -1;

	*nproc = j ? jint(j, "nproc", 0) : 0;
	if (j && jint(j, "node", -1) == node && *nproc >= 1 &&
	    *nproc <= NODES_NPROC_MAX && !strcmp(jstr(j, "t"), "join"))
		rc = 0;
	json_decref(j);
	return rc;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = C_CLOSED;
}

/* Moves one pending connection along; returns 1 when it has joined. */
static int pending_step(struct nodes *nd, struct conn *c, double join_dl)
{
	size_t want = c->state == C_HELLO ? DRI_HS_HELLO : DRI_HS_PROOF;
	ssize_t k;

	if (c->state == C_JOIN) {
		int node = c->node, nproc;

		if (nodes_read_join(c->fd, node, join_dl, &nproc)) {
			conn_close(c);
			return 0;
		}
		if (nd->node[node].fd >= 0) {
			send_frame(c->fd, json_pack("{s:s,s:s}", "t", "error",
				   "error", "that node rank has joined already"));
			fprintf(stderr, "distrun: a second node %d tried to "
				"join; refused\n", node);
			conn_close(c);
			return 0;
		}
		nd->node[node] = *c;
		nd->node[node].state = C_UP;
		nd->nproc[node] = nproc;
		c->fd = -1;
		c->state = C_CLOSED;
		return 1;
	}
	k = recv(c->fd, c->buf + c->have, want - c->have, MSG_DONTWAIT);
	if (k <= 0) {
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		conn_close(c);
		return 0;
	}
	c->have += (size_t)k;
	if (c->have < want)
		return 0;
	c->have = 0;
	if (c->state == C_HELLO) {
		int rank, size;

		if (dri_hs_challenge(&c->hs, nd->key, c->buf, DRI_HS_STORE, 0,
				     &rank, &size) || size != nd->nnodes ||
		    rank < 1 || rank >= nd->nnodes ||
		    io_full(c->fd, c->hs.chal, DRI_HS_CHAL, c->deadline, true)) {
			conn_close(c);
			return 0;
		}
		c->node = rank;
		c->state = C_PROOF;
		return 0;
	}
	if (!dri_hs_verify(&c->hs, nd->key, c->buf)) {
		conn_close(c);
		return 0;
	}
	c->state = C_JOIN;
	return 0;
}

/* The pending slot for a new connection: a free one, else the oldest
 * connection still in the handshake (one that sent no HELLO first), told
 * NODES_BUSY and closed; -1 if every slot holds a node that proved the
 * key. */
static int pending_slot(struct conn *pend)
{
	int old = -1;

	for (int i = 0; i < PENDING_MAX; i++)
		if (pend[i].state == C_CLOSED)
			return i;
	for (int pass = C_HELLO; pass <= C_PROOF && old < 0; pass++)
		for (int i = 0; i < PENDING_MAX; i++)
			if (pend[i].state == pass && (old < 0 ||
			    pend[i].serial < pend[old].serial))
				old = i;
	if (old >= 0) {
		(void)!send(pend[old].fd, NODES_BUSY, NODES_BUSY_LEN,
			    MSG_NOSIGNAL | MSG_DONTWAIT);
		conn_close(&pend[old]);
	}
	return old;
}

static int hub_join(struct nodes *nd, const struct node_plan *p)
{
	uint64_t serial = 0;
	struct conn pend[PENDING_MAX];
	double join_dl = mono() + p->timeout;
	int lfd = hub_listen(p->master_addr, p->port);
	int joined = 1;

	if (lfd < 0)
		return -1;
	for (int i = 0; i < PENDING_MAX; i++)
		pend[i] = (struct conn){ .fd = -1, .state = C_CLOSED };
	while (joined < nd->nnodes) {
		struct pollfd pfd[PENDING_MAX + 1];
		int idx[PENDING_MAX + 1], np = 0, rc;
		double now = mono(), next = join_dl;

		if (now >= join_dl)
			break;
		pfd[np++] = (struct pollfd){ lfd, POLLIN, 0 };
		for (int i = 0; i < PENDING_MAX; i++) {
			if (pend[i].state == C_CLOSED)
				continue;
			if (pend[i].state != C_JOIN && now >= pend[i].deadline) {
				conn_close(&pend[i]);
				continue;
			}
			if (pend[i].state != C_JOIN && pend[i].deadline < next)
				next = pend[i].deadline;
			idx[np] = i;
			pfd[np++] = (struct pollfd){ pend[i].fd, POLLIN, 0 };
		}
		rc = poll(pfd, np, ms_left(next));
		if (rc < 0 && errno != EINTR)
			break;
		if (rc <= 0)
			continue;
		if (pfd[0].revents) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			int slot = fd >= 0 ? pending_slot(pend) : -1;

			if (fd >= 0 && slot < 0)
				close(fd);
			else if (fd >= 0)
				pend[slot] = (struct conn){
					.fd = fd, .state = C_HELLO,
					.serial = serial++,
					.deadline = mono() + DRI_HS_MS / 1000.0 };
			else if (errno == EMFILE || errno == ENFILE)
				poll(NULL, 0, 100); /* no spin at the fd limit */
		}
		for (int k = 1; k < np; k++)
			if (pfd[k].revents)
				joined += pending_step(nd, &pend[idx[k]], join_dl);
	}
	close(lfd);
	for (int i = 0; i < PENDING_MAX; i++)
		conn_close(&pend[i]);
	if (joined < nd->nnodes) {
		char miss[256] = "";

		for (int k = 1; k < nd->nnodes && strlen(miss) < 200; k++)
			if (nd->node[k].fd < 0)
				snprintf(miss + strlen(miss), sizeof(miss) -
					 strlen(miss), "%s%d", *miss ? "," : "",
					 k);
		fprintf(stderr, "distrun: %d of %d nodes joined within %.0fs; "
			"missing node %s (are they started with the same "
			"--master-addr, --master-port, --nnodes and secret?)\n",
			joined, nd->nnodes, p->timeout, miss);
		return -1;
	}
	return 0;
}

static int hub_start(struct nodes *nd, const struct node_plan *p,
		     struct node_start *st)
{
	uint8_t nonce[16];
	char nonce_hex[33];
	int offset = 0;

	if (dri_random(nonce, sizeof(nonce))) {
		fprintf(stderr, "distrun: %s\n", dr_last_error());
		return -1;
	}
	hex(nonce, sizeof(nonce), nonce_hex);
	nd->nproc[0] = p->nproc;
	for (int k = 0; k < nd->nnodes; k++)
		offset += nd->nproc[k];
	st->world_size = offset;
	offset = 0;
	for (int k = 0; k < nd->nnodes; k++) {
		if (k > 0 && send_frame(nd->node[k].fd, json_pack(
			    "{s:s,s:i,s:i,s:i,s:i,s:s,s:s}", "t", "start",
			    "world", st->world_size, "offset", offset,
			    "nnodes", nd->nnodes, "master_port", p->rank_port,
			    "nonce", nonce_hex, "run_id", st->run_id))) {
			fprintf(stderr, "distrun: lost node %d while starting\n",
				k);
			return -1;
		}
		offset += nd->nproc[k];
	}
	st->rank_offset = 0;
	st->master_port = p->rank_port;
	derive_secret(nd->key, nonce, st->secret_hex);
	return 0;
}

/* ------------------------------------------------------- the spokes */

/* Connects to node 0 and runs the handshake: the fd, -1 after a message,
 * or -2 when node 0 dropped us from its full handshake queue (NODES_BUSY:
 * worth another try). */
static int spoke_handshake(struct nodes *nd, const struct node_plan *p,
			   double dl)
{
	unsigned char chal[DRI_HS_CHAL] = { 0 }, proof[DRI_HS_PROOF];
	dri_hs hs;
	int fd = -1, srv, err = 0, nap = 5;

	/* Node 0 may not listen yet: nodes started together find it after
	 * a few ms, so the naps start short and grow to 200 ms. */
	while (mono() < dl) {
		fd = try_connect(p->master_addr, p->port, dl);
		if (fd >= 0)
			break;
		err = errno;
		poll(NULL, 0, nap);
		nap = nap < 100 ? 2 * nap : 200;
	}
	if (fd < 0) {
		fprintf(stderr, "distrun: node %d cannot reach node 0 at %s:%d "
			"within %.0fs: %s\n", nd->node_rank, p->master_addr,
			p->port, p->timeout, strerror(err));
		return -1;
	}
	if (dri_hs_hello(&hs, DRI_HS_STORE, nd->node_rank, nd->nnodes) ||
	    io_full(fd, hs.hello, DRI_HS_HELLO, dl, true) ||
	    io_full(fd, chal, DRI_HS_CHAL, mono() + DRI_HS_MS / 1000.0,
		    false)) {
		close(fd);
		if (!memcmp(chal, NODES_BUSY, NODES_BUSY_LEN))
			return -2;
		fprintf(stderr, "distrun: node 0 at %s:%d closed the connection "
			"during the handshake (a different secret, --nnodes "
			"or --master-port?)\n", p->master_addr, p->port);
		return -1;
	}
	if (dri_hs_answer(&hs, nd->key, chal, &srv, proof)) {
		close(fd);
		fprintf(stderr, "distrun: node 0 at %s:%d and this node do not "
			"share the job's secret (DISTRUN_SECRET, "
			"DISTRUN_SECRET_FILE or ~/.config/distrun/secret): "
			"refusing it\n", p->master_addr, p->port);
		return -1;
	}
	if (io_full(fd, proof, DRI_HS_PROOF, dl, true)) {
		close(fd);
		fprintf(stderr, "distrun: lost node 0 while joining\n");
		return -1;
	}
	return fd;
}

static int spoke_join(struct nodes *nd, const struct node_plan *p,
		      struct node_start *st)
{
	double dl = mono() + p->timeout;
	int fd, busy = 0;

	/* Dropped from a full queue: again, until the join deadline. */
	while ((fd = spoke_handshake(nd, p, dl)) == -2) {
		busy++;
		if (mono() >= dl) {
			fprintf(stderr, "distrun: node %d could not join node 0 "
				"at %s:%d within %.0fs: node 0 dropped its "
				"connection %d times, each time for a newer one "
				"when %d were waiting in the handshake (are "
				"others flooding node 0's port?)\n",
				nd->node_rank, p->master_addr, p->port,
				p->timeout, busy, PENDING_MAX);
			return -1;
		}
		poll(NULL, 0, 50);
	}
	if (fd < 0)
		return -1;
	nd->hub_fd = fd;
	snprintf(nd->hub_desc, sizeof(nd->hub_desc), "the distrun of node 0 "
		 "(%.64s) was lost", p->master_addr);
	if (send_frame(fd, json_pack("{s:s,s:i,s:i}", "t", "join", "node",
				     nd->node_rank, "nproc", p->nproc))) {
		fprintf(stderr, "distrun: lost node 0 while joining\n");
		return -1;
	}
	return nodes_read_start(nd, p->nproc, dl, st);
}

int nodes_read_start(struct nodes *nd, int nproc, double deadline,
		     struct node_start *st)
{
	json_t *j = recv_frame(nd->hub_fd, deadline);
	uint8_t nonce[16];
	const char *run_id;

	if (!j || strcmp(jstr(j, "t"), "start")) {
		fprintf(stderr, "distrun: node 0 %s\n", !j ? "did not start the "
			"job in time" : !strcmp(jstr(j, "t"), "error") ?
			jstr(j, "error") : "sent something unexpected");
		json_decref(j);
		return -1;
	}
	st->world_size = jint(j, "world", -1);
	st->rank_offset = jint(j, "offset", -1);
	st->master_port = jint(j, "master_port", -1);
	run_id = jstr(j, "run_id");
	if (st->world_size < 1 || st->rank_offset < 0 ||
	    st->rank_offset > st->world_size - nproc ||
	    st->master_port < 1 || st->master_port > 65535 ||
	    strlen(run_id) >= sizeof(st->run_id) ||
	    unhex(jstr(j, "nonce"), nonce, sizeof(nonce))) {
		fprintf(stderr, "distrun: node 0 sent a bad start message\n");
		json_decref(j);
		return -1;
	}
	snprintf(st->run_id, sizeof(st->run_id), "%s", run_id);
	json_decref(j);
	derive_secret(nd->key, nonce, st->secret_hex);
	return 0;
}

/* A node with no connection yet; NULL when out of memory. */
static struct nodes *nodes_new(int nnodes, int node_rank)
{
	struct nodes *nd = calloc(1, sizeof(*nd));

	if (!nd)
		return NULL;
	nd->hub = node_rank == 0;
	nd->nnodes = nnodes;
	nd->node_rank = node_rank;
	nd->hub_fd = -1;
	nd->fail_rank = -1;
	if (nd->hub) {
		nd->node = calloc((size_t)nnodes, sizeof(*nd->node));
		nd->nproc = calloc((size_t)nnodes, sizeof(*nd->nproc));
		if (!nd->node || !nd->nproc) {
			nodes_release(nd);
			return NULL;
		}
		for (int k = 0; k < nnodes; k++)
			nd->node[k] = (struct conn){ .fd = -1,
						     .state = C_CLOSED };
	}
	return nd;
}

struct nodes *nodes_attach(int nnodes, int node_rank, const int *fds)
{
	struct nodes *nd = nodes_new(nnodes, node_rank);

	if (!nd)
		return NULL;
	if (!nd->hub)
		nd->hub_fd = fds[0];
	for (int k = 1; nd->hub && k < nnodes; k++) {
		nd->node[k].fd = fds[k];
		nd->node[k].state = C_UP;
	}
	return nd;
}

int nodes_join(struct nodes **out, const struct node_plan *p,
	       struct node_start *st)
{
	struct nodes *nd = nodes_new(p->nnodes, p->node_rank);

	*out = NULL;
	memset(st, 0, sizeof(*st));
	if (!nd)
		goto oom;
	st->nnodes = p->nnodes;
	st->node_rank = p->node_rank;
	if (key_for(p, nd->key, st->run_id, sizeof(st->run_id)))
		goto fail;
	if (nd->hub ? hub_join(nd, p) || hub_start(nd, p, st) :
		      spoke_join(nd, p, st))
		goto fail;
	*out = nd;
	return 0;
oom:
	fprintf(stderr, "distrun: out of memory\n");
fail:
	nodes_release(nd);
	return -1;
}

int nodes_pollfds(struct nodes *nd, struct pollfd *pfd, int max)
{
	int n = 0;

	if (!nd)
		return 0;
	if (nd->keep && max > 0)
		pfd[n++] = (struct pollfd){ rdzv_keep_fd(nd->keep), POLLIN, 0 };
	if (!nd->hub) {
		if (nd->hub_fd >= 0 && n < max)
			pfd[n++] = (struct pollfd){ nd->hub_fd, POLLIN, 0 };
		return n;
	}
	for (int k = 1; k < nd->nnodes && n < max; k++)
		if (nd->node[k].fd >= 0)
			pfd[n++] = (struct pollfd){ nd->node[k].fd, POLLIN, 0 };
	return n;
}

static void hub_broadcast_stop(struct nodes *nd, int except)
{
	for (int k = 1; k < nd->nnodes; k++)
		if (k != except && nd->node[k].fd >= 0 &&
		    nd->node[k].state == C_UP)
			send_frame(nd->node[k].fd, json_pack(
				"{s:s,s:i,s:i,s:i,s:s,s:i}", "t", "stop",
				"node", nd->fail_node, "rank", nd->fail_rank,
				"status", nd->fail_status, "desc",
				nd->fail_desc, "kind", nd->fail_kind));
}

static bool record_failure(struct nodes *nd, int node, int rank, int status,
			   const char *desc, int kind)
{
	if (nd->failed)
		return false;
	nd->failed = true;
	nd->fail_kind = kind;
	nd->fail_node = node;
	nd->fail_rank = rank;
	nd->fail_status = status ? status : 1;
	snprintf(nd->fail_desc, sizeof(nd->fail_desc), "%s", desc);
	return true;
}

static void event_from_failure(struct nodes *nd, struct node_event *ev,
			       int kind)
{
	ev->kind = kind;
	ev->node = nd->fail_node;
	ev->rank = nd->fail_rank;
	ev->status = nd->fail_status;
	snprintf(ev->desc, sizeof(ev->desc), "%s", nd->fail_desc);
}

/* The hub: one frame (or EOF) from node k. */
static void hub_read(struct nodes *nd, int k, struct node_event *ev)
{
	struct conn *c = &nd->node[k];
	json_t *j = recv_frame(c->fd, mono() + FRAME_MS / 1000.0);
	const char *t = j ? jstr(j, "t") : "";

	/* A frame that breaks the protocol counts as the node lost. */
	if (!strcmp(t, "fail") && jstatus(j) >= 0) {
		int rank = jint(j, "rank", -1);

		if (record_failure(nd, k, rank, jstatus(j), jstr(j, "desc"),
				   rank >= 0 ? FAIL_RANK : FAIL_OTHER)) {
			hub_broadcast_stop(nd, k);
			event_from_failure(nd, ev, NODE_EV_STOP);
		}
	} else if (!strcmp(t, "end") && jstatus(j) >= 0) {
		int st = jstatus(j);

		c->state = C_ENDED;
		if (st && record_failure(nd, k, -1, st, "ended with a failure",
					 FAIL_OTHER)) {
			hub_broadcast_stop(nd, k);
			event_from_failure(nd, ev, NODE_EV_STOP);
		}
	} else {
		bool ended = c->state == C_ENDED;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char host[64] = "?";

		if (!getpeername(c->fd, (struct sockaddr *)&ss, &sl))
			getnameinfo((struct sockaddr *)&ss, sl, host,
				    sizeof(host), NULL, 0, NI_NUMERICHOST);
		conn_close(c);
		if (!ended) {
			char d[128];

			snprintf(d, sizeof(d), "the distrun of node %d (%s) was "
				 "lost", k, host);
			if (record_failure(nd, k, -1, 1, d, FAIL_LOST)) {
				hub_broadcast_stop(nd, k);
				event_from_failure(nd, ev, NODE_EV_LOST);
			}
		}
	}
	json_decref(j);
}

static void spoke_read(struct nodes *nd, struct node_event *ev)
{
	json_t *j = recv_frame(nd->hub_fd, mono() + FRAME_MS / 1000.0);
	const char *t = j ? jstr(j, "t") : "";

	int node = j ? jint(j, "node", -1) : -1;

	/* A frame that breaks the protocol counts as the hub lost. */
	if (!strcmp(t, "stop") && jstatus(j) >= 0 && node >= 0 &&
	    node < nd->nnodes) {
		if (record_failure(nd, node, jint(j, "rank", -1),
				   jstatus(j), jstr(j, "desc"),
				   jint(j, "kind", FAIL_OTHER)))
			event_from_failure(nd, ev, NODE_EV_STOP);
	} else if (!strcmp(t, "bye") && jstatus(j) >= 0) {
		nd->got_bye = true;
		nd->final_status = jstatus(j);
	} else {
		close(nd->hub_fd);
		nd->hub_fd = -1;
		if (!nd->got_bye &&
		    record_failure(nd, 0, -1, 1, nd->hub_desc, FAIL_LOST))
			event_from_failure(nd, ev, NODE_EV_LOST);
	}
	json_decref(j);
}

void nodes_handle(struct nodes *nd, struct node_event *ev)
{
	ev->kind = NODE_EV_NONE;
	if (!nd)
		return;
	if (nd->keep) {
		struct pollfd pfd = { rdzv_keep_fd(nd->keep), POLLIN, 0 };

		if (poll(&pfd, 1, 0) == 1)
			rdzv_keep_tick(nd->keep);
	}
	if (!nd->hub) {
		struct pollfd pfd = { nd->hub_fd, POLLIN, 0 };

		if (nd->hub_fd >= 0 && poll(&pfd, 1, 0) == 1)
			spoke_read(nd, ev);
		return;
	}
	for (int k = 1; k < nd->nnodes; k++) {
		struct pollfd pfd = { nd->node[k].fd, POLLIN, 0 };
		struct node_event e = { .kind = NODE_EV_NONE };

		if (nd->node[k].fd < 0 || poll(&pfd, 1, 0) != 1)
			continue;
		hub_read(nd, k, &e);
		if (e.kind != NODE_EV_NONE && ev->kind == NODE_EV_NONE)
			*ev = e;
	}
}

void nodes_fail(struct nodes *nd, int rank, int status, const char *desc)
{
	if (!nd)
		return;
	if (nd->hub) {
		if (record_failure(nd, 0, rank, status, desc,
				   rank >= 0 ? FAIL_RANK : FAIL_OTHER))
			hub_broadcast_stop(nd, -1);
		return;
	}
	if (nd->hub_fd >= 0 && !nd->failed)
		send_frame(nd->hub_fd, json_pack("{s:s,s:i,s:i,s:s}", "t",
						 "fail", "rank", rank, "status",
						 status, "desc", desc));
}

int nodes_finish(struct nodes *nd, int status, double timeout)
{
	double dl = mono() + timeout;

	if (!nd)
		return status;
	if (!nd->hub) {
		/* Our end, then the job's status from the hub's bye. */
		if (nd->hub_fd >= 0)
			send_frame(nd->hub_fd, json_pack("{s:s,s:i}", "t", "end",
							 "status", status));
		while (nd->hub_fd >= 0 && !nd->got_bye && mono() < dl) {
			struct node_event ev;
			struct pollfd pfd = { nd->hub_fd, POLLIN, 0 };

			if (poll(&pfd, 1, ms_left(dl)) == 1)
				spoke_read(nd, &ev);
		}
		/* A stop we were told of is never undone by a bye of 0. */
		if (nd->got_bye && nd->final_status)
			return nd->final_status;
		if (status || nd->failed)
			return status ? status : nd->fail_status;
		return nd->got_bye ? 0 : 1;
	}
	if (status && !nd->failed)
		record_failure(nd, 0, -1, status, "ended with a failure",
			       FAIL_OTHER);
	for (;;) {
		struct pollfd pfd[NODES_MAX];
		int n = 0;

		for (int k = 1; k < nd->nnodes; k++)
			if (nd->node[k].fd >= 0 && nd->node[k].state == C_UP)
				pfd[n++] = (struct pollfd){ nd->node[k].fd,
							    POLLIN, 0 };
		if (!n || mono() >= dl)
			break;
		if (poll(pfd, n, ms_left(dl)) > 0) {
			struct node_event ev;

			nodes_handle(nd, &ev);
		}
	}
	status = nd->failed ? nd->fail_status : 0;
	for (int k = 1; k < nd->nnodes; k++)
		if (nd->node[k].fd >= 0)
			send_frame(nd->node[k].fd, json_pack("{s:s,s:i}", "t",
							     "bye", "status",
							     status));
	return status;
}

void nodes_release(struct nodes *nd)
{
	if (!nd)
		return;
	rdzv_keep_stop(nd->keep);
	if (nd->hub_fd >= 0)
		close(nd->hub_fd);
	for (int k = 0; nd->node && k < nd->nnodes; k++)
		if (nd->node[k].fd >= 0)
			close(nd->node[k].fd);
	free(nd->node);
	free(nd->nproc);
	free(nd);
}

/* ------------------------------------------- the launcher's side */

#include "cluster.h"
#include "launcher.h"

/* The plan from the options, else from Slurm or Kubeflow; then etcd's
 * rendezvous when asked.  0 with nnodes 1: a one-node job as ever. */
static int make_plan(struct job *job, struct node_plan *p, char *addr,
		     size_t addrsz, struct rdzv_keep **keep)
{
	struct opts *o = job->o;
	struct cluster c;
	char err[512];
	int rc;

	memset(p, 0, sizeof(*p));
	p->nnodes = o->max_nodes;
	p->node_rank = o->node_rank;
	p->port = o->master_port_given ? o->master_port : NODES_DEFAULT_PORT;
	p->run_id = o->rdzv_id;
	p->timeout = o->join_timeout;
	snprintf(addr, addrsz, "%s", o->master_addr);
	if (o->rdzv_backend && !strcmp(o->rdzv_backend, "etcd")) {
		struct rdzv_plan rp = {
			.endpoint = o->rdzv_endpoint, .run_id = o->rdzv_id,
			.min_nodes = o->min_nodes ? o->min_nodes : 1,
			.max_nodes = o->max_nodes ? o->max_nodes : 1,
			.nproc = o->nranks, .port = p->port,
			.timeout = o->join_timeout, .last_call = 5,
			.round = job->restarts, .argv = o->argv,
		};
		struct rdzv_result res;

		if (!o->rdzv_endpoint || !o->rdzv_id) {
			fprintf(stderr, "distrun: --rdzv-backend etcd needs "
				"--rdzv-endpoint HOST:PORT and --rdzv-id ID\n");
			return -1;
		}
		if (o->node_rank >= 0) {
			fprintf(stderr, "distrun: --node-rank is given by etcd's "
				"rendezvous, not on the command line\n");
			return -1;
		}
		if (rdzv_etcd(&rp, &res, err, sizeof(err))) {
			fprintf(stderr, "distrun: %s\n", err);
			return -1;
		}
		p->nnodes = res.nnodes;
		p->node_rank = res.node_rank;
		p->port = res.master_port;
		snprintf(addr, addrsz, "%s", res.master_addr);
		/* A node started afresh may have joined a restart's round:
		 * its ranks see that count, and its restarts left are the
		 * job's. */
		job->restarts = res.round;
		if (res.node_rank == 0 && res.nnodes > 1 && res.lease > 0 &&
		    !(*keep = rdzv_keep_start(o->rdzv_endpoint, res.lease, err,
					      sizeof(err)))) {
			fprintf(stderr, "distrun: %s\n", err);
			return -1;
		}
		return 0;
	}
	if (o->rdzv_endpoint) {
		/* Static: node 0's address and port, as torchrun takes it. */
		const char *colon = strrchr(o->rdzv_endpoint, ':');
		long port = colon ? strtol(colon + 1, NULL, 10) : 0;

		if (!colon || colon == o->rdzv_endpoint || port < 1 ||
		    port > 65535) {
			fprintf(stderr, "distrun: --rdzv-endpoint '%s': expected "
				"HOST:PORT\n", o->rdzv_endpoint);
			return -1;
		}
		snprintf(addr, addrsz, "%.*s", (int)(colon - o->rdzv_endpoint),
			 o->rdzv_endpoint);
		p->port = (int)port;
		o->master_addr_given = true;
	}
	if (o->min_nodes != o->max_nodes) {
		fprintf(stderr, "distrun: --nnodes %d:%d needs --rdzv-backend "
			"etcd (a static rendezvous has a fixed count)\n",
			o->min_nodes, o->max_nodes);
		return -1;
	}
	if (!o->max_nodes) {
		rc = cluster_detect(&c, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "distrun: %s\n", err);
			return -1;
		}
		if (rc == 0) {
			p->nnodes = c.nnodes;
			p->node_rank = c.node_rank;
			p->port = c.port;
			snprintf(addr, addrsz, "%s", c.master_addr);
			if (c.nproc && !o->nranks_given)
				o->nranks = c.nproc;
		}
	}
	if (p->nnodes <= 1) {
		if (p->node_rank > 0) {
			fprintf(stderr, "distrun: --node-rank %d needs --nnodes "
				"of more than %d\n", p->node_rank, p->node_rank);
			return -1;
		}
		p->nnodes = 1;
		return 0;
	}
	if (p->node_rank < 0) {
		fprintf(stderr, "distrun: --nnodes %d needs --node-rank (0 to "
			"%d; 0 on the host of --master-addr)\n", p->nnodes,
			p->nnodes - 1);
		return -1;
	}
	if (p->node_rank >= p->nnodes) {
		fprintf(stderr, "distrun: --node-rank %d is not less than "
			"--nnodes %d\n", p->node_rank, p->nnodes);
		return -1;
	}
	if (!o->master_addr_given && !c.source) {
		fprintf(stderr, "distrun: --nnodes %d needs --master-addr "
			"(node 0's address, the same on every node)\n",
			p->nnodes);
		return -1;
	}
	return 0;
}

/* This launcher's round: DISTRUN_RESTART_COUNT, which only nodes_reexec
 * sets (and which the ranks do not inherit). */
static int restart_round(struct job *job)
{
	const char *s = getenv("DISTRUN_RESTART_COUNT");
	char *end;
	long v;

	job->restarts = 0;
	if (!s)
		return 0;
	v = strtol(s, &end, 10);
	if (!*s || *end || v < 0 || v > job->o->max_restarts) {
		fprintf(stderr, "distrun: DISTRUN_RESTART_COUNT='%s': not a "
			"restart within --max-restarts %d\n", s,
			job->o->max_restarts);
		return -1;
	}
	job->restarts = (int)v;
	unsetenv("DISTRUN_RESTART_COUNT");
	return 0;
}

int nodes_setup(struct job *job)
{
	static char addr[256];
	struct opts *o = job->o;
	struct node_plan p;
	struct node_start st;
	struct rdzv_keep *keep = NULL;

	job->nnodes = 1;
	job->node_rank = 0;
	if (restart_round(job) ||
	    make_plan(job, &p, addr, sizeof(addr), &keep))
		goto fail;
	if (p.nnodes <= 1)
		return 0;
	if (o->max_restarts > 0 && !(o->rdzv_backend &&
				     !strcmp(o->rdzv_backend, "etcd"))) {
		/* Several nodes (here from Slurm's or Kubeflow's variables):
		 * a restart would have to be agreed by every node, which
		 * only etcd's rounds do (nodes_job_restart). */
		fprintf(stderr, "distrun: --max-restarts restarts a job on one "
			"node only; this job has %d nodes\n", p.nnodes);
		goto fail;
	}
	if (o->show && !o->ranks_arg) {
		/* -n may have come from PET_NPROC_PER_NODE. */
		uint8_t *show = realloc(o->show, (size_t)o->nranks);

		if (!show)
			goto fail;
		memset(show, 1, (size_t)o->nranks);
		o->show = show;
	}
	p.master_addr = addr;
	p.nproc = o->nranks;
	if (p.node_rank == 0) {
		/* Rank 0's store: a free port, held as for one node, on
		 * the address the ranks will be given (port.c may listen
		 * there for rank 0). */
		o->master_port = 0;
		o->master_addr = addr;
		if (port_reserve(job))
			goto fail;
		p.rank_port = job->master_port;
	}
	if (nodes_join(&job->nodes, &p, &st))
		goto fail;
	job->nnodes = st.nnodes;
	job->node_rank = st.node_rank;
	job->world_size = st.world_size;
	job->rank_offset = st.rank_offset;
	job->master_port = st.master_port;
	o->master_port = st.master_port;
	o->master_addr = addr;
	snprintf(job->node_secret, sizeof(job->node_secret), "%s",
		 st.secret_hex);
	/* Every node's ranks carry the same run id. */
	snprintf(job->run_id, sizeof(job->run_id), "%.39s", st.run_id);
	job->nodes->keep = keep;
	return 0;
fail:
	rdzv_keep_stop(keep);
	return -1;
}

int nodes_job_pollfds(struct job *job, struct pollfd *pfd, int max)
{
	return nodes_pollfds(job->nodes, pfd, max);
}

bool nodes_job_handle(struct job *job)
{
	struct node_event ev;

	nodes_handle(job->nodes, &ev);
	if (ev.kind == NODE_EV_NONE || job->stopping)
		return false;
	if (ev.rank >= 0)
		fprintf(stderr, "distrun: rank %d on node %d %s; stopping "
			"node %d\n", ev.rank, ev.node, ev.desc, job->node_rank);
	else
		fprintf(stderr, "distrun: %s; stopping node %d\n", ev.desc,
			job->node_rank);
	job->node_stop = true;
	job->node_stop_status = ev.status;
	return true;
}

void nodes_job_stopping(struct job *job)
{
	char desc[160], st[64];
	int status = 1, rank = -1;

	if (!job->nodes || job->node_stop)
		return;
	if (job->first_fail >= 0) {
		const struct rank *rk = &job->ranks[job->first_fail];

		rank = job->rank_offset + job->first_fail;
		status = WIFEXITED(rk->status) ? WEXITSTATUS(rk->status) :
			 128 + WTERMSIG(rk->status);
		snprintf(desc, sizeof(desc), "%s after %.3fs",
			 rank_status_str(rk, st, sizeof(st)),
			 rk->t_end - job->t0);
	} else if (job->timed_out) {
		status = EXIT_TIMEOUT;
		snprintf(desc, sizeof(desc), "node %d timed out after %gs",
			 job->node_rank, job->o->timeout);
	} else if (job->stop_signal) {
		status = 128 + job->stop_signal;
		snprintf(desc, sizeof(desc), "node %d got %s", job->node_rank,
			 signal_name(job->stop_signal));
	} else {
		snprintf(desc, sizeof(desc), "node %d stopped", job->node_rank);
	}
	nodes_fail(job->nodes, rank, status, desc);
}

int nodes_job_restart(struct job *job, int status)
{
	struct nodes *nd = job->nodes;
	const struct opts *o = job->o;
	char what[224];

	if (!status || !nd || !nd->failed || !o->rdzv_backend ||
	    strcmp(o->rdzv_backend, "etcd") ||
	    (nd->fail_kind != FAIL_RANK && nd->fail_kind != FAIL_LOST))
		return 0;
	if (nd->fail_rank >= 0)
		snprintf(what, sizeof(what), "rank %d on node %d %s",
			 nd->fail_rank, nd->fail_node, nd->fail_desc);
	else
		snprintf(what, sizeof(what), "%s", nd->fail_desc);
	if (job->restarts >= o->max_restarts) {
		if (o->max_restarts)
			fprintf(stderr, "distrun: %s; no restarts left "
				"(--max-restarts %d)\n", what, o->max_restarts);
		return 0;
	}
	fprintf(stderr, "distrun: %s; node %d restarts the rendezvous "
		"(restart %d of %d)\n", what, job->node_rank,
		job->restarts + 1, o->max_restarts);
	return job->restarts + 1;
}

void nodes_reexec(char **argv, int round)
{
	char v[16];

	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	/* By its path, so that ps and /proc/PID/comm still say distrun
	 * (the path itself may be gone: then the kernel's link to it). */
	self[n > 0 ? n : 0] = 0;
	if (n <= 0 || (size_t)n >= sizeof(self) - 1 || strstr(self, " (deleted)"))
		snprintf(self, sizeof(self), "/proc/self/exe");
	snprintf(v, sizeof(v), "%d", round);
	fflush(NULL);
	if (!setenv("DISTRUN_RESTART_COUNT", v, 1))
		execv(self, argv);
	fprintf(stderr, "distrun: cannot start again for restart %d: %s\n",
		round, strerror(errno));
}

int nodes_job_finish(struct job *job, int status)
{
	double left = 1e9;

	if (!job->nodes)
		return status;
	if (job->o->timeout > 0)
		left = job->t0 + job->o->timeout + job->o->grace + 10 -
		       now_mono();
	return nodes_finish(job->nodes, status, left > 1 ? left : 1);
}
