/*
 * announce.h - the mismatch announcements (announce.c): the calls this
 * rank made and those its peers announced, compared.  A dr_err returned
 * is DR_EMISMATCH (or DR_EPROTO) with the message set, for the loop to
 * abort with.  Called with transport.c's lock held.
 */
#ifndef DRI_ANNOUNCE_H
#define DRI_ANNOUNCE_H

#include "transport.h"
#include "wire.h"

/* The mismatch of rank a's call ida and rank b's idb, of the same seq.
 * The order is the messages' (wire.c): the sender first, then the rank
 * that waits for its message; the flags name the lower rank first
 * (coll_shm.c). */
dr_err dri_calls_differ(int a, const dri_msg_id *ida, int b,
			const dri_msg_id *idb);
/* Whether two ids of one group and seq name the same call (the tag
 * aside: a call over two levels of hosts tags its messages once it has
 * a plan, coll_hier.c; and an all_to_all_v's count, which each of its
 * messages sets to the piece of its pair, coll_alltoall.c, checked
 * there). */
int dri_same_call(const dri_msg_id *a, const dri_msg_id *b);
/* This rank's call of the group and seq of id, if it is kept. */
const dri_msg_id *dri_call_made(const dri_msg_id *id);
/* A send or receive of call id is posted: the call is kept (once; *fresh
 * 1 when it is new) and compared with what peers announced of its seq. */
dr_err dri_call_note(const dri_msg_id *id, int *fresh);
/* Whether monitor i gave up on this rank in the monitored barrier id. */
int dri_call_gave_up(int i, const dri_msg_id *id);
/* Peer i's DRI_WIRE_CALL frame h: the call it waits in, against ours of
 * that seq, or kept until this rank gets there.  *verdict 1: it was a
 * monitored barrier's monitor giving up on us (match.c ends our receive
 * of its verdict as timed out). */
dr_err dri_call_heard(int i, const dri_wire_hdr *h, int *verdict);
/* Whether receive or send r, of a wait that has lasted ANNOUNCE_MS, is
 * to tell its peer our call (once per call and peer; marked told). */
int dri_call_tell(const dri_req *r);
/* Forgets everything (the transport stops). */
void dri_calls_reset(void);

#endif
