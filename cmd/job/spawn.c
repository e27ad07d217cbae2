/*
 * spawn.c - starting the ranks: environment, PATH lookup, fork and exec.
 *
 * Modelled on git's start_command(): everything a child needs (the
 * program's path, its argv, its whole environment, its fds) is made in the
 * parent before vfork() (or clone_into(), which also places the child in
 * the job's cgroup: clone_into.c), so the child does only
 * async-signal-safe work: setpgid, prctl, dup2, sigaction, sigprocmask,
 * execve.  If a step fails,
 * the child writes which step and its errno into the arguments it shares
 * with the parent and _exit()s with 127 (not found) or 126 (not
 * executable) when exec failed, 1 when setting up its fds did.  vfork and
 * clone_into() suspend the parent until the child has exec'd or exited,
 * so the parent reads them as soon as it runs again: no pipe is needed
 * (glibc's posix_spawn does the same).
 *
 * The job's secret (DISTRUN_SECRET, 32 bytes from getrandom in hex) goes
 * to the ranks in their environment only: /proc/PID/environ is readable by
 * the owner and root alone, unlike argv or a file in /tmp.  It is made
 * here, kept nowhere else, and never printed or reported.
 *
 * Every rank leads its own process group, so that stopping a rank also
 * stops what it forked (killpg).  PR_SET_PDEATHSIG makes the kernel SIGKILL
 * a rank when distrun dies, even by kill -9, so ranks never outlive it.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "preload.h"

extern char **environ;

/* The variables distrun sets; an inherited value is replaced. */
static const char *const set_vars[] = {
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
	"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
	"ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
	"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
	"TORCHELASTIC_USE_AGENT_STORE", DRI_ENV_JOB_ID, DRI_ENV_NRANKS,
	DRI_ENV_SECRET, DRI_ENV_SEG_FD, DRI_ENV_LINEBUF, DRI_ENV_STORE_FDS,
};
#define N_SET (sizeof(set_vars) / sizeof(set_vars[0]))

/* Slots in the environment template rewritten for every rank. */
enum { SLOT_RANK, SLOT_LOCAL_RANK, SLOT_ROLE_RANK, SLOT_RESTART,
       SLOT_LINEBUF, SLOT_STORE_FDS, N_SLOTS };
static char rank_str[N_SLOTS][96];
/* The listening sockets rank 0 inherits (port.c), in the next child. */
static const int *child_store_fds;
static int child_nstore_fds;
static size_t env_nalloc;
/* The line-buffering shim's LD_PRELOAD and ASAN_OPTIONS (or NULL). */
static char *linebuf_env[2];
/* The signals every child resets to their defaults (child.c), looked up
 * once for all the ranks. */
static sigset_t caught_sigs;

void spawn_set_restart(struct job *job, int count)
{
	(void)job;
	snprintf(rank_str[SLOT_RESTART], sizeof(rank_str[SLOT_RESTART]),
		 "TORCHELASTIC_RESTART_COUNT=%d", count);
}

static bool is_set_var(const char *entry)
{
	size_t n = strcspn(entry, "=");

	for (size_t i = 0; i < N_SET; i++)
		if (strlen(set_vars[i]) == n && !strncmp(entry, set_vars[i], n))
			return true;
	return false;
}

/* Whether entry's name is one of the n entries of env. */
static bool in_env(char **env, size_t n, const char *entry)
{
	size_t len = strcspn(entry, "=");

	for (size_t i = 0; i < n; i++)
		if (!strncmp(env[i], entry, len) && env[i][len] == '=')
			return true;
	return false;
}

