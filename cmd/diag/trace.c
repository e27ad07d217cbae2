/*
 * trace.c - --trace FILE: the job's timeline in the Chrome trace event
 * format (JSON; opens in Perfetto and chrome://tracing).
 *
 * One process ("distrun job"), a track (thread) per rank.  Each rank's
 * lifetime is a slice; inside it, each collective or blocking p2p call is
 * a slice named by its op, with op, dtype, count, bytes, seq, group and
 * status in its args; a call that waited for a later rank carries a
 * nested "wait for rank R" slice (from its own arrival to the last
 * arrival); calls still running at the end are cut there and marked.
 * Output lines are instant events on their rank's track.
 *
 * The calls come from the ranks' flight records (ctl.h), which diag.c
 * reads every 20 ms while tracing; a rank that makes more than
 * DRI_CTL_RING_WORLD world calls (or DRI_CTL_RING_OTHER others) in that
 * time loses the oldest, and the trace says how many in
 * otherData.dropped_calls.  Times are microseconds since distrun
 * started.  Slices nest: a call still running at the end (or that its
 * rank died in) ends where its rank's slice ends.
 *
 * --html embeds a shorter one (trace_text with max_calls): each rank's
 * last calls and output lines only, with otherData.capped_calls and
 * capped_lines saying how many were left out.
 *
 * The events are printed as text into one growing buffer (struct sb),
 * not built as jansson values like the diagnosis's part of --report: a
 * timeline is one event per call per rank, 100k+ calls x 256 ranks in a
 * long job, written once and never merged into anything.  Measured with
 * jansson 2.14, events shaped like slice()'s, on a loaded 2-core machine:
 * 1M events as text 0.7 s and 241 MB at peak (the output's own size), as
 * a json_t tree dumped at the end 22 s and 3.3 GB (3.3 KB an event, 13
 * times its text); 200k events 0.1 s against 1.2 s.  25M events as a
 * tree would want some 80 GB.  sb_json_str makes each string valid JSON
 * (bytes that are not UTF-8 as \ufffd).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"
#include "contract.h"
#include "diag.h"

/* The latest arrival at a collective (group, seq) over every rank, and
 * who it was. */
struct arrival {
	uint32_t group;
	uint64_t seq;
	int64_t last;
	int rank;
};

static int arr_cmp(const void *a, const void *b)
{
	const struct arrival *x = a, *y = b;

	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return 0;
}

/* A launcher time (seconds, now_mono) in the calls' unit: every time of
 * the trace is whole ns from t0, so that one cut at its rank's end ends
 * exactly where the rank's slice does. */
static int64_t ns(double s)
{
	return (int64_t)(s * 1e9);
}

static void ev_common(struct sb *b, bool *first, int tid)
{
	sb_printf(b, "%s\n{\"pid\":1,\"tid\":%d,", *first ? "" : ",", tid);
	*first = false;
}

