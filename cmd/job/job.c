/*
 * job.c - the event loop that runs a job from its spawned ranks to its end.
 *
 * One poll() waits on every rank's two output pipes, a signalfd and the
 * nearest deadline (--timeout, or the end of the grace period).  Signals
 * are blocked and read from the signalfd here, never handled in async
 * handlers (as tini does): SIGCHLD means reap with wait4() (which gives the
 * rusage for the summary); SIGINT, SIGTERM, SIGHUP and SIGQUIT are
 * forwarded to every rank's process group and start the stop; a second one
 * sends SIGKILL at once.  SIGTSTP and SIGCONT suspend and resume the job.
 *
 * Stopping: the first rank that fails, the timeout, a signal, or a closed
 * stdout starts it.  Running ranks get SIGTERM (or the forwarded signal) on
 * their whole process group, then SIGKILL when the grace period ends.  The
 * job ends when every rank is reaped, every pipe is at EOF and distrun (a
 * child subreaper) has no child left: a rank's leftover background
 * processes are stopped the same way, so nothing outlives the job.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "preload.h"

/* How long to wait for pipes to close after SIGKILL before giving up. */
#define AFTER_KILL_WAIT 10.0
/* How long a stopped job waits after SIGKILL for a reader of its output
 * that does not read (see job_tick). */
#define OUTPUT_GIVE_UP 2.0

/* Sends sig (if not 0) to every direct child but the guard, and to its
 * process group, and returns how many children there are.  With
 * PR_SET_CHILD_SUBREAPER these include the orphaned descendants of ranks
 * that have exited.  A child not yet reaped keeps its pid and process
 * group id from being reused, so these signals cannot reach a stranger. */
/* The list of distrun's direct children (NULL if it cannot be read). */
static FILE *children_open(void)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/children",
		 (int)getpid());
	return fopen(path, "re");
}

/* The next child in the list but the guard, or -1 at its end.  The
 * list is "PID PID ...": read by hand, as fscanf's first call alone cost
 * ~30 us, a good part of the end of a short job. */
static int children_next(FILE *f, const struct job *job)
{
	int c = getc(f);

	while (c != EOF) {
		long pid = 0;

		while (c >= '0' && c <= '9' && pid <= INT_MAX) {
			pid = pid * 10 + (c - '0');
			c = getc(f);
		}
		if (pid > 0 && pid <= INT_MAX && pid != job->guard_pid &&
		    !preload_owns(job, (int)pid))
			return (int)pid;
		/* the space after it, or a character that is no digit */
		c = getc(f);
	}
	return -1;
}

static int signal_children(struct job *job, int sig)
{
	FILE *f = children_open();
	int pid, n = 0;

	if (!f)
		return 0;
	while ((pid = children_next(f, job)) > 0) {
		pid_t pgid;

		n++;
		if (!sig)
			continue;
		pgid = getpgid(pid);
		kill(pid, sig);
		if (pgid > 0 && pgid != getpgrp())
			killpg(pgid, sig);
	}
	fclose(f);
	return n;
}

/* Signals the process group of every running rank (a rank not yet reaped
 * keeps its group id ours), and what exited ranks left behind. */
static void signal_ranks(struct job *job, int sig)
{
	for (int r = 0; r < job->o->nranks; r++) {
		struct rank *rk = &job->ranks[r];

		if (rk->state != RANK_RUNNING)
			continue;
		/* A rank someone stopped (SIGSTOP, a debugger) may be why the
		 * job failed or hung: the summary says so (report.c).  (After
		 * a Ctrl-Z distrun continued the ranks as it was continued.) */
		if (sig != SIGKILL && !rk->stopped) {
			char st = diag_proc_state(rk->pid);

			if (st == 'T' || st == 't')
				rk->suspended = st;
		}
		if (sig != SIGKILL)
			rk->stopped = true;
		killpg(rk->pid, sig);
		/* A stopped rank (SIGSTOP, Ctrl-Z) acts on the signal only
		 * once continued. */
		if (sig != SIGKILL)
			killpg(rk->pid, SIGCONT);
	}
	signal_children(job, sig);
}

