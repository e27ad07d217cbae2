/*
 * wire.c - fuzzes what a rank does with the header of every message a
 * peer sends: its decoding (dri_wire_decode), the check of the message
 * against the receive that was posted (dri_msg_mismatch, whose message
 * ends up in DR_EMISMATCH), and the naming of calls in those messages
 * (dri_msg_id_describe) with whatever identity a peer sends.
 *
 * Input: a 64-byte header as it came from the peer, then optionally a
 * second one standing for the receive this rank posted (its id and len).
 * Properties: a header that decodes re-encodes to the same bytes (the
 * codec loses nothing), one that does not leaves a message; a message
 * agrees with a receive exactly when every field of the identity and the
 * length are equal, and a disagreement is explained in a NUL-terminated
 * message that names the sender; describing any identity, into any
 * buffer size, stays inside the buffer and is NUL-terminated.
 */
#include "wire.h"
#include "fuzz.h"

static void describe_all_sizes(const dri_msg_id *id)
{
	char big[512], small[17];

	dri_msg_id_describe(id, big, sizeof(big));
	FUZZ_CHECK(memchr(big, 0, sizeof(big)) != NULL);
	FUZZ_CHECK(big[0] != 0);
	for (size_t n = 1; n <= sizeof(small); n += 4) {
		memset(small, 'x', sizeof(small));
		dri_msg_id_describe(id, small, n);
		FUZZ_CHECK(memchr(small, 0, n) != NULL);
		for (size_t k = n; k < sizeof(small); k++)
			FUZZ_CHECK(small[k] == 'x');
	}
}

static int same_id(const dri_msg_id *a, const dri_msg_id *b)
{
	return a->group_id == b->group_id && a->coll == b->coll &&
	       a->seq == b->seq && a->count == b->count &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
	       a->tag == b->tag;
}

static void check_against(const dri_wire_hdr *got, const dri_wire_hdr *want)
{
	char why[768], sender[32];
	size_t want_len = (size_t)want->len;
	int bad;

	memset(why, 'x', sizeof(why));
	bad = dri_msg_mismatch(&want->id, want_len, &got->id, got->len,
			       got->src, 7, why, sizeof(why));
	FUZZ_CHECK(bad == !(same_id(&want->id, &got->id) &&
			    got->len == want_len));
	if (bad) {
		FUZZ_CHECK(memchr(why, 0, sizeof(why)) != NULL);
		snprintf(sender, sizeof(sender), "rank %d ", got->src);
		FUZZ_CHECK(!strncmp(why, sender, strlen(sender)));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char in[DRI_WIRE_HDR], out[DRI_WIRE_HDR];
	dri_wire_hdr h, mine;

	if (size < DRI_WIRE_HDR)
		return 0;
	memcpy(in, data, DRI_WIRE_HDR);
	if (dri_wire_decode(in, &h) != DR_OK) {
		FUZZ_CHECK(dr_last_error()[0] != 0);
		return 0;
	}
	dri_wire_encode(&h, out);
	FUZZ_CHECK(memcmp(in, out, DRI_WIRE_HDR) == 0);
	describe_all_sizes(&h.id);
	check_against(&h, &h);
	if (size >= 2 * DRI_WIRE_HDR) {
		memcpy(in, data + DRI_WIRE_HDR, DRI_WIRE_HDR);
		if (dri_wire_decode(in, &mine) == DR_OK) {
			describe_all_sizes(&mine.id);
			check_against(&h, &mine);
		}
	}
	return 0;
}
