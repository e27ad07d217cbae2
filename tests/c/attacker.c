/*
 * attacker.c - what a hostile process tries against a running job, for
 * tests/security.bats.  Each mode prints one line per attempt and exits 0
 * only if every attempt was refused as it must be.
 *
 *   store HOST PORT      an outsider (without the job's secret) tries the
 *                        store: GET the old handshake secret `job` and the
 *                        addresses, SET `addrs`, ADD `rank/1`, in the old
 *                        protocol and after a handshake it cannot finish
 *   transport HOST:PORT  an outsider tries a rank's transport port: the old
 *                        handshake then a forged ABORT, a HELLO then a
 *                        guessed proof, injected p2p data
 *   flood HOST PORT N M  opens N connections that never handshake and
 *                        sends on each up to M MiB of a frame that
 *                        announces 60 MiB (as much as the peer takes);
 *                        holds them until killed
 *   giant                an insider: takes rank 0's place in a 2-rank job
 *                        (the environment distrun gives), proves the key,
 *                        and sends rank 1 a header announcing 2^40 bytes
 *   squat HOST PORT S    another user tries to take MASTER_PORT before
 *                        rank 0 listens: binds it with SO_REUSEADDR and
 *                        listens (refused: the port is held listening);
 *                        if it got it, holds it S seconds
 *   locks FROM TO UID S  another user takes distrun's port lock names for
 *                        ports FROM..TO, the shared one and (UID >= 0) UID's,
 *                        and holds them S seconds (not an attempt that
 *                        can be refused: prints how many it holds)
 *   lateinit DIR         not an attack: a rank that waits for DIR/go
 *                        before its init (the window squat aims at), then
 *                        runs a barrier
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "auth.h"
#include "store.h"
#include "wire.h"
#include "net.h"
#include "rdzv.h"

static int failures;

static int tcp_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int fd;

	if (getaddrinfo(host, port, &hints, &ai)) {
		fprintf(stderr, "attacker: cannot resolve %s\n", host);
		exit(2);
	}
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	/* a rank busy in its own code answers late: never block for ever */
	struct timeval tv = { 60, 0 };
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		fprintf(stderr, "attacker: cannot connect to %s:%s: %s\n", host,
			port, strerror(errno));
		exit(2);
	}
	freeaddrinfo(ai);
	return fd;
}

/* Reads until the peer closes (at most 60 s); the number of bytes it sent
 * first, or -1 if it kept the connection open. */
static long bytes_until_closed(int fd, void *first, size_t cap)
{
	long total = 0;

	for (int i = 0; i < 600; i++) {
		struct pollfd pf = { fd, POLLIN, 0 };
		char b[4096];
		if (poll(&pf, 1, 100) <= 0)
			continue;
		ssize_t n = recv(fd, b, sizeof(b), 0);
		if (n <= 0)
			return total;
		if (first && (size_t)total < cap)
			memcpy((char *)first + total, b,
			       (size_t)n < cap - (size_t)total ? (size_t)n :
			       cap - (size_t)total);
		total += n;
	}
	return -1;
}

static void verdict(int ok, const char *what, long got)
{
	printf("%s: %s (%ld bytes back)\n", ok ? "refused" : "ACCEPTED", what,
	       got);
	if (!ok)
		failures++;
}

/* One old-protocol store request: u32 length, u8 cmd, u16 key length, key,
 * value. */
static size_t old_req(unsigned char *b, int cmd, const char *key,
		      const void *val, size_t vlen)
{
	size_t kl = strlen(key), n = 3 + kl + vlen;

	b[0] = (unsigned char)n;
	b[1] = (unsigned char)(n >> 8);
	b[2] = b[3] = 0;
	b[4] = (unsigned char)cmd;
	b[5] = (unsigned char)kl;
	b[6] = 0;
	memcpy(b + 7, key, kl);
	if (vlen)
		memcpy(b + 7 + kl, val, vlen);
	return 4 + n;
}

static void try_old(const char *host, const char *port, const char *what,
		    const unsigned char *req, size_t n)
{
	unsigned char pad[256] = { 0 };
	int fd = tcp_connect(host, port);

	memcpy(pad, req, n);
	/* padded, so that a server reading a fixed-size handshake has it */
	if (write(fd, pad, n < 64 ? 64 : n) < 0)
		exit(2);
	long got = bytes_until_closed(fd, NULL, 0);
	verdict(got == 0, what, got);
	close(fd);
}

