/*
 * api_fuzz.c - every public entry point of libdistrun driven with
 * out-of-range arguments: `distrun -n 3 build/tests/api_fuzz [ITERS [SEED]]`.
 *
 * The arguments each entry point takes are written down here on their
 * own (not read from the library's table in coll.h), so that a check the
 * table forgets shows up as a call that succeeds or hangs.
 *
 *   1. Before init, every call fails with DR_ENOINIT (and clears *work);
 *      dr_init_process_group_opts refuses bad options at once; the
 *      helpers (dr_strerror, dr_dtype_name, ...) answer any value.
 *   2. After init, rank 0 alone calls each entry point with one argument
 *      bad at a time, every bad value of a pool per kind of argument
 *      (negative and INT_MIN ops, dtypes, roots, peers and tags, counts
 *      whose size would wrap, NULL buffers and count arrays, a group
 *      without this rank, device lists, NULL work), and checks the exact
 *      error and that the message starts with the call's name.
 *   3. Then ITERS (default 20000) calls of random entry points whose
 *      arguments are each bad with probability 1/3 (at least one): every
 *      one must fail, on rank 0 alone.
 *   4. Every rank: dr_new_group with bad lists fails everywhere alike,
 *      then an all_reduce and a ring of sends show that no bad call left
 *      anything behind (a half-started collective would hang or garble
 *      them).
 *
 * Prints "rank R: api_fuzz ok (N calls refused)"; anything else prints
 * "rank R: ..." on stderr and exits 1.  With API_FUZZ_VERBOSE set, each
 * call is named on stderr before it is made (to find one that hangs).
 */
#include <distrun.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1, size;

#include "check.h"

enum entry {
	E_ALL_REDUCE, E_BROADCAST, E_REDUCE, E_ALL_GATHER, E_GATHER,
	E_SCATTER, E_REDUCE_SCATTER, E_ALL_TO_ALL, E_ALL_TO_ALL_V, E_BARRIER,
	E_CUDA_BARRIER_DEVICE, E_MONITORED_BARRIER, E_SEND, E_RECV, E_ISEND,
	E_IRECV, E_COUNT
};

/* What an entry point takes. */
enum kind {
	K_GROUP = 1 << 0, K_DTYPE = 1 << 1, K_OP = 1 << 2, K_ROOT = 1 << 3,
	K_PEER = 1 << 4, K_ANY = 1 << 5, K_TAG = 1 << 6, K_BUF1 = 1 << 7,
	K_BUF2 = 1 << 8, K_COUNT = 1 << 9, K_COUNTS = 1 << 10,
	K_DEVS = 1 << 11, K_DEV1 = 1 << 12, K_WORK = 1 << 13,
};
#define NKIND 14

static const struct {
	const char *name;
	unsigned kinds;
} entries[E_COUNT] = {
	[E_ALL_REDUCE] = { "dr_all_reduce", K_GROUP | K_DTYPE | K_OP | K_BUF1 | K_COUNT },
	[E_BROADCAST] = { "dr_broadcast", K_GROUP | K_DTYPE | K_ROOT | K_BUF1 | K_COUNT },
	[E_REDUCE] = { "dr_reduce", K_GROUP | K_DTYPE | K_OP | K_ROOT | K_BUF1 | K_COUNT },
	[E_ALL_GATHER] = { "dr_all_gather", K_GROUP | K_DTYPE | K_BUF1 | K_BUF2 | K_COUNT },
	/* rank 0 is the root in the valid call: its recvbuf counts */
	[E_GATHER] = { "dr_gather", K_GROUP | K_DTYPE | K_ROOT | K_BUF1 | K_BUF2 | K_COUNT },
	[E_SCATTER] = { "dr_scatter", K_GROUP | K_DTYPE | K_ROOT | K_BUF1 | K_BUF2 | K_COUNT },
	[E_REDUCE_SCATTER] = { "dr_reduce_scatter", K_GROUP | K_DTYPE | K_OP | K_BUF1 | K_BUF2 | K_COUNT },
	[E_ALL_TO_ALL] = { "dr_all_to_all", K_GROUP | K_DTYPE | K_BUF1 | K_BUF2 | K_COUNT },
	[E_ALL_TO_ALL_V] = { "dr_all_to_all_v", K_GROUP | K_DTYPE | K_BUF1 | K_BUF2 | K_COUNTS },
	[E_BARRIER] = { "dr_barrier", K_GROUP | K_DEVS },
	[E_CUDA_BARRIER_DEVICE] = { "dr_cuda_barrier_device", K_GROUP | K_DEVS | K_DEV1 },
	[E_MONITORED_BARRIER] = { "dr_monitored_barrier", K_GROUP },
	[E_SEND] = { "dr_send", K_GROUP | K_DTYPE | K_PEER | K_TAG | K_BUF1 | K_COUNT },
	[E_RECV] = { "dr_recv", K_GROUP | K_DTYPE | K_PEER | K_ANY | K_TAG | K_BUF1 | K_COUNT },
	[E_ISEND] = { "dr_isend", K_GROUP | K_DTYPE | K_PEER | K_TAG | K_BUF1 | K_COUNT | K_WORK },
	[E_IRECV] = { "dr_irecv", K_GROUP | K_DTYPE | K_PEER | K_ANY | K_TAG | K_BUF1 | K_COUNT | K_WORK },
};

