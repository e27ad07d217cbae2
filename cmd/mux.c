/*
 * mux.c - the output multiplexer: every rank's stdout and stderr, read from
 * non-blocking pipes, written to distrun's stdout and stderr as whole lines.
 *
 * Like git's run_processes_parallel(), each rank keeps one line buffer per
 * stream, holding only the partial line at the end of the last read; the
 * complete lines of a read go straight from the read buffer into one
 * output buffer per destination, each with its label ("[r] ", padded to the
 * width of the largest rank so columns line up), and the output buffer is
 * written with one write() when full or at the end of a poll round.  Lines
 * are found with memchr; with --raw and no timestamps a whole read's
 * complete lines are copied at once.  A partial last line is ended with a
 * newline at EOF so it cannot run into another rank's line.  A line longer
 * than LINE_CAP is cut there (so memory stays bounded whatever a rank
 * prints).  --output-dir files get each rank's bytes exactly as read.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "launcher.h"

#define RBUF_SIZE (256 * 1024)
#define OBUF_SIZE (256 * 1024)
#define LINE_CAP (8 * 1024 * 1024)
#define LABEL_MAX 32

struct dest {
	int fd;
	bool broken;                /* EPIPE seen: drop further output */
	char *buf;
	size_t len;
	char *labels;               /* LABEL_MAX bytes per rank */
	uint8_t *label_len;
};

static struct {
	struct dest dest[2];        /* distrun's stdout, stderr */
	char *rbuf;
	bool labels;
	bool timestamps;
	bool any_shown;
	bool writing;               /* inside dest_writev() */
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

static int open_files(struct job *job)
{
	const char *dir = job->o->output_dir;
	static const char *const ext[2] = { "stdout", "stderr" };

	if (mkdir(dir, 0777) && errno != EEXIST) {
		fprintf(stderr, "distrun: --output-dir %s: %s\n", dir,
			strerror(errno));
		return -1;
	}
	for (int r = 0; r < job->o->nranks; r++)
		for (int s = 0; s < 2; s++) {
			char path[4096];

			snprintf(path, sizeof(path), "%s/rank.%d.%s", dir,
				 job->rank_offset + r,
				 ext[s]);
			job->ranks[r].file_fd[s] = open(path, O_WRONLY |
				O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
			if (job->ranks[r].file_fd[s] < 0) {
				fprintf(stderr, "distrun: %s: %s\n", path,
					strerror(errno));
				return -1;
			}
		}
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
		d->buf = malloc(OBUF_SIZE);
		if (!d->buf || (mux.labels && make_labels(job, d)))
			goto fail;
	}
	for (int r = 0; r < o->nranks; r++)
		job->ranks[r].file_fd[0] = job->ranks[r].file_fd[1] = -1;
	if (o->output_dir && open_files(job))
		return -1;
	return 0;
fail:
	perror("distrun");
	return -1;
}

/* Writes all of iov to d, waiting while the destination is full.  The
 * write blocks (distrun's stdout is shared with its parent: we do not make
 * it non-blocking), so a 200 ms interval timer interrupts it, and while it
 * is stuck job_tick() keeps signals and deadlines working; it says when
 * to give the output up (a stopped job whose reader never reads). */
static void dest_writev(struct job *job, struct dest *d, struct iovec *iov,
			int cnt)
{
	static const struct itimerval tick = { { 0, 200000 }, { 0, 200000 } };
	static const struct itimerval off;
	bool armed = false;

	mux.writing = true;
	while (cnt > 0 && !d->broken) {
		size_t want = 0;
		ssize_t n;

		for (int i = 0; i < cnt; i++)
			want += iov[i].iov_len;
		if (!armed)
			armed = !setitimer(ITIMER_REAL, &tick, NULL);
		n = writev(d->fd, iov, cnt);
		if (n < 0 && errno != EINTR && errno != EAGAIN) {
			/* EPIPE: nobody reads any more, which stops the job
			 * as SIGPIPE would.  Other errors (a full disk) are
			 * told once; the job goes on without this output. */
			d->broken = true;
			if (errno == EPIPE)
				job->output_broken = true;
			else
				fprintf(stderr, "distrun: writing the ranks' "
					"output to fd %d: %s; dropping it\n",
					d->fd, strerror(errno));
			break;
		}
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = d->fd, .events = POLLOUT };

			poll(&p, 1, 200);
		}
		if (n < 0 || (size_t)n < want) {
			if (job_tick(job)) {
				fprintf(stderr, "distrun: nobody reads fd %d; "
					"dropping the output to end the job\n",
					d->fd);
				d->broken = true;
				break;
			}
			if (n < 0)
				continue;
		}
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
	if (armed)
		setitimer(ITIMER_REAL, &off, NULL);
	mux.writing = false;
}