static char *xasprintf(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

/* "DISTRUN_SECRET=<64 hex digits>", fresh from getrandom; NULL if the
 * kernel gives no randomness (never a weaker source). */
static char *make_secret(void)
{
	unsigned char raw[32];
	char *s;
	size_t got = 0;

	while (got < sizeof(raw)) {
		ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		got += (size_t)n;
	}
	s = malloc(sizeof(DRI_ENV_SECRET "=") + 2 * sizeof(raw));
	if (s) {
		int k = sprintf(s, DRI_ENV_SECRET "=");
		for (size_t i = 0; i < sizeof(raw); i++)
			k += sprintf(s + k, "%02x", raw[i]);
	}
	explicit_bzero(raw, sizeof(raw));
	return s;
}

/* The ranks' stdout line-buffered (unless --buffered): the shim
 * cmd/job/shim/linebuf.c, installed beside the binary in
 * ../lib/distrun/, goes after the user's own LD_PRELOAD; each rank's
 * DISTRUN_LINEBUF names its pipe (spawn_rank).  An ASan-built rank would
 * refuse to start with a library loaded before its runtime:
 * verify_asan_link_order=0 lets it (the shim calls setvbuf alone).
 * Without the shim (a binary copied alone) ranks keep stdio's default.
 * Returns 0, or -1 when out of memory. */
static int linebuf_setup(struct job *job)
{
	const char *old = getenv("LD_PRELOAD"), *asan = getenv("ASAN_OPTIONS");
	char exe[PATH_MAX], *slash, *so;
	ssize_t n;

	job->linebuf = false;
	if (job->o->buffered)
		return 0;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return 0;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return 0;
	*slash = 0;
	so = xasprintf("%s/../lib/distrun/libdistrun-linebuf.so", exe);
	if (!so)
		return -1;
	if (access(so, R_OK)) {
		free(so);
		return 0;
	}
	if (old && strstr(old, so))
		linebuf_env[0] = xasprintf("LD_PRELOAD=%s", old);
	else if (old && *old)
		linebuf_env[0] = xasprintf("LD_PRELOAD=%s:%s", old, so);
	else
		linebuf_env[0] = xasprintf("LD_PRELOAD=%s", so);
	free(so);
	if (!asan || !strstr(asan, "verify_asan_link_order"))
		linebuf_env[1] = xasprintf("ASAN_OPTIONS=%s%sverify_asan_link_order=0",
					   asan ? asan : "",
					   asan && *asan ? ":" : "");
	if (!linebuf_env[0] || (!linebuf_env[1] && (!asan ||
	    !strstr(asan, "verify_asan_link_order"))))
		return -1;
	job->linebuf = true;
	return 0;
}

static int build_env(struct job *job)
{
	const struct opts *o = job->o;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	/* Ours (N_SET and a few more, such as OMP_NUM_THREADS), then the
	 * inherited ones. */
	env = calloc(n + N_SET + 16, sizeof(*env));
	if (!env)
		return -1;
	job->env = env;
	env[k++] = rank_str[SLOT_RANK];
	env[k++] = rank_str[SLOT_LOCAL_RANK];
	env[k++] = rank_str[SLOT_ROLE_RANK];
	env[k++] = rank_str[SLOT_RESTART];
	env[k++] = rank_str[SLOT_LINEBUF];
	snprintf(rank_str[SLOT_LINEBUF], sizeof(rank_str[SLOT_LINEBUF]),
		 DRI_ENV_LINEBUF "=off");
	env[k++] = rank_str[SLOT_STORE_FDS];
	spawn_set_restart(job, job->restarts);
	/* The rest are the same for every rank. */
	env[k++] = xasprintf("WORLD_SIZE=%d", job_world_size(job));
	env[k++] = xasprintf("LOCAL_WORLD_SIZE=%d", o->nranks);
	env[k++] = xasprintf("ROLE_WORLD_SIZE=%d", job_world_size(job));
	env[k++] = xasprintf(DRI_ENV_NRANKS "=%d", job_world_size(job));
	env[k++] = xasprintf("MASTER_ADDR=%s", o->master_addr);
	env[k++] = xasprintf("MASTER_PORT=%d", job->master_port);
	env[k++] = xasprintf("TORCHELASTIC_RUN_ID=%s", job->run_id);
	env[k++] = xasprintf(DRI_ENV_JOB_ID "=%s", job->run_id);
	env[k++] = xasprintf("GROUP_RANK=%d", job->node_rank);
	env[k++] = xasprintf("GROUP_WORLD_SIZE=%d", job->nnodes > 1 ?
			     job->nnodes : 1);
	env[k++] = strdup("ROLE_NAME=default");
	env[k++] = xasprintf("TORCHELASTIC_MAX_RESTARTS=%d", o->max_restarts);
	/* Python ranks line-buffered, as torchrun's -u: lines come when
	 * printed, not in bursts at exit.  Any value the user set stays. */
	if (!getenv("PYTHONUNBUFFERED"))
		env[k++] = strdup("PYTHONUNBUFFERED=1");
	env[k++] = strdup("TORCHELASTIC_USE_AGENT_STORE=False");
	/* Several nodes: the secret every node derived alike (nodes.c). */
	env[k++] = job->node_secret[0] ?
		   xasprintf(DRI_ENV_SECRET "=%s", job->node_secret) :
		   make_secret();
	if (job->seg_fd >= 0)
		env[k++] = xasprintf(DRI_ENV_SEG_FD "=%d", job->seg_fd);
	if (!getenv("OMP_NUM_THREADS"))
		env[k++] = strdup("OMP_NUM_THREADS=1");
	env_nalloc = k;
	for (size_t i = N_SLOTS; i < k; i++)
		if (!env[i])
			return -1;
	/* diag's (the Python stack helper), freed by diag_release */
	size_t kd = k;
	if (diag_env(job, env, &k))
		return -1;
	if (linebuf_setup(job))
		return -1;
	for (int i = 0; i < 2; i++)
		if (linebuf_env[i])
			env[k++] = linebuf_env[i];
	for (size_t i = 0; i < n; i++)
		if (!is_set_var(environ[i]) && !in_env(env + kd, k - kd,
						       environ[i]))
			env[k++] = environ[i];
	env[k] = NULL;
	return 0;
}

/* Like execvp's search, done once in the parent.  Returns 0 and a
 * malloc'd path, or the exit status after printing why. */
static int resolve_program(const char *name, char **out)
{
	bool denied = false;
	struct stat st;
	int rc;

	if (strchr(name, '/')) {
		if (stat(name, &st)) {
			fprintf(stderr, "distrun: %s: %s\n", name,
				strerror(errno));
			return errno == ENOENT || errno == ENOTDIR ?
				EXIT_NOTFOUND : EXIT_NOEXEC;
		}
		if (S_ISDIR(st.st_mode) || access(name, X_OK)) {
			fprintf(stderr, "distrun: %s: %s\n", name,
				S_ISDIR(st.st_mode) ? "Is a directory" :
				strerror(EACCES));
			return EXIT_NOEXEC;
		}
		*out = strdup(name);
		return *out ? 0 : 1;
	}
	rc = child_which(name, out, &denied);
	if (rc <= 0)
		return rc ? 1 : 0;
	if (denied) {
		fprintf(stderr, "distrun: %s: Permission denied\n", name);
		return EXIT_NOEXEC;
	}
	if (!stat(name, &st) && S_ISREG(st.st_mode) && !access(name, X_OK))
		fprintf(stderr, "distrun: %s: command not found (there is "
			"./%s here: did you mean ./%s?)\n", name, name, name);
	else
		fprintf(stderr, "distrun: %s: command not found\n", name);
	return EXIT_NOTFOUND;
}

static void raise_fd_limit(void)
{
	struct rlimit rl;

	/* Two pipes per rank and a file per stream with --output-dir. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		/* Failing leaves the lower limit: spawn_rank names it if a
		 * rank then finds no fd. */
		if (setrlimit(RLIMIT_NOFILE, &rl))
			return;
	}
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);

	return n > t && !strcmp(s + n - t, tail);
}

