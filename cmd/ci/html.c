/*
 * html.c - --html FILE: one self-contained page per job, sweep or
 * `distrun test` run, for a person who opens a CI artifact.
 *
 * The page is the --report JSON and the --trace JSON of each run, embedded
 * as they are (so they can be saved for Perfetto from the page), with the
 * CSS and the script that draws them (cmd/ci/html.css, cmd/ci/html.js, turned
 * into C strings at build time: $(B)/gen/html_tmpl.h).  Nothing is loaded
 * from anywhere: a Content-Security-Policy forbids every fetch, so the
 * page works from disk offline and cannot call out even if a rank's
 * output tried.  What the ranks printed reaches the page only as JSON
 * string data ('<' written as \u003c, so no "</script>" can end a block)
 * and the script puts it in the page as text, never as markup.  Without
 * script, a static headline still says how the run ended.
 *
 * Large jobs: a job's page embeds each rank's last calls and output lines
 * only (PAGE_SLICES over all ranks), a sweep's or test run's page embeds a
 * run's trace only under TRACE_EMBED_MAX bytes, and TRACES_EMBED_MAX in
 * all; the page says what it left out and where the whole trace is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"
#include "ci.h"
#include "diag.h"
#include "html_tmpl.h"

/* Calls (and output lines) kept per page, over all ranks; at least
 * MIN_PER_RANK a rank. */
#define PAGE_SLICES 50000
#define MIN_PER_RANK 100
/* A run's report and trace read for a sweep's or test run's page. */
#define REPORT_EMBED_MAX (16u << 20)
#define TRACE_EMBED_MAX (24u << 20)
#define TRACES_EMBED_MAX (64u << 20)   /* all of a page's traces */

struct html_sec {
	char *meta;      /* JSON members for the section (no braces) */
	char *report;    /* JSON text or NULL */
	char *trace;     /* JSON text or NULL */
};

/* s as text in HTML (element content or a quoted attribute). */
static void html_text(FILE *f, const char *s)
{
	for (; s && *s; s++)
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&#39;", f); break;
		default: fputc(*s, f);
		}
}

/* JSON text inside <script type="application/json">: '<' (only ever in
 * strings) escaped, so nothing in it can close or open a tag. */
static void json_block(FILE *f, const char *id, const char *json)
{
	fprintf(f, "<script type=\"application/json\" id=\"%s\">", id);
	for (const char *p = json; *p; p++) {
		const char *lt = strpbrk(p, "<>&");

		if (!lt) {
			fputs(p, f);
			break;
		}
		fwrite(p, 1, (size_t)(lt - p), f);
		fprintf(f, "\\u%04x", (unsigned)*lt);
		p = lt;
	}
	fputs("</script>\n", f);
}

/* The page: kind is "job", "sweep" or "test"; headline is what it says
 * without script. */
static int html_write(const char *path, const char *kind, const char *title,
		      const char *headline, struct html_sec *secs, int nsecs)
{
	struct outfile of;
	struct sb page = { 0 };
	char id[32];
	FILE *f;

	sb_printf(&page, "{\"kind\":\"%s\",\"title\":", kind);
	sb_json_str(&page, title);
	sb_printf(&page, ",\"version\":\"%s\",\"sections\":[", DISTRUN_VERSION);
	for (int i = 0; i < nsecs; i++)
		sb_printf(&page, "%s{\"id\":\"s%d\",\"report\":%s,\"trace\":%s%s%s}",
			  i ? "," : "", i, secs[i].report ? "true" : "false",
			  secs[i].trace ? "true" : "false",
			  secs[i].meta && *secs[i].meta ? "," : "",
			  secs[i].meta ? secs[i].meta : "");
	sb_printf(&page, "]}");
	if (page.oom) {
		fprintf(stderr, "distrun: --html %s: out of memory\n", path);
		free(page.s);
		return -1;
	}
	if (outfile_open(&of, path, "--html")) {
		free(page.s);
		return -1;
	}
	f = of.f;
	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	      "<meta http-equiv=\"Content-Security-Policy\" content=\""
	      "default-src 'none'; style-src 'unsafe-inline'; "
	      "script-src 'unsafe-inline'; img-src data:\">\n"
	      "<meta name=\"viewport\" content=\"width=device-width\">\n"
	      "<meta name=\"generator\" content=\"distrun " DISTRUN_VERSION
	      "\">\n<title>distrun: ", f);
	html_text(f, title);
	fputs("</title>\n<style>\n", f);
	fputs(html_css, f);
	fputs("</style></head>\n<body>\n<header id=\"static\"><h1>", f);
	html_text(f, headline);
	fputs("</h1><noscript><p>The timeline, the call grid and the rank "
	      "cards need JavaScript; the report and trace are in this "
	      "file's script blocks.</p></noscript></header>\n"
	      "<main id=\"app\"></main>\n", f);
	json_block(f, "distrun-page", page.s);
	for (int i = 0; i < nsecs; i++) {
		snprintf(id, sizeof(id), "s%d-report", i);
		if (secs[i].report)
			json_block(f, id, secs[i].report);
		snprintf(id, sizeof(id), "s%d-trace", i);
		if (secs[i].trace)
			json_block(f, id, secs[i].trace);
	}
	fputs("<script>\n", f);
	fputs(html_js, f);
	fputs("</script>\n</body></html>\n", f);
	free(page.s);
	return outfile_commit(&of);
}

/* The command line as one string, for titles. */
static void command_str(struct sb *b, char **argv, int argc)
{
	for (int i = 0; i < argc; i++)
		sb_printf(b, "%s%s", i ? " " : "", argv[i]);
}

