/*
 * wire.c - fuzzes the decoding of the message header every rank reads
 * from its peers (dri_wire_decode), and the naming of calls that goes
 * into mismatch messages (dri_msg_id_describe) with whatever identity a
 * peer sends.
 *
 * Input: a 64-byte header, then optionally a second one standing for the
 * receive this rank posted.  Properties: a header that decodes re-encodes
 * to the same bytes (the codec loses nothing), one that does not leaves
 * a message; describing any identity, into any buffer size, stays inside
 * the buffer and is NUL-terminated.
 */
#include "dri.h"
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char in[DRI_WIRE_HDR], out[DRI_WIRE_HDR];
	dri_wire_hdr h;

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
	if (size >= 2 * DRI_WIRE_HDR) {
		dri_wire_hdr mine;

		memcpy(in, data + DRI_WIRE_HDR, DRI_WIRE_HDR);
		if (dri_wire_decode(in, &mine) == DR_OK)
			describe_all_sizes(&mine.id);
	}
	return 0;
}
