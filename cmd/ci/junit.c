/*
 * junit.c - the results of `distrun test` and of sweeps as JUnit XML and
 * as TAP version 13, for CI systems to read.
 *
 * JUnit: a <testsuites> with a <testsuite> per list and a <testcase> per
 * (test, world size), in the shape testdata/junit.xsd describes (the
 * common Ant/Jenkins form, plus <properties> in a testcase as Jenkins and
 * GitLab read it).  A failure's type is the kind (exit, signal, timeout,
 * hang, mismatch, output, xpass), its message the verdict, its text the
 * diagnosis and stderr tails; an expected failure is <skipped type="xfail">
 * as pytest writes it.  Everything that came from a rank is made fit for
 * XML 1.0: bytes that are not UTF-8 become U+FFFD, characters XML forbids
 * (most C0 controls, U+FFFE, U+FFFF) are dropped, and the five special
 * characters are escaped.
 *
 * TAP: "ok"/"not ok" per case, # SKIP for skips, # TODO for expected
 * failures (so a TAP consumer counts them as TAP does), an xfail that
 * passed as a plain "not ok" (the run fails on it, see distrun(1)), and a
 * YAML block (the subset TAP::Parser::YAMLish reads: double-quoted strings
 * with \", \\, \n, \t, \r, \xNN) for every case that did not pass.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"
#include "ci.h"

/* The next code point of [*p, end), or -1 for a byte that does not start
 * valid UTF-8 (overlong forms and surrogates included); advances *p. */
const char *ci_verdict_name(enum ci_verdict v)
{
	static const char *const names[] = {
		[CI_PASS] = "PASS", [CI_FAIL] = "FAIL", [CI_XFAIL] = "XFAIL",
		[CI_XPASS] = "XPASS", [CI_SKIP] = "SKIP", [CI_FLAKY] = "FLAKY",
		[CI_ERROR] = "ERROR",
	};
	return names[v];
}

bool ci_verdict_ok(enum ci_verdict v)
{
	return v == CI_PASS || v == CI_XFAIL || v == CI_SKIP || v == CI_FLAKY;
}

long ci_utf8_next(const unsigned char **p, const unsigned char *end)
{
	const unsigned char *s = *p;
	long cp;
	int n;

	if (s[0] < 0x80) {
		*p = s + 1;
		return s[0];
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 1, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 2, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 3, cp = s[0] & 0x07;
	else
		goto bad;
	if (end - s <= n)
		goto bad;
	for (int i = 1; i <= n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			goto bad;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		goto bad;
	*p = s + n + 1;
	return cp;
bad:
	*p = s + 1;
	return -1;
}

/* Writes s as XML character data (attr: also escapes quotes). */
static void xml_text(FILE *f, const char *str, bool attr)
{
	const unsigned char *p = (const unsigned char *)(str ? str : ""),
			    *end = p + strlen((const char *)p);

	while (p < end) {
		const unsigned char *start = p;
		long cp = ci_utf8_next(&p, end);

		if (cp < 0) {
			fputs("\xef\xbf\xbd", f);
			continue;
		}
		if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') ||
		    cp == 0xfffe || cp == 0xffff)
			continue;
		switch (cp) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs(attr ? "&quot;" : "\"", f); break;
		case '\'': fputs(attr ? "&apos;" : "'", f); break;
		/* In an attribute a raw newline would be read as a space. */
		case '\n': fputs(attr ? "&#10;" : "\n", f); break;
		case '\r': fputs("&#13;", f); break;
		case '\t': fputs(attr ? "&#9;" : "\t", f); break;
		default:
			fwrite(start, 1, p - start, f);
		}
	}
}

static void xml_prop(FILE *f, const char *indent, const char *name,
		     const char *value)
{
	fprintf(f, "%s<property name=\"", indent);
	xml_text(f, name, true);
	fputs("\" value=\"", f);
	xml_text(f, value, true);
	fputs("\"/>\n", f);
}

static void xml_prop_int(FILE *f, const char *indent, const char *name,
			 long v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%ld", v);
	xml_prop(f, indent, name, buf);
}

static void iso_time(double t, char *buf, size_t n)
{
	time_t s = (time_t)t;
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
}

struct counts {
	int tests, failures, errors, skipped;
	double time, start;
};

