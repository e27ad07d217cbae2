/*
 * match.c - matching: receives posted, messages that came before their
 * receive (the unexpected queue), and where an arriving payload goes.
 *
 * Each message is a 64-byte header (dri_wire_hdr: magic, version, the
 * call's dri_msg_id, payload length, sender) and its payload.  A receive is
 * matched against the first message from its peer with the same group (and
 * tag, for point-to-point); if the rest of the identity differs the ranks
 * made different calls and the group is aborted with DR_EMISMATCH naming
 * both.  Messages that arrive before their receive is posted wait in the
 * unexpected queue; a receive already posted gets the payload straight into
 * its buffer.  A large message nobody wants yet is parked instead (left in
 * the socket or ring: PARK_MIN).
 *
 * This file decides and keeps the lists; it reads and sends nothing.  A
 * mismatch (or a broken peer, or no memory) comes back as the error to
 * abort with, the message set; a parked message that a new receive wants
 * comes back as the peer to read it from (frames.c: dri_frames_unpark).
 * Called with transport.c's lock held.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "announce.h"
#include "copy.h"
#include "error.h"
#include "links.h"
#include "match.h"

#define CANCELLED_MAX 64 /* late messages of cancelled receives remembered */
/* A message at least this large that arrives before its receive is posted
 * waits in the socket (the peer is "parked": not read from) instead of
 * being copied into a buffer of ours: the sender then stalls once the
 * socket buffers are full, and the payload lands straight in the
 * receive's buffer when it is posted.  Without it a rank a call ahead
 * (a broadcast's root, a gather's senders) streamed the whole next call
 * into fresh buffers, which cost a page fault per 4 KiB and a copy: the
 * 4-rank 64 MiB broadcast took 4x gloo's time. */
#define PARK_MIN ((size_t)64 << 10)

static struct {
	dri_req *posted_head, *posted_tail; /* receives, in posting order */
	struct dri_umsg *uq_head, *uq_tail;
	/* receives that timed out without being fatal (monitored barrier):
	 * their message, if it comes after all, is dropped (a ring) */
	struct {
		dri_msg_id id;
		int peer;
	} cancelled[CANCELLED_MAX];
	int ncancelled, cancelled_next;
} match;

#define RANK dri_links.rank

/* ---------------------------------------------------- request lists */

static void posted_unlink(dri_req *r)
{
	dri_req **pp = &match.posted_head, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			if (match.posted_tail == r)
				match.posted_tail = prev;
			r->next = NULL;
			return;
		}
}

static void uq_unlink(struct dri_umsg *m)
{
	struct dri_umsg **pp = &match.uq_head, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			if (match.uq_tail == m)
				match.uq_tail = prev;
			return;
		}
}

/* Buffers of unexpected messages are kept for reuse: a fresh large
 * malloc is a fresh mapping, and faulting its pages in (then unmapping
 * them) costs more than the network on a busy VM; pieces of a pipelined
 * collective come in the same few sizes again and again. */
#define POOL_SLOTS 128
#define POOL_MAX ((size_t)4 << 20)    /* largest buffer kept */
#define POOL_BYTES ((size_t)64 << 20) /* most memory kept */

static struct {
	void *p;
	size_t cap;
} pool[POOL_SLOTS];
static size_t pool_bytes;

static void *buf_get(size_t len, size_t *cap)
{
	int best = -1;

	for (int i = 0; i < POOL_SLOTS; i++)
		if (pool[i].p && pool[i].cap >= len &&
		    (best < 0 || pool[i].cap < pool[best].cap))
			best = i;
	if (best >= 0) {
		void *p = pool[best].p;
		*cap = pool[best].cap;
		pool[best].p = NULL;
		pool_bytes -= *cap;
		return p;
	}
	*cap = len ? len : 1;
	return malloc(*cap);
}

