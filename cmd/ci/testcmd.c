/*
 * testcmd.c - the entry points of ci.h: `distrun test` (its options, its
 * help, the test lists or the quick form `-- PROGRAM`) and the plain
 * command's world-size sweeps (`distrun -n 1,2,4 prog`, or --junit/--tap
 * of one run).  Each builds a runner (testrun.h), runs its cases, then
 * says what came of them: the summary table or the sweep's line, the
 * JUnit XML, TAP, HTML and a sweep's --report, and the exit status.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"
#include "testrun.h"

#define DEFAULT_TIMEOUT 300.0

/* ------------------------------------------------------------ distrun test */

enum {
	T_NPROC = 'n', T_JOBS = 'j', T_QUIET = 'q', T_HELP = 'h',
	T_RETRIES = 256, T_OVERSUB, T_TIMEOUT, T_JUNIT, T_TAP, T_OUTDIR,
	T_OPT, T_HTML,
};

static const struct {
	int id;
	const char *name, *arg, *help;
} test_opts[] = {
	{ T_NPROC, "nproc-per-node", "SIZES",
	  "world sizes for tests without n= (default 1): 4, 1,2,4, 1-8" },
	{ T_JOBS, "jobs", "N", "run up to N cases at once (default 1)" },
	{ T_OVERSUB, "oversubscribe", NULL,
	  "with -j, allow more ranks at once than CPUs" },
	{ T_RETRIES, "retries", "N",
	  "rerun a failed case up to N times; a later pass is FLAKY" },
	{ T_TIMEOUT, "timeout", "DURATION",
	  "per case, for tests without timeout= (default 5m)" },
	{ T_JUNIT, "junit", "FILE", "write JUnit XML to FILE" },
	{ T_TAP, "tap", "FILE", "write TAP version 13 to FILE (- for stdout)" },
	{ T_HTML, "html", "FILE",
	  "write one HTML page of every case to FILE" },
	{ T_OUTDIR, "output-dir", "DIR",
	  "keep each case's output and report under DIR" },
	{ T_OPT, "opt", "OPTION",
	  "pass OPTION (like --grace=1s) to every case's distrun" },
	{ T_QUIET, "quiet", NULL, "no line per case, only the summary" },
	{ T_HELP, "help", NULL, "show this help and exit" },
};
#define N_TEST_OPTS (sizeof(test_opts) / sizeof(test_opts[0]))

static void test_help(void)
{
	printf("Usage: distrun test [OPTION]... LIST...\n"
	       "   or: distrun test [OPTION]... -- PROGRAM [ARG]...\n"
	       "Run every test of each LIST file (or PROGRAM) once per world "
	       "size, each as its\nown distrun job, and report the verdicts "
	       "(JUnit, TAP).  The list format is in\ndistrun(1), TEST "
	       "LISTS.\n\nTest options:\n");
	for (size_t i = 0; i < N_TEST_OPTS; i++) {
		char left[64];

		snprintf(left, sizeof(left), "  %s--%s%s%s",
			 test_opts[i].id < 256 ? (char[]){ '-',
				(char)test_opts[i].id, ',', ' ', 0 } : "    ",
			 test_opts[i].name, test_opts[i].arg ? " " : "",
			 test_opts[i].arg ? test_opts[i].arg : "");
		if (strlen(left) > 30)
			printf("%s\n%32s%s\n", left, "", test_opts[i].help);
		else
			printf("%-32s%s\n", left, test_opts[i].help);
	}
	printf("\nExit status: 0 if every case passed (an xfail that fails, "
	       "a skip and a flaky\npass count as passed; an xfail that "
	       "passes does not); 1 otherwise; 2 on a bad\ncommand line or "
	       "test list.\n");
}

static void test_usage(const char *fmt, const char *arg)
{
	fputs("distrun test: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nTry 'distrun test --help'.\n", stderr);
}

