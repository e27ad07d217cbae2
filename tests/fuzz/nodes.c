/*
 * nodes.c - fuzzes the frames the launchers of a multi-node job send each
 * other once the handshake has proved the job's key (cmd/nodes/nodes.c): a
 * 4-byte big-endian length and a JSON object, "join" (node to hub),
 * "start" (hub to node), then "fail", "end" (node to hub) and "stop",
 * "bye" (hub to node).  A peer that knows the key is still a program that
 * can be wrong: what it sends must be refused or read exactly.
 *
 * The readers take a socket; the harness hands them one end of a
 * socketpair per peer, writes the input to the other ends and shuts them
 * for writing, so that every short frame ends in EOF at once.
 *
 * Input: a byte whose low 2 bits pick the reader and the next 2 bits the
 * node count (2..5), then chunks for the peers: a byte whose low 3 bits
 * pick the peer (the hub's node 1..n-1; one peer otherwise) and whose bit
 * 7 says "frame this" (the harness writes the length first), two bytes of
 * length, and the bytes.
 *   0  the hub during the job: nodes_handle until every node's connection
 *      is closed, then nodes_finish;
 *   1  node 1 during the job, the same;
 *   2  node 1 reading the hub's start (nodes_read_start);
 *   3  the hub reading node 1's join (nodes_read_join).
 * Properties: at most one event (the first failure stops the job), with
 * a status distrun can exit with (1..255: never 256, which exits 0) and
 * the node it came from; nodes_finish's status is 0..255, the event's if
 * there was one; the readers end on every input.  A start read is the
 * frame's numbers exactly (no int truncation), a world that holds this
 * node's ranks, a port in 1..65535, the run id whole, 32 hex digits of
 * nonce; a join read is node 1's, with the frame's nproc in range.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nodes.h"
#include "fuzz.h"

#define PEERS 4
#define STEPS_MAX 10000

/* A deadline the readers never reach on these inputs: every peer's bytes
 * end in EOF. */
static double soon(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9 + 10;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);

		FUZZ_CHECK(k > 0);
		p += k, n -= (size_t)k;
	}
}

/* The first frame written to the peer, as the model reads it. */
struct first {
	uint8_t *p;
	size_t len, cap;
};

