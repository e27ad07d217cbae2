/*
 * child.c - starting and waiting for every child of the launcher that is
 * not a rank: a `distrun test` case, gdb, a Python probe, the --preload
 * server, the guard and the test runner's cleaner (launcher.h says the
 * steps; the ranks themselves are spawn.c's, which starts them into the
 * job's cgroup by clone3 and reads their exec errors from the job loop).
 *
 * Modelled on git's start_command(): what the child needs (argv, the
 * environment, the fds it is to have, /dev/null) is made in the parent,
 * so the child does only async-signal-safe work between vfork and exec:
 * setpgid, prctl, write, dup2, fcntl, close_range, chdir, sigaction,
 * sigprocmask, execve.  If a step fails, the child writes which step and
 * its errno into an O_CLOEXEC pipe and _exit()s (127: not found, 126: not
 * executable, 1: another step); the parent reads the pipe before
 * child_start() returns (or in child_report(), for a c.fn child that
 * need not be waited for), and 0 bytes mean the exec happened.  So a
 * program that cannot run is an error of child_start(), which the caller
 * words, never an exit status to interpret.
 *
 * Signals: the launcher blocks the ones it reads from a signalfd and
 * ignores SIGPIPE.  A blocked mask and an ignored disposition survive
 * exec, so the child gets the mask it is given (the launcher's own from
 * before it blocked anything) and SIGPIPE and every caught signal back at
 * their defaults.  A stop signal that was already ignored when distrun
 * started stays ignored, as a shell would have it (main.c).  Every signal
 * is blocked in the parent across vfork, so no handler of ours can run in
 * the child on the memory it borrows.
 *
 * A child that runs a function of ours instead of a program (the guard,
 * the cleaner) is forked, not vforked, and keeps the launcher's signals as
 * they are: it is the launcher's code, and it ends only by its own choice
 * or SIGKILL.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

extern char **environ;

/* What the child sends back when a step fails. */
struct child_err {
	int step;
	int err;
};

/* Closes every fd from lo up, except keep. */
static void close_from(unsigned lo, int keep)
{
	if (keep >= (int)lo) {
		if (keep > (int)lo)
			close_range(lo, (unsigned)keep - 1, 0);
		lo = (unsigned)keep + 1;
	}
	close_range(lo, ~0U, 0);
}

/* Makes src the child's fd dst; dup2 does nothing when they are one fd,
 * and then the fd must lose its close-on-exec flag itself. */
static int move_fd(int src, int dst)
{
	if (src == dst)
		return fcntl(dst, F_SETFD, 0);
	return dup2(src, dst);
}

void child_caught_signals(sigset_t *caught)
{
	sigemptyset(caught);
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		/* SIGPIPE is ignored in distrun, and exec would keep that. */
		if (!sigaction(sig, NULL, &sa) && (sig == SIGPIPE ||
		    (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN)))
			sigaddset(caught, sig);
	}
}

void child_reset_caught(const sigset_t *caught, const sigset_t *mask)
{
	sigset_t none;

	for (int sig = 1; sig < NSIG; sig++)
		if (sigismember(caught, sig) == 1)
			signal(sig, SIG_DFL);
	if (!mask) {
		sigemptyset(&none);
		mask = &none;
	}
	sigprocmask(SIG_SETMASK, mask, NULL);
}

void child_reset_signals(const sigset_t *mask)
{
	sigset_t caught;

	child_caught_signals(&caught);
	child_reset_caught(&caught, mask);
}

/* In the child, up to exec (or fn): async-signal-safe calls only, and no
 * return into child_start, whose frame the vforked child shares.  Returns
 * the exit status when a step failed, after telling the parent which. */
static int child_run(const struct child *c, int devnull, int errpipe,
		     pid_t parent)
{
	struct child_err ce = { CHILD_STEP_PARENT, 0 };
	int in = c->in < 0 ? devnull : c->in;
	int out = c->out < 0 ? devnull : c->out;
	int err = c->err < 0 ? devnull : c->err;

	if (c->new_pgroup)
		setpgid(0, 0);
	if (c->pdeathsig && (prctl(PR_SET_PDEATHSIG, c->pdeathsig) ||
			     getppid() != parent))
		goto fail;   /* the launcher is already gone */
	ce.step = CHILD_STEP_FDS;
	if (c->cgroup_fd >= 0)
		/* "0": the writer itself; failing is harmless (guard.c). */
		(void)!write(c->cgroup_fd, "0", 1);
	/* fd 3 is about to be the passed fd: keep the pipe out of its way. */
	if (c->pass_fd >= 0 && errpipe == 3 &&
	    (errpipe = fcntl(3, F_DUPFD_CLOEXEC, 4)) < 0)
		goto fail;
	if (move_fd(in, 0) < 0 || move_fd(out, 1) < 0 || move_fd(err, 2) < 0)
		goto fail;
	if (c->pass_fd >= 0 && move_fd(c->pass_fd, 3) < 0)
		goto fail;
	if (c->close_fds)
		close_from(c->pass_fd >= 0 ? 4 : 3, errpipe);
	ce.step = CHILD_STEP_CWD;
	if (c->cwd && chdir(c->cwd))
		goto fail;
	if (c->fn) {
		/* Set up: the parent's read ends here, with 0 bytes. */
		close(errpipe);
		return c->fn(c->arg);
	}
	child_reset_signals(c->mask);
	ce.step = CHILD_STEP_EXEC;
	execve(c->path ? c->path : c->argv[0], c->argv,
	       c->env ? c->env : environ);
fail:
	ce.err = errno;
	while (write(errpipe, &ce, sizeof(ce)) < 0 && errno == EINTR)
		;
	if (ce.step != CHILD_STEP_EXEC)
		return 1;
	return ce.err == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
}

