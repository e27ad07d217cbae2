/*
 * tcpstore.c - fuzzes the client of torch's TCPStore (runtime/tcpstore.c)
 * with whatever bytes the server at MASTER_ADDR:MASTER_PORT sends back:
 * the dialect probe's answer (torch 2.x: VALIDATE then four GETNUMKEYS;
 * torch 1.x: the dropped connection, then GETNUMKEYS alone), WAIT's byte,
 * GET's length and value, ADD's number.
 *
 * The client only talks through a socket, so the harness is the server:
 * a thread on a loopback listener that, for each of up to two
 * connections, writes that connection's bytes, shuts its side for
 * writing (so every short answer ends in EOF at once, never in a
 * timeout), and records what the client sent until the client closes.
 *
 * Input: a byte giving up to 3 operations (low 2 bits the count, then 2
 * bits each: SET, GET, ADD, GET), two bytes giving the length of the first
 * connection's bytes, those bytes, then the second connection's.
 * A model of the protocol beside it (the framing of tcpstore.c's header
 * comment, as torch's TCPStore.cpp writes it) says which dialect the
 * client must settle on or that it must refuse the server, what each
 * operation returns or that it must fail (a protocol error for a bad
 * answer, a lost peer for a short one), and the exact bytes the client
 * must have sent on each connection.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv.h"
#include "fuzz.h"

#define VALIDATE 0x3C85F7CEu
#define LIMIT_MS 10000

static void put64(struct fuzz_bytes *b, uint64_t v)
{
	unsigned char le[8];

	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)(v >> (8 * i));
	fuzz_put(b, le, 8);
}

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int lfd = -1, port;

/* The server's side of one input. */
struct server {
	const uint8_t *out[2];
	size_t outlen[2];
	struct fuzz_bytes got[2];  /* what the client sent on each connection */
	int conns;            /* accepted */
	int stop[2];          /* a pipe: the client is done */
};

static void *serve(void *arg)
{
	struct server *s = arg;

	for (int c = 0; c < 2; c++) {
		struct pollfd pf[2] = { { lfd, POLLIN, 0 },
					{ s->stop[0], POLLIN, 0 } };
		unsigned char buf[4096];
		size_t off = 0;
		int fd;

		FUZZ_CHECK(poll(pf, 2, LIMIT_MS) > 0);
		if (pf[1].revents)
			break;
		fd = accept(lfd, NULL, NULL);
		FUZZ_CHECK(fd >= 0);
		s->conns++;
		while (off < s->outlen[c]) {
			ssize_t n = send(fd, s->out[c] + off, s->outlen[c] - off,
					 MSG_NOSIGNAL);
			if (n <= 0)
				break; /* the client is gone already */
			off += (size_t)n;
		}
		shutdown(fd, SHUT_WR);
		for (;;) {
			struct pollfd pr = { fd, POLLIN, 0 };
			ssize_t n;

			/* The client closes once it is done: no answer
			 * of ours makes it wait. */
			FUZZ_CHECK(poll(&pr, 1, LIMIT_MS) == 1);
			n = recv(fd, buf, sizeof(buf), 0);
			if (n <= 0)
				break; /* EOF, or a reset after our unread bytes */
			fuzz_put(&s->got[c], buf, (size_t)n);
		}
		close(fd);
	}
	return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);

	(void)argc, (void)argv;
	signal(SIGPIPE, SIG_IGN);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	FUZZ_CHECK(lfd >= 0);
	FUZZ_CHECK(!bind(lfd, (struct sockaddr *)&a, sizeof(a)));
	FUZZ_CHECK(!listen(lfd, 4));
	FUZZ_CHECK(!getsockname(lfd, (struct sockaddr *)&a, &al));
	port = ntohs(a.sin_port);
	return 0;
}

/* The model: what the client reads next from the server's bytes. */
struct stream {
	const uint8_t *p;
	size_t n;
};

static int take(struct stream *s, size_t n, const uint8_t **at)
{
	if (s->n < n)
		return 0;
	*at = s->p;
	s->p += n, s->n -= n;
	return 1;
}

static void key_req(struct fuzz_bytes *b, int code, const char *key)
{
	unsigned char c = (unsigned char)code;

	fuzz_put(b, &c, 1);
	put64(b, strlen(key));
	fuzz_put(b, key, strlen(key));
}

