/*
 * links.h - the rooms of the transport and what they share (links.c): one
 * record per peer (struct dri_peer), and the operations of the medium
 * that carries its bytes (struct dri_link_ops: TCP in tcp.c, shared
 * memory in link_shm.c over shm.c).  Only the transport's own files
 * include it; everything here is used with transport.c's lock held.
 *
 * The rooms, bottom first (each calls only those below it):
 *   links.c     the peers, the request helpers;
 *   tcp.c       connections, the HMAC handshake, the TCP link;
 *   link_shm.c  the shared-memory link;
 *   announce.c  the mismatch announcements: the calls this rank made,
 *               the calls peers announced, the monitors that gave up;
 *   match.c     posted receives, the unexpected queue, where a payload goes;
 *   frames.c    the byte stream of frames to and from a peer;
 *   transport.c posting, the loop (poll, the futex), abort and stop;
 *   wait.c      the waits of calls, a step of the loop at a time (loop.h).
 * A room that finds the job must fail returns the error (the message in
 * dr_last_error()) and the loop aborts the transport with it; a room that
 * finds a peer up, or a parked message to read, returns that too.  No
 * room calls back into the loop.
 */
#ifndef DRI_LINKS_H
#define DRI_LINKS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "auth.h"
#include "transport.h"
#include "wire.h"

/* A peer's connection, as the loop sees it. */
enum dri_peer_state {
	P_NONE,       /* no connection yet */
	P_CONNECTING, /* our connect() in progress */
	P_HS_SENT,    /* our HELLO sent, waiting for the challenge */
	P_HS_PROOF,   /* our proof sent, waiting for the ack byte */
	P_WAIT,       /* ours was dropped: the lower rank's is coming */
	P_UP,         /* connected */
	P_GONE,       /* said goodbye, or the transport was closed */
};

/* The bytes to and from one peer.  send and recv return what sendmsg
 * and recv would, with EAGAIN for a full or empty ring (a ring never
 * reports end of file); send with all takes all or nothing, without
 * waiting (frames sent in an abort or a goodbye, which must not be
 * torn).  poll_fd: the descriptor poll() watches for this peer, -1 for
 * none.  start: the state a peer starts in (shared memory is up at
 * once: the segment is the job's own, no handshake). */
struct dri_link_ops {
	const char *name;
	ssize_t (*send)(int peer, const struct iovec *iov, int n, int all);
	ssize_t (*recv)(int peer, void *buf, size_t len);
	int (*poll_fd)(int peer);
	enum dri_peer_state (*start)(int peer);
};
extern const struct dri_link_ops dri_link_tcp, dri_link_shm;

/* A message that arrived before its receive was posted (match.c). */
struct dri_umsg {
	struct dri_umsg *next;
	int src;
	dri_msg_id id;
	size_t len, done, cap;
	unsigned char *data;
};

struct dri_peer {
	const struct dri_link_ops *ops;
	int fd;
	enum dri_peer_state state;
	/* sending: queue of requests, the head's header being written */
	dri_req *sq_head, *sq_tail;
	unsigned char shdr[DRI_WIRE_HDR];
	size_t shdr_done;
	int shdr_ready;
	/* receiving: header, then the payload into rx_dest */
	unsigned char rhdr[DRI_WIRE_HDR];
	size_t rhdr_got;
	int rx_active;
	dri_wire_hdr rx;
	unsigned char *rx_dest; /* NULL: discard */
	size_t rx_done;
	dri_req *rx_req;        /* or */
	struct dri_umsg *rx_msg; /* or neither (discard, abort text) */
	char *abort_text;
	unsigned char *stage;   /* DRI_STAGE_LEN bytes read ahead */
	size_t s_off, s_len;
	int parked;             /* rx holds a large header nobody wants yet:
				 * set through dri_peer_park only */
	/* our DRI_WIRE_CALL frame to it, queued behind our data, and the
	 * call it named last (told: one was sent) */
	dri_req call_req;
	int told;
	uint32_t told_group;
	uint64_t told_seq;
	/* our give-up CALL frame to it, as a monitor (dri_give_up) */
	dri_req gave_req;
	int gave_busy;
	/* handshake as the connecting side (tcp.c) */
	dri_hs hs;
	unsigned char hsbuf[DRI_HS_CHAL];
	size_t hs_got;
	int reconnects;
};

/* The peers of this rank: the one table every room reads.  A peer's
 * record is made when the transport first deals with it (a request to or
 * from it, its connection, or at start for a peer in shared memory), so
 * a rank of a large world pays a pointer for each peer it never talks
 * to, not a record (4096 ranks: 32 KiB a rank instead of 3.2 MiB). */
extern struct dri_links {
	int rank, size;
	struct dri_peer **peer; /* size of them; NULL: never dealt with */
	int nparked;            /* how many of them are parked: the loops
				 * that look for one skip the world */
	/* the medium that reaches peer i (transport.c sets it at start) */
	const struct dri_link_ops *(*link_of)(int i);
} dri_links;

/* Peer i's record, or NULL if the transport never dealt with it (such a
 * peer is P_NONE: nothing queued, nothing parked, no connection). */
#define PEER(i) (dri_links.peer[i])

/* Peer i's record, made on first use (its link chosen, its start
 * state); NULL, with the error set, out of memory. */
struct dri_peer *dri_peer_get(int i);
/* Frees every record (the transport's stop). */
void dri_peers_free(void);
/* Marks p parked (on) or not, keeping dri_links.nparked. */
void dri_peer_park(struct dri_peer *p, int on);

#define DRI_STAGE_LEN 16384

/* Sends that were cancelled half-way keep their remaining bytes in a
 * copy of their own (priv), so the frame on the wire stays whole. */
#define DRI_REQ_OWNED ((void *)1)

void dri_req_init(dri_req *req, const dri_msg_id *id, int peer, int is_send,
		  void *buf, size_t len);
/* Completes r with st (a copy of DRI_REQ_OWNED is freed instead). */
void dri_req_finish(dri_req *r, dr_err st);
/* Shuts down and closes peer p's socket, if it has one. */
void dri_peer_close(struct dri_peer *p);
/* The error of a lost connection to peer i (why: what we saw), and of a
 * read or write on its socket that failed with errno e: DR_EPEER, the
 * message set. */
dr_err dri_peer_lost(int i, const char *why);
dr_err dri_peer_io_error(int i, int e);

#endif
