/*
 * preload_broker.c - the broker of a sweep or `distrun test` (preload.h):
 * one warm interpreter per distinct (interpreter, options, modules,
 * working directory, environment) for all the child distruns of the run.
 *
 * The parent makes a SOCK_SEQPACKET pair and leaves one end open across
 * exec for its children (DISTRUN_PRELOAD_BROKER names it; a child distrun
 * takes it out of its environment and marks it close-on-exec before any
 * rank starts).  A child sends one message: a byte (the argc of the
 * server's command line), the spec (preload.c: path, argv, cwd, the
 * environment without the per-job variables), and one end of a new
 * socket pair.  The parent starts a server for a spec it has not seen
 * ("door" mode: new clients come as SCM_RIGHTS over the door socket) and
 * passes the child's socket on; the child then talks to the server as it
 * would to its own.  A request that cannot be served is dropped: the
 * child sees EOF and starts its ranks the usual way.  The servers are the
 * parent's children with PR_SET_PDEATHSIG, so they die with it; at the end
 * of the run their doors close and each exits by itself (or is killed,
 * while still an unreaped child, after PRELOAD_EXIT_WAIT).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "preload.h"

struct shared {
	char *key;                 /* spec, as the cases sent it */
	size_t keylen;
	int door;                  /* SOCK_SEQPACKET to the server */
	struct child server;
};

static struct {
	int fd;                    /* ours; the children's is in the env */
	int child_fd;
	sigset_t mask;             /* the servers' signal mask */
	struct shared *srv;
	int nsrv;
} broker = { .fd = -1, .child_fd = -1 };

int preload_broker_init(const sigset_t *orig_mask)
{
	int sv[2];
	char val[16];
	int size = 1 << 20;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -1;
	/* The children inherit theirs: no O_CLOEXEC there. */
	if (fcntl(sv[1], F_SETFD, 0)) {
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	/* A request holds an environment: make room for a large one. */
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	snprintf(val, sizeof(val), "%d", sv[1]);
	setenv(PRELOAD_BROKER_ENV, val, 1);
	broker.fd = sv[0];
	broker.child_fd = sv[1];
	broker.mask = *orig_mask;
	return 0;
}

int preload_broker_fd(void)
{
	return broker.fd;
}

static struct shared *broker_server(const char *spec, size_t len, int argc)
{
	struct shared *s, *ns;
	const char *cwd;
	char **env, **argv;
	int sv[2];
	bool started;

	for (int i = 0; i < broker.nsrv; i++)
		if (broker.srv[i].keylen == len &&
		    !memcmp(broker.srv[i].key, spec, len))
			return &broker.srv[i];
	ns = realloc(broker.srv, (broker.nsrv + 1) * sizeof(*ns));
	if (!ns)
		return NULL;
	broker.srv = ns;
	s = &broker.srv[broker.nsrv];
	argv = preload_spec_split(spec, len, argc, "door", &cwd, &env);
	if (!argv)
		return NULL;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		free(argv);
		return NULL;
	}
	preload_server_child(&s->server, argv, env, cwd, sv[1], -1,
			     &broker.mask);
	started = !child_start(&s->server);
	close(sv[1]);
	free(argv);
	s->key = started ? malloc(len) : NULL;
	if (!s->key) {
		close(sv[0]);
		if (started)
			child_finish(&s->server, 0, NULL);
		return NULL;
	}
	memcpy(s->key, spec, len);
	s->keylen = len;
	s->door = sv[0];
	broker.nsrv++;
	return s;
}

void preload_broker_handle(void)
{
	static char buf[1 << 20];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;

	for (;;) {
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = u.b,
				      .msg_controllen = sizeof(u.b) };
		struct cmsghdr *c;
		struct shared *s;
		ssize_t n = recvmsg(broker.fd, &msg, MSG_CMSG_CLOEXEC);
		int fd = -1;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		c = CMSG_FIRSTHDR(&msg);
		if (c && c->cmsg_level == SOL_SOCKET &&
		    c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&fd, CMSG_DATA(c), sizeof(int));
		if (fd < 0)
			continue;
		/* byte 0: the argc of the spec; a malformed one is dropped:
		 * the case then finds EOF and starts its own ranks. */
		s = n > 1 && !(msg.msg_flags & MSG_TRUNC) && buf[n - 1] == 0 ?
		    broker_server(buf + 1, (size_t)n - 1,
				  (unsigned char)buf[0]) : NULL;
		if (s) {
			char byte = 0;
			struct iovec io = { &byte, 1 };
			struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1,
					    .msg_control = u.b,
					    .msg_controllen = sizeof(u.b) };

			c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
			(void)!sendmsg(s->door, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		close(fd);
	}
}

void preload_broker_release(void)
{
	double end = now_mono() + PRELOAD_EXIT_WAIT;

	if (broker.fd < 0)
		return;
	close(broker.fd);
	close(broker.child_fd);
	unsetenv(PRELOAD_BROKER_ENV);
	broker.fd = broker.child_fd = -1;
	for (int i = 0; i < broker.nsrv; i++)
		close(broker.srv[i].door);
	/* Each exits when its door and its last client are closed; one that
	 * is still our unreaped child is safe to kill. */
	for (int i = 0; i < broker.nsrv; i++) {
		struct shared *s = &broker.srv[i];
		int left = (int)((end - now_mono()) * 1000);

		child_finish(&s->server, left > 0 ? left : 0, NULL);
		free(s->key);
	}
	free(broker.srv);
	broker.srv = NULL;
	broker.nsrv = 0;
}
