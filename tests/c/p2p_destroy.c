/*
 * p2p_destroy.c - point-to-point work still out when a rank destroys its
 * process group: `distrun -n 2 build/tests/p2p_destroy MODE`.
 *
 *   recv      each rank posts an irecv that nobody matches, then
 *             destroys: destroy returns at once (under 3 s, for a loaded
 *             machine; it used to wait for ever) and the
 *             irecv's work fails with DR_EABORTED (or DR_EPEER, if the
 *             peer's goodbye came first), never hangs
 *   send      rank 0 posts an isend of 16 MiB that rank 1 never
 *             receives (it waits 4 s in its own code, then destroys);
 *             rank 0 destroys: that returns after its sends' drain (2 s,
 *             under 4), and the work fails with DR_EABORTED, or succeeds
 *             where rank 1's transport took the bytes in (TCP keeps
 *             what comes before its receive)
 *   late      rank 0 isends 4 bytes and destroys at once; rank 1 receives
 *             them 300 ms later: the message arrives (a send that can
 *             complete is not cut short)
 *
 * Prints "rank R: MODE ok (destroy S s)".  Anything else prints "rank R:
 * ..." on stderr and exits 1.
 */
#include <distrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank = -1, size;

#include "check.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Destroys the group; its time in seconds, which must be below limit. */
static double destroy_within(double limit)
{
	double t0 = now_s(), t;

	TRY(dr_destroy_process_group());
	t = now_s() - t0;
	if (t >= limit)
		DIE("destroy took %.3f s (limit %.0f s)", t, limit);
	return t;
}

/* The work must have failed as given up by destroy. */
static void must_abort(dr_work *w, const char *what)
{
	dr_err e = dr_work_wait(w);

	if (e != DR_EABORTED && e != DR_EPEER)
		DIE("the %s still out gave %s (%s), not DR_EABORTED", what,
		    dr_err_name(e), e ? dr_last_error() : "");
	dr_work_free(w);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	dr_work *w = NULL;
	double t = 0;

	TRY(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	size = dr_get_world_size();
	if (size != 2)
		DIE("run with -n 2");
	if (!strcmp(mode, "recv")) {
		int x = 0;

		TRY(dr_irecv(&x, 1, DR_INT32, 1 - rank, 77, NULL, &w));
		t = destroy_within(3);
		must_abort(w, "irecv");
	} else if (!strcmp(mode, "send")) {
		size_t n = 4u << 20;
		float *buf = calloc(n, sizeof(float));

		if (!buf)
			DIE("out of memory");
		if (rank == 0)
			TRY(dr_isend(buf, n, DR_FLOAT32, 1, 5, NULL, &w));
		TRY(dr_barrier(NULL, NULL, NULL, 0));
		if (rank == 1)
			usleep(4000 * 1000);
		t = destroy_within(rank ? 5 : 4);
		if (w) {
			dr_err e = dr_work_wait(w);

			if (e && e != DR_EABORTED && e != DR_EPEER)
				DIE("the isend still out gave %s (%s)",
				    dr_err_name(e), dr_last_error());
			dr_work_free(w);
		}
		free(buf);
	} else if (!strcmp(mode, "late")) {
		int32_t x = rank ? 0 : 4242;

		if (rank == 0) {
			TRY(dr_isend(&x, 1, DR_INT32, 1, 9, NULL, &w));
			t = destroy_within(5);
			TRY(dr_work_wait(w));
			dr_work_free(w);
		} else {
			usleep(300 * 1000);
			TRY(dr_recv(&x, 1, DR_INT32, 0, 9, NULL, NULL));
			if (x != 4242)
				DIE("received %d, not 4242", x);
			t = destroy_within(5);
		}
	} else {
		DIE("usage: p2p_destroy recv|send|late");
	}
	printf("rank %d: %s ok (destroy %.3f s)\n", rank, mode, t);
	return 0;
}
