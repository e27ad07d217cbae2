/*
 * test_ctl.c - the control block (runtime/ctl.h): what the hooks write,
 * and that the launcher's readers get consistent snapshots or say they
 * could not (a torn slot, an overwritten flight record), also while a
 * writer thread runs flat out.
 */
#include <pthread.h>
#include <stdlib.h>

#include "ctl.h"
#include "ctl.h"
#include "runner.h"

static dri_ctl *block(void)
{
	dri_ctl *c = aligned_alloc(4096, DRI_CTL_SIZE);

	if (c)
		memset(c, 0, DRI_CTL_SIZE);
	return c;
}

static dri_msg_id call(uint32_t group, dri_coll coll, uint64_t seq)
{
	dri_msg_id id = { .group_id = group, .coll = coll, .seq = seq,
			  .count = 4, .dtype = DR_FLOAT32, .op = DR_SUM,
			  .root = -1 };
	return id;
}

static int test_call_in_slot_then_ring(void)
{
	dri_ctl *c = block();
	dri_msg_id id = call(0, DRI_ALL_REDUCE, 7);
	dri_ctl_slot s;
	dri_ctl_call r;

	CHECK(c);
	dri_ctl_attach_to(c, 3, 4);
	CHECK(c->magic == DRI_CTL_MAGIC && c->rank == 3 && c->world_size == 4);
	dri_ctl_begin(&id, -1, 0);
	CHECK(!dri_ctl_read_slot(c, 0, &s));
	CHECK(s.state == DRI_CTL_IN_CALL && s.call.seq == 7);
	CHECK(s.call.coll == DRI_ALL_REDUCE && s.call.bytes == 16);
	CHECK(s.call.t_start > 0 && s.call.t_end == 0 && s.call.peer == -1);
	dri_ctl_wait(2, 0);
	CHECK(!dri_ctl_read_slot(c, 0, &s));
	CHECK(s.call.peer == 2 && s.call.peer_send == 0 && s.progress == 1);
	dri_ctl_end(DR_OK);
	CHECK(!dri_ctl_read_slot(c, 0, &s));
	CHECK(s.state == DRI_CTL_IDLE && s.ncalls == 1);
	CHECK(s.call.t_end >= s.call.t_start && s.call.seq == 7);
	CHECK(c->ring_head[DRI_CTL_WORLD] == 1 && c->t_user == s.call.t_end);
	CHECK(!dri_ctl_read_rec(c, DRI_CTL_WORLD, 0, &r) && r.seq == 7 &&
	      r.peer == 2);
	/* Nothing waits now: a stray wait touches nothing. */
	dri_ctl_wait(1, 1);
	CHECK(!dri_ctl_read_slot(c, 0, &s) && s.call.peer == 2);
	free(c);
	return 0;
}

static int test_p2p_and_groups_without_a_slot(void)
{
	dri_ctl *c = block();
	dri_msg_id p = call(0, DRI_P2P, 0), g = call(DRI_CTL_GROUPS + 5,
						     DRI_BARRIER, 1);
	dri_ctl_slot s;
	dri_ctl_call r;

	CHECK(c);
	dri_ctl_attach_to(c, 0, 2);
	dri_ctl_begin(&p, 1, 1);
	CHECK(!dri_ctl_read_slot(c, DRI_CTL_P2P, &s));
	CHECK(s.state == DRI_CTL_IN_CALL && s.call.peer == 1 && s.call.peer_send);
	dri_ctl_end(DR_EPEER);
	CHECK(!dri_ctl_read_slot(c, DRI_CTL_P2P, &s) && s.call.status == DR_EPEER);
	/* A group past the slots still reaches the ring. */
	dri_ctl_begin(&g, -1, 0);
	dri_ctl_end(DR_OK);
	for (int i = 0; i < DRI_CTL_GROUPS; i++)
		CHECK(!dri_ctl_read_slot(c, i, &s) && s.ncalls == 0);
	CHECK(c->ring_head[DRI_CTL_OTHER] == 2 && !c->ring_head[DRI_CTL_WORLD]);
	CHECK(!dri_ctl_read_rec(c, DRI_CTL_OTHER, 0, &r) && r.coll == DRI_P2P);
	CHECK(!dri_ctl_read_rec(c, DRI_CTL_OTHER, 1, &r) &&
	      r.group_id == DRI_CTL_GROUPS + 5);
	free(c);
	return 0;
}

