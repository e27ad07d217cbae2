/*
 * pyhint.c - when a Python rank dies because a module is missing, say
 * which interpreter ran it and how to choose another.
 *
 * distrun runs .py scripts with --python, $DISTRUN_PYTHON or python3 from
 * PATH, as a shell would (torchrun uses the interpreter it runs in; distrun
 * has none).  It never switches interpreters on its own: which Python runs
 * a job must not depend on what happens to be installed.  But when the
 * first failing rank's stderr ends in ModuleNotFoundError or ImportError,
 * the user needs the interpreter's path, and where the module is: after the
 * job, each other python3 (PATH's, /usr/bin's, /usr/local/bin's) is asked
 * whether it can find the module (importlib.util.find_spec: nothing is
 * imported), each with a time limit, and the ones that can are named.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"

#define PROBE_SECONDS 5.0
#define MAX_CANDIDATES 8

/* The kept end of rank rk's stderr, in order, NUL-terminated (malloc'd),
 * or NULL. */
static char *tail_text(const struct rank *rk)
{
	size_t n = rk->err_bytes < STDERR_TAIL ? rk->err_bytes : STDERR_TAIL;
	size_t start = rk->err_bytes - n;
	char *t;

	if (!rk->err_tail || !n || !(t = malloc(n + 1)))
		return NULL;
	for (size_t k = 0; k < n; k++)
		t[k] = rk->err_tail[(start + k) % STDERR_TAIL];
	t[n] = 0;
	return t;
}

/* Whether python finds module (0: yes, 1: no, -1: could not ask). */
static int probe(const struct job *job, const char *python,
		 const char *module)
{
	char *argv[] = { (char *)python, "-c",
		"import importlib.util, sys; "
		"sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 1)",
		(char *)module, NULL };
	struct child c = CHILD_INIT;
	int st;

	c.argv = argv;
	c.in = c.out = c.err = CHILD_DEVNULL;
	c.close_fds = true;
	c.pdeathsig = SIGKILL;
	c.mask = &job->orig_mask;
	if (child_start(&c) ||
	    child_finish(&c, (int)(PROBE_SECONDS * 1000), &st))
		return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) <= 1 ? WEXITSTATUS(st) : -1;
}

/* Adds path to cand (once by its real path in real[]; not ran). */
static void add_candidate(char cand[][PATH_MAX], char real[][PATH_MAX],
			  int *n, const char *path, const char *ran)
{
	if (*n >= MAX_CANDIDATES || access(path, X_OK) ||
	    !realpath(path, real[*n]) || !strcmp(real[*n], ran))
		return;
	for (int i = 0; i < *n; i++)
		if (!strcmp(real[i], real[*n]))
			return;
	snprintf(cand[(*n)++], PATH_MAX, "%s", path);
}

void pyhint_rank_failed(struct job *job)
{
	const struct opts *o = job->o;
	char cand[MAX_CANDIDATES][PATH_MAX], real[MAX_CANDIDATES][PATH_MAX];
	char ran[PATH_MAX], module[128] = "";
	const char *path = getenv("PATH"), *p, *kind;
	char *tail;
	int n = 0, found = 0;

	if (!o->python_from || job->first_fail < 0 || !job->prog_path)
		return;
	tail = tail_text(&job->ranks[job->first_fail]);
	if (!tail)
		return;
	if ((p = strstr(tail, "ModuleNotFoundError: No module named '"))) {
		kind = "ModuleNotFoundError";
		p += strlen("ModuleNotFoundError: No module named '");
		/* The top-level package: what an interpreter has or not. */
		snprintf(module, sizeof(module), "%.*s",
			 (int)strcspn(p, "'.\n"), p);
	} else if (strstr(tail, "ImportError: ")) {
		kind = "ImportError";
	} else {
		free(tail);
		return;
	}
	free(tail);
	if (!realpath(job->prog_path, ran))
		snprintf(ran, sizeof(ran), "%s", job->prog_path);
	fprintf(stderr, "distrun: rank %d died of %s%s%s%s under %s (%s from "
		"%s); choose another Python with --python PATH or "
		"DISTRUN_PYTHON=PATH\n", job->rank_offset + job->first_fail,
		kind, module[0] ? " (no module named '" : "", module,
		module[0] ? "')" : "", job->prog_path, o->argv[0],
		strcmp(o->python_from, "the default") ? o->python_from :
		"PATH");
	if (!module[0] || strspn(module, "abcdefghijklmnopqrstuvwxyz"
				 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
	    strlen(module))
		return;
	for (p = path ? path : ""; *p;) {
		size_t len = strcspn(p, ":");
		char c[PATH_MAX];

		if (len && len < sizeof(c) - 9) {
			snprintf(c, sizeof(c), "%.*s/python3", (int)len, p);
			add_candidate(cand, real, &n, c, ran);
		}
		p += len + (p[len] == ':');
	}
	add_candidate(cand, real, &n, "/usr/bin/python3", ran);
	add_candidate(cand, real, &n, "/usr/local/bin/python3", ran);
	for (int i = 0; i < n; i++)
		if (probe(job, cand[i], module) == 0) {
			fprintf(stderr, "distrun: %s has '%s': --python %s\n",
				cand[i], module, cand[i]);
			found++;
		}
	if (!found && n)
		fprintf(stderr, "distrun: no other python3 here (PATH, "
			"/usr/bin, /usr/local/bin) has '%s' either\n", module);
}