static void mode_store(const char *host, const char *port)
{
	unsigned char b[256], chal[DRI_HS_CHAL], proof[DRI_HS_PROOF] = { 0 };
	uint8_t guess[32];
	int64_t one = 1;
	dri_hs hs;
	dri_store *st;
	int fd, rank, srv;

	try_old(host, port, "store GET job (old protocol)", b,
		old_req(b, 2, "job", NULL, 0));
	try_old(host, port, "store GET addrs (old protocol)", b,
		old_req(b, 2, "addrs", NULL, 0));
	try_old(host, port, "store SET addrs (old protocol)", b,
		old_req(b, 1, "addrs", "127.0.0.1:1\n127.0.0.1:1\n", 24));
	try_old(host, port, "store ADD rank/1 (old protocol)", b,
		old_req(b, 3, "rank/1", &one, 8));
	/* A HELLO is answered with the challenge, nothing more; a guessed
	 * proof then gets the connection closed without the ack. */
	fd = tcp_connect(host, port);
	if (dri_hs_hello(&hs, DRI_HS_STORE, 1, 0) ||
	    write(fd, hs.hello, DRI_HS_HELLO) != DRI_HS_HELLO)
		exit(2);
	size_t got = 0;
	while (got < sizeof(chal)) {
		ssize_t n = recv(fd, chal + got, sizeof(chal) - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	verdict(got == sizeof(chal), "store HELLO gets only a challenge",
		(long)got);
	dri_random(guess, sizeof(guess));
	if (dri_hs_answer(&hs, guess, chal, &srv, proof) == DR_OK)
		verdict(0, "the store's challenge verified with a guessed key", 0);
	b[0] = 0;
	size_t n = old_req(b, 1, "addrs", "127.0.0.1:1\n", 12);
	unsigned char msg[DRI_HS_PROOF + 256];
	memcpy(msg, proof, DRI_HS_PROOF);
	memcpy(msg + DRI_HS_PROOF, b, n);
	if (write(fd, msg, DRI_HS_PROOF + n) < 0)
		exit(2);
	long back = bytes_until_closed(fd, NULL, 0);
	verdict(back == 0, "store guessed proof, then SET addrs", back);
	close(fd);
	/* The library's own client with a guessed key. */
	dr_err e = dri_store_connect(host, atoi(port), guess, 1, 10000, &st);
	verdict(e == DR_EAUTH, "store client with a guessed key", 0);
	if (!e)
		dri_store_close(st);
	(void)rank;
}

static void mode_transport(const char *addr)
{
	char host[128], port[16];
	const char *colon = strrchr(addr, ':');
	unsigned char old_hs[32] = { 'D', 'R', 'H', 'S', 1, 0 };
	unsigned char frame[DRI_WIRE_HDR + 64], chal[DRI_HS_CHAL];
	const char *text = "forged: rank 0 says stop";
	dri_wire_hdr h;
	dri_hs hs;
	int fd, size = atoi(getenv("ATTACK_WORLD") ? getenv("ATTACK_WORLD") : "2");

	if (!colon)
		exit(2);
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	if (host[0] == '[') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	old_hs[12] = (unsigned char)size;
	memset(&h, 0, sizeof(h));
	h.magic = DRI_WIRE_MAGIC;
	h.version = DRI_WIRE_VERSION;
	h.kind = DRI_WIRE_ABORT;
	h.err = DR_EMISMATCH;
	h.src = 0;
	h.len = strlen(text);
	dri_wire_encode(&h, frame);
	memcpy(frame + DRI_WIRE_HDR, text, h.len);

	/* the old handshake (rank 0, a zero job id), then a forged abort */
	fd = tcp_connect(host, port);
	unsigned char buf[32 + sizeof(frame)];
	memcpy(buf, old_hs, 32);
	memcpy(buf + 32, frame, sizeof(frame));
	if (write(fd, buf, 32 + DRI_WIRE_HDR + h.len) < 0)
		exit(2);
	long got = bytes_until_closed(fd, NULL, 0);
	verdict(got == 0, "transport old handshake then ABORT", got);
	close(fd);

	/* a HELLO as the last rank (the ones attacked wait for it), a
	 * guessed proof, an abort and p2p data */
	fd = tcp_connect(host, port);
	if (dri_hs_hello(&hs, DRI_HS_TRANSPORT, size - 1, size) ||
	    write(fd, hs.hello, DRI_HS_HELLO) != DRI_HS_HELLO)
		exit(2);
	size_t n = 0;
	while (n < sizeof(chal)) {
		ssize_t k = recv(fd, chal + n, sizeof(chal) - n, 0);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	verdict(n == sizeof(chal), "transport HELLO gets only a challenge",
		(long)n);
	unsigned char msg[DRI_HS_PROOF + 2 * sizeof(frame)];
	dri_random(msg, DRI_HS_PROOF);
	memcpy(msg + DRI_HS_PROOF, frame, DRI_WIRE_HDR + h.len);
	size_t len = DRI_HS_PROOF + DRI_WIRE_HDR + h.len;
	int32_t evil[4] = { 666, 666, 666, 666 };
	memset(&h, 0, sizeof(h));
	h.magic = DRI_WIRE_MAGIC;
	h.version = DRI_WIRE_VERSION;
	h.kind = DRI_WIRE_DATA;
	h.id.coll = DRI_P2P;
	h.id.count = 4;
	h.id.dtype = DR_INT32;
	h.id.op = -1;
	h.id.root = -1;
	h.id.tag = 5;
	h.len = sizeof(evil);
	h.src = 0;
	dri_wire_encode(&h, msg + len);
	memcpy(msg + len + DRI_WIRE_HDR, evil, sizeof(evil));
	len += DRI_WIRE_HDR + sizeof(evil);
	if (write(fd, msg, len) < 0)
		exit(2);
	got = bytes_until_closed(fd, NULL, 0);
	verdict(got == 0, "transport guessed proof, ABORT and p2p data", got);
	close(fd);
}

static void mode_flood(const char *host, const char *port, int n, int mib)
{
	static unsigned char junk[1 << 20];
	struct timeval tv = { 2, 0 };
	long sent = 0;
	int opened = 0;

	/* an old-protocol SET announcing 60 MiB */
	junk[0] = 0, junk[1] = 0, junk[2] = 0xc0, junk[3] = 0x03;
	junk[4] = 1;
	for (int i = 0; i < n; i++) {
		int fd = tcp_connect(host, port);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		/* as much as the peer takes, up to mib MiB */
		for (int k = 0; k < mib; k++) {
			ssize_t m = send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
			if (m <= 0)
				break;
			sent += m;
		}
		opened++;
	}
	printf("flood: %d connections open, %ld MiB sent\n", opened, sent >> 20);
	fflush(stdout);
	/* held until killed */
	for (;;)
		pause();
}

/* Takes rank 0's place in the job with the secret distrun gave (hosts
 * the store, as rank 0 does), then sends rank 1, which is in its init
 * barrier, a point-to-point header announcing 2^40 bytes. */
static void mode_giant(void)
{
	const char *host = getenv("MASTER_ADDR");
	int port = atoi(getenv("MASTER_PORT")), size = atoi(getenv("WORLD_SIZE"));
	char ident[512], me[64], settings[2048], *all;
	uint8_t skey[32], tkey[32], job[20] = { 0 };
	unsigned char chal[DRI_HS_CHAL], proof[DRI_HS_PROOF], ack, hb[DRI_WIRE_HDR];
	void *v;
	size_t len;
	dri_store_server *server;
	dri_store *st;
	dri_wire_hdr h;
	dri_hs hs;
	int lfd[DRI_NET_MAXFD], nl, srv;

	dri_rdzv_plan plan;

	if (dri_rdzv_plan_make("env://", -1, -1, &plan)) {
		fprintf(stderr, "giant: %s\n", dr_last_error());
		exit(2);
	}
	dri_rdzv_identity(&plan, ident, sizeof(ident));
	if (dri_auth_store_key(ident, skey) ||
	    dri_store_server_start(host, port, skey, &server) ||
	    dri_store_connect(host, port, skey, 0, 30000, &st) ||
	    dri_random(job, 16)) {
		fprintf(stderr, "giant: %s\n", dr_last_error());
		exit(2);
	}
	memcpy(job + 16, &size, 4);
	dri_auth_transport_key(skey, job, 16, tkey);
	/* a listener nobody serves: rank 1's own connection waits there */
	if (dri_net_listen("127.0.0.1", 0, lfd, &nl))
		exit(2);
	snprintf(me, sizeof(me), "127.0.0.1:%d", dri_net_port(lfd[0]));
	if (dri_rdzv_settings(settings, sizeof(settings)) ||
	    dri_store_set(st, "job", job, sizeof(job)) ||
	    dri_store_set(st, "settings", settings, strlen(settings)) ||
	    dri_store_set(st, "addr/0", me, strlen(me)) ||
	    dri_store_get(st, "addr/1", &v, &len, 30000))
		exit(2);
	all = malloc(strlen(me) + len + 3);
	sprintf(all, "%s\n%s\n", me, (char *)v);
	if (dri_store_set(st, "addrs", all, strlen(all)))
		exit(2);
	char *colon = strrchr(v, ':');
	*colon = 0;
	int fd = tcp_connect(v, colon + 1);
	if (dri_hs_hello(&hs, DRI_HS_TRANSPORT, 0, size) ||
	    write(fd, hs.hello, DRI_HS_HELLO) != DRI_HS_HELLO ||
	    recv(fd, chal, sizeof(chal), MSG_WAITALL) != sizeof(chal) ||
	    dri_hs_answer(&hs, tkey, chal, &srv, proof) ||
	    write(fd, proof, sizeof(proof)) != sizeof(proof) ||
	    recv(fd, &ack, 1, MSG_WAITALL) != 1 || ack != 1) {
		fprintf(stderr, "giant: handshake with rank 1 failed\n");
		exit(2);
	}
	memset(&h, 0, sizeof(h));
	h.magic = DRI_WIRE_MAGIC;
	h.version = DRI_WIRE_VERSION;
	h.kind = DRI_WIRE_DATA;
	h.id.coll = DRI_P2P;
	h.id.count = 4;
	h.id.dtype = DR_INT32;
	h.id.op = h.id.root = -1;
	h.id.tag = 99;
	h.len = (uint64_t)1 << 40;
	h.src = 0;
	dri_wire_encode(&h, hb);
	if (write(fd, hb, sizeof(hb)) != sizeof(hb))
		exit(2);
	long got = bytes_until_closed(fd, NULL, 0);
	printf("giant: rank 1 %s the connection\n", got >= 0 ? "closed" : "kept");
	free(v);
	free(all);
	dri_store_close(st);
	dri_store_server_stop(server);
	exit(got >= 0 ? 0 : 1);
}

static void mode_squat(const char *host, int port, int secs)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	sa.sin_port = htons((uint16_t)port);
	if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		exit(2);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(fd, 16)) {
		printf("refused: squat %s:%d: %s\n", host, port,
		       strerror(errno));
		exit(0);
	}
	printf("squat: listening on %s:%d\n", host, port);
	sleep((unsigned)secs);
	exit(1);
}

static void mode_locks(int from, int to, long uid, int secs)
{
	int held = 0;

	for (int port = from; port <= to; port++)
		for (int k = 0; k < (uid >= 0 ? 2 : 1); k++) {
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			int n = k ? snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
					     "distrun/port/%d/%ld", port, uid) :
				    snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
					     "distrun/port/%d", port);
			int fd = socket(AF_UNIX, SOCK_STREAM, 0);

			if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa,
					     (socklen_t)(offsetof(struct sockaddr_un,
							sun_path) + 1 + n)) &&
			    !listen(fd, 1))
				held++;
			else if (fd >= 0)
				close(fd);
		}
	printf("locks: %d held\n", held);
	sleep((unsigned)secs);
	exit(0);
}

