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

#endif /* DRI_COLL_SHM_H */
