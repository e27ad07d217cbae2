/*
 * mux.c - the output multiplexer: every rank's stdout and stderr, read from
 * non-blocking pipes, written to distrun's stdout and stderr as whole lines.
 *
 * Like git's run_processes_parallel(), each rank keeps one line buffer per
 * stream, holding only the partial line at the end of the last read; the
 * complete lines of a read go straight from the read buffer into one
 * output buffer per destination, each with its label ("[r] ", padded to the
 * width of the largest rank so columns line up), and the output buffer is
 * written with one write() when full or at the end of a poll round.
 *
 * Writes never block: distrun's stdout and stderr are opened again for
 * ourselves with O_NONBLOCK (pipes, terminals; a socket gets
 * MSG_DONTWAIT; files never wait anyway), and what the reader does not
 * take yet stays pending here.  The job loop polls for POLLOUT while bytes
 * are pending and stops reading the ranks while OBUF_SIZE are (so the
 * ranks wait for a slow reader, as with any filter), and it alone decides
 * when to give the output up (mux_give_up).  So nothing here calls back
 * into the job loop.  Lines
 * are found with memchr; with --raw and no timestamps a whole read's
 * complete lines are copied at once.  A partial last line is ended with a
 * newline at EOF so it cannot run into another rank's line.  A line longer
 * than LINE_CAP is cut there (so memory stays bounded whatever a rank
 * prints).  --output-dir files get each rank's bytes exactly as read.
 *
 * A partial line that does not grow for PARTIAL_WAIT (a prompt: pdb's
 * "(Pdb) ", input("x? ")) is shown without its newline, and the destination
 * remembers that rank's line is open: the rest of the line, when it comes,
 * follows it without a label, so it reads as one line; any other output
 * first ends the open line with a newline (and the rest then comes on a
 * line of its own, labelled again).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "launcher.h"

#define RBUF_SIZE (256 * 1024)
#define OBUF_SIZE (256 * 1024)
#define LINE_CAP (8 * 1024 * 1024)
#define LABEL_MAX 32

/* How a destination is written: see dest_open(). */
enum wmode {
	W_BLOCK,                    /* a file: writes do not wait */
	W_NONBLOCK,                 /* our own O_NONBLOCK open of it */
	W_SEND,                     /* a socket: send(MSG_DONTWAIT) */
	W_POLL,                     /* poll, then at most PIPE_BUF bytes */
};

struct dest {
	int fd;                     /* 1 or 2 */
	int wfd;                    /* what we write: fd, or our own open */
	enum wmode mode;
	bool broken;                /* EPIPE seen: drop further output */
	char *buf;                  /* pending bytes: [off, len) */
	size_t off, len, cap;
	char *labels;               /* LABEL_MAX bytes per rank */
	uint8_t *label_len;
	int open_rank;              /* whose partial line ends it, or -1 */
};

static struct {
	struct dest dest[2];        /* distrun's stdout, stderr */
	char *rbuf;
	bool labels;
	bool timestamps;
	bool any_shown;
	int npartial;               /* lines with bytes not shown yet */
} mux;

static const int palette[] = { 32, 33, 34, 35, 36, 31, 92, 93, 94, 95, 96 };
#define N_COLORS (sizeof(palette) / sizeof(palette[0]))

static bool use_color(const struct opts *o, int fd)
{
	const char *nc = getenv("NO_COLOR");

	if (o->color >= 0)
		return o->color;
	return isatty(fd) && !(nc && *nc);
}

static int make_labels(struct job *job, struct dest *d)
{
	int n = job->o->nranks, width = 1, off = job->rank_offset;
	bool color = use_color(job->o, d->fd);

	/* Labels are global ranks, as wide as the job's largest. */
	for (int m = job_world_size(job) - 1; m >= 10; m /= 10)
		width++;
	d->labels = malloc((size_t)n * LABEL_MAX);
	d->label_len = malloc(n);
	if (!d->labels || !d->label_len)
		return -1;
	for (int r = 0; r < n; r++) {
		char *l = d->labels + (size_t)r * LABEL_MAX;
		int len;

		if (color)
			len = snprintf(l, LABEL_MAX, "\033[%dm[%*d]\033[0m ",
				       palette[(off + r) % N_COLORS], width,
				       off + r);
		else
			len = snprintf(l, LABEL_MAX, "[%*d] ", width, off + r);
		d->label_len[r] = (uint8_t)len;
	}
	return 0;
}

