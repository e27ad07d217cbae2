/*
 * test_store.c - the rendezvous store on its own: set/get/add, a GET that
 * waits for a later SET, timeouts that name the key, a server that goes
 * away, a client with nothing to connect to; and what keeps strangers out
 * (the key, a request without the handshake, idle connections, EMFILE)
 * and a late reply to a GET that timed out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "store.h"
#include "runner.h"

static dri_store_server *srv;
static int port;
static const uint8_t KEY[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };

static int start(void)
{
	CHECK(dri_store_server_start("127.0.0.1", 0, KEY, &srv) == DR_OK);
	port = dri_store_server_port(srv);
	CHECK(port > 0);
	return 0;
}

static int test_set_get_add(void)
{
	dri_store *c;
	void *v;
	size_t n;
	int64_t x;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	CHECK(dri_store_set(c, "addr/0", "10.0.0.1:5", 10) == DR_OK);
	CHECK(dri_store_get(c, "addr/0", &v, &n, 1000) == DR_OK);
	CHECK(n == 10 && !memcmp(v, "10.0.0.1:5", 10));
	CHECK(((char *)v)[10] == 0); /* NUL-terminated for convenience */
	free(v);
	/* binary values, overwritten */
	CHECK(dri_store_set(c, "bin", "a\0b", 3) == DR_OK);
	CHECK(dri_store_set(c, "bin", "\0\0\0\0", 4) == DR_OK);
	CHECK(dri_store_get(c, "bin", &v, &n, 1000) == DR_OK);
	CHECK(n == 4 && !memcmp(v, "\0\0\0\0", 4));
	free(v);
	CHECK(dri_store_add(c, "count", 1, &x) == DR_OK && x == 1);
	CHECK(dri_store_add(c, "count", 41, &x) == DR_OK && x == 42);
	CHECK(dri_store_add(c, "count", -2, NULL) == DR_OK);
	CHECK(dri_store_add(c, "count", 0, &x) == DR_OK && x == 40);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static void *later_set(void *arg)
{
	dri_store *c;

	(void)arg;
	if (dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c))
		return NULL;
	/* The getter is parked on the server by now or soon: either way
	 * it must get the value. */
	dri_store_set(c, "late", "here", 4);
	dri_store_close(c);
	return NULL;
}

static int test_get_waits_for_set(void)
{
	dri_store *c;
	pthread_t t;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	CHECK(pthread_create(&t, NULL, later_set, NULL) == 0);
	CHECK(dri_store_get(c, "late", &v, &n, 20000) == DR_OK);
	CHECK(n == 4 && !memcmp(v, "here", 4));
	free(v);
	pthread_join(t, NULL);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static int test_get_times_out_naming_key(void)
{
	dri_store *c;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	CHECK(dri_store_get(c, "addr/7", &v, &n, 200) == DR_ETIMEDOUT);
	CHECKF(strstr(dr_last_error(), "'addr/7'"), "%s", dr_last_error());
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static int test_server_gone_is_an_error(void)
{
	dri_store *c;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	dri_store_server_stop(srv);
	dr_err e = dri_store_get(c, "x", &v, &n, 5000);
	CHECKF(e == DR_ECONN, "%s: %s", dr_err_name(e), dr_last_error());
	CHECK(strstr(dr_last_error(), "'x'"));
	dri_store_close(c);
	return 0;
}

static int test_connect_retries_then_times_out(void)
{
	dri_store *c;
	int p;

	CHECK(start() == 0);
	p = port;
	dri_store_server_stop(srv); /* nothing listens there now */
	dr_err e = dri_store_connect("127.0.0.1", p, KEY, 0, 300, &c);
	CHECK(e == DR_ETIMEDOUT);
	CHECKF(strstr(dr_last_error(), "cannot reach the store at 127.0.0.1"),
	       "%s", dr_last_error());
	return 0;
}

static int test_port_taken(void)
{
	dri_store_server *other;

	CHECK(start() == 0);
	CHECK(dri_store_server_start("127.0.0.1", port, KEY, &other) == DR_ECONN);
	CHECK(strstr(dr_last_error(), "cannot host the store"));
	dri_store_server_stop(srv);
	return 0;
}

/* A plain TCP connection to the store (no handshake); -1 on failure. */
static int raw_connect(int p)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	a.sin_port = htons((uint16_t)p);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int test_wrong_key_is_refused(void)
{
	uint8_t other[32] = { 9, 9, 9 };
	dri_store *c;

	CHECK(start() == 0);
	dr_err e = dri_store_connect("127.0.0.1", port, other, 1, 5000, &c);
	CHECKF(e == DR_EAUTH, "%s: %s", dr_err_name(e), dr_last_error());
	CHECKF(strstr(dr_last_error(), "does not have this job's key"), "%s",
	       dr_last_error());
	dri_store_server_stop(srv);
	return 0;
}

static int test_unauthenticated_request_gets_nothing(void)
{
	/* A request of the old, unauthenticated protocol, padded to a
	 * handshake's length: GET "job". */
	unsigned char req[DRI_HS_HELLO] = { 6, 0, 0, 0, 2, 3, 0, 'j', 'o', 'b' };
	dri_store *c;
	char b[256];
	int fd;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	CHECK(dri_store_set(c, "job", "secret-ish", 10) == DR_OK);
	fd = raw_connect(port);
	CHECK(fd >= 0);
	CHECK(send(fd, req, sizeof(req), 0) == (ssize_t)sizeof(req));
	/* closed without a byte of answer */
	CHECK(recv(fd, b, sizeof(b), 0) <= 0);
	close(fd);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static int test_stale_reply_is_not_the_next_answer(void)
{
	dri_store *c, *d;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 1, 5000, &d) == DR_OK);
	CHECK(dri_store_get(c, "late", &v, &n, 100) == DR_ETIMEDOUT);
	/* the parked GET is answered now, after its caller gave up */
	CHECK(dri_store_set(d, "late", "old", 3) == DR_OK);
	CHECK(dri_store_set(d, "next", "new", 3) == DR_OK);
	CHECK(dri_store_get(c, "next", &v, &n, 5000) == DR_OK);
	CHECKF(n == 3 && !memcmp(v, "new", 3), "got '%.*s'", (int)n, (char *)v);
	free(v);
	dri_store_close(c);
	dri_store_close(d);
	dri_store_server_stop(srv);
	return 0;
}

static int test_idle_connections_do_not_lock_out_ranks(void)
{
	int fds[300], nfd = 0;
	dri_store *c;
	void *v;
	size_t n;

	CHECK(start() == 0);
	/* More idle, never-handshaken connections than the store keeps:
	 * the oldest are dropped, a real client still gets in. */
	for (; nfd < 300; nfd++)
		CHECK((fds[nfd] = raw_connect(port)) >= 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 20000, &c) == DR_OK);
	CHECK(dri_store_set(c, "k", "v", 1) == DR_OK);
	CHECK(dri_store_get(c, "k", &v, &n, 5000) == DR_OK && n == 1);
	free(v);
	for (int i = 0; i < nfd; i++)
		close(fds[i]);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static int test_out_of_fds_then_served(void)
{
	struct rlimit rl = { 64, 64 };
	int fds[128], nfd = 0;
	dri_store *c;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	/* Client and server share the limit: fill it with idle
	 * connections, so that the server's accept meets EMFILE. */
	while (nfd < 128 && (fds[nfd] = raw_connect(port)) >= 0)
		nfd++;
	CHECK(nfd < 128);
	usleep(200000); /* the store meets EMFILE meanwhile */
	for (int i = 0; i < 16 && nfd; i++)
		close(fds[--nfd]);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 20000, &c) == DR_OK);
	CHECK(dri_store_set(c, "k", "v", 1) == DR_OK);
	CHECK(dri_store_get(c, "k", &v, &n, 5000) == DR_OK && n == 1);
	free(v);
	while (nfd)
		close(fds[--nfd]);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

