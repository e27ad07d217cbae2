/*
 * barrier_order.cu - GPU test: dr_barrier(device_ids) waits for the work
 * queued on the devices before it, on every rank.  Run under distrun
 * (scripts/test-gpu: -n 2 and -n 4, all ranks may share one GPU).
 *
 * Each rank queues a kernel that sleeps (rank-dependent, 150 ms and more,
 * on the GPU's global timer) and then sets its flag in host memory that
 * every rank maps (a shared file registered with CUDA), then calls the
 * barrier and, without synchronising anything itself, reads the flags:
 * every rank's flag must be set, its own because its stream was
 * synchronised, the others' because their ranks entered the host barrier
 * only after synchronising theirs.  Without the stream synchronisation the
 * barrier would return in microseconds with the flags still clear.  Cases:
 * blocking barrier on the legacy default stream, asynchronous barrier
 * (work handle), a stream chosen with dr_cuda_set_stream,
 * cudaStreamPerThread selected with an asynchronous barrier, the
 * device-wide dr_cuda_barrier_device (blocking and asynchronous) on a
 * stream nobody selected, and a device id out of range.  Prints "ok - ..." / "not ok - ..." per case; exits 1 if
 * any failed, 0 otherwise.
 */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "distrun.h"

#define MAXRANKS 64

static __device__ unsigned long long global_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Sleeps ns on the GPU, then sets *flag to value. */
static __global__ void sleep_then_set(volatile int *flag, int value,
				      unsigned long long ns)
{
	unsigned long long t0 = global_ns();
	while (global_ns() - t0 < ns)
		__nanosleep(100000);
	__threadfence_system();
	*flag = value;
}

static int rank, nranks, failures;

static void report(int ok, const char *name, const char *detail)
{
	printf("%s - rank %d: %s%s%s\n", ok ? "ok" : "not ok", rank, name,
	       detail ? ": " : "", detail ? detail : "");
	if (!ok)
		failures++;
}

/* Flags of every rank: in a file all ranks map, so each can check the
 * others'; falls back to this rank's own flag alone if the driver will
 * not register shared memory. */
static volatile int *flags;
static int shared_flags;

static void map_flags(void)
{
	char path[128];
	const char *port = getenv("MASTER_PORT");
	size_t len = 4096;
	void *p = MAP_FAILED;
	int fd = -1, registered = 0;

	/* Rank 0 makes the file afresh (zeros; a stale one from a crashed
	 * run could hold flags already set), the others open it after. */
	snprintf(path, sizeof path, "/dev/shm/distrun-gpu-test-%s",
		 port ? port : "0");
	if (rank == 0) {
		unlink(path);
		fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd >= 0 && ftruncate(fd, (off_t)len) != 0) {
			close(fd);
			fd = -1;
		}
	}
	dr_barrier(NULL, NULL, NULL, 0);
	if (rank != 0)
		fd = open(path, O_RDWR);
	if (fd >= 0) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	}
	if (p != MAP_FAILED)
		registered = cudaHostRegister(p, len, cudaHostRegisterMapped) ==
			cudaSuccess;
	cudaGetLastError();
	/* Shared flags only if every rank has them. */
	dr_all_reduce(&registered, 1, DR_INT32, DR_MIN, NULL, NULL);
	if (rank == 0)
		unlink(path);
	if (registered) {
		flags = (volatile int *)p;
		shared_flags = 1;
		return;
	}
	printf("note - rank %d: cannot share a mapping registered with CUDA; "
	       "checking this rank's own flag only\n", rank);
	void *h = NULL;
	if (cudaHostAlloc(&h, len, cudaHostAllocMapped) != cudaSuccess) {
		fprintf(stderr, "rank %d: cudaHostAlloc failed\n", rank);
		exit(1);
	}
	memset(h, 0, len);
	flags = (volatile int *)h;
}

/* After a barrier: 1 if every flag we can see holds value or more (a fast
 * rank may already have finished the next case's kernel: the values
 * grow from case to case). */
static int flags_set(int value, char *detail, size_t size)
{
	int lo = shared_flags ? 0 : rank, hi = shared_flags ? nranks : rank + 1;
	for (int r = lo; r < hi; r++)
		if (flags[r] < value) {
			snprintf(detail, size, "rank %d's kernel had not finished "
				 "when the barrier returned", r);
			return 0;
		}
	return 1;
}

