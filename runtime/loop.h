/*
 * loop.h - what the loop (transport.c) lends the waits (wait.c): its
 * lock, one step of progress, the abort.  Everything but dri_loop_lock
 * is called with the lock held.
 */
#ifndef DRI_LOOP_H
#define DRI_LOOP_H

#include <stdint.h>

#include "transport.h"

void dri_loop_lock(void);
void dri_loop_unlock(void);
/* DR_OK, or the error the transport was aborted with, and its message. */
dr_err dri_loop_error(void);
const char *dri_loop_message(void);
/* Aborts the transport (the first abort wins): every peer is told,
 * every request fails with err. */
void dri_loop_abort(dr_err err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Aborts with e and dr_last_error(), if e is an error (a room's). */
void dri_loop_fail(dr_err e);
/* One step of progress: poll (or spin, if spin) for up to wait_ms, or let
 * the thread that polls now work; whether anything happened. */
int dri_loop_step(int64_t wait_ms, int spin);
/* Reads and writes the shared-memory rings that changed. */
void dri_loop_drain(void);
/* Tells each peer that one of reqs still waits for the call it is in
 * (announce.c: once per call and peer). */
void dri_loop_announce(const dri_req *reqs, int n);
/* How long a wait spins before it blocks: at its start (flowing 0), and
 * after an event (flowing 1); DISTRUN_SPIN_US sets both. */
int64_t dri_loop_spin_us(int flowing);

#endif
