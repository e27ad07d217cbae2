/*
 * nodes.h - a job over several hosts: one distrun per node, all connected
 * to node 0's distrun (the hub), as torchrun's static rendezvous.
 *
 *   node 0:  distrun --nnodes 2 --node-rank 0 --master-addr H -n 4 ./prog
 *   node 1:  distrun --nnodes 2 --node-rank 1 --master-addr H -n 4 ./prog
 *
 * The hub listens on H:PORT (--master-port, default 29500 as torchrun);
 * every other node connects, proves the job's key (the handshake of
 * runtime/auth.h, both ways, before a byte of anything else) and says how
 * many ranks it runs.  Once every node is in, the hub hands each its first
 * global rank, the world size, the port rank 0's store will use, and a
 * fresh public nonce from which every node derives the same per-job
 * secret for its ranks (nothing secret crosses the wire).  During the job
 * each node tells the hub of its first failure and of its end; the hub
 * tells every node to stop at the first failure anywhere, naming the node
 * and rank, so all exit with that rank's status.  A lost connection stops
 * the job too.
 *
 * Frames after the handshake: a 4-byte big-endian length (at most
 * NODES_FRAME_MAX) and a JSON object.  Everything read is bounded in
 * bytes and time.
 */
#ifndef DISTRUN_NODES_H
#define DISTRUN_NODES_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#define NODES_MAX 4096
#define NODES_NPROC_MAX 4096     /* ranks one node may run */
#define NODES_FRAME_MAX 65536
#define NODES_DEFAULT_PORT 29500
/* What node 0 sends a connection it drops from a full handshake queue
 * (the oldest goes, for the newest), before the close: the joining node
 * then knows to try again, and can say why if it never gets in.  Nothing
 * of the handshake starts with these bytes. */
#define NODES_BUSY "DRBUSY\n"
#define NODES_BUSY_LEN 7

struct nodes;

/* What a node is told once every node has joined. */
struct node_start {
	int nnodes, node_rank;
	int world_size;
	int rank_offset;          /* global rank of this node's local rank 0 */
	int master_port;          /* rank 0's store */
	char run_id[64];
	char secret_hex[65];      /* DISTRUN_SECRET for this node's ranks */
};

struct node_plan {
	int nnodes, node_rank, nproc;
	const char *master_addr;  /* the hub's address, as ranks use it */
	int port;                 /* the hub's port */
	int rank_port;            /* hub: rank 0's store port, reserved */
	const char *run_id;       /* NULL: derived from addr:port */
	double timeout;           /* seconds to wait for every node */
};

/* Joins the job: the hub waits for every node, the others connect
 * (retrying until plan->timeout).  0 and *st filled, or -1 after a
 * message naming what failed (a node that never came, a bad key, ...). */
int nodes_join(struct nodes **out, const struct node_plan *plan,
	       struct node_start *st);

/* The fds the job loop polls (POLLIN), into pfd[0..max): returns the
 * count. */
int nodes_pollfds(struct nodes *nd, struct pollfd *pfd, int max);

/* What nodes_handle found. */
struct node_event {
	enum { NODE_EV_NONE, NODE_EV_STOP, NODE_EV_LOST } kind;
	int node, rank, status;   /* STOP: the failure that stops the job */
	char desc[160];
};

/* Reads what is ready on the node connections (after poll said so) and
 * reports at most one event that concerns the local job.  The hub relays
 * a node's failure to every node itself. */
void nodes_handle(struct nodes *nd, struct node_event *ev);

/* This node's first failure: rank (global), the status distrun exits with
 * and a short description ("exited with status 3 after 0.01s"). */
void nodes_fail(struct nodes *nd, int rank, int status, const char *desc);

/* This node's job has ended with status: tells the hub; the hub waits (up
 * to timeout seconds) until every node has ended, and returns the status
 * of the job as a whole (the first failure's, anywhere). */
int nodes_finish(struct nodes *nd, int status, double timeout);

void nodes_release(struct nodes *nd);

/* The frames' readers on their own, for the fuzz harness
 * (tests/fuzz/nodes.c), which feeds them what a peer could send through
 * socketpairs:
 * - nodes_attach: a node past its join over connections already proved:
 *   the hub's to node k in fds[k] (1 <= k < nnodes), a node's to the hub
 *   in fds[0]; nodes_handle and nodes_finish then read them (and
 *   nodes_release closes them).  NULL when out of memory.
 * - nodes_read_join: the hub reads node's JOIN from fd: 0 with *nproc,
 *   or -1 (not a JOIN of that node, or nproc out of 1..NODES_NPROC_MAX).
 * - nodes_read_start: a node (of nproc ranks) reads the hub's start:
 *   0 with *st's world, offset, port, run id and secret, or -1 after a
 *   message. */
struct nodes *nodes_attach(int nnodes, int node_rank, const int *fds);
int nodes_read_join(int fd, int node, double deadline, int *nproc);
int nodes_read_start(struct nodes *nd, int nproc, double deadline,
		     struct node_start *st);

#endif