/* Queues the sleeping kernel on stream (flag of this rank := value). */
static void queue_sleeper(cudaStream_t stream, int value)
{
	int *dflag = NULL;
	cudaHostGetDevicePointer((void **)&dflag, (void *)(flags + rank), 0);
	unsigned long long ns = (150ull + 50ull * (unsigned long long)rank) * 1000000ull;
	sleep_then_set<<<1, 1, 0, stream>>>(dflag, value, ns);
}

static void check_case(const char *name, dr_err err, int value)
{
	char detail[256] = "";
	if (err != DR_OK) {
		snprintf(detail, sizeof detail, "%s: %s", dr_err_name(err),
			 dr_last_error());
		report(0, name, detail);
		return;
	}
	int ok = flags_set(value, detail, sizeof detail);
	report(ok, name, ok ? NULL : detail);
}

int main(void)
{
	const char *lr = getenv("LOCAL_RANK");
	dr_err err;

	if (!dr_cuda_available()) {
		printf("skip - CUDA not available\n");
		return 77;
	}
	if ((err = dr_init_process_group(NULL, NULL))) {
		fprintf(stderr, "init: %s\n", dr_last_error());
		return 1;
	}
	rank = dr_get_rank();
	nranks = dr_get_world_size();
	if (nranks > MAXRANKS) {
		fprintf(stderr, "at most %d ranks\n", MAXRANKS);
		return 1;
	}
	int dev = (lr ? atoi(lr) : rank) % dr_cuda_device_count();
	cudaSetDevice(dev);
	map_flags();

	/* 1: blocking, legacy default stream. */
	queue_sleeper(0, 1);
	err = dr_barrier(NULL, NULL, &dev, 1);
	check_case("blocking barrier waits for the default stream", err, 1);

	/* 2: asynchronous form. */
	queue_sleeper(0, 2);
	dr_work *work = NULL;
	err = dr_barrier(NULL, &work, &dev, 1);
	if (!err)
		err = dr_work_wait(work);
	dr_work_free(work);
	check_case("asynchronous barrier waits for the default stream", err, 2);

	/* 3: a stream of the user's, selected with dr_cuda_set_stream.  A
	 * non-blocking stream: the legacy stream's sync would not cover it. */
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	err = dr_cuda_set_stream(dev, (void *)s);
	if (!err) {
		queue_sleeper(s, 3);
		err = dr_barrier(NULL, NULL, &dev, 1);
	}
	check_case("barrier waits for the stream set by dr_cuda_set_stream", err, 3);
	dr_cuda_set_stream(dev, NULL);

	/* 4: cudaStreamPerThread selected, asynchronous: the caller's own
	 * stream, marked at the call, though the barrier runs on another
	 * thread. */
	err = dr_cuda_set_stream(dev, (void *)cudaStreamPerThread);
	if (!err) {
		queue_sleeper(cudaStreamPerThread, 4);
		err = dr_barrier(NULL, &work, &dev, 1);
		if (!err)
			err = dr_work_wait(work);
		dr_work_free(work);
		work = NULL;
	}
	check_case("asynchronous barrier waits for the caller's cudaStreamPerThread",
		   err, 4);
	dr_cuda_set_stream(dev, NULL);

	/* 5, 6: the device-wide form, a stream nobody selected. */
	queue_sleeper(s, 5);
	err = dr_cuda_barrier_device(NULL, NULL, &dev, 1);
	check_case("dr_cuda_barrier_device waits for a stream not selected", err, 5);
	queue_sleeper(s, 6);
	err = dr_cuda_barrier_device(NULL, &work, &dev, 1);
	if (!err)
		err = dr_work_wait(work);
	dr_work_free(work);
	check_case("asynchronous dr_cuda_barrier_device waits for it too", err, 6);

	/* 7: a device that does not exist. */
	int bad = dr_cuda_device_count();
	err = dr_barrier(NULL, NULL, &bad, 1);
	report(err == DR_EINVAL && strstr(dr_last_error(), "out of range"),
	       "device id out of range gives DR_EINVAL", dr_last_error());

	cudaDeviceSynchronize();
	cudaStreamDestroy(s);
	dr_destroy_process_group();
	printf("rank %d: %s\n", rank, failures ? "FAILED" : "passed");
	return failures ? 1 : 0;
}
