/*
 * nodes_int.h - what the files of the multi-node launcher (cmd/nodes*.c)
 * share, and no other part of distrun: nodes.h is their public face.
 * The rooms, calls going one way: nodes_job.c (the launcher's side) ->
 * nodes.c (the join, the hub and the nodes, failures and the end) ->
 * nodes_wire.c (deadlines, frames, sockets, the key and the secret).
 */
#ifndef DISTRUN_NODES_INT_H
#define DISTRUN_NODES_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "contract.h"
#include "nodes.h"

#define FRAME_MS 5000

/* What the first failure was: a rank's, a lost distrun (both worth a
 * restart under --max-restarts), or a stop (a signal, --timeout). */
enum { FAIL_OTHER, FAIL_RANK, FAIL_LOST };

struct conn;
struct rdzv_keep;

struct nodes {
	bool hub;
	int nnodes, node_rank;
	uint8_t key[DRI_KEY_LEN];
	int hub_fd;             /* spoke: the connection to the hub */
	struct conn *node;      /* hub: per node rank (0 unused) */
	int *nproc;
	/* The first failure anywhere (hub), or the stop we were told of. */
	bool failed;
	int fail_node, fail_rank, fail_status, fail_kind;
	char fail_desc[160];
	int final_status;       /* spoke: from the hub's bye */
	char hub_desc[128];     /* spoke: "the distrun of node 0 (ADDR) ..." */
	bool got_bye;
	struct rdzv_keep *keep; /* etcd's node 0: renews the round's lease */
};

/* nodes_wire.c: the monotonic clock in seconds, and the ms of a deadline
 * left, for poll. */
double nodes_mono(void);
int nodes_ms_left(double deadline);
/* Reads (wr false) or writes exactly n bytes before the deadline. */
int nodes_io_full(int fd, void *p, size_t n, double deadline, bool wr);
/* One frame out (msg is consumed), one in (NULL: none, or a bad one). */
int nodes_send_frame(int fd, json_t *msg);
json_t *nodes_recv_frame(int fd, double deadline);
/* A frame's fields: a string ("" if absent), an int, a status. */
const char *nodes_jstr(json_t *o, const char *k);
int nodes_jint(json_t *o, const char *k, int dflt);
int nodes_jstatus(json_t *o);
void nodes_hex(const uint8_t *p, size_t n, char *out);
int nodes_unhex(const char *s, uint8_t *out, size_t n);
/* The hub's listener; a node's connection to it, retried until the
 * deadline. */
int nodes_hub_listen(const char *addr, int port);
int nodes_try_connect(const char *addr, int port, double deadline);
/* The job's key (and its run id) from the plan; the per-job secret of the
 * ranks from the key and the hub's nonce. */
int nodes_key_for(const struct node_plan *p, uint8_t key[DRI_KEY_LEN],
		  char *run_id, size_t n);
void nodes_derive_secret(const uint8_t key[DRI_KEY_LEN],
			 const uint8_t nonce[16], char out[65]);

#endif