struct args {
	dr_group *group;
	int dtype, op, root, peer, tag;
	const void *buf1;
	void *buf2;
	size_t count;
	const size_t *scounts, *rcounts;
	const int *devs;
	int ndev;
	dr_work **work;
};

/* A bad value of one kind and the error it must give (0: any error). */
struct bad {
	unsigned kind;
	long long v;
	dr_err want;
};

/* Values no check may let through.  Counts: byte sizes that would wrap
 * (or leave no room for headers); a pointer kind's v says which pointer. */
static const struct bad bads[] = {
	{ K_DTYPE, -1, DR_EINVAL }, { K_DTYPE, INT_MIN, DR_EINVAL },
	{ K_DTYPE, DR_DTYPE_COUNT_, DR_EINVAL }, { K_DTYPE, INT_MAX, DR_EINVAL },
	{ K_OP, -7, DR_EINVAL }, { K_OP, -1, DR_EINVAL },
	{ K_OP, INT_MIN, DR_EINVAL }, { K_OP, DR_OP_COUNT_, DR_EINVAL },
	{ K_OP, INT_MAX, DR_EINVAL },
	{ K_OP, DR_BAND, DR_ENOTSUP }, /* bitwise on float32 */
	{ K_ROOT, -1, DR_EINVAL }, { K_ROOT, INT_MIN, DR_EINVAL },
	{ K_ROOT, -2, DR_EINVAL }, { K_ROOT, 1 << 20, DR_EINVAL },
	{ K_ROOT, INT_MAX, DR_EINVAL }, { K_ROOT, -3 /* size */, DR_EINVAL },
	{ K_PEER, 0 /* self */, DR_EINVAL }, { K_PEER, -2, DR_EINVAL },
	{ K_PEER, INT_MIN, DR_EINVAL }, { K_PEER, INT_MAX, DR_EINVAL },
	{ K_PEER, -3 /* size */, DR_EINVAL },
	{ K_TAG, -1, DR_EINVAL }, { K_TAG, INT_MIN, DR_EINVAL },
	{ K_BUF1, 0 /* NULL */, DR_EINVAL }, { K_BUF2, 0, DR_EINVAL },
	{ K_COUNT, -1 /* SIZE_MAX */, DR_EINVAL },
	{ K_COUNT, -2 /* SIZE_MAX / 2 */, DR_EINVAL },
	{ K_COUNT, -3 /* 2^58: 2^60 bytes of float32 */, DR_EINVAL },
	{ K_COUNTS, 0 /* send NULL */, DR_EINVAL },
	{ K_COUNTS, 1 /* recv NULL */, DR_EINVAL },
	{ K_COUNTS, 2 /* both NULL */, DR_EINVAL },
	{ K_COUNTS, 3 /* a count of SIZE_MAX */, DR_EINVAL },
	{ K_COUNTS, 4 /* counts whose sum wraps */, DR_EINVAL },
	{ K_COUNTS, 5 /* the piece to itself differs */, DR_EINVAL },
	{ K_DEVS, -1 /* n */, DR_EINVAL }, { K_DEVS, INT_MIN, DR_EINVAL },
	{ K_DEVS, 1 /* NULL list */, DR_EINVAL },
	{ K_DEV1, 0 /* n = 0 */, DR_EINVAL },
	{ K_WORK, 0 /* NULL */, DR_EINVAL },
	{ K_GROUP, 0 /* a group without this rank */, DR_ENOTMEMBER },
};
#define NBAD (sizeof(bads) / sizeof(bads[0]))