void job_stop(struct job *job, int sig)
{
	if (job->stopping)
		return;
	nodes_job_stopping(job);    /* the other nodes stop too */
	job->stopping = true;
	job->kill_at = now_mono() + job->o->grace;
	signal_ranks(job, sig);
}

/* Why exec said "Exec format error": a script without "#!", or a binary
 * for another machine. */
static const char *exec_format_hint(const struct job *job)
{
	char head[4] = { 0 };
	FILE *f = fopen(job->prog_path, "re");

	if (f) {
		if (fread(head, 1, sizeof(head), f)) {}
		fclose(f);
	}
	if (!memcmp(head, "\177ELF", 4))
		return " (a binary for another machine or system?)";
	if (head[0] != '#' || head[1] != '!')
		return " (a script needs a first line such as #!/bin/sh; or "
		       "name its interpreter: distrun ... sh SCRIPT)";
	return "";
}

static void announce_failure(struct job *job, int r)
{
	struct rank *rk = &job->ranks[r];
	char st[64];

	if (rk->exec_errno && rk->spawn_step == SPAWN_STEP_FDS)
		fprintf(stderr, "distrun: rank %d: cannot set up its stdin, "
			"stdout and stderr (dup2): %s\n", r,
			strerror(rk->exec_errno));
	else if (rk->exec_errno)
		fprintf(stderr, "distrun: rank %d: cannot run %s: %s%s\n", r,
			job->o->argv[0], strerror(rk->exec_errno),
			rk->exec_errno == ENOEXEC ? exec_format_hint(job) : "");
	else if (job->nodes)
		fprintf(stderr, "distrun: rank %d on node %d %s after %.3fs\n",
			job->rank_offset + r, job->node_rank,
			rank_status_str(rk, st, sizeof(st)), rk->t_end - job->t0);
	else
		fprintf(stderr, "distrun: rank %d %s after %.3fs\n", r,
			rank_status_str(rk, st, sizeof(st)),
			rk->t_end - job->t0);
}

/* Rank r has exited with wait status and rusage ru (already struck from
 * the guard's list): its bookkeeping, and the stop if it failed first.
 * reap() calls it, and preload.c (through job->rank_exited) for ranks the
 * warm interpreter forked. */
static void job_rank_exited(struct job *job, int r, int status,
		     const struct rusage *ru)
{
	struct rank *rk = &job->ranks[r];

	rk->state = RANK_EXITED;
	rk->status = status;
	rk->ru = *ru;
	rk->t_end = now_mono();
	job->nlive--;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		char st[64];

		/* The survivors fail now, not at their timeout. */
		segment_abort(job, r, rank_status_str(rk, st, sizeof(st)));
	}
	if ((!WIFEXITED(status) || WEXITSTATUS(status)) &&
	    job->first_fail < 0 && !job->stopping) {
		job->first_fail = r;
		rk->stopped = false;
		announce_failure(job, r);
		diag_rank_failed(job, r);
		job_stop(job, SIGTERM);
	}
}

/* Reaps every child that has exited.  A rank is first only looked at
 * (WNOWAIT) and struck from the guard's list, and reaped after: so the
 * guard never holds a pid that may already belong to someone else. */
static void reap(struct job *job)
{
	struct rusage ru;
	siginfo_t si;
	int status;
	pid_t pid;

	for (;;) {
		struct rank *rk = NULL;
		int r;

		si.si_pid = 0;
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) ||
		    !si.si_pid)
			break;
		pid = si.si_pid;
		for (r = 0; r < job->o->nranks; r++)
			if (job->ranks[r].pid == pid &&
			    job->ranks[r].state == RANK_RUNNING) {
				rk = &job->ranks[r];
				break;
			}
		if (rk)
			guard_forget(job, r);
		while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
			;
		if (!rk) {
			/* An orphaned grandchild, or the guard (gone early:
			 * carry on without it). */
			if (pid == job->guard_pid)
				job->guard_pid = 0;
			continue;
		}
		job_rank_exited(job, r, status, &ru);
	}
}

