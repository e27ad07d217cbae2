/*
 * transport.h - messages between ranks (transport.c, wait.c, and the
 * rooms below them, links.h): post sends and receives, progress them,
 * abort, learn of a peer's death.  A request names its call (dri_msg_id)
 * and carries the call's deadline; the transport knows nothing of groups
 * or collectives.  TCP between hosts, shared memory (shm.h) between ranks
 * of one host, behind the same calls.
 *
 * Layer 3: above the wire format, the rendezvous (it learns its peers'
 * addresses from the caller) and the segment.
 */
#ifndef DRI_TRANSPORT_H
#define DRI_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

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
	int kind;               /* the frame: DRI_WIRE_DATA, or the
				 * transport's own DRI_WIRE_CALL */
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
 * (DR_EMISMATCH, DR_EPEER, DR_ETIMEDOUT ...).  On error the requests not
 * yet complete are cancelled.  The deadline is the earliest of the
 * requests' ids' (wire.h: the call's), a timeout aborts the group. */
dr_err dri_waitall(dri_req *reqs, int n);
/* As dri_waitall with its own timeout, and a timeout is not fatal: the
 * requests not complete by then are cancelled (complete stays 0, status
 * DR_ETIMEDOUT) and the group goes on (monitored_barrier).  Other errors
 * abort the group as in dri_waitall. */
dr_err dri_waitall_timeout(dri_req *reqs, int n, int64_t timeout_ms);
/* Takes r, not complete yet, from the transport and completes it with
 * st (destroy's end of point-to-point work still out, group.c); a send
 * half on the wire is finished from a copy, as a cancelled one is. */
void dri_req_abandon(dri_req *r, dr_err st);
/* The monitored barrier's monitor gave up on peer (it did not arrive
 * within the timeout): tells it so, best effort and without waiting, with
 * a CALL frame of the barrier's id queued behind what this rank sent it.
 * The peer's receive of the verdict (id, a non-empty receive from this
 * rank) then ends at once as timed out, whether it is posted already or
 * later; a peer that made another call of that seq fails the group with
 * DR_EMISMATCH. */
void dri_give_up(const dri_msg_id *id, int peer);
/* Conveniences over isend/irecv/waitall. */
dr_err dri_send(const dri_msg_id *id, int peer, const void *buf, size_t len);
dr_err dri_recv(const dri_msg_id *id, int peer, void *buf, size_t len);
dr_err dri_sendrecv(const dri_msg_id *id, int to, const void *sbuf, size_t slen,
		    int from, void *rbuf, size_t rlen);

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

/* For the collectives through the segment's flags (coll_shm.c): waits,
 * as a receive does (the launcher's abort word, the peers' deaths, the
 * call's deadline, messages of a call that differs from id's, looked at
 * as of t0_ms, when the call started), until waiting_for(arg) returns -1
 * (spinning first for DISTRUN_SPIN_US if spin, else sleeping at once);
 * it returns the world rank still waited for otherwise.  DR_OK or the
 * error, the group then aborted and the message set. */
dr_err dri_transport_flag_wait(const dri_msg_id *id, int (*waiting_for)(void *),
			       void *arg, int64_t t0_ms, int spin);
/* Reads what the rings hold and fails the group with DR_EMISMATCH if a
 * message of a world call at or before id's is there (it names both
 * calls better than the flags can); returns the group's error. */
dr_err dri_transport_stale_check(const dri_msg_id *id);

#endif
