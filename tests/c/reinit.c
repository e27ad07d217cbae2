/*
 * reinit.c - a program that destroys its process group and joins a new
 * one, again and again, its ranks out of step:
 * `reinit ROUNDS [SKEW_MS]` under any launcher.
 *
 * Each round: init, then a small and a 256 KiB all_reduce, a broadcast,
 * a barrier and a ring of sends, every value checked; then one rank (the
 * round's late rank: rank 0, whose store the others use, every other
 * round, else the round number modulo the size) waits SKEW_MS (default
 * 300) before it destroys the group, while the others destroy at once
 * and init again: they reach the next round's rendezvous while the late
 * rank is still in the last group (its store still serving, its flags
 * and rings still in use).
 *
 * Prints "rank R: reinit ok (N rounds)"; on a failure "rank R: round K:
 * CALL: DR_E...: message" and exits 1.
 */
#include <distrun.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int rank = -1, size;

#include "check.h"

#define ROUND_TRY(k, call)                                                   \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_)                                                      \
			DIE("round %d: %s: %s: %s", k, #call,               \
			    dr_err_name(e_), dr_last_error());               \
	} while (0)

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void round_work(int k)
{
	static float big[64 << 10];
	int64_t v = rank + k, want = 0;
	int32_t b = rank == k % size ? 1000 + k : -1, token = k;
	size_t n = sizeof(big) / sizeof(big[0]);

	for (int r = 0; r < size; r++)
		want += r + k;
	ROUND_TRY(k, dr_all_reduce(&v, 1, DR_INT64, DR_SUM, NULL, NULL));
	if (v != want)
		DIE("round %d: all_reduce gave %lld, want %lld", k, (long long)v,
		    (long long)want);
	for (size_t i = 0; i < n; i++)
		big[i] = (float)(rank + 1);
	ROUND_TRY(k, dr_all_reduce(big, n, DR_FLOAT32, DR_SUM, NULL, NULL));
	for (size_t i = 0; i < n; i += 997)
		if (big[i] != (float)size * (size + 1) / 2)
			DIE("round %d: element %zu of the large all_reduce is %g",
			    k, i, (double)big[i]);
	ROUND_TRY(k, dr_broadcast(&b, 1, DR_INT32, k % size, NULL, NULL));
	if (b != 1000 + k)
		DIE("round %d: broadcast gave %d", k, (int)b);
	ROUND_TRY(k, dr_barrier(NULL, NULL, NULL, 0));
	if (size < 2)
		return;
	if (rank == 0) {
		ROUND_TRY(k, dr_send(&token, 1, DR_INT32, 1, k, NULL));
		ROUND_TRY(k, dr_recv(&token, 1, DR_INT32, size - 1, k, NULL, NULL));
		if (token != k + size - 1)
			DIE("round %d: the ring's token came back as %d", k,
			    (int)token);
	} else {
		ROUND_TRY(k, dr_recv(&token, 1, DR_INT32, rank - 1, k, NULL, NULL));
		token++;
		ROUND_TRY(k, dr_send(&token, 1, DR_INT32, (rank + 1) % size, k,
				     NULL));
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 6;
	int skew = argc > 2 ? atoi(argv[2]) : 300;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int k = 0; k < rounds; k++) {
		int late;

		ROUND_TRY(k, dr_init_process_group(NULL, NULL));
		rank = dr_get_rank();
		size = dr_get_world_size();
		round_work(k);
		late = k % 2 ? k % size : 0;
		if (rank == late)
			sleep_ms(skew);
		ROUND_TRY(k, dr_destroy_process_group());
	}
	printf("rank %d: reinit ok (%d rounds)\n", rank, rounds);
	return 0;
}