/* The --output-dir directory, opened for openat(): -1 after a message
 * when another user could plant files in it.  A directory another user
 * can write (its owner, neither us nor root; or its group or everyone
 * having write access) is refused, unless it is ours and sticky (/tmp's
 * rule: nobody else can then remove or rename what we make there). */
static int open_output_dir(const char *dir)
{
	struct stat st;
	uid_t me = geteuid();
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool others;

	if (dfd < 0 || fstat(dfd, &st)) {
		fprintf(stderr, "distrun: --output-dir %s: %s\n", dir,
			strerror(errno));
		goto fail;
	}
	others = (st.st_uid != me && st.st_uid != 0) ||
		 (st.st_mode & (S_IWGRP | S_IWOTH));
	if (others && !(st.st_uid == me && (st.st_mode & S_ISVTX))) {
		if (st.st_uid != me)
			fprintf(stderr, "distrun: --output-dir %s belongs to "
				"uid %lu, who could plant links in it: use a "
				"directory of your own\n", dir,
				(unsigned long)st.st_uid);
		else
			fprintf(stderr, "distrun: --output-dir %s can be "
				"written by other users (mode %04o): remove "
				"their write access, or make it sticky "
				"(chmod +t)\n", dir,
				(unsigned)(st.st_mode & 07777));
		goto fail;
	}
	return dfd;
fail:
	if (dfd >= 0)
		close(dfd);
	return -1;
}

/* A file of our own in dfd: whatever is at name (a link someone planted,
 * a file of an earlier run) is removed, and the file made anew with
 * O_EXCL, so that no write ever goes through a link or into a file made
 * by someone else. */
static int open_output_file(int dfd, const char *name)
{
	int fd;

	for (int tries = 0; tries < 8; tries++) {
		if (unlinkat(dfd, name, 0) && errno != ENOENT)
			return -1;
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL |
			    O_NOFOLLOW | O_CLOEXEC, 0666);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1;   /* EEXIST: someone keeps making it again */
}

static int open_files(struct job *job)
{
	const char *dir = job->o->output_dir;
	static const char *const ext[2] = { "stdout", "stderr" };
	int dfd;

	/* The directory was made by options.c. */
	dfd = open_output_dir(dir);
	if (dfd < 0)
		return -1;
	for (int r = 0; r < job->o->nranks; r++)
		for (int s = 0; s < 2; s++) {
			char name[64];

			snprintf(name, sizeof(name), "rank.%d.%s",
				 job->rank_offset + r, ext[s]);
			job->ranks[r].file_fd[s] = open_output_file(dfd, name);
			if (job->ranks[r].file_fd[s] < 0) {
				fprintf(stderr, "distrun: %s/%s: %s\n", dir,
					name, strerror(errno));
				close(dfd);
				return -1;
			}
		}
	close(dfd);
	return 0;
}

/* torchrun's layout (torch.distributed.elastic, 1.13): LOGDIR/ID_XXXXXXXX
 * made once per job (ID: --rdzv-id, else the run id; LOGDIR: --log-dir,
 * else a new $TMPDIR/torchelastic_XXXXXXXX), then attempt_K/ (K: the
 * restart) with a directory per local rank, holding stdout.log and
 * stderr.log for the streams redirected or teed. */
