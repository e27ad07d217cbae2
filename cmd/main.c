/*
 * main.c - distrun: start N ranks of a program, show their output, stop
 * the job cleanly, report how it went.  main() is the table of contents;
 * launcher.h says which file owns which part.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "nodes.h"
#include "ci.h"

/* A run id unique per job: random, so that two jobs never share one. */
static void make_run_id(struct job *job)
{
	unsigned char rnd[16];

	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd)) {
		double t = now_real();

		memcpy(rnd, &t, sizeof(t));
		memset(rnd + 8, 0, 8);
		rnd[8] = (unsigned char)getpid();
		rnd[9] = (unsigned char)(getpid() >> 8);
		rnd[10] = (unsigned char)(getpid() >> 16);
	}
	for (int i = 0; i < 16; i++)
		snprintf(job->run_id + 2 * i, 3, "%02x", rnd[i]);
}

/* Block the signals we handle: they are read from a signalfd in the loop
 * (SIGTSTP and SIGCONT too, to suspend and resume the ranks with us).
 * A stop signal that is ignored when distrun starts (nohup, a background
 * job of a script) stays ignored, for distrun and for the ranks, as a
 * shell would have it.  SIGPIPE is ignored: a closed stdout shows up as
 * EPIPE and stops the job (the ranks get SIGPIPE's default back, see
 * spawn.c). */
static int setup_signals(struct job *job)
{
	static const int stop_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT,
					 SIGTSTP, SIGCONT };
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; i < sizeof(stop_sigs) / sizeof(stop_sigs[0]); i++) {
		struct sigaction sa;

		if (sigaction(stop_sigs[i], NULL, &sa) ||
		    sa.sa_handler != SIG_IGN)
			sigaddset(&set, stop_sigs[i]);
	}
	if (sigprocmask(SIG_BLOCK, &set, &job->orig_mask))
		goto fail;
	signal(SIGPIPE, SIG_IGN);
	job->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (job->sigfd < 0)
		goto fail;
	/* Orphaned descendants of the ranks become our children, so we can
	 * stop and reap them too.  Without it (it cannot fail on Linux 3.4
	 * or later), the guard's cgroup still ends them. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1))
		fprintf(stderr, "distrun: cannot become the ranks' subreaper "
			"(%s): their orphaned children are not waited for\n",
			strerror(errno));
	return 0;
fail:
	perror("distrun: signals");
	return -1;
}

static int exit_status(const struct job *job)
{
	if (job->first_fail >= 0) {
		int st = job->ranks[job->first_fail].status;

		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	if (job->timed_out)
		return EXIT_TIMEOUT;
	if (job->node_stop)
		return job->node_stop_status;
	if (job->stop_signal)
		return 128 + job->stop_signal;
	return job->spawn_failed ? 1 : 0;
}

static int alloc_ranks(struct job *job)
{
	int n = job->o->nranks;

	job->ranks = calloc(n, sizeof(*job->ranks));
	if (!job->ranks) {
		perror("distrun");
		return -1;
	}
	for (int r = 0; r < n; r++) {
		struct rank *rk = &job->ranks[r];

		rk->out_fd = rk->err_fd = -1;
		rk->file_fd[0] = rk->file_fd[1] = -1;
	}
	return 0;
}

/* With fd 0, 1 or 2 closed (`distrun ... >&-`), the next file distrun
 * opens would take its number, and the ranks' output would be written
 * into a pipe or a socket of ours.  /dev/null holds the place. */
static int reserve_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++) {
		int nfd;

		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		nfd = open("/dev/null", fd ? O_WRONLY : O_RDONLY);
		if (nfd != fd) {
			if (nfd >= 0)
				close(nfd);
			return -1;
		}
	}
	return 0;
}

/* Starts the ranks and runs the job to its end.  Returns true if it
 * ended by a rank's failure alone (which --max-restarts may retry). */
static bool run_once(struct job *job)
{
	if (spawn_all(job)) {
		/* Stop the ranks already started, then exit 1. */
		job->spawn_failed = true;
		job_stop(job, SIGTERM);
	}
	if (job_run(job)) {
		/* Out of memory before the loop: the ranks must not stay. */
		job->spawn_failed = true;
		for (int r = 0; r < job->o->nranks; r++)
			if (job->ranks[r].state == RANK_RUNNING)
				killpg(job->ranks[r].pid, SIGKILL);
	}
	if (job->first_fail < 0 || job->spawn_failed || job->timed_out ||
	    job->stop_signal || job->output_broken || job->nopen || job->nlive)
		return false;
	for (int r = 0; r < job->o->nranks; r++)
		if (job->ranks[r].exec_errno)
			return false;   /* would fail again the same way */
	return true;
}

/* --max-restarts: as torchrun's agent, the whole job starts again, with
 * TORCHELASTIC_RESTART_COUNT one higher; the same port, files, guard,
 * and the --timeout of the whole run.  Returns false when none is left. */
