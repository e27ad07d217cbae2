/*
 * coll_check.c - the runtime core's checks, run as every rank of a job:
 * `distrun -n N build/tests/coll_check MODE [ARG]`.
 *
 *   all             barrier, all_reduce (every dtype x op, counts 0, 1, odd,
 *                   around p, several MiB), broadcast from every root,
 *                   blocking and asynchronous; every element checked
 *   p2p             send/recv, irecv before isend on both sides, ANY_SOURCE
 *   async-barrier   no rank returns from dr_work_wait before the slowest
 *                   rank arrived (CLOCK_REALTIME is shared on one machine)
 *   progress FILE   rank 0 starts an async all_reduce, then does "other
 *                   work" (no library calls) until rank 1, which finished
 *                   its blocking all_reduce, creates FILE
 *   mismatch KIND   rank 1 differs: coll, count, dtype, op or root; every
 *                   rank prints its error (expects DR_EMISMATCH)
 *   die             the last rank dies without a word after a barrier; the
 *                   others print the error their next collectives give
 *   stranger        rank 0 connects to rank 1's listening socket as a
 *                   stranger would (junk, then a wrong job id) and checks
 *                   that rank 1 drops both; then the job goes on
 *   init            only dr_init_process_group; prints the error, if any
 *   quick           3000 small blocking calls, checked, with a rank late
 *                   now and then and rooted calls between, and runs of
 *                   200 small rooted calls (mode_quick)
 *   mixed           runs of 400 small rooted calls from one root, each
 *                   followed by a barrier or tiny all_reduce; then 4000
 *                   rounds of small rooted calls (broadcast, reduce) and
 *                   tiny all_reduces in turn, checked, a rank now and
 *                   then late, asleep or yielding (mode_mixed)
 *
 * Prints "rank R: ok" when all went well; on a wrong value prints the first
 * bad element and exits 1.
 */
#include <distrun.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store.h" /* stranger: the store, to find a rank's address */

static int rank, size;

#include "check.h"

/* ---------------------------------------------- exact typed values */

static int is_float(dr_dtype t)
{
	return t == DR_FLOAT16 || t == DR_BFLOAT16 || t == DR_FLOAT32 ||
	       t == DR_FLOAT64;
}

/* Small integers only: these conversions are exact for them. */
static uint16_t f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff;
	if (!(x & 0x7fffffff))
		return (uint16_t)sign;
	return (uint16_t)(sign | ((e - 127 + 15) << 10) | ((x >> 13) & 0x3ff));
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f;
	uint32_t x = (h & 0x7fff) ? sign | ((e - 15 + 127) << 23) |
					    ((uint32_t)(h & 0x3ff) << 13)
				  : sign;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

static void put(void *buf, size_t i, dr_dtype t, int64_t v)
{
	float f = (float)v;
	uint32_t x;

	switch (t) {
	case DR_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
	case DR_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	case DR_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case DR_INT64: ((int64_t *)buf)[i] = v; break;
	case DR_FLOAT16: ((uint16_t *)buf)[i] = f32_to_f16(f); break;
	case DR_BFLOAT16:
		memcpy(&x, &f, 4);
		((uint16_t *)buf)[i] = (uint16_t)(x >> 16);
		break;
	case DR_FLOAT32: ((float *)buf)[i] = f; break;
	case DR_FLOAT64: ((double *)buf)[i] = (double)v; break;
	default: break;
	}
}

static double get(const void *buf, size_t i, dr_dtype t)
{
	uint32_t x;
	float f;

	switch (t) {
	case DR_INT8: return ((const int8_t *)buf)[i];
	case DR_UINT8: return ((const uint8_t *)buf)[i];
	case DR_INT32: return ((const int32_t *)buf)[i];
	case DR_INT64: return (double)((const int64_t *)buf)[i];
	case DR_FLOAT16: return f16_to_f32(((const uint16_t *)buf)[i]);
	case DR_BFLOAT16:
		x = (uint32_t)((const uint16_t *)buf)[i] << 16;
		memcpy(&f, &x, 4);
		return f;
	case DR_FLOAT32: return ((const float *)buf)[i];
	case DR_FLOAT64: return ((const double *)buf)[i];
	default: return 0;
	}
}