static void print_summary(struct runner *ru, double wall)
{
	int count[CI_ERROR + 1] = { 0 };
	bool all_ok = true;

	for (int i = 0; i < ru->ncases; i++) {
		count[ru->cases[i].verdict]++;
		all_ok &= ci_verdict_ok(ru->cases[i].verdict);
	}
	fprintf(stderr, "\n%-6s %4s %9s  %s\n", "result", "n", "time", "test");
	for (int i = 0; i < ru->ncases; i++) {
		const struct ci_case *c = &ru->cases[i];
		bool detail = c->verdict != CI_PASS && c->message;

		fprintf(stderr, "%-6s %4d %8.2fs  %s%s%s%s%s\n",
			ci_verdict_name(c->verdict), c->n, c->wall, c->name,
			detail ? "  " : "",
			detail && c->type ? c->type : "",
			detail && c->type ? ": " : "",
			detail ? c->message : "");
	}
	fprintf(stderr, "distrun test: %d case%s, %d passed, %d failed, "
		"%d error%s, %d xfail, %d xpass, %d skipped, %d flaky "
		"(%.2fs)%s\n", ru->ncases, ru->ncases == 1 ? "" : "s",
		count[CI_PASS], count[CI_FAIL], count[CI_ERROR],
		count[CI_ERROR] == 1 ? "" : "s", count[CI_XFAIL],
		count[CI_XPASS], count[CI_SKIP], count[CI_FLAKY], wall,
		all_ok ? "" : ": FAILED");
}

static int write_results(struct runner *ru, const char *junit,
			 const char *tap)
{
	int rc = 0;

	if (junit && junit_write(junit, ru->lists, ru->nlists, ru->cases,
				 ru->ncases))
		rc = -1;
	if (tap && tap_write(tap, ru->cases, ru->ncases))
		rc = -1;
	return rc;
}

