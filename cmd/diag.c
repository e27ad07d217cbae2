/*
 * diag.c - say which rank is where, and why, when a job hangs or fails.
 *
 * Sources, none of which needs the stuck ranks' help:
 *   - each rank's control block in the per-job segment (runtime/ctl.h):
 *     per group the call it is in (seq, op, dtype, count, root, the peer
 *     it waits on, since when) or the last it completed, and its flight
 *     record.  Only programs on libdistrun have one;
 *   - /proc: process state, wchan, CPU time, for any program;
 *   - stacks: native programs by gdb in batch mode (ranks allow distrun's
 *     descendants to trace them, PR_SET_PTRACER in spawn.c, so Yama's
 *     ptrace_scope=1 is no obstacle), Python programs by faulthandler on
 *     SIGUSR2 (share/distrun/python/sitecustomize.py, put on PYTHONPATH
 *     by diag_env, registers it: every thread, the rank keeps running).
 *     Every gdb run is bounded in time and their number at once is
 *     bounded; where gdb is missing or tracing is refused the report says
 *     so and gives the rest.
 *
 * Stall detection: the control blocks are sampled (a fingerprint of each:
 * calls begun and ended, requests completed) and output is watched; when
 * nothing moved on any rank for --stall-timeout the job is reported and
 * stopped.  --timeout and stop signals report first too (job.c).
 *
 * The report is text on stderr and the same as a JSON object ("diagnosis"
 * in --report), which ci reads for JUnit failures.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "distrun.h"
#include "ctl.h"
#include "error.h"
#include "diag.h"
#include "ci.h"

extern char **environ;

/* Stacks: how long one gdb may take, how many run at once, how long all
 * of them together may take, how long a Python rank has to dump. */
#define GDB_TIMEOUT 15.0
#define GDB_PARALLEL 4
#define STACKS_BUDGET 30.0
#define PY_TIMEOUT 3.0
#define PY_MEMFD "/memfd:distrun-pystack (deleted)"
#define STACK_FRAMES 4   /* frames in a one-line summary */
#define SKEW_RECS 2000   /* calls looked at for barrier skew */

/* ------------------------------------------------------ strings */

void sb_vprintf(struct sb *b, const char *fmt, va_list ap)
{
	va_list aq;
	int n;

	if (b->oom)
		return;
	va_copy(aq, ap);
	n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0,
		      fmt, aq);
	va_end(aq);
	if (n < 0)
		return;
	if (!b->s || b->len + (size_t)n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + (size_t)n + 1)
			cap *= 2;
		p = realloc(b->s, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->s = p;
		b->cap = cap;
		vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
	}
	b->len += n;
}

void sb_printf(struct sb *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sb_vprintf(b, fmt, ap);
	va_end(ap);
}

void sb_json_str(struct sb *b, const char *s)
{
	if (!s) {
		sb_printf(b, "null");
		return;
	}
	sb_printf(b, "\"");
	const unsigned char *end = (const unsigned char *)s + strlen(s);

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		const unsigned char *c = p;

		/* Bytes that are not UTF-8 (a line cut inside a character,
		 * binary output) would make the whole text invalid JSON. */
		if (*p >= 0x80) {
			if (ci_utf8_next(&c, end) < 0)
				sb_printf(b, "\\ufffd");
			else
				sb_printf(b, "%.*s", (int)(c - p), (const char *)p);
			p = c - 1;
			continue;
		}
		if (*p == '"' || *p == '\\')
			sb_printf(b, "\\%c", *p);
		else if (*p == '\n')
			sb_printf(b, "\\n");
		else if (*p == '\t')
			sb_printf(b, "\\t");
		else if (*p < 0x20 || *p == 0x7f)
			sb_printf(b, "\\u%04x", *p);
		else
			sb_printf(b, "%c", *p);
	}
	sb_printf(b, "\"");
}

char *sb_take(struct sb *b)
{
	char *s = b->s ? b->s : strdup("");

	*b = (struct sb){ 0 };
	return s;
}

/* --------------------------------------------------- control blocks */

int64_t diag_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const dri_ctl *diag_ctl(const struct job *job, int r)
{
	const dri_seg_hdr *h = job->seg;
	const dri_ctl *c;

	if (!h || r < 0 || (uint32_t)r >= h->nranks ||
	    h->ctl_size < sizeof(dri_ctl))
		return NULL;
	c = (const dri_ctl *)((const char *)h + h->ctl_off +
			      (uint64_t)r * h->ctl_size);
	if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != DRI_CTL_MAGIC ||
	    c->version != DRI_CTL_VERSION)
		return NULL;
	return c;
}

static uint64_t fingerprint(const dri_ctl *c)
{
	uint64_t fp = __atomic_load_n(&c->ring_head[0], __ATOMIC_RELAXED) * 7 +
		      __atomic_load_n(&c->ring_head[1], __ATOMIC_RELAXED);

	for (int s = 0; s < DRI_CTL_SLOTS; s++)
		fp = fp * 131 + __atomic_load_n(&c->slot[s].ver,
						__ATOMIC_RELAXED) * 31 +
		     __atomic_load_n(&c->slot[s].progress, __ATOMIC_RELAXED);
	return fp;
}

const char *diag_call_str(const dri_ctl_call *c, char *buf, size_t n)
{
	const char *name = dri_coll_name((dri_coll)c->coll);
	size_t len;

	if (c->coll == DRI_BARRIER || c->coll == DRI_MONITORED_BARRIER ||
	    c->coll == DRI_NEW_GROUP) {
		snprintf(buf, n, "%s", name);
		return buf;
	}
	if (c->coll == DRI_P2P) {
		snprintf(buf, n, "%s %s rank %d (%s x %llu)",
			 c->peer_send ? "send" : "recv",
			 c->peer_send ? "to" : "from", c->peer,
			 dr_dtype_name((dr_dtype)c->dtype),
			 (unsigned long long)c->count);
		return buf;
	}
	len = (size_t)snprintf(buf, n, "%s(", name);
	if (len < n && c->dtype >= 0)
		len += (size_t)snprintf(buf + len, n - len, "%s x %llu",
				dr_dtype_name((dr_dtype)c->dtype),
				(unsigned long long)c->count);
	if (len < n && c->op >= 0)
		len += (size_t)snprintf(buf + len, n - len, ", %s",
					dr_op_name((dr_op)c->op));
	if (len < n && c->root >= 0)
		len += (size_t)snprintf(buf + len, n - len, ", root %d",
					c->root);
	if (len < n)
		snprintf(buf + len, n - len, ")");
	return buf;
}

