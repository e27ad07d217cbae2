/*
 * hier_check.c - checks of the collectives across hosts, run as every rank
 * of a job: `distrun -n N build/tests/hier_check MODE`, with the hosts cut
 * by DISTRUN_PRETEND_HOSTS (e.g. 3+1) or by real nodes.
 *
 *   bits     all_reduce of floats that do not add exactly (each rank's
 *            values from its own seed), every float dtype x sum/avg/min/
 *            max/product, small and over a MiB, on the world and on two
 *            subgroups, blocking and asynchronous: every rank's result is
 *            close to the reference each rank computes for itself, and
 *            bit-identical on every rank (hashes all_gathered and
 *            compared); broadcast from every root; a barrier between
 *   ints     all_reduce of integers, every int dtype x op, exact
 *   gather   all_gather of every width of dtype (1, 2, 4, 8 bytes), small
 *            and large, in place and not, blocking and asynchronous, on
 *            the world and on two subgroups: every block is bit for bit
 *            what its rank sent, and the same on every rank
 *   gather_mismatch
 *            rank 1 calls all_gather with count 7, the others with 8;
 *            prints "rank R: first|next ERR: message" and exits 0 when
 *            DR_EMISMATCH came
 *
 * Prints "rank R: ok, N checks (transport T)" when all went well, else the
 * first bad value and exits 1.
 */
#include <distrun.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, checks;

#include "check.h"

/* ------------------------------------------------------------ values */

static float h2f(uint16_t h, int bf)
{
	uint32_t x;
	float f;

	if (bf) {
		x = (uint32_t)h << 16;
	} else {
		uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f;
		uint32_t m = h & 0x3ff;
		if (!e && !m)
			x = s;
		else if (!e) { /* subnormal: normalise */
			e = 127 - 15 + 1;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			x = s | (e << 23) | ((m & 0x3ff) << 13);
		} else if (e == 31)
			x = s | 0x7f800000u | (m << 13);
		else
			x = s | ((e - 15 + 127) << 23) | (m << 13);
	}
	memcpy(&f, &x, 4);
	return f;
}

/* Truncating conversions are enough: inputs only need to be floats
 * whose sums round. */
static uint16_t f2h(float f, int bf)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if (bf)
		return (uint16_t)(x >> 16);
	{
		uint32_t s = (x >> 16) & 0x8000;
		int e = (int)((x >> 23) & 0xff) - 127 + 15;
		if (e <= 0)
			return (uint16_t)s;
		return (uint16_t)(s | ((uint32_t)e << 10) | ((x >> 13) & 0x3ff));
	}
}

/* Rank r's element i: a value in [0.5, 2) with many mantissa bits. */
static double input(int r, size_t i)
{
	uint64_t z = ((uint64_t)r << 32) ^ (i * 0x9e3779b97f4a7c15ull);

	z ^= z >> 31;
	z *= 0xbf58476d1ce4e5b9ull;
	z ^= z >> 29;
	return 0.5 + (double)(z >> 11) / (double)(1ull << 53) * 1.5;
}

static double get(const void *b, dr_dtype t, size_t i)
{
	switch (t) {
	case DR_FLOAT16: return h2f(((const uint16_t *)b)[i], 0);
	case DR_BFLOAT16: return h2f(((const uint16_t *)b)[i], 1);
	case DR_FLOAT32: return ((const float *)b)[i];
	case DR_FLOAT64: return ((const double *)b)[i];
	case DR_INT8: return ((const int8_t *)b)[i];
	case DR_UINT8: return ((const uint8_t *)b)[i];
	case DR_INT32: return ((const int32_t *)b)[i];
	case DR_INT64: return (double)((const int64_t *)b)[i];
	default: return 0;
	}
}

static void set(void *b, dr_dtype t, size_t i, double v)
{
	switch (t) {
	case DR_FLOAT16: ((uint16_t *)b)[i] = f2h((float)v, 0); break;
	case DR_BFLOAT16: ((uint16_t *)b)[i] = f2h((float)v, 1); break;
	case DR_FLOAT32: ((float *)b)[i] = (float)v; break;
	case DR_FLOAT64: ((double *)b)[i] = v; break;
	case DR_INT8: ((int8_t *)b)[i] = (int8_t)v; break;
	case DR_UINT8: ((uint8_t *)b)[i] = (uint8_t)v; break;
	case DR_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
	case DR_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
	default: break;
	}
}

