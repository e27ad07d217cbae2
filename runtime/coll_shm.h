/*
 * coll_shm.h - the world's collectives through the job's segment
 * (coll_shm.c), as the collectives' entry points call them: one `if` at
 * the top of each algorithm.
 */
#ifndef DRI_COLL_SHM_H
#define DRI_COLL_SHM_H

#include "group.h"

/* Runs op through the segment's slots and flags when it is a call of
 * the world group, every rank shares this host's segment and
 * DISTRUN_SHM_COLL is not 0; returns 1 with *err set (DR_OK or the
 * error, the group then aborted), or 0 if it does not apply (the caller
 * then sends messages). */
int dri_shm_coll(dri_op *op, dr_err *err);

/* A blocking dr_barrier (coll DRI_BARRIER, the rest ignored), or
 * dr_all_reduce of at most 8 bytes, or dr_broadcast or dr_reduce (root
 * >= 0, else -1) of at most DRI_SEG_INLINE bytes, in host memory, on the
 * world group, whose arguments the caller checked: when it runs through
 * the flags with no asynchronous call of the world to wait for, runs it
 * here at once (dri_run_op, without the op that dri_coll_op fills and
 * dri_submit copies and orders: as long as the flags' own work, README,
 * Benchmarks), and returns 1 with *err its status; else 0, and the
 * caller takes the usual way. */
int dri_shm_quick(dri_coll coll, void *buf, size_t count, dr_dtype dtype,
		  dr_op redop, int root, dr_err *err);

/* After init's closing barrier (dr_init_process_group), when the
 * world's small calls take the lean way (flat, through the flags): says
 * that this rank has left it and waits, at most LEAVE_WAIT_NS, until
 * the other ranks have too.  The barrier's first call through the flags
 * ends with work of a rank's own (the lines of the others' records
 * read: dri_cs_warm) that lasts up to tens of us longer on one rank
 * than on another here, which the program's first call would wait out
 * (docs/small-calls-log-2.md, "The end of init"). */
void dri_shm_coll_leave_init(int rank);

#endif /* DRI_COLL_SHM_H */
