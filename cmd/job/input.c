/*
 * input.c - the launcher's stdin, passed on to the ranks (--stdin).
 *
 * mpirun gives rank 0 its own stdin and /dev/null to the others, srun has
 * --input; distrun does the same with --stdin RANK|all|none, rank 0 by
 * default.  The ranks never get distrun's stdin itself: each chosen rank
 * gets a pipe, and the job loop copies what it reads from fd 0 into those
 * pipes.  So a rank, in its own process group, never reads the terminal
 * (where it would be stopped by SIGTTIN), and a restarted job's ranks read
 * on from where the last ones were.
 *
 * Nothing here waits: fd 0 is read only after poll() said it is readable
 * (one read(), which then returns at once; O_NONBLOCK is not set on fd 0,
 * as that flag belongs to the open file, shared with the shell and the
 * other programs of a pipeline), and the rank pipes are non-blocking.
 * One bounded buffer holds what was read and is not yet written to every
 * chosen rank; while it is full, fd 0 is not read (a rank that reads
 * slowly slows the reading, memory stays bounded).  A rank whose pipe
 * breaks (it exited, or closed its stdin) is dropped, so it does not stall
 * the others, and the write's EPIPE is all distrun sees (SIGPIPE is
 * ignored, main.c).  EOF on fd 0 closes every rank's pipe once it has all
 * the bytes.  The job does not wait for its stdin: it ends when its ranks
 * do, whatever is still unread.
 *
 * Several nodes: the rank is global, and only the node that holds it
 * reads its stdin; with `all`, each node gives its own stdin to its own
 * ranks.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "launcher.h"

/* What is read from fd 0 and not yet written to every chosen rank. */
#define INPUT_BUF (256 * 1024)

struct input {
	bool reading;              /* fd 0 not yet at EOF */
	bool tty;                  /* fd 0 is a terminal */
	int n;                     /* this node's ranks */
	int *fd;                   /* per local rank: pipe's write end, -1 */
	bool *chosen;              /* per local rank: gets the stdin */
	size_t *pos;               /* per local rank: bytes of buf written */
	int *who;                  /* per polled entry: local rank, -1 fd 0 */
	char *buf;
	size_t len;
};

/* True if fd 0 is /dev/null (or nothing can be read from it at all):
 * then the ranks get /dev/null too, as they would with --stdin none. */
static bool stdin_is_null(void)
{
	struct stat a, b;

	if (fstat(0, &a))
		return true;
	return S_ISCHR(a.st_mode) && !stat("/dev/null", &b) &&
	       a.st_rdev == b.st_rdev;
}

int input_setup(struct job *job)
{
	struct opts *o = job->o;
	int world = job_world_size(job), n = o->nranks;
	struct input *in;
	int chosen = 0;

	if (o->stdin_rank >= world) {
		fprintf(stderr, "distrun: --stdin %d: no such rank (the job's "
			"ranks are 0..%d)\nTry 'distrun --help'.\n",
			o->stdin_rank, world - 1);
		return EXIT_USAGE;
	}
	if (o->stdin_rank == STDIN_NONE || stdin_is_null())
		return 0;
	in = calloc(1, sizeof(*in));
	if (!in)
		goto fail;
	job->input = in;
	in->n = n;
	in->fd = malloc((size_t)n * sizeof(*in->fd));
	for (int r = 0; in->fd && r < n; r++)
		in->fd[r] = -1;
	in->chosen = calloc((size_t)n, sizeof(*in->chosen));
	in->pos = calloc((size_t)n, sizeof(*in->pos));
	in->who = malloc(((size_t)n + 1) * sizeof(*in->who));
	in->buf = malloc(INPUT_BUF);
	if (!in->fd || !in->chosen || !in->pos || !in->who || !in->buf)
		goto fail;
	for (int r = 0; r < n; r++) {
		in->chosen[r] = o->stdin_rank == STDIN_ALL ||
				o->stdin_rank == job->rank_offset + r;
		chosen += in->chosen[r];
	}
	if (!chosen) {
		/* Another node holds the rank: its distrun reads its stdin. */
		input_release(job);
		return 0;
	}
	in->reading = true;
	in->tty = isatty(0);
	return 0;
fail:
	perror("distrun: --stdin");
	input_release(job);
	return 1;
}

int input_pipe(struct job *job, int r, int *rfd)
{
	struct input *in = job->input;
	int p[2];

	*rfd = job->devnull;
	if (!in || !in->chosen[r])
		return 0;
	if (in->fd[r] >= 0)
		close(in->fd[r]);   /* the pipe of a rank before a restart */
	in->fd[r] = -1;
	/* Both ends close-on-exec: the rank's dup2 onto fd 0 clears it for
	 * its copy, and no other rank holds a write end, which would keep
	 * the rank from ever seeing EOF. */
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		return -1;
	/* The rank's end blocks, as a program expects of its stdin. */
	if (fcntl(p[0], F_SETFL, 0) < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		errno = e;
		return -1;
	}
	*rfd = p[0];
	in->fd[r] = p[1];
	/* A new rank (after a restart) gets what is still buffered: the
	 * bytes not yet given to every chosen rank. */
	in->pos[r] = 0;
	return 0;
}