static bool restart(struct job *job)
{
	const struct rank *f = &job->ranks[job->first_fail];
	char st[64];

	if (job->restarts >= job->o->max_restarts)
		return false;
	job->restarts++;
	fprintf(stderr, "distrun: rank %d %s; restarting the job (restart %d "
		"of %d)\n", job->first_fail, rank_status_str(f, st, sizeof(st)),
		job->restarts, job->o->max_restarts);
	for (int r = 0; r < job->o->nranks; r++) {
		struct rank *rk = &job->ranks[r];
		int files[2] = { rk->file_fd[0], rk->file_fd[1] };

		*rk = (struct rank){ .out_fd = -1, .err_fd = -1,
				     .file_fd = { files[0], files[1] } };
	}
	job->first_fail = -1;
	job->stopping = job->killed = job->leftovers = false;
	job->kill_at = 0;
	spawn_set_restart(job, job->restarts);
	/* torchrun's log files: a new attempt_K directory. */
	if (job->torch_logs && mux_open_logs(job))
		return false;
	return true;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct job job = { .o = &o, .sigfd = -1, .port_fd = -1,
			   .port_lock_fd = -1,
			   .guard_fd = -1, .devnull = -1, .first_fail = -1,
			   .cgroup_fd = -1, .cgroup_dirfd = -1,
			   .seg_fd = -1 };
	int rc, again = 0;

	if (reserve_std_fds())
		return 1;   /* nowhere to say so */
	/* `distrun test ...` (a program named test: `distrun ./test`). */
	if (argc > 1 && !strcmp(argv[1], "test"))
		return test_main(argc - 1, argv + 1);
	rc = opts_parse(&o, argc, argv);
	if (rc) {
		opts_release(&o);
		return rc < 0 ? 0 : rc;
	}
	/* Until the run replaces them, its files say it did not finish (a
	 * sweep's children mark their own --trace files). */
	if (opts_check_paths(&o) ||
	    outfiles_mark(o.report, o.junit, o.tap, o.nsizes > 1 || o.junit ||
			  o.tap ? NULL : o.trace, o.html)) {
		opts_release(&o);
		return EXIT_USAGE;
	}
	/* Several world sizes, --junit or --tap: a child distrun per run. */
	if (o.nsizes > 1 || o.junit || o.tap) {
		rc = sweep_main(&o, argc, argv);
		opts_release(&o);
		return rc;
	}
	rc = 1;
	job.real_t0 = now_real();
	job.t0 = now_mono();
	make_run_id(&job);
	if (alloc_ranks(&job) || setup_signals(&job))
		goto out;
	if (nodes_setup(&job) || (!job.nodes && port_reserve(&job)))
		goto out;
	rc = input_setup(&job);
	if (rc)
		goto out;
	rc = 1;
	segment_create(&job);   /* without one, the job runs over TCP */
	if (diag_init(&job))
		goto out;
	rc = spawn_prepare(&job);
	if (rc) {
		/* The program cannot run (126, 127): CI still gets a report. */
		job.exit_status = rc;
		job.real_t1 = now_real();
		if (o.report && rc >= EXIT_NOEXEC)
			report_json(&job);
		if (o.html && rc >= EXIT_NOEXEC)
			html_job(&job);
		goto out;
	}
	rc = 1;
	if (mux_init(&job) || guard_start(&job))
		goto out;
	/* Several nodes restart together, in a new round (nodes.c). */
	while (run_once(&job) && !job.nodes && restart(&job))
		;
	guard_done(&job);
	job.real_t1 = now_real();
	rc = job.exit_status = nodes_job_finish(&job, exit_status(&job));
	again = nodes_job_restart(&job, rc);
	mux_flush(&job);
	/* Output that did not reach its file is lost output: CI must not
	 * read 0 (issue 30 item 11). */
	if (mux_close_files(&job) && !rc)
		rc = job.exit_status = 1;
	if (!o.quiet && (o.summary || rc))
		report_summary(&job);
	if (rc)
		pyhint_rank_failed(&job);
	if (o.report && report_json(&job) && !rc)
		rc = 1;
	if (o.trace && trace_write(&job) && !rc)
		rc = 1;
	if (o.html && html_job(&job) && !rc)
		rc = 1;
out:
	diag_release(&job);
	guard_done(&job);
	mux_release(&job);
	job_release(&job);
	spawn_release(&job);
	input_release(&job);
	segment_release(&job);
	if (job.port_fd >= 0)
		close(job.port_fd);
	if (job.port_lock_fd >= 0)
		close(job.port_lock_fd);
	if (job.sigfd >= 0)
		close(job.sigfd);
	nodes_release(job.nodes);
	opts_release(&o);
	/* Last: the guard, killed in guard_done, has died meanwhile. */
	guard_release(&job);
	if (again)   /* returns only if exec fails */
		nodes_reexec(argv, again, &job.orig_mask);
	return rc;
}
