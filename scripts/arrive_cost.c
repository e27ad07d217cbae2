/*
 * arrive_cost.c - what each thing a rank does around its arrival adds to
 * the two-flag floor of a 2-process barrier (scripts/floor_barrier.c),
 * all in one run, so that every variant sees the same placement of the
 * two CPUs (on this VM the host moves them between a "near" and a "far"
 * placement every few tens of seconds: 0.03 or 0.2 us a round).  No
 * library: the shapes of coll_shm_quick.c's steps, on lines laid out as
 * seg.h's rank block (up and the call's record on one line, the
 * waiting flag on the line before it, the records of the calls after).
 *
 *   arrive_cost [ITERS]   prints "variant=NAME us=X" per variant, X the
 *                         mean round of ITERS (after ITERS / 10 untimed)
 *
 * Variants, each adding to the one before unless it says otherwise:
 *   release       store up (release), spin on the other's (the floor)
 *   seq_cst       up stored sequentially consistent instead (an xchg on
 *                 x86: the other's line is read only once ours is ours)
 *   fence_after   release, and a sequentially consistent fence after the
 *                 spin (the quick way's order: the lines pass each other)
 *   record        fence_after, and the call's record written on up's
 *                 line first (seqlock: 8 stores)
 *   check         record, and the other's record read once it arrived
 *   wake          check, and the other's waiting flag read after the
 *                 fence (dri_shm_ring_peer)
 *   copy          wake, and the record of the call's number written on a
 *                 line of its own
 *   work100       copy, and a chain of 100 dependent multiply-adds after
 *                 the arrival (what any work on the path costs per round)
 *
 *   arrive_cost turn [ITERS]
 *                 the round as a function of the turnaround, what a
 *                 process does between seeing the other's arrival and
 *                 storing its own next one (a call's return, the
 *                 program's loop, the next call's entry), in two
 *                 series on the floor (release): a chain of K dependent
 *                 multiply-adds there (work), and K stores to memory of
 *                 its own there (stores: a call's pushes, spills and
 *                 records, which queue behind the arrival while its
 *                 line is still being taken from the other), K = 0, 4,
 *                 8, 16, 32, 48, 64, 96, 128.  Prints "turn=SERIES k=K
 *                 ns=T us=X over_k0=R": T the turnaround's own time
 *                 (timed alone), X the median round over 15 blocks of
 *                 ITERS / 15 rounds per K, the Ks and series in turns
 *                 (the host moves the CPUs every few tens of seconds:
 *                 every K sees every placement), R = X / X at K = 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

struct rec {
	uint64_t seq, phase, count;
	int32_t coll, dtype, op, root;
};

/* One rank's block: as seg.h's dri_seg_rank, the parts used here. */
struct blk {
	uint32_t doorbell, waiting;
	uint32_t pad_[14];
	uint64_t up;
	struct rec last;
	uint64_t tiny[2];
	struct {
		struct rec c;
		unsigned char data[24];
	} call[16];
} __attribute__((aligned(4096)));

enum { RELEASE, SEQ_CST, FENCE_AFTER, RECORD, CHECK, WAKE, COPY, WORK100,
       NVAR };
static const char *name[NVAR] = { "release", "seq_cst", "fence_after",
				  "record", "check", "wake", "copy",
				  "work100" };

static volatile uint64_t sink;

/* The turnaround's stand-ins: a chain of k dependent multiply-adds on
 * x (work), or k stores to memory of this process's own (stores). */
enum { T_WORK, T_STORES, NTURN };
static const char *turn_name[NTURN] = { "work", "stores" };
static volatile uint64_t own[128];

static uint64_t turnaround(int kind, uint64_t x, int k)
{
	if (kind == T_STORES) {
		for (int i = 0; i < k; i++)
			own[i] = x;
		return x;
	}
	for (int i = 0; i < k; i++)
		x = x * 6364136223846793005ULL + (uint64_t)i;
	return x;
}

static void put_rec(struct rec *r, uint64_t e)
{
	__atomic_store_n(&r->seq, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&r->phase, e, __ATOMIC_RELAXED);
	__atomic_store_n(&r->count, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&r->coll, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&r->dtype, -1, __ATOMIC_RELAXED);
	__atomic_store_n(&r->op, -1, __ATOMIC_RELAXED);
	__atomic_store_n(&r->root, -1, __ATOMIC_RELAXED);
	__atomic_store_n(&r->seq, e + 1, __ATOMIC_RELEASE);
}