int mux_open_logs(struct job *job)
{
	const struct opts *o = job->o;
	const char *tmp = getenv("TMPDIR");
	char path[PATH_MAX + 128];
	bool any = false;

	for (int r = 0; r < o->nranks; r++)
		any |= (o->redirects && o->redirects[r]) ||
		       (o->tee && o->tee[r]);
	if (!o->log_dir && !any)
		return 0;
	if (!job->torch_logs) {
		char base[PATH_MAX + 64];

		if (o->log_dir) {
			snprintf(base, sizeof(base), "%s", o->log_dir);
		} else {
			snprintf(path, sizeof(path), "%s/torchelastic_XXXXXXXX",
				 tmp && *tmp ? tmp : "/tmp");
			if (!mkdtemp(path))
				goto fail_path;
			snprintf(base, sizeof(base), "%.*s", PATH_MAX, path);
		}
		snprintf(path, sizeof(path), "%.*s/%s_XXXXXXXX", PATH_MAX, base,
			 o->rdzv_id ? o->rdzv_id : job->run_id);
		if (!mkdtemp(path) || !(job->torch_logs = strdup(path)))
			goto fail_path;
		if (!o->log_dir)
			fprintf(stderr, "distrun: log files in %s\n", path);
	}
	snprintf(path, sizeof(path), "%s/attempt_%d", job->torch_logs,
		 job->restarts);
	if (mkdir(path, 0777) && errno != EEXIST)
		goto fail_path;
	for (int r = 0; r < o->nranks; r++) {
		int mask = (o->redirects ? o->redirects[r] : 0) |
			   (o->tee ? o->tee[r] : 0);

		snprintf(path, sizeof(path), "%s/attempt_%d/%d",
			 job->torch_logs, job->restarts, r);
		if (mkdir(path, 0777) && errno != EEXIST)
			goto fail_path;
		for (int s = 0; s < 2; s++) {
			if (job->ranks[r].file_fd[s] >= 0)
				close(job->ranks[r].file_fd[s]);
			job->ranks[r].file_fd[s] = -1;
			if (!(mask & (1 << s)))
				continue;
			snprintf(path, sizeof(path), "%s/attempt_%d/%d/%s.log",
				 job->torch_logs, job->restarts, r,
				 s ? "stderr" : "stdout");
			job->ranks[r].file_fd[s] = open(path, O_WRONLY |
				O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
			if (job->ranks[r].file_fd[s] < 0)
				goto fail_path;
		}
	}
	return 0;
fail_path:
	fprintf(stderr, "distrun: --log-dir: %s: %s\n", path, strerror(errno));
	return -1;
}

/* How a destination is written without ever blocking the job loop. */
static int dest_open(struct dest *d)
{
	struct stat st;
	char path[64];
	int fl;

	d->wfd = d->fd;
	d->mode = W_BLOCK;
	if (fstat(d->fd, &st))
		return 0;   /* written to as it is; errors show up there */
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
		return 0;   /* never waits for a reader */
	if (S_ISSOCK(st.st_mode)) {
		d->mode = W_SEND;
		return 0;
	}
	fl = fcntl(d->fd, F_GETFL);
	if (fl >= 0 && (fl & O_NONBLOCK)) {
		d->mode = W_NONBLOCK;
		return 0;
	}
	/* A pipe or a terminal shared with our parent: O_NONBLOCK on it
	 * would be seen by every other user of that open file (the shell),
	 * so we open the same pipe or terminal again for ourselves. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", d->fd);
	d->wfd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (d->wfd >= 0) {
		d->mode = W_NONBLOCK;
		return 0;
	}
	/* No /proc: write a pipe's atomic size only when poll says there
	 * is room. */
	d->wfd = d->fd;
	d->mode = W_POLL;
	return 0;
}

int mux_init(struct job *job)
{
	const struct opts *o = job->o;

	mux.labels = !o->raw;
	mux.timestamps = o->timestamps;
	for (int r = 0; r < o->nranks; r++)
		mux.any_shown |= o->show[r];
	mux.rbuf = malloc(RBUF_SIZE);
	if (!mux.rbuf)
		goto fail;
	for (int s = 0; s < 2; s++) {
		struct dest *d = &mux.dest[s];

		d->fd = s + 1;
		d->open_rank = -1;
		/* d->buf comes with the first bytes to keep (dest_reserve): a
		 * job that prints nothing maps no buffer. */
		if (dest_open(d) || (mux.labels && make_labels(job, d)))
			goto fail;
	}
	for (int r = 0; r < o->nranks; r++)
		job->ranks[r].file_fd[0] = job->ranks[r].file_fd[1] = -1;
	if (o->output_dir && open_files(job))
		return -1;
	if (mux_open_logs(job))
		return -1;
	return 0;
fail:
	perror("distrun");
	return -1;
}

static void dest_broken(struct job *job, struct dest *d, int err)
{
	/* EPIPE: nobody reads any more, which stops the job as SIGPIPE
	 * would.  Other errors (a full disk) are told once; the job goes on
	 * without this output. */
	d->broken = true;
	d->off = d->len = 0;
	if (err == EPIPE)
		job->output_broken = true;
	else
		fprintf(stderr, "distrun: writing the ranks' output to fd %d: "
			"%s; dropping it\n", d->fd, strerror(err));
}

/* Writes as much of iov as d takes now, without waiting (W_BLOCK: a
 * file, all of it).  Returns the bytes written; 0 when d is full or
 * broken. */
static size_t dest_writev_some(struct job *job, struct dest *d,
			       struct iovec *iov, int cnt)
{
	size_t done = 0;

	while (cnt > 0 && !d->broken) {
		ssize_t n;

		if (d->mode == W_POLL) {
			struct pollfd p = { .fd = d->wfd, .events = POLLOUT };
			struct iovec one = { iov->iov_base, iov->iov_len };

			if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLOUT))
				break;
			if (one.iov_len > PIPE_BUF)
				one.iov_len = PIPE_BUF;
			n = writev(d->wfd, &one, 1);
		} else if (d->mode == W_SEND) {
			struct msghdr m = { .msg_iov = iov,
					    .msg_iovlen = (size_t)cnt };

			n = sendmsg(d->wfd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		} else {
			n = writev(d->wfd, iov, cnt);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			dest_broken(job, d, errno);
			break;
		}
		done += n;
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= n;
		}
	}
	return done;
}