static void slice(struct sb *b, bool *first, int r, const dri_ctl_call *c,
		  int64_t t0, int64_t rank_end, const struct arrival *arr,
		  size_t narr)
{
	char desc[160];
	int64_t end = c->t_end ? c->t_end : rank_end;
	struct arrival key = { c->group_id, c->seq, 0, 0 }, *a;

	ev_common(b, first, r);
	sb_printf(b, "\"ph\":\"X\",\"cat\":\"%s\",\"name\":",
		  c->coll == DRI_P2P ? "p2p" : "collective");
	sb_json_str(b, dri_coll_name((dri_coll)c->coll));
	if (end > rank_end)
		end = rank_end;
	if (end < c->t_start)
		end = c->t_start;
	sb_printf(b, ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"call\":",
		  (c->t_start - t0) / 1e3, (end - c->t_start) / 1e3);
	sb_json_str(b, diag_call_str(c, desc, sizeof(desc)));
	sb_printf(b, ",\"group\":%u,\"seq\":%llu,\"count\":%llu,\"bytes\":%llu,"
		  "\"dtype\":", c->group_id, (unsigned long long)c->seq,
		  (unsigned long long)c->count, (unsigned long long)c->bytes);
	sb_json_str(b, c->dtype >= 0 ? dr_dtype_name((dr_dtype)c->dtype) : NULL);
	sb_printf(b, ",\"op\":");
	sb_json_str(b, c->op >= 0 ? dr_op_name((dr_op)c->op) : NULL);
	sb_printf(b, ",\"root\":%d,\"peer\":%d,\"status\":", c->root, c->peer);
	sb_json_str(b, c->t_end ? dr_err_name((dr_err)c->status) : "unfinished");
	sb_printf(b, "}}");

	/* The wait: for collectives, until the last rank arrived. */
	if (c->coll == DRI_P2P || !narr)
		return;
	a = bsearch(&key, arr, narr, sizeof(*arr), arr_cmp);
	if (!a || a->rank == r || a->last <= c->t_start)
		return;
	ev_common(b, first, r);
	sb_printf(b, "\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"wait for rank "
		  "%d\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"seq\":%llu}}",
		  a->rank, (c->t_start - t0) / 1e3,
		  ((a->last < end ? a->last : end) - c->t_start) / 1e3,
		  (unsigned long long)c->seq);
}

