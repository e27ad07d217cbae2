/*
 * coll_hier.h - hierarchical collectives (coll_hier.c) and the flat
 * algorithms they are made of.
 *
 * A collective entry point's run asks dri_hier_wanted first; when it says
 * yes the call goes through coll_hier.c, which cuts the group into its
 * hosts and runs the flat algorithms below on those pieces (ranks of one
 * host, then one leader per host), with the call's own message identity,
 * so that mismatch detection sees the call the user made.
 */
#ifndef DRI_COLL_HIER_H
#define DRI_COLL_HIER_H

#include "group.h"

/* Whether op (its group, its size in bytes) should run hierarchically:
 * the group spans several hosts and some host holds more than one of its
 * ranks, and DISTRUN_HIER (auto, the default: by size; on; off) says so.
 * The same answer on every rank of a call that agrees on its arguments. */
int dri_hier_wanted(const dri_op *op);

/* The tag of every message of a call in two levels (collectives' are 0
 * otherwise): a rank that runs the call flat, its DISTRUN_HIER set
 * otherwise, meets DR_EMISMATCH instead of bytes it would misread. */
#define DRI_HIER_TAG 1

/* A flat algorithm over op->group, as an entry point runs it when the
 * hierarchy does not apply.  The entry points hand theirs to the
 * schedules below (which sit above them and so call them only through
 * these pointers): the barrier's is the dissemination alone (no device
 * wait, no segment flags). */
typedef dr_err (*dri_flat_fn)(dri_op *op);

/* The hierarchical schedules: same arguments, same results as the flat
 * run of op (AVG divided once, by the group's size). */
dr_err dri_hier_all_reduce(dri_op *op, dri_flat_fn reduce,
			   dri_flat_fn all_reduce, dri_flat_fn broadcast);
dr_err dri_hier_barrier(dri_op *op, dri_flat_fn barrier);
dr_err dri_hier_broadcast(dri_op *op, dri_flat_fn broadcast);
dr_err dri_hier_all_gather(dri_op *op, dri_flat_fn broadcast);

/* all_gather goes in two levels (DISTRUN_HIER=auto) up to this size of
 * the whole result. */
#define DRI_HIER_GATHER_BYTES DRI_COLL_SMALL_BYTES

#endif /* DRI_COLL_HIER_H */
