/*
 * tcp.h - the TCP link (tcp.c): listening, connecting, the handshake,
 * the listener's and the pending connections' share of the loop's poll.
 * Every call is made with transport.c's lock held.  A dr_err returned is
 * the transport's to abort with (the message set); *up, where there is
 * one, receives the peer whose connection came up (its send queue is the
 * caller's to flush), and is left alone otherwise.
 */
#ifndef DRI_TCP_H
#define DRI_TCP_H

#include <poll.h>
#include <stdint.h>

#include "auth.h"
#include "links.h"

/* Listens on host (numeric), an ephemeral port, into *port. */
dr_err dri_tcp_listen(const char *host, int rank, int *port);
int dri_tcp_listening(void);
/* Takes every rank's "host:port" (freed by dri_tcp_stop) and the key;
 * ntcp: how many peers are over TCP (none: stop listening). */
void dri_tcp_start(char **addrs, const uint8_t key[DRI_KEY_LEN], int ntcp);
/* Closes the listener and the pending connections (the peers' sockets
 * are the loop's to close). */
void dri_tcp_abort(void);
/* As dri_tcp_abort, and frees what start took (nranks addresses). */
void dri_tcp_stop(int nranks);
/* Before the sockets close: reads and drops what peer p sent; waits (2 s
 * at most) until every byte written to a TCP peer has reached it,
 * reading meanwhile.  A socket closed with unread input sends a reset,
 * and a reset throws away what our kernel still held for the peer: a
 * peer still waiting for our last message may announce its call (a CALL
 * frame) just as we close, and would lose that message. */
void dri_tcp_drain(struct dri_peer *p);
void dri_tcp_settle(void);

/* Opens a connection to peer i (state P_CONNECTING); the caller wakes a
 * poller blocked meanwhile, which must watch it. */
dr_err dri_tcp_connect(int i);
/* Peer i's socket had an event while its handshake is under way. */
dr_err dri_tcp_handshake(int i, int *up);

/* The loop's poll: entries for the listener and the pending connections
 * (who: DRI_TCP_LISTENER, DRI_TCP_PENDING - k), at most dri_tcp_npoll()
 * of them, added at pfd[n] (returns the new n; *wait_ms shortened to the
 * next handshake deadline); after poll, each such entry's events (all of
 * them, events or none: deadlines pass), then dri_tcp_poll_done (accept:
 * whether to accept new connections, not after an abort). */
#define DRI_TCP_LISTENER (-2)
#define DRI_TCP_PENDING (-3)
int dri_tcp_npoll(void);
int dri_tcp_poll_add(struct pollfd *pfd, int *who, int n, int64_t now,
		     int *wait_ms);
dr_err dri_tcp_poll_event(int who, short re, int fd, int64_t now, int *up);
void dri_tcp_poll_done(int accept);

#endif
