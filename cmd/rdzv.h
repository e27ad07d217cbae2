/*
 * rdzv.h - dynamic rendezvous of a job's nodes through etcd (rdzv.c).
 */
#ifndef DISTRUN_RDZV_H
#define DISTRUN_RDZV_H

#include <stddef.h>

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
};

struct rdzv_result {
	int nnodes, node_rank;
	char master_addr[64];     /* node 0's */
	int master_port;
};

/* Joins the rendezvous: 0 with *res filled, or -1 with a message. */
int rdzv_etcd(const struct rdzv_plan *p, struct rdzv_result *res, char *err,
	      size_t errsz);

#endif