/* Makes room for need more bytes at the end of d's pending bytes. */
static int dest_reserve(struct dest *d, size_t need)
{
	size_t cap = d->cap ? d->cap : OBUF_SIZE;
	char *b;

	if (d->off && d->len + need > d->cap) {
		memmove(d->buf, d->buf + d->off, d->len - d->off);
		d->len -= d->off;
		d->off = 0;
	}
	if (d->len + need <= d->cap)
		return 0;
	while (cap < d->len + need)
		cap *= 2;
	b = realloc(d->buf, cap);
	if (!b)
		return -1;
	d->buf = b;
	d->cap = cap;
	return 0;
}

static void dest_flush(struct job *job, struct dest *d)
{
	if (d->len > d->off) {
		struct iovec iov = { d->buf + d->off, d->len - d->off };

		d->off += dest_writev_some(job, d, &iov, 1);
	}
	if (d->off == d->len)
		d->off = d->len = 0;
}

void mux_flush(struct job *job)
{
	dest_flush(job, &mux.dest[0]);
	dest_flush(job, &mux.dest[1]);
}

int mux_pending_fd(int s)
{
	const struct dest *d = &mux.dest[s];

	return !d->broken && d->len > d->off ? d->wfd : -1;
}

bool mux_full(void)
{
	for (int s = 0; s < 2; s++)
		if (!mux.dest[s].broken &&
		    mux.dest[s].len - mux.dest[s].off >= OBUF_SIZE)
			return true;
	return false;
}

void mux_give_up(struct job *job)
{
	(void)job;
	for (int s = 0; s < 2; s++) {
		struct dest *d = &mux.dest[s];

		if (d->broken || d->len == d->off)
			continue;
		fprintf(stderr, "distrun: nobody reads fd %d; dropping the "
			"output to end the job\n", d->fd);
		d->broken = true;
		d->off = d->len = 0;
	}
}

/* Appends iov to d's pending bytes, after writing what d takes at once
 * when nothing is pending before it (large pieces skip the copy). */