char *trace_text(struct job *job, size_t max_calls)
{
	struct diag *d = job->diag;
	int n = job->o->nranks;
	int64_t t0 = ns(job->t0);
	struct arrival *arr = NULL;
	size_t narr = 0, cap = 0, *lines_left = NULL;
	uint64_t dropped = 0, capped_calls = 0, capped_lines = 0;
	struct sb b = { 0 };
	bool first = true;

	if (!d)
		return NULL;
	for (int r = 0; r < n; r++) {
		diag_harvest(job, r);
		dropped += d->rk[r].dropped;
	}
	/* Latest arrival per collective, for the waits.  With a cap, from
	 * the calls kept only: a rank whose record of a call was left out
	 * was further on, so it came to that call earlier than the last. */
	for (int r = 0; r < n; r++)
		for (size_t i = max_calls && d->rk[r].nrec > max_calls ?
				d->rk[r].nrec - max_calls : 0;
		     i < d->rk[r].nrec; i++) {
			const dri_ctl_call *c = &d->rk[r].recs[i];

			if (c->coll == DRI_P2P)
				continue;
			if (narr == cap) {
				size_t nc = cap ? 2 * cap : 256;
				struct arrival *p = realloc(arr, nc * sizeof(*p));
				if (!p)
					goto sorted;
				arr = p;
				cap = nc;
			}
			arr[narr++] = (struct arrival){ c->group_id, c->seq,
							c->t_start, r };
		}
sorted:
	if (narr)
		qsort(arr, narr, sizeof(*arr), arr_cmp);
	{
		size_t w = 0;   /* merge equal keys, keeping the latest */

		for (size_t i = 0; i < narr; i++) {
			if (w && !arr_cmp(&arr[w - 1], &arr[i])) {
				if (arr[i].last > arr[w - 1].last)
					arr[w - 1] = arr[i];
				continue;
			}
			arr[w++] = arr[i];
		}
		narr = w;
	}
	/* With a cap: how many of each rank's lines to skip. */
	if (max_calls) {
		lines_left = calloc(n, sizeof(*lines_left));
		if (!lines_left)
			b.oom = 1;
		for (size_t i = 0; lines_left && i < d->nlines; i++)
			lines_left[d->lines[i].rank]++;
		for (int r = 0; lines_left && r < n; r++)
			lines_left[r] = lines_left[r] > max_calls ?
					lines_left[r] - max_calls : 0;
	}

	sb_printf(&b, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
	ev_common(&b, &first, 0);
	sb_printf(&b, "\"ph\":\"M\",\"name\":\"process_name\",\"args\":"
		  "{\"name\":\"distrun job\"}}");
	for (int r = 0; r < n; r++) {
		const struct rank *rk = &job->ranks[r];
		char name[32], st[64];
		int64_t end_ns = ns(rk->state == RANK_EXITED ? rk->t_end
							      : now_mono());
		int64_t start_ns = ns(rk->t_start);
		size_t from = 0;

		if (job->nnodes > 1)
			snprintf(name, sizeof(name), "rank %d (node %d)",
				 job->rank_offset + r, job->node_rank);
		else
			snprintf(name, sizeof(name), "rank %d", r);
		ev_common(&b, &first, r);
		sb_printf(&b, "\"ph\":\"M\",\"name\":\"thread_name\",\"args\":"
			  "{\"name\":\"%s\"}}", name);
		ev_common(&b, &first, r);
		sb_printf(&b, "\"ph\":\"M\",\"name\":\"thread_sort_index\","
			  "\"args\":{\"sort_index\":%d}}", r);
		if (rk->state == RANK_NEW)
			continue;
		ev_common(&b, &first, r);
		sb_printf(&b, "\"ph\":\"X\",\"cat\":\"rank\",\"name\":\"%s\","
			  "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"pid\":%d,"
			  "\"status\":", name, (start_ns - t0) / 1e3,
			  (end_ns - start_ns) / 1e3, (int)rk->pid);
		sb_json_str(&b, rank_status_str(rk, st, sizeof(st)));
		sb_printf(&b, "}}");
		if (max_calls && d->rk[r].nrec > max_calls) {
			from = d->rk[r].nrec - max_calls;
			capped_calls += from;
		}
		for (size_t i = from; i < d->rk[r].nrec; i++)
			slice(&b, &first, r, &d->rk[r].recs[i], t0, end_ns,
			      arr, narr);
		/* Calls it is still in (or died in). */
		const dri_ctl *c = diag_ctl(job, r);
		for (int s = 0; c && s < DRI_CTL_SLOTS; s++) {
			dri_ctl_slot sl;

			if (!dri_ctl_read_slot(c, s, &sl) &&
			    sl.state == DRI_CTL_IN_CALL)
				slice(&b, &first, r, &sl.call, t0, end_ns, arr,
				      narr);
		}
	}
	for (size_t i = 0; i < d->nlines; i++) {
		const struct diag_line *l = &d->lines[i];

		if (lines_left && lines_left[l->rank]) {
			lines_left[l->rank]--;
			capped_lines++;
			continue;
		}
		ev_common(&b, &first, l->rank);
		sb_printf(&b, "\"ph\":\"i\",\"s\":\"t\",\"cat\":\"%s\",\"name\":",
			  l->stream ? "stderr" : "stdout");
		sb_json_str(&b, l->text);
		sb_printf(&b, ",\"ts\":%.3f}",
			  (ns(l->t) - t0) / 1e3);
	}
	sb_printf(&b, "\n],\"otherData\":{\"run_id\":\"%s\",\"world_size\":%d,"
		  "\"dropped_calls\":%llu,\"dropped_lines\":%llu,"
		  "\"capped_calls\":%llu,\"capped_lines\":%llu,"
		  "\"line_max\":%d}}\n",
		  job->run_id, n, (unsigned long long)dropped,
		  (unsigned long long)d->lines_dropped,
		  (unsigned long long)capped_calls,
		  (unsigned long long)capped_lines, DIAG_LINE_MAX);
	free(arr);
	free(lines_left);
	if (b.oom) {
		fprintf(stderr, "distrun: the timeline: out of memory\n");
		free(b.s);
		return NULL;
	}
	return sb_take(&b);
}

int trace_write(struct job *job)
{
	char *t;
	int rc;

	if (!job->diag || !job->o->trace)
		return 0;
	t = trace_text(job, 0);
	if (!t)
		return -1;
	rc = outfile_write(job->o->trace, "--trace", t, strlen(t));
	free(t);
	return rc;
}
