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
#include <sys/stat.h>
#include <unistd.h>

#include "launcher.h"
#include "testrun.h"

/* Beyond a case's timeout and grace, how long its child distrun may take
 * to write its report before it is killed. */
#define DEADLINE_MARGIN 30.0

/* ------------------------------------------------------------ children */

/* Appends s to the NULL-terminated vector *v of *n entries; -1 when out
 * of memory. */
static int push(char ***v, int *n, int *cap, const char *s)
{
	if (*n + 2 > *cap) {
		char **nv = realloc(*v, (*cap = *cap ? 2 * *cap : 32) *
				    sizeof(**v));

		if (!nv)
			return -1;
		*v = nv;
	}
	(*v)[(*n)++] = (char *)s;
	(*v)[*n] = NULL;
	return 0;
}

/* The child distrun's command line (malloc'd vector; its strings are the
 * case's, the runner's and bufs'), or NULL when out of memory. */
static char **case_argv(struct runner *ru, struct ci_case *c, char **prefix,
			int nprefix, char nbuf[16], char tbuf[32])
{
	const struct ci_test *t = c->test;
	char **argv = NULL;
	int argc = 0, cap = 0, bad = 0;

	snprintf(nbuf, 16, "%d", c->n);
	bad |= push(&argv, &argc, &cap, "distrun");
	for (int i = 0; i < nprefix; i++)
		bad |= push(&argv, &argc, &cap, prefix[i]);
	bad |= push(&argv, &argc, &cap, "-n");
	bad |= push(&argv, &argc, &cap, nbuf);
	if (t->timeout > 0 || ru->timeout > 0) {
		snprintf(tbuf, 32, "%.3fs", t->timeout > 0 ? t->timeout :
			 ru->timeout);
		bad |= push(&argv, &argc, &cap, "--timeout");
		bad |= push(&argv, &argc, &cap, tbuf);
	}
	if (!ru->sweep) {
		bad |= push(&argv, &argc, &cap, "--ranks");
		bad |= push(&argv, &argc, &cap, "none");
		bad |= push(&argv, &argc, &cap, "--color");
		bad |= push(&argv, &argc, &cap, "never");
	}
	bad |= push(&argv, &argc, &cap, "--report");
	bad |= push(&argv, &argc, &cap, c->report_path);
	/* The page is made here, from the runs' reports and traces. */
	bad |= push(&argv, &argc, &cap, "--html=");
	if (c->trace_path[0]) {
		bad |= push(&argv, &argc, &cap, "--trace");
		bad |= push(&argv, &argc, &cap, c->trace_path);
	}
	/* The rank files cost a write of everything the ranks print: only
	 * when something reads them. */
	if (ru->keep_output || t->nexpect) {
		bad |= push(&argv, &argc, &cap, "--output-dir");
		bad |= push(&argv, &argc, &cap, c->dir);
	}
	bad |= push(&argv, &argc, &cap, "--junit=");
	bad |= push(&argv, &argc, &cap, "--tap=");
	for (int i = 0; i < ru->nopt; i++)
		bad |= push(&argv, &argc, &cap, ru->opt[i]);
	for (int i = 0; i < t->nopt; i++)
		bad |= push(&argv, &argc, &cap, t->opt[i]);
	bad |= push(&argv, &argc, &cap, "--");
	for (int i = 0; i < t->argc; i++)
		bad |= push(&argv, &argc, &cap, t->argv[i]);
	if (bad) {
		free(argv);
		return NULL;
	}
	return argv;
}

/* Our environment with the test's NAME=VALUE entries in place of ours
 * (malloc'd vector of borrowed strings), or NULL when out of memory. */
static char **case_env(const struct ci_test *t)
{
	extern char **environ;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = malloc((n + (size_t)t->nenv + 1) * sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t len = strcspn(environ[i], "=");
		int j;

		for (j = 0; j < t->nenv; j++)
			if (!strncmp(t->env[j], environ[i], len) &&
			    t->env[j][len] == '=')
				break;
		if (j == t->nenv)
			env[k++] = environ[i];
	}
	for (int j = 0; j < t->nenv; j++)
		env[k++] = t->env[j];
	env[k] = NULL;
	return env;
}

/* Opens the case's console file DIR/console.NAME for the child; -1 after
 * a message. */
static int console_file(const struct ci_case *c, const char *name)
{
	char path[PATH_MAX + 32];
	int fd;

	snprintf(path, sizeof(path), "%s/console.%s", c->dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		fprintf(stderr, "distrun: %s: %s\n", path, strerror(errno));
	return fd;
}

/* Starts the case's child distrun in its own process group, its stdin
 * /dev/null (one stdin cannot feed several runs, a sweep's sizes or the
 * cases of a list, whatever --stdin says) and, but in a sweep, its
 * console into the case's files.  Its pid, or -1 after a message. */
static pid_t start_child(struct runner *ru, struct ci_case *c,
			 char **prefix, int nprefix)
{
	struct child ch = CHILD_INIT;
	char nbuf[16], tbuf[32];
	char **argv = case_argv(ru, c, prefix, nprefix, nbuf, tbuf);
	char **env = case_env(c->test);

	ch.argv = argv;
	ch.path = "/proc/self/exe";
	ch.env = env;
	ch.cwd = c->list ? c->list->dir : NULL;
	ch.in = CHILD_DEVNULL;
	ch.new_pgroup = true;
	ch.pdeathsig = SIGTERM;
	ch.mask = &ru->orig_mask;
	if (!argv || !env) {
		perror("distrun");
		goto out;
	}
	if (!ru->sweep && ((ch.out = console_file(c, "out")) < 0 ||
			   (ch.err = console_file(c, "err")) < 0))
		goto out;
	if (child_start(&ch) == 0)
		goto out;
	if (ch.step == CHILD_STEP_CWD)
		fprintf(stderr, "distrun: %s: %s\n", ch.cwd, strerror(errno));
	else if (ch.step == CHILD_STEP_EXEC)
		fprintf(stderr, "distrun: cannot run /proc/self/exe: %s\n",
			strerror(errno));
	else
		perror("distrun: fork");
out:
	if (ch.out > 2)
		close(ch.out);
	if (ch.err > 2)
		close(ch.err);
	free(argv);
	free(env);
	return ch.pid;
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
	pid = start_child(ru, c, prefix, nprefix);
	if (pid < 0)
		return -1;
	s->c = idx;
	s->pid = pid;
	s->t0 = now_mono();
	s->killed = false;
	s->deadline = tmo > 0 ? s->t0 + tmo + ru->grace + DEADLINE_MARGIN : 0;
	return 0;
}
