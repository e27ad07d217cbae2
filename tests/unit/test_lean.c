/*
 * test_lean.c - the lean way's rules after a small rooted call
 * (runtime/coll_shm_quick.c, coll_shm_flags.c), on rank blocks in plain
 * memory: when a tiny all_reduce may write its data (every other rank
 * done with the phase four before), and which rooted calls still open a
 * barrier that found every rank there closes without the general way
 * (every rank's record the same, or a peer's word that it checked the
 * call before).  A wrong answer here is a sum read from a slot being
 * written, or a mismatch that nobody reports: the runs of
 * tests/shm.bats rarely hit the moment either needs.  And the end of
 * init: each rank's word that it left the closing barrier, waited for
 * within a bound.
 */
#include <stdint.h>
#include <string.h>

#include "runner.h"
#include "clock.h"
#include "coll_shm_flags.h"

#define P 3

static dri_seg_rank *blks[P];

/* P blocks, this process rank 0, phase 10 and every peer at 9. */
static void setup(void)
{
	for (int i = 0; i < P; i++) {
		if (!blks[i])
			blks[i] = aligned_alloc(64, sizeof(dri_seg_rank));
		memset(blks[i], 0, sizeof(dri_seg_rank));
		dri_cs.blk[i] = blks[i];
		blks[i]->up = 9;
	}
	dri_cs.nblk = P;
	dri_cs.oversub = 0;
	dri_cs.spin_us = 50;
	dri_cs.phase = 10;
	dri_cs.safe = 9;
	dri_cs.open = 0;
	memset(dri_cs.past, 0, sizeof(dri_cs.past));
}

/* Rank i's record of call n (a broadcast of 2 int32 from root 0, seq
 * seq, first phase e), and its copy on up's line with mark. */
static void put(int i, uint64_t n, uint64_t seq, uint64_t e, int root,
		int32_t mark)
{
	dri_msg_id id = { .coll = DRI_BROADCAST, .seq = seq, .count = 2,
			  .dtype = DR_INT32, .op = -1, .root = root };

	dri_cs_write_rec(&blks[i]->call[n % DRI_SEG_CALLS].c, &id, e, 0,
			 NULL, NULL, 0);
	dri_cs_write_rec(&blks[i]->last, &id, e, mark, NULL, NULL, 0);
}

/* This rank's open record of call n (as dri_cs_lean_rooted keeps it). */
static void keep_open(uint64_t n, uint64_t seq, uint64_t e)
{
	struct rec rec = { .n = n, .first = e, .last = e, .open = 1,
			   .id = { .coll = DRI_BROADCAST, .seq = seq, .count = 2,
				   .dtype = DR_INT32, .op = -1, .root = 0 } };

	dri_cs_keep(&rec);
}

static int test_tiny_waits_for_the_others(void)
{
	setup();
	/* this rank's last three calls rooted ones that did not wait (10,
	 * 11, 12), the peers last seen at 9: the all_reduce's data of 13
	 * would go where they may still read the one of phase 9 (seg.h:
	 * four phases apart) */
	dri_cs.phase = 12;
	/* a barrier has no data to write: always */
	CHECK(dri_cs_lean_ok(P, 0, 0));
	CHECK(!dri_cs_lean_ok(P, 0, 1));
	CHECK(dri_cs.safe == 9);
	/* one there, the other not */
	blks[1]->up = 10;
	CHECK(!dri_cs_lean_ok(P, 0, 1));
	/* the other's copy of a call of phase 10 or later: it is done
	 * with the phases before (safe stays: its up is not there) */
	put(2, 7, 70, 10, 0, 0);
	CHECK(dri_cs_lean_ok(P, 0, 1));
	CHECK(dri_cs.safe == 9);
	/* a copy of an older call does not count */
	put(2, 6, 69, 9, 0, 0);
	CHECK(!dri_cs_lean_ok(P, 0, 1));
	/* every up there: safe moves, and the next look needs none */
	blks[2]->up = 10;
	CHECK(dri_cs_lean_ok(P, 0, 1));
	CHECK(dri_cs.safe == 10);
	blks[1]->up = blks[2]->up = 0;
	CHECK(dri_cs_lean_ok(P, 0, 1));
	/* two rooted calls since the last wait (phase 11 next but one):
	 * no look at the others, the data of 12 goes over phase 8's */
	setup();
	dri_cs.phase = 11;
	CHECK(dri_cs_lean_ok(P, 0, 1));
	CHECK(dri_cs.safe == 9);
	/* more ranks than the flat way takes: never */
	CHECK(!dri_cs_lean_ok(DRI_SHM_FLAT_MAX + 1, 0, 0));
	return 0;
}

