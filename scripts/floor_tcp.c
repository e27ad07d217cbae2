/*
 * floor_tcp.c - the least an all_reduce of N processes over loopback TCP
 * can cost on this machine: the ring (the fewest bytes a rank sends and
 * receives, 2(N-1)/N of the buffer each way, the fewest float additions,
 * (N-1)/N of it) on N plain TCP connections of 127.0.0.1, nothing else:
 * no library, no framing, no checks, no timeout.  The floor that
 * scripts/bench-coll's TCP columns (distrun over DISTRUN_TRANSPORT=tcp,
 * gloo, Open MPI's btl tcp) are measured against: what is left above it
 * is theirs, the rest is the kernel's copies.
 *
 *   floor_tcp N BYTES [ITERS]   prints "op=all_reduce n=N bytes=BYTES
 *                               us=X iters=ITERS": X the slowest
 *                               process's mean per call over the loop
 *                               (the clock read before and after it
 *                               only), after one untimed call; the sums
 *                               are checked at the end (exit 1 if wrong)
 *
 * Each step sends one block to the next process while receiving one
 * from the previous (both sockets non-blocking, one poll for the two),
 * then adds what came in: the order bench_coll's ring and gloo's take.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sends slen bytes on so while receiving rlen on ri, both at once. */
static void xfer(int so, const char *s, size_t slen, int ri, char *r,
		 size_t rlen)
{
	while (slen || rlen) {
		struct pollfd p[2] = { { so, slen ? POLLOUT : 0, 0 },
				       { ri, rlen ? POLLIN : 0, 0 } };
		ssize_t k;

		if (poll(p, 2, 60000) <= 0)
			die("poll");
		if (slen && (p[0].revents & (POLLOUT | POLLERR))) {
			k = send(so, s, slen, MSG_NOSIGNAL);
			if (k < 0 && errno != EAGAIN)
				die("send");
			if (k > 0)
				s += k, slen -= (size_t)k;
		}
		if (rlen && (p[1].revents & (POLLIN | POLLERR | POLLHUP))) {
			k = recv(ri, r, rlen, 0);
			if (k == 0 || (k < 0 && errno != EAGAIN))
				die("recv");
			if (k > 0)
				r += k, rlen -= (size_t)k;
		}
	}
}

static void ring_all_reduce(float *buf, float *tmp, size_t count, int n,
			    int r, int so, int ri)
{
	size_t blk = count / (size_t)n;

	for (int s = 0; s < n - 1; s++) {
		int out = ((r - s) % n + n) % n, in = ((r - s - 1) % n + n) % n;
		size_t ob = out == n - 1 ? count - blk * (size_t)out : blk;
		size_t ib = in == n - 1 ? count - blk * (size_t)in : blk;
		float *dst = buf + blk * (size_t)in;

		xfer(so, (char *)(buf + blk * (size_t)out), ob * 4, ri,
		     (char *)tmp, ib * 4);
		for (size_t i = 0; i < ib; i++)
			dst[i] += tmp[i];
	}
	for (int s = 0; s < n - 1; s++) {
		int out = ((r + 1 - s) % n + n) % n, in = ((r - s) % n + n) % n;
		size_t ob = out == n - 1 ? count - blk * (size_t)out : blk;
		size_t ib = in == n - 1 ? count - blk * (size_t)in : blk;

		xfer(so, (char *)(buf + blk * (size_t)out), ob * 4, ri,
		     (char *)(buf + blk * (size_t)in), ib * 4);
	}
}

static void nonblock(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void rank_main(int n, int r, const int *ls, const int *port,
		      size_t bytes, int iters, int out)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	size_t count = bytes / 4;
	/* tmp holds the largest block, the last: count / n + count % n */
	float *buf = malloc(bytes),
	      *tmp = malloc((count / (size_t)n + count % (size_t)n) * 4);
	int so = socket(AF_INET, SOCK_STREAM, 0), ri;
	double t;

	if (!buf || !tmp || so < 0)
		die("setup");
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port[(r + 1) % n]);
	if (connect(so, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	if ((ri = accept(ls[r], NULL, NULL)) < 0)
		die("accept");
	nonblock(so);
	nonblock(ri);
	for (size_t i = 0; i < count; i++)
		buf[i] = 1.0f;
	ring_all_reduce(buf, tmp, count, n, r, so, ri); /* untimed */
	for (size_t i = 0; i < count; i++)
		buf[i] = (float)(r + 1);
	t = now_s();
	for (int i = 0; i < iters; i++)
		ring_all_reduce(buf, tmp, count, n, r, so, ri);
	t = now_s() - t;
	/* every call sums: rank-sum times n^(iters-1) */
	double want = n * (n + 1) / 2.0;
	for (int i = 1; i < iters; i++)
		want *= n;
	for (size_t i = 0; i < count; i++)
		if (buf[i] != (float)want) {
			fprintf(stderr, "floor_tcp: rank %d: element %zu is %g, "
				"not %g\n", r, i, buf[i], want);
			t = -1;
			break;
		}
	if (write(out, &t, sizeof(t)) != sizeof(t))
		die("write");
	exit(0);
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[1]) : 0, iters = argc > 3 ? atoi(argv[3]) : 5;
	size_t bytes = argc > 2 ? strtoull(argv[2], NULL, 0) : 0;
	int ls[64], port[64], pfd[2], bad = 0;
	double worst = 0;

	if (n < 2 || n > 64 || bytes < 4 * (size_t)n || iters < 1) {
		fprintf(stderr, "usage: floor_tcp N(2-64) BYTES(>=4N) [ITERS]\n");
		return 2;
	}
	bytes &= ~(size_t)3;
	for (int i = 0; i < n; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t al = sizeof(a);

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if ((ls[i] = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
		    bind(ls[i], (struct sockaddr *)&a, sizeof(a)) ||
		    listen(ls[i], 4) ||
		    getsockname(ls[i], (struct sockaddr *)&a, &al))
			die("listen");
		port[i] = ntohs(a.sin_port);
	}
	if (pipe(pfd))
		die("pipe");
	for (int r = 0; r < n; r++) {
		pid_t p = fork();
		if (p < 0)
			die("fork");
		if (!p)
			rank_main(n, r, ls, port, bytes, iters, pfd[1]);
	}
	close(pfd[1]);
	for (int r = 0; r < n; r++) {
		double t;
		if (read(pfd[0], &t, sizeof(t)) != sizeof(t) || t < 0)
			bad = 1;
		else if (t > worst)
			worst = t;
	}
	for (int r = 0; r < n; r++) {
		int st;
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			bad = 1;
	}
	if (bad)
		return 1;
	printf("op=all_reduce n=%d bytes=%zu us=%.2f iters=%d\n", n, bytes,
	       worst / iters * 1e6, iters);
	return 0;
}