/* Reads the child's report of a failed step: 0 if there is none (it has
 * exec'd, or fn runs), else -1 with c->step and errno. */
static int read_err(struct child *c, int fd)
{
	struct child_err ce;
	ssize_t n;

	while ((n = read(fd, &ce, sizeof(ce))) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(ce))
		return 0;
	c->step = ce.step;
	errno = ce.err;
	return -1;
}

/* Starts the child: forked to run fn, else vforked (it borrows our memory
 * until it execs, and we wait until then).  Its pid, or -1 with errno. */
static pid_t fork_child(const struct child *c, int devnull, int errpipe,
			pid_t self)
{
	sigset_t all, mask;
	pid_t pid;
	int e;

	if (c->fn) {
		pid = fork();
		if (pid == 0)
			_exit(child_run(c, devnull, errpipe, self));
		return pid;
	}
	/* No handler of ours runs in the child (see above). */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &mask);
	pid = vfork();
	if (pid == 0)
		_exit(child_run(c, devnull, errpipe, self));
	e = errno;
	sigprocmask(SIG_SETMASK, &mask, NULL);
	errno = e;
	return pid;
}

/* The last search (port.c and spawn.c both look the program up). */
static char *which_name, *which_path;
static int which_rc;
static bool which_denied;

int child_which(const char *name, char **out, bool *denied)
{
	const char *path = getenv("PATH");
	struct stat st;
	int rc = 1;

	*out = NULL;
	*denied = false;
	if (which_name && !strcmp(which_name, name)) {
		*denied = which_denied;
		if (which_rc)
			return which_rc;
		*out = strdup(which_path);
		return *out ? 0 : -1;
	}
	if (!path)
		path = "/usr/local/bin:/bin:/usr/bin";
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		char *cand;

		/* An empty element means the current directory. */
		if (asprintf(&cand, "%.*s%s%s", (int)(end - p), p,
			     end == p ? "" : "/", name) < 0)
			return -1;
		if (!stat(cand, &st) && S_ISREG(st.st_mode)) {
			if (!access(cand, X_OK)) {
				*out = cand;
				rc = 0;
				break;
			}
			*denied = true;
		}
		free(cand);
		if (!*end)
			break;
		p = end;
	}
	free(which_name);
	free(which_path);
	which_name = strdup(name);
	which_path = *out ? strdup(*out) : NULL;
	if (!which_name || (*out && !which_path)) {
		free(which_name);
		which_name = NULL;
	}
	which_rc = rc;
	which_denied = *denied;
	return rc;
}

int child_start(struct child *c)
{
	int ep[2] = { -1, -1 }, devnull = -1, rc = -1, e;
	pid_t self = getpid();

	c->pid = -1;
	c->report_fd = -1;
	c->step = CHILD_STEP_PARENT;
	if ((c->in < 0 || c->out < 0 || c->err < 0) &&
	    (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
		return -1;
	if (pipe2(ep, O_CLOEXEC))
		goto out;
	c->pid = fork_child(c, devnull, ep[1], self);
	if (c->pid < 0)
		goto out;
	/* Also here, so that killpg works before the child has run. */
	if (c->new_pgroup)
		setpgid(c->pid, c->pid);
	close(ep[1]);
	ep[1] = -1;
	if (c->fn && c->later) {
		c->report_fd = ep[0];
		ep[0] = -1;
		rc = 0;
		goto out;
	}
	rc = read_err(c, ep[0]);
	if (rc) {
		/* It has _exit()ed: leave no child behind. */
		e = errno;
		while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
			;
		c->pid = -1;
		errno = e;
	}
out:
	e = errno;
	if (ep[0] >= 0)
		close(ep[0]);
	if (ep[1] >= 0)
		close(ep[1]);
	if (devnull >= 0)
		close(devnull);
	errno = e;
	return rc;
}

int child_report(struct child *c)
{
	int rc;

	if (c->report_fd < 0)
		return 0;
	rc = read_err(c, c->report_fd);
	close(c->report_fd);
	c->report_fd = -1;
	return rc;
}

int child_wait(struct child *c, int timeout_ms, int *status)
{
	struct timespec tick = { 0, 5 * 1000 * 1000 };
	double until = now_mono() + timeout_ms / 1000.0;
	int st;

	if (c->pid <= 0) {
		errno = ECHILD;
		return -1;
	}
	for (;;) {
		pid_t got = waitpid(c->pid, &st, timeout_ms < 0 ? 0 : WNOHANG);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			c->pid = -1;   /* reaped by another waitpid */
			return -1;
		}
		if (got == c->pid)
			break;
		if (now_mono() >= until)
			return 1;
		nanosleep(&tick, NULL);
	}
	c->pid = -1;
	if (status)
		*status = st;
	return 0;
}

int child_finish(struct child *c, int grace_ms, int *status)
{
	int rc = child_wait(c, grace_ms, status);

	if (rc != 1)
		return rc;
	/* Still our unreaped child: its pid cannot have been reused. */
	kill(c->pid, SIGKILL);
	rc = child_wait(c, -1, status);
	return rc ? rc : 1;
}
