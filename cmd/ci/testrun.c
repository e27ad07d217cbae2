/*
 * testrun.c - the runner of `distrun test` and the sweeps: its set-up,
 * its cases, and the one poll() loop that runs them.
 *
 * The loop waits on a signalfd (SIGCHLD, and SIGINT, SIGTERM, SIGHUP,
 * forwarded to every running case; a second one kills them), the preload
 * broker's requests, and each case's hard deadline: its timeout plus the
 * grace and a margin, past which the child distrun is SIGKILLed (its
 * guard then kills the ranks).  With -j N, cases start in list order
 * while fewer than N run and their ranks fit in the CPUs that
 * sched_getaffinity() allows; a case that does not fit waits for room
 * (none after it overtakes it), and a case larger than the machine runs
 * alone.  A failed case to retry goes first, before what is queued.
 * Starting a case and judging its end are testcase.c's.
 *
 * Without --output-dir the cases write under a fresh TMPDIR/distrun-test.*
 * that a small cleaner process removes when `distrun test` ends however
 * it ends (kill -9 too): it waits for EOF on a pipe only we hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "testrun.h"
#include "preload.h"

int testrun_cpu_count(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}


static int rm_entry(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void rm_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void signal_slots(struct slot *slots, int n, int sig)
{
	for (int i = 0; i < n; i++)
		if (slots[i].c >= 0)
			killpg(slots[i].pid, sig);
}

/* Runs every case not already decided (skips).  Returns -1 on a failure
 * of distrun itself. */
int testrun_run_cases(struct runner *ru, char **prefix, int nprefix)
{
	struct slot *slots = calloc(ru->jobs, sizeof(*slots));
	int *queue = malloc((ru->ncases + 1) * sizeof(int));
	int qhead = 0, qlen = 0, nrun = 0, ranks_running = 0, rc = -1;

	if (!slots || !queue) {
		perror("distrun");
		goto out;
	}
	for (int i = 0; i < ru->jobs; i++)
		slots[i].c = -1;
	for (int i = 0; i < ru->ncases; i++)
		if (ru->cases[i].verdict != CI_SKIP && !ru->cases[i].attempts)
			queue[qlen++] = i;
	while (nrun || (qhead < qlen && !ru->interrupted)) {
		/* The signals, and the cases' requests for a warm
		 * interpreter (--preload, preload.c). */
		struct pollfd pfd[2] = { { ru->sigfd, POLLIN, 0 },
					 { preload_broker_fd(), POLLIN, 0 } };
		double now, next = 0;
		int timeout_ms = -1;

		/* Start what fits, in order. */
		while (qhead < qlen && !ru->interrupted && nrun < ru->jobs) {
			struct ci_case *c = &ru->cases[queue[qhead]];
			int k;

			if (!ru->oversubscribe && nrun &&
			    ranks_running + c->n > ru->cores)
				break;
			for (k = 0; slots[k].c >= 0; k++)
				;
			c->cores = ru->cores;
			c->oversubscribed = ranks_running + c->n > ru->cores;
			if (testrun_start_case(ru, &slots[k], queue[qhead],
					       prefix, nprefix)) {
				/* Not started: an error verdict, move on. */
				c->verdict = CI_ERROR;
				c->type = "error";
				free(c->message);
				c->message = strdup("distrun could not start "
						    "this case");
				qhead++;
				continue;
			}
			qhead++;
			nrun++;
			ranks_running += c->n;
		}
		if (!nrun)
			continue;
		now = now_mono();
		for (int i = 0; i < ru->jobs; i++) {
			struct slot *s = &slots[i];

			if (s->c < 0 || !s->deadline)
				continue;
			if (now >= s->deadline && !s->killed) {
				fprintf(stderr, "distrun: %s: distrun did not "
					"end by its deadline; killing it\n",
					ru->cases[s->c].name);
				killpg(s->pid, SIGKILL);
				s->killed = true;
			}
			if (!s->killed && (!next || s->deadline < next))
				next = s->deadline;
		}
		if (next)
			timeout_ms = (int)((next - now) * 1000) + 1;
		if (poll(pfd, 2, timeout_ms) < 0 && errno != EINTR) {
			perror("distrun: poll");
			signal_slots(slots, ru->jobs, SIGKILL);
		}
		if (pfd[1].revents)
			preload_broker_handle();
		for (;;) {
			struct signalfd_siginfo si;
			int sig;

			if (read(ru->sigfd, &si, sizeof(si)) != sizeof(si))
				break;
			sig = (int)si.ssi_signo;
			if (sig == SIGCHLD)
				continue;
			if (ru->interrupted) {
				signal_slots(slots, ru->jobs, SIGKILL);
				continue;
			}
			ru->interrupted = sig;
			if (!ru->sweep)
				fprintf(stderr, "distrun: got %s, stopping the "
					"tests (again to kill them)\n",
					signal_name(sig));
			signal_slots(slots, ru->jobs, sig);
		}
		for (;;) {
			int status, i;
			pid_t pid = waitpid(-1, &status, WNOHANG);

			if (pid <= 0)
				break;
			for (i = 0; i < ru->jobs; i++)
				if (slots[i].c >= 0 && slots[i].pid == pid)
					break;
			if (i == ru->jobs)
				continue;
			nrun--;
			ranks_running -= ru->cases[slots[i].c].n;
			if (testrun_finish_case(ru, &slots[i], status)) {
				/* Retry first, before what is queued. */
				queue[--qhead] = slots[i].c;
			}
			slots[i].c = -1;
		}
	}
	for (int i = 0; i < ru->ncases; i++)
		if (!ru->cases[i].attempts && ru->cases[i].verdict == CI_ERROR &&
		    !ru->cases[i].message)
			ru->cases[i].message = strdup(ru->interrupted ?
				"not run: stopped by a signal" : "not run");
	rc = 0;
out:
	free(slots);
	free(queue);
	return rc;
}

