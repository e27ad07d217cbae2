/*
 * testverdict.c - a `distrun test` case's verdict, made from what its
 * child distrun left: the report (exit status, reason, the stall
 * diagnosis, each failing rank's stderr tail) and the rank.N.stdout /
 * rank.N.stderr files, which the output expectations (stdout=RE,
 * stdout-file=F) are checked against.  Whatever the launcher adds to its
 * report becomes the failure's text without this code knowing how it was
 * made.  Also the labelled, cut output that JUnit and TAP carry, and the
 * growing string buffer the rooms share.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "testrun.h"

/* Labelled output kept per stream and case for JUnit and TAP. */
#define OUTPUT_KEEP (64 * 1024)
/* Expected-output files and rank output read for matching. */
#define MATCH_MAX (64 * 1024 * 1024)

/* ------------------------------------------------------------ files */

/* Reads at most max bytes of path into a NUL-terminated malloc'd buffer.
 * Returns NULL if it cannot be read; *len gets the whole file's size. */
static char *read_file(const char *path, size_t max, size_t *len)
{
	return ci_read_file(path, max, len);
}

void testrun_sb_add(struct sbuf *b, const char *p, size_t n)
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

void testrun_sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		testrun_sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n :
			       sizeof(tmp) - 1);
}

char *testrun_sb_take(struct sbuf *b)
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
		testrun_sb_printf(b, "[%d] [distrun: %zu of %zu bytes cut "
				  "here]\n", r, cut, size);
	while (*p) {
		char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);

		testrun_sb_printf(b, "[%d] ", r);
		testrun_sb_add(b, p, len);
		testrun_sb_add(b, "\n", 1);
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
		testrun_sb_printf(&b, "%s", "");
		testrun_sb_add(&b, json_string_value(diag),
			       strlen(json_string_value(diag)));
		if (b.len && b.s[b.len - 1] != '\n')
			testrun_sb_add(&b, "\n", 1);
	} else if (json_is_string(json_object_get(diag, "text"))) {
		/* diag.c's object: its text is what a person reads. */
		const char *t = json_string_value(json_object_get(diag, "text"));

		testrun_sb_add(&b, t, strlen(t));
		if (b.len && b.s[b.len - 1] != '\n')
			testrun_sb_add(&b, "\n", 1);
	} else if (diag && !json_is_null(diag)) {
		char *d = json_dumps(diag, JSON_INDENT(2));

		if (d) {
			testrun_sb_printf(&b, "diagnosis: %s\n", d);
			free(d);
		}
	}
	ranks = json_object_get(rep, "ranks");
	json_array_foreach(ranks, i, rk) {
		const char *tail = jstr(rk, "stderr_tail");

		if (!tail || !*tail)
			continue;
		testrun_sb_printf(&b, "rank %d stderr (last lines):\n",
				  (int)json_integer_value(
					  json_object_get(rk, "rank")));
		testrun_sb_add(&b, tail, strlen(tail));
		if (tail[strlen(tail) - 1] != '\n')
			testrun_sb_add(&b, "\n", 1);
	}
	return testrun_sb_take(&b);
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
bool testrun_evaluate(struct ci_case *c, int wait_status, bool killed)
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
				testrun_sb_printf(&b, "%s%d",
					b.len ? "," : "",
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

void testrun_collect_output(struct ci_case *c)
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
		testrun_sb_add(&err, console, strlen(console));
	free(console);
	free(c->out);
	free(c->err);
	c->out = testrun_sb_take(&out);
	c->err = testrun_sb_take(&err);
}
