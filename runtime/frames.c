/*
 * frames.c - the byte stream to and from one peer: frames written out of
 * its send queue, frames read and taken apart, whatever the link (TCP or
 * shared memory: links.h's operations move the bytes).
 *
 * A frame is a 64-byte header (wire.h) and its payload.  Out: the head of
 * the peer's queue is written header and payload in one sendmsg, as far
 * as the link takes it; the rest when the peer drains.  In: small frames
 * come through a staging buffer, so one read takes several of them; a
 * large payload goes straight into the receive's buffer.  The header
 * decides where the payload goes: a data frame's is match.c's to place,
 * a CALL frame is announce.c's, an ABORT frame carries the reason a peer
 * failed, a BYE says it left on purpose.
 *
 * Nothing here aborts: a peer lost, a garbled frame, a peer's ABORT, a
 * mismatch found by the rooms below all come back as the error (the
 * message set) for the loop to abort with.  Called with transport.c's
 * lock held, never after an abort.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "announce.h"
#include "copy.h"
#include "error.h"
#include "frames.h"
#include "links.h"
#include "match.h"

#define ABORT_TEXT_MAX 4096
#define ABORT_FLUSH_MAX ((size_t)256 << 10) /* rest of a frame sent at abort */

#define RANK dri_links.rank

/* ---------------------------------------------------------- sending */

void dri_frames_send_whole(int i, const dri_wire_hdr *h, const void *payload)
{
	unsigned char b[DRI_WIRE_HDR];
	struct iovec iov[2];

	dri_wire_encode(h, b);
	iov[0].iov_base = b;
	iov[0].iov_len = sizeof(b);
	iov[1].iov_base = (void *)payload;
	iov[1].iov_len = h->len;
	/* A frame that does not fit in the socket buffer whole would leave
	 * the stream torn; the close then tells the peer instead (on shared
	 * memory: the launcher's abort word, or the death watch). */
	(void)!PEER(i)->ops->send(i, iov, h->len ? 2 : 1, 1);
}

int dri_frames_finish(int i)
{
	struct dri_peer *p = PEER(i);
	dri_req *r = p->sq_head;
	size_t rh = DRI_WIRE_HDR - p->shdr_done, rp = r ? r->len - r->done : 0;
	struct iovec iov[2];
	ssize_t n;

	if (!r || rh + rp > ABORT_FLUSH_MAX)
		return 0;
	iov[0].iov_base = p->shdr + p->shdr_done;
	iov[0].iov_len = rh;
	iov[1].iov_base = (char *)r->buf + r->done;
	iov[1].iov_len = rp;
	n = p->ops->send(i, iov, 2, 1);
	if (n < 0 || (size_t)n != rh + rp)
		return 0;
	p->shdr_ready = 0;
	return 1;
}

/* Takes the announcements (CALL frames) out of peer p's send queue: the
 * peer has gone (it said BYE, or its socket refuses writes), and what it
 * is no longer there to hear is no error of this job.  Whether anything
 * else is left is the caller's to judge. */
static void drop_calls(struct dri_peer *p)
{
	dri_req **pp = &p->sq_head;

	p->sq_tail = NULL;
	while (*pp) {
		dri_req *r = *pp;
		if (r->kind == DRI_WIRE_CALL) {
			if (r == p->sq_head)
				p->shdr_ready = 0;
			*pp = r->next;
			r->next = NULL;
			dri_req_finish(r, DR_OK);
			continue;
		}
		p->sq_tail = r;
		pp = &r->next;
	}
}