static bool same_call(const dri_ctl_call *a, const dri_ctl_call *b)
{
	return a->coll == b->coll && a->count == b->count &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

static void group_name(uint32_t g, char *buf, size_t n)
{
	if (g == 0)
		snprintf(buf, n, "world");
	else
		snprintf(buf, n, "group %u", g);
}

void diag_harvest(struct job *job, int r)
{
	struct diag_rank *dr = &job->diag->rk[r];
	const dri_ctl *c = diag_ctl(job, r);

	if (!c)
		return;
	for (int ring = 0; ring < DRI_CTL_RINGS; ring++) {
		uint64_t head = __atomic_load_n(&c->ring_head[ring],
						__ATOMIC_ACQUIRE);
		uint64_t len = dri_ctl_ring_len(ring), *next = &dr->next_idx[ring];

		if (head > *next + len) {
			dr->dropped += head - len - *next;
			*next = head - len;
		}
		for (; *next < head; (*next)++) {
			dri_ctl_call call;

			if (dri_ctl_read_rec(c, ring, *next, &call)) {
				/* Still being written: come back next time,
				 * unless its writer is gone. */
				if (job->ranks[r].state == RANK_RUNNING)
					break;
				dr->dropped++;
				continue;
			}
			if (dr->nrec == dr->caprec) {
				size_t cap = dr->caprec ? 2 * dr->caprec : 256;
				dri_ctl_call *p = realloc(dr->recs,
							  cap * sizeof(*p));

				if (!p) {
					dr->dropped++;
					continue;
				}
				dr->recs = p;
				dr->caprec = cap;
			}
			dr->recs[dr->nrec++] = call;
		}
	}
}

/* ------------------------------------------------------ lifecycle */

static const char *helper_dir(void)
{
	static char dir[PATH_MAX + 32];
	char exe[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	struct stat st;

	if (n <= 0)
		return NULL;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	snprintf(dir, sizeof(dir), "%s/../share/distrun/python", exe);
	char probe[PATH_MAX + 64];
	snprintf(probe, sizeof(probe), "%s/sitecustomize.py", dir);
	if (stat(probe, &st))
		return NULL;
	return dir;
}

int diag_init(struct job *job)
{
	struct diag *d = calloc(1, sizeof(*d));

	if (d)
		d->rk = calloc(job->o->nranks, sizeof(*d->rk));
	if (!d || !d->rk) {
		free(d);
		perror("distrun");
		return -1;
	}
	d->last_activity = now_mono();
	job->diag = d;
	return 0;
}

int diag_env(struct job *job, char **env, size_t *k)
{
	struct diag *d = job->diag;
	const char *dir = helper_dir(), *old = getenv("PYTHONPATH");

	if (!d)
		return 0;
	/* Fatal signals dump the Python stack (faulthandler), unless the
	 * user chose otherwise. */
	if (!getenv("PYTHONFAULTHANDLER"))
		d->env[d->nenv++] = strdup("PYTHONFAULTHANDLER=1");
	/* Exact times in the control blocks for the timeline. */
	if (opts_timeline(job->o) && !getenv("DISTRUN_CTL"))
		d->env[d->nenv++] = strdup("DISTRUN_CTL=precise");
	if (dir) {
		struct sb b = { 0 };

		d->env[d->nenv++] = strdup("DISTRUN_PYSTACKS=1");
		sb_printf(&b, "PYTHONPATH=%s%s%s", dir, old && *old ? ":" : "",
			  old && *old ? old : "");
		d->env[d->nenv++] = b.oom ? NULL : sb_take(&b);
	}
	for (int i = 0; i < d->nenv; i++) {
		if (!d->env[i])
			return -1;
		env[(*k)++] = d->env[i];
	}
	return 0;
}

const char *diag_verdict_line(const struct job *job)
{
	return job->diag && job->diag->vline[0] ? job->diag->vline : NULL;
}

void diag_release(struct job *job)
{
	struct diag *d = job->diag;

	if (!d)
		return;
	for (int r = 0; r < job->o->nranks; r++)
		free(d->rk[r].recs);
	for (size_t i = 0; i < d->nlines; i++)
		free(d->lines[i].text);
	for (int i = 0; i < d->nenv; i++)
		free(d->env[i]);
	free(d->lines);
	free(d->rk);
	free(d->text);
	free(d->json);
	free(d);
	job->diag = NULL;
}

/* ------------------------------------------------ sampling, stalls */

static double sample_period(const struct job *job)
{
	double p = 0.25;

	if (opts_timeline(job->o))
		p = 0.02;
	if (job->o->stall_timeout > 0 && job->o->stall_timeout / 4 < p)
		p = job->o->stall_timeout / 4;
	return p;
}

double diag_deadline(const struct job *job)
{
	const struct diag *d = job->diag;

	if (!d || job->stopping || (!opts_timeline(job->o) && !job->o->stall_timeout))
		return -1;
	return d->next_sample;
}

bool diag_tick(struct job *job)
{
	struct diag *d = job->diag;
	double t = now_mono();

	if (!d || job->stopping || t < d->next_sample ||
	    (!opts_timeline(job->o) && !job->o->stall_timeout))
		return false;
	d->next_sample = t + sample_period(job);
	for (int r = 0; r < job->o->nranks; r++) {
		const dri_ctl *c = diag_ctl(job, r);
		uint64_t fp;

		if (!c)
			continue;
		fp = fingerprint(c);
		if (fp != d->rk[r].fp) {
			d->rk[r].fp = fp;
			d->last_activity = t;
			d->clock_started = true;
		}
		if (opts_timeline(job->o))
			diag_harvest(job, r);
	}
	/* Until a rank's first call or line (Python importing torch, a
	 * program reading its data), the job is starting, not stalled. */
	if (!d->clock_started)
		d->last_activity = t;
	if (job->o->stall_timeout > 0 &&
	    t - d->last_activity >= job->o->stall_timeout) {
		char why[96];

		snprintf(why, sizeof(why), "no progress for %.1fs",
			 t - d->last_activity);
		job->stalled = true;
		job->timed_out = true;
		diag_report(job, why);
		if (d->vline[0])
			fprintf(stderr, "distrun: %s: %s\n", why, d->vline);
		return true;
	}
	return false;
}

void diag_output(struct job *job, int r, int s, const char *p, size_t n)
{
	struct diag *d = job->diag;
	struct diag_rank *dr;
	double t;

	if (!d)
		return;
	t = now_mono();
	d->last_activity = t;
	d->clock_started = true;
	if (!opts_timeline(job->o))
		return;
	dr = &d->rk[r];
	for (const char *end = p + n; p < end; p++) {
		bool nl = *p == '\n';

		if (!dr->part_len[s])
			dr->part_t[s] = t;
		if (!nl && dr->part_len[s] < DIAG_LINE_MAX) {
			dr->part[s][dr->part_len[s]++] = *p;
			continue;
		}
		if (!nl)
			continue;   /* cut: the rest of a long line */
		dr->part[s][dr->part_len[s]] = 0;
		if (d->nlines >= DIAG_LINES_MAX) {
			d->lines_dropped++;
		} else {
			if (d->nlines == d->caplines) {
				size_t cap = d->caplines ? 2 * d->caplines : 256;
				struct diag_line *l = realloc(d->lines,
							cap * sizeof(*l));

				if (!l) {
					d->lines_dropped++;
					dr->part_len[s] = 0;
					continue;
				}
				d->lines = l;
				d->caplines = cap;
			}
			d->lines[d->nlines] = (struct diag_line){
				dr->part_t[s], r, s, strdup(dr->part[s]) };
			if (d->lines[d->nlines].text)
				d->nlines++;
		}
		dr->part_len[s] = 0;
	}
}

/* ------------------------------------------------------------ /proc */

struct pinfo {
	char state;          /* R, S, D, T, Z, or '?' */
	char wchan[64];
	double cpu;          /* user + system seconds */
	int exit_code;       /* a zombie's wait status */
};

static void proc_read(pid_t pid, struct pinfo *pi)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	FILE *f;
	size_t n;

	pi->state = '?';
	pi->wchan[0] = 0;
	pi->cpu = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (p && sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			"%lu %lu", &pi->state, &ut, &st) == 3)
		pi->cpu = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	/* exit_code is field 52, the last (Linux 3.5+); p is at field 2 */
	if (p) {
		char *q = strrchr(p, ' ');

		pi->exit_code = q ? atoi(q + 1) : 0;
	}
	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	f = fopen(path, "re");
	if (f) {
		n = fread(pi->wchan, 1, sizeof(pi->wchan) - 1, f);
		pi->wchan[n] = 0;
		fclose(f);
		if (!strcmp(pi->wchan, "0"))
			pi->wchan[0] = 0;
	}
}

/* ----------------------------------------------------------- stacks */

struct stack {
	const char *method;  /* "gdb", "python", NULL: none */
	char err[200];       /* why there is none */
	struct sb raw;       /* what the tool printed */
	char *summary;       /* one line, for grouping */
	char **frames;       /* the selected thread's frames, as printed */
	int nframes;
	/* collection */
	pid_t gdb;
	int fd;              /* gdb's output, or the Python memfd */
	off_t py_from;       /* memfd size before our signal */
	off_t py_last;
	int py_still;        /* polls with no growth */
	double deadline;
	bool done;
};

static const char *find_gdb(char *buf, size_t n, char *err, size_t en)
{
	const char *env = getenv("DISTRUN_GDB"), *path = getenv("PATH");

	if (env && *env) {
		if (access(env, X_OK)) {
			snprintf(err, en, "DISTRUN_GDB=%s: %s", env,
				 strerror(errno));
			return NULL;
		}
		return env;
	}
	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		const char *e = strchrnul(p, ':');

		snprintf(buf, n, "%.*s/gdb", (int)(e - p), p);
		if (e > p && !access(buf, X_OK))
			return buf;
		p = *e ? e + 1 : e;
	}
	snprintf(err, en, "gdb not found in PATH (install gdb, or set "
		 "DISTRUN_GDB)");
	return NULL;
}

