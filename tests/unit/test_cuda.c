/*
 * test_cuda.c - unit tests of runtime/cuda.c that need no GPU: how the
 * driver library is found (or not) and what every CUDA request answers
 * without it.  Each test runs in its own forked process, so each sees the
 * loader fresh (its pthread_once) with the environment it sets.
 *
 * On a machine with CUDA the "not available" tests pass trivially (they
 * check only what holds there too); the device paths themselves are
 * tested by the GPU suite (scripts/test-gpu): a device pointer cannot be
 * made, or faked, without a GPU.
 */
#include <dlfcn.h>
#include <stdlib.h>

#include "dri.h"
#include "runner.h"

/* The toolkit's stub driver: it exports every driver function, and its
 * cuInit fails, which exercises the whole symbol table. */
#define STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

static int have_stub(void)
{
	if (access(STUB, R_OK) == 0)
		return 1;
	fprintf(stderr, "note: %s absent, test reduced\n", STUB);
	return 0;
}

/* "CUDA not available: <why>" from a request that needs CUDA. */
static const char *why_unavailable(void)
{
	dr_err err = dr_cuda_set_stream(0, NULL);
	return err == DR_ENOCUDA ? dr_last_error() : "";
}

static int test_unavailable_answers(void)
{
	void *p = (void *)1;
	int dev = 0;

	if (dr_cuda_available()) {
		CHECK(dr_cuda_device_count() > 0);
		return 0;
	}
	CHECK(dr_cuda_device_count() == 0);
	CHECK(dr_cuda_set_stream(0, NULL) == DR_ENOCUDA);
	CHECKF(!strncmp(dr_last_error(), "CUDA not available: ", 20), "%s",
	       dr_last_error());
	CHECK(dr_cuda_alloc(0, 16, &p) == DR_ENOCUDA);
	CHECK(p == NULL);
	CHECK(dr_cuda_memcpy(&dev, &dev, sizeof dev) == DR_ENOCUDA);
	CHECK(dr_cuda_free(NULL) == DR_OK);
	CHECK(dr_cuda_free(&dev) == DR_ENOCUDA);
	dri_op op;
	memset(&op, 0, sizeof op);
	CHECK(dri_cuda_barrier_op(&op, "dr_barrier", &dev, 1, 0) == DR_ENOCUDA);
	CHECKF(!strncmp(dr_last_error(), "dr_barrier: device_ids given but "
			"CUDA not available: ", 52), "%s", dr_last_error());
	CHECK(op.start == NULL && op.priv == NULL);
	return 0;
}

static int test_run_staged_without_cuda(void)
{
	dri_op op;
	int32_t x = 1;

	if (dr_cuda_available())
		return 0;
	memset(&op, 0, sizeof op);
	op.id.coll = DRI_ALL_REDUCE;
	op.buf = &x;
	op.count = 1;
	op.dtype = DR_INT32;
	op.device = 0;
	dri_cuda_stage_op(&op);
	CHECK(op.start && op.release && op.run != op.host_run);
	CHECK(op.start(&op, 0) == DR_ENOCUDA);
	CHECK(strstr(dr_last_error(), "CUDA not available"));
	op.release(&op);
	return 0;
}

static int test_host_pointers_are_host(void)
{
	int on_stack = 0;
	void *on_heap = malloc(64);
	CHECK(dri_cuda_ptr_device(NULL) == -1);
	CHECK(dri_cuda_ptr_device(&on_stack) == -1);
	CHECK(dri_cuda_ptr_device(on_heap) == -1);
	free(on_heap);
	return 0;
}

/* A program that has not loaded the driver pays nothing for the pointer
 * checks every collective makes: the driver is not even loaded. */
static int test_ptr_device_does_not_load_driver(void)
{
	int x = 0;
	if (!have_stub())
		return 0;
	setenv("DISTRUN_CUDA_LIB", STUB, 1);
	CHECK(dlopen(STUB, RTLD_NOW | RTLD_NOLOAD) == NULL);
	for (int i = 0; i < 1000; i++)
		CHECK(dri_cuda_ptr_device(&x) == -1);
	CHECK(dlopen(STUB, RTLD_NOW | RTLD_NOLOAD) == NULL);
	/* Asking for CUDA does load it. */
	CHECK(!dr_cuda_available());
	void *h = dlopen(STUB, RTLD_NOW | RTLD_NOLOAD);
	CHECK(h != NULL);
	dlclose(h);
	return 0;
}