dr_err dri_frames_flush(int i)
{
	struct dri_peer *p = PEER(i);
	dr_err err;

	while (p->sq_head && p->state == P_UP) {
		dri_req *r = p->sq_head;
		struct iovec iov[2];
		ssize_t n;
		int k = 0;

		if (!p->shdr_ready) {
			dri_wire_hdr h;
			memset(&h, 0, sizeof(h));
			h.magic = DRI_WIRE_MAGIC;
			h.version = DRI_WIRE_VERSION;
			h.kind = (uint16_t)r->kind;
			h.id = r->id;
			h.len = r->len;
			h.src = RANK;
			dri_wire_encode(&h, p->shdr);
			p->shdr_ready = 1;
			p->shdr_done = 0;
		}
		if (p->shdr_done < DRI_WIRE_HDR) {
			iov[k].iov_base = p->shdr + p->shdr_done;
			iov[k++].iov_len = DRI_WIRE_HDR - p->shdr_done;
		}
		if (r->done < r->len) {
			iov[k].iov_base = (char *)r->buf + r->done;
			iov[k++].iov_len = r->len - r->done;
		}
		if (k) {
			n = p->ops->send(i, iov, k, 0);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return DR_OK;
				/* The peer may have said why before it went:
				 * an ABORT frame waiting to be read names the
				 * real cause. */
				int e = errno;
				if (e != EBADF && (err = dri_frames_read(i)))
					return err;
				if (p->state != P_UP)
					return DR_OK;
				/* A peer that finished and closed refuses our
				 * announcement of a call it already served: what
				 * it sent before is still ours to read, and
				 * reading decides (its BYE, or a reset). */
				if (e == EPIPE || e == ECONNRESET) {
					drop_calls(p);
					if (!p->sq_head)
						return DR_OK;
				}
				return dri_peer_io_error(i, e);
			}
			size_t h = DRI_WIRE_HDR - p->shdr_done;
			if ((size_t)n < h) {
				p->shdr_done += (size_t)n;
				continue;
			}
			p->shdr_done = DRI_WIRE_HDR;
			r->done += (size_t)n - h;
			if (r->done < r->len)
				continue;
		}
		p->sq_head = r->next;
		if (!p->sq_head)
			p->sq_tail = NULL;
		r->next = NULL;
		p->shdr_ready = 0;
		dri_req_finish(r, DR_OK);
	}
	return DR_OK;
}

/* -------------------------------------------------------- receiving */

dr_err dri_frames_unpark(int i, dri_req *r)
{
	struct dri_peer *p = PEER(i);
	dr_err e;

	dri_peer_park(p, 0);
	p->rx_active = 1;
	if ((e = dri_match_into(i, r)))
		return e;
	return dri_frames_read(i);
}

/* A header arrived from peer i: decide where its payload goes. */
static dr_err on_header(int i)
{
	struct dri_peer *p = PEER(i);
	dri_wire_hdr *h = &p->rx;
	int verdict;
	dr_err e;

	p->rx_req = NULL;
	p->rx_msg = NULL;
	p->rx_dest = NULL;
	p->rx_done = 0;
	p->rx_active = 1;
	if (h->kind == DRI_WIRE_ABORT) {
		if (h->len > ABORT_TEXT_MAX)
			return dri_fail(DR_EPROTO, "rank %d: oversized abort "
					"message from rank %d", RANK, i);
		p->abort_text = calloc(1, h->len + 1);
		if (!p->abort_text)
			return dri_fail(DR_ENOMEM, "out of memory");
		p->rx_dest = (unsigned char *)p->abort_text;
		return DR_OK;
	}
	if (h->kind == DRI_WIRE_CALL) {
		/* no payload: done once this returns */
		e = dri_call_heard(i, h, &verdict);
		if (!e && verdict)
			dri_match_gave_up(i, &h->id);
		return e;
	}
	return dri_match_header(i);
}

static dr_err on_payload_done(int i)
{
	struct dri_peer *p = PEER(i);

	p->rx_active = 0;
	if (p->rx.kind == DRI_WIRE_ABORT) {
		char *t = p->abort_text;
		dr_err e = p->rx.err > DR_OK && p->rx.err < DR_ERR_COUNT_ ?
			   (dr_err)p->rx.err : DR_EABORTED;

		p->abort_text = NULL;
		/* Name the rank that saw it first, once. */
		if (t && strstr(t, DRI_REPORTED_BY))
			dri_fail(e, "%s", t);
		else
			dri_fail(e, "%s" DRI_REPORTED_BY "%d)", t ? t : "", i);
		free(t);
		return e;
	}
	if (p->rx_req) {
		p->rx_req->done = p->rx_req->len;
		dri_req_finish(p->rx_req, DR_OK);
	} else if (p->rx_msg) {
		p->rx_msg->done = p->rx_msg->len;
	}
	p->rx_req = NULL;
	p->rx_msg = NULL;
	return DR_OK;
}