/* As torchrun: a script (PROGRAM ending in .py) or a module (-m) runs
 * with Python, unless --no-python.  The interpreter is --python, else
 * $DISTRUN_PYTHON, else python3 from PATH (torchrun uses its own
 * sys.executable; distrun has none).  Rewrites o->argv to PYTHON [-m]
 * PROGRAM ARG...; returns 0, or 1 when out of memory. */
static int add_python(struct job *job)
{
	struct opts *o = job->o;
	const char *py = o->python, *from = "--python";
	char **argv;
	int k = 0;

	if (o->no_python || (!o->module && !ends_with(o->argv[0], ".py")))
		return 0;
	if (!py) {
		py = getenv("DISTRUN_PYTHON");
		from = "DISTRUN_PYTHON";
	}
	if (!py || !*py) {
		py = "python3";
		from = "the default";
	}
	argv = calloc((size_t)o->argc + 3, sizeof(*argv));
	if (!argv)
		return 1;
	argv[k++] = (char *)py;
	if (o->module)
		argv[k++] = "-m";
	memcpy(argv + k, o->argv, (size_t)o->argc * sizeof(*argv));
	o->argv = o->argv_alloc = argv;
	o->argc += k;
	o->python_from = from;
	return 0;
}

int spawn_prepare(struct job *job)
{
	struct opts *o = job->o;
	int rc;

	raise_fd_limit();
	if (add_python(job)) {
		perror("distrun");
		return 1;
	}
	rc = resolve_program(o->argv[0], &job->prog_path);
	if (rc && o->python_from) {
		fprintf(stderr, "distrun: (%s is run with Python, %s from %s; "
			"set --python or DISTRUN_PYTHON, or give --no-python)\n",
			o->argv[o->module ? 2 : 1], o->argv[0], o->python_from);
		return rc;
	}
	if (rc)
		return rc;
	if (o->python_from && o->summary)
		fprintf(stderr, "distrun: running %s with %s (%s, from %s)\n",
			o->argv[o->module ? 2 : 1], job->prog_path,
			o->argv[0], o->python_from);
	if (preload_prepare(job))
		return EXIT_USAGE;
	if (build_env(job)) {
		perror("distrun: environment");
		return 1;
	}
	job->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (job->devnull < 0) {
		perror("distrun: /dev/null");
		return 1;
	}
	return 0;
}

