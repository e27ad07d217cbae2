/*
 * testrun.c - `distrun test` and the plain command's world-size sweeps:
 * running each (test, world size) as a child distrun, scheduling them, and
 * making each one's verdict.
 *
 * A case runs as `/proc/self/exe -n N --timeout T --report DIR/report.json
 * --output-dir DIR ... -- PROG ARGS` in its own process group, so it gets
 * its own MASTER_PORT, timeout, guard and report, exactly as a user's own
 * run would: the verdict is made from that report and the rank.N.stdout /
 * rank.N.stderr files, never from inside the job loop.  Whatever the
 * launcher adds to its report (the stall diagnosis, each failing rank's
 * stderr tail) becomes the failure's text.
 *
 * One poll() loop waits on a signalfd (SIGCHLD, and SIGINT, SIGTERM,
 * SIGHUP, forwarded to every running case; a second one kills them) and
 * each case's hard deadline: its timeout plus the grace and a margin, past
 * which the child distrun is SIGKILLed (its guard then kills the ranks).
 * Children get PR_SET_PDEATHSIG, so a killed `distrun test` takes its
 * cases with it.  With -j N, cases start in list order while fewer than N
 * run and their ranks fit in the CPUs that sched_getaffinity() allows;
 * a case that does not fit waits for room (none after it overtakes it),
 * and a case larger than the machine runs alone.
 *
 * Without --output-dir the cases write under a fresh TMPDIR/distrun-test.*
 * that a small cleaner process removes when `distrun test` ends however
 * it ends (kill -9 too): it waits for EOF on a pipe only we hold.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "ci.h"
#include "preload.h"

/* Beyond a case's timeout and grace, how long its child distrun may take
 * to write its report before it is killed. */
#define DEADLINE_MARGIN 30.0
#define DEFAULT_TIMEOUT 300.0
/* Labelled output kept per stream and case for JUnit and TAP. */
#define OUTPUT_KEEP (64 * 1024)
/* Expected-output files and rank output read for matching. */
#define MATCH_MAX (64 * 1024 * 1024)

extern char **environ;

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

static int cpu_count(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

/* ------------------------------------------------------------ files */

/* Reads at most max bytes of path into a NUL-terminated malloc'd buffer.
 * Returns NULL if it cannot be read; *len gets the whole file's size. */
static char *read_file(const char *path, size_t max, size_t *len)
{
	return ci_read_file(path, max, len);
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

/* A string buffer that grows; on allocation failure it stops growing. */
struct sbuf {
	char *s;
	size_t len, cap;
};

static void sb_add(struct sbuf *b, const char *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *ns;

		while (cap < b->len + n + 1)
			cap *= 2;
		ns = realloc(b->s, cap);
		if (!ns)
			return;
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = 0;
}

static void sb_printf(struct sbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n :
		       sizeof(tmp) - 1);
}

static char *sb_take(struct sbuf *b)
{
	char *s = b->s ? b->s : strdup("");

	*b = (struct sbuf){ 0 };
	return s;
}

/* Rank r's stream s as "[r] line" lines, at most keep bytes of it: the
 * last lines, after a line that says how much was cut.  Reads only the
 * end of the file (a rank may have written gigabytes). */
static void add_labelled(struct sbuf *b, const char *dir, int r, int s,
			 size_t keep)
{
	char path[PATH_MAX + 32];
	struct stat st;
	size_t size, off = 0, n = 0, cut;
	char *text = NULL, *p;
	int fd;

	snprintf(path, sizeof(path), "%s/rank.%d.%s", dir, r,
		 s ? "stderr" : "stdout");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) || !(text = malloc(keep + 1)))
		goto out;
	size = st.st_size;
	if (size > keep)
		off = size - keep;
	while (n < size - off) {
		ssize_t k = pread(fd, text + n, size - off - n, off + n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += k;
	}
	text[n] = 0;
	p = text;
	if (off) {
		/* Start at a whole line, unless one line fills it all. */
		while (*p && *p != '\n')
			p++;
		p = *p ? p + 1 : text;
	}
	cut = off + (p - text);
	if (cut)
		sb_printf(b, "[%d] [distrun: %zu of %zu bytes cut here]\n", r,
			  cut, size);
	while (*p) {
		char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);

		sb_printf(b, "[%d] ", r);
		sb_add(b, p, len);
		sb_add(b, "\n", 1);
		p += len + (nl ? 1 : 0);
	}
out:
	free(text);
	close(fd);
}

/* ------------------------------------------------------------ verdicts */

