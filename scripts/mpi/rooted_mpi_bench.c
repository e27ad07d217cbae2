/*
 * rooted_mpi_bench.c - scripts/rooted_bench.c on MPI: ITERS broadcasts
 * (from rank 0) and then reduces (float32 SUM to rank 0) of BYTES in a
 * loop, after 1000 unmeasured ones, the clock around the loop only, the
 * slowest rank's mean; then ITERS rounds of each followed by an
 * all_reduce of the same bytes (MPI_IN_PLACE, SUM): "op=bcast_ar" and
 * "op=reduce_ar", the time of a round.  The same output.
 *
 *   mpirun -n N rooted_mpi_bench [ITERS [BYTES]]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void call(int reduce, float *buf, float *out, int count)
{
	if (reduce)
		MPI_Reduce(buf, out, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
	else
		MPI_Bcast(buf, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
	static const char *const name[2] = { "broadcast", "reduce" };
	float buf[64] = { 1 }, out[64];
	int iters, count, rank, size;
	long bytes;

	MPI_Init(&argc, &argv);
	iters = argc > 1 ? atoi(argv[1]) : 100000;
	bytes = argc > 2 ? atol(argv[2]) : 4;
	if (iters < 1 || bytes < 4 || bytes > (long)sizeof(buf)) {
		fprintf(stderr, "usage: rooted_mpi_bench [ITERS [BYTES]]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	count = (int)(bytes / 4);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int op = 0; op < 2; op++) {
		double t, worst;

		for (int i = 0; i < 1000; i++)
			call(op, buf, out, count);
		MPI_Barrier(MPI_COMM_WORLD);
		t = MPI_Wtime();
		for (int i = 0; i < iters; i++)
			call(op, buf, out, count);
		t = MPI_Wtime() - t;
		MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (rank == 0)
			printf("op=%s n=%d bytes=%d us=%.3f\n", name[op], size,
			       count * 4, worst / iters * 1e6);
	}
	for (int op = 0; op < 2; op++) {
		float ar[64] = { 1 };
		double t = 0, worst;

		for (int i = 0; i < 1000 + iters; i++) {
			if (i == 1000) {
				MPI_Barrier(MPI_COMM_WORLD);
				t = MPI_Wtime();
			}
			call(op, buf, out, count);
			MPI_Allreduce(MPI_IN_PLACE, ar, count, MPI_FLOAT, MPI_SUM,
				      MPI_COMM_WORLD);
		}
		t = MPI_Wtime() - t;
		MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (rank == 0)
			printf("op=%s n=%d bytes=%d us=%.3f\n",
			       op ? "reduce_ar" : "bcast_ar", size, count * 4,
			       worst / iters * 1e6);
	}
	MPI_Finalize();
	return 0;
}
