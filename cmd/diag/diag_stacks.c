/*
 * diag_stacks.c - what a rank's process is doing, seen from outside,
 * without its help: /proc (state, wchan, CPU time, a zombie's exit code)
 * and its stack.  Native programs are stopped briefly by gdb in batch
 * mode, which child.c starts in its own process group, to die with
 * distrun (ranks allow distrun's descendants to trace them, PR_SET_PTRACER in
 * spawn.c, so Yama's ptrace_scope=1 is no obstacle); Python programs dump
 * every thread by faulthandler on SIGUSR2 into a memfd that
 * share/distrun/python/sitecustomize.py (on PYTHONPATH by diag_env) made,
 * and keep running.  Every gdb run is bounded in time and their number at
 * once is bounded, and all stacks together have a budget; where gdb is
 * missing or tracing is refused the stack says why, and the report gives
 * the rest.  The frames are reduced to a one-line summary by which the
 * report groups ranks ("#0 poll  #3 main (x.c:30)", or the Python
 * program's own line).  diag_report.c is the one caller.
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
#include <sys/stat.h>
#include <unistd.h>

#include "diag_int.h"

/* Stacks: how long one gdb may take, how many run at once, how long all
 * of them together may take, how long a Python rank has to dump. */
#define GDB_TIMEOUT 15.0
#define GDB_PARALLEL 4
#define STACKS_BUDGET 30.0
#define PY_TIMEOUT 3.0
#define PY_MEMFD "/memfd:distrun-pystack (deleted)"
#define STACK_FRAMES 4   /* frames in a one-line summary */

/* ------------------------------------------------------------ /proc */

char diag_proc_state(pid_t pid)
{
	struct pinfo pi;

	diag_proc_read(pid, &pi);
	return pi.state;
}

void diag_proc_read(pid_t pid, struct pinfo *pi)
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

/* Starts gdb on process pid, its stdout and stderr into a pipe whose
 * non-blocking read end is *fd.  0, or -1 with errno. */
static int gdb_start(const struct job *job, struct child *c, const char *gdb,
		     pid_t pid, int *fd)
{
	char spid[16];
	char *argv[] = { (char *)gdb, "-nx", "-batch", "-p", spid,
			 "-iex", "set debuginfod enabled off",
			 "-iex", "set auto-load off",
			 "-ex", "set pagination off",
			 "-ex", "thread apply all bt", NULL };
	int p[2], rc;

	/* A blocking read would stall the diagnosis: no stacks then. */
	if (pipe2(p, O_CLOEXEC))
		return -1;
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		rc = -1;
		goto out;
	}
	snprintf(spid, sizeof(spid), "%d", (int)pid);
	*c = (struct child)CHILD_INIT;
	c->argv = argv;
	c->in = CHILD_DEVNULL;
	c->out = c->err = p[1];
	c->close_fds = true;
	c->new_pgroup = true;
	c->pdeathsig = SIGKILL;
	c->mask = &job->orig_mask;
	rc = child_start(c);
out:
	close(p[1]);
	if (rc) {
		close(p[0]);
		return -1;
	}
	*fd = p[0];
	return 0;
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

/* The summary: frame #0 and the frames of the program and of libdistrun's
 * API after it.  The key that groups ranks leaves out the numbers, and
 * #0 where it is inside glibc or the library: ranks waiting in the same
 * call from the same line belong together whether the stop caught them
 * in the futex or between two of its timeouts, at whatever depth inside
 * the library; ranks in the program's own code at different lines do
 * not. */
static void gdb_summary(struct stack *st)
{
	struct sb b = { 0 }, k = { 0 };
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
		if (shown || !internal)
			sb_printf(&k, "%s%s%s%s%s", k.len ? " < " : "", fn,
				  src[0] ? " (" : "", src, src[0] ? ")" : "");
		shown++;
	}
	st->summary = sb_take(&b);
	st->key = k.len ? sb_take(&k) : NULL;
	free(k.s);
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
	/* distrun's own Python (the torch backend, the warm interpreter)
	 * lives in share/distrun/python/, on no such path. */
	return strstr(path, "/lib/python") || strstr(path, "-packages/") ||
	       strstr(path, "/distrun/python/") || path[0] == '<';
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

void diag_stacks_collect(struct job *job, struct stack *sts,
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
			if (gdb_start(job, &st->gdb, gdb, pids[next],
				      &st->fd)) {
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
					child_finish(&st->gdb, 0, NULL);
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
				/* killed and reaped */
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
			child_wait(&st->gdb, -1, NULL);
			st->done = true;
			running--;
			stack_finish_gdb(st, pids[who[i]]);
		}
	}
}

void diag_stack_release(struct stack *st)
{
	free(st->raw.s);
	free(st->summary);
	free(st->key);
	for (int i = 0; i < st->nframes; i++)
		free(st->frames[i]);
	free(st->frames);
}
