/*
 * link_shm.c - the shared-memory link (links.h's operations over shm.c):
 * a peer on this host gets the very byte stream a TCP peer would, through
 * its ring in the job's segment.  A full or empty ring reads as EAGAIN;
 * there is no descriptor per peer (a ring write wakes the loop through
 * shm.c's own, dri_shm_poll_fd) and no handshake: the peer is up from the
 * start.
 */
#include <errno.h>

#include "links.h"
#include "shm.h"

static ssize_t shm_send(int peer, const struct iovec *iov, int n, int all)
{
	size_t k = dri_shm_sendv(peer, iov, n, all);

	if (!k) {
		errno = EAGAIN;
		return -1;
	}
	return (ssize_t)k;
}

static ssize_t shm_recv(int peer, void *buf, size_t len)
{
	size_t n = dri_shm_recv(peer, buf, len);

	if (!n) {
		errno = EAGAIN;
		return -1;
	}
	return (ssize_t)n;
}

static int shm_poll_fd(int peer)
{
	(void)peer;
	return -1;
}

static enum dri_peer_state shm_start(int peer)
{
	(void)peer;
	return P_UP;
}

const struct dri_link_ops dri_link_shm = {
	.name = "shm",
	.send = shm_send,
	.recv = shm_recv,
	.poll_fd = shm_poll_fd,
	.start = shm_start,
};