/* Closes rank r's pipe: it has read everything (EOF), exited, or closed
 * its end. */
static void drop(struct input *in, int r)
{
	close(in->fd[r]);
	in->fd[r] = -1;
}

/* The oldest byte some open pipe still needs, and the start of buf
 * moved there. */
static void compact(struct input *in)
{
	size_t m = in->len;
	bool any = false;

	for (int r = 0; r < in->n; r++)
		if (in->fd[r] >= 0 && in->pos[r] < m)
			m = in->pos[r];
	for (int r = 0; r < in->n; r++)
		any |= in->fd[r] >= 0;
	/* No pipe open (the chosen ranks exited): keep the bytes for the
	 * ranks of a restart. */
	if (!any || !m)
		return;
	memmove(in->buf, in->buf + m, in->len - m);
	in->len -= m;
	for (int r = 0; r < in->n; r++)
		if (in->fd[r] >= 0)
			in->pos[r] -= m;
}

/* Writes what each open pipe takes now; never waits. */
static void write_ranks(struct input *in)
{
	for (int r = 0; r < in->n; r++) {
		while (in->fd[r] >= 0 && in->pos[r] < in->len) {
			ssize_t w = write(in->fd[r], in->buf + in->pos[r],
					  in->len - in->pos[r]);

			if (w > 0) {
				in->pos[r] += (size_t)w;
				continue;
			}
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno != EAGAIN)
				drop(in, r);    /* EPIPE: it closed its stdin */
			break;
		}
		if (in->fd[r] >= 0 && !in->reading && in->pos[r] == in->len)
			drop(in, r);            /* all of it: now EOF */
	}
	compact(in);
}

static void read_stdin(struct input *in)
{
	ssize_t n = read(0, in->buf + in->len, INPUT_BUF - in->len);

	if (n > 0) {
		in->len += (size_t)n;
		return;
	}
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n < 0)
		fprintf(stderr, "distrun: cannot read stdin: %s; the ranks' "
			"stdin ends here\n", strerror(errno));
	in->reading = false;
}

/* May fd 0 be read now?  Not while the buffer is full, nor for nobody
 * (the chosen ranks exited), nor once the job stops; and not while
 * distrun runs in the background of a terminal: the read would stop it
 * by SIGTTIN (after `fg`, the SIGCONT wakes the loop, and it reads). */
static bool may_read(const struct job *job)
{
	const struct input *in = job->input;
	bool any = false;

	if (!in->reading || in->len == INPUT_BUF || job->stopping)
		return false;
	for (int r = 0; r < in->n; r++)
		any |= in->fd[r] >= 0;
	if (!any)
		return false;
	return !in->tty || tcgetpgrp(0) == getpgrp();
}

int input_pollfds(struct job *job, struct pollfd *pfd, int max)
{
	struct input *in = job->input;
	int k = 0;

	if (!in)
		return 0;
	/* The pipe of a rank that has exited: what it did not read is
	 * lost with it (its left-behind children see EOF). */
	for (int r = 0; r < in->n; r++)
		if (in->fd[r] >= 0 && job->ranks[r].state == RANK_EXITED)
			drop(in, r);
	if (!in->reading)
		write_ranks(in);   /* EOF: close the pipes now drained */
	if (k < max && may_read(job)) {
		in->who[k] = -1;
		pfd[k++] = (struct pollfd){ .fd = 0, .events = POLLIN };
	}
	for (int r = 0; r < in->n && k < max; r++)
		if (in->fd[r] >= 0 && in->pos[r] < in->len) {
			in->who[k] = r;
			pfd[k++] = (struct pollfd){ in->fd[r], POLLOUT, 0 };
		}
	return k;
}

void input_handle(struct job *job, const struct pollfd *pfd, int k)
{
	struct input *in = job->input;
	bool any = false;

	for (int i = 0; i < k; i++) {
		if (!pfd[i].revents)
			continue;
		any = true;
		if (in->who[i] < 0)
			read_stdin(in);
	}
	if (any)
		write_ranks(in);
}

void input_release(struct job *job)
{
	struct input *in = job->input;

	if (!in)
		return;
	for (int r = 0; in->fd && r < in->n; r++)
		if (in->fd[r] >= 0)
			close(in->fd[r]);
	free(in->fd);
	free(in->chosen);
	free(in->pos);
	free(in->who);
	free(in->buf);
	free(in);
	job->input = NULL;
}