static json_t *first_frame(const struct first *f)
{
	size_t n;
	json_t *j;

	if (f->len < 4)
		return NULL;
	n = (size_t)f->p[0] << 24 | (size_t)f->p[1] << 16 |
	    (size_t)f->p[2] << 8 | f->p[3];
	if (n == 0 || n > NODES_FRAME_MAX || f->len - 4 < n)
		return NULL;
	j = json_loadb((const char *)f->p + 4, n, 0, NULL);
	if (!json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

static json_int_t member(json_t *j, const char *k)
{
	return json_integer_value(json_object_get(j, k));
}

static void check_start(const struct first *f, int nproc,
			const struct node_start *st, int rc)
{
	json_t *j = first_frame(f);
	const char *nonce, *run_id;

	if (rc) {
		FUZZ_CHECK(rc == -1);
		json_decref(j);
		return;
	}
	FUZZ_CHECK(j && !strcmp(json_string_value(json_object_get(j, "t")),
				"start"));
	FUZZ_CHECK(st->world_size == member(j, "world") &&
		   st->rank_offset == member(j, "offset") &&
		   st->master_port == member(j, "master_port"));
	FUZZ_CHECK(st->world_size >= 1 && st->rank_offset >= 0 &&
		   (long long)st->rank_offset + nproc <= st->world_size);
	FUZZ_CHECK(st->master_port >= 1 && st->master_port <= 65535);
	run_id = json_string_value(json_object_get(j, "run_id"));
	FUZZ_CHECK(!strcmp(st->run_id, run_id ? run_id : ""));
	nonce = json_string_value(json_object_get(j, "nonce"));
	FUZZ_CHECK(nonce && strlen(nonce) == 32 &&
		   strspn(nonce, "0123456789abcdef") == 32);
	FUZZ_CHECK(strlen(st->secret_hex) == 64 &&
		   strspn(st->secret_hex, "0123456789abcdef") == 64);
	json_decref(j);
}

static void check_join(const struct first *f, int nproc, int rc)
{
	json_t *j = first_frame(f);

	if (!rc) {
		FUZZ_CHECK(j && !strcmp(json_string_value(json_object_get(
						j, "t")), "join"));
		FUZZ_CHECK(member(j, "node") == 1 && json_is_integer(
				   json_object_get(j, "node")));
		FUZZ_CHECK(nproc == member(j, "nproc") && nproc >= 1 &&
			   nproc <= NODES_NPROC_MAX);
	}
	json_decref(j);
}

/* The job's frames: nodes_handle until nothing is left to read. */
static void run_job(struct nodes *nd, int nnodes, int hub)
{
	struct node_event ev, first = { .kind = NODE_EV_NONE };
	struct pollfd pfd[PEERS + 1];
	int steps = 0, status;

	while (nodes_pollfds(nd, pfd, PEERS + 1) > 0) {
		FUZZ_CHECK(++steps < STEPS_MAX);
		nodes_handle(nd, &ev);
		if (ev.kind == NODE_EV_NONE)
			continue;
		FUZZ_CHECK(ev.kind == NODE_EV_STOP || ev.kind == NODE_EV_LOST);
		FUZZ_CHECK(first.kind == NODE_EV_NONE);
		FUZZ_CHECK(ev.status >= 1 && ev.status <= 255);
		FUZZ_CHECK(ev.node >= 0 && ev.node < nnodes);
		FUZZ_CHECK(!hub || ev.node >= 1);
		FUZZ_CHECK(memchr(ev.desc, 0, sizeof(ev.desc)));
		first = ev;
	}
	status = nodes_finish(nd, 0, 0);
	FUZZ_CHECK(status >= 0 && status <= 255);
	if (hub)
		FUZZ_CHECK(status == (first.kind ? first.status : 0));
	else if (first.kind)
		FUZZ_CHECK(status != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int mode, nnodes, ours[PEERS + 1], theirs[PEERS + 1], npeers, rc;
	struct first first = { 0 };
	struct nodes *nd;

	if (size < 1)
		return 0;
	mode = data[0] & 3;
	nnodes = 2 + (data[0] >> 2 & 3);
	npeers = mode == 0 ? nnodes - 1 : 1;
	for (int k = 0; k <= PEERS; k++)
		ours[k] = theirs[k] = -1;
	for (int k = 1; k <= npeers; k++) {
		int sv[2];

		FUZZ_CHECK(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				       sv));
		ours[k] = sv[0];
		theirs[k] = sv[1];
	}
	data++, size--;
	while (size >= 3) {
		int peer = 1 + (data[0] & 7) % npeers;
		bool framed = data[0] & 0x80;
		size_t n = (size_t)(data[1] | data[2] << 8);
		uint8_t len[4];

		data += 3, size -= 3;
		if (n > size)
			n = size;
		if (framed) {
			len[0] = (uint8_t)(n >> 24), len[1] = (uint8_t)(n >> 16);
			len[2] = (uint8_t)(n >> 8), len[3] = (uint8_t)n;
			write_all(theirs[peer], len, 4);
		}
		write_all(theirs[peer], data, n);
		/* What peer 1 sent, for the model of the readers. */
		if (peer == 1) {
			size_t add = n + (framed ? 4 : 0);

			first.p = realloc(first.p, first.len + add + 1);
			FUZZ_CHECK(first.p);
			if (framed)
				memcpy(first.p + first.len, len, 4);
			memcpy(first.p + first.len + (framed ? 4 : 0), data, n);
			first.len += add;
		}
		data += n, size -= n;
	}
	for (int k = 1; k <= npeers; k++)
		shutdown(theirs[k], SHUT_WR);

	if (mode == 0 || mode == 3) {
		nd = nodes_attach(nnodes, 0, ours);
	} else {
		int fds[1] = { ours[1] };

		nd = nodes_attach(nnodes, 1, fds);
	}
	FUZZ_CHECK(nd);
	if (mode <= 1) {
		run_job(nd, nnodes, mode == 0);
	} else if (mode == 2) {
		struct node_start st;
		int nproc = 1 + (nnodes - 2) * 3;

		memset(&st, 0, sizeof(st));
		rc = nodes_read_start(nd, nproc, soon(), &st);
		check_start(&first, nproc, &st, rc);
	} else {
		int nproc = -7;

		rc = nodes_read_join(ours[1], 1, soon(), &nproc);
		check_join(&first, nproc, rc);
	}
	nodes_release(nd); /* closes ours */
	for (int k = 1; k <= npeers; k++)
		close(theirs[k]);
	free(first.p);
	return 0;
}
