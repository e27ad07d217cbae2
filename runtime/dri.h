/*
 * dri.h - libdistrun's internal interface (never installed).
 *
 * The runtime is cut in parts that meet here:
 *   clock.c      the monotonic clock and the one duration parser
 *                (clock.h, shared with the launcher)
 *   error.c      error codes, per-thread last-error message       (dri_fail)
 *   reduce.c     element-wise reduction kernels for every dtype x op
 *   store.c      the rendezvous key-value store (rank 0 hosts it)
 *   transport.c  connections between ranks, framed messages with a header,
 *                matching of receives, the poll loop, timeouts
 *   group.c      process group state, dr_new_group, the ordering of calls,
 *                the progress threads and dr_work handles      (dri_submit)
 *   coll_*.c     the algorithms, written only against this header
 *   cuda_driver.c  the CUDA driver loaded at run time, contexts, pointer
 *                queries (internal header cuda_driver.h; nothing above
 *                cuda_stage.c includes it)
 *   cuda_stage.c device buffers in collectives staged through pinned host
 *                memory, the barrier's device synchronisation
 *
 * Names here are dri_*; nothing in this file is exported from the .so.
 */
#ifndef DRI_H
#define DRI_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "distrun.h"

/* ------------------------------------------------------------ errors */

/* Records a formatted message as this thread's dr_last_error() and returns
 * err, so that `return dri_fail(DR_EINVAL, "count %zu", n);` reads well. */