static void rounds(struct blk *me, const struct blk *other, int v, long n,
		   uint64_t *e0)
{
	uint64_t e = *e0;

	for (long i = 0; i < n; i++) {
		e++;
		if (v >= COPY)
			put_rec(&me->call[e % 16].c, e);
		if (v >= RECORD)
			put_rec(&me->last, e);
		if (v == SEQ_CST)
			__atomic_store_n(&me->up, e, __ATOMIC_SEQ_CST);
		else
			__atomic_store_n(&me->up, e, __ATOMIC_RELEASE);
		while (__atomic_load_n(&other->up, __ATOMIC_ACQUIRE) < e)
			relax();
		if (v >= CHECK)
			sink += __atomic_load_n(&other->last.seq, __ATOMIC_ACQUIRE) +
				other->last.phase + other->last.count +
				(uint64_t)other->last.coll;
		if (v >= FENCE_AFTER)
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (v >= WAKE)
			sink += __atomic_load_n(&other->waiting, __ATOMIC_SEQ_CST);
		if (v >= WORK100)
			sink += turnaround(T_WORK, e, 100);
	}
	*e0 = e;
}

/* n rounds of the floor with turnaround(kind, k) between seeing the
 * other's arrival and storing ours. */
static void turn_rounds(struct blk *me, const struct blk *other, int kind,
			int k, long n, uint64_t *e0)
{
	uint64_t e = *e0, x = 0;

	for (long i = 0; i < n; i++) {
		e++;
		__atomic_store_n(&me->up, e, __ATOMIC_RELEASE);
		while (__atomic_load_n(&other->up, __ATOMIC_ACQUIRE) < e)
			relax();
		x = turnaround(kind, x + e, k);
	}
	sink += x;
	*e0 = e;
}

#define TURNS 9
#define BLOCKS 15

/* `arrive_cost turn`: the round against the turnaround (the comment at
 * the top); process r prints nothing but its loops. */
static void turn(struct blk *b, int r, long iters)
{
	static const int ks[TURNS] = { 0, 4, 8, 16, 32, 48, 64, 96, 128 };
	static double us[NTURN][TURNS][BLOCKS];
	double ns[NTURN][TURNS];
	long n = iters / BLOCKS;
	uint64_t e = 0;

	for (int s = 0; s < NTURN; s++)
		for (int t = 0; t < TURNS; t++) {
			/* alone, the least of three loops */
			ns[s][t] = 1e30;
			for (int rep = 0; rep < 3; rep++) {
				uint64_t x = 1;
				double t0 = now_s(), d;

				for (long i = 0; i < n; i++)
					x = turnaround(s, x + (uint64_t)i, ks[t]);
				sink += x;
				d = (now_s() - t0) / (double)n * 1e9;
				if (d < ns[s][t])
					ns[s][t] = d;
			}
		}
	turn_rounds(&b[r], &b[1 - r], T_WORK, 0, n, &e);
	for (int blk = 0; blk < BLOCKS; blk++)
		for (int s = 0; s < NTURN; s++)
			for (int t = 0; t < TURNS; t++) {
				double t0 = now_s();

				turn_rounds(&b[r], &b[1 - r], s, ks[t], n, &e);
				us[s][t][blk] = (now_s() - t0) / (double)n * 1e6;
			}
	if (r)
		return;
	for (int s = 0; s < NTURN; s++) {
		for (int t = 0; t < TURNS; t++)
			qsort(us[s][t], BLOCKS, sizeof(double), cmp_double);
		for (int t = 0; t < TURNS; t++)
			printf("turn=%s k=%d ns=%.1f us=%.3f over_k0=%.2f\n",
			       turn_name[s], ks[t], ns[s][t],
			       us[s][t][BLOCKS / 2],
			       us[s][t][BLOCKS / 2] / us[s][0][BLOCKS / 2]);
	}
}

int main(int argc, char **argv)
{
	int turns = argc > 1 && !strcmp(argv[1], "turn");
	long iters = argc > 1 + turns ? atol(argv[1 + turns]) : 200000;
	struct blk *b;
	uint64_t e = 0;
	pid_t pid;
	int r;

	if (iters < (turns ? 10 * BLOCKS : 10)) {
		fprintf(stderr, "usage: arrive_cost [ITERS >= 10] | "
			"arrive_cost turn [ITERS >= %d]\n", 10 * BLOCKS);
		return 2;
	}
	b = mmap(NULL, 2 * sizeof(*b), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED) {
		perror("arrive_cost: mmap");
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		perror("arrive_cost: fork");
		return 1;
	}
	r = pid == 0;
	if (turns) {
		turn(b, r, iters);
		if (!r)
			return waitpid(pid, NULL, 0) < 0;
		return 0;
	}
	for (int v = 0; v < NVAR; v++) {
		double t0;

		rounds(&b[r], &b[1 - r], v, iters / 10, &e);
		t0 = now_s();
		rounds(&b[r], &b[1 - r], v, iters, &e);
		if (!r)
			printf("variant=%s us=%.3f\n", name[v],
			       (now_s() - t0) / (double)iters * 1e6);
	}
	if (pid > 0 && waitpid(pid, NULL, 0) < 0)
		return 1;
	return 0;
}
