/*
 * preload.c - --preload MODULES: Python ranks forked from one warm
 * interpreter that has imported MODULES (preload.h says the steps;
 * cmd/job/preload.py is the server).
 *
 * A fresh rank of a torch program spends seconds in `import torch`; the
 * warm interpreter pays it once per job (once per sweep or `distrun test`,
 * through the broker) and forks each rank.  Everything a rank started by
 * spawn.c gets, a forked one gets too: the same environment, fds 0-2 (sent
 * over the socket, SCM_RIGHTS), the segment at its number, its own process
 * group, PR_SET_PDEATHSIG (its parent is the server, which has
 * PR_SET_PDEATHSIG on distrun, or on the distrun running the sweep), the
 * job's cgroup, the guard, distrun as its ptracer.  The server is not a
 * subreaper, so what a forked rank leaves behind is reparented to distrun
 * as with spawned ranks.  The ranks are the server's children, so it reaps
 * them: it reports "EXITED pid status" when a rank's pidfd says so,
 * distrun strikes the pid from the guard's list and answers REAP, and only
 * then does the server wait4() and send the status and rusage.  distrun
 * never signals a rank it was told has exited, so no pid it signals can
 * have been reused.
 *
 * The wire: server to distrun, lines ("READY pid", "FAIL why", "FORKED r
 * pid", "NOFORK r why", "EXITED pid status", "STATUS pid status utime_us
 * stime_us maxrss minflt majflt nvcsw nivcsw inblock oublock"); distrun to
 * server, frames of a header ("FORK" or "REAP", a little-endian u32 body
 * length; fds attached to it) and a body of NUL-separated fields.  The
 * server is a child distrun trusts (it runs the user's own interpreter);
 * even so every read is bounded and a malformed line is dropped.
 * preload_broker.c shares servers among the runs of a sweep.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "preload.h"

/* How long the modules may take to import before the ranks start the
 * usual way, and how long one fork may take. */
#define READY_WAIT 120.0
#define FORK_WAIT 10.0
/* How long a server with no client left may take to exit. */
/* How long the other ranks may wait for rank 0 to listen on MASTER_PORT
 * (see wait_for_store). */
#define STORE_WAIT 0.5
#define MAX_FDS 5

struct sbuf {
	char *s;
	size_t len, cap;
	bool oom;
};

static void sb_add(struct sbuf *b, const void *p, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *ns;

		while (cap < b->len + n + 1)
			cap *= 2;
		ns = realloc(b->s, cap);
		if (!ns) {
			b->oom = true;
			return;
		}
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = 0;
}

/* A string and its NUL. */
static void sb_field(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s) + 1);
}