static bool rank_in(const char *ranks, int r)
{
	const char *p = ranks;

	if (!ranks)
		return true;
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;

		if (*end == '-')
			b = strtol(end + 1, &end, 10);
		if (r >= a && r <= b)
			return true;
		p = *end == ',' ? end + 1 : end;
		if (end == p && *p)
			break;
	}
	return false;
}

/* Checks the output expectations; NULL if they hold, else a message. */
static char *check_output(struct ci_case *c)
{
	const struct ci_test *t = c->test;
	char msg[1024];

	for (int i = 0; i < t->nexpect; i++) {
		const struct ci_expect *e = &t->expect[i];
		const char *sname = e->stream == CI_STDERR ? "stderr" : "stdout";

		for (int r = 0; r < c->n; r++) {
			char path[PATH_MAX + 32];
			char *got, *want = NULL;
			bool ok;

			if (!rank_in(e->ranks, r))
				continue;
			snprintf(path, sizeof(path), "%s/rank.%d.%s", c->dir,
				 r, sname);
			got = read_file(path, MATCH_MAX, NULL);
			if (!got)
				got = strdup("");
			if (!got)
				return strdup("out of memory");
			if (e->is_file) {
				want = read_file(e->text, MATCH_MAX, NULL);
				ok = want && !strcmp(got, want);
				snprintf(msg, sizeof(msg), "rank %d %s differs "
					 "from %s", r, sname, e->text);
			} else {
				ok = !regexec(&e->re, got, 0, NULL, 0);
				snprintf(msg, sizeof(msg), "rank %d %s does "
					 "not match /%s/", r, sname, e->text);
			}
			free(got);
			free(want);
			if (!ok)
				return strdup(msg);
		}
	}
	return NULL;
}

