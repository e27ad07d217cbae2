/*
 * test_tensor_print.c - testdata/examples/tensor_print.h against the way
 * real torch prints the same tensors (testdata/tensor_print/reference.h,
 * made by make-reference.py beside it): every dtype, int / fixed / sci
 * modes, nan and inf, line wrapping, summarized tensors, suffixes.
 */
#include <stdint.h>
#include <string.h>

#include "runner.h"
#include "../../testdata/examples/tensor_print.h"
#include "../../testdata/tensor_print/reference.h"

/* Rebuilds a reference tensor's data from its stored bit patterns. */
static void *ref_data(const struct tensor_ref *r)
{
	size_t sz = dr_dtype_size(r->dtype);
	unsigned char *p = malloc(r->n * sz + 1);
	if (!p)
		return NULL;
	for (size_t i = 0; i < r->n; i++) {
		uint64_t v = tensor_ref_data[r->offset + i];
		memcpy(p + i * sz, &v, sz); /* little-endian: low bytes first */
	}
	return p;
}

static int check_rows(int want_float)
{
	int rows = 0;
	for (const struct tensor_ref *r = tensor_refs; r->want; r++) {
		if (tensor_is_float(r->dtype) != want_float)
			continue;
		void *data = ref_data(r);
		CHECK(data);
		char *got = tensor_str(data, r->n, r->dtype, NULL);
		free(data);
		CHECK(got);
		int same = !strcmp(got, r->want);
		if (!same)
			fprintf(stderr, "%s[%zu]:\n got: %s\nwant: %s\n",
				dr_dtype_name(r->dtype), r->n, got, r->want);
		free(got);
		CHECK(same);
		rows++;
	}
	CHECK(rows > 10);
	return 0;
}

static int test_integer_tensors_print_as_torch(void)
{
	return check_rows(0);
}

static int test_float_tensors_print_as_torch(void)
{
	return check_rows(1);
}

/* The CUDA example's line; torch cannot make it without a GPU, so it is
 * written out from the source document. */
static int test_device_suffix(void)
{
	int64_t t[3] = { 1, 2, 3 };
	char *s = tensor_str(t, 3, DR_INT64, "cuda:0");
	CHECK(s);
	CHECKF(!strcmp(s, "tensor([1, 2, 3], device='cuda:0')"), "got %s", s);
	free(s);
	s = tensor_str(t, 3, DR_INT64, "cpu");
	CHECK(s && !strcmp(s, "tensor([1, 2, 3])"));
	free(s);
	int32_t u[2] = { 4, 5 };
	s = tensor_str(u, 2, DR_INT32, "cuda:1");
	CHECKF(s && !strcmp(s, "tensor([4, 5], device='cuda:1', dtype=torch.int32)"),
	       "got %s", s);
	free(s);
	return 0;
}

static int test_invalid_dtype_gives_null(void)
{
	int32_t t[1] = { 0 };
	CHECK(tensor_str(t, 1, DR_DTYPE_COUNT_, NULL) == NULL);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_integer_tensors_print_as_torch),
	UNIT(test_float_tensors_print_as_torch),
	UNIT(test_device_suffix),
	UNIT(test_invalid_dtype_gives_null),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
