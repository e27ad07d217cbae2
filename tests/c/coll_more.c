/*
 * coll_more.c - one rank of the collectives test, run under distrun by
 * tests/collectives.bats: `coll_more MODE [ARG]`.
 *
 *   all            every collective on the world and on subgroups of odd
 *                  shapes, counts 0, 1, p+1, 1000 and several MiB, results
 *                  compared element by element with a reference computed
 *                  locally (every rank's input is a formula of its rank)
 *   mismatch CALL  the last rank calls CALL with another count (or root)
 *                  than the others; every rank prints what it got
 *   nonmember      a group that leaves this rank out fails with
 *                  DR_ENOTMEMBER on every call
 *   p2p            order per (source, tag); DR_ANY_SOURCE reports senders
 *   async          many operations in flight, waited in scrambled order
 *   monitored HOW  ranks 1 and 3 skip a monitored barrier (HOW: all =
 *                  wait_all_ranks, first = not, root = rank 0 skips it)
 *   order          asynchronous calls on two groups issued in opposite
 *                  orders on even and odd ranks all complete
 *   destroy        dr_destroy_process_group with subgroups left alive
 *                  and asynchronous work out: the handles stay safe
 *   noinit         (without distrun) every call before init: DR_ENOINIT
 *   nocuda         dr_barrier with device_ids where CUDA is off
 *   device         (fake driver) device memory in p2p and mixed with host
 *                  memory in a root's gather/scatter: refused at once
 *
 * Prints "rank R: ok, N checks" and exits 0, or names the first difference
 * and exits 1.
 */
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "distrun.h"
#include "check.h"

#define alloc CHECK_ALLOC

static int rank, world;
static long checks;

/* ------------------------------------------------------ element access */

static double get(const void *buf, dr_dtype t, size_t i)
{
	switch (t) {
	case DR_INT8: return ((const int8_t *)buf)[i];
	case DR_UINT8: return ((const uint8_t *)buf)[i];
	case DR_INT32: return ((const int32_t *)buf)[i];
	case DR_INT64: return (double)((const int64_t *)buf)[i];
	case DR_FLOAT32: return ((const float *)buf)[i];
	case DR_FLOAT64: return ((const double *)buf)[i];
	default: FAIL("dtype %d not in the test", (int)t);
	}
}

static void set(void *buf, dr_dtype t, size_t i, double v)
{
	switch (t) {
	case DR_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
	case DR_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	case DR_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case DR_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
	case DR_FLOAT32: ((float *)buf)[i] = (float)v; break;
	case DR_FLOAT64: ((double *)buf)[i] = v; break;
	default: FAIL("dtype %d not in the test", (int)t);
	}
}

/* What world rank r contributes at element i (small integers: exact in
 * every dtype, sums of 8 of them fit in int8). */
static double val(int r, size_t i, dr_op op)
{
	if (op == DR_PRODUCT)
		return 1 + (double)((r + i) % 2);
	return (double)((r * 31 + i * 17 + 3) % 11);
}

static double fold(double acc, double x, dr_op op)
{
	switch (op) {
	case DR_SUM: case DR_AVG: return acc + x;
	case DR_PRODUCT: return acc * x;
	case DR_MIN: return x < acc ? x : acc;
	case DR_MAX: return x > acc ? x : acc;
	case DR_BXOR: return (double)((int64_t)acc ^ (int64_t)x);
	default: FAIL("op %d not in the test", (int)op);
	}
}

/* The reduction over the members of element i, as dr_* should give it. */
static double reduced(const int *members, int n, size_t i, dr_op op,
		      dr_dtype t)
{
	double acc = val(members[0], i, op);
	for (int j = 1; j < n; j++)
		acc = fold(acc, val(members[j], i, op), op);
	if (op == DR_AVG) {
		if (t == DR_FLOAT32 || t == DR_FLOAT64)
			acc /= n;
		else
			acc = (double)((int64_t)acc / n);
	}
	return acc;
}

static void fill(void *buf, dr_dtype t, size_t n, int r, size_t base, dr_op op)
{
	for (size_t i = 0; i < n; i++)
		set(buf, t, i, val(r, base + i, op));
}

static void expect(const char *what, const void *buf, dr_dtype t, size_t i,
		   double want)
{
	double got = get(buf, t, i);
	double tol = t == DR_FLOAT32 ? 1e-6 * (want < 0 ? -want : want) : 0;
	if (got - want > tol || want - got > tol)
		FAIL("%s: %s element %zu is %g, want %g", what,
		     dr_dtype_name(t), i, got, want);
}

/* --------------------------------------------------------- the checks */

struct grp {
	dr_group *g;       /* NULL: the world */
	int n;
	int members[64];   /* world ranks in group order */
	const char *name;
};

static void check_reduce(const struct grp *G, int me, size_t count,
			 dr_dtype t, dr_op op)
{
	size_t es = dr_dtype_size(t);
	for (int ri = 0; ri < G->n; ri += (G->n > 2 ? G->n - 2 : 1)) {
		int root = G->members[ri];
		char *buf = alloc(count * es);
		fill(buf, t, count, rank, 0, op);
		CHECK_OK(dr_reduce(buf, count, t, op, root, G->g, NULL));
		for (size_t i = 0; i < count; i++)
			expect("reduce", buf, t, i, rank == root ?
			       reduced(G->members, G->n, i, op, t) :
			       val(rank, i, op));
		free(buf);
	}
	(void)me;
}