static const char *jstr(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The diagnosis and every failing rank's stderr tail, from the report. */
static char *failure_text(json_t *rep)
{
	struct sbuf b = { 0 };
	json_t *diag = json_object_get(rep, "diagnosis"), *ranks, *rk;
	size_t i;

	if (json_is_string(diag)) {
		sb_printf(&b, "%s", "");
		sb_add(&b, json_string_value(diag),
		       strlen(json_string_value(diag)));
		if (b.len && b.s[b.len - 1] != '\n')
			sb_add(&b, "\n", 1);
	} else if (json_is_string(json_object_get(diag, "text"))) {
		/* diag.c's object: its text is what a person reads. */
		const char *t = json_string_value(json_object_get(diag, "text"));

		sb_add(&b, t, strlen(t));
		if (b.len && b.s[b.len - 1] != '\n')
			sb_add(&b, "\n", 1);
	} else if (diag && !json_is_null(diag)) {
		char *d = json_dumps(diag, JSON_INDENT(2));

		if (d) {
			sb_printf(&b, "diagnosis: %s\n", d);
			free(d);
		}
	}
	ranks = json_object_get(rep, "ranks");
	json_array_foreach(ranks, i, rk) {
		const char *tail = jstr(rk, "stderr_tail");

		if (!tail || !*tail)
			continue;
		sb_printf(&b, "rank %d stderr (last lines):\n",
			  (int)json_integer_value(json_object_get(rk, "rank")));
		sb_add(&b, tail, strlen(tail));
		if (tail[strlen(tail) - 1] != '\n')
			sb_add(&b, "\n", 1);
	}
	return sb_take(&b);
}

/* Whether the ranks made different collective calls: the diagnosis's
 * verdict says so, or libdistrun's DR_EMISMATCH text is in a stderr tail. */
static bool says_mismatch(json_t *rep, const char *text)
{
	const char *v = jstr(json_object_get(rep, "diagnosis"), "verdict");

	if (v)
		return !strcmp(v, "mismatch");
	return text && (strstr(text, "different collective") ||
			strstr(text, "mismatch"));
}

/* Fills c->type, c->message, c->text from the case's report and files.
 * Returns true if the case ran as the test expects. */
static bool evaluate(struct ci_case *c, int wait_status, bool killed)
{
	char path[PATH_MAX + 32], msg[1024];
	json_t *rep;
	const char *reason;
	int st, want = c->test->exit_expect;
	bool ok = false;

	free(c->message);
	free(c->text);
	c->message = c->text = NULL;
	c->type = NULL;
	rep = json_load_file(c->report_path, 0, NULL);
	/* The mark of a child killed before its end is no report. */
	if (rep && !json_is_true(json_object_get(rep, "complete"))) {
		json_decref(rep);
		rep = NULL;
	}
	if (!rep) {
		snprintf(path, sizeof(path), "%s/console.err", c->dir);
		c->type = "error";
		if (killed)
			snprintf(msg, sizeof(msg), "distrun did not end by its "
				 "deadline and was killed");
		else if (WIFSIGNALED(wait_status))
			snprintf(msg, sizeof(msg), "distrun was killed by %s "
				 "and wrote no report",
				 signal_name(WTERMSIG(wait_status)));
		else
			snprintf(msg, sizeof(msg), "distrun exited with status "
				 "%d and wrote no report",
				 WEXITSTATUS(wait_status));
		c->exit_status = WIFEXITED(wait_status) ?
				 WEXITSTATUS(wait_status) : -1;
		c->message = strdup(msg);
		c->text = read_file(path, OUTPUT_KEEP, NULL);
		return false;
	}
	st = c->exit_status = (int)json_integer_value(
		json_object_get(rep, "exit_status"));
	reason = jstr(rep, "reason");
	if (!reason)
		reason = "?";
	c->text = failure_text(rep);
	if (!*c->text) {
		/* No diagnosis, no stderr: distrun's own lines say the most. */
		free(c->text);
		snprintf(path, sizeof(path), "%s/console.err", c->dir);
		c->text = read_file(path, OUTPUT_KEEP, NULL);
	}
	if (st == want) {
		c->message = check_output(c);
		ok = !c->message;
		if (!ok)
			c->type = "output";
		else
			c->message = strdup(want ? "exited as expected" : "ok");
		goto out;
	}
	if (!strcmp(reason, "timeout") || !strcmp(reason, "stall") ||
	    !strcmp(reason, "hang")) {
		json_t *rk;
		size_t i;
		struct sbuf b = { 0 };
		const char *vl;

		json_array_foreach(json_object_get(rep, "ranks"), i, rk)
			if (!strcmp(jstr(rk, "state") ? jstr(rk, "state") : "",
				    "running") || (jstr(rk, "note") &&
				    !strcmp(jstr(rk, "note"), "timed out")))
				sb_printf(&b, "%s%d", b.len ? "," : "",
					  (int)json_integer_value(
						json_object_get(rk, "rank")));
		c->type = strcmp(reason, "timeout") ||
			  json_is_true(json_object_get(rep, "stalled")) ?
			  "hang" : "timeout";
		vl = json_string_value(json_object_get(json_object_get(rep,
				"diagnosis"), "verdict_line"));
		if (vl)
			/* The diagnosis's verdict: the odd rank, the call,
			 * its seq. */
			snprintf(msg, sizeof(msg), "%s after %.1fs: %s",
				 !strcmp(c->type, "hang") ? "no progress" :
				 "timed out", json_real_value(json_object_get(
				 rep, "wall_s")), vl);
		else
			snprintf(msg, sizeof(msg), "%s after %.1fs; ranks "
				 "still running: %s", !strcmp(c->type, "hang")
				 ? "no progress" : "timed out",
				 json_real_value(json_object_get(rep,
						 "wall_s")),
				 b.s ? b.s : "none");
		free(b.s);
	} else if (!strcmp(reason, "rank failed")) {
		int r = (int)json_integer_value(
			json_object_get(rep, "first_failed_rank"));
		json_t *rk = json_array_get(json_object_get(rep, "ranks"), r);
		const char *sig = jstr(rk, "signal");

		if (sig) {
			c->type = "signal";
			snprintf(msg, sizeof(msg), "rank %d was killed by %s",
				 r, sig);
		} else {
			c->type = "exit";
			snprintf(msg, sizeof(msg), "rank %d exited with status "
				 "%d", r, st);
		}
		if (says_mismatch(rep, c->text))
			c->type = "mismatch";
	} else if (!strcmp(reason, "cannot run")) {
		c->type = "exit";
		snprintf(msg, sizeof(msg), "the program cannot run (exit "
			 "status %d)", st);
	} else if (!strcmp(reason, "signal")) {
		c->type = "signal";
		snprintf(msg, sizeof(msg), "distrun was stopped by %s",
			 jstr(rep, "signal") ? jstr(rep, "signal") : "a signal");
	} else {
		c->type = "exit";
		snprintf(msg, sizeof(msg), "exited with status %d", st);
	}
	if (want) {
		size_t len = strlen(msg);

		snprintf(msg + len, sizeof(msg) - len, " (expected exit "
			 "status %d)", want);
	}
	c->message = strdup(msg);
out:
	json_decref(rep);
	return ok;
}

static void collect_output(struct ci_case *c)
{
	struct sbuf out = { 0 }, err = { 0 };
	size_t keep = OUTPUT_KEEP / (c->n > 0 ? c->n : 1);
	char path[PATH_MAX + 32];
	char *console;

	if (keep < 1024)
		keep = 1024;
	for (int r = 0; r < c->n; r++) {
		add_labelled(&out, c->dir, r, 0, keep);
		add_labelled(&err, c->dir, r, 1, keep);
	}
	/* distrun's own lines (the failing rank, the summary table). */
	snprintf(path, sizeof(path), "%s/console.err", c->dir);
	console = read_file(path, OUTPUT_KEEP, NULL);
	if (console && *console)
		sb_add(&err, console, strlen(console));
	free(console);
	free(c->out);
	free(c->err);
	c->out = sb_take(&out);
	c->err = sb_take(&err);
}

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
static bool finish_case(struct runner *ru, struct slot *s, int status)
{
	struct ci_case *c = &ru->cases[s->c];
	bool ok = evaluate(c, status, s->killed);

	c->wall = now_mono() - s->t0;
	if (ru->keep_output)
		collect_output(c);
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

static int start_case(struct runner *ru, struct slot *s, int idx,
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

static void signal_slots(struct slot *slots, int n, int sig)
{
	for (int i = 0; i < n; i++)
		if (slots[i].c >= 0)
			killpg(slots[i].pid, sig);
}

/* Runs every case not already decided (skips).  Returns -1 on a failure
 * of distrun itself. */
static int run_cases(struct runner *ru, char **prefix, int nprefix)
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
			if (start_case(ru, &slots[k], queue[qhead], prefix,
				       nprefix)) {
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
			if (finish_case(ru, &slots[i], status)) {
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

/* Forks the process that removes dir once we are gone (EOF on the pipe
 * whose write end only we hold, close-on-exec).  It has the terminal's
 * signals blocked, as the runner has, so a ^C does not end it before it
 * has cleaned.  Without it the directory is still removed at a normal
 * end. */
static void tmp_cleaner(const char *dir)
{
	int fds[2];
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC))
		return;
	pid = fork();
	if (pid == 0) {
		char c;

		/* The signals the runner blocked stay blocked here. */
		close(fds[1]);
		/* fds[0] stays open (an fd >= 3 among them): keep nothing else */
		for (int fd = 0; fd < 3; fd++)
			if (fd != fds[0])
				close(fd);
		if (fds[0] > 3)
			close_range(3, (unsigned)fds[0] - 1, 0);
		close_range((unsigned)fds[0] + 1, ~0U, 0);
		while (read(fds[0], &c, 1) < 0 && errno == EINTR)
			;
		/* Twice: a case killed with us may still have been writing. */
		rm_tree(dir);
		usleep(200000);
		rm_tree(dir);
		_exit(0);
	}
	close(fds[0]);
	if (pid < 0)
		close(fds[1]);
	/* fds[1] is closed when we exit: that is the signal. */
}

static int setup_runner(struct runner *ru)
{
	sigset_t set;

	ru->cores = cpu_count();
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

static void release_runner(struct runner *ru)
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

static int add_case(struct runner *ru, struct ci_list *l, struct ci_test *t,
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
	ru.cores = cpu_count();
	for (int l = 0; l < ru.nlists; l++)
		for (int t = 0; t < ru.lists[l].ntests; t++)
			for (int k = 0; k < ru.lists[l].tests[t].nsizes; k++)
				if (add_case(&ru, &ru.lists[l],
					     &ru.lists[l].tests[t],
					     ru.lists[l].tests[t].sizes[k]))
					goto out;
	rc = 1;
	if (setup_runner(&ru) || run_cases(&ru, NULL, 0))
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
	release_runner(&ru);
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
	if (setup_runner(&ru))
		goto out;
	for (int k = 0; k < t.nsizes; k++)
		if (add_case(&ru, &list, &t, t.sizes[k]))
			goto out;
	if (run_cases(&ru, argv + 1, nprefix))
		goto out;
	rc = 0;
	for (int i = 0; i < ru.ncases; i++) {
		const struct ci_case *c = &ru.cases[i];

		if (ci_verdict_ok(c->verdict))
			continue;
		if (!rc)
			first = c->exit_status > 0 ? c->exit_status : 1;
		rc = 1;
		sb_printf(&failed, "%sn=%d (%s)", failed.len ? ", " : "",
			  c->n, c->message ? c->message : "failed");
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
	release_runner(&ru);
	return rc;
}
