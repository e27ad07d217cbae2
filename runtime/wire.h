/*
 * wire.h - the bytes between ranks and between a rank and the store:
 * little-endian integer codecs (every frame of distrun's own protocols),
 * the identity of a call (dri_msg_id) and the header that starts every
 * message of the transport (wire.c).
 *
 * Layer 1: above the error state (error.h) and the dtype names (reduce.h).
 */
#ifndef DRI_WIRE_H
#define DRI_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Little-endian codecs.  Inline: they sit in every frame's path. */
static inline void dri_put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static inline void dri_put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void dri_put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint16_t dri_get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t dri_get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t dri_get64(const unsigned char *p)
{
	return (uint64_t)dri_get32(p) | (uint64_t)dri_get32(p + 4) << 32;
}

/* The identity of one call, carried in the header of each of its messages
 * and compared by the receiver: a message whose identity differs from the
 * receive's (same group and seq, other coll/dtype/op/root/count, or an
 * unexpected length) fails the receive with DR_EMISMATCH naming both
 * sides. */
typedef struct {
	uint32_t group_id; /* same on every rank: order of creation, world = 0 */
	uint32_t coll;     /* dri_coll */
	uint64_t seq;      /* per-group call number; 0 for p2p */
	uint64_t count;    /* element count of the call as the user gave it */
	int32_t dtype;     /* dr_dtype, -1 if none */
	int32_t op;        /* dr_op, -1 if none */
	int32_t root;      /* world rank of the root, -1 if none */
	int32_t tag;       /* p2p tag; 0 for collectives */
	/* Local, never on the wire nor compared: when every wait of the
	 * call ends (a dri_now_ms() time; 0 = the job's timeout from the
	 * wait's start, timeout.h), and the timeout it came from, for the
	 * message that says so. */
	int64_t deadline;
	int64_t timeout_ms;
} dri_msg_id;

/* The wire header that starts every message between ranks.  Encoded
 * little-endian in DRI_WIRE_HDR bytes. */
#define DRI_WIRE_MAGIC 0x4e555244u /* "DRUN" */
#define DRI_WIRE_VERSION 1
#define DRI_WIRE_HDR 64
/* DRI_WIRE_CALL: no payload; the id is the call its sender waits in,
 * for a peer that may be in another call of that seq (transport.c). */
enum { DRI_WIRE_DATA = 0, DRI_WIRE_BYE = 1, DRI_WIRE_ABORT = 2,
       DRI_WIRE_CALL = 3 };
typedef struct {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;     /* DRI_WIRE_* */
	dri_msg_id id;
	uint64_t len;      /* payload bytes that follow */
	int32_t src;       /* sender's world rank */
	int32_t err;       /* DRI_WIRE_ABORT: the dr_err */
} dri_wire_hdr;

void dri_wire_encode(const dri_wire_hdr *h, unsigned char out[DRI_WIRE_HDR]);
/* Decodes and validates magic, version and kind: DR_EPROTO (with a
 * message) for a header that is not one of ours. */
dr_err dri_wire_decode(const unsigned char in[DRI_WIRE_HDR], dri_wire_hdr *h);
/* "all_reduce(count=4, float32, sum)" and so on, into buf. */
void dri_msg_id_describe(const dri_msg_id *id, char *buf, size_t size);
/* The receiver's check of a message (identity got, len bytes, from world
 * rank src) against the receive rank me posted (want, want_len bytes): 0
 * when they agree, else 1 with the DR_EMISMATCH message naming both calls
 * in why (n bytes, NUL-terminated). */
int dri_msg_mismatch(const dri_msg_id *want, size_t want_len,
		     const dri_msg_id *got, uint64_t len, int src, int me,
		     char *why, size_t n);

/* Whether two identities name the same call (the local fields aside). */
int dri_msg_id_equal(const dri_msg_id *a, const dri_msg_id *b);

#endif