/* Ctrl-Z: the ranks, in their own process groups, do not get the
 * terminal's SIGTSTP, so pass it on, then stop distrun itself; the shell's
 * SIGCONT (fg, bg) resumes distrun here, and is passed on as well. */
static void suspend_or_resume(struct job *job, int sig)
{
	for (int r = 0; r < job->o->nranks; r++)
		if (job->ranks[r].state == RANK_RUNNING)
			killpg(job->ranks[r].pid, sig);
	if (sig == SIGTSTP) {
		mux_flush(job);
		kill(getpid(), SIGSTOP);
		suspend_or_resume(job, SIGCONT);
	}
}

static void handle_signals(struct job *job)
{
	struct signalfd_siginfo si;

	while (read(job->sigfd, &si, sizeof(si)) == sizeof(si)) {
		int sig = (int)si.ssi_signo;

		if (sig == SIGCHLD)
			continue;   /* reaped below in any case */
		if (sig == SIGTSTP || sig == SIGCONT) {
			suspend_or_resume(job, sig);
			continue;
		}
		if (job->stopping || job->stop_signal) {
			fprintf(stderr, "distrun: got %s again, killing the "
				"job\n", signal_name(sig));
			job->kill_at = now_mono();
			continue;
		}
		if (job->first_fail < 0 && !job->timed_out)
			job->stop_signal = sig;
		if (!job->stopping) {
			char why[64];

			snprintf(why, sizeof(why), "got %s", signal_name(sig));
			diag_report(job, why);
		}
		fprintf(stderr, "distrun: got %s, stopping the job "
			"(again to kill it)\n", signal_name(sig));
		job_stop(job, sig);
	}
	reap(job);
}

static void check_timers(struct job *job)
{
	double t = now_mono();

	if (job->o->timeout > 0 && !job->stopping &&
	    t >= job->t0 + job->o->timeout) {
		uint8_t *running = calloc(job->o->nranks, 1);
		char list[256];

		job->timed_out = true;
		for (int r = 0; running && r < job->o->nranks; r++)
			running[r] = job->ranks[r].state == RANK_RUNNING;
		snprintf(list, sizeof(list), "timeout after %gs",
			 job->o->timeout);
		diag_report(job, list);
		/* The verdict in one line, after the diagnosis: the odd rank,
		 * the call and its seq when the diagnosis found them. */
		if (diag_verdict_line(job))
			fprintf(stderr, "distrun: timeout after %gs: %s\n",
				job->o->timeout, diag_verdict_line(job));
		else
			fprintf(stderr, "distrun: timeout after %gs; ranks "
				"still running: %s\n", job->o->timeout,
				running ? rank_list_str(running,
					job->o->nranks, list, sizeof(list)) :
				"?");
		free(running);
		job_stop(job, SIGTERM);
	}
	if (job->stopping && !job->killed && t >= job->kill_at) {
		if (job->leftovers)
			fprintf(stderr, "distrun: left-behind processes still "
				"run after %gs; sending SIGKILL\n",
				job->o->grace);
		job->killed = true;
		signal_ranks(job, SIGKILL);
	} else if (job->killed) {
		/* Orphans reparented to us since (no SIGCHLD tells of it). */
		signal_children(job, SIGKILL);
	}
}

/* Once every rank has exited, what is left (processes still holding the
 * pipes, or reparented to us) is stopped like a rank.  A rank's exit
 * closes its pipes before we can reap it, so pipes still open after a
 * poll that found nothing to read are held by its descendants. */
/* "sleep 100" from /proc/PID/cmdline (cut to fit), and the rank whose
 * environment it inherited (-1 if unknown). */
static int describe_pid(int pid, char *cmd, size_t n)
{
	char path[64], env[8192];
	int fd, rank = -1;
	ssize_t len;

	snprintf(cmd, n, "?");
	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		len = read(fd, cmd, n - 1);
		if (len > 0) {
			cmd[len] = 0;
			for (ssize_t i = 0; i < len; i++)
				if (!cmd[i] && i + 1 < len)
					cmd[i] = ' ';
		}
		close(fd);
	}
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		len = read(fd, env, sizeof(env) - 1);
		for (ssize_t i = 0; len > 0 && i < len; ) {
			if (!strncmp(env + i, "RANK=", 5)) {
				rank = atoi(env + i + 5);
				break;
			}
			i += strnlen(env + i, len - i) + 1;
		}
		close(fd);
	}
	return rank;
}