static void mode_lateinit(const char *dir)
{
	char go[4096];
	struct stat st;
	dr_err e;

	snprintf(go, sizeof(go), "%s/go", dir);
	for (int i = 0; i < 1200 && stat(go, &st); i++)
		usleep(50000);
	e = dr_init_process_group(NULL, NULL);
	if (!e)
		e = dr_barrier(NULL, NULL, NULL, 0);
	printf("lateinit: rank %s: %s%s%s\n", getenv("RANK"), dr_err_name(e),
	       e ? ": " : "", e ? dr_last_error() : "");
	if (!e)
		dr_destroy_process_group();
	exit(e ? 3 : 0);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "store"))
		mode_store(argv[2], argv[3]);
	else if (argc == 3 && !strcmp(argv[1], "transport"))
		mode_transport(argv[2]);
	else if (argc == 6 && !strcmp(argv[1], "flood"))
		mode_flood(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	else if (argc == 2 && !strcmp(argv[1], "giant"))
		mode_giant();
	else if (argc == 5 && !strcmp(argv[1], "squat"))
		mode_squat(argv[2], atoi(argv[3]), atoi(argv[4]));
	else if (argc == 6 && !strcmp(argv[1], "locks"))
		mode_locks(atoi(argv[2]), atoi(argv[3]), atol(argv[4]),
			   atoi(argv[5]));
	else if (argc == 3 && !strcmp(argv[1], "lateinit"))
		mode_lateinit(argv[2]);
	else {
		fprintf(stderr, "usage: attacker store HOST PORT | transport "
			"HOST:PORT | flood HOST PORT N MIB | giant | squat HOST PORT S "
			"| locks FROM TO UID S | lateinit DIR\n");
		return 2;
	}
	return failures ? 1 : 0;
}
