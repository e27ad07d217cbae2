/*
 * test_torch_random.c - testdata/examples/torch_random.h against values
 * drawn by real torch (testdata/torch_random/reference.h, made by
 * make-reference.py beside it): every bit of every float must match, for
 * several seeds, the scalar path of randn (n < 16), the block path
 * (n >= 16, with and without a tail), two draws in a row, rand, and
 * hashes of draws of 2^20 and 100003 values.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "runner.h"
#include "../../testdata/examples/torch_random.h"
#include "../../testdata/torch_random/reference.h"

static uint32_t bits_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* Draws what the reference row drew and compares bit for bit. */
static int check_row(const struct torch_ref *r)
{
	torch_generator g;
	float out[100];

	torch_manual_seed(&g, r->seed);
	for (int call = 0; call < r->calls; call++) {
		if (!strcmp(r->fn, "rand"))
			torch_rand(&g, out, r->n);
		else
			torch_randn(&g, out, r->n);
	}
	for (size_t i = 0; i < r->n; i++)
		CHECKF(bits_of(out[i]) == r->bits[i],
		       "%s(%zu) seed %" PRIu64 " call %d: element %zu is %.9g (0x%08x), torch drew 0x%08x",
		       r->fn, r->n, r->seed, r->calls, i, out[i],
		       bits_of(out[i]), r->bits[i]);
	return 0;
}

static int run_rows(const char *fn, int small)
{
	int rows = 0;
	for (const struct torch_ref *r = torch_refs; r->fn; r++) {
		if (strcmp(r->fn, fn) || (small >= 0 && (r->n < 16) != small))
			continue;
		if (check_row(r))
			return 1;
		rows++;
	}
	CHECKF(rows > 0, "no reference rows for %s", fn);
	return 0;
}

static int test_randn_small_matches_torch(void)
{
	return run_rows("randn", 1);
}

static int test_randn_large_matches_torch(void)
{
	return run_rows("randn", 0);
}

static int test_rand_matches_torch(void)
{
	return run_rows("rand", -1);
}

/* Long draws (every block path, a tail) against hashes of torch's. */
static int test_randn_long_draws_match_torch(void)
{
	for (const struct torch_ref_hash *r = torch_ref_hashes; r->n; r++) {
		float *out = malloc(r->n * sizeof *out);
		CHECK(out);
		torch_generator g;
		torch_manual_seed(&g, r->seed);
		torch_randn(&g, out, r->n);
		uint64_t h = UINT64_C(0xcbf29ce484222325);
		const unsigned char *p = (const unsigned char *)out;
		for (size_t i = 0; i < r->n * sizeof *out; i++)
			h = (h ^ p[i]) * UINT64_C(0x100000001b3);
		free(out);
		CHECKF(h == r->fnv1a, "randn(%zu) seed %" PRIu64 ": hash %016" PRIx64 ", torch's %016" PRIx64,
		       r->n, r->seed, h, r->fnv1a);
	}
	return 0;
}

/* The example's own numbers, as the source document prints them. */
static int test_seed0_randn3_is_the_documented_tensor(void)
{
	torch_generator g;
	float t[3];
	torch_manual_seed(&g, 0);
	torch_randn(&g, t, 3);
	char s[64];
	snprintf(s, sizeof s, "%.4f %.4f %.4f", t[0], t[1], t[2]);
	CHECKF(!strcmp(s, "1.5410 -0.2934 -2.1788"), "got %s", s);
	return 0;
}

/* A reseed drops the cached second Box-Muller sample. */
static int test_manual_seed_resets_cached_normal(void)
{
	torch_generator g;
	float a[1], b[1];
	torch_manual_seed(&g, 0);
	torch_randn(&g, a, 1);
	torch_manual_seed(&g, 0);
	torch_randn(&g, b, 1);
	CHECK(bits_of(a[0]) == bits_of(b[0]));
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_randn_small_matches_torch),
	UNIT(test_randn_large_matches_torch),
	UNIT(test_rand_matches_torch),
	UNIT(test_randn_long_draws_match_torch),
	UNIT(test_seed0_randn3_is_the_documented_tensor),
	UNIT(test_manual_seed_resets_cached_normal),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