enum { OP_SET, OP_GET, OP_ADD };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* torch's command codes, SET GET ADD WAIT GETNUMKEYS, per dialect. */
	static const int codes[3][5] = { { 0 }, { 0, 2, 3, 5, 6 },
					 { 1, 3, 4, 6, 7 } };
	struct server s = { .conns = 0 };
	struct fuzz_bytes want[2] = { { 0 } };
	struct stream in;
	dri_tcpstore *ts = NULL;
	pthread_t th;
	size_t n1;
	int nops, dialect = 0, conn;
	dr_err err;
	const uint8_t *at;

	if (size < 3)
		return 0;
	nops = data[0] & 3;
	n1 = (size_t)(data[1] | data[2] << 8);
	if (n1 > size - 3)
		n1 = size - 3;
	s.out[0] = data + 3, s.outlen[0] = n1;
	s.out[1] = data + 3 + n1, s.outlen[1] = size - 3 - n1;
	FUZZ_CHECK(!pipe(s.stop));
	FUZZ_CHECK(!pthread_create(&th, NULL, serve, &s));

	/* The probe on the first connection: 32 bytes of four small key
	 * counts mean 2.x; fewer (it hung up) mean ask again, the 1.x way,
	 * on a second. */
	fuzz_put(&want[0], dri_tcpstore_probe, sizeof(dri_tcpstore_probe));
	in = (struct stream){ s.out[0], s.outlen[0] };
	if (take(&in, 32, &at)) {
		dialect = DRI_TCPSTORE_V2;
		for (int i = 0; i < 4; i++)
			if (rd64(at + 8 * i) >= (1ull << 40))
				dialect = 0;
		conn = 0;
	} else {
		unsigned char v1 = 6;

		fuzz_put(&want[1], &v1, 1);
		in = (struct stream){ s.out[1], s.outlen[1] };
		if (take(&in, 8, &at) && rd64(at) < (1ull << 40))
			dialect = DRI_TCPSTORE_V1;
		conn = 1;
	}
	err = dri_tcpstore_connect("127.0.0.1", port, "fz/", LIMIT_MS, &ts);
	if (!dialect) {
		FUZZ_CHECK(err == DR_EPROTO && !ts && dr_last_error()[0]);
		goto out;
	}
	FUZZ_CHECK(err == DR_OK && ts);
	FUZZ_CHECK(dri_tcpstore_dialect(ts) == dialect);

	for (int i = 0; i < nops; i++) {
		int op = (data[0] >> (2 + 2 * i)) & 3;
		const int *code = codes[dialect];
		char key[8], full[16];

		snprintf(key, sizeof(key), "k%d", i);
		snprintf(full, sizeof(full), "/fz/%s", key);
		if (op == OP_SET) {
			char val[8];

			snprintf(val, sizeof(val), "v%d", i);
			key_req(&want[conn], code[0], full);
			put64(&want[conn], strlen(val));
			fuzz_put(&want[conn], val, strlen(val));
			FUZZ_CHECK(dri_tcpstore_set(ts, key, val, strlen(val),
						    LIMIT_MS) == DR_OK);
		} else if (op == OP_ADD) {
			int64_t delta = (int64_t)0x0102030405060708 * (i - 1), v, v2;
			dr_err e;

			key_req(&want[conn], code[2], full);
			put64(&want[conn], (uint64_t)delta);
			e = dri_tcpstore_add(ts, key, delta, &v, LIMIT_MS);
			if (!take(&in, 8, &at)) {
				FUZZ_CHECK(e == DR_EPEER);
				break;
			}
			/* No TCPStore answers an ADD with a count of 2^40 or
			 * more, or less than a positive delta: that is some
			 * other server, refused by name. */
			v2 = (int64_t)rd64(at);
			if (v2 >= (int64_t)1 << 40 || v2 <= -((int64_t)1 << 40) ||
			    (delta > 0 && v2 < delta)) {
				FUZZ_CHECK(e == DR_EPROTO && dr_last_error()[0]);
				break;
			}
			FUZZ_CHECK(e == DR_OK && v == v2);
		} else {
			unsigned char one = (unsigned char)code[3];
			void *val = NULL;
			size_t len = 0;
			uint64_t vlen = 0;
			dr_err e, expect = DR_OK;

			/* WAIT for the key (one key), then GET it. */
			fuzz_put(&want[conn], &one, 1);
			put64(&want[conn], 1);
			put64(&want[conn], strlen(full));
			fuzz_put(&want[conn], full, strlen(full));
			e = dri_tcpstore_get(ts, key, &val, &len, LIMIT_MS);
			if (!take(&in, 1, &at))
				expect = DR_EPEER;
			else if (*at != 0)
				expect = DR_EPROTO;
			if (expect == DR_OK) {
				key_req(&want[conn], code[1], full);
				if (!take(&in, 8, &at))
					expect = DR_EPEER;
			}
			if (expect == DR_OK &&
			    (vlen = rd64(at)) > DRI_TCPSTORE_VALUE_MAX)
				expect = DR_EPROTO;
			if (expect == DR_OK && !take(&in, (size_t)vlen, &at))
				expect = DR_EPEER;
			FUZZ_CHECK(e == expect);
			if (e) {
				FUZZ_CHECK(!val && dr_last_error()[0]);
				break;
			}
			FUZZ_CHECK(val && len == vlen && !memcmp(val, at, len) &&
				   ((char *)val)[len] == 0);
			free(val);
		}
	}
out:
	dri_tcpstore_close(ts);
	FUZZ_CHECK(write(s.stop[1], "x", 1) == 1);
	FUZZ_CHECK(!pthread_join(th, NULL));
	FUZZ_CHECK(s.conns == conn + 1);
	for (int c = 0; c < 2; c++) {
		FUZZ_CHECK(s.got[c].len == want[c].len);
		FUZZ_CHECK(!want[c].len ||
			   !memcmp(s.got[c].p, want[c].p, want[c].len));
		free(s.got[c].p);
		free(want[c].p);
	}
	close(s.stop[0]);
	close(s.stop[1]);
	return 0;
}
