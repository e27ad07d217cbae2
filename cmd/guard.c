/*
 * guard.c - the guard: a tiny process that kills the job if distrun dies
 * without cleaning up (kill -9, a crash, the OOM killer).
 *
 * PR_SET_PDEATHSIG takes care of the ranks themselves, but not of what
 * they fork: a rank's children would be orphaned.  So before the ranks
 * start, distrun forks a guard that keeps the read end of a pipe.  distrun
 * writes each rank's pid (which is also its process group) into the pipe.
 * If the pipe reaches EOF, distrun is gone, and the guard sends SIGKILL to
 * every rank's process group, then exits.  At a clean end distrun simply
 * kills and reaps the guard.
 *
 * The guard keeps no other fd (so no rank pipe stays open because of it)
 * and has the stop signals blocked, as distrun has: it ends only by EOF or
 * by SIGKILL.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"

static pid_t pgids[MAX_RANKS];

static void __attribute__((noreturn)) guard_main(int rd)
{
	size_t n = 0, have = 0;
	char *p = (char *)pgids;

	if (rd != 3) {
		dup2(rd, 3);
		rd = 3;
	}
	close_range(4, ~0U, 0);
	close(0);
	close(1);
	close(2);
	for (;;) {
		ssize_t r = read(rd, p + have, sizeof(pgids) - have);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		have += r;
		n = have / sizeof(pid_t);
		if (have == sizeof(pgids)) {
			/* All MAX_RANKS pids: only EOF is left to wait for. */
			char c;

			while ((r = read(rd, &c, 1)) > 0 ||
			       (r < 0 && errno == EINTR))
				;
			break;
		}
	}
	for (size_t i = 0; i < n; i++)
		killpg(pgids[i], SIGKILL);
	_exit(0);
}

int guard_start(struct job *job)
{
	int fds[2];
	pid_t pid;

	job->guard_fd = -1;
	if (pipe2(fds, O_CLOEXEC))
		goto fail;
	pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		goto fail;
	}
	if (pid == 0) {
		close(fds[1]);
		guard_main(fds[0]);
	}
	close(fds[0]);
	job->guard_fd = fds[1];
	job->guard_pid = pid;
	return 0;
fail:
	fprintf(stderr, "distrun: cannot start the guard process: %s\n",
		strerror(errno));
	return -1;
}

void guard_add(struct job *job, pid_t pgid)
{
	if (job->guard_fd >= 0 &&
	    write(job->guard_fd, &pgid, sizeof(pgid)) != sizeof(pgid)) {
		/* The guard is gone: carry on without it. */
		close(job->guard_fd);
		job->guard_fd = -1;
	}
}

void guard_done(struct job *job)
{
	if (job->guard_pid > 0) {
		kill(job->guard_pid, SIGKILL);
		while (waitpid(job->guard_pid, NULL, 0) < 0 && errno == EINTR)
			;
		job->guard_pid = 0;
	}
	if (job->guard_fd >= 0)
		close(job->guard_fd);
	job->guard_fd = -1;
}
