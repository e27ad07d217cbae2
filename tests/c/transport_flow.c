/*
 * transport_flow.c - large messages that arrive before their receive is
 * posted.  The transport leaves such a message in the socket ("parks" the
 * peer) until a receive wants it, so that the payload lands straight in
 * the receive's buffer; these modes check that every path around that
 * still delivers the right bytes, and that nothing waits for ever:
 *
 *   crossed  ranks 0 and 1 each send 8 MiB to the other with a blocking
 *            send before posting the receive (neither receive is posted
 *            while both senders wait)
 *   tags     rank 0 sends 4 MiB with tag 1, then 4 MiB with tag 2; rank 1
 *            receives tag 2 first (it is behind the parked tag-1 message)
 *   ahead    rank 0 broadcasts 8 MiB ten times while rank 1 starts late;
 *            then every rank gathers 2 MiB pieces ten times, the root late
 *   any      rank 1 receives 4 MiB from DR_ANY_SOURCE after it was parked
 *   dies F   rank 0 sends 32 MiB that rank 1 never receives, then dies;
 *            rank 1 waits for rank 2 and must get DR_EPEER naming rank 0;
 *            rank 2 stays until rank 1 has created file F (its leaving
 *            first would also end rank 1's wait)
 *
 * Each rank prints "rank R: ok" at the end, or the error and exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "distrun.h"

static int rank, world;

static void die(const char *what, dr_err err)
{
	fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, dr_err_name(err),
		dr_last_error());
	exit(1);
}

#define CHECK(what, call) do { dr_err e_ = (call); if (e_) die(what, e_); } while (0)

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Word i of message `seed` holds seed * 1000003 + i. */
static uint32_t *make(size_t n, uint32_t seed)
{
	uint32_t *b = malloc(n * sizeof(*b));
	if (!b)
		die("malloc", DR_ENOMEM);
	for (size_t i = 0; i < n; i++)
		b[i] = seed * 1000003u + (uint32_t)i;
	return b;
}

static void expect(const uint32_t *b, size_t n, uint32_t seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != seed * 1000003u + (uint32_t)i) {
			fprintf(stderr, "rank %d: %s: word %zu is %u, expected %u\n",
				rank, what, i, b[i], seed * 1000003u + (uint32_t)i);
			exit(1);
		}
}

static void crossed(void)
{
	size_t n = (size_t)2 << 20; /* 8 MiB */
	int other = 1 - rank;
	uint32_t *out = make(n, 10 + (uint32_t)rank), *in = calloc(n, 4);

	if (rank > 1)
		return;
	CHECK("send", dr_send(out, n, DR_INT32, other, 7, NULL));
	CHECK("recv", dr_recv(in, n, DR_INT32, other, 7, NULL, NULL));
	expect(in, n, 10 + (uint32_t)other, "crossed message");
	free(out);
	free(in);
}

static void tags(void)
{
	size_t n = (size_t)1 << 20; /* 4 MiB */

	if (rank == 0) {
		uint32_t *a = make(n, 1), *b = make(n, 2);
		dr_work *w1, *w2;
		CHECK("isend tag 1", dr_isend(a, n, DR_INT32, 1, 1, NULL, &w1));
		CHECK("isend tag 2", dr_isend(b, n, DR_INT32, 1, 2, NULL, &w2));
		CHECK("wait tag 1", dr_work_wait(w1));
		CHECK("wait tag 2", dr_work_wait(w2));
		dr_work_free(w1);
		dr_work_free(w2);
		free(a);
		free(b);
	} else if (rank == 1) {
		uint32_t *in = calloc(n, 4);
		nap_ms(200); /* the tag-1 message is parked by now */
		CHECK("recv tag 2", dr_recv(in, n, DR_INT32, 0, 2, NULL, NULL));
		expect(in, n, 2, "tag 2");
		CHECK("recv tag 1", dr_recv(in, n, DR_INT32, 0, 1, NULL, NULL));
		expect(in, n, 1, "tag 1");
		free(in);
	}
}

