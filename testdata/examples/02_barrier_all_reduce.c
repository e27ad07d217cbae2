/*
 * 02_barrier_all_reduce.c - the source document's second example: every
 * rank draws torch.randn(3) after torch.manual_seed(0) (so all draw the
 * same three numbers), synchronises, and sums the tensors over all ranks.
 * The C twin of py/02_barrier_all_reduce.py; prints the same lines,
 * numbers included: torch_random.h is torch's CPU generator.
 *
 *   distrun -n 4 build/examples/02_barrier_all_reduce
 */
#include <stdio.h>
#include <stdlib.h>

#include "distrun.h"
#include "example.h"
#include "tensor_print.h"
#include "torch_random.h"

int main(void)
{
	line_buffered_stdout();

	torch_generator gen;
	torch_manual_seed(&gen, 0);
	check(dr_init_process_group("gloo", "env://"), "init_process_group");
	int rank = dr_get_rank();

	/* Each process generates its own random data */
	float t[3];
	torch_randn(&gen, t, 3);
	char *s = check_str(tensor_str(t, 3, DR_FLOAT32, NULL));
	printf("Process %d: initial tensor - %s\n", rank, s);
	free(s);

	/* Synchronise before computing */
	check(dr_barrier(NULL, NULL, NULL, 0), "barrier");

	/* all_reduce after the synchronisation */
	check(dr_all_reduce(t, 3, DR_FLOAT32, DR_SUM, NULL, NULL), "all_reduce");
	s = check_str(tensor_str(t, 3, DR_FLOAT32, NULL));
	printf("Process %d: reduced tensor - %s\n", rank, s);
	free(s);

	check(dr_destroy_process_group(), "destroy_process_group");
	return 0;
}