/* Rank r's element i for op: small integers whose reduction (and every
 * partial one) over up to 16 ranks is exact in every dtype, int8 and
 * bfloat16 included. */
static int64_t val(dr_dtype t, dr_op op, int r, size_t i)
{
	int64_t k = (int64_t)(i % 1009);

	switch (op) {
	case DR_SUM: return (r + 2 * k) % 3;
	case DR_AVG: /* terms of +-2 that cancel: the sum is n (k % 5) */
		return k % 5 + ((r + k) % size == 0 ? 2 * (size - 1) : -2);
	case DR_PRODUCT: return (r + k) % 8 == 0 ? 2 : 1;
	case DR_MIN:
	case DR_MAX:
		return t == DR_UINT8 ? (r * 5 + k * 3) % 11
				     : (r * 5 + k * 3) % 11 - 5;
	default: return (r * 37 + k * 11) & 0x7f; /* bitwise */
	}
}

static int64_t expect(dr_dtype t, dr_op op, size_t i)
{
	int64_t acc = val(t, op, 0, i);

	for (int r = 1; r < size; r++) {
		int64_t v = val(t, op, r, i);
		switch (op) {
		case DR_SUM: case DR_AVG: acc += v; break;
		case DR_PRODUCT: acc *= v; break;
		case DR_MIN: acc = v < acc ? v : acc; break;
		case DR_MAX: acc = v > acc ? v : acc; break;
		case DR_BAND: acc &= v; break;
		case DR_BOR: acc |= v; break;
		case DR_BXOR: acc ^= v; break;
		default: break;
		}
	}
	return op == DR_AVG ? acc / size : acc;
}

/* Waits for an asynchronous call's handle (NULL: the call blocked) and
 * frees it. */
static void finish(dr_work *w)
{
	if (!w)
		return;
	TRY(dr_work_wait(w));
	if (!dr_work_is_completed(w))
		DIE("work not completed after dr_work_wait");
	dr_work_free(w);
}

static void check_all_reduce(dr_dtype t, dr_op op, size_t count, int async)
{
	size_t es = dr_dtype_size(t);
	void *buf = malloc(count * es + 1);
	dr_work *w = NULL;

	if (!buf)
		DIE("out of memory");
	for (size_t i = 0; i < count; i++)
		put(buf, i, t, val(t, op, rank, i));
	TRY(dr_all_reduce(count ? buf : NULL, count, t, op, NULL,
			  async ? &w : NULL));
	finish(w);
	for (size_t i = 0; i < count; i++) {
		double got = get(buf, i, t), want = (double)expect(t, op, i);
		if (got != want)
			DIE("all_reduce(count=%zu, %s, %s%s) element %zu: got %g, "
			    "want %g", count, dr_dtype_name(t), dr_op_name(op),
			    async ? ", async" : "", i, got, want);
	}
	free(buf);
}

static void check_broadcast(dr_dtype t, size_t count, int root, int async)
{
	size_t es = dr_dtype_size(t);
	void *buf = malloc(count * es + 1);
	dr_work *w = NULL;

	if (!buf)
		DIE("out of memory");
	for (size_t i = 0; i < count; i++)
		put(buf, i, t, rank == root ? (int64_t)((i * 7 + (size_t)root) % 100)
					    : -1);
	TRY(dr_broadcast(buf, count, t, root, NULL, async ? &w : NULL));
	finish(w);
	for (size_t i = 0; i < count; i++) {
		double got = get(buf, i, t);
		double want = (double)((i * 7 + (size_t)root) % 100);
		if (got != want)
			DIE("broadcast(count=%zu, %s, src=%d) element %zu: got %g, "
			    "want %g", count, dr_dtype_name(t), root, i, got, want);
	}
	free(buf);
}

/* e must be code, with a message containing what. */
static void expect_err(dr_err e, dr_err code, const char *what, const char *call)
{
	if (e != code || !strstr(dr_last_error(), what))
		DIE("%s gave %s (%s), expected %s naming '%s'", call,
		    dr_err_name(e), dr_last_error(), dr_err_name(code), what);
}