#define COUNT 4
static float b1[COUNT * 64], b2[COUNT * 64];
static size_t ok_counts[64], huge_counts[64], wrap_counts[64], odd_counts[64];
static const int dev0[1] = { 0 };
static dr_work *work_slot;
static dr_group *others; /* a group of every rank but 0 */

static void valid(enum entry e, struct args *a)
{
	memset(a, 0, sizeof(*a));
	a->dtype = DR_FLOAT32;
	a->op = DR_SUM;
	a->root = 0;
	a->peer = 1;
	a->tag = 7;
	a->buf1 = b1;
	a->buf2 = b2;
	a->count = COUNT;
	a->scounts = a->rcounts = ok_counts;
	if (e == E_CUDA_BARRIER_DEVICE) {
		a->devs = dev0;
		a->ndev = 1;
	}
	if (entries[e].kinds & K_WORK)
		a->work = &work_slot;
}

static void make_bad(struct args *a, const struct bad *b)
{
	switch (b->kind) {
	case K_GROUP: /* with a root that is in it */
		a->group = others;
		a->root = 1;
		break;
	case K_DTYPE: a->dtype = (int)b->v; break;
	case K_OP: a->op = (int)b->v; break;
	case K_ROOT: a->root = b->v == -3 ? size : (int)b->v; break;
	case K_PEER: a->peer = b->v == -3 ? size : (int)b->v; break;
	case K_TAG: a->tag = (int)b->v; break;
	case K_BUF1: a->buf1 = NULL; break;
	case K_BUF2: a->buf2 = NULL; break;
	case K_COUNT:
		a->count = b->v == -1 ? SIZE_MAX : b->v == -2 ? SIZE_MAX / 2 :
			   (size_t)1 << 58;
		break;
	case K_COUNTS:
		if (b->v == 0 || b->v == 2)
			a->scounts = NULL;
		if (b->v == 1 || b->v == 2)
			a->rcounts = NULL;
		if (b->v == 3)
			a->scounts = huge_counts;
		if (b->v == 4)
			a->rcounts = wrap_counts;
		if (b->v == 5)
			a->scounts = odd_counts;
		break;
	case K_DEVS:
		if (b->v == 1) {
			a->ndev = 1;
			a->devs = NULL;
		} else {
			a->ndev = (int)b->v;
			a->devs = dev0;
		}
		break;
	case K_DEV1: a->ndev = 0; a->devs = dev0; break;
	case K_WORK: a->work = NULL; break;
	}
}

static dr_err call(enum entry e, const struct args *a)
{
	dr_dtype t = (dr_dtype)a->dtype;
	dr_op o = (dr_op)a->op;
	void *buf = (void *)a->buf1;

	switch (e) {
	case E_ALL_REDUCE: return dr_all_reduce(buf, a->count, t, o, a->group, NULL);
	case E_BROADCAST: return dr_broadcast(buf, a->count, t, a->root, a->group, NULL);
	case E_REDUCE: return dr_reduce(buf, a->count, t, o, a->root, a->group, NULL);
	case E_ALL_GATHER: return dr_all_gather(a->buf1, a->buf2, a->count, t, a->group, NULL);
	case E_GATHER: return dr_gather(a->buf1, a->buf2, a->count, t, a->root, a->group, NULL);
	case E_SCATTER: return dr_scatter(a->buf1, a->buf2, a->count, t, a->root, a->group, NULL);
	case E_REDUCE_SCATTER:
		return dr_reduce_scatter(a->buf1, a->buf2, a->count, t, o, a->group, NULL);
	case E_ALL_TO_ALL: return dr_all_to_all(a->buf1, a->buf2, a->count, t, a->group, NULL);
	case E_ALL_TO_ALL_V:
		return dr_all_to_all_v(a->buf1, a->scounts, a->buf2, a->rcounts, t,
				       a->group, NULL);
	case E_BARRIER: return dr_barrier(a->group, NULL, a->devs, a->ndev);
	case E_CUDA_BARRIER_DEVICE:
		return dr_cuda_barrier_device(a->group, NULL, a->devs, a->ndev);
	case E_MONITORED_BARRIER: return dr_monitored_barrier(a->group, 1000, 1);
	case E_SEND: return dr_send(a->buf1, a->count, t, a->peer, a->tag, a->group);
	case E_RECV: return dr_recv(buf, a->count, t, a->peer, a->tag, a->group, NULL);
	case E_ISEND:
		return dr_isend(a->buf1, a->count, t, a->peer, a->tag, a->group, a->work);
	case E_IRECV:
		return dr_irecv(buf, a->count, t, a->peer, a->tag, a->group, a->work);
	default: return DR_OK;
	}
}