/* Says which rank left which processes behind, and what is done. */
static void announce_leftovers(struct job *job)
{
	FILE *f = children_open();
	int pid, n = 0;

	if (!f)
		return;
	while ((pid = children_next(f, job)) > 0) {
		char cmd[80];
		int r;

		if (++n > 8)
			continue;
		r = describe_pid(pid, cmd, sizeof(cmd));
		if (r >= 0 && r < job->o->nranks)
			fprintf(stderr, "distrun: rank %d exited but left pid "
				"%d (%s) running\n", r, pid, cmd);
		else
			fprintf(stderr, "distrun: a rank left pid %d (%s) "
				"running\n", pid, cmd);
	}
	fclose(f);
	if (n > 8)
		fprintf(stderr, "distrun: and %d more processes\n", n - 8);
	if (n)
		fprintf(stderr, "distrun: sending %s SIGTERM, SIGKILL after "
			"%gs (--grace)\n", n > 1 ? "them" : "it",
			job->o->grace);
	else
		fprintf(stderr, "distrun: processes that left the ranks "
			"hold their output open; sending them SIGTERM, SIGKILL "
			"after %gs (--grace)\n", job->o->grace);
}

/* Returns true when it found that no child is left (the job may end:
 * job_run need not read the list again at once). */
static bool check_leftovers(struct job *job, bool idle)
{
	if (job->nlive > 0 || job->stopping)
		return false;
	if (job->nopen > 0 ? !idle : !signal_children(job, 0))
		return job->nopen == 0;
	announce_leftovers(job);
	job->leftovers = true;
	job->stopping = true;
	job->kill_at = now_mono() + job->o->grace;
	signal_ranks(job, SIGTERM);
	return false;
}

static int poll_timeout(struct job *job)
{
	double t = now_mono(), until = -1;

	if (job->nlive == 0 && !job->stopping &&
	    (job->nopen > 0 || signal_children(job, 0)))
		return 0;   /* see check_leftovers() */
	if (job->o->timeout > 0 && !job->stopping)
		until = job->t0 + job->o->timeout;
	else if (job->stopping && !job->killed)
		until = job->kill_at;
	else if (job->killed)
		until = t + 0.1;    /* re-kill new orphans, see check_timers;
				     * and check_output */
	if (diag_deadline(job) >= 0 && (until < 0 || diag_deadline(job) < until))
		until = diag_deadline(job);
	if (mux_partial_deadline(job) >= 0 &&
	    (until < 0 || mux_partial_deadline(job) < until))
		until = mux_partial_deadline(job);
	if (until < 0)
		return -1;
	if (until <= t)
		return 0;
	/* Wake at least hourly: a huge --timeout or --grace must not
	 * overflow poll's int milliseconds. */
	if (until - t > 3600)
		return 3600 * 1000;
	return (int)((until - t) * 1000) + 1;
}

/* The output is given up when the job was stopped (--timeout, a signal),
 * SIGKILL was sent, and the reader has still not read for OUTPUT_GIVE_UP
 * seconds after it. */
static void check_output(struct job *job)
{
	if ((mux_pending_fd(0) >= 0 || mux_pending_fd(1) >= 0) &&
	    job->killed && (job->timed_out || job->stop_signal) &&
	    now_mono() > job->kill_at + OUTPUT_GIVE_UP)
		mux_give_up(job);
}

static bool output_pending(void)
{
	return mux_pending_fd(0) >= 0 || mux_pending_fd(1) >= 0;
}

static void close_stream(struct job *job, int r, int s)
{
	struct rank *rk = &job->ranks[r];
	int *fd = s ? &rk->err_fd : &rk->out_fd;

	mux_finish(job, r, s);
	close(*fd);
	*fd = -1;
	job->nopen--;
}