/* ------------------------------------------------------------ set-up */

/* The cleaner: waits for EOF on fd 3, then removes the directory. */
static int cleaner_main(void *dir)
{
	char c;

	while (read(3, &c, 1) < 0 && errno == EINTR)
		;
	/* Twice: a case killed with us may still have been writing. */
	rm_tree(dir);
	usleep(200000);
	rm_tree(dir);
	return 0;
}

/* Forks the process that removes dir once we are gone (EOF on the pipe
 * whose write end only we hold, close-on-exec).  It has the terminal's
 * signals blocked, as the runner has (child.c keeps them for a forked
 * function), so a ^C does not end it before it has cleaned; and it keeps
 * no fd but its end of the pipe.  Without it the directory is still
 * removed at a normal end. */
static void tmp_cleaner(const char *dir)
{
	struct child c = CHILD_INIT;
	int fds[2];

	if (pipe2(fds, O_CLOEXEC))
		return;
	c.fn = cleaner_main;
	c.arg = (void *)dir;
	c.in = c.out = c.err = CHILD_DEVNULL;
	c.pass_fd = fds[0];
	c.close_fds = true;
	if (child_start(&c))
		close(fds[1]);
	close(fds[0]);
	/* fds[1] is closed when we exit: that is the signal. */
}

int testrun_setup(struct runner *ru)
{
	sigset_t set;

	ru->cores = testrun_cpu_count();
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, &ru->orig_mask))
		goto fail;
	ru->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (ru->sigfd < 0)
		goto fail;
	/* Without it, each case starts its own warm interpreter. */
	preload_broker_init(&ru->orig_mask);
	if (!ru->output_dir || ru->sweep || ru->html) {
		const char *t = getenv("TMPDIR");

		snprintf(ru->tmp, sizeof(ru->tmp), "%s/distrun-test.XXXXXX",
			 t && *t ? t : "/tmp");
		if (!mkdtemp(ru->tmp)) {
			fprintf(stderr, "distrun: %s: %s\n", ru->tmp,
				strerror(errno));
			ru->tmp[0] = 0;
			return -1;
		}
		tmp_cleaner(ru->tmp);
	}
	return 0;
fail:
	perror("distrun: signals");
	return -1;
}

void testrun_release(struct runner *ru)
{
	preload_broker_release();
	for (int i = 0; i < ru->ncases; i++) {
		free(ru->cases[i].message);
		free(ru->cases[i].text);
		free(ru->cases[i].out);
		free(ru->cases[i].err);
	}
	free(ru->cases);
	if (ru->tmp[0])
		rm_tree(ru->tmp);
	if (ru->sigfd >= 0)
		close(ru->sigfd);
}

int testrun_add_case(struct runner *ru, struct ci_list *l, struct ci_test *t,
		     int n)
{
	struct ci_case *nc = realloc(ru->cases, (ru->ncases + 1) *
				     sizeof(*nc)), *c;

	if (!nc) {
		perror("distrun");
		return -1;
	}
	ru->cases = nc;
	c = &nc[ru->ncases++];
	memset(c, 0, sizeof(*c));
	c->test = t;
	c->list = l;
	c->n = n;
	c->cores = ru->cores;
	snprintf(c->name, sizeof(c->name), "%s[n=%d]", t->name, n);
	/* Until it has run: a case never started (Ctrl-C) is no pass. */
	c->verdict = CI_ERROR;
	c->type = "error";
	if (t->skip) {
		/* Reads "SKIP ... skip: needs a GPU", not "error: ...". */
		c->verdict = CI_SKIP;
		c->type = "skip";
		c->message = strdup(t->skip);
		c->start = now_real();
	}
	return 0;
}
