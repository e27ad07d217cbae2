/*
 * net.h - socket helpers shared by the store and the transport (net.c).
 * Internal: never installed.
 */
#ifndef DRI_NET_H
#define DRI_NET_H

#include "distrun.h"

#define DRI_NET_MAXFD 8 /* addresses one name may need (v4, v6, ...) */

/* Listens on every address host resolves to (NULL or "" = every
 * interface), at port (0: an ephemeral port, the same on every address).
 * If none of them is an address of this host, on every interface.  fds
 * receives the sockets (non-blocking, close-on-exec), *nfds how many.
 * DR_ECONN when the port is taken. */
dr_err dri_net_listen(const char *host, int port, int fds[DRI_NET_MAXFD],
		      int *nfds);
/* The port a socket is bound to, or -1. */
int dri_net_port(int fd);
/* A descriptor to hold in reserve for dri_net_accept (-1 if none). */
int dri_net_reserve(void);

enum {
	DRI_ACCEPT_NONE = -1,    /* nothing to accept now */
	DRI_ACCEPT_DROPPED = -2, /* out of fds: one connection was closed */
	DRI_ACCEPT_PAUSE = -3,   /* out of fds, no reserve: stop watching the
				    listener for a while */
	DRI_ACCEPT_FULL = -4,    /* out of fds, and can_evict: close a
				    connection of yours, then call again */
};
/* What a connection dropped for want of descriptors reads before the
 * close (DRI_ACCEPT_DROPPED): the peer can then say so and stop retrying,
 * instead of taking the close for a server that is not up yet.  Nothing
 * of the handshake starts with these bytes. */
#define DRI_NET_NOFD "DRNOFD\n"
#define DRI_NET_NOFD_LEN 7
/* Accepts one connection (non-blocking, close-on-exec): its fd, or one of
 * the values above. */
int dri_net_accept(int lfd, int *reserve, int can_evict);

#endif /* DRI_NET_H */
