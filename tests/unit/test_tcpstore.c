/*
 * test_tcpstore.c - the torch TCPStore client against its protocol: the
 * 2.x framing byte for byte as the protocol describes it (bytes written
 * out here, not produced by the code under test), then whole exchanges
 * with small servers in a thread that speak torch 2.x's dialect
 * (VALIDATE first, shifted codes), torch 1.x's (drops the 2.x probe as
 * torch 1.13 does), nothing (silence), or lies about a length.  The real
 * torch 1.13 server is exercised by tests/compat.bats under torchrun.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv.h"
#include "runner.h"

/* ------------------------------------------- framing, byte for byte */

static int same(const unsigned char *got, size_t n, const unsigned char *want,
		size_t wn)
{
	if (n != wn || memcmp(got, want, n)) {
		fprintf(stderr, "got %zu bytes:", n);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, " %02x", got[i]);
		fprintf(stderr, "\nwanted %zu:", wn);
		for (size_t i = 0; i < wn; i++)
			fprintf(stderr, " %02x", want[i]);
		fputc('\n', stderr);
		return 0;
	}
	return 1;
}

static int test_v2_framing(void)
{
	/* SET (1) "/k" = "ab": u64 2, "/k", u64 2, "ab" */
	static const unsigned char set[] = {
		1, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'k',
		2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b' };
	/* ADD (4) "/c" by -2: i64 little-endian two's complement */
	static const unsigned char add[] = {
		4, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'c',
		0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	/* WAIT (6): u64 count 1, then the key */
	static const unsigned char wait[] = {
		6, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'k' };
	/* GET (3) "/k" */
	static const unsigned char get[] = {
		3, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'k' };
	/* GETNUMKEYS (7): the command alone */
	static const unsigned char num[] = { 7 };
	/* VALIDATE (0) + u32 0x3C85F7CE, then four GETNUMKEYS */
	static const unsigned char probe[] = {
		0, 0xce, 0xf7, 0x85, 0x3c, 7, 7, 7, 7 };
	unsigned char *b;
	size_t n;

	b = dri_tcpstore_encode(DRI_TCPSTORE_V2, DRI_TS_SET, "/k", "ab", 2, 0, &n);
	CHECK(b && same(b, n, set, sizeof(set)));
	free(b);
	b = dri_tcpstore_encode(DRI_TCPSTORE_V2, DRI_TS_ADD, "/c", NULL, 0, -2, &n);
	CHECK(b && same(b, n, add, sizeof(add)));
	free(b);
	b = dri_tcpstore_encode(DRI_TCPSTORE_V2, DRI_TS_WAIT, "/k", NULL, 0, 0, &n);
	CHECK(b && same(b, n, wait, sizeof(wait)));
	free(b);
	b = dri_tcpstore_encode(DRI_TCPSTORE_V2, DRI_TS_GET, "/k", NULL, 0, 0, &n);
	CHECK(b && same(b, n, get, sizeof(get)));
	free(b);
	b = dri_tcpstore_encode(DRI_TCPSTORE_V2, DRI_TS_NUMKEYS, NULL, NULL, 0, 0, &n);
	CHECK(b && same(b, n, num, sizeof(num)));
	free(b);
	CHECK(same(dri_tcpstore_probe, sizeof(dri_tcpstore_probe), probe,
		   sizeof(probe)));
	return 0;
}

static int test_v1_framing(void)
{
	/* torch <= 2.0: SET 0, GET 2, ADD 3, WAIT 5, GETNUMKEYS 6 */
	static const unsigned char set[] = {
		0, 1, 0, 0, 0, 0, 0, 0, 0, 'k', 0, 0, 0, 0, 0, 0, 0, 0 };
	static const unsigned char add[] = {
		3, 1, 0, 0, 0, 0, 0, 0, 0, 'c', 5, 0, 0, 0, 0, 0, 0, 0 };
	unsigned char *b;
	size_t n;

	b = dri_tcpstore_encode(DRI_TCPSTORE_V1, DRI_TS_SET, "k", "", 0, 0, &n);
	CHECK(b && same(b, n, set, sizeof(set)));
	free(b);
	b = dri_tcpstore_encode(DRI_TCPSTORE_V1, DRI_TS_ADD, "c", NULL, 0, 5, &n);
	CHECK(b && same(b, n, add, sizeof(add)));
	free(b);
	b = dri_tcpstore_encode(DRI_TCPSTORE_V1, DRI_TS_GET, "k", NULL, 0, 0, &n);
	CHECK(b && b[0] == 2);
	free(b);
	b = dri_tcpstore_encode(DRI_TCPSTORE_V1, DRI_TS_WAIT, "k", NULL, 0, 0, &n);
	CHECK(b && b[0] == 5);
	free(b);
	CHECK(!dri_tcpstore_encode(3, DRI_TS_GET, "k", NULL, 0, 0, &n));
	return 0;
}

/* ------------------------------------------------- servers to talk to */

enum { SPEAK_V2, SPEAK_V1, SILENT, HUGE_VALUE, JUNK };

struct server {
	int kind, lfd, port;
	pthread_t th;
	char keys[8][64];
	char vals[8][64];
	int nkv;
};

static int rd(int fd, void *p, size_t n)
{
	unsigned char *b = p;

	while (n) {
		ssize_t r = recv(fd, b, n, 0);
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static uint64_t u64(const unsigned char *b)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static void w64(int fd, uint64_t v)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	send(fd, b, 8, MSG_NOSIGNAL);
}

/* A string: u64 length (at most 63 here) and its bytes. */
static int rdstr(int fd, char *out)
{
	unsigned char b[8];
	uint64_t n;

	if (rd(fd, b, 8) || (n = u64(b)) > 63 || rd(fd, out, (size_t)n))
		return -1;
	out[n] = 0;
	return 0;
}

static int find(struct server *s, const char *k)
{
	for (int i = 0; i < s->nkv; i++)
		if (!strcmp(s->keys[i], k))
			return i;
	return -1;
}

/* One client's requests in the server's dialect (codes shifted by one in
 * 2.x); returns when it goes away or misbehaves. */
static void serve(struct server *s, int fd, int v2)
{
	unsigned char c, b[8];
	char k[64], v[64];
	int i;

	if (v2) {
		unsigned char hello[5];
		if (rd(fd, hello, 5) || hello[0] != 0 ||
		    memcmp(hello + 1, "\xce\xf7\x85\x3c", 4))
			return; /* torch 2.x drops a client that does not validate */
	}
	while (!rd(fd, &c, 1)) {
		int cmd = v2 ? c - 1 : c; /* in 1.x numbering */
		switch (cmd) {
		case 0: /* SET */
			if (rdstr(fd, k) || rdstr(fd, v))
				return;
			if ((i = find(s, k)) < 0 && s->nkv < 8)
				i = s->nkv++;
			strcpy(s->keys[i], k);
			strcpy(s->vals[i], v);
			break;
		case 2: /* GET */
			if (rdstr(fd, k) || (i = find(s, k)) < 0)
				return;
			if (s->kind == HUGE_VALUE) {
				w64(fd, 1ull << 40);
				break;
			}
			w64(fd, strlen(s->vals[i]));
			send(fd, s->vals[i], strlen(s->vals[i]), MSG_NOSIGNAL);
			break;
		case 3: /* ADD */
			if (rdstr(fd, k) || rd(fd, b, 8))
				return;
			if ((i = find(s, k)) < 0 && s->nkv < 8) {
				i = s->nkv++;
				strcpy(s->keys[i], k);
				strcpy(s->vals[i], "0");
			}
			snprintf(s->vals[i], 64, "%lld", atoll(s->vals[i]) +
				 (long long)u64(b));
			w64(fd, (uint64_t)atoll(s->vals[i]));
			break;
		case 5: /* WAIT for one key, set already in these tests */
			if (rd(fd, b, 8) || u64(b) != 1 || rdstr(fd, k))
				return;
			c = 0;
			send(fd, &c, 1, MSG_NOSIGNAL);
			break;
		case 6: /* GETNUMKEYS */
			w64(fd, (uint64_t)s->nkv);
			break;
		default:
			return;
		}
	}
}

static void *server_main(void *arg)
{
	struct server *s = arg;
	int fd;

	while ((fd = accept(s->lfd, NULL, NULL)) >= 0) {
		if (s->kind == JUNK) {
			/* Answers anything with text, as a web server would. */
			static const char page[] = "HTTP/1.0 400 Bad Request\r\n"
				"Content-Length: 0\r\n\r\n";
			char junk[64];
			recv(fd, junk, sizeof(junk), 0);
			send(fd, page, sizeof(page) - 1, MSG_NOSIGNAL);
		} else if (s->kind == SILENT) {
			char junk[64];
			while (recv(fd, junk, sizeof(junk), 0) > 0)
				;
		} else if (s->kind == SPEAK_V1) {
			/* torch 1.13 reads the 2.x probe as SET with a key of
			 * 0x070707073C85F7CE bytes, fails to allocate it and
			 * drops us; other first bytes are its requests. */
			unsigned char c;
			if (recv(fd, &c, 1, MSG_PEEK) == 1 && c == 0) {
				unsigned char p[9];
				rd(fd, p, 9);
			} else {
				serve(s, fd, 0);
			}
		} else {
			serve(s, fd, 1);
		}
		close(fd);
	}
	return NULL;
}

static int start(struct server *s, int kind)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);

	memset(s, 0, sizeof(*s));
	s->kind = kind;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->lfd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(s->lfd >= 0);
	CHECK(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(s->lfd, 8) == 0);
	CHECK(getsockname(s->lfd, (struct sockaddr *)&a, &len) == 0);
	s->port = ntohs(a.sin_port);
	CHECK(pthread_create(&s->th, NULL, server_main, s) == 0);
	return 0;
}

/* Ends the server thread: its accept fails once the listener is shut,
 * and a thread left unjoined is a leak to ThreadSanitizer. */
static void stop(struct server *s)
{
	shutdown(s->lfd, SHUT_RDWR);
	close(s->lfd);
	pthread_join(s->th, NULL);
}

/* set, add, get through the client: the same in either dialect. */
static int exchange(int kind, int dialect)
{
	struct server s;
	dri_tcpstore *ts;
	void *v;
	size_t n;
	int64_t x;

	CHECK(start(&s, kind) == 0);
	CHECK(dri_tcpstore_connect("127.0.0.1", s.port, "distrun/t/", 5000,
				   &ts) == DR_OK);
	CHECK(dri_tcpstore_dialect(ts) == dialect);
	CHECK(dri_tcpstore_set(ts, "job", "abc", 3, 5000) == DR_OK);
	CHECK(dri_tcpstore_add(ts, "rank/0", 1, &x, 5000) == DR_OK && x == 1);
	CHECK(dri_tcpstore_add(ts, "rank/0", 1, &x, 5000) == DR_OK && x == 2);
	CHECK(dri_tcpstore_get(ts, "job", &v, &n, 5000) == DR_OK);
	CHECK(n == 3 && !memcmp(v, "abc", 4));
	free(v);
	/* Every key went under "/" + the prefix, apart from torch's own. */
	CHECK(find(&s, "/distrun/t/job") >= 0);
	CHECK(find(&s, "/distrun/t/rank/0") >= 0);
	dri_tcpstore_close(ts);
	stop(&s);
	return 0;
}

static int test_v2_server(void)
{
	return exchange(SPEAK_V2, DRI_TCPSTORE_V2);
}

static int test_v1_server(void)
{
	return exchange(SPEAK_V1, DRI_TCPSTORE_V1);
}

static int test_silent_server_times_out(void)
{
	struct server s;
	dri_tcpstore *ts;

	CHECK(start(&s, SILENT) == 0);
	CHECK(dri_tcpstore_connect("127.0.0.1", s.port, "p/", 300, &ts) ==
	      DR_ETIMEDOUT);
	CHECKF(strstr(dr_last_error(), "did not answer a TCPStore request"),
	       "%s", dr_last_error());
	stop(&s);
	return 0;
}

static int test_other_protocol_is_named(void)
{
	struct server s;
	dri_tcpstore *ts;

	CHECK(start(&s, JUNK) == 0);
	CHECK(dri_tcpstore_connect("127.0.0.1", s.port, "p/", 5000, &ts) ==
	      DR_EPROTO);
	CHECKF(strstr(dr_last_error(), "answers neither torch 2.x's nor 1.x's"),
	       "%s", dr_last_error());
	stop(&s);
	return 0;
}

static int test_huge_length_is_refused(void)
{
	struct server s;
	dri_tcpstore *ts;
	void *v = NULL;
	size_t n;

	CHECK(start(&s, HUGE_VALUE) == 0);
	CHECK(dri_tcpstore_connect("127.0.0.1", s.port, "p/", 5000, &ts) == 0);
	CHECK(dri_tcpstore_set(ts, "k", "v", 1, 5000) == DR_OK);
	CHECK(dri_tcpstore_get(ts, "k", &v, &n, 5000) == DR_EPROTO);
	CHECKF(strstr(dr_last_error(), "1099511627776 bytes, over the"), "%s",
	       dr_last_error());
	CHECK(v == NULL);
	dri_tcpstore_close(ts);
	stop(&s);
	return 0;
}

static int test_nothing_listening(void)
{
	struct server s;
	dri_tcpstore *ts;
	int port;

	/* A port that was free a moment ago and is closed now. */
	CHECK(start(&s, SILENT) == 0);
	port = s.port;
	shutdown(s.lfd, SHUT_RDWR);
	close(s.lfd);
	/* Its accept fails and it returns: join it (a thread that ends
	 * unjoined is a leak to ThreadSanitizer). */
	pthread_join(s.th, NULL);
	CHECK(dri_tcpstore_connect("127.0.0.1", port, "p/", 200, &ts) ==
	      DR_ECONN);
	CHECKF(strstr(dr_last_error(), "cannot connect"), "%s", dr_last_error());
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_v2_framing),
	UNIT(test_v1_framing),
	UNIT(test_v2_server),
	UNIT(test_v1_server),
	UNIT(test_silent_server_times_out),
	UNIT(test_other_protocol_is_named),
	UNIT(test_huge_length_is_refused),
	UNIT(test_nothing_listening),
	{ 0 }
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
