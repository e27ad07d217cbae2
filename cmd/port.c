/*
 * port.c - choosing MASTER_PORT so that concurrent jobs never share one.
 *
 * The scheme: distrun binds a TCP socket to 0.0.0.0 and the port with
 * SO_REUSEADDR, never listens on it, and keeps it open until the job ends.
 * For port 0 the kernel gives only ports with no socket bound at all, and
 * it skips ports that have an explicit bind when it picks an ephemeral port
 * for connect(); so while this distrun holds the socket, no other distrun
 * (and no outgoing connection) can be handed the same port.  Rank 0's store
 * can still bind and listen on it, because Linux lets a socket with
 * SO_REUSEADDR bind a port whose other owners also set SO_REUSEADDR and are
 * not listening (torch's TCPStore and libdistrun's store both set it).
 *
 * Two jobs given the same --master-port would both get that bind, and
 * their ranks would meet each other's store.  So every distrun also holds
 * a lock named after the port: an abstract Unix socket "\0distrun/port/N".
 * Its namespace is the network namespace, as the port's is; it has no file
 * and goes with the process, however distrun dies.  The second job sees
 * the name taken and stops before it starts anything.  A port that some
 * other program listens on fails the TCP bind, and is refused as well.
 *
 * Merely binding port 0 and closing the socket at once is not enough: the
 * kernel may hand the same port to the next job before rank 0 binds it.
 * Both sockets are SOCK_CLOEXEC, so ranks do not inherit them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "launcher.h"

/* Takes the port's lock.  Returns the socket, or -1 (EADDRINUSE: another
 * distrun has it). */
static int port_lock(int port)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	int fd, n;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	/* sun_path[0] = 0: the abstract namespace. */
	n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
		     "distrun/port/%d", port);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	if (bind(fd, (struct sockaddr *)&sa, len)) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Binds 0.0.0.0:port (0: any) with SO_REUSEADDR; fills *port. */
static int port_bind(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int one = 1, fd, e;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	sa.sin_port = htons((uint16_t)*port);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len))
		goto fail;
	*port = ntohs(sa.sin_port);
	return fd;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

int port_reserve(struct job *job)
{
	int port = job->o->master_port;

	job->port_fd = job->port_lock_fd = -1;
	if (port) {
		job->port_lock_fd = port_lock(port);
		if (job->port_lock_fd < 0 && errno == EADDRINUSE) {
			fprintf(stderr, "distrun: --master-port %d is in use "
				"by another distrun job\n", port);
			return -1;
		}
		/* Without the lock (no Unix sockets?) the bind still
		 * catches a port that is listened on. */
		job->port_fd = port_bind(&port);
		if (job->port_fd < 0) {
			fprintf(stderr, "distrun: --master-port %d: %s%s\n",
				port, strerror(errno), errno == EADDRINUSE ?
				" (another program listens on it)" : "");
			return -1;
		}
		job->master_port = port;
		return 0;
	}
	/* A port another distrun has locked (its --master-port, when
	 * nothing was bound to it yet) is skipped. */
	for (int tries = 0; tries < 64; tries++) {
		int fd;

		port = 0;
		fd = port_bind(&port);
		if (fd < 0)
			break;
		job->port_lock_fd = port_lock(port);
		if (job->port_lock_fd >= 0 || errno != EADDRINUSE) {
			job->port_fd = fd;
			job->master_port = port;
			return 0;
		}
		close(fd);
	}
	fprintf(stderr, "distrun: cannot reserve a MASTER_PORT: %s "
		"(use --master-port)\n", strerror(errno));
	return -1;
}