static void ahead(void)
{
	size_t n = (size_t)2 << 20, piece = (size_t)512 << 10;
	uint32_t *b = calloc(n, 4), *all = calloc(piece * (size_t)world, 4);

	if (rank == 1)
		nap_ms(200);
	for (uint32_t it = 0; it < 10; it++) {
		if (rank == 0) {
			uint32_t *src = make(n, 100 + it);
			memcpy(b, src, n * 4);
			free(src);
		}
		CHECK("broadcast", dr_broadcast(b, n, DR_INT32, 0, NULL, NULL));
		expect(b, n, 100 + it, "broadcast");
	}
	if (rank == 0)
		nap_ms(200);
	for (uint32_t it = 0; it < 10; it++) {
		uint32_t *mine = make(piece, 200 + it * 16 + (uint32_t)rank);
		CHECK("gather", dr_gather(mine, all, piece, DR_INT32, 0, NULL, NULL));
		if (rank == 0)
			for (int r = 0; r < world; r++)
				expect(all + (size_t)r * piece, piece,
				       200 + it * 16 + (uint32_t)r, "gather");
		free(mine);
	}
	free(b);
	free(all);
}

static void any(void)
{
	size_t n = (size_t)1 << 20;

	if (rank == 0) {
		uint32_t *a = make(n, 5);
		CHECK("send", dr_send(a, n, DR_INT32, 1, 3, NULL));
		free(a);
	} else if (rank == 1) {
		uint32_t *in = calloc(n, 4);
		int src = -1;
		nap_ms(200);
		CHECK("recv", dr_recv(in, n, DR_INT32, DR_ANY_SOURCE, 3, NULL, &src));
		expect(in, n, 5, "any-source message");
		if (src != 0) {
			fprintf(stderr, "rank 1: sender %d, expected 0\n", src);
			exit(1);
		}
		free(in);
	}
}

static void dies(const char *done_file)
{
	size_t n = (size_t)8 << 20; /* 32 MiB */

	if (rank == 0) {
		uint32_t *a = make(n, 9);
		dr_work *w;
		CHECK("isend", dr_isend(a, n, DR_INT32, 1, 4, NULL, &w));
		nap_ms(300);
		fprintf(stderr, "rank 0: exiting on purpose\n");
		_exit(3);
	}
	if (rank == 1) {
		uint32_t x;
		/* rank 2 never sends: only rank 0's death can end this */
		dr_err e = dr_recv(&x, 1, DR_INT32, 2, 4, NULL, NULL);
		if (e != DR_EPEER) {
			fprintf(stderr, "rank 1: got %s (%s), expected DR_EPEER\n",
				dr_err_name(e), dr_last_error());
			exit(1);
		}
		printf("rank 1: DR_EPEER: %s\n", dr_last_error());
		fflush(stdout);
		FILE *f = fopen(done_file, "w");
		if (f)
			fclose(f);
		exit(0);
	}
	/* rank 2: stay until rank 1 has its answer (at most 2 minutes: a
	 * slow rank 1, under a sanitizer, took longer than a fixed nap). */
	for (int i = 0; i < 1200 && access(done_file, F_OK); i++)
		nap_ms(100);
	exit(0);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	CHECK("init", dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	world = dr_get_world_size();
	if (!strcmp(mode, "crossed"))
		crossed();
	else if (!strcmp(mode, "tags"))
		tags();
	else if (!strcmp(mode, "ahead"))
		ahead();
	else if (!strcmp(mode, "any"))
		any();
	else if (!strcmp(mode, "dies"))
		dies(argc > 2 ? argv[2] : "dies-done");
	else {
		fprintf(stderr, "usage: transport_flow crossed|tags|ahead|any|dies FILE\n");
		return 2;
	}
	CHECK("barrier", dr_barrier(NULL, NULL, NULL, 0));
	CHECK("destroy", dr_destroy_process_group());
	printf("rank %d: ok\n", rank);
	return 0;
}