/* Requests written straight on a client's socket, whose replies nobody
 * reads: a stalled client. */
static int stall(dri_store *c, int n)
{
	unsigned char f[16] = { 12, 0, 0, 0, 0, 0, 0, 0, 2, 3, 0, 'b', 'i', 'g' };

	for (int i = 0; i < n; i++) {
		f[4] = (unsigned char)(100 + i); /* sequence number */
		if (send(dri_store_fd(c), f, 14, MSG_NOSIGNAL) != 14)
			return -1;
	}
	return 0;
}

static int test_stalled_client_holds_up_nobody(void)
{
	size_t big = (size_t)32 << 20;
	char *v = calloc(1, big);
	dri_store *c, *d;
	void *r;
	size_t n;

	CHECK(v);
	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 1, 5000, &d) == DR_OK);
	CHECK(dri_store_set(d, "big", v, big) == DR_OK);
	/* 20 GETs of 32 MiB that c never reads: the server used to block
	 * 5 s on each reply, and destroy joined it (minutes) */
	CHECK(stall(c, 20) == 0);
	CHECK(dri_store_set(d, "k", "v", 1) == DR_OK);
	CHECK(dri_store_get(d, "k", &r, &n, 5000) == DR_OK && n == 1);
	free(r);
	dri_store_server_stop(srv); /* at once: the runner's timeout is 60 s */
	dri_store_close(c);
	dri_store_close(d);
	free(v);
	return 0;
}

/* The store itself out of descriptors, with no stranger to drop: the
 * client is told so and stops at once (it used to retry until its
 * timeout, taking the close for a server not up yet); with a descriptor
 * free again it gets in. */
static int test_store_out_of_fds_says_so(void)
{
	int fds[1100], nfd = 0;
	struct rlimit old, rl;
	dri_store *c = NULL;
	dr_err e;

	CHECK(start() == 0);
	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
	rl = old;
	if (rl.rlim_cur > 256)
		rl.rlim_cur = 256;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	while (nfd < 1100 && (fds[nfd] = open("/dev/null", O_RDONLY)) >= 0)
		nfd++;
	CHECK(nfd < 1100 && errno == EMFILE);
	close(fds[--nfd]); /* the client's socket, nothing for the server */
	/* DR_ESYS, not DR_ETIMEDOUT after 30 s of retries. */
	e = dri_store_connect("127.0.0.1", port, KEY, 0, 30000, &c);
	CHECKF(e == DR_ESYS && strstr(dr_last_error(), "out of file "
	       "descriptors") && strstr(dr_last_error(), "ulimit -n"),
	       "%s: %s", dr_err_name(e), dr_last_error());
	while (nfd)
		close(fds[--nfd]);
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
	CHECK(dri_store_connect("127.0.0.1", port, KEY, 0, 5000, &c) == DR_OK);
	CHECK(dri_store_set(c, "k", "v", 1) == DR_OK);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_set_get_add),
	UNIT(test_store_out_of_fds_says_so),
	UNIT(test_get_waits_for_set),
	UNIT(test_get_times_out_naming_key),
	UNIT(test_server_gone_is_an_error),
	UNIT(test_connect_retries_then_times_out),
	UNIT(test_port_taken),
	UNIT(test_wrong_key_is_refused),
	UNIT(test_unauthenticated_request_gets_nothing),
	UNIT(test_stale_reply_is_not_the_next_answer),
	UNIT(test_idle_connections_do_not_lock_out_ranks),
	UNIT(test_out_of_fds_then_served),
	UNIT_TIMEOUT(test_stalled_client_holds_up_nobody, 30),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