static void check_all_gather(const struct grp *G, int me, size_t count,
			     dr_dtype t)
{
	size_t es = dr_dtype_size(t);
	char *out = alloc(count * es * (size_t)G->n);
	char *in = alloc(count * es);

	for (int inplace = 0; inplace < 2; inplace++) {
		memset(out, 0x5a, count * es * (size_t)G->n);
		char *src = inplace ? out + (size_t)me * count * es : in;
		fill(src, t, count, rank, 0, DR_SUM);
		CHECK_OK(dr_all_gather(src, out, count, t, G->g, NULL));
		for (int j = 0; j < G->n; j++)
			for (size_t i = 0; i < count; i++)
				expect("all_gather", out, t, (size_t)j * count + i,
				       val(G->members[j], i, DR_SUM));
	}
	free(out);
	free(in);
}

static void check_gather(const struct grp *G, size_t count, dr_dtype t)
{
	size_t es = dr_dtype_size(t);
	for (int ri = 0; ri < G->n; ri += (G->n > 1 ? G->n - 1 : 1)) {
		int root = G->members[ri];
		char *in = alloc(count * es);
		char *out = rank == root ? alloc(count * es * (size_t)G->n) : NULL;
		fill(in, t, count, rank, 0, DR_SUM);
		CHECK_OK(dr_gather(in, out, count, t, root, G->g, NULL));
		for (int j = 0; out && j < G->n; j++)
			for (size_t i = 0; i < count; i++)
				expect("gather", out, t, (size_t)j * count + i,
				       val(G->members[j], i, DR_SUM));
		free(in);
		free(out);
	}
}

static void check_scatter(const struct grp *G, int me, size_t count,
			  dr_dtype t)
{
	size_t es = dr_dtype_size(t);
	for (int ri = 0; ri < G->n; ri += (G->n > 1 ? G->n - 1 : 1)) {
		int root = G->members[ri];
		char *in = rank == root ? alloc(count * es * (size_t)G->n) : NULL;
		char *out = alloc(count * es);
		/* piece j of the root's buffer: the root's values at j*count */
		if (in)
			fill(in, t, count * (size_t)G->n, root, 0, DR_SUM);
		CHECK_OK(dr_scatter(in, out, count, t, root, G->g, NULL));
		for (size_t i = 0; i < count; i++)
			expect("scatter", out, t, i,
			       val(root, (size_t)me * count + i, DR_SUM));
		free(in);
		free(out);
	}
}

static void check_reduce_scatter(const struct grp *G, int me, size_t count,
				 dr_dtype t, dr_op op)
{
	size_t es = dr_dtype_size(t);
	char *in = alloc(count * es * (size_t)G->n);
	char *out = alloc(count * es);

	fill(in, t, count * (size_t)G->n, rank, 0, op);
	CHECK_OK(dr_reduce_scatter(in, out, count, t, op, G->g, NULL));
	for (size_t i = 0; i < count; i++)
		expect("reduce_scatter", out, t, i,
		       reduced(G->members, G->n, (size_t)me * count + i, op, t));
	/* the input is left alone */
	for (size_t i = 0; i < count * (size_t)G->n; i++)
		expect("reduce_scatter input", in, t, i, val(rank, i, op));
	free(in);
	free(out);
}

/* Piece for group rank j from world rank r: values of r at j*1000 + i. */
static void check_all_to_all(const struct grp *G, int me, size_t count,
			     dr_dtype t)
{
	size_t es = dr_dtype_size(t), n = count * (size_t)G->n;
	char *in = alloc(n * es), *out = alloc(n * es);

	for (int inplace = 0; inplace < 2; inplace++) {
		char *dst = inplace ? in : out;
		for (int j = 0; j < G->n; j++)
			fill(in + (size_t)j * count * es, t, count, rank,
			     (size_t)j * 1000, DR_SUM);
		CHECK_OK(dr_all_to_all(in, dst, count, t, G->g, NULL));
		for (int j = 0; j < G->n; j++)
			for (size_t i = 0; i < count; i++)
				expect("all_to_all", dst, t, (size_t)j * count + i,
				       val(G->members[j], (size_t)me * 1000 + i,
					   DR_SUM));
	}
	free(in);
	free(out);
}

/* Group rank a sends (a + 2b + base) % 5 elements to group rank b. */
static size_t v_count(int a, int b, size_t base)
{
	return (size_t)(a + 2 * b + (int)base) % 5 + (base > 5 ? base : 0);
}

static void check_all_to_all_v(const struct grp *G, int me, size_t base,
			       dr_dtype t)
{
	size_t es = dr_dtype_size(t), sc[64], rc[64], stot = 0, rtot = 0;

	for (int j = 0; j < G->n; j++) {
		sc[j] = v_count(me, j, base);
		rc[j] = v_count(j, me, base);
		stot += sc[j];
		rtot += rc[j];
	}
	char *in = alloc(stot * es), *out = alloc(rtot * es);
	for (int j = 0, off = 0; j < G->n; off += (int)sc[j], j++)
		fill(in + (size_t)off * es, t, sc[j], rank, (size_t)j * 1000, DR_SUM);
	CHECK_OK(dr_all_to_all_v(in, sc, out, rc, t, G->g, NULL));
	size_t off = 0;
	for (int j = 0; j < G->n; j++)
		for (size_t i = 0; i < rc[j]; i++, off++)
			expect("all_to_all_v", out, t, off,
			       val(G->members[j], (size_t)me * 1000 + i, DR_SUM));
	free(in);
	free(out);
}

