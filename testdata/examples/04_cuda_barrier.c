/*
 * 04_cuda_barrier.c - the source document's fourth example: each rank puts
 * a tensor on its own GPU and synchronises through a barrier that names the
 * device, so that work queued there is done everywhere when it returns.
 * Where there is no GPU the tensor stays on the CPU and the barrier is a
 * plain one, as in the original.  The C twin of py/04_cuda_barrier.py;
 * prints the same lines ("Process 1 on cpu: ...", or with CUDA
 * "Process 1 on cuda:1: tensor - tensor([1, 2, 3], device='cuda:1')").
 *
 * One change from the original, which asks dist.get_rank() for its device
 * before the process group exists (torch raises an error there): the
 * device comes from LOCAL_RANK, which the launcher sets before the program
 * starts, modulo the devices present, so ranks share GPUs when there are
 * fewer GPUs than ranks.
 *
 *   distrun -n 4 build/examples/04_cuda_barrier
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "distrun.h"
#include "example.h"
#include "tensor_print.h"

/* This rank's index on this machine: LOCAL_RANK, 0 if unset. */
static int local_rank(void)
{
	const char *s = getenv("LOCAL_RANK");
	if (!s || !*s)
		return 0;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > 1 << 20) {
		fprintf(stderr, "LOCAL_RANK=%s is not a rank number\n", s);
		exit(1);
	}
	return (int)v;
}

int main(void)
{
	line_buffered_stdout();

	int device = -1; /* -1: the CPU */
	char device_name[32] = "cpu";
	if (dr_cuda_available()) {
		device = local_rank() % dr_cuda_device_count();
		snprintf(device_name, sizeof device_name, "cuda:%d", device);
	}

	check(dr_init_process_group("gloo", "env://"), "init_process_group");
	int rank = dr_get_rank();

	/* Each process creates a tensor on its own device */
	int64_t t[3] = { rank, rank + 1, rank + 2 };
	void *dev_t = NULL; /* t on the device: .to(device) */
	if (device >= 0) {
		check(dr_cuda_alloc(device, sizeof t, &dev_t), "cuda alloc");
		check(dr_cuda_memcpy(dev_t, t, sizeof t), "copy to the device");
		/* Print what is on the device, as torch does (it copies the
		 * tensor back to print it). */
		check(dr_cuda_memcpy(t, dev_t, sizeof t), "copy from the device");
	}
	char *s = check_str(tensor_str(t, 3, DR_INT64, device_name));
	printf("Process %d on %s: tensor - %s\n", rank, device_name, s);
	free(s);

	/* Synchronise, naming the devices */
	const int *device_ids = device >= 0 ? &device : NULL;
	check(dr_barrier(NULL, NULL, device_ids, device >= 0 ? 1 : 0), "barrier");

	printf("Process %d: all devices synchronized!\n", rank);
	check(dr_cuda_free(dev_t), "cuda free");

	check(dr_destroy_process_group(), "destroy_process_group");
	return 0;
}