static int test_close_reads_every_record(void)
{
	setup();
	/* call 5 (seq 50, phase 8) rooted and open here, the current call
	 * 7 (seq 52) */
	keep_open(5, 50, 8);
	CHECK(dri_cs_any_open());
	/* a peer's record of it missing: not closed */
	put(1, 5, 50, 8, 0, 0);
	CHECK(!dri_cs_close_quick(P, 0, 7, 52, 0));
	CHECK(dri_cs_any_open());
	/* one that differs (another root): not closed, the general way
	 * names it */
	put(2, 5, 50, 8, 1, 0);
	CHECK(!dri_cs_close_quick(P, 0, 7, 52, 0));
	CHECK(dri_cs_any_open());
	/* a word that the call before the current was checked is not a
	 * word about call 5 (seq 50, not 51) */
	CHECK(!dri_cs_close_quick(P, 0, 7, 52, 1));
	/* every record the same: closed */
	put(2, 5, 50, 8, 0, 0);
	CHECK(dri_cs_close_quick(P, 0, 7, 52, 0));
	CHECK(!dri_cs_any_open());
	return 0;
}

static int test_close_on_a_peers_word(void)
{
	setup();
	/* call 6 (seq 51, phase 10), open here, the peers' records not
	 * readable (a peer that went on would have them) */
	keep_open(6, 51, 10);
	CHECK(!dri_cs_close_quick(P, 0, 7, 52, 0));
	/* a peer's copy of call 7 said it checked seq 51 against every
	 * rank's: closed without a read */
	CHECK(dri_cs_close_quick(P, 0, 7, 52, 1));
	CHECK(!dri_cs_any_open());
	/* two open (5 and 6): the word covers 6 only */
	setup();
	keep_open(5, 50, 9);
	keep_open(6, 51, 10);
	CHECK(!dri_cs_close_quick(P, 0, 7, 52, 1));
	CHECK(dri_cs_any_open());
	put(1, 5, 50, 9, 0, 0);
	put(2, 5, 50, 9, 0, 0);
	CHECK(dri_cs_close_quick(P, 0, 7, 52, 1));
	CHECK(!dri_cs_any_open());
	return 0;
}

/* The copy's word that every call of its rank before it was checked
 * (DRI_SEG_ALL_CHECKED): given only with nothing open, flat. */
static int test_all_checked_word_given(void)
{
	dri_msg_id id = { .coll = DRI_BARRIER, .seq = 53, .dtype = -1,
			  .op = -1, .root = -1 };
	uint64_t seq, phase;

	setup();
	dri_cs_put_copy(0, &id, 11);
	CHECK(dri_shm_all_checked(&blks[0]->last, &seq, &phase));
	CHECK(seq == 53 && phase == 11);
	keep_open(6, 51, 10);
	dri_cs_put_copy(0, &id, 11);
	CHECK(!dri_shm_all_checked(&blks[0]->last, &seq, &phase));
	/* the marks are not part of the call a peer reads */
	CHECK(dri_shm_read_at(&blks[0]->last, 53, 11, &id));
	CHECK(id.coll == DRI_BARRIER);
	setup();
	dri_cs.nblk = DRI_SHM_FLAT_MAX + 1;
	dri_cs_put_copy(0, &id, 11);
	CHECK(!dri_shm_all_checked(&blks[0]->last, &seq, &phase));
	return 0;
}