static void check_group(const struct grp *G)
{
	static const dr_dtype types[] = { DR_FLOAT32, DR_INT32, DR_FLOAT64,
					  DR_INT64, DR_UINT8, DR_INT8 };
	static const dr_op ops[] = { DR_SUM, DR_MAX, DR_MIN, DR_PRODUCT,
				     DR_AVG, DR_BXOR };
	int me = dr_group_rank(G->g);
	size_t counts[] = { 0, 1, (size_t)G->n + 1, 1000, 0 };
	int k = 0;

	if (me < 0)
		FAIL("%s: group rank %d", G->name, me);
	if (dr_group_size(G->g) != G->n)
		FAIL("%s: group size %d, want %d", G->name,
		     dr_group_size(G->g), G->n);
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++, k++) {
		dr_dtype t = types[k % 6];
		dr_op op = ops[k % 6];
		size_t count = counts[c];

		if (c == 4) { /* several MiB in all */
			t = DR_FLOAT32;
			op = DR_SUM;
			count = (size_t)(3 << 20) / 4 / (size_t)G->n + 3;
		}
		if (op == DR_BXOR && (t == DR_FLOAT32 || t == DR_FLOAT64))
			op = DR_MAX;
		if (op == DR_AVG && (t == DR_UINT8 || t == DR_INT8))
			op = DR_SUM;
		check_reduce(G, me, c == 4 ? count * (size_t)G->n : count, t, op);
		check_all_gather(G, me, count, types[(k + 1) % 6]);
		check_gather(G, count, types[(k + 2) % 6]);
		check_scatter(G, me, count, types[(k + 3) % 6]);
		check_reduce_scatter(G, me, count, t, op);
		check_all_to_all(G, me, count, types[(k + 4) % 6]);
		check_all_to_all_v(G, me, c == 4 ? 100000 : c, types[(k + 5) % 6]);
		/* R's collectives on the same group, between ours */
		{
			size_t n = count ? count : 1;
			char *b = alloc(n * 4);
			fill(b, DR_INT32, n, rank, 0, DR_SUM);
			CHECK_OK(dr_all_reduce(b, n, DR_INT32, DR_SUM, G->g, NULL));
			for (size_t i = 0; i < n; i++)
				expect("all_reduce", b, DR_INT32, i,
				       reduced(G->members, G->n, i, DR_SUM, DR_INT32));
			free(b);
		}
	}
	CHECK_OK(dr_barrier(G->g, NULL, NULL, 0));
}

static void make_group(struct grp *G, const int *ranks, int n, const char *name)
{
	G->n = n;
	G->name = name;
	memcpy(G->members, ranks, (size_t)n * sizeof(int));
	/* group order is sorted world order, as torch */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && G->members[j - 1] > G->members[j]; j--) {
			int x = G->members[j];
			G->members[j] = G->members[j - 1];
			G->members[j - 1] = x;
		}
	CHECK_OK(dr_new_group(ranks, n, &G->g));
}

static int is_member(const struct grp *G)
{
	for (int i = 0; i < G->n; i++)
		if (G->members[i] == rank)
			return 1;
	return 0;
}

static void mode_all(void)
{
	struct grp world_g = { NULL, world, { 0 }, "world" };
	for (int i = 0; i < world; i++)
		world_g.members[i] = i;
	check_group(&world_g);

	/* Subgroups of odd shapes; new_group is called by every rank. */
	struct grp subs[4];
	int nsub = 0;
	int odd[] = { 4, 1, 3 }, tail[] = { world - 1, 0 }, solo[] = { world / 2 };
	if (world >= 5)
		make_group(&subs[nsub++], odd, 3, "{1,3,4}");
	if (world >= 2)
		make_group(&subs[nsub++], tail, 2, "{last,0}");
	make_group(&subs[nsub++], solo, 1, "{middle}");
	for (int i = 0; i < nsub; i++) {
		if (is_member(&subs[i]))
			check_group(&subs[i]);
		else if (dr_group_rank(subs[i].g) != -1)
			FAIL("%s: non-member has group rank %d", subs[i].name,
			     dr_group_rank(subs[i].g));
	}
	/* the world is still in step after the subgroups */
	check_group(&world_g);
	CHECK_OK(dr_monitored_barrier(NULL, 0, 1));
	for (int i = 0; i < nsub; i++)
		if (is_member(&subs[i]))
			CHECK_OK(dr_monitored_barrier(subs[i].g, 60000, 0));
	for (int i = 0; i < nsub; i++)
		dr_group_destroy(subs[i].g);
}