/* The value rank r puts in, as the dtype holds it. */
static double stored(int r, size_t i, dr_dtype t)
{
	unsigned char tmp[8];

	set(tmp, t, 0, input(r, i));
	return get(tmp, t, 0);
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *c = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ull;
	return h;
}

/* ------------------------------------------------------------ groups */

struct grp {
	dr_group *g;   /* NULL: the world */
	int n;
	int ranks[64];
	int me;        /* index, -1 if not a member */
};

static void grp_make(struct grp *G, const int *ranks, int n)
{
	G->g = NULL;
	G->n = n;
	G->me = -1;
	for (int i = 0; i < n; i++) {
		G->ranks[i] = ranks ? ranks[i] : i;
		if (G->ranks[i] == rank)
			G->me = i;
	}
	if (ranks)
		TRY(dr_new_group(ranks, n, &G->g));
}

/* The groups every mode runs on: the world (64 ranks at most), the odd
 * ranks, and with 6 ranks or more 0, 2, 3, 5 (hosts unevenly); n 0: not
 * made. */
static void groups_make(struct grp G[3])
{
	int odd[32], some[4] = { 0, 2, 3, 5 }, nodd = 0;

	for (int r = 1; r < size && nodd < 32; r += 2)
		odd[nodd++] = r;
	grp_make(&G[0], NULL, size < 64 ? size : 64);
	G[1].n = 0;
	if (nodd)
		grp_make(&G[1], odd, nodd);
	G[2].n = 0;
	if (size >= 6)
		grp_make(&G[2], some, 4);
}

static void groups_free(struct grp G[3])
{
	for (int gi = 1; gi < 3; gi++)
		if (G[gi].n)
			dr_group_destroy(G[gi].g);
}

/* Every member's hash of buf agrees. */
static void same_bits(const struct grp *G, const void *buf, size_t bytes,
		      const char *what)
{
	uint64_t h = fnv(buf, bytes), *all = calloc((size_t)G->n, 8);

	if (!all)
		DIE("out of memory");
	TRY(dr_all_gather(&h, all, 1, DR_INT64, G->g, NULL));
	for (int i = 0; i < G->n; i++)
		if (all[i] != h)
			DIE("%s: rank %d's result differs from rank %d's "
			    "(hash %016" PRIx64 " vs %016" PRIx64 ")", what,
			    G->ranks[i], rank, all[i], h);
	checks++;
	free(all);
}

/* ------------------------------------------------------------- bits */

static const dr_dtype floats[] = { DR_FLOAT16, DR_BFLOAT16, DR_FLOAT32,
				   DR_FLOAT64 };
static const dr_op fops[] = { DR_SUM, DR_AVG, DR_MIN, DR_MAX, DR_PRODUCT };

static double ref(const struct grp *G, size_t i, dr_dtype t, dr_op op)
{
	double acc = stored(G->ranks[0], i, t);

	for (int k = 1; k < G->n; k++) {
		double x = stored(G->ranks[k], i, t);
		switch (op) {
		case DR_MIN: acc = x < acc ? x : acc; break;
		case DR_MAX: acc = x > acc ? x : acc; break;
		case DR_PRODUCT: acc *= x; break;
		default: acc += x; break;
		}
	}
	return op == DR_AVG ? acc / G->n : acc;
}

static void check_close(const struct grp *G, const void *b, size_t count,
			dr_dtype t, dr_op op, const char *what)
{
	/* Relative error of n roundings of the dtype's epsilon. */
	double eps = t == DR_FLOAT64 ? 1e-15 : t == DR_FLOAT32 ? 1e-6 :
		     t == DR_FLOAT16 ? 1e-3 : 8e-3;
	double tol = eps * 4 * G->n;

	for (size_t i = 0; i < count; i += 1 + count / 257) {
		double want = ref(G, i, t, op), got = get(b, t, i);
		if (fabs(got - want) > tol * fabs(want))
			DIE("%s: %s %s element %zu: %.17g, want %.17g", what,
			    dr_dtype_name(t), dr_op_name(op), i, got, want);
	}
	checks++;
}

static void fill(void *b, size_t count, dr_dtype t)
{
	for (size_t i = 0; i < count; i++)
		set(b, t, i, input(rank, i));
}