int test_main(int argc, char **argv)
{
	struct runner ru = { .jobs = 1, .timeout = DEFAULT_TIMEOUT,
			     .grace = 5, .sigfd = -1 };
	struct option longopts[N_TEST_OPTS + 1];
	const char *junit = NULL, *tap = NULL;
	int *sizes = NULL, nsizes = 0, dash = argc, c, rc = EXIT_USAGE;
	int nlists = 0, bad = 0;
	struct ci_list quick = { 0 };
	struct ci_test qt = { 0 };
	double t0 = now_mono();
	long v;
	char *end;

	for (size_t i = 0; i < N_TEST_OPTS; i++)
		longopts[i] = (struct option){ test_opts[i].name,
			test_opts[i].arg ? required_argument : no_argument,
			NULL, test_opts[i].id };
	memset(&longopts[N_TEST_OPTS], 0, sizeof(longopts[0]));
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--")) {
			dash = i;
			break;
		}
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(dash, argv, ":n:j:qh", longopts, NULL)) != -1) {
		switch (c) {
		case T_NPROC:
			free(sizes);
			if (parse_sizes(optarg, &sizes, &nsizes)) {
				sizes = NULL;
				test_usage("bad world sizes '%s' (expected like "
					   "4, 1,2,4 or 1-8)", optarg);
				goto out;
			}
			break;
		case T_JOBS:
		case T_RETRIES:
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < (c == T_JOBS) ||
			    v > 1024) {
				test_usage(c == T_JOBS ? "bad -j '%s' (expected "
					   "1 to 1024)" : "bad --retries '%s' "
					   "(expected 0 to 1024)", optarg);
				goto out;
			}
			if (c == T_JOBS)
				ru.jobs = (int)v;
			else
				ru.retries = (int)v;
			break;
		case T_OVERSUB:
			ru.oversubscribe = true;
			break;
		case T_TIMEOUT:
			if (parse_duration(optarg, &ru.timeout) ||
			    ru.timeout <= 0) {
				test_usage("bad --timeout '%s' (expected a "
					   "duration like 30s, 5m)", optarg);
				goto out;
			}
			break;
		case T_JUNIT:
			junit = optarg;
			break;
		case T_TAP:
			tap = optarg;
			break;
		case T_OUTDIR:
			ru.output_dir = optarg;
			break;
		case T_HTML:
			ru.html = *optarg ? optarg : NULL;
			break;
		case T_OPT: {
			char **no = realloc(ru.opt, (ru.nopt + 1) *
					    sizeof(*no));

			if (!no) {
				perror("distrun");
				goto out;
			}
			ru.opt = no;
			ru.opt[ru.nopt++] = optarg;
			break;
		}
		case T_QUIET:
			ru.quiet = true;
			break;
		case T_HELP:
			test_help();
			rc = 0;
			goto out;
		case ':':
			test_usage("option '%s' needs an argument",
				   argv[optind - 1]);
			goto out;
		default:
			test_usage("unknown option '%s'", optopt ?
				   (char[]){ '-', (char)optopt, 0 } :
				   argv[optind - 1]);
			goto out;
		}
	}
	if (!sizes) {
		sizes = malloc(sizeof(int));
		if (!sizes)
			goto out;
		sizes[0] = 1;
		nsizes = 1;
	}
	nlists = dash - optind + (dash < argc);
	if (dash < argc && dash + 1 == argc) {
		test_usage("%smissing the program after --", "");
		goto out;
	}
	if (!nlists) {
		test_usage("%smissing a test list (or -- PROGRAM)", "");
		goto out;
	}
	ru.lists = calloc(nlists, sizeof(*ru.lists));
	if (!ru.lists)
		goto out;
	ru.nlists = 0;
	for (int i = optind; i < dash; i++)
		if (testlist_load(&ru.lists[ru.nlists++], argv[i], sizes,
				  nsizes))
			bad = 1;
	if (dash < argc) {
		/* The quick form: one test, from the command line. */
		const char *why = testlist_check_program(argv[dash + 1], NULL);
		const char *base = strrchr(argv[dash + 1], '/');

		if (why) {
			fprintf(stderr, "distrun test: %s\n", why);
			bad = 1;
		}
		qt.argv = argv + dash + 1;
		qt.argc = argc - dash - 1;
		qt.sizes = sizes;
		qt.nsizes = nsizes;
		qt.name = (char *)(base ? base + 1 : argv[dash + 1]);
		qt.file = "command line";
		quick.suite = qt.name;
		quick.path = (char *)"command line";
		quick.tests = &qt;
		quick.ntests = 1;
		ru.lists[ru.nlists++] = quick;
	}
	if (bad)
		goto out;
	/* Until the run replaces them, its files say it did not finish. */
	if (outfiles_mark(NULL, junit, tap, NULL, ru.html))
		goto out;
	ru.keep_output = junit || tap || ru.output_dir;
	ru.cores = testrun_cpu_count();
	for (int l = 0; l < ru.nlists; l++)
		for (int t = 0; t < ru.lists[l].ntests; t++)
			for (int k = 0; k < ru.lists[l].tests[t].nsizes; k++)
				if (testrun_add_case(&ru, &ru.lists[l],
					     &ru.lists[l].tests[t],
					     ru.lists[l].tests[t].sizes[k]))
					goto out;
	rc = 1;
	if (testrun_setup(&ru) || testrun_run_cases(&ru, NULL, 0))
		goto out;
	print_summary(&ru, now_mono() - t0);
	rc = 0;
	for (int i = 0; i < ru.ncases; i++)
		if (!ci_verdict_ok(ru.cases[i].verdict))
			rc = 1;
	if (ru.interrupted)
		rc = 128 + ru.interrupted;
	if (write_results(&ru, junit, tap) && !rc)
		rc = 1;
	if (ru.html && html_ci(ru.html, true, ru.cases, ru.ncases, NULL, 0) &&
	    !rc)
		rc = 1;
out:
	testrun_release(&ru);
	for (int l = 0; ru.lists && l < ru.nlists; l++)
		if (ru.lists[l].tests != &qt)
			testlist_release(&ru.lists[l]);
	free(ru.lists);
	free(ru.opt);
	free(sizes);
	return rc;
}

/* ------------------------------------------------------------ sweeps */

/* The user's --report for a sweep: one run's report as it is, several
 * runs' in {"world_sizes", "exit_status", "failed_sizes", "runs"}. */