static void dest_put(struct job *job, struct dest *d, struct iovec *iov,
		     int cnt, bool direct)
{
	struct iovec copy[4];
	size_t skip = 0;

	if (direct && d->len == d->off) {
		memcpy(copy, iov, cnt * sizeof(*iov));
		skip = dest_writev_some(job, d, copy, cnt);
	}
	for (int i = 0; i < cnt && !d->broken; i++) {
		const char *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		p += skip;
		len -= skip;
		skip = 0;
		if (dest_reserve(d, len)) {
			/* Out of memory: this piece is lost, said once. */
			dest_broken(job, d, ENOMEM);
			return;
		}
		memcpy(d->buf + d->len, p, len);
		d->len += len;
	}
}

/* Bytes of rank r to d: label is false for the rest of a line whose
 * start is on the console already (no label, no timestamp). */
static void emit_as(struct job *job, struct dest *d, int r, const char *data,
		    size_t len, bool add_nl, bool label)
{
	struct iovec iov[5];
	char ts[32];
	int cnt = 0;
	size_t need;

	if (d->broken)
		return;
	if (d->open_rank >= 0 && (label || d->open_rank != r))
		iov[cnt++] = (struct iovec){ "\n", 1 };
	d->open_rank = -1;
	if (!label)
		;
	else if (mux.labels)
		iov[cnt++] = (struct iovec){ d->labels + (size_t)r * LABEL_MAX,
					     d->label_len[r] };
	if (label && mux.timestamps) {
		int n = snprintf(ts, sizeof(ts), "+%.3f ",
				 now_mono() - job->t0);
		iov[cnt++] = (struct iovec){ ts, (size_t)n };
	}
	iov[cnt++] = (struct iovec){ (void *)data, len };
	if (add_nl)
		iov[cnt++] = (struct iovec){ "\n", 1 };
	need = 0;
	for (int i = 0; i < cnt; i++)
		need += iov[i].iov_len;
	/* Large pieces (raw runs of lines, long lines) go out directly,
	 * saving a copy, as far as the destination takes them. */
	if (d->len + need > OBUF_SIZE || need >= OBUF_SIZE / 4)
		dest_flush(job, d);
	dest_put(job, d, iov, cnt, need >= OBUF_SIZE / 4);
}

/* One line (or, in raw mode, a run of whole lines) of rank r to d. */
static void emit(struct job *job, struct dest *d, int r, const char *data,
		 size_t len, bool add_nl)
{
	emit_as(job, d, r, data, len, add_nl, true);
}

/* The end of rank r's partial line lb: what is not shown yet, after the
 * part that is (no label when it still ends the console's line). */
static void emit_rest(struct job *job, struct dest *d, int r,
		      struct linebuf *lb, bool add_nl)
{
	bool cont = lb->shown && d->open_rank == r;

	if (lb->shown && !cont) {
		/* Another rank's output came between: the rest on its own
		 * line. */
		emit_as(job, d, r, lb->buf + lb->shown, lb->len - lb->shown,
			add_nl, true);
	} else {
		emit_as(job, d, r, lb->buf + lb->shown, lb->len - lb->shown,
			add_nl, !cont);
	}
	if (lb->pending)
		mux.npartial--;
	lb->pending = false;
	lb->shown = 0;
}

/* The hot path: whole lines [p, end) of rank r, each after its label,
 * copied straight into the output buffer. */
static void emit_labelled(struct job *job, struct dest *d, int r,
			  const char *p, const char *end)
{
	const char *label = d->labels + (size_t)r * LABEL_MAX;
	size_t llen = d->label_len[r];

	if (d->open_rank >= 0) {
		/* End the partial line another rank left open. */
		emit_as(job, d, r, "", 0, false, false);
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', end - p);
		size_t len = nl + 1 - p;

		if (d->len + llen + len > d->cap) {
			emit(job, d, r, p, len, false);
		} else {
			memcpy(d->buf + d->len, label, llen);
			memcpy(d->buf + d->len + llen, p, len);
			d->len += llen + len;
		}
		p = nl + 1;
	}
}

