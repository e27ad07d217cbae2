/*
 * testcase.c - one `distrun test` case (or one world size of a sweep) as
 * a child distrun.
 *
 * A case runs as `/proc/self/exe -n N --timeout T --report DIR/report.json
 * --output-dir DIR ... -- PROG ARGS` in its own process group, so it gets
 * its own MASTER_PORT, timeout, guard and report, exactly as a user's own
 * run would: the verdict is made from that report and the rank.N.stdout /
 * rank.N.stderr files (testverdict.c), never from inside the job loop.
 * Children get PR_SET_PDEATHSIG, so a killed `distrun test` takes its
 * cases with it.  Here: the case's directory, its argv, its start, and
 * when it has ended, its verdict or a retry.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher.h"
#include "testrun.h"

/* Beyond a case's timeout and grace, how long its child distrun may take
 * to write its report before it is killed. */
#define DEADLINE_MARGIN 30.0

/* ------------------------------------------------------------ children */

static void push(char ***v, int *n, int *cap, const char *s)
{
	if (*n + 2 > *cap) {
		char **nv = realloc(*v, (*cap = *cap ? 2 * *cap : 32) *
				    sizeof(**v));

		if (!nv) {
			perror("distrun");
			_exit(1);
		}
		*v = nv;
	}
	(*v)[(*n)++] = (char *)s;
	(*v)[*n] = NULL;
}

/* Runs in the child after fork: only this process, which execs at once. */
static void exec_case(struct runner *ru, struct ci_case *c,
		      char **prefix, int nprefix)
{
	const struct ci_test *t = c->test;
	char **argv = NULL, nbuf[16], tbuf[32];
	int argc = 0, cap = 0, in;

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	setpgid(0, 0);
	sigprocmask(SIG_SETMASK, &ru->orig_mask, NULL);
	if (c->list && c->list->dir && chdir(c->list->dir)) {
		fprintf(stderr, "distrun: %s: %s\n", c->list->dir,
			strerror(errno));
		_exit(1);
	}
	for (int i = 0; i < t->nenv; i++)
		putenv(t->env[i]);
	/* One stdin cannot feed several runs (a sweep's sizes, the cases
	 * of a list): each reads /dev/null, whatever --stdin says. */
	in = open("/dev/null", O_RDONLY);
	if (in < 0 || dup2(in, 0) < 0)
		_exit(1);
	if (!ru->sweep) {
		char path[PATH_MAX + 32];
		int out, err;

		snprintf(path, sizeof(path), "%s/console.out", c->dir);
		out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		snprintf(path, sizeof(path), "%s/console.err", c->dir);
		err = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
			_exit(1);
	}
	snprintf(nbuf, sizeof(nbuf), "%d", c->n);
	push(&argv, &argc, &cap, "distrun");
	for (int i = 0; i < nprefix; i++)
		push(&argv, &argc, &cap, prefix[i]);
	push(&argv, &argc, &cap, "-n");
	push(&argv, &argc, &cap, nbuf);
	if (t->timeout > 0 || ru->timeout > 0) {
		snprintf(tbuf, sizeof(tbuf), "%.3fs", t->timeout > 0 ?
			 t->timeout : ru->timeout);
		push(&argv, &argc, &cap, "--timeout");
		push(&argv, &argc, &cap, tbuf);
	}
	if (!ru->sweep) {
		push(&argv, &argc, &cap, "--ranks");
		push(&argv, &argc, &cap, "none");
		push(&argv, &argc, &cap, "--color");
		push(&argv, &argc, &cap, "never");
	}
	push(&argv, &argc, &cap, "--report");
	push(&argv, &argc, &cap, c->report_path);
	/* The page is made here, from the runs' reports and traces. */
	push(&argv, &argc, &cap, "--html=");
	if (c->trace_path[0]) {
		push(&argv, &argc, &cap, "--trace");
		push(&argv, &argc, &cap, c->trace_path);
	}
	/* The rank files cost a write of everything the ranks print: only
	 * when something reads them. */
	if (ru->keep_output || t->nexpect) {
		push(&argv, &argc, &cap, "--output-dir");
		push(&argv, &argc, &cap, c->dir);
	}
	push(&argv, &argc, &cap, "--junit=");
	push(&argv, &argc, &cap, "--tap=");
	for (int i = 0; i < ru->nopt; i++)
		push(&argv, &argc, &cap, ru->opt[i]);
	for (int i = 0; i < t->nopt; i++)
		push(&argv, &argc, &cap, t->opt[i]);
	push(&argv, &argc, &cap, "--");
	for (int i = 0; i < t->argc; i++)
		push(&argv, &argc, &cap, t->argv[i]);
	execv("/proc/self/exe", argv);
	fprintf(stderr, "distrun: cannot run /proc/self/exe: %s\n",
		strerror(errno));
	_exit(EXIT_NOEXEC);
}

