/* scripts/mpi/anchor_mpi_bench.c - ../shared/anchors/mpi_bench.c as the
 * anchors measured it, unchanged below this comment (scripts/bench-anchor
 * builds it with mpicc and runs it beside scripts/anchor_bench.c). */
/* Anchor benchmark: MPI barrier and allreduce latency/bandwidth.
 * Prints one line per measurement: op=... n=... bytes=... us=... algbw_GBps=... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double now(void) { return MPI_Wtime(); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    size_t maxbytes = argc > 2 ? strtoull(argv[2], 0, 10) : (64u << 20);
    for (int i = 0; i < 50; i++) MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < iters; i++) MPI_Barrier(MPI_COMM_WORLD);
    double t = (now() - t0) / iters;
    if (rank == 0) printf("op=barrier n=%d bytes=0 us=%.2f\n", n, t * 1e6);
    float *buf = malloc(maxbytes);
    for (size_t i = 0; i < maxbytes / 4; i++) buf[i] = 1.0f;
    for (size_t bytes = 4; bytes <= maxbytes; bytes *= 16) {
        int cnt = (int)(bytes / 4);
        int it = bytes >= (1u << 20) ? 10 : iters;
        MPI_Allreduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = now();
        for (int i = 0; i < it; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        t = (now() - t0) / it;
        if (rank == 0)
            printf("op=allreduce n=%d bytes=%zu us=%.2f algbw_GBps=%.3f busbw_GBps=%.3f\n", n, bytes,
                   t * 1e6, bytes / t / 1e9, bytes / t / 1e9 * 2.0 * (n - 1) / n);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