static void count_case(struct counts *k, const struct ci_case *c)
{
	k->tests++;
	k->failures += c->verdict == CI_FAIL || c->verdict == CI_XPASS;
	k->errors += c->verdict == CI_ERROR;
	k->skipped += c->verdict == CI_SKIP || c->verdict == CI_XFAIL;
	k->time += c->wall;
	if (c->start && (!k->start || c->start < k->start))
		k->start = c->start;
}

static void write_case(FILE *f, const struct ci_case *c)
{
	const char *in = "      ";

	fputs("    <testcase classname=\"", f);
	xml_text(f, c->list->suite, true);
	fputs("\" name=\"", f);
	xml_text(f, c->name, true);
	fprintf(f, "\" time=\"%.3f\"", c->wall);
	if (c->test->file && c->test->line) {
		fputs(" file=\"", f);
		xml_text(f, c->test->file, true);
		fprintf(f, "\" line=\"%d\"", c->test->line);
	}
	fputs(">\n      <properties>\n", f);
	in = "        ";
	xml_prop_int(f, in, "np", c->n);
	xml_prop_int(f, in, "cores", c->cores);
	xml_prop(f, in, "oversubscribed", c->oversubscribed ? "true" :
		 "false");
	xml_prop(f, in, "distrun_version", DISTRUN_VERSION);
	xml_prop(f, in, "verdict", ci_verdict_name(c->verdict));
	if (c->verdict != CI_SKIP) {
		xml_prop_int(f, in, "attempts", c->attempts);
		xml_prop_int(f, in, "exit_status", c->exit_status);
	}
	if (c->verdict == CI_FLAKY)
		xml_prop(f, in, "flaky", "true");
	if (c->test->xfail)
		xml_prop(f, in, "xfail", c->test->xfail);
	fputs("      </properties>\n", f);
	switch (c->verdict) {
	case CI_SKIP:
		fputs("      <skipped message=\"", f);
		xml_text(f, c->message, true);
		fputs("\"/>\n", f);
		break;
	case CI_XFAIL:
		fputs("      <skipped type=\"xfail\" message=\"", f);
		xml_text(f, "expected failure (", true);
		xml_text(f, c->test->xfail, true);
		xml_text(f, "): ", true);
		xml_text(f, c->type, true);
		xml_text(f, ": ", true);
		xml_text(f, c->message, true);
		fputs("\"/>\n", f);
		break;
	case CI_FAIL:
	case CI_XPASS:
	case CI_ERROR:
		fprintf(f, "      <%s type=\"", c->verdict == CI_ERROR ?
			"error" : "failure");
		xml_text(f, c->type, true);
		fputs("\" message=\"", f);
		xml_text(f, c->message, true);
		fputs("\">", f);
		xml_text(f, c->text, false);
		fprintf(f, "</%s>\n", c->verdict == CI_ERROR ? "error" :
			"failure");
		break;
	default:
		break;
	}
	if (c->out && *c->out) {
		fputs("      <system-out>", f);
		xml_text(f, c->out, false);
		fputs("</system-out>\n", f);
	}
	if (c->err && *c->err) {
		fputs("      <system-err>", f);
		xml_text(f, c->err, false);
		fputs("</system-err>\n", f);
	}
	fputs("    </testcase>\n", f);
}

int junit_write(const char *path, struct ci_list *lists, int nlists,
		struct ci_case *cases, int ncases)
{
	struct counts all = { 0 };
	char host[256] = "localhost", ts[64];
	struct outfile of;
	FILE *f;

	if (outfile_open(&of, path, "--junit"))
		return -1;
	f = of.f;
	gethostname(host, sizeof(host) - 1);
	for (int i = 0; i < ncases; i++)
		count_case(&all, &cases[i]);
	fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
	fprintf(f, "<testsuites name=\"distrun\" tests=\"%d\" failures=\"%d\" "
		"errors=\"%d\" skipped=\"%d\" time=\"%.3f\">\n", all.tests,
		all.failures, all.errors, all.skipped, all.time);
	for (int l = 0; l < nlists; l++) {
		struct counts k = { 0 };

		for (int i = 0; i < ncases; i++)
			if (cases[i].list == &lists[l])
				count_case(&k, &cases[i]);
		iso_time(k.start ? k.start : now_real(), ts, sizeof(ts));
		fputs("  <testsuite name=\"", f);
		xml_text(f, lists[l].suite, true);
		fprintf(f, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" "
			"skipped=\"%d\" time=\"%.3f\" timestamp=\"%s\" "
			"hostname=\"", k.tests, k.failures, k.errors,
			k.skipped, k.time, ts);
		xml_text(f, host, true);
		fputs("\">\n    <properties>\n", f);
		xml_prop(f, "      ", "distrun_version", DISTRUN_VERSION);
		xml_prop(f, "      ", "list", lists[l].path);
		xml_prop_int(f, "      ", "cores",
			     ncases ? cases[0].cores : 0);
		fputs("    </properties>\n", f);
		for (int i = 0; i < ncases; i++)
			if (cases[i].list == &lists[l])
				write_case(f, &cases[i]);
		fputs("  </testsuite>\n", f);
	}
	fputs("</testsuites>\n", f);
	return outfile_commit(&of);
}