/* A rooted call LAG back, open here, closed by settle on a peer's word
 * read with its up, without its record or the others'. */
static int test_settle_on_a_peers_all_checked(void)
{
	const uint64_t n = 5 + LAG;

	setup();
	dri_cs.thru_seq = dri_cs.thru_phase = 0;
	dri_cs.marked = 0;
	keep_open(5, 50, 8);
	/* no record, no word: not settled (the general way waits) */
	CHECK(!dri_cs_settle_flags(P, 0, n));
	/* a word of a call not after it (seq 50): no */
	dri_cs.safe = 7;
	put(1, 5, 50, 8, 0, DRI_SEG_ALL_CHECKED);
	CHECK(!dri_cs_settle_flags(P, 0, n));
	CHECK(dri_cs.safe == 9);
	/* a later seq but the same phase (its calls then may be fewer
	 * than ours): no */
	put(1, 6, 60, 8, 0, DRI_SEG_ALL_CHECKED);
	CHECK(!dri_cs_settle_flags(P, 0, n));
	/* a later call without the word: no */
	put(1, 6, 60, 20, 0, DRI_SEG_PREV_CHECKED);
	CHECK(!dri_cs_settle_flags(P, 0, n));
	CHECK(dri_cs_any_open());
	/* with it: settled, no record read (none is there); looked at
	 * when the ups are next needed (the last look found no word) */
	put(1, 6, 60, 20, 0, DRI_SEG_ALL_CHECKED);
	CHECK(!dri_cs_settle_flags(P, 0, n));
	dri_cs.safe = 7;
	CHECK(dri_cs_settle_flags(P, 0, n));
	CHECK(!dri_cs_any_open());
	/* the next open call it covers: settled without a look, the
	 * word gone from the line by now */
	keep_open(6, 51, 9);
	put(1, 7, 61, 21, 0, 0);
	CHECK(dri_cs_settle_flags(P, 0, n + 1));
	/* one it does not cover: looked at again (no word now), then
	 * every record read */
	keep_open(7, 65, 9);
	CHECK(!dri_cs_settle_flags(P, 0, n + 2));
	CHECK(!dri_cs.marked);
	put(1, 7, 65, 9, 0, 0);
	put(2, 7, 65, 9, 0, 0);
	CHECK(dri_cs_settle_flags(P, 0, n + 2));
	CHECK(!dri_cs_any_open());
	return 0;
}

/* The end of init (dri_cs_leave): a rank waits for the others' word
 * that they left its closing barrier, and no longer than it is told. */
static int test_leave_waits_for_the_others(void)
{
	int64_t t0;

	setup();
	blks[1]->left = blks[2]->left = 1;
	CHECK(dri_cs_leave(0, 1000000000) == 0);
	CHECK(blks[0]->left == 1);
	/* rank 2 never says so: 20 ms, then on, and it is counted */
	setup();
	blks[1]->left = 1;
	t0 = dri_now_ns();
	CHECK(dri_cs_leave(0, 20000000) == 1);
	CHECK(dri_now_ns() - t0 >= 20000000);
	CHECK(blks[0]->left == 1 && blks[2]->left == 0);
	/* nobody there, oversubscribed (yields instead of spinning) */
	setup();
	dri_cs.oversub = 1;
	CHECK(dri_cs_leave(1, 1000000) == 2);
	CHECK(blks[1]->left == 1);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_tiny_waits_for_the_others),
	UNIT(test_close_reads_every_record),
	UNIT(test_close_on_a_peers_word),
	UNIT(test_all_checked_word_given),
	UNIT(test_settle_on_a_peers_all_checked),
	UNIT(test_leave_waits_for_the_others),
	{ 0 }
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