/* What the child needs: it reads them from our memory, which it shares
 * until it execs; and where it says why it could not exec. */
struct child_args {
	struct job *job;
	pid_t parent;
	int in, out, err;
	int move;                  /* write itself into the cgroup */
	bool failed;               /* out: step and errnum are set */
	int step;                  /* out: SPAWN_STEP_* that failed */
	int errnum;                /* out: its errno */
};

/* In the child, between vfork (or clone_into) and exec: async-signal-safe
 * calls only, and no return to the code that started it.  The parent
 * blocked every signal first, so no handler of distrun's can run here on
 * the memory we share with it; the handlers are reset to their defaults
 * before the rank's own mask is restored.  Returns the exit status when
 * it cannot exec. */
static int child_main(void *arg)
{
	struct child_args *a = arg;
	struct job *job = a->job;
	int step = SPAWN_STEP_FDS;

	setpgid(0, 0);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != a->parent)
		return EXIT_NOTFOUND;   /* distrun is already gone */
	/* distrun's gdb may trace us under Yama's ptrace_scope=1 (diag.c);
	 * EINVAL without Yama. */
	prctl(PR_SET_PTRACER, a->parent, 0, 0, 0);
	if (a->move && job->cgroup_fd >= 0)
		/* "0": the writer itself; failing is harmless (guard.c). */
		(void)!write(job->cgroup_fd, "0", 1);
	if (dup2(a->in, 0) < 0 || dup2(a->out, 1) < 0 || dup2(a->err, 2) < 0)
		goto fail;
	/* The segment is close-on-exec in distrun; the rank inherits it. */
	if (job->seg_fd >= 0 && fcntl(job->seg_fd, F_SETFD, 0) < 0)
		goto fail;
	/* So is MASTER_PORT's listening socket; rank 0 alone gets it. */
	for (int i = 0; i < child_nstore_fds; i++)
		if (fcntl(child_store_fds[i], F_SETFD, 0) < 0)
			goto fail;
	/* SIGPIPE and caught signals to their defaults, the mask distrun
	 * was started with: what every exec'd child gets (child.c). */
	child_reset_caught(&caught_sigs, &job->orig_mask);
	step = SPAWN_STEP_EXEC;
	execve(job->prog_path, job->o->argv, job->env);