/* Whether bad value b applies to entry e (the row's kinds, and the
 * valid call's other arguments). */
static int applies(enum entry e, const struct bad *b)
{
	unsigned k = entries[e].kinds;

	if (!(k & b->kind))
		return 0;
	/* DR_ANY_SOURCE is a peer a receive may name */
	if (b->kind == K_PEER && b->v == -1)
		return 0;
	/* a device list of none is fine for dr_barrier, n < 1 is what
	 * dr_cuda_barrier_device refuses (K_DEV1) */
	return 1;
}

static long refused;

/* Calls e with a; the call must fail (with want, unless 0), say so
 * naming the call, and leave *work NULL. */
static void expect_fail(enum entry e, const struct args *a, dr_err want,
			const char *what)
{
	dr_err err;

	if (getenv("API_FUZZ_VERBOSE"))
		fprintf(stderr, "%s with %s\n", entries[e].name, what);
	work_slot = (dr_work *)&work_slot; /* must be cleared */
	err = call(e, a);
	if (!err)
		DIE("%s with %s succeeded", entries[e].name, what);
	if (want && err != want)
		DIE("%s with %s: %s (%s), want %s", entries[e].name, what,
		    dr_err_name(err), dr_last_error(), dr_err_name(want));
	if ((err == DR_EINVAL || err == DR_ENOTMEMBER || err == DR_ENOTSUP) &&
	    strncmp(dr_last_error(), entries[e].name, strlen(entries[e].name)) &&
	    strncmp(dr_last_error(), entries[e].name + 3, strlen(entries[e].name) - 3))
		DIE("%s with %s: the message does not name the call: %s",
		    entries[e].name, what, dr_last_error());
	if (a->work && work_slot)
		DIE("%s with %s left *work set", entries[e].name, what);
	refused++;
}

static void before_init(void)
{
	dr_init_options o = DR_INIT_OPTIONS_INIT;
	const struct { int rank, size; } bad_opts[] = {
		{ -2, -1 }, { INT_MIN, -1 }, { -1, -5 },
		{ -1, INT_MIN }, { 5, 2 }, { INT_MAX, 4 },
	};
	struct args a;

	for (int e = 0; e < E_COUNT; e++) {
		valid(e, &a);
		expect_fail(e, &a, DR_ENOINIT, "no process group");
	}
	for (size_t i = 0; i < sizeof(bad_opts) / sizeof(bad_opts[0]); i++) {
		dr_err err;

		o.rank = bad_opts[i].rank;
		o.world_size = bad_opts[i].size;
		err = dr_init_process_group_opts(&o);
		if (err != DR_EINVAL)
			DIE("init with rank %d world_size %d: %s (%s), want DR_EINVAL",
			    o.rank, o.world_size, dr_err_name(err), dr_last_error());
		refused++;
	}
	o = (dr_init_options)DR_INIT_OPTIONS_INIT;
	o.backend = "nccl";
	if (dr_init_process_group_opts(&o) != DR_EINVAL)
		DIE("init with backend nccl: %s", dr_last_error());
	o.backend = NULL;
	o.transport = "carrier-pigeon";
	if (dr_init_process_group_opts(&o) != DR_EINVAL)
		DIE("init with transport carrier-pigeon: %s", dr_last_error());
	refused += 2;
	/* the helpers answer any value */
	for (long long v = INT_MIN; v <= INT_MAX; v += 0x10000001ll) {
		if (!dr_strerror((dr_err)v) || !dr_err_name((dr_err)v) ||
		    !dr_op_name((dr_op)v) || !dr_dtype_name((dr_dtype)v))
			DIE("a helper gave NULL for %lld", v);
		if (((unsigned long long)v >= DR_DTYPE_COUNT_) &&
		    (dr_dtype_size((dr_dtype)v) || strcmp(dr_dtype_name((dr_dtype)v), "invalid")))
			DIE("dtype %lld has a size or a name", v);
		if ((unsigned long long)v >= DR_OP_COUNT_ &&
		    strcmp(dr_op_name((dr_op)v), "invalid"))
			DIE("op %lld has a name", v);
	}
	if (dr_work_wait(NULL) != DR_EINVAL || dr_work_wait_timeout(NULL, -1) != DR_EINVAL ||
	    dr_work_is_completed(NULL) || dr_work_status(NULL) != DR_EINVAL ||
	    dr_work_source(NULL) != -1 || dr_group_rank(NULL) != -1 ||
	    dr_group_size(NULL) != -1 || dr_new_group(NULL, 1, NULL) != DR_EINVAL)
		DIE("a NULL handle is not refused before init");
	dr_work_free(NULL);
	dr_group_destroy(NULL);
}

