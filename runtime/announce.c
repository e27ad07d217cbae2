/*
 * announce.c - the mismatch announcements: which call this rank made of
 * each recent seq, which calls its peers announced, and which monitors
 * gave up on it.
 *
 * Two calls of one seq may send each other nothing (an all_reduce waiting
 * for a rank that waits in a reduce).  So a wait for a collective's
 * message that lasts ANNOUNCE_MS (wait.c) sends each peer it waits
 * for a CALL frame (the header alone); the peer compares the call with
 * its own of that seq, kept from its sends and receives, at once or when
 * it gets there, as it does any message of a seq it made another call of,
 * and fails the group with DR_EMISMATCH instead of waiting for the
 * timeout.  A monitored barrier's waits announce nothing (a late rank is
 * no mismatch): its CALL frame is the monitor's word that it gave up on
 * the rank (dri_give_up).
 *
 * This file keeps the records and compares; it sends nothing and fails
 * nothing itself: a mismatch comes back as DR_EMISMATCH with the message
 * set, for the loop to abort with.  Called with transport.c's lock held.
 */
#include <string.h>

#include "announce.h"
#include "error.h"
#include "links.h"

#define CALLS_KEPT 64 /* this rank's calls kept to compare, newest */
#define HEARD_MAX 64  /* announced calls of a seq this rank is not at yet */
#define GAVE_MAX 16   /* monitored barriers whose monitor gave up on us */

static struct {
	/* this rank's calls that sent or received a message (a ring) */
	dri_msg_id made[CALLS_KEPT];
	int nmade, made_next;
	/* the calls peers announced of a seq not among them (yet) */
	struct {
		int src1; /* the announcing rank + 1; 0: a free entry */
		dri_msg_id id;
	} heard[HEARD_MAX];
	int nheard, heard_next;
	/* CALL frames of a monitored barrier: its monitor gave up on this
	 * rank (dri_give_up), newest in place of the oldest */
	struct {
		int src1;
		uint32_t group_id;
		uint64_t seq;
	} gave[GAVE_MAX];
	int gave_next;
} calls;

dr_err dri_calls_differ(int a, const dri_msg_id *ida, int b,
			const dri_msg_id *idb)
{
	char da[256], db[256];

	dri_msg_id_describe(ida, da, sizeof(da));
	dri_msg_id_describe(idb, db, sizeof(db));
	return dri_fail(DR_EMISMATCH, "rank %d called %s but rank %d called %s "
			"(seq %llu)", a, da, b, db, (unsigned long long)ida->seq);
}

int dri_same_call(const dri_msg_id *a, const dri_msg_id *b)
{
	return a->coll == b->coll &&
	       (a->count == b->count || a->coll == DRI_ALL_TO_ALL_V) &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

const dri_msg_id *dri_call_made(const dri_msg_id *id)
{
	for (int k = 0; k < calls.nmade; k++) {
		const dri_msg_id *c = &calls.made[k];

		if (c->seq == id->seq && c->group_id == id->group_id)
			return c;
	}
	return NULL;
}

dr_err dri_call_note(const dri_msg_id *id, int *fresh)
{
	int last = (calls.made_next + CALLS_KEPT - 1) % CALLS_KEPT;

	*fresh = 0;
	if (id->coll == DRI_P2P)
		return DR_OK;
	if (calls.nmade && calls.made[last].seq == id->seq &&
	    calls.made[last].group_id == id->group_id)
		return DR_OK;
	if (dri_call_made(id))
		return DR_OK;
	calls.made[calls.made_next] = *id;
	calls.made_next = (calls.made_next + 1) % CALLS_KEPT;
	if (calls.nmade < CALLS_KEPT)
		calls.nmade++;
	for (int k = 0; calls.nheard && k < HEARD_MAX; k++)
		if (calls.heard[k].src1 && calls.heard[k].id.seq == id->seq &&
		    calls.heard[k].id.group_id == id->group_id) {
			int src = calls.heard[k].src1 - 1;

			calls.heard[k].src1 = 0;
			calls.nheard--;
			if (!dri_same_call(&calls.heard[k].id, id))
				/* src waits for a message of ours */
				return dri_calls_differ(dri_links.rank, id, src,
							&calls.heard[k].id);
		}
	*fresh = 1;
	return DR_OK;
}

int dri_call_gave_up(int i, const dri_msg_id *id)
{
	for (int k = 0; k < GAVE_MAX; k++)
		if (calls.gave[k].src1 == i + 1 &&
		    calls.gave[k].group_id == id->group_id &&
		    calls.gave[k].seq == id->seq)
			return 1;
	return 0;
}

/* Monitor i gave up on this rank in the monitored barrier id. */
static void gave_up(int i, const dri_msg_id *id, int *verdict)
{
	calls.gave[calls.gave_next].src1 = i + 1;
	calls.gave[calls.gave_next].group_id = id->group_id;
	calls.gave[calls.gave_next].seq = id->seq;
	calls.gave_next = (calls.gave_next + 1) % GAVE_MAX;
	*verdict = 1;
}

dr_err dri_call_heard(int i, const dri_wire_hdr *h, int *verdict)
{
	const dri_msg_id *mine;
	int k;

	*verdict = 0;
	if (h->len || h->id.coll == DRI_P2P)
		return dri_fail(DR_EPROTO, "rank %d: garbled call announcement "
				"from rank %d", dri_links.rank, i);
	if ((mine = dri_call_made(&h->id))) {
		/* i waits for a message of ours */
		if (!dri_same_call(mine, &h->id))
			return dri_calls_differ(dri_links.rank, mine, i, &h->id);
		if (h->id.coll == DRI_MONITORED_BARRIER)
			gave_up(i, &h->id, verdict);
		return DR_OK;
	}
	if (h->id.coll == DRI_MONITORED_BARRIER)
		gave_up(i, &h->id, verdict);
	/* Not there yet (or long past): kept, in a free entry or in place
	 * of one in turn. */
	for (k = 0; k < HEARD_MAX && calls.heard[k].src1; k++)
		;
	if (k == HEARD_MAX) {
		k = calls.heard_next;
		calls.heard_next = (calls.heard_next + 1) % HEARD_MAX;
		calls.nheard--;
	}
	calls.heard[k].src1 = i + 1;
	calls.heard[k].id = h->id;
	calls.nheard++;
	return DR_OK;
}

int dri_call_tell(const dri_req *r)
{
	struct dri_peer *p;

	/* (a monitored barrier's CALL frame says its monitor gave up:
	 * dri_give_up) */
	if (r->complete || r->id.coll == DRI_P2P ||
	    r->id.coll == DRI_MONITORED_BARRIER || r->peer < 0 ||
	    r->peer == dri_links.rank || r->peer >= dri_links.size)
		return 0;
	p = PEER(r->peer);
	if (!p || p->state != P_UP ||
	    (p->told && p->told_group == r->id.group_id &&
	     p->told_seq == r->id.seq) ||
	    (p->told && !p->call_req.complete))
		return 0;
	p->told = 1;
	p->told_group = r->id.group_id;
	p->told_seq = r->id.seq;
	return 1;
}

void dri_calls_reset(void)
{
	memset(&calls, 0, sizeof(calls));
}