static void sb_fieldf(struct sbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void sb_fieldf(struct sbuf *b, const char *fmt, ...)
{
	char buf[64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	sb_field(b, buf);
}

enum ranks_left { LEFT_NONE, LEFT_RUNNING, LEFT_EXITED };

struct preload {
	int fd;                    /* the server connection, -1: none */
	struct child server;       /* our child; pid 0: the broker's */
	bool off;                  /* start ranks the usual way from now */
	char *mods;                /* "torch,numpy" */
	struct sbuf spec;          /* argv, cwd, env (NUL-separated) */
	int spec_argc;
	const char *mode;          /* script, module, code */
	const char *target;
	char **args;
	int nargs;
	char in[8192];             /* server lines, a partial one kept */
	size_t inlen;
	char **queue;              /* lines read while waiting for FORKED */
	int nqueue;
	pid_t *pid;                /* per rank: forked pid, 0: not forked */
	int *exit_status;          /* per rank: from EXITED, -1: none yet */
};

static int broker_child_fd = -1;   /* inherited from a sweep's distrun */

/* ------------------------------------------------------------ the program */

/* share/distrun/python/preload.py beside the distrun binary. */
static char *helper_path(void)
{
	char exe[PATH_MAX], *slash, *path;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	struct stat st;

	if (n <= 0)
		return NULL;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	if (asprintf(&path, "%s/../share/distrun/python/preload.py", exe) < 0)
		return NULL;
	if (stat(path, &st)) {
		free(path);
		return NULL;
	}
	return path;
}

/* "torch,numpy.linalg": dotted Python names, comma-separated. */
static bool good_modules(const char *s)
{
	bool start = true;

	for (; *s; s++) {
		if (*s == ',' || *s == '.') {
			if (start)
				return false;
			start = true;
		} else if (isalpha((unsigned char)*s) || *s == '_' ||
			   (!start && isdigit((unsigned char)*s))) {
			start = false;
		} else {
			return false;
		}
	}
	return !start;
}

static bool is_python(const char *argv0, bool from_python)
{
	const char *base = strrchr(argv0, '/');

	base = base ? base + 1 : argv0;
	if (from_python)
		return true;
	if (strncmp(base, "python", 6))
		return false;
	return strspn(base + 6, "0123456789.") == strlen(base + 6);
}

/* Splits PYTHON [OPTS] (SCRIPT | -m MOD | -c CODE) ARGS: the options go to
 * the server's command line.  Returns NULL, or why the program cannot be
 * preloaded. */
static const char *parse_argv(struct preload *p, char **argv, int argc,
			      int *nopts)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		*nopts = i;
		if (a[0] != '-') {
			p->mode = "script";
			p->target = a;
			break;
		}
		if (a[1] == 'm' || a[1] == 'c') {
			p->mode = a[1] == 'm' ? "module" : "code";
			if (a[2])
				p->target = a + 2;
			else if (i + 1 < argc)
				p->target = argv[++i];
			else
				return "-m or -c without its argument";
			break;
		}
		if (!strcmp(a, "--check-hash-based-pycs") && i + 1 < argc) {
			i++;
			continue;
		}
		if (a[1] == '-' || !a[1])
			return "a Python option it does not know";
		for (const char *c = a + 1; *c; c++) {
			if (strchr("bBdEIOPqsSuv", *c))
				continue;
			if (*c == 'W' || *c == 'X') {
				if (!c[1] && ++i >= argc)
					return "-W or -X without its argument";
				break;
			}
			return *c == 'i' ? "python -i" : *c == 'x' ? "python -x" :
			       "a Python option it does not know";
		}
	}
	if (!p->mode)
		return "no script, -m or -c";
	p->args = argv + i + 1;
	p->nargs = argc - i - 1;
	return NULL;
}

/* The variables that differ between jobs: not part of the server's
 * environment (each rank gets its own), nor of the broker's key. */
static bool per_job_var(const char *e)
{
	static const char *const names[] = {
		"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
		"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
		"ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
	};
	size_t n = strcspn(e, "=");

	if (!e[n])
		return true;   /* an unset slot of spawn.c's template */
	if (!strncmp(e, "DISTRUN_", 8) && strncmp(e, "DISTRUN_PYSTACKS=", 17))
		return true;
	if (!strncmp(e, "TORCHELASTIC_", 13))
		return true;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == n && !strncmp(e, names[i], n))
			return true;
	return false;
}

/* The server's argv (without its last two words), cwd and environment.
 * Returns NULL or why not. */
