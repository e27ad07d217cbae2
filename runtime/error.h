/*
 * error.h - the error state every layer reports through: dri_fail records
 * a message as the calling thread's dr_last_error() and returns the code;
 * and the names of the calls that messages mention.
 *
 * Layer 0 (with clock.h, reduce.h, timeout.h): depends on nothing of
 * distrun but the public header.
 */
#ifndef DRI_ERROR_H
#define DRI_ERROR_H

#include "distrun.h"

/* Records a formatted message as this thread's dr_last_error() and returns
 * err, so that `return dri_fail(DR_EINVAL, "count %zu", n);` reads well. */
dr_err dri_fail(dr_err err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Sets this thread's dr_last_error() to msg (a copy), e.g. to hand a work
 * handle's message to the thread that waits on it. */
void dri_set_last_error(const char *msg);
/* strerror(e), with what to change where a limit was hit: EMFILE names
 * this process's open file limit, ENFILE the system's.  Valid until the
 * thread's fourth next call (several fit in one message). */
const char *dri_strerror(int e);

/* Which call: carried in every message's identity (wire.h) and named in
 * errors. */
typedef enum {
	DRI_BARRIER = 1,
	DRI_ALL_REDUCE,
	DRI_BROADCAST,
	DRI_REDUCE,
	DRI_ALL_GATHER,
	DRI_GATHER,
	DRI_SCATTER,
	DRI_REDUCE_SCATTER,
	DRI_ALL_TO_ALL,
	DRI_ALL_TO_ALL_V,
	DRI_MONITORED_BARRIER,
	DRI_NEW_GROUP,
	DRI_P2P,
	DRI_COLL_COUNT_
} dri_coll;

/* "barrier", "all_reduce", ... */
const char *dri_coll_name(dri_coll coll);

#endif