/* The memfd that the Python helper made in process pid, opened for
 * reading, or -1. */
static int py_memfd(pid_t pid)
{
	char dir[64], path[320], link[256];
	struct dirent *e;
	int fd = -1;
	DIR *dp;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	dp = opendir(dir);
	if (!dp)
		return -1;
	while (fd < 0 && (e = readdir(dp))) {
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (!strcmp(link, PY_MEMFD))
			fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	closedir(dp);
	return fd;
}

static pid_t gdb_start(const struct job *job, const char *gdb, pid_t pid,
		       int *fd)
{
	char spid[16];
	int p[2];
	pid_t child;

	if (pipe2(p, O_CLOEXEC))
		return -1;
	snprintf(spid, sizeof(spid), "%d", (int)pid);
	child = fork();
	if (child < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (child == 0) {
		char *argv[] = { (char *)gdb, "-nx", "-batch", "-p", spid,
				 "-iex", "set debuginfod enabled off",
				 "-iex", "set auto-load off",
				 "-ex", "set pagination off",
				 "-ex", "thread apply all bt", NULL };

		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (dup2(job->devnull, 0) < 0 || dup2(p[1], 1) < 0 ||
		    dup2(p[1], 2) < 0)
			_exit(127);
		sigprocmask(SIG_SETMASK, &job->orig_mask, NULL);
		execve(gdb, argv, environ);
		_exit(127);
	}
	close(p[1]);
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		/* A blocking read would stall the diagnosis: no stacks. */
		kill(child, SIGKILL);
		while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
			;
		close(p[0]);
		return -1;
	}
	*fd = p[0];
	return child;
}

static const char *basename_of(const char *path, size_t len, size_t *out)
{
	const char *b = path;

	for (size_t i = 0; i < len; i++)
		if (path[i] == '/')
			b = path + i + 1;
	*out = len - (size_t)(b - path);
	return b;
}

/* Selects the main thread's frames from gdb's "thread apply all bt". */
static void gdb_parse(struct stack *st, pid_t pid)
{
	char want1[48], want2[48];
	char *text = st->raw.s, *save = NULL, *line;
	bool in = false, any_thread = false;

	if (!text)
		return;
	snprintf(want1, sizeof(want1), "(LWP %d)", (int)pid);
	snprintf(want2, sizeof(want2), "(process %d)", (int)pid);
	text = strdup(text);
	if (!text)
		return;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "Thread ", 7)) {
			in = strstr(line, want1) || strstr(line, want2);
			any_thread = true;
			continue;
		}
		if ((in || !any_thread) && line[0] == '#') {
			char **f = realloc(st->frames, (st->nframes + 1) *
					   sizeof(*f));
			if (!f)
				break;
			st->frames = f;
			st->frames[st->nframes] = strdup(line);
			if (st->frames[st->nframes])
				st->nframes++;
		}
	}
	free(text);
}

/* "#3  0x... in main (argc=1, ...) at tests/c/x.c:30": the function and
 * "x.c:30" (or "" when the frame has no source). */
static void frame_split(const char *f, char *fn, size_t fnn, char *src,
			size_t srcn, bool *internal)
{
	const char *p = strchr(f, ' '), *at, *q;
	size_t blen;
	const char *b;

	*internal = false;
	fn[0] = src[0] = 0;
	if (!p)
		return;
	while (*p == ' ')
		p++;
	q = strstr(p, " in ");
	if (!strncmp(p, "0x", 2) && q)
		p = q + 4;
	snprintf(fn, fnn, "%.*s", (int)strcspn(p, " ("), p);
	at = strstr(p, ") at ");
	if (at) {
		at += 5;
		b = basename_of(at, strlen(at), &blen);
		snprintf(src, srcn, "%.*s", (int)blen, b);
		/* glibc's own sources, libdistrun's insides */
		if (!strncmp(at, "../", 3) || !strncmp(at, "./", 2) ||
		    (strstr(at, "runtime/") && strncmp(fn, "dr_", 3)))
			*internal = true;
	} else {
		*internal = true;
	}
}

static void gdb_summary(struct stack *st)
{
	struct sb b = { 0 };
	int shown = 0;

	for (int i = 0; i < st->nframes && shown < STACK_FRAMES; i++) {
		char fn[128], src[128];
		bool internal;

		frame_split(st->frames[i], fn, sizeof(fn), src, sizeof(src),
			    &internal);
		if (i > 0 && internal)
			continue;
		sb_printf(&b, "%s#%d %s", shown ? "  " : "", i, fn);
		if (src[0])
			sb_printf(&b, " (%s)", src);
		shown++;
	}
	st->summary = sb_take(&b);
}

/* Line n of file path, trimmed, into buf ("" if unreadable). */
static void source_line(const char *path, long n, char *buf, size_t sz)
{
	FILE *f = fopen(path, "re");
	char line[512];
	long i = 0;

	buf[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (++i == n) {
			char *p = line, *e;

			while (*p == ' ' || *p == '\t')
				p++;
			e = strstr(p, "  #"); /* an inline comment */
			if (!e)
				e = p + strlen(p);
			*e = 0;
			while (e > p && (e[-1] == '\n' || e[-1] == ' ' ||
					 e[-1] == '\r'))
				*--e = 0;
			snprintf(buf, sz, "%s", p);
			break;
		}
	fclose(f);
}

static bool py_system_file(const char *path)
{
	return strstr(path, "/lib/python") || strstr(path, "-packages/") ||
	       path[0] == '<';
}

/* faulthandler's dump: the "Current thread" block (the main thread,
 * where the signal handler runs), frames innermost first. */
static void py_parse(struct stack *st)
{
	char *text = st->raw.s ? strdup(st->raw.s) : NULL, *save = NULL, *line;
	bool in = false;
	struct sb b = { 0 };
	int user = -1;

	if (!text)
		return;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (strstr(line, "(most recent call first)")) {
			in = !strncmp(line, "Current thread", 14);
			continue;
		}
		if (in && strstr(line, "File \"")) {
			char **f = realloc(st->frames, (st->nframes + 1) *
					   sizeof(*f));
			if (!f)
				break;
			st->frames = f;
			while (*line == ' ')
				line++;
			st->frames[st->nframes] = strdup(line);
			if (st->frames[st->nframes])
				st->nframes++;
		}
	}
	free(text);
	/* The innermost frame of the program itself, with its source. */
	for (int i = 0; i < st->nframes; i++) {
		char path[PATH_MAX];

		if (sscanf(st->frames[i], "File \"%4095[^\"]\"", path) == 1 &&
		    !py_system_file(path)) {
			user = i;
			break;
		}
	}
	/* "dist.barrier() hang.py:12 (in barrier, distributed_c10d.py:3152)":
	 * the program's line and source first, then the innermost frame. */
	for (int pass = 0; pass < 2; pass++) {
		int i = pass == 0 ? user : 0;
		char path[PATH_MAX], fn[128], code[160];
		long ln = 0;
		size_t blen;
		const char *base;

		if (i < 0 || i >= st->nframes || (pass == 1 && user == 0))
			continue;
		if (sscanf(st->frames[i], "File \"%4095[^\"]\", line %ld in "
			   "%127s", path, &ln, fn) != 3)
			continue;
		base = basename_of(path, strlen(path), &blen);
		if (pass == 0) {
			source_line(path, ln, code, sizeof(code));
			sb_printf(&b, "%s%s%.*s:%ld", code, code[0] ? " " : "",
				  (int)blen, base, ln);
		} else {
			sb_printf(&b, b.len ? " (in %s, %.*s:%ld)" :
				  "%s (%.*s:%ld)", fn, (int)blen, base, ln);
		}
	}
	st->summary = sb_take(&b);
}