fail:
	a->errnum = errno;
	a->step = step;
	a->failed = true;
	if (step != SPAWN_STEP_EXEC)
		return 1;
	return a->errnum == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
}

/* Starts the child: into the job's cgroup as it is made where clone3
 * allows (clone_into.c), else by vfork, the child moving itself.  Returns
 * its pid, or -1 with errno. */
static pid_t start_child(struct child_args *ca)
{
	/* clone3 refused once (an old kernel, seccomp, a cgroup it may not
	 * place into): the same answer would come for every rank. */
	static int clone_into_refused;
	struct job *job = ca->job;
	pid_t pid;

	if (job->cgroup_dirfd >= 0 && !clone_into_refused) {
		ca->move = 0;
		pid = clone_into(job->cgroup_dirfd, child_main, ca);
		if (pid >= 0)
			return pid;
		if (pid != -ENOSYS && pid != -EINVAL && pid != -E2BIG &&
		    pid != -EPERM && pid != -EACCES && pid != -EOPNOTSUPP &&
		    pid != -EBUSY) {
			errno = -pid;
			return -1;
		}
		clone_into_refused = 1;
	}
	ca->move = 1;
	guard_cgroup_procs(job);
	pid = vfork();
	if (pid == 0)
		_exit(child_main(ca));
	return pid;
}

/* DISTRUN_STORE_FDS: "3,4" for rank 0 when port.c listens for it,
 * empty for the others. */
static void store_fds_env(int rank)
{
	char *p = rank_str[SLOT_STORE_FDS], *end = p + sizeof(rank_str[0]);

	child_nstore_fds = rank ? 0 : port_store_fds(&child_store_fds);
	p += snprintf(p, (size_t)(end - p), DRI_ENV_STORE_FDS "=");
	for (int i = 0; i < child_nstore_fds && p < end; i++)
		p += snprintf(p, (size_t)(end - p), "%s%d", i ? "," : "",
			      child_store_fds[i]);
}

static int spawn_rank(struct job *job, int r, pid_t self)
{
	struct rank *rk = &job->ranks[r];
	int out[2] = { -1, -1 }, err[2] = { -1, -1 };
	int in = -1;
	sigset_t all, mask;
	struct child_args ca;
	int vfork_errno;
	pid_t pid;

	/* Our ends never block the job loop; the rank's do block. */
	if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) ||
	    input_pipe(job, r, &in) ||
	    fcntl(out[0], F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(err[0], F_SETFL, O_NONBLOCK) < 0)
		goto fail;
	snprintf(rank_str[SLOT_RANK], 48, "RANK=%d", job->rank_offset + r);
	snprintf(rank_str[SLOT_LOCAL_RANK], 48, "LOCAL_RANK=%d", r);
	snprintf(rank_str[SLOT_ROLE_RANK], 48, "ROLE_RANK=%d",
		 job->rank_offset + r);
	if (job->linebuf) {
		struct stat st;

		if (fstat(out[1], &st) == 0)
			snprintf(rank_str[SLOT_LINEBUF], 48,
				 DRI_ENV_LINEBUF "=%llu:%llu",
				 (unsigned long long)st.st_dev,
				 (unsigned long long)st.st_ino);
	}
	store_fds_env(job->rank_offset + r);
	rk->t_start = now_mono();
	/* The child borrows our memory until it execs (vfork, or clone3
	 * with CLONE_VM), so no page tables are copied (fork cost ~1 ms per
	 * rank on a small VM).  The child only makes system calls.  No
	 * signal is delivered to either side until it has exec'd (see
	 * child_main). */
	/* --preload: forked from the warm interpreter instead (preload.c). */
	if (!preload_fork(job, r, in, out[1], err[1], &pid))
		goto started;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &mask);
	ca = (struct child_args){ .job = job, .parent = self, .in = in,
				  .out = out[1], .err = err[1] };
	pid = start_child(&ca);
	vfork_errno = errno;
	sigprocmask(SIG_SETMASK, &mask, NULL);
	if (pid < 0) {
		errno = vfork_errno;
		goto fail;
	}
	/* The child has exec'd or exited by now, its process group made
	 * (setpgid before exec), so killpg already works. */
	if (ca.failed) {
		rk->exec_errno = ca.errnum;
		rk->spawn_step = ca.step;
	}