static void bits_on(const struct grp *G, size_t count, int async)
{
	size_t cap = count * 8;
	enum { N = sizeof(floats) / sizeof(floats[0]) * 5 };
	void *b[N];
	dr_work *w[N];
	char what[96];
	int k = 0;

	if (G->me < 0)
		return;
	for (size_t d = 0; d < sizeof(floats) / sizeof(floats[0]); d++)
		for (size_t o = 0; o < sizeof(fops) / sizeof(fops[0]); o++, k++) {
			b[k] = malloc(cap ? cap : 1);
			if (!b[k])
				DIE("out of memory");
			fill(b[k], count, floats[d]);
			TRY(dr_all_reduce(b[k], count, floats[d], fops[o], G->g,
					  async ? &w[k] : NULL));
		}
	k = 0;
	for (size_t d = 0; d < sizeof(floats) / sizeof(floats[0]); d++)
		for (size_t o = 0; o < sizeof(fops) / sizeof(fops[0]); o++, k++) {
			if (async) {
				TRY(dr_work_wait(w[k]));
				dr_work_free(w[k]);
			}
			snprintf(what, sizeof(what), "all_reduce(%zu)%s on %d ranks",
				 count, async ? " async" : "", G->n);
			check_close(G, b[k], count, floats[d], fops[o], what);
			same_bits(G, b[k], count * dr_dtype_size(floats[d]), what);
			free(b[k]);
		}
}

static void bcast_on(const struct grp *G, size_t count)
{
	double *b = malloc((count ? count : 1) * sizeof(*b));

	if (G->me < 0 || !b) {
		free(b);
		return;
	}
	for (int root = 0; root < G->n; root++) {
		fill(b, count, DR_FLOAT64);
		TRY(dr_broadcast(b, count, DR_FLOAT64, G->ranks[root], G->g,
				 NULL));
		for (size_t i = 0; i < count; i++)
			if (b[i] != input(G->ranks[root], i))
				DIE("broadcast(%zu) from %d: element %zu is %.17g",
				    count, G->ranks[root], i, b[i]);
		checks++;
		TRY(dr_barrier(G->g, NULL, NULL, 0));
	}
	free(b);
}

static void mode_bits(void)
{
	static const size_t counts[] = { 0, 1, 5, 1000, (size_t)300 << 10 };
	struct grp G[3];

	groups_make(G);
	for (int gi = 0; gi < 3; gi++) {
		if (!G[gi].n)
			continue;
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
			bits_on(&G[gi], counts[c], c % 2);
			bcast_on(&G[gi], counts[c] > 4096 ? 4096 : counts[c]);
		}
	}
	groups_free(G);
}

/* ----------------------------------------------------------- gather */

static void gather_on(const struct grp *G, size_t count, int async, int inplace)
{
	static const dr_dtype types[] = { DR_INT8, DR_FLOAT16, DR_FLOAT32,
					  DR_FLOAT64 };
	char what[96];

	if (G->me < 0)
		return;
	for (size_t d = 0; d < sizeof(types) / sizeof(types[0]); d++) {
		dr_dtype t = types[d];
		size_t blk = count * dr_dtype_size(t);
		char *out = malloc(blk * (size_t)G->n + 1), *mine = malloc(blk + 1);
		void *send = inplace ? out + (size_t)G->me * blk : mine;
		dr_work *w = NULL;

		if (!out || !mine)
			DIE("out of memory");
		memset(out, 0xa5, blk * (size_t)G->n);
		fill(send, count, t);
		TRY(dr_all_gather(send, out, count, t, G->g, async ? &w : NULL));
		if (async) {
			TRY(dr_work_wait(w));
			dr_work_free(w);
		}
		snprintf(what, sizeof(what), "all_gather(%zu, %d-byte)%s%s on %d ranks",
			 count, (int)dr_dtype_size(t), async ? " async" : "",
			 inplace ? " in place" : "", G->n);
		for (int j = 0; j < G->n; j++) {
			char want[8];

			for (size_t i = 0; i < count; i++) {
				set(want, t, 0, input(G->ranks[j], i));
				if (memcmp(out + (size_t)j * blk + i * dr_dtype_size(t),
					   want, dr_dtype_size(t)))
					DIE("%s: rank %d's element %zu is not what it sent",
					    what, G->ranks[j], i);
			}
		}
		checks++;
		same_bits(G, out, blk * (size_t)G->n, what);
		free(out);
		free(mine);
	}
}

