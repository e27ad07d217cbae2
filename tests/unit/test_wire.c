/*
 * test_wire.c - the message header: its byte layout (little-endian, fixed
 * offsets, so ranks built by different compilers agree), a round trip of
 * every field, the refusal of headers that are not ours, and the way a
 * call is named in mismatch messages.
 */
#include <string.h>

#include "wire.h"
#include "runner.h"

static dri_wire_hdr sample(void)
{
	dri_wire_hdr h;

	memset(&h, 0, sizeof(h));
	h.magic = DRI_WIRE_MAGIC;
	h.version = DRI_WIRE_VERSION;
	h.kind = DRI_WIRE_DATA;
	h.id.group_id = 3;
	h.id.coll = DRI_ALL_REDUCE;
	h.id.seq = 0x0102030405060708ULL;
	h.id.count = 1ULL << 40;
	h.id.dtype = DR_BFLOAT16;
	h.id.op = DR_AVG;
	h.id.root = -1;
	h.id.tag = 77;
	h.len = 12345;
	h.src = 255;
	h.err = 0;
	return h;
}

static int test_round_trip(void)
{
	dri_wire_hdr h = sample(), g;
	unsigned char b[DRI_WIRE_HDR];

	dri_wire_encode(&h, b);
	CHECK(dri_wire_decode(b, &g) == DR_OK);
	CHECK(g.magic == h.magic && g.version == h.version && g.kind == h.kind);
	CHECK(g.id.group_id == 3 && g.id.coll == DRI_ALL_REDUCE);
	CHECK(g.id.seq == h.id.seq && g.id.count == h.id.count);
	CHECK(g.id.dtype == DR_BFLOAT16 && g.id.op == DR_AVG);
	CHECK(g.id.root == -1 && g.id.tag == 77);
	CHECK(g.len == 12345 && g.src == 255);
	return 0;
}

static int test_layout_is_little_endian(void)
{
	dri_wire_hdr h = sample();
	unsigned char b[DRI_WIRE_HDR];

	dri_wire_encode(&h, b);
	CHECK(!memcmp(b, "DRUN", 4));               /* magic */
	CHECK(b[4] == DRI_WIRE_VERSION && b[5] == 0); /* version */
	CHECK(b[16] == 0x08 && b[23] == 0x01);      /* seq, low byte first */
	CHECK(b[40] == 0xff && b[43] == 0xff);      /* root -1 */
	CHECK(b[56] == 255 && b[57] == 0);          /* sender */
	return 0;
}

static int test_bad_magic_is_refused(void)
{
	dri_wire_hdr h = sample(), g;
	unsigned char b[DRI_WIRE_HDR];

	dri_wire_encode(&h, b);
	memcpy(b, "GET ", 4);
	CHECK(dri_wire_decode(b, &g) == DR_EPROTO);
	CHECKF(strstr(dr_last_error(), "magic"), "%s", dr_last_error());
	return 0;
}

static int test_other_version_is_refused(void)
{
	dri_wire_hdr h = sample(), g;
	unsigned char b[DRI_WIRE_HDR];

	h.version = DRI_WIRE_VERSION + 1;
	dri_wire_encode(&h, b);
	CHECK(dri_wire_decode(b, &g) == DR_EPROTO);
	CHECKF(strstr(dr_last_error(), "version"), "%s", dr_last_error());
	return 0;
}

static int test_unknown_kind_is_refused(void)
{
	dri_wire_hdr h = sample(), g;
	unsigned char b[DRI_WIRE_HDR];

	h.kind = 9;
	dri_wire_encode(&h, b);
	CHECK(dri_wire_decode(b, &g) == DR_EPROTO);
	return 0;
}

static int test_describe_names_the_call(void)
{
	dri_msg_id id = { 0, DRI_ALL_REDUCE, 3, 4, DR_FLOAT32, DR_SUM, -1, 0, 0, 0 };
	char s[128];

	dri_msg_id_describe(&id, s, sizeof(s));
	CHECKF(!strcmp(s, "all_reduce(count=4, float32, sum)"), "%s", s);
	id.coll = DRI_BARRIER;
	dri_msg_id_describe(&id, s, sizeof(s));
	CHECKF(!strcmp(s, "barrier"), "%s", s);
	id = (dri_msg_id){ 0, DRI_BROADCAST, 1, 8, DR_INT8, -1, 2, 0, 0, 0 };
	dri_msg_id_describe(&id, s, sizeof(s));
	CHECKF(!strcmp(s, "broadcast(count=8, int8, root=2)"), "%s", s);
	id = (dri_msg_id){ 0, DRI_P2P, 0, 1, DR_INT64, -1, -1, 5, 0, 0 };
	dri_msg_id_describe(&id, s, sizeof(s));
	CHECKF(!strcmp(s, "send/recv(count=1, int64, tag=5)"), "%s", s);
	/* a short buffer is cut, never overrun */
	char tiny[8];
	memset(tiny, 'x', sizeof(tiny));
	dri_msg_id_describe(&id, tiny, 6);
	CHECK(strlen(tiny) == 5 && tiny[6] == 'x');
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_round_trip),
	UNIT(test_layout_is_little_endian),
	UNIT(test_bad_magic_is_refused),
	UNIT(test_other_version_is_refused),
	UNIT(test_unknown_kind_is_refused),
	UNIT(test_describe_names_the_call),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