static void stack_finish_gdb(struct stack *st, pid_t pid)
{
	const char *t = st->raw.s ? st->raw.s : "";

	gdb_parse(st, pid);
	if (st->nframes) {
		gdb_summary(st);
		return;
	}
	st->method = NULL;
	if (strstr(t, "ptrace: Operation not permitted"))
		snprintf(st->err, sizeof(st->err), "tracing refused (ptrace: "
			 "Operation not permitted)");
	else if (strstr(t, "ptrace:"))
		snprintf(st->err, sizeof(st->err), "gdb: %.*s",
			 (int)strcspn(strstr(t, "ptrace:"), "\n"),
			 strstr(t, "ptrace:"));
	else if (!st->err[0])
		snprintf(st->err, sizeof(st->err), "gdb printed no frames");
}

static void stacks_collect(struct job *job, struct stack *sts,
			   const pid_t *pids)
{
	int n = job->o->nranks, running = 0, next = 0;
	char gbuf[PATH_MAX], gerr[160] = "";
	const char *gdb = NULL;
	bool need_gdb = false;
	double t0 = now_mono();

	/* Python ranks first: one signal each, they dump concurrently. */
	for (int r = 0; r < n; r++) {
		struct stack *st = &sts[r];
		struct stat sb;

		st->fd = -1;
		st->done = true;
		if (pids[r] <= 0) {
			snprintf(st->err, sizeof(st->err), "not running");
			continue;
		}
		st->fd = py_memfd(pids[r]);
		if (st->fd >= 0 && !fstat(st->fd, &sb) &&
		    !kill(pids[r], SIGUSR2)) {
			st->method = "python";
			st->py_from = st->py_last = sb.st_size;
			st->deadline = t0 + PY_TIMEOUT;
			st->done = false;
			continue;
		}
		if (st->fd >= 0)
			close(st->fd);
		st->fd = -1;
		st->done = false;
		need_gdb = true;
	}
	if (need_gdb)
		gdb = find_gdb(gbuf, sizeof(gbuf), gerr, sizeof(gerr));
	for (int r = 0; r < n; r++)
		if (!sts[r].done && !sts[r].method && !gdb) {
			snprintf(sts[r].err, sizeof(sts[r].err), "%s", gerr);
			sts[r].done = true;
		}
	for (;;) {
		struct pollfd pfd[GDB_PARALLEL];
		int who[GDB_PARALLEL], np = 0, left = 0;
		double t = now_mono();

		/* Start gdbs up to the limit, within the budget. */
		for (; gdb && next < n && running < GDB_PARALLEL; next++) {
			struct stack *st = &sts[next];

			if (st->done || st->method)
				continue;
			if (t - t0 > STACKS_BUDGET) {
				snprintf(st->err, sizeof(st->err), "not "
					 "collected: %gs for all stacks spent",
					 STACKS_BUDGET);
				st->done = true;
				continue;
			}
			st->gdb = gdb_start(job, gdb, pids[next], &st->fd);
			if (st->gdb < 0) {
				snprintf(st->err, sizeof(st->err), "cannot run "
					 "%.100s: %s", gdb, strerror(errno));
				st->done = true;
				continue;
			}
			st->method = "gdb";
			st->deadline = t + GDB_TIMEOUT;
			running++;
		}
		for (int r = 0; r < n; r++) {
			struct stack *st = &sts[r];

			if (st->done || !st->method)
				continue;
			left++;
			if (!strcmp(st->method, "gdb")) {
				if (t > st->deadline) {
					kill(st->gdb, SIGKILL);
					snprintf(st->err, sizeof(st->err),
						 "gdb took over %gs",
						 GDB_TIMEOUT);
				} else if (np < GDB_PARALLEL) {
					who[np] = r;
					pfd[np++] = (struct pollfd){ st->fd,
								     POLLIN, 0 };
					continue;
				} else {
					continue;
				}
				/* killed: reaped below */
				waitpid(st->gdb, NULL, 0);
				close(st->fd);
				st->fd = -1;
				st->method = NULL;
				st->done = true;
				running--;
				continue;
			}
			/* python: the dump is done once it stops growing */
			struct stat sb;
			if (!fstat(st->fd, &sb) && sb.st_size > st->py_from) {
				if (sb.st_size == st->py_last &&
				    ++st->py_still >= 2) {
					size_t len = sb.st_size - st->py_from;
					char *buf = malloc(len + 1);
					ssize_t got = buf ? pread(st->fd, buf, len,
							st->py_from) : -1;

					if (got > 0) {
						buf[got] = 0;
						sb_printf(&st->raw, "%s", buf);
					}
					free(buf);
					close(st->fd);
					st->fd = -1;
					st->done = true;
					py_parse(st);
					if (!st->nframes) {
						st->method = NULL;
						snprintf(st->err, sizeof(st->err),
							 "no Python frames "
							 "in its dump");
					}
					continue;
				}
				if (sb.st_size != st->py_last)
					st->py_still = 0;
				st->py_last = sb.st_size;
			}
			if (t > st->deadline) {
				close(st->fd);
				st->fd = -1;
				st->method = NULL;
				st->done = true;
				snprintf(st->err, sizeof(st->err), "Python did "
					 "not dump its stack within %gs",
					 PY_TIMEOUT);
			}
		}
		if (!left && (next >= n || !gdb))
			break;
		if (poll(pfd, np, 50) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < np; i++) {
			struct stack *st = &sts[who[i]];
			char buf[4096];
			ssize_t got;

			if (!pfd[i].revents)
				continue;
			got = read(st->fd, buf, sizeof(buf) - 1);
			if (got > 0) {
				buf[got] = 0;
				if (st->raw.len < (1 << 20))
					sb_printf(&st->raw, "%s", buf);
				continue;
			}
			if (got < 0 && errno == EAGAIN)
				continue;
			/* EOF: gdb is done */
			close(st->fd);
			st->fd = -1;
			waitpid(st->gdb, NULL, 0);
			st->done = true;
			running--;
			stack_finish_gdb(st, pids[who[i]]);
		}
	}
}

static void stack_release(struct stack *st)
{
	free(st->raw.s);
	free(st->summary);
	for (int i = 0; i < st->nframes; i++)
		free(st->frames[i]);
	free(st->frames);
}

/* ----------------------------------------------------------- report */

struct rsnap {
	pid_t pid;               /* the process to look at, 0: none */
	bool alive;
	const dri_ctl *ctl;
	bool torn;
	dri_ctl_slot slot[DRI_CTL_SLOTS];
	int64_t t_user;
	struct pinfo p0, p1;
	int busy;                /* slot index of a call it is in, -1 */
	struct stack st;
};

static void snap_take(struct job *job, int r, struct rsnap *s)
{
	const struct rank *rk = &job->ranks[r];

	memset(s, 0, sizeof(*s));
	s->busy = -1;
	s->alive = rk->state == RANK_RUNNING;
	s->ctl = diag_ctl(job, r);
	s->pid = s->alive ? rk->pid : 0;
	if (!s->ctl)
		return;
	/* A wrapper (a shell script) may run the program as its child. */
	if (s->alive && s->ctl->pid > 0 && s->ctl->pid != rk->pid &&
	    !kill(s->ctl->pid, 0))
		s->pid = s->ctl->pid;
	s->t_user = __atomic_load_n(&s->ctl->t_user, __ATOMIC_RELAXED);
	for (int i = 0; i < DRI_CTL_SLOTS; i++) {
		if (dri_ctl_read_slot(s->ctl, i, &s->slot[i]))
			s->torn = true;
		if (s->slot[i].state == DRI_CTL_IN_CALL && s->busy < 0)
			s->busy = i;
	}
}

/* Reports name ranks as the job does: global ranks (local index + base,
 * the node's rank offset), so that the nodes' reports agree. */
static const char *rank_flags_str(const uint8_t *f, int n, int base,
				  char *buf, size_t sz)
{
	uint8_t *g = base ? calloc((size_t)(base + n), 1) : NULL;
	int cnt = 0;

	for (int i = 0; i < n; i++)
		cnt += f[i];
	if (g)
		memcpy(g + base, f, (size_t)n);
	snprintf(buf, sz, "%s ", cnt == 1 ? "rank" : "ranks");
	rank_list_str(g ? g : f, g ? base + n : n, buf + strlen(buf),
		      sz - strlen(buf));
	free(g);
	return buf;
}