/* The last rank calls CALL differently from the others. */
static void mode_mismatch(const char *call)
{
	int odd = rank == world - 1;
	size_t count = odd ? 5 : 4, big = 4 * (size_t)world + 4;
	float *a = calloc(big * 2, sizeof(float)), *b = calloc(big * 2, sizeof(float));
	size_t sc[64], rc[64];
	dr_err err;

	/* Every rank past init, so that the abort finds them in here; a
	 * slow rank may still get it in this barrier. */
	err = dr_barrier(NULL, NULL, NULL, 0);
	if (err) {
		printf("rank %d: barrier before: %s: %s\n", rank,
		       dr_err_name(err), dr_last_error());
		goto out;
	}
	for (int j = 0; j < world; j++)
		sc[j] = rc[j] = 2;
	if (odd)
		sc[0] = 3; /* rank 0 expects 2 from us */
	if (!strcmp(call, "reduce"))
		err = dr_reduce(a, count, DR_FLOAT32, DR_SUM, 0, NULL, NULL);
	else if (!strcmp(call, "reduce_root"))
		err = dr_reduce(a, 4, DR_FLOAT32, DR_SUM, odd, NULL, NULL);
	else if (!strcmp(call, "all_gather"))
		err = dr_all_gather(a, b, count, DR_FLOAT32, NULL, NULL);
	else if (!strcmp(call, "gather"))
		err = dr_gather(a, b, count, DR_FLOAT32, 0, NULL, NULL);
	else if (!strcmp(call, "scatter"))
		err = dr_scatter(a, b, count, DR_FLOAT32, 0, NULL, NULL);
	else if (!strcmp(call, "reduce_scatter"))
		err = dr_reduce_scatter(a, b, count, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(call, "all_to_all"))
		err = dr_all_to_all(a, b, count, DR_FLOAT32, NULL, NULL);
	else if (!strcmp(call, "all_to_all_v"))
		err = dr_all_to_all_v(a, sc, b, rc, DR_FLOAT32, NULL, NULL);
	else if (!strcmp(call, "dtype"))
		err = dr_all_gather(a, b, 4, odd ? DR_INT32 : DR_FLOAT32, NULL, NULL);
	else if (!strcmp(call, "kind"))
		err = odd ? dr_all_gather(a, b, 4, DR_FLOAT32, NULL, NULL)
			  : dr_reduce_scatter(a, b, 4, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(call, "p2p")) /* a receive of another count */
		err = rank == 0 ? dr_send(a, 2, DR_FLOAT32, world - 1, 5, NULL)
		    : odd ? dr_recv(a, 3, DR_FLOAT32, 0, 5, NULL, NULL) : DR_OK;
	else if (!strcmp(call, "new_group_bad")) {
		/* only the odd rank's list is bad: it says so, the others
		 * must not wait for it */
		int good[] = { 0, 1 }, dup[] = { 0, 0 };
		dr_group *g = NULL;
		err = dr_new_group(odd ? dup : good, 2, &g);
		dr_group_destroy(g);
	} else if (!strcmp(call, "new_group")) {
		int g1[] = { 0, 1 }, g2[] = { 0, world - 1 };
		dr_group *g = NULL;
		err = dr_new_group(odd ? g2 : g1, 2, &g);
		dr_group_destroy(g);
	} else
		FAIL("unknown call %s", call);
	printf("rank %d: %s: %s\n", rank, dr_err_name(err),
	       err ? dr_last_error() : "");
	/* A rank that only sent may not have seen it yet; the next call
	 * tells it, or finds the stray message itself. */
	err = dr_barrier(NULL, NULL, NULL, 0);
	printf("rank %d: then barrier: %s: %s\n", rank, dr_err_name(err),
	       err ? dr_last_error() : "");
out:
	fflush(stdout);
	free(a);
	free(b);
}