started:
	guard_add(job, r, pid);
	close(out[1]);
	close(err[1]);
	if (in != job->devnull)
		close(in);
	rk->pid = pid;
	rk->state = RANK_RUNNING;
	rk->out_fd = out[0];
	rk->err_fd = err[0];
	job->nlive++;
	job->nopen += 2;
	return 0;
fail:
	if (errno == EMFILE || errno == ENFILE) {
		struct rlimit rl = { 0, 0 };
		int e = errno;

		getrlimit(RLIMIT_NOFILE, &rl);
		/* The launcher keeps a stdout and a stderr pipe per rank, and
		 * one to its stdin with --stdin. */
		fprintf(stderr, "distrun: cannot start rank %d: %s (%s; %d ranks "
			"need about %d, the limit is %llu: raise it with "
			"ulimit -n)\n", r, strerror(e), e == EMFILE ?
			"the launcher's open files" : "the system's open files",
			job->o->nranks, 3 * job->o->nranks + 16,
			(unsigned long long)rl.rlim_cur);
		errno = e;
	} else {
		fprintf(stderr, "distrun: cannot start rank %d: %s\n", r,
			strerror(errno));
	}
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
	}
	if (in >= 0 && in != job->devnull)
		close(in);
	return -1;
}

int spawn_all(struct job *job)
{
	pid_t self = getpid();
	int rc = 0;

	/* Larger stdout pipes mean fewer reads and context switches for
	 * chatty ranks; but the kernel counts pipe capacity per user (past
	 * fs.pipe-user-pages-soft, 64 MiB by default, new pipes get one
	 * page), so all of them together stay within 16 MiB.  A pipe grows
	 * when a read first finds it full (mux_read): most ranks never
	 * fill one, and F_SETPIPE_SZ costs each rank ~2 us here. */
	preload_begin(job);
	child_caught_signals(&caught_sigs);
	job->pipe_size = 0;
	for (int sz = 1 << 20; sz > 65536; sz /= 2)
		if ((long)sz * job->o->nranks <= 16L << 20) {
			job->pipe_size = sz;
			break;
		}

	for (int r = 0; r < job->o->nranks; r++)
		if (spawn_rank(job, r, self)) {
			rc = -1;
			break;
		}
	guard_started(job);
	return rc;
}

void spawn_release(struct job *job)
{
	preload_release(job);
	if (job->env) {
		for (size_t i = N_SLOTS; i < env_nalloc; i++) {
			/* the secret's copy goes as it came: wiped */
			if (job->env[i] && !strncmp(job->env[i],
						    DRI_ENV_SECRET "=",
						    sizeof(DRI_ENV_SECRET)))
				explicit_bzero(job->env[i], strlen(job->env[i]));
			free(job->env[i]);
		}
		free(job->env);
		job->env = NULL;
	}
	for (int i = 0; i < 2; i++) {
		free(linebuf_env[i]);
		linebuf_env[i] = NULL;
	}
	explicit_bzero(job->node_secret, sizeof(job->node_secret));
	free(job->prog_path);
	job->prog_path = NULL;
	if (job->devnull >= 0)
		close(job->devnull);
	job->devnull = -1;
}