static void json_rank_list(struct sb *j, const uint8_t *f, int n, int base)
{
	bool first = true;

	sb_printf(j, "[");
	for (int i = 0; i < n; i++)
		if (f[i]) {
			sb_printf(j, "%s%d", first ? "" : ",", base + i);
			first = false;
		}
	sb_printf(j, "]");
}

static void json_call(struct sb *j, const dri_ctl_call *c, int64_t now)
{
	char desc[160];

	sb_printf(j, "{\"group\":%u,\"seq\":%llu,\"op\":", c->group_id,
		  (unsigned long long)c->seq);
	sb_json_str(j, dri_coll_name((dri_coll)c->coll));
	sb_printf(j, ",\"call\":");
	sb_json_str(j, diag_call_str(c, desc, sizeof(desc)));
	sb_printf(j, ",\"dtype\":");
	sb_json_str(j, c->dtype >= 0 ? dr_dtype_name((dr_dtype)c->dtype) : NULL);
	sb_printf(j, ",\"count\":%llu,\"bytes\":%llu,\"reduce_op\":",
		  (unsigned long long)c->count, (unsigned long long)c->bytes);
	sb_json_str(j, c->op >= 0 ? dr_op_name((dr_op)c->op) : NULL);
	sb_printf(j, ",\"root\":");
	if (c->root >= 0)
		sb_printf(j, "%d", c->root);
	else
		sb_printf(j, "null");
	sb_printf(j, ",\"peer\":");
	if (c->peer >= 0)
		sb_printf(j, "%d,\"peer_dir\":\"%s\"", c->peer,
			  c->peer_send ? "send" : "recv");
	else
		sb_printf(j, "null,\"peer_dir\":null");
	if (c->t_end)
		sb_printf(j, ",\"ended_s_ago\":%.3f,\"status\":",
			  (now - c->t_end) / 1e9);
	else
		sb_printf(j, ",\"for_s\":%.3f,\"status\":",
			  (now - c->t_start) / 1e9);
	sb_json_str(j, c->t_end ? dr_err_name((dr_err)c->status) : NULL);
	sb_printf(j, "}");
}

/* Where rank r is, as a phrase: "in user code for 3.0s, last call seq 4". */
static void where_str(const struct rsnap *s, const struct rank *rk,
		      int64_t now, uint32_t group, char *buf, size_t n)
{
	char st[64], call[160], g[32];

	if (!s->alive) {
		snprintf(buf, n, "it %s", rank_status_str(rk, st, sizeof(st)));
		return;
	}
	if (!s->ctl) {
		snprintf(buf, n, "no control block (not a libdistrun program, "
			 "or before init)");
		return;
	}
	if (s->busy >= 0) {
		const dri_ctl_call *c = &s->slot[s->busy].call;

		group_name(c->group_id, g, sizeof(g));
		snprintf(buf, n, "in %s seq %llu %s for %.1fs", g,
			 (unsigned long long)c->seq,
			 diag_call_str(c, call, sizeof(call)),
			 (now - c->t_start) / 1e9);
		return;
	}
	if (s->ctl->finished) {
		snprintf(buf, n, "it destroyed its process group");
		return;
	}
	if (group < DRI_CTL_GROUPS && s->slot[group].ncalls)
		snprintf(buf, n, "in user code for %.1fs, last call seq %llu",
			 (now - s->t_user) / 1e9,
			 (unsigned long long)s->slot[group].call.seq);
	else
		snprintf(buf, n, "in user code for %.1fs, no call on it yet",
			 (now - s->t_user) / 1e9);
}

/* A cycle of ranks blocked in point-to-point calls, each waiting on the
 * next: its length and the ranks in order in cyc, or 0. */
static int p2p_cycle(const struct rsnap *s, int n, int *cyc)
{
	int *seen = calloc(n, sizeof(int));
	int found = 0;

	if (!seen)
		return 0;
	for (int start = 0; start < n && !found; start++) {
		int len = 0, r = start;

		memset(seen, 0, n * sizeof(int));
		while (r >= 0 && r < n && !seen[r]) {
			const dri_ctl_slot *p = &s[r].slot[DRI_CTL_P2P];

			if (!s[r].alive || p->state != DRI_CTL_IN_CALL ||
			    p->call.peer < 0)
				break;
			seen[r] = ++len;
			cyc[len - 1] = r;
			r = p->call.peer;
		}
		if (r >= 0 && r < n && seen[r]) {
			/* the cycle starts where r was first seen */
			int from = seen[r] - 1;

			found = len - from;
			memmove(cyc, cyc + from, found * sizeof(int));
		}
	}
	free(seen);
	return found;
}

/* A report being made: the snapshots and the text and JSON so far. */
struct rep {
	struct job *job;
	int n, nctl;
	struct rsnap *s;
	uint8_t *flags;          /* scratch: n rank flags */
	int64_t now;             /* ns, when the snapshots were taken */
	double cpu_dt;           /* s between the two /proc readings */
	struct sb t, j;
	const char *verdict;
	char vcall[300];         /* the first call ranks wait in, one line */
	char vline[400];         /* the verdict in one line (the first) */
};

/* The verdict line from what p->t holds from off: its first line, without
 * the indent (when no verdict line is set yet). */
static void vline_from(struct rep *p, size_t off)
{
	const char *l;

	if (p->vline[0] || !p->t.s || off >= p->t.len)
		return;
	l = p->t.s + off + strspn(p->t.s + off, " ");
	snprintf(p->vline, sizeof(p->vline), "%.*s", (int)strcspn(l, "\n"),
		 l);
}

/* Snapshots of every rank, CPU over 0.1 s, then the stacks. */
static void rep_gather(struct rep *p)
{
	struct stack *sts = calloc(p->n, sizeof(*sts));
	pid_t *pids = calloc(p->n, sizeof(*pids));
	struct timespec ts = { 0, 100 * 1000000 };
	double t0;

	for (int r = 0; r < p->n; r++) {
		snap_take(p->job, r, &p->s[r]);
		p->nctl += p->s[r].ctl != NULL;
		if (p->s[r].pid)
			proc_read(p->s[r].pid, &p->s[r].p0);
	}
	p->now = diag_now_ns();
	t0 = now_mono();
	nanosleep(&ts, NULL);
	p->cpu_dt = now_mono() - t0;
	for (int r = 0; r < p->n; r++)
		if (p->s[r].pid)
			proc_read(p->s[r].pid, &p->s[r].p1);
	if (sts && pids) {
		for (int r = 0; r < p->n; r++)
			pids[r] = p->s[r].pid;
		stacks_collect(p->job, sts, pids);
		for (int r = 0; r < p->n; r++)
			p->s[r].st = sts[r];
	}
	free(sts);
	free(pids);
}

/* Group g's latest call some rank is in: who waits in it (one line per
 * distinct call made as that seq: more than one is a mismatch), then
 * who is not in it and where it is instead. */