static void mode_nonmember(void)
{
	int ranks[] = { 0, 1 };
	struct grp G;
	char buf[64] = { 0 }, out[256];
	size_t sc[2] = { 1, 1 }, rc[2] = { 1, 1 };
	dr_work *w = (dr_work *)&G;

	make_group(&G, ranks, 2, "{0,1}");
	if (rank < 2) {
		check_group(&G);
	} else {
		if (dr_group_rank(G.g) != -1 || dr_group_size(G.g) != 2)
			FAIL("non-member: rank %d size %d", dr_group_rank(G.g),
			     dr_group_size(G.g));
		CHECK_ERR(DR_ENOTMEMBER, dr_barrier(G.g, NULL, NULL, 0));
		CHECK_ERR(DR_ENOTMEMBER, dr_all_reduce(buf, 1, DR_INT32, DR_SUM, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_reduce(buf, 1, DR_INT32, DR_SUM, 0, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_all_gather(buf, out, 1, DR_INT32, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_gather(buf, out, 1, DR_INT32, 0, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_scatter(buf, out, 1, DR_INT32, 0, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_reduce_scatter(out, buf, 1, DR_INT32, DR_SUM, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_all_to_all(buf, out, 1, DR_INT32, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_all_to_all_v(buf, sc, out, rc, DR_INT32, G.g, NULL));
		CHECK_ERR(DR_ENOTMEMBER, dr_all_gather(buf, out, 1, DR_INT32, G.g, &w));
		if (w)
			FAIL("a failed call left a work handle");
		CHECK_ERR(DR_ENOTMEMBER, dr_monitored_barrier(G.g, 1000, 1));
		if (!strstr(dr_last_error(), "member"))
			FAIL("message does not say why: %s", dr_last_error());
	}
	/* argument errors name what was wrong, on every rank */
	CHECK_ERR(DR_EINVAL, dr_reduce(buf, 1, DR_INT32, DR_SUM, world, NULL, NULL));
	CHECK_ERR(DR_EINVAL, dr_gather(buf, NULL, 1, DR_INT32, rank, NULL, NULL));
	CHECK_ERR(DR_EINVAL, dr_all_gather(NULL, out, 1, DR_INT32, NULL, NULL));
	CHECK_ERR(DR_EINVAL, dr_scatter(buf, out, 1, DR_INT32, -1, NULL, NULL));
	CHECK_ERR(DR_EINVAL, dr_all_to_all(buf, out, 1, (dr_dtype)42, NULL, NULL));
	CHECK_ERR(DR_ENOTSUP, dr_reduce_scatter(out, buf, 1, DR_FLOAT32, DR_BAND, NULL, NULL));
	CHECK_ERR(DR_EINVAL, dr_reduce(buf, 1, DR_INT32, (dr_op)99, 0, NULL, NULL));
	int dup[] = { 0, 0 }, out_of_range[] = { world };
	dr_group *bad = (dr_group *)&G;
	CHECK_ERR(DR_EINVAL, dr_new_group(dup, 2, &bad));
	if (bad || !strstr(dr_last_error(), "twice"))
		FAIL("duplicate ranks: %s", dr_last_error());
	CHECK_ERR(DR_EINVAL, dr_new_group(out_of_range, 1, &bad));
	CHECK_ERR(DR_EINVAL, dr_new_group(dup, 0, &bad));
	CHECK_OK(dr_barrier(NULL, NULL, NULL, 0));
	dr_group_destroy(G.g);
}

static void mode_p2p(void)
{
	enum { N = 20 };
	int32_t v;

	if (world < 2)
		FAIL("p2p needs 2 ranks");
	if (rank == 0) {
		/* interleave two tags; each tag must arrive in its own order */
		for (int32_t i = 0; i < N; i++)
			CHECK_OK(dr_send(&i, 1, DR_INT32, 1, 1 + i % 2, NULL));
	} else if (rank == 1) {
		for (int tag = 2; tag >= 1; tag--)
			for (int32_t i = tag - 1; i < N; i += 2) {
				int src = -2;
				CHECK_OK(dr_recv(&v, 1, DR_INT32, 0, tag, NULL, &src));
				if (v != i || src != 0)
					FAIL("tag %d: got %d from %d, want %d from 0",
					     tag, v, src, i);
			}
	}
	/* any source: everyone sends its rank to 0 */
	if (rank) {
		int32_t me = rank;
		dr_work *w;
		CHECK_OK(dr_isend(&me, 1, DR_INT32, 0, 7, NULL, &w));
		CHECK_OK(dr_work_wait(w));
		dr_work_free(w);
	} else {
		int seen[64] = { 0 };
		for (int i = 1; i < world; i++) {
			int src = -2;
			if (i % 2) {
				CHECK_OK(dr_recv(&v, 1, DR_INT32, DR_ANY_SOURCE, 7,
						 NULL, &src));
			} else {
				dr_work *w;
				CHECK_OK(dr_irecv(&v, 1, DR_INT32, DR_ANY_SOURCE, 7,
						  NULL, &w));
				CHECK_OK(dr_work_wait(w));
				src = dr_work_source(w);
				dr_work_free(w);
			}
			if (src != v || src < 1 || src >= world || seen[src]++)
				FAIL("any source: got %d, reported from %d", v, src);
		}
	}
	CHECK_OK(dr_barrier(NULL, NULL, NULL, 0));
}

static void mode_async(void)
{
	enum { K = 24 };
	size_t count = 1000, n = count * (size_t)world;
	dr_work *w[K];
	float *in[K], *out[K];
	int order[K];

	for (int k = 0; k < K; k++) {
		in[k] = alloc(n * sizeof(float));
		out[k] = alloc(n * sizeof(float));
		fill(in[k], DR_FLOAT32, n, rank, (size_t)k, DR_SUM);
		switch (k % 4) {
		case 0:
			CHECK_OK(dr_all_gather(in[k], out[k], count, DR_FLOAT32,
					       NULL, &w[k]));
			break;
		case 1:
			CHECK_OK(dr_reduce_scatter(in[k], out[k], count, DR_FLOAT32,
						   DR_SUM, NULL, &w[k]));
			break;
		case 2:
			CHECK_OK(dr_all_to_all(in[k], out[k], count, DR_FLOAT32,
					       NULL, &w[k]));
			break;
		case 3:
			CHECK_OK(dr_all_reduce(in[k], n, DR_FLOAT32, DR_SUM, NULL,
					       &w[k]));
			break;
		}
		order[k] = k;
	}
	/* wait in an order of our own, different on every rank */
	srand((unsigned)rank * 7919u + 1);
	for (int k = K - 1; k > 0; k--) {
		int j = rand() % (k + 1), x = order[k];
		order[k] = order[j];
		order[j] = x;
	}
	for (int i = 0; i < K; i++) {
		int k = order[i];
		CHECK_OK(dr_work_wait(w[k]));
		if (!dr_work_is_completed(w[k]) || dr_work_status(w[k]) != DR_OK)
			FAIL("work %d: waited but not completed", k);
		dr_work_free(w[k]);
		int all[64];
		for (int j = 0; j < world; j++)
			all[j] = j;
		for (size_t i2 = 0; i2 < (k % 4 == 3 ? n : count); i2++) {
			double want;
			switch (k % 4) {
			case 0: want = val((int)(i2 / count), (i2 % count) + (size_t)k, DR_SUM);
				break;
			case 1: want = reduced(all, world, (size_t)rank * count + i2 + (size_t)k, DR_SUM, DR_FLOAT32); break;
			case 2: want = val((int)(i2 / count), (size_t)rank * count + i2 % count + (size_t)k, DR_SUM); break;
			default: want = reduced(all, world, i2 + (size_t)k, DR_SUM, DR_FLOAT32); break;
			}
			expect("async", k % 4 == 3 ? in[k] : out[k], DR_FLOAT32,
			       i2, want);
		}
		free(in[k]);
		free(out[k]);
	}
}

/* Ranks 1 and 3 skip a monitored barrier (skip_root: rank 0 does). */
static void mode_monitored(int wait_all, int skip_root)
{
	int skip = skip_root ? rank == 0 : rank == 1 || rank == 3;
	int32_t token = 0;

	if (!skip) {
		dr_err err = dr_monitored_barrier(NULL, 1500, wait_all);
		printf("rank %d: %s: %s\n", rank, dr_err_name(err),
		       err ? dr_last_error() : "");
		fflush(stdout);
	}
	/* the skipping ranks stay until the others are done with them */
	if (skip_root) {
		if (rank == 0)
			for (int r = 1; r < world; r++)
				CHECK_OK(dr_recv(&token, 1, DR_INT32, r, 99, NULL, NULL));
		else
			CHECK_OK(dr_send(&token, 1, DR_INT32, 0, 99, NULL));
	} else if (rank == 0) {
		for (int r = 1; r <= 3 && r < world; r += 2)
			CHECK_OK(dr_send(&token, 1, DR_INT32, r, 99, NULL));
	} else if (skip) {
		CHECK_OK(dr_recv(&token, 1, DR_INT32, 0, 99, NULL, NULL));
	}
}

/* Torch gives each group its own queue: asynchronous calls on groups A
 * and B issued A-then-B on even ranks and B-then-A on odd ones must all
 * complete (one queue for all groups would run A first on one rank and B
 * first on the other, and both wait for ever). */
static void mode_order(void)
{
	enum { K = 4 };
	int all[64];
	dr_group *a, *b;
	dr_work *w[2 * K];
	int64_t va[K], vb[K], sum = (int64_t)world * (world - 1) / 2;

	for (int r = 0; r < world; r++)
		all[r] = r;
	CHECK_OK(dr_new_group(all, world, &a));
	CHECK_OK(dr_new_group(all, world, &b));
	for (int k = 0; k < K; k++) {
		va[k] = rank + 1000 * k;
		vb[k] = rank + 2000 * k;
		dr_group *first = rank % 2 ? b : a, *second = rank % 2 ? a : b;
		int64_t *v1 = rank % 2 ? &vb[k] : &va[k];
		int64_t *v2 = rank % 2 ? &va[k] : &vb[k];
		CHECK_OK(dr_all_reduce(v1, 1, DR_INT64, DR_SUM, first, &w[2 * k]));
		CHECK_OK(dr_all_reduce(v2, 1, DR_INT64, DR_SUM, second,
				       &w[2 * k + 1]));
	}
	/* A blocking call comes after the group's asynchronous ones. */
	int64_t after = 1;
	CHECK_OK(dr_all_reduce(&after, 1, DR_INT64, DR_SUM, a, NULL));
	if (after != world)
		FAIL("blocking all_reduce after async: %" PRId64, after);
	for (int i = 0; i < 2 * K; i++) {
		CHECK_OK(dr_work_wait(w[i]));
		dr_work_free(w[i]);
	}
	for (int k = 0; k < K; k++)
		if (va[k] != sum + (int64_t)world * 1000 * k ||
		    vb[k] != sum + (int64_t)world * 2000 * k)
			FAIL("call %d: a %" PRId64 " b %" PRId64, k, va[k], vb[k]);
	dr_group_destroy(a);
	dr_group_destroy(b);
}

static int threads_before_init;

static int thread_count(void)
{
	return check_dir_entries("/proc/self/task");
}

/* Returns its thread id. */
static void *idle_thread(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)syscall(SYS_gettid);
}

/* Until thread tid, joined, has left /proc (1 s at most): pthread_join
 * returns once the kernel has cleared the thread's tid, a moment before
 * it drops the thread's task entry. */
static void wait_gone(long tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%ld", tid);
	for (int t = 0; t < 1000 && access(path, F_OK) == 0; t++)
		usleep(1000);
}

/* dr_destroy_process_group frees every group; handles the program still
 * holds stay safe to ask and to destroy.  Under ASAN this also shows that
 * nothing leaks and nothing is freed twice, even for a handle the program
 * drops. */
static void mode_destroy(void)
{
	int all[64], first = 0;
	dr_group *kept, *lost, *solo;
	dr_work *w;
	int64_t v = 1, v2 = 1;

	for (int r = 0; r < world; r++)
		all[r] = r;
	CHECK_OK(dr_new_group(all, world, &kept));
	CHECK_OK(dr_new_group(all, world, &lost));
	CHECK_OK(dr_new_group(&first, 1, &solo));
	CHECK_OK(dr_all_reduce(&v, 1, DR_INT64, DR_SUM, lost, &w));
	lost = NULL; /* dropped without dr_group_destroy */
	CHECK_OK(dr_all_reduce(&v2, 1, DR_INT64, DR_SUM, kept, NULL));
	CHECK_OK(dr_destroy_process_group());
	CHECK_ERR(DR_OK, dr_work_wait(w));
	CHECK_ERR(DR_OK, dr_work_wait(w));
	dr_work_free(w);
	if (v != world || v2 != world)
		FAIL("all_reduce before destroy: %" PRId64 ", %" PRId64, v, v2);
	if (dr_group_rank(kept) != -1 || dr_group_size(kept) != 0)
		FAIL("a destroyed group still says rank %d of %d",
		     dr_group_rank(kept), dr_group_size(kept));
	checks++;
	CHECK_ERR(DR_ENOINIT, dr_all_reduce(&v, 1, DR_INT64, DR_SUM, kept, NULL));
	CHECK_ERR(DR_ENOINIT, dr_barrier(solo, NULL, NULL, 0));
	/* Joined again, the old handles are refused, not taken for groups
	 * of the new process group.  (One rank only: a job's ranks cannot
	 * join its store twice.) */
	if (world == 1) {
		CHECK_OK(dr_init_process_group(NULL, NULL));
		CHECK_ERR(DR_EINVAL, dr_all_reduce(&v, 1, DR_INT64, DR_SUM, kept,
						   NULL));
		if (!strstr(dr_last_error(), "destroyed with the process group"))
			FAIL("message: %s", dr_last_error());
		CHECK_ERR(DR_EINVAL, dr_barrier(solo, NULL, NULL, 0));
		CHECK_OK(dr_barrier(NULL, NULL, NULL, 0));
		CHECK_OK(dr_destroy_process_group());
	}
	dr_group_destroy(kept);
	dr_group_destroy(solo);
	/* (a sanitizer may run a thread of its own: count from before init)
	 * A joined thread can stay listed in /proc for a moment (wait_gone). */
	int left = thread_count();

	for (int t = 0; t < 1000 && left != threads_before_init; t++) {
		usleep(1000);
		left = thread_count();
	}
	if (left != threads_before_init)
		FAIL("%d threads 1 s after destroy, %d before init", left,
		     threads_before_init);
	checks++;
}

/* Every call before init fails with DR_ENOINIT (none crashes). */
static void mode_noinit(void)
{
	int32_t x = 0, y[2] = { 0, 0 };
	size_t c1[1] = { 1 };
	dr_group *g = (dr_group *)1;
	dr_work *w = (dr_work *)1;

	rank = 0;
	CHECK_ERR(DR_ENOINIT, dr_barrier(NULL, &w, NULL, 0));
	if (w)
		FAIL("*work not NULL after a failed call");
	CHECK_ERR(DR_ENOINIT, dr_all_reduce(&x, 1, DR_INT32, DR_SUM, NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_broadcast(&x, 1, DR_INT32, 0, NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_reduce(&x, 1, DR_INT32, DR_SUM, 0, NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_all_gather(&x, y, 1, DR_INT32, NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_gather(&x, y, 1, DR_INT32, 0, NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_scatter(y, &x, 1, DR_INT32, 0, NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_reduce_scatter(y, &x, 1, DR_INT32, DR_SUM,
						NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_all_to_all(&x, y, 1, DR_INT32, NULL, NULL));
	CHECK_ERR(DR_ENOINIT, dr_all_to_all_v(&x, c1, y, c1, DR_INT32, NULL,
					      NULL));
	CHECK_ERR(DR_ENOINIT, dr_monitored_barrier(NULL, 0, 0));
	CHECK_ERR(DR_ENOINIT, dr_send(&x, 1, DR_INT32, 1, 0, NULL));
	CHECK_ERR(DR_ENOINIT, dr_recv(&x, 1, DR_INT32, 1, 0, NULL, NULL));
	w = (dr_work *)1;
	CHECK_ERR(DR_ENOINIT, dr_isend(&x, 1, DR_INT32, 1, 0, NULL, &w));
	if (w)
		FAIL("*work not NULL after a failed isend");
	CHECK_ERR(DR_ENOINIT, dr_irecv(&x, 1, DR_INT32, 1, 0, NULL, &w));
	CHECK_ERR(DR_ENOINIT, dr_new_group(&rank, 1, &g));
	if (g)
		FAIL("*group not NULL after a failed new_group");
	CHECK_ERR(DR_ENOINIT, dr_destroy_process_group());
	if (dr_get_rank() != -1 || dr_get_world_size() != -1 ||
	    dr_group_rank(NULL) != -1 || dr_group_size(NULL) != -1)
		FAIL("rank or size not -1 before init");
	checks++;
	if (!strstr(dr_last_error(), "not been initialized"))
		FAIL("message: %s", dr_last_error());
	checks++;
	printf("rank 0: ok, %ld checks\n", checks);
}

/* dr_barrier with device_ids where CUDA is unavailable says why. */
static void mode_nocuda(void)
{
	int dev = 0;
	dr_err err = dr_barrier(NULL, NULL, &dev, 1);

	printf("rank %d: %s: %s\n", rank, dr_err_name(err), dr_last_error());
	if (err != DR_ENOCUDA)
		FAIL("want DR_ENOCUDA");
	checks++;
	/* failed alone: the group goes on */
	CHECK_OK(dr_barrier(NULL, NULL, NULL, 0));
}

/* On the fake driver: device memory where the transport cannot go is
 * refused on the calling rank alone, before anything is sent. */
static void mode_device(void)
{
	int32_t *dev, host[64], mine = rank + 1;
	size_t bytes = sizeof(host);
	dr_work *w = (dr_work *)1;
	dr_err err;

	if (!dr_cuda_available()) {
		printf("rank %d: skip: no CUDA\n", rank);
		return;
	}
	CHECK_OK(dr_cuda_alloc(0, bytes, (void **)&dev));
	CHECK_OK(dr_cuda_memcpy(dev, &mine, sizeof(mine)));
	if (world > 1) {
		int peer = rank ^ 1;
		if (peer < world) {
			CHECK_ERR(DR_ENOTSUP, dr_send(dev, 1, DR_INT32, peer, 0, NULL));
			if (!strstr(dr_last_error(), "stage through host memory"))
				FAIL("message: %s", dr_last_error());
			CHECK_ERR(DR_ENOTSUP, dr_recv(dev, 1, DR_INT32, peer, 0,
						      NULL, NULL));
			CHECK_ERR(DR_ENOTSUP, dr_isend(dev, 1, DR_INT32, peer, 0,
						       NULL, &w));
			if (w)
				FAIL("*work not NULL after a failed isend");
			CHECK_ERR(DR_ENOTSUP, dr_irecv(dev, 1, DR_INT32, peer, 0,
						       NULL, &w));
		}
	}
	/* The root mixes a device sendbuf with a host recvbuf (and the
	 * reverse for scatter): refused alone, at once. */
	if (rank == 0) {
		err = dr_gather(dev, host, 1, DR_INT32, 0, NULL, NULL);
		printf("rank 0: gather: %s: %s\n", dr_err_name(err), dr_last_error());
		if (err != DR_EINVAL || !strstr(dr_last_error(), "recvbuf is on the host"))
			FAIL("mixed gather: %s", dr_err_name(err));
		checks++;
		err = dr_scatter(host, dev, 1, DR_INT32, 0, NULL, &w);
		printf("rank 0: scatter: %s: %s\n", dr_err_name(err), dr_last_error());
		if (err != DR_EINVAL || w)
			FAIL("mixed scatter: %s", dr_err_name(err));
		checks++;
	}
	/* Those failed alone: every rank's next gather is the same call. A
	 * non-root's recvbuf is not used, so device memory there does not
	 * matter. */
	CHECK_OK(dr_gather(&mine, rank == 0 ? host : (void *)dev, 1, DR_INT32, 0,
			   NULL, NULL));
	if (rank == 0)
		for (int r = 0; r < world; r++)
			if (host[r] != r + 1)
				FAIL("gather: slot %d holds %d", r, host[r]);
	CHECK_OK(dr_gather(dev, rank == 0 ? (void *)dev : host, 1, DR_INT32, 0,
			   NULL, NULL));
	if (rank == 0) {
		CHECK_OK(dr_cuda_memcpy(host, dev, (size_t)world * sizeof(int32_t)));
		for (int r = 0; r < world; r++)
			if (host[r] != r + 1)
				FAIL("device gather: slot %d holds %d", r, host[r]);
	}
	CHECK_OK(dr_cuda_free(dev));
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "all";

	setvbuf(stdout, NULL, _IOLBF, 0);
	rank = getenv("RANK") ? atoi(getenv("RANK")) : -1;
	if (!strcmp(mode, "noinit")) {
		mode_noinit();
		return 0;
	}
	/* ThreadSanitizer starts a thread of its own at the first
	 * pthread_create: have it start before the count. */
	pthread_t t;
	void *tid;
	if (!pthread_create(&t, NULL, idle_thread, NULL) &&
	    !pthread_join(t, &tid))
		wait_gone((long)(intptr_t)tid);
	threads_before_init = thread_count();
	CHECK_OK(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	world = dr_get_world_size();
	if (world > 64)
		FAIL("mode %s is for at most 64 ranks (coll_limits: more)", mode);
	if (!strcmp(mode, "all"))
		mode_all();
	else if (!strcmp(mode, "mismatch"))
		mode_mismatch(argc > 2 ? argv[2] : "");
	else if (!strcmp(mode, "nonmember"))
		mode_nonmember();
	else if (!strcmp(mode, "p2p"))
		mode_p2p();
	else if (!strcmp(mode, "async"))
		mode_async();
	else if (!strcmp(mode, "monitored"))
		mode_monitored(argc > 2 && !strcmp(argv[2], "all"),
			       argc > 2 && !strcmp(argv[2], "root"));
	else if (!strcmp(mode, "order"))
		mode_order();
	else if (!strcmp(mode, "destroy"))
		mode_destroy();
	else if (!strcmp(mode, "nocuda"))
		mode_nocuda();
	else if (!strcmp(mode, "device"))
		mode_device();
	else
		FAIL("unknown mode %s", mode);
	if (strcmp(mode, "destroy"))
		dr_destroy_process_group();
	if (strcmp(mode, "mismatch") && strcmp(mode, "monitored"))
		printf("rank %d: ok, %ld checks\n", rank, checks);
	return 0;
}