int job_run(struct job *job)
{
	int n = job->o->nranks;
	/* Signals, console, 2 per rank, nodes, stdin and a pipe per rank,
	 * the warm interpreter. */
	int nmax = 3 * n + 5 + (job->nodes ? job->nnodes : 0);
	struct pollfd *pfd = malloc((size_t)nmax * sizeof(*pfd));
	int *who = malloc(2 * (size_t)n * sizeof(*who));
	bool childless = false;

	if (!pfd || !who) {
		perror("distrun");
		free(pfd);
		free(who);
		return -1;
	}
	job->rank_exited = job_rank_exited;
	for (;;) {
		int np = 3, nn, ni, npl, rc;
		bool full = mux_full();

		/* (The list of children is read once, not again if
		 * check_leftovers has just found it empty.) */
		if (job->nlive == 0 && job->nopen == 0 && !output_pending() &&
		    (childless || !signal_children(job, 0)))
			break;
		if (job->killed && now_mono() > job->kill_at + AFTER_KILL_WAIT) {
			fprintf(stderr, "distrun: processes still hold the "
				"output pipes %gs after SIGKILL; giving up\n",
				AFTER_KILL_WAIT);
			break;
		}
		pfd[0] = (struct pollfd){ .fd = job->sigfd, .events = POLLIN };
		/* The console, while output waits for it (fd -1: ignored). */
		pfd[1] = (struct pollfd){ mux_pending_fd(0), POLLOUT, 0 };
		pfd[2] = (struct pollfd){ mux_pending_fd(1), POLLOUT, 0 };
		/* The ranks, unless their output would only pile up here. */
		for (int r = 0; r < n && !full; r++) {
			struct rank *rk = &job->ranks[r];

			if (rk->out_fd >= 0) {
				who[np - 3] = 2 * r;
				pfd[np++] = (struct pollfd){ rk->out_fd, POLLIN, 0 };
			}
			if (rk->err_fd >= 0) {
				who[np - 3] = 2 * r + 1;
				pfd[np++] = (struct pollfd){ rk->err_fd, POLLIN, 0 };
			}
		}
		nn = nodes_job_pollfds(job, pfd + np, nmax - np);
		ni = input_pollfds(job, pfd + np + nn, nmax - np - nn);
		npl = preload_pollfds(job, pfd + np + nn + ni,
				      nmax - np - nn - ni);
		rc = poll(pfd, np + nn + ni + npl, poll_timeout(job));
		if (rc < 0 && errno != EINTR) {
			perror("distrun: poll");
			break;
		}
		for (int i = 3; rc > 0 && i < np; i++) {
			int r = who[i - 3] / 2, s = who[i - 3] % 2;

			if (!pfd[i].revents)
				continue;
			if (mux_read(job, r, s) <= 0)
				close_stream(job, r, s);
		}
		mux_show_partials(job);
		mux_flush(job);
		if (rc > 0 && pfd[0].revents)
			handle_signals(job);
		for (int i = np; rc > 0 && i < np + nn; i++)
			if (pfd[i].revents) {
				if (nodes_job_handle(job))
					job_stop(job, SIGTERM);
				break;
			}
		if (rc > 0) {
			input_handle(job, pfd + np + nn, ni);
			preload_handle(job, pfd + np + nn + ni, npl);
		}
		if (job->output_broken && !job->stopping) {
			if (job->first_fail < 0 && !job->timed_out)
				job->stop_signal = SIGPIPE;
			job_stop(job, SIGTERM);
		}
		check_timers(job);
		if (diag_tick(job))
			job_stop(job, SIGTERM);
		check_output(job);
		childless = check_leftovers(job, rc == 0 && !full);
	}
	/* Whatever is still ours after giving up: no zombies. */
	reap(job);
	free(pfd);
	free(who);
	return 0;
}

void job_release(struct job *job)
{
	if (!job->ranks)
		return;
	for (int r = 0; r < job->o->nranks; r++) {
		struct rank *rk = &job->ranks[r];

		if (rk->out_fd >= 0)
			close(rk->out_fd);
		if (rk->err_fd >= 0)
			close(rk->err_fd);
		free(rk->err_tail);
	}
	free(job->ranks);
	job->ranks = NULL;
}
