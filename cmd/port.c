/*
 * port.c - choosing MASTER_PORT so that concurrent jobs never share one.
 *
 * The scheme: distrun binds a TCP socket to 0.0.0.0 port 0 with
 * SO_REUSEADDR, never listens on it, and keeps it open until the job ends.
 * The kernel gives port 0 binds only ports with no socket bound at all, and
 * skips ports that have an explicit bind when it picks an ephemeral port for
 * connect(); so while this distrun holds the socket, no other distrun (and
 * no outgoing connection) can be handed the same port.  Rank 0's store can
 * still bind and listen on it, because Linux lets a socket with SO_REUSEADDR
 * bind a port whose other owners also set SO_REUSEADDR and are not
 * listening (torch's TCPStore and libdistrun's store both set it).
 *
 * Merely binding port 0 and closing the socket at once is not enough: the
 * kernel may hand the same port to the next job before rank 0 binds it.
 * The socket is SOCK_CLOEXEC, so ranks do not inherit it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launcher.h"

int port_reserve(struct job *job)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int one = 1;
	int fd;

	job->port_fd = -1;
	if (job->o->master_port) {
		job->master_port = job->o->master_port;
		return 0;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		goto fail;
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	sa.sin_port = 0;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		goto fail;
	if (getsockname(fd, (struct sockaddr *)&sa, &len))
		goto fail;
	job->port_fd = fd;
	job->master_port = ntohs(sa.sin_port);
	return 0;
fail:
	fprintf(stderr, "distrun: cannot reserve a MASTER_PORT: %s "
		"(use --master-port)\n", strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}