/* Bad arguments fail on the calling rank alone, before anything is sent:
 * the group stays usable. */
static void bad_arguments(void)
{
	float f[4] = { 0 };
	dr_work *w = (dr_work *)f;

	expect_err(dr_all_reduce(NULL, 4, DR_FLOAT32, DR_SUM, NULL, NULL),
		   DR_EINVAL, "buf", "all_reduce(NULL buf)");
	expect_err(dr_all_reduce(f, 4, DR_FLOAT32, DR_BXOR, NULL, &w),
		   DR_ENOTSUP, "float32", "all_reduce(float32, bxor)");
	if (w)
		DIE("a failed call left *work set");
	expect_err(dr_all_reduce(f, 4, (dr_dtype)42, DR_SUM, NULL, NULL),
		   DR_EINVAL, "dtype", "all_reduce(dtype 42)");
	expect_err(dr_broadcast(f, 4, DR_FLOAT32, size, NULL, NULL),
		   DR_EINVAL, "src", "broadcast(src = world size)");
	expect_err(dr_barrier(NULL, NULL, NULL, -1), DR_EINVAL, "device",
		   "barrier(-1 device ids)");
	expect_err(dr_init_process_group(NULL, NULL), DR_EALREADY,
		   "already initialized", "a second init");
}

static void mode_all(void)
{
	size_t small[] = { 0, 1, 3, (size_t)size - 1, (size_t)size + 1, 17, 1000 };
	size_t big = (3u << 20) / 4 + 3; /* several MiB as float32, odd */

	bad_arguments();
	for (int i = 0; i < 20; i++)
		TRY(dr_barrier(NULL, NULL, NULL, 0));
	for (int t = 0; t < DR_DTYPE_COUNT_; t++)
		for (int op = 0; op < DR_OP_COUNT_; op++) {
			if (op >= DR_BAND && is_float((dr_dtype)t))
				continue;
			for (size_t k = 0; k < sizeof(small) / sizeof(*small); k++)
				check_all_reduce((dr_dtype)t, (dr_op)op, small[k], 0);
		}
	/* Large: the ring, with pieces and blocks of uneven size. */
	check_all_reduce(DR_FLOAT32, DR_SUM, big, 0);
	check_all_reduce(DR_INT32, DR_MAX, big, 0);
	check_all_reduce(DR_BFLOAT16, DR_SUM, big, 0);
	check_all_reduce(DR_FLOAT64, DR_AVG, big / 2, 0);
	check_all_reduce(DR_UINT8, DR_BXOR, 5u << 20, 0);
	check_all_reduce(DR_FLOAT32, DR_SUM, big, 1);
	check_all_reduce(DR_INT64, DR_MIN, 1001, 1);
	for (int root = 0; root < size; root++) {
		check_broadcast(DR_FLOAT32, 0, root, 0);
		check_broadcast(DR_INT8, 1, root, 0);
		check_broadcast(DR_FLOAT64, 1001, root, 0);
		check_broadcast(DR_FLOAT32, (size_t)(3u << 20) / 4 + 1, root, root % 2);
	}
	/* Async calls in a row, then blocking ones: the order holds. */
	{
		dr_work *w[3];
		int32_t a = rank, b = rank;
		TRY(dr_all_reduce(&a, 1, DR_INT32, DR_SUM, NULL, &w[0]));
		TRY(dr_barrier(NULL, &w[1], NULL, 0));
		TRY(dr_broadcast(&b, 1, DR_INT32, size - 1, NULL, &w[2]));
		TRY(dr_barrier(NULL, NULL, NULL, 0));
		for (int i = 0; i < 3; i++) {
			TRY(dr_work_wait(w[i]));
			dr_work_free(w[i]);
		}
		if (a != size * (size - 1) / 2 || b != size - 1)
			DIE("async sequence: got %d and %d", (int)a, (int)b);
	}
}