static int line_append(struct linebuf *lb, const char *p, size_t n)
{
	if (lb->len + n > lb->cap) {
		size_t cap = lb->cap ? lb->cap : 256;
		char *b;

		while (cap < lb->len + n)
			cap *= 2;
		b = realloc(lb->buf, cap);
		if (!b)
			return -1;
		lb->buf = b;
		lb->cap = cap;
	}
	memcpy(lb->buf + lb->len, p, n);
	lb->len += n;
	return 0;
}

/* Splits a chunk of rank r's stream s into lines for the console. */
static void split_lines(struct job *job, int r, int s, const char *p,
			size_t n)
{
	struct linebuf *lb = &job->ranks[r].line[s];
	struct dest *d = &mux.dest[s];
	const char *end = p + n, *nl, *last;

	/* First complete the partial line, cutting it at LINE_CAP. */
	while (lb->len && p < end) {
		size_t take;
		bool cut = false;

		nl = memchr(p, '\n', end - p);
		take = nl ? (size_t)(nl + 1 - p) : (size_t)(end - p);
		if (lb->len + take > LINE_CAP) {
			take = LINE_CAP - lb->len;
			cut = true;
		}
		if (line_append(lb, p, take)) {
			/* Out of memory: show what we have, as it comes. */
			emit_rest(job, d, r, lb, true);
			lb->len = 0;
			emit(job, d, r, p, take, !nl || cut);
		} else if (cut || (nl && take == (size_t)(nl + 1 - p))) {
			emit_rest(job, d, r, lb, cut);
			lb->len = 0;
		}
		p += take;
	}
	if (!p || p >= end)   /* (!p: for gcc -fsanitize's nonnull check) */
		return;
	last = memrchr(p, '\n', end - p);
	if (last) {
		if (!mux.labels && !mux.timestamps) {
			emit(job, d, r, p, last + 1 - p, false);
		} else if (!mux.timestamps) {
			emit_labelled(job, d, r, p, last + 1);
		} else {
			while (p <= last) {
				nl = memchr(p, '\n', last + 1 - p);
				emit(job, d, r, p, nl + 1 - p, false);
				p = nl + 1;
			}
		}
		p = last + 1;
	}
	/* The tail (shorter than a read, so than LINE_CAP) waits for more:
	 * shown after PARTIAL_WAIT of quiet (mux_show_partials). */
	if (p < end && line_append(lb, p, end - p))
		emit(job, d, r, p, end - p, true);
}

/* After a read: a partial line that grew waits PARTIAL_WAIT from now. */
static void partial_note(struct linebuf *lb)
{
	if (lb->len <= lb->shown)
		return;
	if (!lb->pending)
		mux.npartial++;
	lb->pending = true;
	lb->since = now_mono();
}

int mux_read(struct job *job, int r, int s)
{
	struct rank *rk = &job->ranks[r];
	int fd = s ? rk->err_fd : rk->out_fd;
	ssize_t n;

	do
		n = read(fd, mux.rbuf, RBUF_SIZE);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? 1 : -1;
	if (n == 0)
		return 0;
	/* A full pipe (the default 64 KiB): a chatty rank, whose stdout
	 * pipe grows (spawn_all).  A help, not a need: F_SETPIPE_SZ may be
	 * refused above /proc/sys/fs/pipe-max-size. */
	if (!s && n >= 64 * 1024 && !rk->out_grown && job->pipe_size) {
		rk->out_grown = true;
		if (fcntl(fd, F_SETPIPE_SZ, job->pipe_size) < 0)
			job->pipe_size = 0;
	}
	if (rk->file_fd[s] >= 0) {
		const char *p = mux.rbuf;
		size_t left = n;

		while (left > 0) {
			ssize_t w = write(rk->file_fd[s], p, left);

			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				/* The file is torn from here: said now and
				 * again at the end (mux_close_files), where
				 * it fails the job. */
				rk->file_errno[s] = errno;
				fprintf(stderr, "distrun: rank %d: writing "
					"its %s file: %s\n", r,
					s ? "stderr" : "stdout",
					strerror(errno));
				close(rk->file_fd[s]);
				rk->file_fd[s] = -1;
				break;
			}
			p += w;
			left -= w;
		}
	}
	if (s)
		report_tail_add(rk, mux.rbuf, n);
	if (job->o->show[r] && opts_console(job->o, r, s)) {
		split_lines(job, r, s, mux.rbuf, n);
		partial_note(&rk->line[s]);
	}
	diag_output(job, r, s, mux.rbuf, n);
	return 1;
}

