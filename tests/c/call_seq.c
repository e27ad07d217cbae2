/*
 * call_seq.c - a random sequence of collectives, the same on every rank
 * (a seed), with exact data checked after each call; with a deviation,
 * rank size/2 changes call D of it: its count (HOW 0), its root (1) or
 * the collective (2).  Each rank stops at its first error and prints
 *
 *   rank R: DONE                  (every call right, then a barrier)
 *   rank R: error at call K: DR_EMISMATCH: ...
 *   rank R: WRONG <call> at call K
 *
 *   call_seq SEED CALLS [D HOW [small]]   (D -1 or absent: no deviation)
 *
 * "small": barrier, all_reduce, broadcast and reduce of 1, 2 or 6
 * floats alone (the lean way's calls, coll_shm_quick.c: the tiny data
 * of an all_reduce on the lean lines, a rooted call's in its record),
 * rooted anywhere.
 *
 * Calls: barrier, all_reduce, broadcast, reduce, all_gather, gather,
 * scatter, reduce_scatter, all_to_all, all_to_all_v (even splits), of
 * 1, 3, 6, 100, 5000 or 70000 floats, rooted anywhere.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"

enum { BAR, AR, BC, RD, AG, GA, SC, RS, A2A, A2AV, NKIND };
static const char *kname[NKIND] = {
	"barrier", "all_reduce", "broadcast", "reduce", "all_gather",
	"gather", "scatter", "reduce_scatter", "all_to_all", "all_to_all_v",
};
static const size_t counts[] = { 1, 3, 6, 100, 5000, 70000 };
#define CMAX 70001

static unsigned long long state;

static unsigned rnd(void)
{
	state = state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (unsigned)(state >> 33);
}

/* Runs call kind of c floats rooted at root; 0 and the data right, else
 * the error (printed), or -1 for wrong data (printed). */