dr_err dri_fail(dr_err err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Sets this thread's dr_last_error() to msg (a copy), e.g. to hand a work
 * handle's message to the thread that waits on it. */
void dri_set_last_error(const char *msg);

/* -------------------------------------------------------- reductions */

/* inout[i] = inout[i] OP in[i] for i < count.  AVG reduces as SUM (the
 * division is dri_reduce_finish's).  DR_ENOTSUP for a bitwise op on a
 * float dtype, DR_EINVAL for values out of range. */
dr_err dri_reduce(void *inout, const void *in, size_t count, dr_dtype dtype,
		  dr_op op);
/* Checks that op applies to dtype (bitwise ops refuse floats). */
dr_err dri_reduce_check(dr_dtype dtype, dr_op op);
/* After the last dri_reduce of an AVG over n ranks: divides by n once
 * (integers: truncating division as torch's gloo does).  No-op for the
 * other ops. */
void dri_reduce_finish(void *buf, size_t count, dr_dtype dtype, dr_op op, int n);

/* ------------------------------------------------------- collectives */

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

/* The identity of one call, carried in the header of each of its messages
 * and compared by the receiver: a message whose identity differs from the
 * receive's (same group and seq, other coll/dtype/op/root/count, or an
 * unexpected length) fails the receive with DR_EMISMATCH naming both
 * sides. */
typedef struct {
	uint32_t group_id; /* same on every rank: order of creation, world = 0 */
	uint32_t coll;     /* dri_coll */
	uint64_t seq;      /* per-group call number; 0 for p2p */
	uint64_t count;    /* element count of the call as the user gave it */
	int32_t dtype;     /* dr_dtype, -1 if none */
	int32_t op;        /* dr_op, -1 if none */
	int32_t root;      /* world rank of the root, -1 if none */
	int32_t tag;       /* p2p tag; 0 for collectives */
} dri_msg_id;

/* A posted send or receive.  Lives in the caller's memory (stack is fine)
 * until dri_waitall returns. */
typedef struct dri_req {
	struct dri_req *next;   /* transport's queues */
	dri_msg_id id;
	int peer;               /* world rank; DR_ANY_SOURCE for receives */
	int is_send;
	void *buf;
	size_t len, done;       /* bytes */
	int source;             /* receives: who sent it */
	volatile int complete;
	dr_err status;
	void *priv;             /* transport's */
} dri_req;

/* Post a send of len bytes of buf to world rank peer.  Never blocks: the
 * data goes out as the transport progresses (in dri_waitall or on the
 * progress thread).  buf must stay valid until the request completes. */
dr_err dri_isend(dri_req *req, const dri_msg_id *id, int peer,
		 const void *buf, size_t len);
/* Post a receive of exactly len bytes from world rank peer (or
 * DR_ANY_SOURCE for p2p) into buf.  Messages from one peer are matched in
 * order for collectives, in order per (group, tag) for p2p. */
dr_err dri_irecv(dri_req *req, const dri_msg_id *id, int peer, void *buf,
		 size_t len);
/* Progress until every request has completed; returns the first error
 * (DR_EMISMATCH, DR_EPEER, DR_ETIMEDOUT after the group timeout ...).  On
 * error the requests not yet complete are cancelled. */
dr_err dri_waitall(dri_req *reqs, int n);
/* As dri_waitall with its own timeout, and a timeout is not fatal: the
 * requests not complete by then are cancelled (complete stays 0, status
 * DR_ETIMEDOUT) and the group goes on (monitored_barrier).  Other errors
 * abort the group as in dri_waitall. */
dr_err dri_waitall_timeout(dri_req *reqs, int n, int64_t timeout_ms);
/* Conveniences over isend/irecv/waitall. */
dr_err dri_send(const dri_msg_id *id, int peer, const void *buf, size_t len);
dr_err dri_recv(const dri_msg_id *id, int peer, void *buf, size_t len);
dr_err dri_sendrecv(const dri_msg_id *id, int to, const void *sbuf, size_t slen,
		    int from, void *rbuf, size_t rlen);

/* ------------------------------------------------------ groups, ops */

struct dr_group {
	uint32_t id;      /* world = 0, then 1, 2, ... in creation order */
	int size;         /* members */
	int rank;         /* this rank's index, -1 if not a member */
	int *ranks;       /* group index -> world rank */
	uint64_t seq;     /* next call's sequence number */
	void *priv;       /* group.c's (async queue, ...) */
};

/* The world group (valid between init and destroy). */
dr_group *dri_world(void);

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
	dri_msg_id id;      /* group_id and seq are filled by dri_submit */
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

/* Makes a group of the n given world ranks (group index -> world rank),
 * with this rank's index found in it (-1 if not a member).  id must be the
 * same on every rank (subgroup.c agrees on it).  NULL when out of memory
 * (message set). */
dr_group *dri_group_create(uint32_t id, const int *ranks, int n);
/* Waits for the group's outstanding asynchronous calls, stops its
 * progress thread, then frees it.  NULL, the world group and handles
 * group.c does not know are ignored. */
void dri_group_free(dr_group *group);

/* Scratch memory of at least n bytes, kept by the calling thread from one
 * call to the next: fresh pages cost a fault each (a 32 MiB buffer faulted
 * in costs more than sending it, on a busy VM), so a collective that needs
 * scratch every call should not malloc it every call.  Valid until the
 * thread's next dri_scratch_keep or dri_scratch_release; NULL with the
 * message set when out of memory. */
void *dri_scratch_keep(size_t n);
/* Frees the calling thread's kept scratch (the progress thread at exit,
 * the caller at destroy). */
void dri_scratch_release(void);

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

/* Deadline arithmetic: dri_now_ms() (clock.h), and the job's timeout. */
int64_t dri_timeout_ms(void);
/* The timeout the current thread's waits use: op->timeout_ms while
 * dri_submit runs an op that sets one, else dri_timeout_ms(). */
int64_t dri_op_timeout_ms(void);
/* Waits on cv for at most ms milliseconds from now, by CLOCK_MONOTONIC
 * (pthread_cond_clockwait), so that setting the wall clock changes no
 * wait.  Every condition wait of the runtime goes through here. */
void dri_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

/* ------------------------------------------------------------ store */

/* The rendezvous key-value store (store.c).  Rank 0 runs the server on a
 * thread; every rank (rank 0 too) talks to it through a client.  Keys are
 * strings, values bytes.  Every call that waits takes a timeout and fails
 * with DR_ETIMEDOUT naming the key. */
typedef struct dri_store_server dri_store_server;
typedef struct dri_store dri_store;

/* Listens on every address of host (NULL or "" = every interface) at
 * port and serves on a thread until dri_store_server_stop.  Only clients
 * that prove key (auth.h) are served.  DR_ECONN if the port is taken. */
dr_err dri_store_server_start(const char *host, int port,
			      const uint8_t key[32], dri_store_server **out);
void dri_store_server_stop(dri_store_server *srv);
/* The port the server listens on (useful after binding port 0). */
int dri_store_server_port(const dri_store_server *srv);
/* The server's request handling alone, for tests/fuzz/store.c: a server
 * with no thread, no socket and no handshake (NULL when out of memory;
 * free it with dri_store_server_stop).  dri_store_feed appends len bytes
 * to what client id sent after proving the key (the client is made at
 * its first bytes), serves every whole frame and keeps a partial one for
 * the next call; -1 when the server drops the client (a bad frame, a
 * limit), whose state is then gone.  dri_store_take points *out at the
 * reply frames queued for client id since the last take (a parked GET's
 * answer may come from another client's SET) and returns their length;
 * valid until the next dri_store_feed. */
dri_store_server *dri_store_server_local(void);
int dri_store_feed(dri_store_server *srv, unsigned id, const void *in,
		   size_t len);
size_t dri_store_take(dri_store_server *srv, unsigned id,
		      const unsigned char **out);
/* Connects and proves key (as rank), retrying until timeout_ms passes
 * (the server may start later).  DR_EAUTH at once if the server does not
 * have the key. */
dr_err dri_store_connect(const char *host, int port, const uint8_t key[32],
			 int rank, int64_t timeout_ms, dri_store **out);
void dri_store_close(dri_store *st);
/* The client's socket (init uses its local address as the rank's own). */
int dri_store_fd(const dri_store *st);
dr_err dri_store_set(dri_store *st, const char *key, const void *val,
		     size_t len);
/* Waits until key exists, then returns a malloc'ed copy of its value
 * (NUL-terminated for convenience; *len excludes the NUL). */
dr_err dri_store_get(dri_store *st, const char *key, void **val, size_t *len,
		     int64_t timeout_ms);
/* Adds delta to the integer stored at key (0 if absent); *out (may be
 * NULL) receives the new value. */
dr_err dri_store_add(dri_store *st, const char *key, int64_t delta,
		     int64_t *out);
/* The process group's store client (valid between init and destroy). */
dri_store *dri_world_store(void);

/* -------------------------------------------------------- transport */

/* The wire header that starts every message between ranks.  Encoded
 * little-endian in DRI_WIRE_HDR bytes. */
#define DRI_WIRE_MAGIC 0x4e555244u /* "DRUN" */
#define DRI_WIRE_VERSION 1
#define DRI_WIRE_HDR 64
enum { DRI_WIRE_DATA = 0, DRI_WIRE_BYE = 1, DRI_WIRE_ABORT = 2 };
typedef struct {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;     /* DRI_WIRE_* */
	dri_msg_id id;
	uint64_t len;      /* payload bytes that follow */
	int32_t src;       /* sender's world rank */
	int32_t err;       /* DRI_WIRE_ABORT: the dr_err */
} dri_wire_hdr;

void dri_wire_encode(const dri_wire_hdr *h, unsigned char out[DRI_WIRE_HDR]);
/* Decodes and validates magic, version and kind: DR_EPROTO (with a
 * message) for a header that is not one of ours. */
dr_err dri_wire_decode(const unsigned char in[DRI_WIRE_HDR], dri_wire_hdr *h);
/* "all_reduce(count=4, float32, sum)" and so on, into buf. */
void dri_msg_id_describe(const dri_msg_id *id, char *buf, size_t size);
/* The receiver's check of a message (identity got, len bytes, from world
 * rank src) against the receive rank me posted (want, want_len bytes): 0
 * when they agree, else 1 with the DR_EMISMATCH message naming both calls
 * in why (n bytes, NUL-terminated). */
int dri_msg_mismatch(const dri_msg_id *want, size_t want_len,
		     const dri_msg_id *got, uint64_t len, int src, int me,
		     char *why, size_t n);

/* Starts the transport: listens on host (a numeric address, the one the
 * peers will be told), an ephemeral port.  *port receives it. */
dr_err dri_transport_listen(const char *host, int rank, int world_size,
			    int *port);
/* Gives the transport every rank's address ("host:port", from the store)
 * and the job's transport key (auth.h), which every connection proves
 * both ways.  Connections are made lazily. */
dr_err dri_transport_start(char **addrs, const uint8_t key[32]);
/* Sends a goodbye on every connection (peers then know this rank left on
 * purpose), closes everything.  Safe after an abort, and after a listen
 * that was never started. */
/* Sends a goodbye on every connection (peers then know this rank left on
 * purpose), closes everything.  Safe after an abort. */
void dri_transport_stop(void);
/* Fails every pending and later request with err and msg, tells every
 * connected peer, and closes the connections. */
void dri_transport_abort(dr_err err, const char *msg);
/* DR_OK, or the error the transport was aborted with (message set). */
dr_err dri_transport_check(void);
/* Progresses every posted request for up to timeout_ms (used by the
 * progress thread while asynchronous point-to-point requests are out). */
void dri_transport_progress(int64_t timeout_ms);
/* Wakes a thread blocked in the transport's poll (dri_transport_progress,
 * dri_waitall). */
void dri_transport_wake(void);

/* ------------------------------------------------------------- CUDA */

/* The driver itself (cuda_driver.c) is below this header's users, behind
 * cuda_driver.h; what the collectives use of CUDA (cuda_stage.c) is here. */

/* The device a pointer lives on, or -1 for host memory (and always -1
 * without CUDA).  Called by every collective entry point, so it must cost
 * well under a microsecond on host memory where CUDA is absent: no
 * filesystem work per call (a dlopen(RTLD_NOLOAD) searches the disk for a
 * library that is not loaded, which costs more than a whole barrier); it
 * watches the link map (dl_iterate_phdr) instead. */
int dri_cuda_ptr_device(const void *p);
/* Makes op, whose buffers are on op->device, a staged call: its run
 * becomes the staging through pinned host memory around the host
 * algorithm (kept in host_run); its start checks the buffers and records
 * the user's stream at submission (dri_coll_op calls this). */
void dri_cuda_stage_op(dri_op *op);
/* Checks that every buffer op uses on this rank (not a non-root's
 * gather recvbuf or scatter sendbuf) is on op->device: DR_EINVAL naming
 * the buffer and where it is otherwise.  The start of a staged call runs
 * it before the call takes its sequence number, so a rank mixing host and
 * device buffers fails alone and at once. */
dr_err dri_cuda_check_buffers(const dri_op *op);
/* For a barrier with device ids: checks them (DR_ENOCUDA without CUDA,
 * DR_EINVAL out of range; messages start with call) and sets op's start
 * and release so that each device's stream is marked at submission, or
 * with whole_device each device is synchronised whole when it runs. */
dr_err dri_cuda_barrier_op(dri_op *op, const char *call, const int *device_ids,
			   int n, int whole_device);
/* In the barrier's run, before the host barrier: waits for what
 * dri_cuda_barrier_op set up (nothing for an op without it). */
dr_err dri_cuda_barrier_wait(dri_op *op);

#endif /* DRI_H */