static void mode_p2p(void)
{
	int32_t x[4] = { rank, rank * 10, -rank, 7 }, y[4];
	int src = -2;

	if (size < 2)
		return;
	/* A ring: even ranks send first, odd receive first. */
	int to = (rank + 1) % size, from = (rank + size - 1) % size;
	if (rank % 2 == 0) {
		TRY(dr_send(x, 4, DR_INT32, to, 5, NULL));
		TRY(dr_recv(y, 4, DR_INT32, from, 5, NULL, &src));
	} else {
		TRY(dr_recv(y, 4, DR_INT32, from, 5, NULL, &src));
		TRY(dr_send(x, 4, DR_INT32, to, 5, NULL));
	}
	if (src != from || y[0] != from || y[1] != from * 10 || y[3] != 7)
		DIE("ring recv: src %d, y = %d %d %d %d", src, (int)y[0],
		    (int)y[1], (int)y[2], (int)y[3]);
	/* irecv before isend on both sides of a pair, two tags. */
	if (rank < 2) {
		int peer = 1 - rank;
		int64_t big_s[1000], big_r[1000], t_s = rank, t_r = -1;
		dr_work *w[4];
		for (int i = 0; i < 1000; i++)
			big_s[i] = i * (rank + 1);
		TRY(dr_irecv(big_r, 1000, DR_INT64, peer, 1, NULL, &w[0]));
		TRY(dr_irecv(&t_r, 1, DR_INT64, peer, 2, NULL, &w[1]));
		/* Other tag first: matching is per tag. */
		TRY(dr_isend(&t_s, 1, DR_INT64, peer, 2, NULL, &w[2]));
		TRY(dr_isend(big_s, 1000, DR_INT64, peer, 1, NULL, &w[3]));
		for (int i = 0; i < 4; i++)
			TRY(dr_work_wait(w[i]));
		if (dr_work_source(w[0]) != peer)
			DIE("dr_work_source: %d", dr_work_source(w[0]));
		for (int i = 0; i < 4; i++)
			dr_work_free(w[i]);
		if (t_r != peer)
			DIE("tag 2: got %lld", (long long)t_r);
		for (int i = 0; i < 1000; i++)
			if (big_r[i] != i * (peer + 1))
				DIE("tag 1 element %d: %lld", i, (long long)big_r[i]);
	}
	/* dr_work_wait_timeout gives up, the handle stays valid: rank 1
	 * sends only after rank 0's "go", which follows the timeout. */
	if (rank < 2) {
		int32_t v = -1, go = 1;
		dr_work *w;
		if (rank == 0) {
			TRY(dr_irecv(&v, 1, DR_INT32, 1, 7, NULL, &w));
			dr_err e = dr_work_wait_timeout(w, 50);
			if (e != DR_ETIMEDOUT || dr_work_is_completed(w))
				DIE("wait_timeout on an unsent message: %s",
				    dr_err_name(e));
			TRY(dr_send(&go, 1, DR_INT32, 1, 8, NULL));
			TRY(dr_work_wait(w));
			if (v != 42 || !dr_work_is_completed(w) ||
			    dr_work_status(w) != DR_OK)
				DIE("late irecv: %d", (int)v);
			dr_work_free(w);
		} else {
			TRY(dr_recv(&go, 1, DR_INT32, 0, 8, NULL, NULL));
			v = 42;
			TRY(dr_send(&v, 1, DR_INT32, 0, 7, NULL));
		}
	}
	/* Everyone to rank 0 with DR_ANY_SOURCE. */
	if (rank == 0) {
		char *seen = calloc((size_t)size, 1);
		for (int i = 1; i < size; i++) {
			int32_t v;
			TRY(dr_recv(&v, 1, DR_INT32, DR_ANY_SOURCE, 9, NULL, &src));
			if (v != src * 3 || src < 1 || src >= size || !seen || seen[src])
				DIE("any-source: %d from %d", (int)v, src);
			seen[src] = 1;
		}
		free(seen);
	} else {
		int32_t v = rank * 3;
		TRY(dr_send(&v, 1, DR_INT32, 0, 9, NULL));
	}
	TRY(dr_barrier(NULL, NULL, NULL, 0));
}