static void buf_put(void *p, size_t cap)
{
	if (p && cap >= 4096 && cap <= POOL_MAX &&
	    pool_bytes + cap <= POOL_BYTES)
		for (int i = 0; i < POOL_SLOTS; i++)
			if (!pool[i].p) {
				pool[i].p = p;
				pool[i].cap = cap;
				pool_bytes += cap;
				return;
			}
	free(p);
}

static void umsg_free(struct dri_umsg *m)
{
	buf_put(m->data, m->cap);
	free(m);
}

/* Same matching class: group, and for point-to-point the tag. */
static int id_key_match(const dri_msg_id *want, const dri_msg_id *got)
{
	if (want->group_id != got->group_id)
		return 0;
	if ((want->coll == DRI_P2P) != (got->coll == DRI_P2P))
		return 0;
	return want->coll != DRI_P2P || want->tag == got->tag;
}

/* Whether a message from peer i with id is the late one of a receive
 * that timed out (it is then forgotten: it comes once). */
static int cancelled_take(int i, const dri_msg_id *id)
{
	for (int k = 0; k < match.ncancelled; k++)
		if (match.cancelled[k].peer == i &&
		    dri_msg_id_equal(&match.cancelled[k].id, id)) {
			match.cancelled[k].peer = -1;
			return 1;
		}
	return 0;
}

/* Checks a message from src against the receive r: DR_OK, or the
 * mismatch. */
static dr_err check_match(const dri_req *r, int src, const dri_msg_id *id,
			  uint64_t len)
{
	char why[768];

	if (!dri_msg_mismatch(&r->id, r->len, id, len, src, RANK, why,
			      sizeof(why)))
		return DR_OK;
	return dri_fail(DR_EMISMATCH, "%s", why);
}

/* ------------------------------------------------ calls and verdicts */

dr_err dri_match_note(const dri_msg_id *id)
{
	int fresh;
	dr_err e = dri_call_note(id, &fresh);

	if (e || !fresh)
		return e;
	/* A message of this seq that came first: it may be one that no
	 * receive of this call will take. */
	for (struct dri_umsg *m = match.uq_head; m; m = m->next)
		if (m->id.coll != DRI_P2P && m->id.seq == id->seq &&
		    m->id.group_id == id->group_id && !dri_same_call(&m->id, id))
			return dri_calls_differ(m->src, &m->id, RANK, id);
	for (int i = 0; dri_links.nparked && i < dri_links.size; i++) {
		const dri_msg_id *q;

		if (!PEER(i) || !PEER(i)->parked)
			continue;
		q = &PEER(i)->rx.id;
		if (q->coll != DRI_P2P &&
		    q->seq == id->seq && q->group_id == id->group_id &&
		    !dri_same_call(q, id))
			return dri_calls_differ(i, q, RANK, id);
	}
	return DR_OK;
}

void dri_match_gave_up(int i, const dri_msg_id *id)
{
	for (dri_req *r = match.posted_head; r; r = r->next)
		if (r->peer == i && r->len && !r->is_send &&
		    r->id.coll == DRI_MONITORED_BARRIER &&
		    r->id.group_id == id->group_id && r->id.seq == id->seq) {
			posted_unlink(r);
			dri_req_finish(r, DR_ETIMEDOUT);
			return;
		}
}

/* -------------------------------------------------------- receives */

