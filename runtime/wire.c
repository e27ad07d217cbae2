/*
 * wire.c - the message header of the transport and the identity of a
 * call (wire.h): encoding, validation, the words that describe a call,
 * and the check of a message against the receive posted for it.
 */
#include <stdio.h>

#include "reduce.h"
#include "wire.h"

void dri_wire_encode(const dri_wire_hdr *h, unsigned char out[DRI_WIRE_HDR])
{
	dri_put32(out + 0, h->magic);
	dri_put16(out + 4, h->version);
	dri_put16(out + 6, h->kind);
	dri_put32(out + 8, h->id.group_id);
	dri_put32(out + 12, h->id.coll);
	dri_put64(out + 16, h->id.seq);
	dri_put64(out + 24, h->id.count);
	dri_put32(out + 32, (uint32_t)h->id.dtype);
	dri_put32(out + 36, (uint32_t)h->id.op);
	dri_put32(out + 40, (uint32_t)h->id.root);
	dri_put32(out + 44, (uint32_t)h->id.tag);
	dri_put64(out + 48, h->len);
	dri_put32(out + 56, (uint32_t)h->src);
	dri_put32(out + 60, (uint32_t)h->err);
}

dr_err dri_wire_decode(const unsigned char in[DRI_WIRE_HDR], dri_wire_hdr *h)
{
	h->magic = dri_get32(in + 0);
	h->version = dri_get16(in + 4);
	h->kind = dri_get16(in + 6);
	if (h->magic != DRI_WIRE_MAGIC)
		return dri_fail(DR_EPROTO, "bad message magic 0x%08x (expected "
				"0x%08x)", h->magic, DRI_WIRE_MAGIC);
	if (h->version != DRI_WIRE_VERSION)
		return dri_fail(DR_EPROTO, "peer speaks protocol version %u, "
				"this rank %u", h->version, DRI_WIRE_VERSION);
	if (h->kind > DRI_WIRE_CALL)
		return dri_fail(DR_EPROTO, "unknown message kind %u", h->kind);
	h->id.group_id = dri_get32(in + 8);
	h->id.coll = dri_get32(in + 12);
	h->id.seq = dri_get64(in + 16);
	h->id.count = dri_get64(in + 24);
	h->id.dtype = (int32_t)dri_get32(in + 32);
	h->id.op = (int32_t)dri_get32(in + 36);
	h->id.root = (int32_t)dri_get32(in + 40);
	h->id.tag = (int32_t)dri_get32(in + 44);
	h->id.deadline = h->id.timeout_ms = 0;
	h->len = dri_get64(in + 48);
	h->src = (int32_t)dri_get32(in + 56);
	h->err = (int32_t)dri_get32(in + 60);
	return DR_OK;
}

void dri_msg_id_describe(const dri_msg_id *id, char *buf, size_t size)
{
	int n;

	if (id->coll == DRI_BARRIER || id->coll == DRI_MONITORED_BARRIER) {
		snprintf(buf, size, "%s", dri_coll_name(id->coll));
		return;
	}
	n = snprintf(buf, size, "%s(count=%llu", dri_coll_name(id->coll),
		     (unsigned long long)id->count);
	if (id->dtype >= 0 && n >= 0 && (size_t)n < size)
		n += snprintf(buf + n, size - n, ", %s",
			      dr_dtype_name((dr_dtype)id->dtype));
	if (id->op >= 0 && n >= 0 && (size_t)n < size)
		n += snprintf(buf + n, size - n, ", %s",
			      dr_op_name((dr_op)id->op));
	if (id->root >= 0 && n >= 0 && (size_t)n < size)
		n += snprintf(buf + n, size - n, ", root=%d", id->root);
	if (id->coll == DRI_P2P && n >= 0 && (size_t)n < size)
		n += snprintf(buf + n, size - n, ", tag=%d", id->tag);
	if (n >= 0 && (size_t)n < size)
		snprintf(buf + n, size - n, ")");
}

int dri_msg_id_equal(const dri_msg_id *a, const dri_msg_id *b)
{
	return a->group_id == b->group_id && a->coll == b->coll &&
	       a->seq == b->seq && a->count == b->count &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
	       a->tag == b->tag;
}

int dri_msg_mismatch(const dri_msg_id *want, size_t want_len,
		     const dri_msg_id *got, uint64_t len, int src, int me,
		     char *why, size_t n)
{
	char mine[256], theirs[256];

	if (dri_msg_id_equal(want, got) && len == want_len)
		return 0;
	dri_msg_id_describe(got, theirs, sizeof(theirs));
	dri_msg_id_describe(want, mine, sizeof(mine));
	if (got->coll == DRI_P2P && want->coll == DRI_P2P)
		snprintf(why, n, "rank %d sent %s but rank %d posted recv %s",
			 src, theirs, me, mine);
	else if (got->tag != want->tag && got->coll == want->coll &&
		 got->seq == want->seq && got->count == want->count &&
		 got->dtype == want->dtype && got->op == want->op &&
		 got->root == want->root) /* coll_hier.h's DRI_HIER_TAG */
		snprintf(why, n, "rank %d ran %s %s but rank %d %s (seq %llu; "
			 "is DISTRUN_HIER the same on every rank?)", src, theirs,
			 got->tag ? "in two levels" : "flat", me,
			 want->tag ? "in two levels" : "flat",
			 (unsigned long long)want->seq);
	else if (!dri_msg_id_equal(want, got) && got->seq != want->seq)
		snprintf(why, n, "rank %d called %s but rank %d called %s "
			 "(seq %llu vs %llu%s)", src, theirs, me, mine,
			 (unsigned long long)got->seq,
			 (unsigned long long)want->seq,
			 got->group_id ? ", subgroup" : "");
	else if (!dri_msg_id_equal(want, got))
		snprintf(why, n, "rank %d called %s but rank %d called %s "
			 "(seq %llu)", src, theirs, me, mine,
			 (unsigned long long)want->seq);
	else
		snprintf(why, n, "rank %d sent %llu bytes in %s but rank %d "
			 "expected %zu bytes (seq %llu)", src,
			 (unsigned long long)len, theirs, me, want_len,
			 (unsigned long long)want->seq);
	return 1;
}