static double now_real(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void mode_async_barrier(void)
{
	for (int round = 0; round < 3; round++) {
		int slow = round % size;
		dr_work *w;
		double arrive, left, last;

		if (rank == slow)
			usleep(300000);
		arrive = now_real();
		TRY(dr_barrier(NULL, &w, NULL, 0));
		TRY(dr_work_wait(w));
		left = now_real();
		dr_work_free(w);
		last = arrive;
		TRY(dr_all_reduce(&last, 1, DR_FLOAT64, DR_MAX, NULL, NULL));
		if (left < last)
			DIE("left the barrier at %.6f, before rank %d arrived at "
			    "%.6f", left, slow, last);
	}
}

static void mode_progress(const char *file)
{
	float v = 1;

	if (!file)
		DIE("progress needs a file name");
	if (rank == 0) {
		dr_work *w;
		TRY(dr_all_reduce(&v, 1, DR_FLOAT32, DR_SUM, NULL, &w));
		/* Other work: no library call until rank 1 is through. */
		for (int i = 0; i < 600 && access(file, F_OK); i++)
			usleep(100000);
		if (access(file, F_OK))
			DIE("rank 1 did not finish its all_reduce while rank 0 "
			    "was busy");
		TRY(dr_work_wait(w));
		dr_work_free(w);
	} else {
		TRY(dr_all_reduce(&v, 1, DR_FLOAT32, DR_SUM, NULL, NULL));
		if (rank == 1) {
			FILE *f = fopen(file, "w");
			if (f)
				fclose(f);
		}
	}
	if (v != size)
		DIE("all_reduce gave %g", v);
}

static void report(const char *what, dr_err e)
{
	printf("rank %d: %s: %s: %s\n", rank, what, dr_err_name(e),
	       e ? dr_last_error() : "");
	fflush(stdout);
}

static void mode_mismatch(const char *kind)
{
	float buf[8] = { 0 };
	dr_err e;

	if (!kind)
		DIE("mismatch needs a kind");
	/* Rank 1 may see the mismatch and abort while a peer is still in
	 * this barrier: that peer then reports it here. */
	e = dr_barrier(NULL, NULL, NULL, 0);
	if (e)
		;
	else if (rank != 1)
		e = !strcmp(kind, "coll") ? dr_barrier(NULL, NULL, NULL, 0)
		  : !strcmp(kind, "root") ? dr_broadcast(buf, 8, DR_FLOAT32, 0, NULL, NULL)
		  : dr_all_reduce(buf, 8, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(kind, "coll"))
		e = dr_all_reduce(buf, 4, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(kind, "count"))
		e = dr_all_reduce(buf, 7, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(kind, "dtype"))
		e = dr_all_reduce(buf, 8, DR_INT32, DR_SUM, NULL, NULL);
	else if (!strcmp(kind, "op"))
		e = dr_all_reduce(buf, 8, DR_FLOAT32, DR_MAX, NULL, NULL);
	else if (!strcmp(kind, "root"))
		e = dr_broadcast(buf, 8, DR_FLOAT32, 1, NULL, NULL);
	else
		DIE("unknown mismatch kind %s", kind);
	report("first", e);
	/* The group is aborted now: the next call fails at once.  (A root
	 * that differs is seen only there: in a broadcast, neither rank that
	 * takes itself for the root waits for anything.) */
	dr_err next = dr_barrier(NULL, NULL, NULL, 0);
	report("next", next);
	dr_destroy_process_group();
	exit(e == DR_EMISMATCH || (!e && next == DR_EMISMATCH) ? 0 : 3);
}

static void mode_die(void)
{
	float buf[1000] = { 0 };
	dr_err e;

	/* The first failure may come in this barrier already: a rank that
	 * sees the dead peer first aborts the group at once. */
	e = dr_barrier(NULL, NULL, NULL, 0);
	if (rank == size - 1)
		_exit(9); /* no goodbye */
	if (!e)
		e = dr_all_reduce(buf, 1000, DR_FLOAT32, DR_SUM, NULL, NULL);
	report("all_reduce", e);
	if (!e)
		e = dr_barrier(NULL, NULL, NULL, 0), report("barrier", e);
	exit(e == DR_EPEER || e == DR_EABORTED ? 0 : 3);
}

/* Connects to "host:port", writes len bytes, returns 1 if the other end
 * then closes the connection within 20 s. */
static int dropped_after(const char *addr, const void *junk, size_t len)
{
	char host[128];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	char c;
	int fd, closed = 0;

	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		DIE("cannot resolve %s", addr);
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		DIE("socket: %s", strerror(errno));
	/* Refused is dropped too: a rank whose peers are all in shared
	 * memory listens to nobody. */
	if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		if (errno != ECONNREFUSED)
			DIE("cannot connect to %s", addr);
		freeaddrinfo(ai);
		close(fd);
		return 1;
	}
	freeaddrinfo(ai);
	if (write(fd, junk, len) != (ssize_t)len)
		DIE("write to %s", addr);
	for (int i = 0; i < 200 && !closed; i++) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 100) > 0)
			closed = recv(fd, &c, 1, 0) <= 0;
	}
	close(fd);
	return closed;
}

