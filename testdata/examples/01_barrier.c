/*
 * 01_barrier.c - the source document's first example: each rank makes its
 * own tensor, prints it, waits at a barrier for every other rank, and says
 * so.  The C twin of py/01_barrier.py; prints the same lines.
 *
 *   distrun -n 4 build/examples/01_barrier
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "distrun.h"
#include "example.h"
#include "tensor_print.h"

int main(void)
{
	line_buffered_stdout();

	/* Initialise the distributed environment */
	check(dr_init_process_group("gloo", "env://"), "init_process_group");
	int rank = dr_get_rank();
	int world_size = dr_get_world_size();
	(void)world_size; /* read but unused, as in the original */

	/* Each process creates its own tensor */
	int64_t t[3] = { rank * 10, rank * 10 + 1, rank * 10 + 2 };
	char *s = check_str(tensor_str(t, 3, DR_INT64, NULL));
	printf("Process %d: tensor before sync - %s\n", rank, s);
	free(s);

	/* Synchronise all processes */
	check(dr_barrier(NULL, NULL, NULL, 0), "barrier");

	/* After the barrier all processes continue */
	printf("Process %d: all processes synced!\n", rank);

	check(dr_destroy_process_group(), "destroy_process_group");
	return 0;
}
