/*
 * testrun.h - what the rooms of `distrun test` and the sweeps share: the
 * runner (one run of cases: options, the cases, the signals), a running
 * case's slot, a growing string buffer, and the functions the rooms call
 * one way down:
 *
 *   testcmd.c      `distrun test`'s command line and the sweeps (the entry
 *                  points in ci.h), the summary table, the result files
 *   testrun.c      the runner: set-up, the cases, the poll() loop that
 *                  schedules them (-j, cores, retries) and forwards signals
 *   testcase.c     one case as a child distrun: its directory, its argv,
 *                  its start, and what is made of its end
 *   testverdict.c  a case's verdict from its child's report and files
 *
 * Functions return 0 or -1 after a "distrun: ..." message unless said
 * otherwise.
 */
#ifndef DISTRUN_TESTRUN_H
#define DISTRUN_TESTRUN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "ci.h"

struct runner {
	struct ci_list *lists;
	int nlists;
	struct ci_case *cases;
	int ncases;
	int jobs;
	int retries;
	bool oversubscribe;
	bool quiet;
	bool sweep;                /* the plain command: console passes through */
	bool keep_output;          /* JUnit, TAP or --output-dir want the files */
	double timeout;            /* default per case, 0: none (sweep) */
	double grace;
	char **opt;                /* distrun options for every case */
	int nopt;
	const char *output_dir;    /* keep case files here, NULL: temporary */
	const char *html;          /* --html FILE, NULL: none */
	const char *trace;         /* a sweep's --trace FILE, NULL: none */
	char tmp[1024];            /* temporary root, "" if none */
	int cores;
	int sigfd;
	sigset_t orig_mask;
	int interrupted;           /* signal that stopped the run, 0 */
};

/* A case that is running. */
struct slot {
	int c;                     /* index into cases, -1: free */
	pid_t pid;
	double t0, deadline;
	bool killed;
};

/* ------------------------------------------------------------ testverdict.c */

/* A string buffer that grows; on allocation failure it stops growing. */
struct sbuf {
	char *s;
	size_t len, cap;
};

void testrun_sb_add(struct sbuf *b, const char *p, size_t n);
void testrun_sb_printf(struct sbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The buffer's string (an empty one if none), malloc'd; b is empty again. */
char *testrun_sb_take(struct sbuf *b);
/* Fills c->type, c->message, c->text from the case's report and files.
 * Returns true if the case ran as the test expects. */
bool testrun_evaluate(struct ci_case *c, int wait_status, bool killed);
/* Fills c->out and c->err: each rank's output, labelled and cut. */
void testrun_collect_output(struct ci_case *c);

/* ------------------------------------------------------------ testcase.c */

/* Starts case idx in slot s (prefix: distrun options before ours). */
int testrun_start_case(struct runner *ru, struct slot *s, int idx,
		       char **prefix, int nprefix);
/* A case's child has ended: its verdict, or a retry (returns true). */
bool testrun_finish_case(struct runner *ru, struct slot *s, int status);

/* ------------------------------------------------------------ testrun.c */

/* The CPUs this process may use (at least 1). */
int testrun_cpu_count(void);
/* Blocks the signals into ru->sigfd, starts the preload broker, makes
 * the temporary root. */
int testrun_setup(struct runner *ru);
/* Frees the cases, removes the temporary root, closes the signalfd. */
void testrun_release(struct runner *ru);
/* Adds (t, n) of list l to the cases (a skip is decided at once). */
int testrun_add_case(struct runner *ru, struct ci_list *l, struct ci_test *t,
		     int n);
/* Runs every case not already decided (skips).  Returns -1 on a failure
 * of distrun itself. */
int testrun_run_cases(struct runner *ru, char **prefix, int nprefix);

#endif