/* Once the process has loaded the library, pointers are checked with the
 * driver (here: its cuInit fails, so they are host pointers). */
static int test_ptr_device_with_library_loaded(void)
{
	int x = 0;
	if (!have_stub())
		return 0;
	setenv("DISTRUN_CUDA_LIB", STUB, 1);
	void *h = dlopen(STUB, RTLD_NOW);
	CHECK(h != NULL);
	CHECK(dri_cuda_ptr_device(&x) == -1);
	CHECKF(strstr(why_unavailable(), "cuInit failed"), "%s", why_unavailable());
	return 0;
}

static int test_stub_driver_every_symbol(void)
{
	if (!have_stub())
		return 0;
	setenv("DISTRUN_CUDA_LIB", STUB, 1);
	CHECK(!dr_cuda_available());
	/* Every symbol resolved: the failure is cuInit's, named. */
	CHECKF(strstr(why_unavailable(), "CUDA not available: cuInit failed: CUDA_ERROR"),
	       "%s", why_unavailable());
	return 0;
}

static int test_missing_library(void)
{
	setenv("DISTRUN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
	CHECK(!dr_cuda_available());
	CHECKF(strstr(why_unavailable(),
		      "CUDA not available: cannot load the CUDA driver: "
		      "/nonexistent/libcuda.so.1: "),
	       "%s", why_unavailable());
	return 0;
}

static int test_library_without_driver_api(void)
{
	setenv("DISTRUN_CUDA_LIB", "libm.so.6", 1);
	CHECK(!dr_cuda_available());
	CHECKF(strstr(why_unavailable(), "libm.so.6 has no cuInit"), "%s",
	       why_unavailable());
	return 0;
}

static int test_disabled_by_environment(void)
{
	setenv("DISTRUN_CUDA", "0", 1);
	CHECK(!dr_cuda_available());
	CHECK(dr_cuda_device_count() == 0);
	CHECKF(!strcmp(why_unavailable(), "CUDA not available: disabled by DISTRUN_CUDA=0"),
	       "%s", why_unavailable());
	return 0;
}

/* A call whose buffers are not all where op->device says is refused with
 * a message naming the buffer; buffers the rank does not use (a
 * non-root's gather recvbuf) and NULL ones are not looked at. */
static int test_check_buffers_names_the_odd_one(void)
{
	dri_op op;
	int32_t a = 0, b = 0;

	if (dr_cuda_available())
		return 0;
	memset(&op, 0, sizeof op);
	op.id.coll = DRI_GATHER;
	op.sendbuf = &a;
	op.buf = &b;
	op.count = 1;
	op.dtype = DR_INT32;
	op.root = 5; /* no group: not this rank */
	op.device = 0;
	CHECK(dri_cuda_check_buffers(&op) == DR_EINVAL);
	CHECKF(!strcmp(dr_last_error(), "gather: sendbuf is on the host but "
		       "the other buffer is on cuda:0; both must be on the "
		       "same device"), "%s", dr_last_error());
	op.sendbuf = NULL;
	CHECK(dri_cuda_check_buffers(&op) == DR_OK);
	op.id.coll = DRI_ALL_GATHER;
	CHECK(dri_cuda_check_buffers(&op) == DR_EINVAL);
	CHECKF(strstr(dr_last_error(), "all_gather: recvbuf is on the host"),
	       "%s", dr_last_error());
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_unavailable_answers),
	UNIT(test_run_staged_without_cuda),
	UNIT(test_host_pointers_are_host),
	UNIT(test_ptr_device_does_not_load_driver),
	UNIT(test_ptr_device_with_library_loaded),
	UNIT(test_stub_driver_every_symbol),
	UNIT(test_missing_library),
	UNIT(test_library_without_driver_api),
	UNIT(test_disabled_by_environment),
	UNIT(test_check_buffers_names_the_odd_one),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