/* The case's directory: under --output-dir (kept) or the temporary root. */
static int case_dir(struct runner *ru, struct ci_case *c, int idx)
{
	char name[600];
	size_t i;

	/* A name a shell need not quote. */
	snprintf(name, sizeof(name), "%.200s", c->test->name);
	for (i = 0; name[i]; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("._-+,",
								name[i]))
			name[i] = '_';
	if (ru->output_dir) {
		if (mkdir(ru->output_dir, 0777) && errno != EEXIST)
			goto fail;
		if (ru->sweep && ru->ncases == 1)
			snprintf(c->dir, sizeof(c->dir), "%s", ru->output_dir);
		else
			snprintf(c->dir, sizeof(c->dir), "%.3000s/%03d-%s-n%d",
				 ru->output_dir, idx + 1, name, c->n);
	} else {
		snprintf(c->dir, sizeof(c->dir), "%s/%d", ru->tmp, idx);
	}
	if (mkdir(c->dir, 0777) && errno != EEXIST)
		goto fail;
	/* A rerun starts from nothing. */
	for (int r = 0; r < c->n; r++)
		for (int s = 0; s < 2; s++) {
			char p[PATH_MAX + 32];

			snprintf(p, sizeof(p), "%s/rank.%d.%s", c->dir, r,
				 s ? "stderr" : "stdout");
			unlink(p);
		}
	/* A sweep's report (and trace for the page) stay out of the user's
	 * --output-dir: the child writes into our temporary directory. */
	if (ru->sweep)
		snprintf(c->report_path, sizeof(c->report_path),
			 "%s/%d.report.json", ru->tmp, idx);
	else
		snprintf(c->report_path, sizeof(c->report_path),
			 "%.4000s/report.json", c->dir);
	unlink(c->report_path);
	c->trace_path[0] = 0;
	c->trace_user = ru->trace;
	if (ru->trace && ru->ncases == 1) {
		snprintf(c->trace_path, sizeof(c->trace_path), "%s", ru->trace);
	} else if (ru->trace) {
		/* One file per world size: t.json -> t.n4.json */
		const char *dot = strrchr(ru->trace, '.'),
			   *slash = strrchr(ru->trace, '/');

		if (!dot || (slash && dot < slash) || dot == ru->trace ||
		    dot[-1] == '/')
			dot = ru->trace + strlen(ru->trace);
		snprintf(c->trace_path, sizeof(c->trace_path), "%.*s.n%d%s",
			 (int)(dot - ru->trace), ru->trace, c->n, dot);
	} else if (ru->html) {
		snprintf(c->trace_path, sizeof(c->trace_path),
			 "%s/%d.trace.json", ru->tmp, idx);
	}
	if (!ru->trace)
		unlink(c->trace_path);
	return 0;
fail:
	fprintf(stderr, "distrun: %s: %s\n", ru->output_dir ? ru->output_dir :
		c->dir, strerror(errno));
	return -1;
}

static void print_case(struct runner *ru, const struct ci_case *c)
{
	if (ru->quiet || ru->sweep)
		return;
	fprintf(stderr, "%-6s %-40s %8.2fs%s%s%s%s\n",
		ci_verdict_name(c->verdict), c->name, c->wall,
		c->message && c->verdict != CI_PASS ? "  " : "",
		c->type && c->verdict != CI_PASS ? c->type : "",
		c->type && c->verdict != CI_PASS ? ": " : "",
		c->message && c->verdict != CI_PASS ? c->message : "");
}

/* A case's child has ended: its verdict, or a retry (returns true). */
bool testrun_finish_case(struct runner *ru, struct slot *s, int status)
{
	struct ci_case *c = &ru->cases[s->c];
	bool ok = testrun_evaluate(c, status, s->killed);

	c->wall = now_mono() - s->t0;
	if (ru->keep_output)
		testrun_collect_output(c);
	if (c->test->xfail)
		c->verdict = ok ? CI_XPASS : CI_XFAIL;
	else if (ok)
		c->verdict = c->attempts > 1 ? CI_FLAKY : CI_PASS;
	else
		c->verdict = c->type && !strcmp(c->type, "error") ? CI_ERROR :
			     CI_FAIL;
	if (c->verdict == CI_XPASS) {
		free(c->message);
		c->message = strdup("passed, but is marked xfail");
		c->type = "xpass";
	}
	if (!ok && !c->test->xfail && c->attempts <= ru->retries &&
	    !ru->interrupted) {
		if (!ru->quiet && !ru->sweep)
			fprintf(stderr, "retry  %-40s %8.2fs  %s: %s\n",
				c->name, c->wall, c->type, c->message);
		return true;
	}
	print_case(ru, c);
	return false;
}

int testrun_start_case(struct runner *ru, struct slot *s, int idx,
		       char **prefix, int nprefix)
{
	struct ci_case *c = &ru->cases[idx];
	double tmo = c->test->timeout > 0 ? c->test->timeout : ru->timeout;
	pid_t pid;

	if (case_dir(ru, c, idx))
		return -1;
	c->attempts++;
	c->start = now_real();
	/* A sweep's console: a header per size, so that each run's lines
	 * (labelled [0], [1]... in every run) are told apart. */
	if (ru->sweep && ru->ncases > 1)
		printf("distrun: world size %d (%d of %d)%s\n", c->n, idx + 1,
		       ru->ncases, c->attempts > 1 ? ", again" : "");
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		perror("distrun: fork");
		return -1;
	}
	if (pid == 0)
		exec_case(ru, c, prefix, nprefix);
	/* Both sides set the group, so a signal sent at once reaches it. */
	setpgid(pid, pid);
	s->c = idx;
	s->pid = pid;
	s->t0 = now_mono();
	s->killed = false;
	s->deadline = tmo > 0 ? s->t0 + tmo + ru->grace + DEADLINE_MARGIN : 0;
	return 0;
}