/* Phase 2: one bad argument at a time. */
static void one_at_a_time(void)
{
	struct args a;
	char what[96];

	for (int e = 0; e < E_COUNT; e++)
		for (size_t i = 0; i < NBAD; i++) {
			if (!applies(e, &bads[i]))
				continue;
			valid(e, &a);
			make_bad(&a, &bads[i]);
			snprintf(what, sizeof(what), "bad value %lld of kind %#x",
				 bads[i].v, bads[i].kind);
			/* without CUDA, its devices fail first */
			expect_fail(e, &a, e == E_CUDA_BARRIER_DEVICE &&
				    bads[i].kind == K_GROUP ? 0 : bads[i].want,
				    what);
		}
	/* the same send with DR_ANY_SOURCE as its destination */
	valid(E_SEND, &a);
	a.peer = DR_ANY_SOURCE;
	expect_fail(E_SEND, &a, DR_EINVAL, "DR_ANY_SOURCE as destination");
}

/* Phase 3: random calls, each argument bad with probability 1/3. */
static void random_calls(long iters, unsigned seed)
{
	struct args a;
	char what[64];

	srand(seed);
	for (long it = 0; it < iters; it++) {
		int e = rand() % E_COUNT, nbad = 0;

		valid(e, &a);
		while (!nbad)
			for (size_t i = 0; i < NBAD; i++)
				if (applies(e, &bads[i]) && rand() % (3 * 4) == 0) {
					make_bad(&a, &bads[i]);
					nbad++;
				}
		snprintf(what, sizeof(what), "%d bad arguments (seed %u, call %ld)",
			 nbad, seed, it);
		expect_fail(e, &a, 0, what);
	}
}

/* Phase 4: collective checks that must fail on every rank alike, then
 * proof that nothing was left half done. */
static void still_sound(void)
{
	int bad_lists[3][3] = { { 0, 0, 1 }, { 0, 1, -1 }, { INT_MAX, 0, 1 } };
	int ns[] = { 2, 3, 3 }, nbad[] = { 0, -1, INT_MIN };
	int64_t v = rank + 1, sum = (int64_t)size * (size + 1) / 2;
	int token = 0;
	dr_group *g;

	for (int i = 0; i < 3; i++) {
		if (dr_new_group(bad_lists[i], ns[i], &g) != DR_EINVAL || g)
			DIE("dr_new_group with a bad list %d: %s", i, dr_last_error());
		if (dr_new_group(bad_lists[0], nbad[i], &g) != DR_EINVAL || g)
			DIE("dr_new_group with n = %d: %s", nbad[i], dr_last_error());
		refused += 2;
	}
	TRY(dr_all_reduce(&v, 1, DR_INT64, DR_SUM, NULL, NULL));
	if (v != sum)
		DIE("all_reduce after the fuzz: %lld, want %lld", (long long)v,
		    (long long)sum);
	if (rank == 0)
		TRY(dr_send(&token, 1, DR_INT32, 1, 3, NULL));
	else {
		TRY(dr_recv(&token, 1, DR_INT32, rank - 1, 3, NULL, NULL));
		token++;
		if (rank + 1 < size)
			TRY(dr_send(&token, 1, DR_INT32, rank + 1, 3, NULL));
	}
	if (rank && token != rank)
		DIE("ring after the fuzz: token %d", token);
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 20000;
	unsigned seed = argc > 2 ? (unsigned)atol(argv[2]) : 1;
	int rest[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	before_init();
	TRY(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	size = dr_get_world_size();
	if (size < 3 || size > 64)
		DIE("run on 3 to 64 ranks");
	for (int i = 0; i < size; i++) {
		ok_counts[i] = 1;
		huge_counts[i] = i == 1 ? SIZE_MAX : 1;
		wrap_counts[i] = i == 0 ? 1 : SIZE_MAX / 2 + 1;
		odd_counts[i] = i == 0 ? 2 : 1;
		rest[i] = i + 1;
	}
	TRY(dr_new_group(rest, size - 1, &others));
	if (rank == 0) {
		one_at_a_time();
		random_calls(iters, seed);
	}
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	still_sound();
	dr_group_destroy(others);
	TRY(dr_destroy_process_group());
	printf("rank %d: api_fuzz ok (%ld calls refused)\n", rank, refused);
	return 0;
}