static void mode_stranger(void)
{
	if (rank == 0 && size > 1) {
		void *addr;
		size_t len;
		unsigned char hs[32] = { 'D', 'R', 'H', 'S', 1, 0 };
		TRY(dri_store_get(dri_world_store(), "addr/1", &addr, &len, 10000));
		/* "host:port", then what it says about shared memory */
		if (strchr(addr, '|'))
			*strchr(addr, '|') = 0;
		if (!dropped_after(addr, "GET / HTTP/1.0\r\n\r\n junk junk junk", 32))
			DIE("rank 1 kept a connection that sent junk");
		hs[8] = 1; /* rank 1... */
		hs[12] = (unsigned char)size; /* right size, but job id zeros */
		if (!dropped_after(addr, hs, sizeof(hs)))
			DIE("rank 1 kept a connection with a wrong job id");
		free(addr);
	}
	mode_all();
}

/* A run of 300 small rooted calls (the quick path's rooted calls,
 * coll_shm_quick.c: dri_cs_lean_rooted), more than a root may run ahead of its
 * readers (LAG, coll_shm_flags.h) and than a rank keeps records of
 * (DRI_SEG_CALLS, seg.h): broadcasts of 24 bytes (3 int64,
 * the most that rides in a record) and 8 bytes, and reduces of 3 int32
 * (SUM) and one float (MAX), roots in turn, checked, and every 50th
 * a broadcast and a reduce of no data; at the 70th one rank sleeps 5 ms
 * (the others' waits go into the transport). */
static void quick_rooted(int at)
{
	struct timespec nap = { 0, 5000000L };

	for (int j = 0; j < 300; j++) {
		int root = (at + j) % size, k = at + j;

		if (j == 70 && rank == (at / 500) % size)
			nanosleep(&nap, NULL);
		switch (j % 4) {
		case 0: {
			int64_t b[3] = { -1, -1, -1 };

			if (rank == root)
				b[0] = k, b[1] = -k, b[2] = 7 * k;
			TRY(dr_broadcast(b, 3, DR_INT64, root, NULL, NULL));
			if (b[0] != k || b[1] != -k || b[2] != 7 * k)
				DIE("quick: rooted %d: broadcast %lld %lld %lld",
				    k, (long long)b[0], (long long)b[1],
				    (long long)b[2]);
			break;
		}
		case 1: {
			int32_t v[3] = { rank, k % 100, 1 };

			TRY(dr_reduce(v, 3, DR_INT32, DR_SUM, root, NULL, NULL));
			if (rank == root &&
			    (v[0] != size * (size - 1) / 2 ||
			     v[1] != size * (k % 100) || v[2] != size))
				DIE("quick: rooted %d: reduce %d %d %d", k,
				    (int)v[0], (int)v[1], (int)v[2]);
			break;
		}
		case 2: {
			double d = rank == root ? k + 0.5 : 0;

			TRY(dr_broadcast(&d, 1, DR_FLOAT64, root, NULL, NULL));
			if (d != k + 0.5)
				DIE("quick: rooted %d: broadcast %g", k, d);
			break;
		}
		default: {
			float f = (float)((rank + k) % size);

			TRY(dr_reduce(&f, 1, DR_FLOAT32, DR_MAX, root, NULL, NULL));
			if (rank == root && f != (float)(size - 1))
				DIE("quick: rooted %d: reduce max %g", k, f);
			break;
		}
		}
		/* no data (count 0, no buffer): a call all the same */
		if (j % 50 == 49) {
			TRY(dr_broadcast(NULL, 0, DR_FLOAT32, root, NULL, NULL));
			TRY(dr_reduce(NULL, 0, DR_INT32, DR_SUM, root, NULL, NULL));
		}
	}
}