int html_job(struct job *job)
{
	int n = job->o->nranks;
	size_t per_rank = PAGE_SLICES / (size_t)(n ? n : 1);
	struct html_sec sec = { 0 };
	struct sb title = { 0 }, head = { 0 }, meta = { 0 };
	int rc;

	if (per_rank < MIN_PER_RANK)
		per_rank = MIN_PER_RANK;
	sec.report = report_text(job);
	sec.trace = trace_text(job, per_rank);
	command_str(&title, job->o->argv, job->o->argc);
	if (job->first_fail >= 0) {
		char st[64];

		sb_printf(&head, "distrun: failed: rank %d %s",
			  job->rank_offset + job->first_fail,
			  rank_status_str(&job->ranks[job->first_fail], st,
					  sizeof(st)));
	} else if (job->stalled) {
		sb_printf(&head, "distrun: hung (no progress)");
	} else if (job->timed_out) {
		sb_printf(&head, "distrun: timed out");
	} else if (job->stop_signal) {
		sb_printf(&head, "distrun: stopped by %s",
			  signal_name(job->stop_signal));
	} else {
		sb_printf(&head, "distrun: %s", job->exit_status ? "failed" :
			  "passed");
	}
	sb_printf(&head, ", exit status %d", job->exit_status);
	sb_printf(&meta, "\"n\":%d,\"per_rank_cap\":%zu,\"trace_file\":", n,
		  per_rank);
	sb_json_str(&meta, job->o->trace);
	sec.meta = meta.oom ? NULL : meta.s;
	rc = html_write(job->o->html, "job", title.oom ? "" : title.s,
			head.oom ? "distrun" : head.s, &sec, 1);
	free(sec.report);
	free(sec.trace);
	free(title.s);
	free(head.s);
	free(meta.s);
	return rc;
}

/* A file's JSON text if it is there and at most max bytes, else NULL and
 * *why says why. */
static char *slurp(const char *path, size_t max, const char **why)
{
	size_t len = 0;
	char *buf = ci_read_file(path, max, &len);

	*why = buf ? NULL : "not written";
	if (buf && len > max) {
		*why = "too large to embed";
		free(buf);
		return NULL;
	}
	/* The "incomplete" mark of a run killed before its end is no
	 * trace. */
	if (buf && (buf[0] != '{' || (len < 512 &&
		    (strstr(buf, "\"complete\":false") ||
		     strstr(buf, "\"complete\": false"))))) {
		*why = "not finished";
		free(buf);
		return NULL;
	}
	return buf;
}

int html_ci(const char *path, bool test, struct ci_case *cases, int ncases,
	    char **argv, int argc)
{
	struct html_sec *secs = calloc((size_t)(ncases ? ncases : 1),
				       sizeof(*secs));
	struct sb title = { 0 }, head = { 0 };
	size_t traces = 0;
	int bad = 0, rc;

	if (!secs) {
		fprintf(stderr, "distrun: --html %s: out of memory\n", path);
		return -1;
	}
	for (int i = 0; i < ncases; i++) {
		const struct ci_case *c = &cases[i];
		struct sb m = { 0 };
		const char *why = NULL;

		bad += !ci_verdict_ok(c->verdict);
		if (c->verdict != CI_SKIP) {
			secs[i].report = slurp(c->report_path, REPORT_EMBED_MAX,
					       &why);
			secs[i].trace = slurp(c->trace_path, TRACE_EMBED_MAX,
					      &why);
			traces += secs[i].trace ? strlen(secs[i].trace) : 0;
			if (traces > TRACES_EMBED_MAX) {
				why = "too large to embed (the page holds at "
				      "most 64 MiB of traces)";
				traces -= strlen(secs[i].trace);
				free(secs[i].trace);
				secs[i].trace = NULL;
			}
		}
		sb_printf(&m, "\"name\":");
		sb_json_str(&m, c->name);
		sb_printf(&m, ",\"test\":");
		sb_json_str(&m, c->test->name);
		sb_printf(&m, ",\"suite\":");
		sb_json_str(&m, c->list->suite);
		sb_printf(&m, ",\"n\":%d,\"verdict\":\"%s\",\"ok\":%s,"
			  "\"exit_status\":%d,\"wall_s\":%.3f,\"attempts\":%d,"
			  "\"type\":", c->n, ci_verdict_name(c->verdict),
			  ci_verdict_ok(c->verdict) ? "true" : "false",
			  c->exit_status, c->wall, c->attempts);
		sb_json_str(&m, c->type);
		sb_printf(&m, ",\"message\":");
		sb_json_str(&m, c->message);
		sb_printf(&m, ",\"trace_note\":");
		sb_json_str(&m, secs[i].trace ? NULL : why);
		sb_printf(&m, ",\"trace_file\":");
		sb_json_str(&m, c->trace_user ? c->trace_path : NULL);
		secs[i].meta = m.oom ? NULL : m.s;
	}
	if (argc)
		command_str(&title, argv, argc);
	else
		sb_printf(&title, "distrun test");
	sb_printf(&head, "distrun %s: %d run%s, %s", test ? "test" : "sweep",
		  ncases, ncases == 1 ? "" : "s", bad ? "FAILED" : "all passed");
	rc = html_write(path, test ? "test" : "sweep", title.oom ? "" : title.s,
			head.oom ? "distrun" : head.s, secs, ncases);
	for (int i = 0; i < ncases; i++) {
		free(secs[i].meta);
		free(secs[i].report);
		free(secs[i].trace);
	}
	free(secs);
	free(title.s);
	free(head.s);
	return rc;
}