static void rep_group(struct rep *p, int g, bool *first_call)
{
	struct rsnap *s = p->s;
	int n = p->n, kinds = 0;
	uint64_t seq = 0;
	bool any = false;
	char gname[32], list[256];
	uint8_t *done;

	p->vcall[0] = 0;   /* this group's */
	for (int r = 0; r < n; r++)
		if (s[r].slot[g].state == DRI_CTL_IN_CALL &&
		    (!any || s[r].slot[g].call.seq > seq)) {
			seq = s[r].slot[g].call.seq;
			any = true;
		}
	if (!any || !(done = calloc(n, 1)))
		return;
	group_name(g, gname, sizeof(gname));
	for (int r = 0; r < n; r++) {
		const dri_ctl_call *c = &s[r].slot[g].call;
		int64_t since = INT64_MAX;
		char call[160];

		if (done[r] || s[r].slot[g].state != DRI_CTL_IN_CALL ||
		    c->seq != seq)
			continue;
		memset(p->flags, 0, n);
		for (int q = r; q < n; q++)
			if (!done[q] && s[q].slot[g].state == DRI_CTL_IN_CALL &&
			    s[q].slot[g].call.seq == seq &&
			    same_call(&s[q].slot[g].call, c)) {
				p->flags[q] = done[q] = 1;
				if (s[q].slot[g].call.t_start < since)
					since = s[q].slot[g].call.t_start;
			}
		kinds++;
		diag_call_str(c, call, sizeof(call));
		if (!p->vcall[0])
			snprintf(p->vcall, sizeof(p->vcall), "%s seq %llu %s "
				 "(%s waiting)", gname,
				 (unsigned long long)seq, call,
				 rank_flags_str(p->flags, n,
						p->job->rank_offset, list,
						sizeof(list)));
		sb_printf(&p->t, "  %s seq %llu %s: %s waiting %.1fs\n", gname,
			  (unsigned long long)seq, call,
			  rank_flags_str(p->flags, n, p->job->rank_offset, list,
					 sizeof(list)),
			  (p->now - since) / 1e9);
		sb_printf(&p->j, "%s{\"group\":%d,\"seq\":%llu,\"call\":",
			  *first_call ? "" : ",", g, (unsigned long long)seq);
		sb_json_str(&p->j, call);
		sb_printf(&p->j, ",\"ranks\":");
		json_rank_list(&p->j, p->flags, n, p->job->rank_offset);
		sb_printf(&p->j, ",\"waiting_s\":%.3f}", (p->now - since) / 1e9);
		*first_call = false;
	}
	if (kinds > 1) {
		size_t off = p->t.len;

		p->verdict = "mismatch";
		sb_printf(&p->t, "  mismatch: the ranks above made different "
			  "calls as %s seq %llu\n", gname,
			  (unsigned long long)seq);
		vline_from(p, off);
	}
	for (int r = 0; r < n; r++) {
		const dri_ctl_slot *sl = &s[r].slot[g];
		char where[320], call[160];

		if (done[r])
			continue;
		if (g != 0 && !sl->ncalls && sl->state != DRI_CTL_IN_CALL)
			continue;   /* not known to be a member */
		if (sl->state == DRI_CTL_IN_CALL) {
			sb_printf(&p->t, "  rank %d is behind: in %s seq %llu "
				  "%s\n", p->job->rank_offset + r, gname,
				  (unsigned long long)sl->call.seq,
				  diag_call_str(&sl->call, call, sizeof(call)));
			continue;
		}
		where_str(&s[r], &p->job->ranks[r], p->now, g, where,
			  sizeof(where));
		sb_printf(&p->t, "  rank %d never entered it: %s\n",
			  p->job->rank_offset + r, where);
		if (s[r].st.summary && *s[r].st.summary)
			sb_printf(&p->t, "    %s\n", s[r].st.summary);
		if (!p->vline[0])
			snprintf(p->vline, sizeof(p->vline), "rank %d never "
				 "entered %s", p->job->rank_offset + r,
				 p->vcall);
		if (!strcmp(p->verdict, "unknown"))
			p->verdict = "missing_rank";
	}
	free(done);
}

/* Ranks blocked in point-to-point calls, and a cycle of them. */
static void rep_p2p(struct rep *p)
{
	int *cyc = calloc(p->n, sizeof(int)), clen;

	for (int r = 0; r < p->n; r++) {
		const dri_ctl_slot *sl = &p->s[r].slot[DRI_CTL_P2P];
		char call[160];

		if (!p->s[r].alive || sl->state != DRI_CTL_IN_CALL)
			continue;
		sb_printf(&p->t, "  rank %d in %s for %.1fs\n",
			  p->job->rank_offset + r,
			  diag_call_str(&sl->call, call, sizeof(call)),
			  (p->now - sl->call.t_start) / 1e9);
	}
	clen = cyc ? p2p_cycle(p->s, p->n, cyc) : 0;
	if (clen > 0) {
		size_t off = p->t.len;

		p->verdict = "p2p_deadlock";
		sb_printf(&p->t, "  p2p deadlock: ");
		for (int i = 0; i < clen; i++) {
			const dri_ctl_call *c =
				&p->s[cyc[i]].slot[DRI_CTL_P2P].call;

			sb_printf(&p->t, "%srank %d waits to %s rank %d",
				  i ? ", " : "", p->job->rank_offset + cyc[i],
				  c->peer_send ? "send to" : "receive from",
				  c->peer);
		}
		sb_printf(&p->t, " (a cycle)\n");
		vline_from(p, off);
	}
	free(cyc);
}

/* The stack (or why there is none) that groups rank r with others. */
static const char *stack_key(const struct rsnap *x)
{
	return x->st.summary && *x->st.summary ? x->st.summary : x->st.err;
}

/* Ranks with the same stack on one line; the odd one out named. */
static void rep_stacks(struct rep *p)
{
	uint8_t *grouped = calloc(p->n, 1);
	int ngroups = 0, odd = -1, big = 0;
	char list[256];

	if (!grouped)
		return;
	sb_printf(&p->t, "  stacks:\n");
	for (int r = 0; r < p->n; r++) {
		const char *key = stack_key(&p->s[r]);
		int cnt = 0;

		if (grouped[r])
			continue;
		memset(p->flags, 0, p->n);
		for (int q = r; q < p->n; q++)
			if (!grouped[q] && !strcmp(stack_key(&p->s[q]), key)) {
				p->flags[q] = grouped[q] = 1;
				cnt++;
			}
		ngroups++;
		if (cnt == 1)
			odd = r;
		else
			big++;
		sb_printf(&p->t, "    %s: %s%s\n",
			  rank_flags_str(p->flags, p->n, p->job->rank_offset,
					 list, sizeof(list)),
			  key == p->s[r].st.err ? "no stack: " : "", key);
	}
	if (ngroups == 2 && big == 1 && odd >= 0) {
		sb_printf(&p->t, "  rank %d is the odd one out\n",
			  p->job->rank_offset + odd);
		/* The verdict only if it still runs (not a rank that
		 * exited and so has no stack). */
		if (!p->vline[0] && p->s[odd].alive)
			snprintf(p->vline, sizeof(p->vline), "rank %d is the "
				 "odd one out (its stack differs)",
				 p->job->rank_offset + odd);
	}
	free(grouped);
}

/* Rank r's line of the table and its object in the JSON. */
static void rep_rank(struct rep *p, int r)
{
	const struct rsnap *x = &p->s[r];
	const dri_ctl_call *c = x->busy >= 0 ? &x->slot[x->busy].call : NULL;
	char seq[24] = "-", call[160] = "-", wait[40] = "-", st[64];
	double cpu = p->cpu_dt > 0 ? 100 * (x->p1.cpu - x->p0.cpu) / p->cpu_dt
				   : 0;
	int pid = (int)(x->pid ? x->pid : p->job->ranks[r].pid);
	struct sb *j = &p->j;

	if (!x->alive)
		cpu = 0;
	if (c) {
		if (c->coll != DRI_P2P)
			snprintf(seq, sizeof(seq), "%llu",
				 (unsigned long long)c->seq);
		snprintf(call, sizeof(call), "%s", c->coll == DRI_P2P ?
			 (c->peer_send ? "send" : "recv") :
			 dri_coll_name((dri_coll)c->coll));
		snprintf(wait, sizeof(wait), c->peer >= 0 ? "%.1fs on %d" :
			 "%.1fs", (p->now - c->t_start) / 1e9, c->peer);
	} else if (x->ctl && x->slot[0].ncalls) {
		snprintf(seq, sizeof(seq), "%llu",
			 (unsigned long long)x->slot[0].call.seq);
		snprintf(call, sizeof(call), x->alive ? "(user code)" :
			 "(exited)");
	} else if (!x->alive) {
		snprintf(call, sizeof(call), "(exited)");
	}
	sb_printf(&p->t, "  %4d  %-7d  %-5c  %-5s  %-24s  %-14s  %5.1f  %s\n",
		  p->job->rank_offset + r, pid, x->alive ? x->p1.state : '-', seq, call, wait, cpu,
		  x->p1.wchan);

	sb_printf(j, "%s{\"rank\":%d,\"pid\":%d,\"alive\":%s,\"status\":",
		  r ? "," : "", p->job->rank_offset + r, pid,
		  x->alive ? "true" : "false");
	sb_json_str(j, rank_status_str(&p->job->ranks[r], st, sizeof(st)));
	sb_printf(j, ",\"proc_state\":");
	if (x->alive)
		sb_printf(j, "\"%c\"", x->p1.state);
	else
		sb_printf(j, "null");
	sb_printf(j, ",\"wchan\":");
	sb_json_str(j, x->p1.wchan[0] ? x->p1.wchan : NULL);
	sb_printf(j, ",\"cpu_pct\":%.1f,\"libdistrun\":%s,\"torn\":%s,"
		  "\"call\":", cpu, x->ctl ? "true" : "false",
		  x->torn ? "true" : "false");
	if (c)
		json_call(j, c, p->now);
	else
		sb_printf(j, "null");
	sb_printf(j, ",\"last_call\":");
	if (x->ctl && x->slot[0].ncalls && !c)
		json_call(j, &x->slot[0].call, p->now);
	else
		sb_printf(j, "null");
	sb_printf(j, ",\"user_code_s\":");
	if (x->ctl && !c && x->alive)
		sb_printf(j, "%.3f", (p->now - x->t_user) / 1e9);
	else
		sb_printf(j, "null");
	sb_printf(j, ",\"stack_method\":");
	sb_json_str(j, x->st.method);
	sb_printf(j, ",\"stack_error\":");
	sb_json_str(j, x->st.method ? NULL : x->st.err);
	sb_printf(j, ",\"stack_summary\":");
	sb_json_str(j, x->st.summary);
	sb_printf(j, ",\"stack\":[");
	for (int i = 0; i < x->st.nframes; i++) {
		sb_printf(j, i ? "," : "");
		sb_json_str(j, x->st.frames[i]);
	}
	sb_printf(j, "]}");
}