static void mode_gather(void)
{
	/* up to a 64 KiB result and past it (auto: two levels, then flat) */
	static const size_t counts[] = { 0, 1, 5, 1000, (size_t)40 << 10 };
	struct grp G[3];

	groups_make(G);
	for (int gi = 0; gi < 3; gi++)
		for (size_t c = 0; G[gi].n && c < sizeof(counts) / sizeof(counts[0]); c++)
			gather_on(&G[gi], counts[c], c % 2, c % 3 == 1);
	groups_free(G);
}

static void mode_gather_mismatch(void)
{
	float send[8] = { 0 }, out[64 * 8];
	dr_err e, next;

	if (size > 64)
		DIE("gather_mismatch: at most 64 ranks");
	/* As coll_check's mismatch: a rank that sees it aborts the group,
	 * and a peer still in this barrier reports it here. */
	e = dr_barrier(NULL, NULL, NULL, 0);
	if (!e)
		e = dr_all_gather(send, out, rank == 1 ? 7 : 8, DR_FLOAT32,
				  NULL, NULL);
	printf("rank %d: first %s: %s\n", rank, dr_err_name(e),
	       e ? dr_last_error() : "");
	next = dr_barrier(NULL, NULL, NULL, 0);
	printf("rank %d: next %s: %s\n", rank, dr_err_name(next),
	       next ? dr_last_error() : "");
	fflush(stdout);
	dr_destroy_process_group();
	exit(e == DR_EMISMATCH || (!e && next == DR_EMISMATCH) ? 0 : 3);
}

/* ------------------------------------------------------------- ints */

/* Rank r's element i: small enough that no op overflows int8 on a
 * dozen ranks (products: a 2 on every fourth rank at most). */
static int64_t ival(int r, size_t i, int op)
{
	if (op == DR_PRODUCT)
		return (r + (int)(i % 4)) % 4 == 0 ? 2 : 1;
	return (int64_t)(((size_t)r * 7 + i) % 5 + 1);
}

static void mode_ints(void)
{
	static const dr_dtype ints[] = { DR_INT8, DR_UINT8, DR_INT32, DR_INT64 };
	size_t count = 777;

	for (size_t d = 0; d < 4; d++)
		for (int op = 0; op < DR_OP_COUNT_; op++) {
			dr_dtype t = ints[d];
			unsigned char *b = malloc(count * 8);
			if (!b)
				DIE("out of memory");
			for (size_t i = 0; i < count; i++)
				set(b, t, i, (double)ival(rank, i, op));
			TRY(dr_all_reduce(b, count, t, (dr_op)op, NULL, NULL));
			for (size_t i = 0; i < count; i++) {
				int64_t acc = ival(0, i, op), x;
				for (int r = 1; r < size; r++) {
					x = ival(r, i, op);
					switch (op) {
					case DR_PRODUCT: acc *= x; break;
					case DR_MIN: acc = x < acc ? x : acc; break;
					case DR_MAX: acc = x > acc ? x : acc; break;
					case DR_BAND: acc &= x; break;
					case DR_BOR: acc |= x; break;
					case DR_BXOR: acc ^= x; break;
					default: acc += x; break;
					}
				}
				if (op == DR_AVG)
					acc /= size;
				{
					unsigned char tmp[8];
					set(tmp, t, 0, (double)acc);
					if (get(b, t, i) != get(tmp, t, 0))
						DIE("all_reduce %s %s element %zu: %g, "
						    "want %g", dr_dtype_name(t),
						    dr_op_name((dr_op)op), i,
						    get(b, t, i), get(tmp, t, 0));
				}
			}
			checks++;
			free(b);
		}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "bits";

	TRY(dr_init_process_group("gloo", "env://"));
	rank = dr_get_rank();
	size = dr_get_world_size();
	if (!strcmp(mode, "bits"))
		mode_bits();
	else if (!strcmp(mode, "ints"))
		mode_ints();
	else if (!strcmp(mode, "gather"))
		mode_gather();
	else if (!strcmp(mode, "gather_mismatch"))
		mode_gather_mismatch();
	else
		DIE("unknown mode '%s'", mode);
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	printf("rank %d: ok, %d checks (transport %s)\n", rank, checks,
	       dr_transport_name());
	TRY(dr_destroy_process_group());
	return 0;
}
