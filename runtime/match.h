/*
 * match.h - matching receives to messages (match.c): the posted
 * receives, the unexpected queue, where a payload goes.  A dr_err
 * returned is the transport's to abort with (the message set).  Called
 * with transport.c's lock held.
 */
#ifndef DRI_MATCH_H
#define DRI_MATCH_H

#include <stdint.h>

#include "transport.h"
#include "wire.h"

/* A message of the world group of this very seq is given this long
 * before it counts as stale against a call through the flags
 * (dri_match_stale). */
#define DRI_LATE_MS 50

/* A send or receive of call id is posted: announce.c keeps it, and a
 * message of its seq that came first and belongs to another call is a
 * mismatch. */
dr_err dri_match_note(const dri_msg_id *id);
/* Monitor i gave up on us in the monitored barrier id: our posted
 * receive of its verdict, if any, ends as timed out. */
void dri_match_gave_up(int i, const dri_msg_id *id);
/* Matches receive req (initialised) against what came: from the
 * unexpected queue (DRI_MATCH_DONE: finished, or the rest of the
 * message comes straight into it; *err a mismatch), or a parked message
 * of peer i (returns i >= 0: the caller reads it into req,
 * dri_frames_unpark), or neither (DRI_MATCH_POSTED: it waits in the
 * list). */
#define DRI_MATCH_DONE (-1)
#define DRI_MATCH_POSTED (-2)
int dri_match_post(dri_req *req, dr_err *err);
/* A data header arrived from peer i (in its rx): its payload goes into a
 * posted receive, a buffer of the unexpected queue, nowhere (a cancelled
 * receive's), or the message is parked (rx_active 0, parked 1). */
dr_err dri_match_header(int i);
/* Peer i's current message goes into receive r, or (r NULL) into a
 * buffer of the unexpected queue. */
dr_err dri_match_into(int i, dri_req *r);
/* Whether a posted receive waits for peer i. */
int dri_match_waits_for(int i);
/* Takes incomplete receive r out (a timeout that is not fatal): its
 * message, if it comes after all, is dropped. */
void dri_match_cancel(dri_req *r);
/* A message of the world group from a call at or before id's (one that
 * goes through the flags) that nobody received, waited waited_ms for:
 * the calls differ (DR_EMISMATCH). */
dr_err dri_match_stale(const dri_msg_id *id, int64_t waited_ms);
/* Finishes every posted receive with err, frees the unexpected queue. */
void dri_match_fail_all(dr_err err);
/* Frees the buffers kept for reuse, forgets the cancelled receives. */
void dri_match_stop(void);

#endif