void diag_report(struct job *job, const char *why)
{
	struct diag *d = job->diag;
	struct rep p = { .job = job, .n = job->o->nranks,
			 .verdict = "unknown" };
	bool first_call = true;

	if (!d || d->text)
		return;
	p.s = calloc(p.n, sizeof(*p.s));
	p.flags = calloc(p.n, 1);
	if (!p.s || !p.flags) {
		fprintf(stderr, "distrun: out of memory for the diagnosis\n");
		goto out;
	}
	rep_gather(&p);

	if (job->nnodes > 1)
		sb_printf(&p.t, "distrun: %s (node %d: ranks %d-%d of %d)\n",
			  why, job->node_rank, job->rank_offset,
			  job->rank_offset + p.n - 1, job_world_size(job));
	else
		sb_printf(&p.t, "distrun: %s (%d rank%s)\n", why, p.n,
			  p.n == 1 ? "" : "s");
	sb_printf(&p.j, "{\"reason\":");
	sb_json_str(&p.j, job->stalled ? "stall" : job->timed_out ? "timeout" :
		    job->stop_signal ? "signal" : "stopped");
	sb_printf(&p.j, ",\"headline\":");
	sb_json_str(&p.j, why);
	sb_printf(&p.j, ",\"calls\":[");
	for (int g = 0; g < DRI_CTL_GROUPS; g++)
		rep_group(&p, g, &first_call);
	sb_printf(&p.j, "]");
	rep_p2p(&p);
	if (!p.nctl)
		sb_printf(&p.t, "  no rank has a control block (not libdistrun "
			  "programs): stacks and /proc only\n");
	rep_stacks(&p);
	sb_printf(&p.t, "  %4s  %-7s  %-5s  %-5s  %-24s  %-14s  %5s  %s\n",
		  "rank", "pid", "state", "seq", "call", "waiting", "cpu%",
		  "wchan");
	sb_printf(&p.j, ",\"ranks\":[");
	for (int r = 0; r < p.n; r++)
		rep_rank(&p, r);
	sb_printf(&p.j, "]");
	if (!strcmp(p.verdict, "unknown") && !p.nctl)
		p.verdict = "no_control_block";
	sb_printf(&p.j, ",\"verdict\":\"%s\",\"verdict_line\":", p.verdict);
	snprintf(d->vline, sizeof(d->vline), "%s", p.vline);
	sb_json_str(&p.j, p.vline[0] ? p.vline : NULL);
	sb_printf(&p.j, ",\"text\":");
	d->text = sb_take(&p.t);
	sb_json_str(&p.j, d->text);
	sb_printf(&p.j, "}");
	d->json = sb_take(&p.j);
	fputs(d->text, stderr);
out:
	if (p.s)
		for (int r = 0; r < p.n; r++)
			stack_release(&p.s[r].st);
	free(p.s);
	free(p.flags);
	free(p.t.s);
	free(p.j.s);
}

/* ------------------------------------------------------ first failure */

void diag_rank_failed(struct job *job, int r)
{
	struct diag *d = job->diag;
	int n = job->o->nranks;
	struct rsnap *s;
	struct sb t = { 0 }, j = { 0 };
	uint8_t *flags;
	const char *verdict = NULL;
	char list[256], st[64], call[160], gname[32], dead[64] = "";
	int64_t now;

	if (!d || d->text)
		return;
	s = calloc(n, sizeof(*s));
	flags = calloc(n, 1);
	if (!s || !flags)
		goto out;
	for (int q = 0; q < n; q++)
		snap_take(job, q, &s[q]);
	/* The rank that died inside a call: this one, or one that died
	 * before it but is not reaped yet (a zombie). */
	for (int q = 0; q < n && s[r].busy < 0; q++) {
		struct pinfo pi;

		if (q == r || !s[q].ctl || s[q].busy < 0 || !s[q].alive)
			continue;
		proc_read(job->ranks[q].pid, &pi);
		if (pi.state == 'Z') {
			struct rank fake = job->ranks[q];

			fake.state = RANK_EXITED;
			fake.status = pi.exit_code;
			snprintf(dead, sizeof(dead), "%s", rank_status_str(&fake,
				 st, sizeof(st)));
			r = q;
		}
	}
	if (!s[r].ctl)
		goto out;
	/* After the snapshots, as the stall report does: read before them,
	 * a rank that entered a call and died while 4096 snapshots were
	 * taken showed "-2.4s after it entered it". */
	now = diag_now_ns();
	sb_printf(&j, "{\"reason\":\"rank failed\",\"calls\":[");
	/* Died inside a call. */
	if (s[r].busy >= 0) {
		const dri_ctl_call *c = &s[r].slot[s[r].busy].call;
		int others = 0;

		verdict = "killed";
		group_name(c->group_id, gname, sizeof(gname));
		diag_call_str(c, call, sizeof(call));
		sb_printf(&t, "distrun: rank %d %s inside %s seq %llu %s, "
			  "%.1fs after it entered it\n", job->rank_offset + r,
			  dead[0] ? dead :
			  rank_status_str(&job->ranks[r], st, sizeof(st)),
			  gname, (unsigned long long)c->seq, call,
			  (now - c->t_start) / 1e9);
		for (int q = 0; q < n; q++) {
			const dri_ctl_slot *sl = &s[q].slot[s[r].busy];

			flags[q] = q != r && sl->call.seq == c->seq &&
				   sl->call.group_id == c->group_id &&
				   (sl->state == DRI_CTL_IN_CALL ||
				    sl->call.status != 0);
			others += flags[q];
		}
		if (others)
			sb_printf(&t, "  %s in it too\n",
				  rank_flags_str(flags, n, job->rank_offset, list,
					 sizeof(list)));
		/* Those that had not reached it (world: every rank). */
		for (int q = 0; q < n && c->coll != DRI_P2P; q++) {
			const dri_ctl_slot *sl = &s[q].slot[s[r].busy];
			char where[320];

			if (q == r || flags[q] || !s[q].alive || !s[q].ctl ||
			    (c->group_id != 0 && !sl->ncalls) ||
			    (sl->call.t_start && sl->call.seq >= c->seq))
				continue;
			where_str(&s[q], &job->ranks[q], now, c->group_id,
				  where, sizeof(where));
			sb_printf(&t, "  rank %d never entered it: %s\n",
				  job->rank_offset + q,
				  where);
		}
		sb_printf(&j, "{\"group\":%u,\"seq\":%llu,\"call\":",
			  c->group_id, (unsigned long long)c->seq);
		sb_json_str(&j, call);
		sb_printf(&j, ",\"ranks\":");
		flags[r] = 1;
		json_rank_list(&j, flags, n, job->rank_offset);
		sb_printf(&j, ",\"failed_rank\":%d}", job->rank_offset + r);
	}
	/* Different calls as one seq (the runtime's DR_EMISMATCH): each
	 * rank's call at the highest seq of a group, in it or just ended. */
	for (int g = 0; g < DRI_CTL_GROUPS && !verdict; g++) {
		uint64_t seq = 0;
		bool any = false, differ = false;
		const dri_ctl_call *first = NULL;

		for (int q = 0; q < n; q++)
			if (s[q].ctl && s[q].slot[g].call.t_start &&
			    s[q].slot[g].call.status == DR_EMISMATCH) {
				any = true;
				if (s[q].slot[g].call.seq > seq)
					seq = s[q].slot[g].call.seq;
			}
		if (!any)
			continue;
		for (int q = 0; q < n; q++) {
			const dri_ctl_call *c = &s[q].slot[g].call;

			if (!s[q].ctl || !c->t_start || c->seq != seq)
				continue;
			if (!first)
				first = c;
			else if (!same_call(first, c))
				differ = true;
		}
		if (!differ)
			continue;
		verdict = "mismatch";
		group_name(g, gname, sizeof(gname));
		sb_printf(&t, "distrun: mismatch: the ranks made different "
			  "calls as %s seq %llu\n", gname,
			  (unsigned long long)seq);
		uint8_t *done = calloc(n, 1);
		for (int q = 0; done && q < n; q++) {
			const dri_ctl_call *c = &s[q].slot[g].call;

			if (done[q] || !s[q].ctl || !c->t_start || c->seq != seq)
				continue;
			memset(flags, 0, n);
			for (int x = q; x < n; x++)
				if (!done[x] && s[x].ctl &&
				    s[x].slot[g].call.seq == seq &&
				    s[x].slot[g].call.t_start &&
				    same_call(&s[x].slot[g].call, c))
					flags[x] = done[x] = 1;
			diag_call_str(c, call, sizeof(call));
			sb_printf(&t, "  %s called %s\n",
				  rank_flags_str(flags, n, job->rank_offset, list,
					 sizeof(list)),
				  call);
			sb_printf(&j, "%s{\"group\":%d,\"seq\":%llu,\"call\":",
				  q == 0 ? "" : ",", g, (unsigned long long)seq);
			sb_json_str(&j, call);
			sb_printf(&j, ",\"ranks\":");
			json_rank_list(&j, flags, n, job->rank_offset);
			sb_printf(&j, "}");
		}
		free(done);
	}
	if (!verdict) {
		free(sb_take(&t));
		free(sb_take(&j));
		goto out;
	}
	sb_printf(&j, "],\"verdict\":\"%s\",\"failed_rank\":%d,\"text\":",
		  verdict, job->rank_offset + r);
	d->text = sb_take(&t);
	sb_json_str(&j, d->text);
	sb_printf(&j, "}");
	d->json = sb_take(&j);
	fputs(d->text, stderr);
out:
	free(s);
	free(flags);
}

