/*
 * net.c - the socket helpers the store and the transport share: listening
 * on exactly the addresses a job needs, and accepting without spinning
 * when the process is out of file descriptors.
 *
 * Listening: a job listens where its peers reach it and nowhere else, so a
 * single-host job (MASTER_ADDR 127.0.0.1, ::1 or localhost) is reachable
 * only from this host.  Every address the host name resolves to is bound
 * (localhost is 127.0.0.1 and ::1; `--master-addr ::1` is IPv6 only).
 *
 * Accepting at EMFILE: the listening socket stays readable while a
 * connection waits in the backlog, so a poll loop that cannot accept it
 * spins.  The caller first closes its oldest connection that has not
 * proved the key yet, if it has one (so strangers cannot lock the job's
 * own ranks out); else we use the one descriptor we keep in reserve: free
 * it, accept the connection, tell the peer why (DRI_NET_NOFD) and close
 * it, and take the reserve back.  Without a reserve the caller stops watching the
 * listener for a while.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "net.h"

int dri_net_reserve(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

int dri_net_accept(int lfd, int *reserve, int can_evict)
{
	int fd;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			return fd;
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno != EMFILE && errno != ENFILE)
			return DRI_ACCEPT_NONE; /* EAGAIN, or try later */
		if (can_evict)
			return DRI_ACCEPT_FULL;
		if (*reserve < 0)
			return DRI_ACCEPT_PAUSE;
		/* (Linux gives EMFILE before it looks at the queue: whether
		 * a connection waits shows only once a descriptor is free.) */
		close(*reserve);
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0) {
			/* A fresh socket's buffer takes these bytes. */
			(void)!send(fd, DRI_NET_NOFD, DRI_NET_NOFD_LEN,
				    MSG_NOSIGNAL | MSG_DONTWAIT);
			close(fd);
		}
		*reserve = dri_net_reserve();
		return fd >= 0 ? DRI_ACCEPT_DROPPED : DRI_ACCEPT_NONE;
	}
}

/* Binds and listens on one address; the fd, or -1 with errno. */
static int listen_one(const struct addrinfo *ai, int v6only)
{
	int fd, one = 1, e;

	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		goto fail;
	if (ai->ai_family == AF_INET6 &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) < 0)
		goto fail;
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
	    listen(fd, SOMAXCONN) == 0)
		return fd;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

static void set_port(struct sockaddr *sa, int port)
{
	if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr,
			       sizeof(struct in6_addr));
	return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
	       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
}

int dri_net_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	return ntohs(ss.ss_family == AF_INET6 ?
		     ((struct sockaddr_in6 *)&ss)->sin6_port :
		     ((struct sockaddr_in *)&ss)->sin_port);
}

dr_err dri_net_listen(const char *host, int port, int fds[DRI_NET_MAXFD],
		      int *nfds)
{
	struct addrinfo hints, *res = NULL, *ai;
	char ps[16];
	int rc, n = 0, naddr = 0, notavail = 0, e = EADDRNOTAVAIL;
	const char *h = host && *host ? host : NULL;

	*nfds = 0;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
again:
	snprintf(ps, sizeof(ps), "%d", port);
	rc = getaddrinfo(h, ps, &hints, &res);
	if (rc)
		return dri_fail(DR_EENV, "address %s: %s", h ? h : "*",
				gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next)
		naddr++;
	for (ai = res; ai && n < DRI_NET_MAXFD; ai = ai->ai_next) {
		int dup = 0;
		/* getaddrinfo may list an address twice (hosts file). */
		for (struct addrinfo *b = res; b != ai; b = b->ai_next)
			dup |= same_addr(b->ai_addr, ai->ai_addr);
		if (dup)
			continue;
		/* Port 0: every address gets the port the first one got. */
		if (n && port == 0)
			set_port(ai->ai_addr, dri_net_port(fds[0]));
		int fd = listen_one(ai, naddr > 1);
		if (fd >= 0) {
			fds[n++] = fd;
			continue;
		}
		e = errno;
		if (e == EADDRNOTAVAIL || e == EAFNOSUPPORT) {
			notavail++;
			continue;
		}
		freeaddrinfo(res);
		goto fail;
	}
	freeaddrinfo(res);
	res = NULL;
	if (!n && h && notavail) {
		/* The name is not an address of this host (NAT, a floating
		 * address): listen everywhere; the handshake still keeps
		 * strangers out. */
		h = NULL;
		naddr = 0;
		goto again;
	}
	if (!n)
		goto fail;
	*nfds = n;
	return DR_OK;
fail:
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return dri_fail(e == EADDRINUSE ? DR_ECONN : DR_ESYS, "cannot listen on "
			"%s port %d: %s", host && *host ? host : "*", port,
			dri_strerror(e));
}