int dri_match_post(dri_req *req, dr_err *err)
{
	const dri_msg_id *id = &req->id;
	int peer = req->peer, size = dri_links.size;
	struct dri_umsg *m;

	*err = DR_OK;
	for (m = match.uq_head; m; m = m->next)
		if ((peer < 0 || m->src == peer) && id_key_match(id, &m->id))
			break;
	/* The monitor gave up on us: the verdict, if it came, is the
	 * message of this seq; anything later waits for its own call. */
	if (id->coll == DRI_MONITORED_BARRIER && req->len && peer >= 0 &&
	    !(m && m->id.seq == id->seq) && dri_call_gave_up(peer, id)) {
		dri_req_finish(req, DR_ETIMEDOUT);
		return DRI_MATCH_DONE;
	}
	if (m) {
		struct dri_peer *p = PEER(m->src);
		uq_unlink(m);
		if ((*err = check_match(req, m->src, &m->id, m->len))) {
			if (p->rx_msg == m)
				p->rx_msg = NULL;
			umsg_free(m);
			return DRI_MATCH_DONE;
		}
		req->source = m->src;
		if (req->len)
			dri_copy(req->buf, m->data, m->done);
		if (m->done == m->len) {
			req->done = req->len;
			dri_req_finish(req, DR_OK);
		} else {
			/* Still arriving: the rest goes straight to buf. */
			p->rx_msg = NULL;
			p->rx_req = req;
			p->rx_dest = req->buf;
		}
		umsg_free(m);
		return DRI_MATCH_DONE;
	}
	/* Next in line: a parked message (the peer's, or any peer's for
	 * DR_ANY_SOURCE). */
	for (int i = peer < 0 ? 0 : peer;
	     dri_links.nparked && i < (peer < 0 ? size : peer + 1); i++)
		if (PEER(i) && PEER(i)->parked &&
		    id_key_match(id, &PEER(i)->rx.id))
			return i;
	if (match.posted_tail)
		match.posted_tail->next = req;
	else
		match.posted_head = req;
	match.posted_tail = req;
	return DRI_MATCH_POSTED;
}

/* The most bytes one message of call id can carry: a rank sends a peer
 * at most every rank's share of the call's count, of the widest dtype
 * (all_gather's recursive doubling sends half of it), plus slack for the
 * small fixed-size messages of barriers and agreements.  A length from
 * the wire above it is a broken or hostile peer, never a buffer to
 * allocate. */
static uint64_t msg_len_max(const dri_msg_id *id)
{
	uint64_t per = ((uint64_t)dri_links.size + 1) * 8, c = id->count + 1;

	if (id->count >= UINT64_MAX / per)
		return UINT64_MAX;
	return c * per + 65536;
}

dr_err dri_match_header(int i)
{
	struct dri_peer *p = PEER(i);
	dri_wire_hdr *h = &p->rx;
	dri_req *r;
	char what[256];

	if (h->len > msg_len_max(&h->id) || h->len > (uint64_t)SIZE_MAX / 2) {
		dri_msg_id_describe(&h->id, what, sizeof(what));
		return dri_fail(DR_EPROTO, "rank %d: rank %d announced a "
				"%llu-byte message in %s: more than that call "
				"can send", RANK, i, (unsigned long long)h->len,
				what);
	}
	if (cancelled_take(i, &h->id))
		return DR_OK; /* read and dropped (rx_dest NULL) */
	for (r = match.posted_head; r; r = r->next)
		if ((r->peer < 0 || r->peer == i) && id_key_match(&r->id, &h->id))
			break;
	if (r) {
		posted_unlink(r);
		return dri_match_into(i, r);
	}
	/* Nobody wants it yet: of a call this rank made otherwise, nobody
	 * will (the calls differ). */
	if (h->id.coll != DRI_P2P) {
		const dri_msg_id *mine = dri_call_made(&h->id);

		if (mine && !dri_same_call(mine, &h->id))
			return dri_calls_differ(i, &h->id, RANK, mine);
	}
	/* Park a large message nobody wants yet, unless a receive from this
	 * peer is waiting for something behind it in the stream. */
	for (r = match.posted_head; r; r = r->next)
		if (r->peer < 0 || r->peer == i)
			break;
	if (h->len >= PARK_MIN && !r) {
		p->rx_active = 0;
		dri_peer_park(p, 1);
		return DR_OK;
	}
	return dri_match_into(i, NULL);
}

