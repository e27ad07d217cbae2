/*
 * ring_mem.c - what a large all_reduce reserves: `distrun -n N ring_mem
 * BYTES` runs one all_reduce of BYTES of float32 and prints, on every
 * rank, how much its address space (VmPeak) grew, in KiB.  With N not a
 * power of two the all_reduce takes the pipelined ring; its per-step
 * slots must be bounded by the piece, not a fixed 512 KiB a step (issue
 * 8, item 13: 1 MiB at 255 ranks reserved 127 MiB).
 */
#include <distrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long vm_peak_kib(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmPeak:", 7))
			v = strtol(line + 7, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 1 << 20;
	size_t n = bytes / sizeof(float);
	float *x = malloc(n * sizeof(float));
	long before, after;

	if (!x || dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "init: %s\n", dr_last_error());
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		x[i] = 1;
	/* A first small call opens what every call needs; then measure. */
	if (dr_all_reduce(x, 1, DR_FLOAT32, DR_SUM, NULL, NULL))
		goto fail;
	x[0] = 1;
	before = vm_peak_kib();
	if (dr_all_reduce(x, n, DR_FLOAT32, DR_SUM, NULL, NULL))
		goto fail;
	after = vm_peak_kib();
	for (size_t i = 0; i < n; i++)
		if (x[i] != (float)dr_get_world_size()) {
			fprintf(stderr, "x[%zu] = %g\n", i, x[i]);
			return 1;
		}
	printf("rank %d: vmpeak grew %ld KiB\n", dr_get_rank(), after - before);
	dr_destroy_process_group();
	free(x);
	return 0;
fail:
	fprintf(stderr, "all_reduce: %s\n", dr_last_error());
	return 1;
}
