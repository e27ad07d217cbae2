/*
 * nodes.c - the launchers of a multi-node job, connected to node 0's.
 *
 * nodes.h says what happens; this file owns the sockets (nodes_wire.c
 * reads and writes their frames; nodes_job.c is the launcher's side).
 * The hub runs a small poll loop while the nodes join: every connection
 * must finish the handshake within DRI_HS_MS and send its JOIN before the
 * join deadline, at most PENDING_MAX unauthenticated connections are held
 * at once (when full, the oldest still waiting for its HELLO goes, told
 * NODES_BUSY, so that a flood of idle connections cannot keep a node out;
 * the node tries again until its join deadline), and a connection that
 * breaks a rule is closed without an answer.  After the join the listener
 * is closed: a node cannot join a job that has started.
 * Frames are small and rare (join, start, fail, end, stop, bye), so they
 * are read whole with a short deadline once poll says one is coming.
 */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "contract.h"
#include "nodes_int.h"
#include "rendezvous.h"

#define PENDING_MAX 64

enum { C_HELLO, C_PROOF, C_JOIN, C_UP, C_ENDED, C_CLOSED };

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

/* ---------------------------------------------------------- the hub */

int nodes_read_join(int fd, int node, double deadline, int *nproc)
{
	json_t *j = nodes_recv_frame(fd, deadline);
	int rc = -1;

	*nproc = j ? nodes_jint(j, "nproc", 0) : 0;
	if (j && nodes_jint(j, "node", -1) == node && *nproc >= 1 &&
	    *nproc <= NODES_NPROC_MAX && !strcmp(nodes_jstr(j, "t"), "join"))
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
			nodes_send_frame(c->fd, json_pack("{s:s,s:s}", "t",
				"error", "error",
				"that node rank has joined already"));
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
		    nodes_io_full(c->fd, c->hs.chal, DRI_HS_CHAL, c->deadline,
				  true)) {
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
	double join_dl = nodes_mono() + p->timeout;
	int lfd = nodes_hub_listen(p->master_addr, p->port);
	int joined = 1;

	if (lfd < 0)
		return -1;
	for (int i = 0; i < PENDING_MAX; i++)
		pend[i] = (struct conn){ .fd = -1, .state = C_CLOSED };
	while (joined < nd->nnodes) {
		struct pollfd pfd[PENDING_MAX + 1];
		int idx[PENDING_MAX + 1], np = 0, rc;
		double now = nodes_mono(), next = join_dl;

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
		rc = poll(pfd, np, nodes_ms_left(next));
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
					.deadline = nodes_mono() +
						    DRI_HS_MS / 1000.0 };
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
	nodes_hex(nonce, sizeof(nonce), nonce_hex);
	nd->nproc[0] = p->nproc;
	for (int k = 0; k < nd->nnodes; k++)
		offset += nd->nproc[k];
	st->world_size = offset;
	offset = 0;
	for (int k = 0; k < nd->nnodes; k++) {
		if (k > 0 && nodes_send_frame(nd->node[k].fd, json_pack(
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
	nodes_derive_secret(nd->key, nonce, st->secret_hex);
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
	while (nodes_mono() < dl) {
		fd = nodes_try_connect(p->master_addr, p->port, dl);
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
	    nodes_io_full(fd, hs.hello, DRI_HS_HELLO, dl, true) ||
	    nodes_io_full(fd, chal, DRI_HS_CHAL,
			  nodes_mono() + DRI_HS_MS / 1000.0, false)) {
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
	if (nodes_io_full(fd, proof, DRI_HS_PROOF, dl, true)) {
		close(fd);
		fprintf(stderr, "distrun: lost node 0 while joining\n");
		return -1;
	}
	return fd;
}

static int spoke_join(struct nodes *nd, const struct node_plan *p,
		      struct node_start *st)
{
	double dl = nodes_mono() + p->timeout;
	int fd, busy = 0;

	/* Dropped from a full queue: again, until the join deadline. */
	while ((fd = spoke_handshake(nd, p, dl)) == -2) {
		busy++;
		if (nodes_mono() >= dl) {
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
	if (nodes_send_frame(fd, json_pack("{s:s,s:i,s:i}", "t", "join", "node",
				     nd->node_rank, "nproc", p->nproc))) {
		fprintf(stderr, "distrun: lost node 0 while joining\n");
		return -1;
	}
	return nodes_read_start(nd, p->nproc, dl, st);
}

int nodes_read_start(struct nodes *nd, int nproc, double deadline,
		     struct node_start *st)
{
	json_t *j = nodes_recv_frame(nd->hub_fd, deadline);
	uint8_t nonce[16];
	const char *run_id;

	if (!j || strcmp(nodes_jstr(j, "t"), "start")) {
		fprintf(stderr, "distrun: node 0 %s\n", !j ? "did not start the "
			"job in time" : !strcmp(nodes_jstr(j, "t"), "error") ?
			nodes_jstr(j, "error") : "sent something unexpected");
		json_decref(j);
		return -1;
	}
	st->world_size = nodes_jint(j, "world", -1);
	st->rank_offset = nodes_jint(j, "offset", -1);
	st->master_port = nodes_jint(j, "master_port", -1);
	run_id = nodes_jstr(j, "run_id");
	if (st->world_size < 1 || st->rank_offset < 0 ||
	    st->rank_offset > st->world_size - nproc ||
	    st->master_port < 1 || st->master_port > 65535 ||
	    strlen(run_id) >= sizeof(st->run_id) ||
	    nodes_unhex(nodes_jstr(j, "nonce"), nonce, sizeof(nonce))) {
		fprintf(stderr, "distrun: node 0 sent a bad start message\n");
		json_decref(j);
		return -1;
	}
	snprintf(st->run_id, sizeof(st->run_id), "%s", run_id);
	json_decref(j);
	nodes_derive_secret(nd->key, nonce, st->secret_hex);
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
	if (nodes_key_for(p, nd->key, st->run_id, sizeof(st->run_id)))
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
			nodes_send_frame(nd->node[k].fd, json_pack(
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
	json_t *j = nodes_recv_frame(c->fd, nodes_mono() + FRAME_MS / 1000.0);
	const char *t = j ? nodes_jstr(j, "t") : "";

	/* A frame that breaks the protocol counts as the node lost. */
	if (!strcmp(t, "fail") && nodes_jstatus(j) >= 0) {
		int rank = nodes_jint(j, "rank", -1);

		if (record_failure(nd, k, rank, nodes_jstatus(j),
				   nodes_jstr(j, "desc"),
				   rank >= 0 ? FAIL_RANK : FAIL_OTHER)) {
			hub_broadcast_stop(nd, k);
			event_from_failure(nd, ev, NODE_EV_STOP);
		}
	} else if (!strcmp(t, "end") && nodes_jstatus(j) >= 0) {
		int st = nodes_jstatus(j);

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
	json_t *j = nodes_recv_frame(nd->hub_fd,
				     nodes_mono() + FRAME_MS / 1000.0);
	const char *t = j ? nodes_jstr(j, "t") : "";

	int node = j ? nodes_jint(j, "node", -1) : -1;

	/* A frame that breaks the protocol counts as the hub lost. */
	if (!strcmp(t, "stop") && nodes_jstatus(j) >= 0 && node >= 0 &&
	    node < nd->nnodes) {
		if (record_failure(nd, node, nodes_jint(j, "rank", -1),
				   nodes_jstatus(j), nodes_jstr(j, "desc"),
				   nodes_jint(j, "kind", FAIL_OTHER)))
			event_from_failure(nd, ev, NODE_EV_STOP);
	} else if (!strcmp(t, "bye") && nodes_jstatus(j) >= 0) {
		nd->got_bye = true;
		nd->final_status = nodes_jstatus(j);
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
		nodes_send_frame(nd->hub_fd, json_pack("{s:s,s:i,s:i,s:s}", "t",
						 "fail", "rank", rank, "status",
						 status, "desc", desc));
}

int nodes_finish(struct nodes *nd, int status, double timeout)
{
	double dl = nodes_mono() + timeout;

	if (!nd)
		return status;
	if (!nd->hub) {
		/* Our end, then the job's status from the hub's bye. */
		if (nd->hub_fd >= 0)
			nodes_send_frame(nd->hub_fd, json_pack("{s:s,s:i}",
					 "t", "end", "status", status));
		while (nd->hub_fd >= 0 && !nd->got_bye && nodes_mono() < dl) {
			struct node_event ev;
			struct pollfd pfd = { nd->hub_fd, POLLIN, 0 };

			if (poll(&pfd, 1, nodes_ms_left(dl)) == 1)
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
		if (!n || nodes_mono() >= dl)
			break;
		if (poll(pfd, n, nodes_ms_left(dl)) > 0) {
			struct node_event ev;

			nodes_handle(nd, &ev);
		}
	}
	status = nd->failed ? nd->fail_status : 0;
	for (int k = 1; k < nd->nnodes; k++)
		if (nd->node[k].fd >= 0)
			nodes_send_frame(nd->node[k].fd, json_pack(
				"{s:s,s:i}", "t", "bye", "status", status));
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