/* A whole header has arrived in p->rhdr. */
static dr_err on_header_bytes(int i)
{
	struct dri_peer *p = PEER(i);

	p->rhdr_got = 0;
	if (dri_wire_decode(p->rhdr, &p->rx) || p->rx.src != i)
		return dri_fail(DR_EPROTO, "rank %d: garbled message from rank "
				"%d: %s", RANK, i, p->rx.src != i ?
				"wrong sender" : dr_last_error());
	if (p->rx.kind != DRI_WIRE_BYE)
		return on_header(i);
	/* Left on purpose; requests that still need it fail when they are
	 * made or waited for. */
	dri_peer_close(p);
	p->state = P_GONE;
	drop_calls(p);
	if (dri_match_waits_for(i))
		return dri_fail(DR_EPEER, "rank %d: rank %d left the process "
				"group while this rank waits for it", RANK, i);
	if (p->sq_head)
		return dri_fail(DR_EPEER, "rank %d: rank %d left the process "
				"group before receiving this rank's message",
				RANK, i);
	return DR_OK;
}

/* Payload bytes arrived (into rx_dest already, or to be copied from src). */
static dr_err on_payload_bytes(int i, const unsigned char *src, size_t n)
{
	struct dri_peer *p = PEER(i);

	if (src && p->rx_dest)
		dri_copy(p->rx_dest + p->rx_done, src, n);
	p->rx_done += n;
	if (p->rx_msg)
		p->rx_msg->done = p->rx_done;
	if (p->rx_done == p->rx.len)
		return on_payload_done(i);
	return DR_OK;
}

/* A short read means the link is drained (poll is level-triggered: it
 * says when more comes), which saves the read that would only return
 * EAGAIN. */
dr_err dri_frames_read(int i)
{
	struct dri_peer *p = PEER(i);
	int drained = 0;
	ssize_t n;
	dr_err e;

	if (!p->stage && !(p->stage = malloc(DRI_STAGE_LEN)))
		return dri_fail(DR_ENOMEM, "out of memory");
	while (p->state == P_UP && !p->parked) {
		size_t avail = p->s_len - p->s_off, want, k;
		if (p->rx_active && p->rx_done == p->rx.len) {
			if ((e = on_payload_done(i)))
				return e;
			continue;
		}
		if (avail) {
			const unsigned char *src = p->stage + p->s_off;
			if (!p->rx_active) {
				k = DRI_WIRE_HDR - p->rhdr_got;
				k = k < avail ? k : avail;
				memcpy(p->rhdr + p->rhdr_got, src, k);
				p->s_off += k;
				p->rhdr_got += k;
				if (p->rhdr_got == DRI_WIRE_HDR &&
				    (e = on_header_bytes(i)))
					return e;
			} else {
				k = p->rx.len - p->rx_done;
				k = k < avail ? k : avail;
				p->s_off += k;
				if ((e = on_payload_bytes(i, src, k)))
					return e;
			}
			continue;
		}
		if (drained)
			return DR_OK;
		want = p->rx_active ? p->rx.len - p->rx_done : 0;
		if (want >= DRI_STAGE_LEN && p->rx_dest) {
			n = p->ops->recv(i, p->rx_dest + p->rx_done, want);
			if (n > 0) {
				drained = (size_t)n < want;
				if ((e = on_payload_bytes(i, NULL, (size_t)n)))
					return e;
				continue;
			}
		} else {
			n = p->ops->recv(i, p->stage, DRI_STAGE_LEN);
			if (n > 0) {
				p->s_off = 0;
				p->s_len = (size_t)n;
				drained = (size_t)n < DRI_STAGE_LEN;
				continue;
			}
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return DR_OK;
		if (n < 0)
			return dri_peer_io_error(i, errno);
		if (!p->rx_active && !p->rhdr_got)
			return dri_peer_lost(i, "connection closed");
		return dri_peer_lost(i, "connection closed mid-message");
	}
	return DR_OK;
}