void mux_finish(struct job *job, int r, int s)
{
	struct linebuf *lb = &job->ranks[r].line[s];

	if (lb->len)
		emit_rest(job, &mux.dest[s], r, lb, true);
	free(lb->buf);
	*lb = (struct linebuf){ 0 };
}

double mux_partial_deadline(struct job *job)
{
	double when = -1;

	if (!mux.npartial)
		return -1;
	for (int r = 0; r < job->o->nranks; r++)
		for (int s = 0; s < 2; s++) {
			const struct linebuf *lb = &job->ranks[r].line[s];

			if (lb->pending &&
			    (when < 0 || lb->since + PARTIAL_WAIT < when))
				when = lb->since + PARTIAL_WAIT;
		}
	return when;
}

void mux_show_partials(struct job *job)
{
	double t;

	if (!mux.npartial)
		return;
	t = now_mono();
	for (int r = 0; r < job->o->nranks; r++)
		for (int s = 0; s < 2; s++) {
			struct linebuf *lb = &job->ranks[r].line[s];
			struct dest *d = &mux.dest[s];

			if (!lb->pending || t < lb->since + PARTIAL_WAIT)
				continue;
			emit_as(job, d, r, lb->buf + lb->shown,
				lb->len - lb->shown, false,
				!(lb->shown && d->open_rank == r));
			lb->shown = lb->len;
			lb->pending = false;
			d->open_rank = r;
			mux.npartial--;
		}
}

void mux_drain(struct job *job, double seconds)
{
	double until = now_mono() + seconds;

	mux_flush(job);
	for (int s = 0; s < 2; s++)
		while (mux_pending_fd(s) >= 0 && now_mono() < until) {
			struct pollfd p = { mux_pending_fd(s), POLLOUT, 0 };

			poll(&p, 1, 100);
			dest_flush(job, &mux.dest[s]);
		}
}

int mux_close_files(struct job *job)
{
	int bad = 0;

	for (int r = 0; job->ranks && r < job->o->nranks; r++)
		for (int s = 0; s < 2; s++) {
			struct rank *rk = &job->ranks[r];

			if (rk->file_fd[s] >= 0 && close(rk->file_fd[s]) &&
			    !rk->file_errno[s])
				rk->file_errno[s] = errno;
			rk->file_fd[s] = -1;
			if (!rk->file_errno[s])
				continue;
			bad++;
			fprintf(stderr, "distrun: rank %d's %s file is "
				"incomplete: %s\n", job->rank_offset + r,
				s ? "stderr" : "stdout",
				strerror(rk->file_errno[s]));
		}
	return bad;
}

void mux_release(struct job *job)
{
	mux_drain(job, 2.0);
	mux_give_up(job);
	for (int s = 0; s < 2; s++) {
		if (mux.dest[s].wfd != mux.dest[s].fd && mux.dest[s].wfd >= 0)
			close(mux.dest[s].wfd);
		free(mux.dest[s].buf);
		free(mux.dest[s].labels);
		free(mux.dest[s].label_len);
	}
	free(mux.rbuf);
	if (job->ranks)
		for (int r = 0; r < job->o->nranks; r++)
			for (int s = 0; s < 2; s++) {
				free(job->ranks[r].line[s].buf);
				if (job->ranks[r].file_fd[s] >= 0)
					close(job->ranks[r].file_fd[s]);
			}
	free(job->torch_logs);
	job->torch_logs = NULL;
	memset(&mux, 0, sizeof(mux));
}