static void dest_flush(struct job *job, struct dest *d)
{
	struct iovec iov = { d->buf, d->len };

	if (d->len)
		dest_writev(job, d, &iov, 1);
	d->len = 0;
}

void mux_flush(struct job *job)
{
	if (mux.writing)
		return;     /* called from job_tick() inside a write */
	dest_flush(job, &mux.dest[0]);
	dest_flush(job, &mux.dest[1]);
}

/* One line (or, in raw mode, a run of whole lines) of rank r to d. */
static void emit(struct job *job, struct dest *d, int r, const char *data,
		 size_t len, bool add_nl)
{
	struct iovec iov[4];
	char ts[32];
	int cnt = 0;
	size_t need;

	if (d->broken)
		return;
	if (mux.labels)
		iov[cnt++] = (struct iovec){ d->labels + (size_t)r * LABEL_MAX,
					     d->label_len[r] };
	if (mux.timestamps) {
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
	 * saving a copy. */
	if (d->len + need > OBUF_SIZE || need >= OBUF_SIZE / 4)
		dest_flush(job, d);
	if (need >= OBUF_SIZE / 4) {
		dest_writev(job, d, iov, cnt);
		return;
	}
	for (int i = 0; i < cnt; i++) {
		memcpy(d->buf + d->len, iov[i].iov_base, iov[i].iov_len);
		d->len += iov[i].iov_len;
	}
}

/* The hot path: whole lines [p, end) of rank r, each after its label,
 * copied straight into the output buffer. */
static void emit_labelled(struct job *job, struct dest *d, int r,
			  const char *p, const char *end)
{
	const char *label = d->labels + (size_t)r * LABEL_MAX;
	size_t llen = d->label_len[r];

	while (p < end) {
		const char *nl = memchr(p, '\n', end - p);
		size_t len = nl + 1 - p;

		if (d->len + llen + len > OBUF_SIZE) {
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
			emit(job, d, r, lb->buf, lb->len, true);
			lb->len = 0;
			emit(job, d, r, p, take, !nl || cut);
		} else if (cut || (nl && take == (size_t)(nl + 1 - p))) {
			emit(job, d, r, lb->buf, lb->len, cut);
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
	/* The tail (shorter than a read, so than LINE_CAP) waits for more. */
	if (p < end && line_append(lb, p, end - p))
		emit(job, d, r, p, end - p, true);
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
	if (rk->file_fd[s] >= 0) {
		const char *p = mux.rbuf;
		size_t left = n;

		while (left > 0) {
			ssize_t w = write(rk->file_fd[s], p, left);

			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				fprintf(stderr, "distrun: rank %d: writing "
					"--output-dir file: %s\n", r,
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
	if (job->o->show[r])
		split_lines(job, r, s, mux.rbuf, n);
	diag_output(job, r, s, mux.rbuf, n);
	return 1;
}

void mux_finish(struct job *job, int r, int s)
{
	struct linebuf *lb = &job->ranks[r].line[s];

	if (lb->len)
		emit(job, &mux.dest[s], r, lb->buf, lb->len, true);
	free(lb->buf);
	*lb = (struct linebuf){ 0 };
}

void mux_release(struct job *job)
{
	mux_flush(job);
	for (int s = 0; s < 2; s++) {
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
	memset(&mux, 0, sizeof(mux));
}