static const char *make_spec(struct job *job, struct preload *p)
{
	struct opts *o = job->o;
	char *helper = helper_path(), cwd[PATH_MAX], path0[PATH_MAX] = "";
	int nopts = 0;
	const char *why;

	if (!helper)
		return "share/distrun/python/preload.py is not installed";
	why = parse_argv(p, o->argv, o->argc, &nopts);
	if (why || !getcwd(cwd, sizeof(cwd))) {
		free(helper);
		return why ? why : "no working directory";
	}
	if (!strcmp(p->mode, "module")) {
		snprintf(path0, sizeof(path0), "%s", cwd);
	} else if (!strcmp(p->mode, "script")) {
		char *real = realpath(p->target, NULL), *slash;

		snprintf(path0, sizeof(path0), "%s", real ? real : p->target);
		free(real);
		slash = strrchr(path0, '/');
		if (slash)
			*(slash == path0 ? slash + 1 : slash) = 0;
		else
			snprintf(path0, sizeof(path0), "%s", cwd);
	}
	/* The path to exec, then argv as spawn.c would give it (argv[0] as
	 * the user wrote it: it is the ranks' sys.orig_argv[0]). */
	p->spec_argc = nopts + 3;
	sb_field(&p->spec, job->prog_path);
	for (int i = 0; i < nopts; i++)
		sb_field(&p->spec, o->argv[i]);
	sb_field(&p->spec, helper);
	sb_field(&p->spec, p->mods);
	sb_field(&p->spec, path0);
	sb_field(&p->spec, cwd);
	for (char **e = job->env; *e; e++)
		if (!per_job_var(*e))
			sb_field(&p->spec, *e);
	free(helper);
	return p->spec.oom ? "out of memory" : NULL;
}

char **preload_spec_split(const char *spec, size_t len, int argc,
			  const char *how, const char **cwd, char ***env)
{
	size_t n = 0;
	char **v;
	int k = 0;

	for (size_t i = 0; i < len; i++)
		n += !spec[i];
	v = calloc(n + 6, sizeof(*v));
	if (!v || (size_t)argc + 2 > n)
		goto fail;
	for (const char *s = spec; s < spec + len; s += strlen(s) + 1) {
		v[k++] = (char *)s;
		if (k == argc + 1) {
			v[k++] = (char *)how;
			v[k++] = "3";
			v[k++] = NULL;
		}
	}
	*cwd = v[argc + 4];
	*env = v + argc + 5;
	return v;
fail:
	free(v);
	return NULL;
}

void preload_server_child(struct child *c, char **v, char **env,
			  const char *cwd, int fd, int cgroup_fd,
			  const sigset_t *mask)
{
	*c = (struct child)CHILD_INIT;
	c->path = v[0];
	c->argv = v + 1;
	c->env = env;
	c->cwd = cwd;
	/* Its stdout is distrun's stderr: what the modules print at import
	 * is no rank's output. */
	c->in = CHILD_DEVNULL;
	c->out = 2;
	c->pass_fd = fd;
	c->new_pgroup = true;   /* the terminal's ^C is for distrun */
	c->pdeathsig = SIGKILL;
	c->cgroup_fd = cgroup_fd;
	c->mask = mask;
}

/* ------------------------------------------------------------ the wire */