/* The quick way of small blocking calls (coll_shm_quick.c) and its
 * hand-over to the general wait: 3000 calls, barriers and all_reduces of
 * one and two int64 (SUM, MAX) and of 2 floats (AVG), checked; every
 * 250th call one rank in turn comes 3-30 ms late (the others' short look
 * runs out and they sleep in the transport); every 40th a broadcast
 * (a rooted call, checked later: the quick way's next barrier or
 * all_reduce checks it once every rank is there); every 500th a run of
 * rooted calls (quick_rooted). */
static void mode_quick(void)
{
	struct timespec late = { 0, 0 };

	for (int i = 0; i < 3000; i++) {
		int64_t v[2] = { rank + i, 2 * rank - i }, want0 = 0, want1 = 0;
		float f[2] = { (float)rank, (float)(i % 7) };

		if (i % 250 == 0 && (i / 250) % size == rank) {
			late.tv_nsec = (3 + (i / 250) % 10 * 3) * 1000000L;
			nanosleep(&late, NULL);
		}
		for (int r = 0; r < size; r++) {
			want0 += r + i;
			want1 = r ? (2 * r - i > want1 ? 2 * r - i : want1) : -i;
		}
		switch (i % 5) {
		case 0:
		case 3:
			TRY(dr_barrier(NULL, NULL, NULL, 0));
			break;
		case 1:
			TRY(dr_all_reduce(v, 1, DR_INT64, DR_SUM, NULL, NULL));
			if (v[0] != want0)
				DIE("quick: call %d: sum %lld, want %lld", i,
				    (long long)v[0], (long long)want0);
			break;
		case 2:
			TRY(dr_all_reduce(v + 1, 1, DR_INT64, DR_MAX, NULL, NULL));
			if (v[1] != want1)
				DIE("quick: call %d: max %lld, want %lld", i,
				    (long long)v[1], (long long)want1);
			break;
		case 4:
			TRY(dr_all_reduce(f, 2, DR_FLOAT32, DR_AVG, NULL, NULL));
			if (f[0] != (float)(size - 1) / 2 || f[1] != (float)(i % 7))
				DIE("quick: call %d: avg %g %g, want %g %g", i,
				    f[0], f[1], (float)(size - 1) / 2,
				    (float)(i % 7));
			break;
		}
		if (i % 40 == 39) {
			int64_t b = rank == i % size ? 1000 + i : -1;

			TRY(dr_broadcast(&b, 1, DR_INT64, i % size, NULL, NULL));
			if (b != 1000 + i)
				DIE("quick: call %d: broadcast %lld", i, (long long)b);
		}
		if (i % 500 == 499)
			quick_rooted(i);
	}
}

/* One rank of the loop a training step makes: a small rooted call (the
 * writers go on at once, the call stays open on them until every rank
 * is seen past it) and a tiny all_reduce right after, which writes its
 * data where the others read the all_reduce two phases before, and
 * checks the rooted call once all are there (coll_shm_quick.c).  4000
 * rounds, the root changing every 7th; every 3rd round two rooted
 * calls, every 5th a barrier between; a rank in turn sleeps 0.2 ms
 * every 97th round, and yields every 13th: every value checked. */