static int run(int k, int kind, size_t c, int root, int r, int n, float *s,
	       float *b, size_t *sc)
{
	float want;
	dr_err e = DR_OK;
	int bad = 0;

	for (int j = 0; j < n; j++)
		sc[j] = sc[n + j] = c;
	switch (kind) {
	case BAR:
		e = dr_barrier(NULL, NULL, NULL, 0);
		break;
	case AR:
	case RD:
		for (size_t i = 0; i < c; i++)
			b[i] = (float)(r + 1 + (int)(i % 7));
		e = kind == AR ? dr_all_reduce(b, c, DR_FLOAT32, DR_SUM, NULL,
					       NULL)
			       : dr_reduce(b, c, DR_FLOAT32, DR_SUM, root, NULL,
					   NULL);
		for (size_t i = 0; !e && i < c; i++) {
			want = kind == AR || r == root
				       ? (float)(n * (n + 1) / 2 + n * (int)(i % 7))
				       : (float)(r + 1 + (int)(i % 7));
			bad |= b[i] != want;
		}
		break;
	case BC:
		for (size_t i = 0; i < c; i++)
			b[i] = r == root ? (float)(root * 1000 + (int)(i % 100))
					 : -1;
		e = dr_broadcast(b, c, DR_FLOAT32, root, NULL, NULL);
		for (size_t i = 0; !e && i < c; i++)
			bad |= b[i] != (float)(root * 1000 + (int)(i % 100));
		break;
	case AG:
	case GA:
		for (size_t i = 0; i < c; i++)
			s[i] = (float)(r * 1000 + (int)(i % 100));
		memset(b, 0, c * (size_t)n * sizeof(float));
		e = kind == AG ? dr_all_gather(s, b, c, DR_FLOAT32, NULL, NULL)
			       : dr_gather(s, b, c, DR_FLOAT32, root, NULL, NULL);
		if (!e && (kind == AG || r == root))
			for (int j = 0; j < n; j++)
				for (size_t i = 0; i < c; i++)
					bad |= b[(size_t)j * c + i] !=
					       (float)(j * 1000 + (int)(i % 100));
		break;
	case SC:
		for (int j = 0; j < n; j++)
			for (size_t i = 0; i < c; i++)
				s[(size_t)j * c + i] =
					r == root ? (float)(j * 1000 + (int)(i % 100))
						  : -5;
		e = dr_scatter(s, b, c, DR_FLOAT32, root, NULL, NULL);
		for (size_t i = 0; !e && i < c; i++)
			bad |= b[i] != (float)(r * 1000 + (int)(i % 100));
		break;
	case RS:
		for (int j = 0; j < n; j++)
			for (size_t i = 0; i < c; i++)
				s[(size_t)j * c + i] = (float)(r + j + (int)(i % 5));
		e = dr_reduce_scatter(s, b, c, DR_FLOAT32, DR_SUM, NULL, NULL);
		for (size_t i = 0; !e && i < c; i++)
			bad |= b[i] != (float)(n * (n - 1) / 2 +
					       n * (r + (int)(i % 5)));
		break;
	default: /* A2A, A2AV */
		for (int j = 0; j < n; j++)
			for (size_t i = 0; i < c; i++)
				s[(size_t)j * c + i] =
					(float)(r * 1000 + j * 10 + (int)(i % 7));
		e = kind == A2A ? dr_all_to_all(s, b, c, DR_FLOAT32, NULL, NULL)
				: dr_all_to_all_v(s, sc, b, sc + n, DR_FLOAT32,
						  NULL, NULL);
		for (int j = 0; !e && j < n; j++)
			for (size_t i = 0; i < c; i++)
				bad |= b[(size_t)j * c + i] !=
				       (float)(j * 1000 + r * 10 + (int)(i % 7));
		break;
	}
	if (e) {
		printf("rank %d: error at call %d: %s: %s\n", r, k,
		       dr_err_name(e), dr_last_error());
		return e;
	}
	if (bad) {
		printf("rank %d: WRONG %s at call %d\n", r, kname[kind], k);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const int small_kinds[] = { BAR, AR, BC, RD };
	static const size_t small_counts[] = { 1, 2, 6 };
	int r, n, ncalls, dev, how, small, rc = 0;
	float *s, *b;
	size_t *sc;
	dr_err e;

	if ((argc != 3 && argc != 5 && argc != 6) ||
	    (argc == 6 && strcmp(argv[5], "small"))) {
		fprintf(stderr, "usage: call_seq SEED CALLS [D HOW [small]]\n");
		return 2;
	}
	small = argc == 6;
	state = strtoull(argv[1], NULL, 10);
	ncalls = atoi(argv[2]);
	dev = argc >= 5 ? atoi(argv[3]) : -1;
	how = argc >= 5 ? atoi(argv[4]) : 0;
	if ((e = dr_init_process_group(NULL, NULL))) {
		printf("rank ?: init: %s\n", dr_last_error());
		return 1;
	}
	r = dr_get_rank();
	n = dr_get_world_size();
	s = malloc((size_t)CMAX * (size_t)n * sizeof(float));
	b = malloc((size_t)CMAX * (size_t)n * sizeof(float));
	sc = malloc(2 * (size_t)n * sizeof(size_t));
	if (!s || !b || !sc)
		return 1;
	for (int k = 0; k < ncalls && !rc; k++) {
		int kind = (int)(rnd() % NKIND), root = (int)(rnd() % (unsigned)n);
		size_t c = counts[rnd() % 6];

		if (small) {
			kind = small_kinds[rnd() % 4];
			c = small_counts[rnd() % 3];
		}

		if (k == dev && r == n / 2) {
			if (how == 0)
				c++;
			else if (how == 1)
				root = (root + 1) % n;
			else
				kind = (kind + 1 + (int)(rnd() % (NKIND - 1))) % NKIND;
		}
		rc = run(k, kind, c, root, r, n, s, b, sc);
	}
	if (!rc && (e = dr_barrier(NULL, NULL, NULL, 0))) {
		printf("rank %d: error at the last barrier: %s: %s\n", r,
		       dr_err_name(e), dr_last_error());
		rc = e;
	}
	if (!rc)
		printf("rank %d: DONE\n", r);
	fflush(stdout);
	dr_destroy_process_group();
	free(s);
	free(b);
	free(sc);
	return rc == DR_EMISMATCH || !rc ? 0 : 1;
}