/* ------------------------------------------------------------ TAP */

/* A YAML double-quoted scalar that TAP::Parser::YAMLish reads back. */
static void yaml_str(FILE *f, const char *str)
{
	const unsigned char *p = (const unsigned char *)(str ? str : ""),
			    *end = p + strlen((const char *)p);

	fputc('"', f);
	while (p < end) {
		const unsigned char *start = p;
		long cp = ci_utf8_next(&p, end);

		if (cp < 0 || (cp >= 0x7f && cp <= 0x9f) || cp == 0xfffe ||
		    cp == 0xffff)
			fputs(cp < 0 ? "\xef\xbf\xbd" : "", f);
		else if (cp == '"')
			fputs("\\\"", f);
		else if (cp == '\\')
			fputs("\\\\", f);
		else if (cp == '\n')
			fputs("\\n", f);
		else if (cp == '\t')
			fputs("\\t", f);
		else if (cp == '\r')
			fputs("\\r", f);
		else if (cp < 0x20)
			fprintf(f, "\\x%02x", (unsigned)cp);
		else
			fwrite(start, 1, p - start, f);
	}
	fputc('"', f);
}

/* A test description: no newline, and '#' escaped (it starts a directive). */
static void tap_desc(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '#' || *s == '\\')
			fputc('\\', f);
		fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
	}
}

int tap_write(const char *path, struct ci_case *cases, int ncases)
{
	struct outfile of;
	FILE *f;

	if (outfile_open(&of, path, "--tap"))
		return -1;
	f = of.f;
	fprintf(f, "TAP version 13\n1..%d\n", ncases);
	for (int i = 0; i < ncases; i++) {
		const struct ci_case *c = &cases[i];
		bool ok = c->verdict == CI_PASS || c->verdict == CI_FLAKY ||
			  c->verdict == CI_SKIP;

		fprintf(f, "%s %d - ", ok ? "ok" : "not ok", i + 1);
		tap_desc(f, c->list->suite);
		fputs(": ", f);
		tap_desc(f, c->name);
		if (c->verdict == CI_SKIP) {
			fputs(" # SKIP ", f);
			tap_desc(f, c->message ? c->message : "");
		} else if (c->verdict == CI_XFAIL) {
			fputs(" # TODO xfail: ", f);
			tap_desc(f, c->test->xfail);
		} else if (!ok && c->type && c->message &&
			   (!strcmp(c->type, "hang") ||
			    !strcmp(c->type, "timeout"))) {
			/* A hang's verdict on its line: the odd rank, the
			 * call, its seq (testrun.c's message). */
			fputs(" - ", f);
			tap_desc(f, c->message);
		}
		fputc('\n', f);
		if (c->verdict == CI_SKIP)
			continue;
		fputs("  ---\n", f);
		fprintf(f, "  verdict: %s\n", ci_verdict_name(c->verdict));
		fprintf(f, "  np: %d\n  duration_ms: %.0f\n  attempts: %d\n",
			c->n, c->wall * 1000, c->attempts);
		if (c->verdict != CI_PASS) {
			fputs("  message: ", f);
			yaml_str(f, c->message);
			fprintf(f, "\n  type: %s\n  severity: %s\n",
				c->type ? c->type : "none",
				ci_verdict_ok(c->verdict) ? "none" : "fail");
			fprintf(f, "  exit_status: %d\n", c->exit_status);
			if (c->text && *c->text) {
				fputs("  diagnosis: ", f);
				yaml_str(f, c->text);
				fputc('\n', f);
			}
			if (c->out && *c->out) {
				fputs("  stdout: ", f);
				yaml_str(f, c->out);
				fputc('\n', f);
			}
			if (c->err && *c->err) {
				fputs("  stderr: ", f);
				yaml_str(f, c->err);
				fputc('\n', f);
			}
		}
		fputs("  ...\n", f);
	}
	return outfile_commit(&of);
}