static void mode_mixed(void)
{
	struct timespec nap = { 0, 200000L };

	/* First runs of 400 from one root, a barrier or an all_reduce
	 * after each: the writers run ahead up to LAG calls, so the call
	 * LAG back from the barrier must be checked before the barrier's
	 * arrival (else a writer let past it writes that record again). */
	for (int run = 0; run < 4; run++) {
		int64_t v = rank;

		for (int j = 0; j < 400; j++) {
			int32_t c = rank == 0 ? j : -1;

			if (run % 2) {
				TRY(dr_reduce(&c, 1, DR_INT32, DR_MAX, 0, NULL,
					      NULL));
				if (rank == 0 && c != j)
					DIE("mixed: run %d: reduce %d", run,
					    (int)c);
			} else {
				TRY(dr_broadcast(&c, 1, DR_INT32, 0, NULL,
						 NULL));
				if (c != j)
					DIE("mixed: run %d: broadcast %d", run,
					    (int)c);
			}
		}
		if (run < 2)
			TRY(dr_barrier(NULL, NULL, NULL, 0));
		TRY(dr_all_reduce(&v, 1, DR_INT64, DR_SUM, NULL, NULL));
		if (v != (int64_t)size * (size - 1) / 2)
			DIE("mixed: run %d: sum %lld", run, (long long)v);
	}
	for (int i = 0; i < 4000; i++) {
		int root = (i / 7) % size;
		int64_t b = rank == root ? 5000 + i : -1, v = rank + i, want = 0;
		float f[2] = { (float)rank, (float)(i % 11) };

		for (int r = 0; r < size; r++)
			want += r + i;
		if (i % 97 == 0 && (i / 97) % size == rank)
			nanosleep(&nap, NULL);
		if (i % 13 == rank % 13)
			sched_yield();
		for (int k = 0; k < (i % 3 ? 1 : 2); k++) {
			if ((i + k) % 2) {
				TRY(dr_broadcast(&b, 1, DR_INT64, root, NULL,
						 NULL));
				if (b != 5000 + i)
					DIE("mixed: round %d: broadcast %lld", i,
					    (long long)b);
			} else {
				int32_t c[2] = { rank, i % 100 };

				TRY(dr_reduce(c, 2, DR_INT32, DR_SUM, root,
					      NULL, NULL));
				if (rank == root &&
				    (c[0] != size * (size - 1) / 2 ||
				     c[1] != size * (i % 100)))
					DIE("mixed: round %d: reduce %d %d", i,
					    (int)c[0], (int)c[1]);
			}
		}
		if (i % 5 == 4)
			TRY(dr_barrier(NULL, NULL, NULL, 0));
		if (i % 2) {
			TRY(dr_all_reduce(&v, 1, DR_INT64, DR_SUM, NULL, NULL));
			if (v != want)
				DIE("mixed: round %d: sum %lld, want %lld", i,
				    (long long)v, (long long)want);
		} else {
			TRY(dr_all_reduce(f, 2, DR_FLOAT32, DR_MAX, NULL, NULL));
			if (f[0] != (float)(size - 1) || f[1] != (float)(i % 11))
				DIE("mixed: round %d: max %g %g", i, f[0], f[1]);
		}
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "all";
	dr_err e = dr_init_process_group(NULL, NULL);

	if (!strcmp(mode, "init")) {
		printf("init: %s: %s\n", dr_err_name(e), e ? dr_last_error() : "");
		return e ? 1 : 0;
	}
	if (e)
		DIE("init: %s: %s", dr_err_name(e), dr_last_error());
	rank = dr_get_rank();
	size = dr_get_world_size();
	if (!strcmp(mode, "all") && size > 16)
		DIE("mode all checks exact values for up to 16 ranks, not %d", size);
	if (!strcmp(mode, "all"))
		mode_all();
	else if (!strcmp(mode, "p2p"))
		mode_p2p();
	else if (!strcmp(mode, "async-barrier"))
		mode_async_barrier();
	else if (!strcmp(mode, "progress"))
		mode_progress(argc > 2 ? argv[2] : NULL);
	else if (!strcmp(mode, "mismatch"))
		mode_mismatch(argc > 2 ? argv[2] : NULL);
	else if (!strcmp(mode, "die"))
		mode_die();
	else if (!strcmp(mode, "stranger"))
		mode_stranger();
	else if (!strcmp(mode, "quick"))
		mode_quick();
	else if (!strcmp(mode, "mixed"))
		mode_mixed();
	else
		DIE("unknown mode %s", mode);
	TRY(dr_destroy_process_group());
	printf("rank %d: ok\n", rank);
	return 0;
}
