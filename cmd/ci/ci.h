/*
 * ci.h - distrun for CI: world-size sweeps (`distrun -n 1,2,4 prog`),
 * `distrun test` over test lists, and their JUnit XML and TAP 13 results.
 *
 *   testlist.c  the test-list grammar (man/distrun.1, TEST LISTS): parses
 *               every file before anything runs, errors as FILE:LINE
 *   testcmd.c   the entry points below: `distrun test`'s command line,
 *               the sweeps, the summary table and the result files
 *   testrun.c   the runner: schedules the cases (-j, cores), retries,
 *               forwards signals (one poll() loop)
 *   testcase.c  runs each (test, world size) as a child distrun
 *               (/proc/self/exe) with its own port, timeout, --report and
 *               --output-dir
 *   testverdict.c  makes the verdicts from the child's report and output
 *               files
 *   (testrun.h is what these four share)
 *   junit.c     writes the JUnit XML and TAP 13 files from the verdicts
 *
 * Running every case as a child distrun keeps this part apart from the
 * job loop: whatever the launcher puts in its --report (the stall
 * diagnosis, each failing rank's stderr tail) reaches the failure text
 * without this code knowing how it was made.  Functions return 0 or -1
 * after a "distrun: ..." message unless said otherwise.
 */
#ifndef DISTRUN_CI_H
#define DISTRUN_CI_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>

struct opts;

/* ------------------------------------------------------------ test lists */

enum ci_stream { CI_STDOUT, CI_STDERR };

/* One output expectation: stdout=RE, stderr[1]=RE, stdout-file=F ... */
struct ci_expect {
	enum ci_stream stream;
	char *ranks;               /* "0", "1-3" as written, NULL: every rank */
	char *text;                /* the regex as written, or the file path */
	bool is_file;              /* text names a file of the exact output */
	regex_t re;                /* compiled when !is_file */
};

struct ci_test {
	char *name;                /* name= or the command line */
	char **argv;               /* NULL-terminated */
	int argc;
	int *sizes, nsizes;
	double timeout;            /* seconds, 0: the default */
	char **env;                /* "NAME=VALUE" each */
	int nenv;
	char **opt;                /* extra distrun options, opt= each */
	int nopt;
	int exit_expect;           /* the job's exit status, default 0 */
	char *xfail;               /* reason, NULL: not expected to fail */
	char *skip;                /* reason, NULL: run it */
	struct ci_expect *expect;
	int nexpect;
	const char *file;          /* the list it came from */
	int line;
};

struct ci_list {
	char *path;
	char *suite;               /* basename without extension */
	char *dir;                 /* where its tests run (the list's dir) */
	struct ci_test *tests;
	int ntests;
};

/* Parses one list file into *l (tests without n= get default_sizes).
 * Prints every error as "FILE:LINE: ..." and returns -1 if there was any. */
int testlist_load(struct ci_list *l, const char *path,
		  const int *default_sizes, int ndefault);
/* Frees what testlist_load or the quick form filled in. */
void testlist_release(struct ci_list *l);
/* Checks that argv[0] names a program that can run from dir (relative
 * paths are taken from dir, bare names from $PATH).  Returns NULL or a
 * static message. */
const char *testlist_check_program(const char *prog, const char *dir);
/* The job exit status a name stands for: "3", "SIGSEGV", "segv", "139".
 * Returns -1 on bad input. */
int parse_exit_expect(const char *s);

/* ------------------------------------------------------------ results */

enum ci_verdict {
	CI_PASS, CI_FAIL, CI_XFAIL, CI_XPASS, CI_SKIP, CI_FLAKY, CI_ERROR
};

/* One (test, world size), as run. */
struct ci_case {
	struct ci_test *test;
	struct ci_list *list;
	int n;                     /* world size */
	char name[512];            /* "prog[n=4]" */
	enum ci_verdict verdict;
	const char *type;          /* exit, signal, timeout, hang, mismatch,
				      output, error; NULL when it passed */
	char *message;             /* one line, malloc'd */
	char *text;                /* diagnosis and stderr tails, malloc'd */
	char *out, *err;           /* labelled output, cut, malloc'd */
	int exit_status;
	double wall;               /* seconds, last attempt */
	double start;              /* wall clock, epoch seconds */
	int attempts;
	int cores;                 /* CPUs distrun may use */
	bool oversubscribed;       /* more ranks ran than cores at its start */
	char dir[4096];            /* its --output-dir (and report in a test
				      run) */
	char report_path[4096];    /* its child's --report */
	char trace_path[4096];     /* its child's --trace, "" if none */
	bool trace_user;           /* trace_path is the user's --trace */
};

const char *ci_verdict_name(enum ci_verdict v);
/* Whether a verdict lets the whole run pass. */
bool ci_verdict_ok(enum ci_verdict v);

/* The next code point of [*p, end), or -1 for a byte that does not start
 * valid UTF-8 (overlong forms and surrogates included); advances *p. */
long ci_utf8_next(const unsigned char **p, const unsigned char *end);

/* junit.c: write the results; path "-" is stdout.  Returns 0 or -1. */
int junit_write(const char *path, struct ci_list *lists, int nlists,
		struct ci_case *cases, int ncases);
int tap_write(const char *path, struct ci_case *cases, int ncases);
/* outfile.c: at most max bytes of path, NUL-terminated (malloc'd), or
 * NULL if it cannot be read; *len (if not NULL) gets the file's size. */
char *ci_read_file(const char *path, size_t max, size_t *len);
/* html.c: --html's page of a sweep (test false; argv the command) or a
 * test run: a section per case, from its report and trace files. */
int html_ci(const char *path, bool test, struct ci_case *cases, int ncases,
	    char **argv, int argc);

/* ------------------------------------------------------------ entry points */

/* `distrun test ARGS`: argv[0] is "test".  Returns the exit status. */
int test_main(int argc, char **argv);
/* The plain command with several world sizes, --junit or --tap: runs the
 * job once per size as a child distrun.  Returns the exit status. */
int sweep_main(struct opts *o, int argc, char **argv);

#endif
