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
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
		if (v >= WORK100) {
			uint64_t x = e;

			for (int k = 0; k < 100; k++)
				x = x * 6364136223846793005ULL + (uint64_t)k;
			sink += x;
		}
	}
	*e0 = e;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 200000;
	struct blk *b;
	uint64_t e = 0;
	pid_t pid;
	int r;

	if (iters < 10) {
		fprintf(stderr, "usage: arrive_cost [ITERS >= 10]\n");
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
