/*
 * 03_async_barrier.c - the source document's third example: rank 0 is busy
 * for 2 s while the others start an asynchronous barrier, do other work,
 * and only then wait for it.  No rank gets past the wait before rank 0 has
 * reached the barrier.  The C twin of py/03_async_barrier.py; prints the
 * same lines.
 *
 *   distrun -n 4 build/examples/03_async_barrier
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* nanosleep, also under plain -std=c11 */
#endif

#include <stdio.h>
#include <time.h>

#include "distrun.h"
#include "example.h"

int main(void)
{
	line_buffered_stdout();

	check(dr_init_process_group("gloo", "env://"), "init_process_group");
	int rank = dr_get_rank();

	/* Each process does its own work */
	if (rank == 0) {
		printf("Process 0: performing heavy computation...\n");
		struct timespec two_s = { 2, 0 };
		while (nanosleep(&two_s, &two_s) != 0)
			; /* interrupted: sleep the rest */
	} else {
		printf("Process %d: waiting for process 0...\n", rank);
	}

	/* Asynchronous barrier */
	dr_work *work;
	check(dr_barrier(NULL, &work, NULL, 0), "barrier");

	/* Other tasks can run while waiting */
	printf("Process %d: doing other work while waiting...\n", rank);

	/* Wait for the barrier to complete */
	check(dr_work_wait(work), "work_wait");
	dr_work_free(work);
	printf("Process %d: barrier complete, continuing work!\n", rank);

	check(dr_destroy_process_group(), "destroy_process_group");
	return 0;
}