dr_err dri_match_into(int i, dri_req *r)
{
	struct dri_peer *p = PEER(i);
	dri_wire_hdr *h = &p->rx;
	struct dri_umsg *m;
	dr_err e;

	if (r) {
		if ((e = check_match(r, i, &h->id, h->len))) {
			dri_req_finish(r, DR_EMISMATCH);
			return e;
		}
		r->source = i;
		p->rx_req = r;
		p->rx_dest = r->buf;
		return DR_OK;
	}
	m = calloc(1, sizeof(*m));
	if (m)
		m->data = buf_get(h->len, &m->cap);
	if (!m || !m->data) {
		free(m);
		return dri_fail(DR_ENOMEM, "rank %d: out of memory for a "
				"%llu-byte message from rank %d", RANK,
				(unsigned long long)h->len, i);
	}
	m->src = i;
	m->id = h->id;
	m->len = h->len;
	if (match.uq_tail)
		match.uq_tail->next = m;
	else
		match.uq_head = m;
	match.uq_tail = m;
	p->rx_msg = m;
	p->rx_dest = m->data;
	return DR_OK;
}

int dri_match_waits_for(int i)
{
	for (dri_req *r = match.posted_head; r; r = r->next)
		if (r->peer == i)
			return 1;
	return 0;
}

void dri_match_cancel(dri_req *r)
{
	if (r->peer >= 0) {
		int k = match.cancelled_next;
		match.cancelled[k].id = r->id;
		match.cancelled[k].peer = r->peer;
		match.cancelled_next = (k + 1) % CANCELLED_MAX;
		if (match.ncancelled < CANCELLED_MAX)
			match.ncancelled++;
	}
	posted_unlink(r);
	for (int i = 0; i < dri_links.size; i++)
		if (PEER(i) && PEER(i)->rx_req == r) {
			PEER(i)->rx_req = NULL;
			PEER(i)->rx_dest = NULL; /* discard the rest */
		}
}

/* A message of the world group from a call at or before one that goes
 * through flags (coll_shm.c) that nobody has received: the calls
 * differed (as a receive of it would have found over TCP).  One of this
 * very seq is given DRI_LATE_MS first: the peer that sent it sees our
 * flag as soon as it waits, and names the calls in the order TCP's
 * receiver would. */
dr_err dri_match_stale(const dri_msg_id *id, int64_t waited_ms)
{
	dri_req r;
	dr_err e;

	memset(&r, 0, sizeof(r));
	r.id = *id;
	for (struct dri_umsg *m = match.uq_head; m; m = m->next)
		if (!m->id.group_id && m->id.coll != DRI_P2P &&
		    (m->id.seq < id->seq ||
		     (m->id.seq == id->seq && waited_ms >= DRI_LATE_MS)) &&
		    (e = check_match(&r, m->src, &m->id, m->len)))
			return e;
	for (int i = 0; i < dri_links.size; i++) {
		struct dri_peer *p = PEER(i);

		if (p && p->parked && !p->rx.id.group_id && p->rx.id.coll != DRI_P2P &&
		    (p->rx.id.seq < id->seq ||
		     (p->rx.id.seq == id->seq && waited_ms >= DRI_LATE_MS)) &&
		    (e = check_match(&r, i, &p->rx.id, p->rx.len)))
			return e;
	}
	return DR_OK;
}

void dri_match_fail_all(dr_err err)
{
	dri_req *r, *next;
	struct dri_umsg *m, *mn;

	for (r = match.posted_head; r; r = next) {
		next = r->next;
		r->next = NULL;
		dri_req_finish(r, err);
	}
	match.posted_head = match.posted_tail = NULL;
	for (m = match.uq_head; m; m = mn) {
		mn = m->next;
		umsg_free(m);
	}
	match.uq_head = match.uq_tail = NULL;
}

void dri_match_stop(void)
{
	for (int i = 0; i < POOL_SLOTS; i++) {
		free(pool[i].p);
		pool[i].p = NULL;
	}
	pool_bytes = 0;
	match.ncancelled = match.cancelled_next = 0;
}