/* Sends a frame; blocking, bounded by the socket's SO_SNDTIMEO. */
static int send_frame(int fd, const char *kind, const struct sbuf *body,
		      const int *fds, int nfds)
{
	unsigned char hdr[8];
	union {
		char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { hdr, sizeof(hdr) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	uint32_t len = (uint32_t)body->len;
	size_t off = 0;

	memcpy(hdr, kind, 4);
	for (int i = 0; i < 4; i++)
		hdr[4 + i] = (unsigned char)(len >> (8 * i));
	if (nfds) {
		struct cmsghdr *c;

		memset(&u, 0, sizeof(u));
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);

		if (n == (ssize_t)sizeof(hdr))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		return -1;
	}
	while (off < body->len) {
		ssize_t n = send(fd, body->s + off, body->len - off,
				 MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

/* Whether a signal that stops the job (not SIGCHLD) waits for the job
 * loop. */
static bool stop_pending(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	sigset_t set;

	if (sigpending(&set))
		return false;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigismember(&set, sigs[i]))
			return true;
	return false;
}

/* The next whole line from the server into line (NUL-terminated), waiting
 * at most until deadline (monotonic s, 0: do not wait); with stoppable,
 * gives up early when a signal to stop the job is pending.  1: a line,
 * 0: none yet, -1: EOF or error. */
static int read_line(struct preload *p, char *line, size_t n,
		     double deadline, bool stoppable)
{
	for (;;) {
		char *nl = memchr(p->in, '\n', p->inlen);
		struct pollfd pfd = { p->fd, POLLIN, 0 };
		double left = deadline - now_mono();
		int ms = deadline > 0 ? (int)(left * 1000) + 1 : 0;
		ssize_t got;

		if (nl) {
			size_t len = (size_t)(nl - p->in);

			snprintf(line, n, "%.*s", (int)len, p->in);
			p->inlen -= len + 1;
			memmove(p->in, nl + 1, p->inlen);
			return 1;
		}
		if (p->inlen == sizeof(p->in))
			p->inlen = 0;   /* a line this long is not ours */
		if ((deadline > 0 && left <= 0) || (stoppable && stop_pending()))
			return 0;
		if (stoppable && ms > 100)
			ms = 100;
		if (poll(&pfd, 1, ms) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (!pfd.revents) {
			if (deadline > 0)
				continue;
			return 0;
		}
		got = read(p->fd, p->in + p->inlen, sizeof(p->in) - p->inlen);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return -1;
		p->inlen += (size_t)got;
	}
}

static void close_conn(struct preload *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	p->off = true;
}

/* ------------------------------------------------------------ starting */

int preload_prepare(struct job *job)
{
	const char *mods = job->o->preload, *b = getenv(PRELOAD_BROKER_ENV);
	struct preload *p;

	if (b) {
		char *end;
		long fd = strtol(b, &end, 10);
		int type = 0;
		socklen_t tl = sizeof(type);

		unsetenv(PRELOAD_BROKER_ENV);
		if (!*end && fd > 2 && fd < INT_MAX && !getsockopt((int)fd,
		    SOL_SOCKET, SO_TYPE, &type, &tl) && type == SOCK_SEQPACKET &&
		    !fcntl((int)fd, F_SETFD, FD_CLOEXEC))
			broker_child_fd = (int)fd;
	}
	if (!mods)
		mods = getenv("DISTRUN_PRELOAD");
	if (!mods || !*mods)
		return 0;
	if (!good_modules(mods)) {
		fprintf(stderr, "distrun: %s: bad module list '%s' (expected "
			"names such as torch,numpy)\n", job->o->preload ?
			"--preload" : "DISTRUN_PRELOAD", mods);
		return -1;
	}
	p = calloc(1, sizeof(*p));
	if (!p || !(p->mods = strdup(mods))) {
		free(p);
		perror("distrun");
		return -1;
	}
	p->fd = -1;
	job->preload = p;
	return 0;
}

/* Starts our own server on one end of a socket pair; returns our end, or
 * -1 with errno. */
static int start_own(struct job *job, struct preload *p)
{
	const char *cwd;
	char **env, **argv = preload_spec_split(p->spec.s, p->spec.len, p->spec_argc,
					"client", &cwd, &env);
	int sv[2] = { -1, -1 }, e;
	struct child c;

	if (!argv || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		goto fail;
	preload_server_child(&c, argv, env, NULL, sv[1],
			     guard_cgroup_procs(job), &job->orig_mask);
	if (child_start(&c))
		goto fail;
	p->server = c;
	close(sv[1]);
	free(argv);
	return sv[0];
fail:
	e = errno;
	free(argv);
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	}
	errno = e;
	return -1;
}

/* Asks the sweep's broker for a shared server; returns our end. */
static int start_shared(struct preload *p)
{
	int sv[2];
	char byte;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov[2] = { { &byte, 1 }, { p->spec.s, p->spec.len } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2,
			      .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -1;
	byte = (char)p->spec_argc;
	memset(&u, 0, sizeof(u));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &sv[1], sizeof(int));
	if (sendmsg(broker_child_fd, &msg, MSG_NOSIGNAL) < 0) {
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	close(sv[1]);
	return sv[0];
}

void preload_begin(struct job *job)
{
	struct preload *p = job->preload;
	struct timeval tv = { (time_t)FORK_WAIT, 0 };
	double t0 = now_mono(), wait = READY_WAIT;
	const char *why;
	char line[1024];
	int rc;

	if (!p || p->fd >= 0 || p->off)
		return;
	p->off = true;
	if (!is_python(job->o->argv[0], job->o->python_from != NULL)) {
		if (job->o->preload || job->o->summary)
			fprintf(stderr, "distrun: --preload %s: %s is not a "
				"Python program; starting the ranks the usual "
				"way\n", p->mods, job->o->argv[0]);
		return;
	}
	why = make_spec(job, p);
	if (why) {
		fprintf(stderr, "distrun: --preload %s: cannot preload (%s); "
			"starting the ranks the usual way\n", p->mods, why);
		return;
	}
	p->pid = calloc(job->o->nranks, sizeof(*p->pid));
	p->exit_status = malloc(job->o->nranks * sizeof(*p->exit_status));
	if (!p->pid || !p->exit_status)
		return;
	for (int r = 0; r < job->o->nranks; r++)
		p->exit_status[r] = -1;
	if (broker_child_fd >= 0)
		p->fd = start_shared(p);
	if (p->fd < 0)
		p->fd = start_own(job, p);
	if (p->fd < 0) {
		fprintf(stderr, "distrun: --preload %s: cannot start %s: %s; "
			"starting the ranks the usual way\n", p->mods,
			job->prog_path, strerror(errno));
		return;
	}
	setsockopt(p->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (job->o->timeout > 0 && job->o->timeout < wait)
		wait = job->o->timeout;
	rc = read_line(p, line, sizeof(line), t0 + wait, true);
	if (rc == 1 && !strncmp(line, "READY ", 6)) {
		p->off = false;
		if (job->o->summary && p->server.pid > 0)
			fprintf(stderr, "distrun: ranks are forked from a warm "
				"%s that imported %s in %.2fs (--preload)\n",
				job->prog_path, p->mods, now_mono() - t0);
		else if (job->o->summary)
			fprintf(stderr, "distrun: ranks are forked from the "
				"warm %s (%s) this sweep or test run shares "
				"(--preload)\n", job->prog_path, p->mods);
		return;
	}
	if (rc == 1 && !strncmp(line, "FAIL ", 5))
		fprintf(stderr, "distrun: --preload %s: %s; starting the ranks "
			"the usual way\n", p->mods, line + 5);
	else if (rc == 0 && now_mono() < t0 + wait)
		;   /* a signal: the job loop stops the job */
	else
		fprintf(stderr, "distrun: --preload %s: the warm interpreter "
			"%s; starting the ranks the usual way\n", p->mods,
			rc ? "exited before it was ready" :
			"took too long to import");
	close_conn(p);
}

/* ------------------------------------------------------------ ranks */

/* Whether a TCP socket of this network namespace listens on port
 * (/proc/net/tcp and tcp6: "sl local_address rem_address st", the
 * address as HEX:PORT, state 0A for LISTEN). */
static bool port_listening(int port)
{
	static const char *const files[] = { "/proc/net/tcp", "/proc/net/tcp6" };

	for (size_t i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "re");
		char line[512];
		bool found = false;

		if (!f)
			continue;
		while (!found && fgets(line, sizeof(line), f)) {
			char local[128];
			unsigned int lport, st;
			char *colon;

			if (sscanf(line, "%*s %127s %*s %x", local, &st) != 2)
				continue;
			colon = strrchr(local, ':');
			if (colon && sscanf(colon + 1, "%x", &lport) == 1 &&
			    (int)lport == port && st == 0x0A)
				found = true;
		}
		fclose(f);
		if (found)
			return true;
	}
	return false;
}

/* Forked ranks start within a millisecond of each other, and torch's
 * TCPStore client, refused because rank 0 does not listen yet, retries
 * only after a whole second (c10d's socket.cpp): so once rank 0 is
 * forked, the others wait until it listens on MASTER_PORT, at most
 * STORE_WAIT (a program that never listens loses that much, once). */
static void wait_for_store(struct job *job)
{
	double end = now_mono() + STORE_WAIT;

	while (now_mono() < end && !port_listening(job->master_port))
		usleep(2000);
}

int preload_fork(struct job *job, int r, int in, int out, int err,
		 pid_t *pid)
{
	struct preload *p = job->preload;
	struct sbuf body = { 0 };
	int fds[MAX_FDS], nfds = 0, cgfd;
	char cwd[PATH_MAX], line[1024];
	double deadline = now_mono() + FORK_WAIT;

	if (!p || p->off || p->fd < 0 || !getcwd(cwd, sizeof(cwd)))
		return -1;
	if (r == 1 && p->pid[0] && !job->nodes && job->master_port > 0)
		wait_for_store(job);
	fds[nfds++] = in;
	fds[nfds++] = out;
	fds[nfds++] = err;
	if (job->seg_fd >= 0)
		fds[nfds++] = job->seg_fd;
	/* (opened on first use: the fd it returns, not the field) */
	if ((cgfd = guard_cgroup_procs(job)) >= 0)
		fds[nfds++] = cgfd;
	sb_fieldf(&body, "%d", r);
	sb_fieldf(&body, "%d", (int)getpid());
	sb_fieldf(&body, "%d", job->seg_fd);
	sb_fieldf(&body, "%d", job->cgroup_fd >= 0);
	sb_field(&body, cwd);
	sb_field(&body, p->mode);
	sb_field(&body, p->target);
	sb_fieldf(&body, "%d", p->nargs);
	for (int i = 0; i < p->nargs; i++)
		sb_field(&body, p->args[i]);
	for (char **e = job->env; *e; e++)
		if (strchr(*e, '='))
			sb_field(&body, *e);
	if (body.oom || send_frame(p->fd, "FORK", &body, fds, nfds)) {
		free(body.s);
		fprintf(stderr, "distrun: --preload: the warm interpreter is "
			"gone; starting the ranks the usual way\n");
		close_conn(p);
		return -1;
	}
	free(body.s);
	for (;;) {
		int rr = -1, n = 0, rc = read_line(p, line, sizeof(line),
						   deadline, false);
		long v;

		if (rc <= 0) {
			fprintf(stderr, "distrun: --preload: the warm "
				"interpreter did not fork rank %d; starting the "
				"ranks the usual way\n", r);
			close_conn(p);
			return -1;
		}
		if (sscanf(line, "FORKED %d %ld%n", &rr, &v, &n) == 2 &&
		    rr == r && !line[n] && v > 0) {
			*pid = (pid_t)v;
			p->pid[r] = *pid;
			p->exit_status[r] = -1;
			return 0;
		}
		if (!strncmp(line, "NOFORK ", 7)) {
			const char *why = strchr(line + 7, ' ');

			fprintf(stderr, "distrun: --preload: cannot fork rank "
				"%d (%s); starting the ranks the usual way\n", r,
				why ? why + 1 : "?");
			p->off = true;
			return -1;
		}
		/* EXITED and STATUS of ranks already forked: for the loop. */
		char **nq = realloc(p->queue, (p->nqueue + 1) * sizeof(*nq));

		if (nq)
			p->queue = nq;
		if (!nq || !(nq[p->nqueue] = strdup(line))) {
			close_conn(p);
			return -1;
		}
		p->nqueue++;
	}
}

bool preload_owns(const struct job *job, pid_t pid)
{
	return job->preload && job->preload->server.pid == pid && pid > 0;
}

static int rank_of(struct job *job, pid_t pid)
{
	struct preload *p = job->preload;

	for (int r = 0; p->pid && r < job->o->nranks; r++)
		if (p->pid[r] == pid)
			return r;
	return -1;
}

/* A rank the server can no longer report on (it died): gone, with the
 * status it was seen with, else killed by its PR_SET_PDEATHSIG. */
static void lost_ranks(struct job *job)
{
	struct preload *p = job->preload;
	struct rusage ru = { 0 };
	bool said = false;

	for (int r = 0; p->pid && r < job->o->nranks; r++) {
		struct rank *rk = &job->ranks[r];

		if (!p->pid[r])
			continue;
		if (!said)
			fprintf(stderr, "distrun: the warm interpreter died; the "
				"ranks it forked died with it\n");
		said = true;
		/* Reaped already if they came to us (we are the subreaper of
		 * the server's orphans); else their end is known here. */
		if (rk->pid == p->pid[r] && rk->state == RANK_RUNNING) {
			guard_forget(job, r);
			job->rank_exited(job, r, SIGKILL, &ru);
		} else if (rk->pid == p->pid[r] && p->exit_status[r] >= 0) {
			job->rank_exited(job, r, p->exit_status[r], &ru);
		}
		p->pid[r] = 0;
	}
}

static void handle_line(struct job *job, const char *line)
{
	struct preload *p = job->preload;
	long pid, v[10];
	int status, n = 0, r;

	if (sscanf(line, "EXITED %ld %d%n", &pid, &status, &n) == 2 &&
	    !line[n]) {
		struct sbuf body = { 0 };

		r = rank_of(job, (pid_t)pid);
		if (r < 0 || job->ranks[r].state != RANK_RUNNING)
			return;
		/* Never signalled again; the guard forgets it before the
		 * server may reap it (and its pid be reused). */
		job->ranks[r].state = RANK_EXITED;
		p->exit_status[r] = status;
		guard_forget(job, r);
		sb_fieldf(&body, "%ld", pid);
		if (body.oom || send_frame(p->fd, "REAP", &body, NULL, 0))
			close_conn(p);
		free(body.s);
		return;
	}
	if (sscanf(line, "STATUS %ld %d %ld %ld %ld %ld %ld %ld %ld %ld %ld%n",
		   &pid, &status, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		   &v[6], &v[7], &v[8], &n) == 11 && !line[n]) {
		struct rusage ru = {
			.ru_utime = { v[0] / 1000000, v[0] % 1000000 },
			.ru_stime = { v[1] / 1000000, v[1] % 1000000 },
			.ru_maxrss = v[2], .ru_minflt = v[3],
			.ru_majflt = v[4], .ru_nvcsw = v[5],
			.ru_nivcsw = v[6], .ru_inblock = v[7],
			.ru_oublock = v[8],
		};

		r = rank_of(job, (pid_t)pid);
		if (r < 0 || job->ranks[r].state != RANK_EXITED)
			return;
		p->pid[r] = 0;
		job->rank_exited(job, r, status, &ru);
	}
}

int preload_pollfds(struct job *job, struct pollfd *pfd, int max)
{
	struct preload *p = job->preload;

	if (!p || p->fd < 0 || max < 1)
		return 0;
	/* Lines read while forking: handled now (the job loop is the one
	 * place a rank's end is dealt with). */
	for (int i = 0; i < p->nqueue; i++) {
		handle_line(job, p->queue[i]);
		free(p->queue[i]);
	}
	p->nqueue = 0;
	pfd[0] = (struct pollfd){ p->fd, POLLIN, 0 };
	return 1;
}

void preload_handle(struct job *job, const struct pollfd *pfd, int n)
{
	struct preload *p = job->preload;
	char line[1024];
	int rc;

	if (!p || n < 1 || !pfd[0].revents)
		return;
	while ((rc = read_line(p, line, sizeof(line), 0, false)) == 1)
		handle_line(job, line);
	if (rc < 0) {
		close_conn(p);
		lost_ranks(job);
	}
}

void preload_release(struct job *job)
{
	struct preload *p = job->preload;

	if (!p)
		return;
	close_conn(p);
	/* With no client left it exits; one that does not is killed. */
	if (p->server.pid > 0)
		child_finish(&p->server, (int)(PRELOAD_EXIT_WAIT * 1000), NULL);
	for (int i = 0; i < p->nqueue; i++)
		free(p->queue[i]);
	free(p->queue);
	free(p->spec.s);
	free(p->mods);
	free(p->pid);
	free(p->exit_status);
	free(p);
	job->preload = NULL;
}
