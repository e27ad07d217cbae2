/*
 * links.c - the table of peers that every room of the transport reads
 * (links.h), and the few helpers on requests and peers they all use.  The
 * bottom of the transport: it calls nothing of the other rooms.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "links.h"

struct dri_links dri_links;

struct dri_peer *dri_peer_get(int i)
{
	struct dri_peer *p = dri_links.peer[i];

	if (p)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p) {
		dri_fail(DR_ENOMEM, "rank %d: out of memory for the record of "
			 "peer %d", dri_links.rank, i);
		return NULL;
	}
	p->fd = -1;
	p->ops = dri_links.link_of(i);
	p->state = p->ops->start(i);
	dri_links.peer[i] = p;
	return p;
}

void dri_peers_free(void)
{
	for (int i = 0; dri_links.peer && i < dri_links.size; i++) {
		if (dri_links.peer[i])
			free(dri_links.peer[i]->stage);
		free(dri_links.peer[i]);
	}
	free(dri_links.peer);
	dri_links.peer = NULL;
	dri_links.nparked = 0;
}

void dri_peer_park(struct dri_peer *p, int on)
{
	on = !!on;
	dri_links.nparked += on - p->parked;
	p->parked = on;
}

void dri_req_init(dri_req *req, const dri_msg_id *id, int peer, int is_send,
		  void *buf, size_t len)
{
	req->next = NULL;
	req->id = *id;
	req->peer = peer;
	req->is_send = is_send;
	req->buf = buf;
	req->len = len;
	req->done = 0;
	req->source = -1;
	req->kind = DRI_WIRE_DATA;
	req->complete = 0;
	req->status = DR_OK;
	req->priv = NULL;
}

void dri_req_finish(dri_req *r, dr_err st)
{
	if (r->priv == DRI_REQ_OWNED) {
		free(r);
		return;
	}
	r->status = st;
	__atomic_store_n(&r->complete, 1, __ATOMIC_RELEASE);
}

void dri_peer_close(struct dri_peer *p)
{
	if (p->fd >= 0) {
		shutdown(p->fd, SHUT_RDWR);
		close(p->fd);
	}
	p->fd = -1;
}

dr_err dri_peer_lost(int i, const char *why)
{
	return dri_fail(DR_EPEER, "rank %d: lost the connection to rank %d "
			"(%s): did it crash or exit without "
			"dr_destroy_process_group?", dri_links.rank, i, why);
}

dr_err dri_peer_io_error(int i, int e)
{
	if (e == EBADF)
		return dri_fail(DR_EPEER, "rank %d: the socket to rank %d (fd "
				"%d) was closed under the transport",
				dri_links.rank, i, PEER(i)->fd);
	return dri_peer_lost(i, dri_strerror(e));
}
