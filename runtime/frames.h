/*
 * frames.h - the stream of frames to and from a peer (frames.c), over
 * its link.  A dr_err returned is the transport's to abort with (the
 * message set).  Called with transport.c's lock held, never after an
 * abort.
 */
#ifndef DRI_FRAMES_H
#define DRI_FRAMES_H

#include "links.h"

/* What follows the text of an error a peer's ABORT frame brought (the
 * rank that saw it first): "... (reported by rank 3)". */
#define DRI_REPORTED_BY " (reported by rank "

/* Writes what peer i's send queue holds, as far as the link takes it;
 * finished sends complete. */
dr_err dri_frames_flush(int i);
/* Reads what peer i sent, as far as the link has it, and takes the
 * frames apart (payloads into their receives or the unexpected queue). */
dr_err dri_frames_read(int i);
/* Peer i's parked message is read after all: into receive r, or (r NULL)
 * into a buffer of the unexpected queue; the caller wakes a poller, which
 * must watch the peer for input again. */
dr_err dri_frames_unpark(int i, dri_req *r);
/* For the abort and the goodbye: a frame h (and its payload) sent whole
 * or not at all, without waiting; and the rest of peer i's half-written
 * frame, if at most 256 KiB and the link takes it all at once (1: the
 * stream is whole again). */
void dri_frames_send_whole(int i, const dri_wire_hdr *h, const void *payload);
int dri_frames_finish(int i);

#endif