static int test_ring_keeps_the_last_calls(void)
{
	dri_ctl *c = block();
	dri_ctl_call r;

	CHECK(c);
	dri_ctl_attach_to(c, 0, 1);
	for (int ring = 0; ring < DRI_CTL_RINGS; ring++) {
		uint64_t len = dri_ctl_ring_len(ring);

		for (uint64_t i = 0; i < 3 * len; i++) {
			dri_msg_id id = call(ring == DRI_CTL_WORLD ? 0 : 1,
					     DRI_BARRIER, i);
			dri_ctl_begin(&id, -1, 0);
			dri_ctl_end(DR_OK);
		}
		CHECK(c->ring_head[ring] == 3 * len);
		CHECK(dri_ctl_read_rec(c, ring, 0, &r) == -1);  /* overwritten */
		CHECK(dri_ctl_read_rec(c, ring, 2 * len - 1, &r) == -1);
		for (uint64_t i = 2 * len; i < 3 * len; i++)
			CHECK(!dri_ctl_read_rec(c, ring, i, &r) && r.seq == i);
		CHECK(dri_ctl_read_rec(c, ring, 3 * len, &r) == -1); /* not yet */
	}
	free(c);
	return 0;
}

static int test_torn_slot_is_said(void)
{
	dri_ctl *c = block();
	dri_ctl_slot s;

	CHECK(c);
	c->slot[1].ver = 5;   /* a writer died mid-update */
	CHECK(dri_ctl_read_slot(c, 1, &s) == -1);
	CHECK(dri_ctl_read_slot(c, 0, &s) == 0);
	free(c);
	return 0;
}

/* A writer thread runs calls whose count is always seq * 3: a reader
 * must never see a slot where that does not hold. */
static int stop;

static void *writer(void *arg)
{
	dri_ctl_attach_to(arg, 0, 1);
	for (uint64_t i = 1; !__atomic_load_n(&stop, __ATOMIC_RELAXED); i++) {
		dri_msg_id id = call(0, DRI_ALL_REDUCE, i);
		id.count = i * 3;
		dri_ctl_begin(&id, (int)(i % 7), 0);
		dri_ctl_wait((int)(i % 5), 1);
		dri_ctl_end(DR_OK);
	}
	return NULL;
}

static int test_snapshots_are_consistent_under_writes(void)
{
	dri_ctl *c = block();
	pthread_t t;
	int good = 0;

	CHECK(c);
	CHECK(!pthread_create(&t, NULL, writer, c));
	/* Until 1000 consistent reads (the test's timeout bounds it). */
	for (int i = 0; good < 1000 || i < 100000; i++) {
		dri_ctl_slot s;
		dri_ctl_call r;
		uint64_t head = __atomic_load_n(&c->ring_head[DRI_CTL_WORLD],
						__ATOMIC_ACQUIRE);

		if (!dri_ctl_read_slot(c, 0, &s) && s.call.seq) {
			CHECKF(s.call.count == s.call.seq * 3, "seq %llu count %llu",
			       (unsigned long long)s.call.seq,
			       (unsigned long long)s.call.count);
			good++;
		}
		if (head && !dri_ctl_read_rec(c, DRI_CTL_WORLD, head - 1, &r))
			CHECK(r.count == r.seq * 3 && r.t_end >= r.t_start);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	CHECK(good > 0);
	free(c);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_call_in_slot_then_ring),
	UNIT(test_p2p_and_groups_without_a_slot),
	UNIT(test_ring_keeps_the_last_calls),
	UNIT(test_torn_slot_is_said),
	UNIT(test_snapshots_are_consistent_under_writes),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