/* ------------------------------------------------------------ summary */

struct skew {
	uint32_t group;
	uint64_t seq;
	int rank;
	double late;
};

/* Barriers at which one rank came much later than every other: up to
 * max of them, largest first. */
static int barrier_skews(struct job *job, struct skew *out, int max)
{
	int n = job->o->nranks, found = 0;
	struct diag_rank *r0;

	if (n < 2)
		return 0;
	for (int r = 0; r < n; r++)
		diag_harvest(job, r);
	r0 = &job->diag->rk[0];
	/* The last SKEW_RECS calls of rank 0 (a long --trace holds many),
	 * each looked up in every other rank's records. */
	for (size_t i = r0->nrec > SKEW_RECS ? r0->nrec - SKEW_RECS : 0;
	     i < r0->nrec; i++) {
		const dri_ctl_call *c = &r0->recs[i];
		int64_t last = -1, second = -1;
		int last_rank = -1, seen = 1;

		if (c->coll != DRI_BARRIER && c->coll != DRI_MONITORED_BARRIER)
			continue;
		last = c->t_start;
		last_rank = 0;
		for (int r = 1; r < n; r++) {
			struct diag_rank *dr = &job->diag->rk[r];

			for (size_t k = dr->nrec > 2 * SKEW_RECS ?
					dr->nrec - 2 * SKEW_RECS : 0;
			     k < dr->nrec; k++) {
				const dri_ctl_call *o = &dr->recs[k];

				if (o->group_id != c->group_id || o->seq != c->seq ||
				    o->coll != c->coll)
					continue;
				seen++;
				if (o->t_start > last) {
					second = last;
					last = o->t_start;
					last_rank = r;
				} else if (o->t_start > second) {
					second = o->t_start;
				}
				break;
			}
		}
		if (seen != n || second < 0 || last - second < 50000000)
			continue;
		struct skew k = { c->group_id, c->seq, last_rank,
				  (last - second) / 1e9 };
		int at = found < max ? found++ : max - 1;
		if (at == max - 1 && found == max && out[at].late >= k.late)
			continue;
		out[at] = k;
		for (; at > 0 && out[at].late > out[at - 1].late; at--) {
			struct skew x = out[at];
			out[at] = out[at - 1];
			out[at - 1] = x;
		}
	}
	return found;
}

static void coll_time(const struct job *job, int r, double *secs,
		      uint64_t *calls)
{
	const dri_ctl *c = diag_ctl(job, r);
	dri_ctl_slot sl;

	*secs = 0;
	*calls = 0;
	if (!c)
		return;
	for (int i = 0; i < DRI_CTL_SLOTS; i++) {
		dri_ctl_read_slot(c, i, &sl);
		*secs += sl.ns_in_calls / 1e9;
		*calls += sl.ncalls;
	}
}

void diag_summary(struct job *job)
{
	struct skew sk[3];
	int n = job->o->nranks, k, any = 0;

	if (!job->diag)
		return;
	for (int r = 0; r < n; r++)
		any |= diag_ctl(job, r) != NULL;
	if (!any)
		return;
	fprintf(stderr, "%6s  time in collectives (calls):", "");
	for (int r = 0; r < n && r < 64; r++) {
		double secs;
		uint64_t calls;

		coll_time(job, r, &secs, &calls);
		fprintf(stderr, "%s rank %d %.3fs (%llu)", r ? "," : "",
			job->rank_offset + r, secs,
			(unsigned long long)calls);
	}
	fprintf(stderr, "%s\n", n > 64 ? ", ... (all in --report)" : "");
	k = barrier_skews(job, sk, 3);
	for (int i = 0; i < k; i++) {
		char g[32];

		group_name(sk[i].group, g, sizeof(g));
		fprintf(stderr, "%6s  rank %d arrived %.2f s after the others at "
			"%sbarrier seq %llu\n", "",
			job->rank_offset + sk[i].rank, sk[i].late,
			sk[i].group ? g : "", (unsigned long long)sk[i].seq);
	}
}

char *diag_json(struct job *job)
{
	struct diag *d = job->diag;
	struct sb j = { 0 };
	struct skew sk[3];
	int n = job->o->nranks, k, any = 0;

	if (!d)
		return NULL;
	sb_printf(&j, "{");
	if (d->json)
		sb_printf(&j, "\"diagnosis\":%s", d->json);
	for (int r = 0; r < n; r++)
		any |= diag_ctl(job, r) != NULL;
	if (any) {
		sb_printf(&j, "%s\"collectives\":[", d->json ? "," : "");
		for (int r = 0; r < n; r++) {
			double secs;
			uint64_t calls;

			coll_time(job, r, &secs, &calls);
			sb_printf(&j, "%s{\"rank\":%d,\"time_s\":%.6f,"
				  "\"calls\":%llu}", r ? "," : "",
				  job->rank_offset + r, secs,
				  (unsigned long long)calls);
		}
		sb_printf(&j, "],\"barrier_skew\":[");
		k = barrier_skews(job, sk, 3);
		for (int i = 0; i < k; i++)
			sb_printf(&j, "%s{\"group\":%u,\"seq\":%llu,\"rank\":%d,"
				  "\"late_s\":%.3f}", i ? "," : "", sk[i].group,
				  (unsigned long long)sk[i].seq,
				  job->rank_offset + sk[i].rank,
				  sk[i].late);
		sb_printf(&j, "]");
	}
	sb_printf(&j, "}");
	return sb_take(&j);
}
