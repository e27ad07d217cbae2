/*
 * group.h - process groups and the running of calls (group.c): the world
 * group and subgroups' state, the order of calls (sequence numbers), the
 * progress threads that run asynchronous calls, dr_work handles, scratch
 * memory.  An op is a call as its algorithm needs it; the scheduler runs
 * op->run and knows nothing else of it.
 *
 * Layer 4: above the transport (transport.h); the collectives are above.
 */
#ifndef DRI_GROUP_H
#define DRI_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

struct dr_group {
	uint32_t id;      /* world = 0, then 1, 2, ... in creation order */
	int size;         /* members */
	int rank;         /* this rank's index, -1 if not a member */
	int *ranks;       /* group index -> world rank */
	uint64_t seq;     /* next call's sequence number */
	void *priv;       /* group.c's (async queue, ...) */
};

/* The world group (valid between init and destroy, else NULL), and this
 * rank's world rank and the world size in it (-1 outside). */
dr_group *dri_world(void);
int dri_world_rank(void);
int dri_world_size(void);

/* One collective call, as the algorithm needs it.  The entry point fills
 * it and hands it to dri_submit; run() executes the algorithm on whatever
 * thread dri_submit picks.  Fields an algorithm does not use stay zero.
 * The scheduler knows nothing else of an op: start and release, where set,
 * frame run (CUDA: what the caller's stream holds at submission). */
typedef struct dri_op dri_op;
struct dri_op {
	dr_err (*run)(dri_op *op);
	/* On the calling thread in dri_submit, before the call takes its
	 * sequence number; async says it will run on the progress thread.
	 * An error fails the call there, on this rank alone. */
	dr_err (*start)(dri_op *op, int async);
	/* Once, after run or instead of it (a call that never ran), on any
	 * thread: frees what start took.  Also on dri_submit's errors. */
	void (*release)(dri_op *op);
	dr_err (*host_run)(dri_op *op); /* staged calls: the host algorithm */
	void *priv;         /* start's, for run and release */
	dri_msg_id id;      /* group_id and seq are filled by dri_submit,
			     * deadline when the op starts running */
	dr_group *group;
	const void *sendbuf;
	void *buf;          /* in-place buffer or recvbuf */
	size_t count;
	dr_dtype dtype;
	dr_op redop;
	int root;           /* world rank */
	size_t *counts;     /* all_to_all_v: send counts then recv counts (2 * size), owned */
	int64_t timeout_ms;
	int device;         /* >= 0: buffers live on this CUDA device */
};

/* A buffer pointer an op keeps: p, or for NULL (a buffer of zero bytes)
 * the address of a static empty object, so that no algorithm meets NULL
 * and the device checks can tell "no buffer" from a buffer. */
void *dri_or_empty(const void *p);

/* Makes a group of the n given world ranks (group index -> world rank),
 * with this rank's index found in it (-1 if not a member).  id must be the
 * same on every rank (subgroup.c agrees on it).  NULL when out of memory
 * (message set). */
dr_group *dri_group_create(uint32_t id, const int *ranks, int n);
/* Waits for the group's outstanding asynchronous calls, stops its
 * progress thread, then frees it.  NULL, the world group and handles
 * group.c does not know are ignored. */
void dri_group_free(dr_group *group);

/* Group state at init and destroy (init.c calls these). */
dr_err dri_groups_init(int rank, int world_size);
/* Waits (up to the timeout) for every queued asynchronous call, stops
 * every progress thread, frees what every group holds (subgroup handles
 * stay as empty shells for dr_group_destroy). */
void dri_groups_shutdown(void);

/* Point-to-point handles (p2p.c): a dr_work around one transport request
 * that does not go through the group's ordered queue.  p2p.c posts the
 * request in dri_work_req(w), then calls dri_work_p2p_start(w) so that the
 * progress thread drives it while the caller does other things. */
dr_work *dri_work_p2p_new(void);
dri_req *dri_work_req(dr_work *w);
void dri_work_p2p_start(dr_work *w);

/* Checks membership, runs op->start if set, assigns id.group_id and
 * id.seq, then: work == NULL:
 * waits for the group's earlier asynchronous calls, runs op->run on the
 * calling thread and returns its status; work != NULL: copies op, queues
 * it on the group's progress thread and returns a handle.
 * dri_submit owns op->counts (malloc'ed by the entry point) and op->priv
 * (through op->release): it frees them when the op is done, or at once on
 * error. */
dr_err dri_submit(const dri_op *op, dr_work **work);

/* Runs op on the calling thread now, as dri_submit does once the call
 * has its sequence number: its deadline from now, its control-block
 * record, op->run, the abort rule, op->release.  Returns op->run's
 * status. */
dr_err dri_run_op(dri_op *op);

/* For a blocking call of the world group that its caller runs at once
 * (coll_shm.c's quick way, which builds no op): if the world has no
 * asynchronous call queued or running and then ok(arg) says yes, the
 * call's sequence number into *seq and 1; else 0 and nothing taken (the
 * call then goes through dri_submit, which orders it after them; so
 * does a call that loses a race for the number).  Takes no lock: ok runs
 * after the world's progress thread finished its last call, and may
 * read what that call wrote. */
int dri_world_take_seq(int (*ok)(void *), void *arg, uint64_t *seq);

/* The abort rule, in one place: a call that fails on its own (out of
 * memory, a post refused, a CUDA error) in the middle of a collective
 * would leave its peers waiting for its part until their timeout, and
 * its sequence numbers out of step with theirs; so it aborts the
 * transport with "rank R: why", which fails every peer at once with that
 * reason and unlinks every pending request (their memory may then go).
 * A failure the transport itself raised keeps the transport's message.
 * dri_submit applies it to every op but the monitored barrier (whose
 * timeout leaves the group usable); algorithms call it before they free
 * requests still posted. */
void dri_abandon(dr_err err);
/* The end of a call of coll run on the calling thread (dri_run_op, and
 * coll_shm*.c's quick ways, which build no op or one of their own): its
 * control-block record closed with err, then the abort rule, but for
 * the monitored barrier (after whose timeout the group goes on by
 * design).  Returns err. */
dr_err dri_call_end(dri_coll coll, dr_err err);

#endif