static int write_sweep_report(struct runner *ru, const char *path, int rc)
{
	json_t *root, *runs = json_array(), *failed = json_array(),
	       *sizes = json_array();
	char *text = NULL;
	int err;

	for (int i = 0; i < ru->ncases; i++) {
		json_t *r;

		r = json_load_file(ru->cases[i].report_path, 0, NULL);
		json_array_append_new(runs, r ? r : json_null());
		json_array_append_new(sizes, json_integer(ru->cases[i].n));
		if (!ci_verdict_ok(ru->cases[i].verdict))
			json_array_append_new(failed,
					      json_integer(ru->cases[i].n));
	}
	if (ru->ncases == 1 && json_is_object(json_array_get(runs, 0)))
		root = json_incref(json_array_get(runs, 0));
	else
		root = json_pack("{s:b, s:O, s:i, s:O, s:O}", "complete", 1,
				 "world_sizes", sizes, "exit_status", rc,
				 "failed_sizes", failed, "runs", runs);
	text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
	if (!text)
		fprintf(stderr, "distrun: --report %s: out of memory\n", path);
	err = !text || outfile_write(path, "--report", text, strlen(text));
	free(text);
	json_decref(root);
	json_decref(runs);
	json_decref(failed);
	json_decref(sizes);
	return err ? -1 : 0;
}

int sweep_main(struct opts *o, int argc, char **argv)
{
	struct runner ru = { .jobs = 1, .sweep = true, .sigfd = -1,
			     .timeout = 0, .grace = o->grace,
			     .output_dir = o->output_dir, .html = o->html,
			     .trace = o->trace };
	int one = o->nranks;       /* no -n: --junit or --tap of one run */
	struct ci_test t = { .argv = o->argv, .argc = o->argc,
			     .sizes = o->nsizes ? o->sizes : &one,
			     .nsizes = o->nsizes ? o->nsizes : 1 };
	const char *base = strrchr(o->argv[0], '/');
	struct ci_list list = { 0 };
	int nprefix = (int)(o->argv - argv) - 1, rc = 1, first = 0;
	struct sbuf failed = { 0 };

	(void)argc;
	/* The user's options go to every run (a later -n, --report,
	 * --output-dir, --junit= and --tap= override theirs); an ending
	 * "--" is put back after ours. */
	if (nprefix > 0 && !strcmp(argv[nprefix], "--"))
		nprefix--;
	t.name = (char *)(base ? base + 1 : o->argv[0]);
	t.file = "command line";
	list.suite = t.name;
	list.path = (char *)"command line";
	list.tests = &t;
	list.ntests = 1;
	ru.lists = &list;
	ru.nlists = 1;
	if (o->timeout > 0)
		ru.timeout = o->timeout;
	ru.keep_output = o->junit || o->tap || o->output_dir;
	if (testrun_setup(&ru))
		goto out;
	for (int k = 0; k < t.nsizes; k++)
		if (testrun_add_case(&ru, &list, &t, t.sizes[k]))
			goto out;
	if (testrun_run_cases(&ru, argv + 1, nprefix))
		goto out;
	rc = 0;
	for (int i = 0; i < ru.ncases; i++) {
		const struct ci_case *c = &ru.cases[i];

		if (ci_verdict_ok(c->verdict))
			continue;
		if (!rc)
			first = c->exit_status > 0 ? c->exit_status : 1;
		rc = 1;
		testrun_sb_printf(&failed, "%sn=%d (%s)",
				  failed.len ? ", " : "", c->n,
				  c->message ? c->message : "failed");
	}
	if (rc)
		rc = first;
	if (ru.interrupted && !rc)
		rc = 128 + ru.interrupted;
	if (o->nsizes > 1 && (rc || !o->quiet)) {
		char list_s[256] = "";
		size_t len = 0;

		for (int k = 0; k < o->nsizes && len + 12 < sizeof(list_s); k++)
			len += snprintf(list_s + len, sizeof(list_s) - len,
					"%s%d", k ? "," : "", o->sizes[k]);
		if (failed.len)
			fprintf(stderr, "distrun: world sizes %s: failed: "
				"%s\n", list_s, failed.s);
		else
			fprintf(stderr, "distrun: world sizes %s: all "
				"passed\n", list_s);
	}
	if (o->report && write_sweep_report(&ru, o->report, rc) && !rc)
		rc = 1;
	if (write_results(&ru, o->junit, o->tap) && !rc)
		rc = 1;
	if (o->html && html_ci(o->html, false, ru.cases, ru.ncases, o->argv,
			       o->argc) && !rc)
		rc = 1;
out:
	free(failed.s);
	testrun_release(&ru);
	return rc;
}
