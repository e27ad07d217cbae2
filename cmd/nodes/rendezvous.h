/*
 * rendezvous.h - dynamic rendezvous of a job's nodes through etcd (rendezvous.c).
 */
#ifndef DISTRUN_RDZV_H
#define DISTRUN_RDZV_H

#include <stddef.h>
#include <stdint.h>

struct rdzv_plan {
	const char *endpoint;     /* etcd: HOST:PORT */
	const char *run_id;       /* --rdzv-id */
	int min_nodes, max_nodes; /* --nnodes MIN:MAX */
	int nproc;                /* this node's ranks */
	int port;                 /* the port this node's hub would use */
	const char *addr;         /* this node's address; NULL: the one that
				   * reaches etcd */
	double timeout;           /* seconds for the whole rendezvous */
	double last_call;         /* seconds after MIN nodes are in */
	int round;                /* 0, then one more per restart */
	char *const *argv;        /* the program and its arguments: nodes
				   * running another one are not met */
};

struct rdzv_result {
	int nnodes, node_rank;
	char master_addr[64];     /* node 0's */
	int master_port;
	int round;                /* the round joined: a node started afresh
				   * (round 0) joins the current one */
	int64_t lease;            /* the round's, for rdzv_keep_start */
};

/* Joins the rendezvous: 0 with *res filled, or -1 with a message.  A node
 * of round 0 (not a restart) first looks for the round the job is in (the
 * key /distrun/rdzv/ID/current, written with a restart's round) and joins
 * that one, or is told it started without it. */
int rdzv_etcd(const struct rdzv_plan *p, struct rdzv_result *res, char *err,
	      size_t errsz);

/* While the job runs, node 0 keeps the closed round (and the pointer to
 * it) in etcd by renewing its lease, so that a node coming late is told
 * it came too late at any time, not only in the lease's first seconds.
 * The keeper is a timerfd (readable when a renewal is due) and an etcd
 * handle that holds no connection between renewals.  rdzv_keep_start:
 * the keeper (freed by rdzv_keep_stop), or NULL with a message. */
struct rdzv_keep;
struct rdzv_keep *rdzv_keep_start(const char *endpoint, int64_t lease,
				  char *err, size_t errsz);
int rdzv_keep_fd(const struct rdzv_keep *k);
/* When rdzv_keep_fd is readable: renews the lease (within 1 s; a failure
 * is left to the next one, the job goes on). */
void rdzv_keep_tick(struct rdzv_keep *k);
void rdzv_keep_stop(struct rdzv_keep *k);

#endif
