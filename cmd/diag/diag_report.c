/*
 * diag_report.c - the diagnosis itself, in text (stderr) and as a JSON
 * object ("diagnosis" in --report, which ci reads for JUnit failures).
 * diag_report, when the job stalls, times out or is stopped: a snapshot
 * of every rank's control block and /proc (twice, 0.1 s apart, for CPU),
 * the stacks (diag_stacks.c), then per group the latest call ranks wait
 * in and who never entered it, different calls as one seq (a mismatch),
 * a cycle of blocked point-to-point calls, ranks grouped by stack with
 * the odd one out, and a table of ranks; the verdict in one line.
 * diag_rank_failed, when a rank dies first: the call it died in and who
 * else was in it or never reached it, or the mismatch the runtime
 * reported.  A report is made once per job.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distrun.h"
#include "contract.h"
#include "diag_int.h"

/* ----------------------------------------------------------- report */

struct rsnap {
	pid_t pid;               /* the process to look at, 0: none */
	bool alive;
	const dri_ctl *ctl;
	bool torn;
	dri_ctl_slot slot[DRI_CTL_SLOTS];
	int64_t t_user;
	struct pinfo p0, p1;
	int busy;                /* slot index of a call it is in, -1 */
	struct stack st;
};

static void snap_take(struct job *job, int r, struct rsnap *s)
{
	const struct rank *rk = &job->ranks[r];

	memset(s, 0, sizeof(*s));
	s->busy = -1;
	s->alive = rk->state == RANK_RUNNING;
	s->ctl = diag_ctl(job, r);
	s->pid = s->alive ? rk->pid : 0;
	if (!s->ctl)
		return;
	/* A wrapper (a shell script) may run the program as its child. */
	if (s->alive && s->ctl->pid > 0 && s->ctl->pid != rk->pid &&
	    !kill(s->ctl->pid, 0))
		s->pid = s->ctl->pid;
	s->t_user = __atomic_load_n(&s->ctl->t_user, __ATOMIC_RELAXED);
	for (int i = 0; i < DRI_CTL_SLOTS; i++) {
		if (dri_ctl_read_slot(s->ctl, i, &s->slot[i]))
			s->torn = true;
		if (s->slot[i].state == DRI_CTL_IN_CALL && s->busy < 0)
			s->busy = i;
	}
}

/* Reports name ranks as the job does: global ranks (local index + base,
 * the node's rank offset), so that the nodes' reports agree. */
static const char *rank_flags_str(const uint8_t *f, int n, int base,
				  char *buf, size_t sz)
{
	uint8_t *g = base ? calloc((size_t)(base + n), 1) : NULL;
	int cnt = 0;

	for (int i = 0; i < n; i++)
		cnt += f[i];
	if (g)
		memcpy(g + base, f, (size_t)n);
	snprintf(buf, sz, "%s ", cnt == 1 ? "rank" : "ranks");
	rank_list_str(g ? g : f, g ? base + n : n, buf + strlen(buf),
		      sz - strlen(buf));
	free(g);
	return buf;
}

/* The ranks flagged in f, as global ranks. */
static json_t *jrank_list(const uint8_t *f, int n, int base)
{
	json_t *a = json_array();

	for (int i = 0; a && i < n; i++)
		if (f[i])
			diag_jappend(&a, json_integer(base + i));
	return a;
}

/* A call from a control block: what, how big, with whom, since when (or
 * how long ago it ended, and how). */
static json_t *jcall(const dri_ctl_call *c, int64_t now)
{
	char desc[160];
	int64_t t = c->t_end ? c->t_end : c->t_start;

	return json_pack("{s:I, s:I, s:s?, s:o, s:s?, s:I, s:I, s:s?, s:o, "
			 "s:o, s:o, s:o, s:s?}",
		"group", (json_int_t)c->group_id,
		"seq", (json_int_t)c->seq,
		"op", dri_coll_name((dri_coll)c->coll),
		"call", diag_jstr(diag_call_str(c, desc, sizeof(desc))),
		"dtype", c->dtype >= 0 ? dr_dtype_name((dr_dtype)c->dtype) :
			 NULL,
		"count", (json_int_t)c->count,
		"bytes", (json_int_t)c->bytes,
		"reduce_op", c->op >= 0 ? dr_op_name((dr_op)c->op) : NULL,
		"root", c->root >= 0 ? json_integer(c->root) : json_null(),
		"peer", c->peer >= 0 ? json_integer(c->peer) : json_null(),
		"peer_dir", c->peer < 0 ? json_null() :
			    json_string(c->peer_send ? "send" : "recv"),
		c->t_end ? "ended_s_ago" : "for_s",
			 diag_jreal((now - t) / 1e9, 3),
		"status", c->t_end ? dr_err_name((dr_err)c->status) : NULL);
}

/* Where rank r is, as a phrase: "in user code for 3.0s, last call seq 4". */
static void where_str(const struct rsnap *s, const struct rank *rk,
		      int64_t now, uint32_t group, char *buf, size_t n)
{
	char st[64], call[160], g[32];

	if (!s->alive) {
		snprintf(buf, n, "it %s", rank_status_str(rk, st, sizeof(st)));
		return;
	}
	if (!s->ctl) {
		snprintf(buf, n, "no control block (not a libdistrun program, "
			 "or before init)");
		return;
	}
	if (s->busy >= 0) {
		const dri_ctl_call *c = &s->slot[s->busy].call;

		diag_group_name(c->group_id, g, sizeof(g));
		snprintf(buf, n, "in %s seq %llu %s for %.1fs", g,
			 (unsigned long long)c->seq,
			 diag_call_str(c, call, sizeof(call)),
			 (now - c->t_start) / 1e9);
		return;
	}
	if (s->ctl->finished) {
		snprintf(buf, n, "it destroyed its process group");
		return;
	}
	if (group < DRI_CTL_GROUPS && s->slot[group].ncalls)
		snprintf(buf, n, "in user code for %.1fs, last call seq %llu",
			 (now - s->t_user) / 1e9,
			 (unsigned long long)s->slot[group].call.seq);
	else
		snprintf(buf, n, "in user code for %.1fs, no call on it yet",
			 (now - s->t_user) / 1e9);
}

/* A cycle of ranks blocked in point-to-point calls, each waiting on the
 * next: its length and the ranks in order in cyc, or 0. */
static int p2p_cycle(const struct rsnap *s, int n, int *cyc)
{
	int *seen = calloc(n, sizeof(int));
	int found = 0;

	if (!seen)
		return 0;
	for (int start = 0; start < n && !found; start++) {
		int len = 0, r = start;

		memset(seen, 0, n * sizeof(int));
		while (r >= 0 && r < n && !seen[r]) {
			const dri_ctl_slot *p = &s[r].slot[DRI_CTL_P2P];

			if (!s[r].alive || p->state != DRI_CTL_IN_CALL ||
			    p->call.peer < 0)
				break;
			seen[r] = ++len;
			cyc[len - 1] = r;
			r = p->call.peer;
		}
		if (r >= 0 && r < n && seen[r]) {
			/* the cycle starts where r was first seen */
			int from = seen[r] - 1;

			found = len - from;
			memmove(cyc, cyc + from, found * sizeof(int));
		}
	}
	free(seen);
	return found;
}

/* A report being made: the snapshots and the text and JSON so far. */
struct rep {
	struct job *job;
	int n, nctl;
	struct rsnap *s;
	uint8_t *flags;          /* scratch: n rank flags */
	int64_t now;             /* ns, when the snapshots were taken */
	double cpu_dt;           /* s between the two /proc readings */
	struct sb t;
	json_t *calls, *ranks;   /* the JSON's lists (NULL: out of memory) */
	const char *verdict;
	char vcall[300];         /* the first call ranks wait in, one line */
	char vline[400];         /* the verdict in one line (the first) */
};

/* The verdict line from what p->t holds from off: its first line, without
 * the indent (when no verdict line is set yet). */
static void vline_from(struct rep *p, size_t off)
{
	const char *l;

	if (p->vline[0] || !p->t.s || off >= p->t.len)
		return;
	l = p->t.s + off + strspn(p->t.s + off, " ");
	snprintf(p->vline, sizeof(p->vline), "%.*s", (int)strcspn(l, "\n"),
		 l);
}

/* Snapshots of every rank, CPU over 0.1 s, then the stacks. */
static void rep_gather(struct rep *p)
{
	struct stack *sts = calloc(p->n, sizeof(*sts));
	pid_t *pids = calloc(p->n, sizeof(*pids));
	struct timespec ts = { 0, 100 * 1000000 };
	double t0;

	for (int r = 0; r < p->n; r++) {
		snap_take(p->job, r, &p->s[r]);
		p->nctl += p->s[r].ctl != NULL;
		if (p->s[r].pid)
			diag_proc_read(p->s[r].pid, &p->s[r].p0);
	}
	p->now = diag_now_ns();
	t0 = now_mono();
	nanosleep(&ts, NULL);
	p->cpu_dt = now_mono() - t0;
	for (int r = 0; r < p->n; r++)
		if (p->s[r].pid)
			diag_proc_read(p->s[r].pid, &p->s[r].p1);
	if (sts && pids) {
		for (int r = 0; r < p->n; r++)
			pids[r] = p->s[r].pid;
		diag_stacks_collect(p->job, sts, pids);
		for (int r = 0; r < p->n; r++)
			p->s[r].st = sts[r];
	}
	free(sts);
	free(pids);
}

/* Group g's latest call some rank is in: who waits in it (one line per
 * distinct call made as that seq: more than one is a mismatch), then
 * who is not in it and where it is instead. */
static void rep_group(struct rep *p, int g)
{
	struct rsnap *s = p->s;
	int n = p->n, kinds = 0;
	uint64_t seq = 0;
	bool any = false;
	char gname[32], list[256];
	uint8_t *done;

	p->vcall[0] = 0;   /* this group's */
	for (int r = 0; r < n; r++)
		if (s[r].slot[g].state == DRI_CTL_IN_CALL &&
		    (!any || s[r].slot[g].call.seq > seq)) {
			seq = s[r].slot[g].call.seq;
			any = true;
		}
	if (!any || !(done = calloc(n, 1)))
		return;
	diag_group_name(g, gname, sizeof(gname));
	for (int r = 0; r < n; r++) {
		const dri_ctl_call *c = &s[r].slot[g].call;
		int64_t since = INT64_MAX;
		char call[160];

		if (done[r] || s[r].slot[g].state != DRI_CTL_IN_CALL ||
		    c->seq != seq)
			continue;
		memset(p->flags, 0, n);
		for (int q = r; q < n; q++)
			if (!done[q] && s[q].slot[g].state == DRI_CTL_IN_CALL &&
			    s[q].slot[g].call.seq == seq &&
			    diag_same_call(&s[q].slot[g].call, c)) {
				p->flags[q] = done[q] = 1;
				if (s[q].slot[g].call.t_start < since)
					since = s[q].slot[g].call.t_start;
			}
		kinds++;
		diag_call_str(c, call, sizeof(call));
		if (!p->vcall[0])
			snprintf(p->vcall, sizeof(p->vcall), "%s seq %llu %s "
				 "(%s waiting)", gname,
				 (unsigned long long)seq, call,
				 rank_flags_str(p->flags, n,
						p->job->rank_offset, list,
						sizeof(list)));
		sb_printf(&p->t, "  %s seq %llu %s: %s waiting %.1fs\n", gname,
			  (unsigned long long)seq, call,
			  rank_flags_str(p->flags, n, p->job->rank_offset, list,
					 sizeof(list)),
			  (p->now - since) / 1e9);
		diag_jappend(&p->calls, json_pack("{s:i, s:I, s:o, s:o, s:o}",
			"group", g, "seq", (json_int_t)seq,
			"call", diag_jstr(call),
			"ranks", jrank_list(p->flags, n, p->job->rank_offset),
			"waiting_s", diag_jreal((p->now - since) / 1e9, 3)));
	}
	if (kinds > 1) {
		size_t off = p->t.len;

		p->verdict = "mismatch";
		sb_printf(&p->t, "  mismatch: the ranks above made different "
			  "calls as %s seq %llu\n", gname,
			  (unsigned long long)seq);
		vline_from(p, off);
	}
	for (int r = 0; r < n; r++) {
		const dri_ctl_slot *sl = &s[r].slot[g];
		char where[320], call[160];

		if (done[r])
			continue;
		if (g != 0 && !sl->ncalls && sl->state != DRI_CTL_IN_CALL)
			continue;   /* not known to be a member */
		if (sl->state == DRI_CTL_IN_CALL) {
			sb_printf(&p->t, "  rank %d is behind: in %s seq %llu "
				  "%s\n", p->job->rank_offset + r, gname,
				  (unsigned long long)sl->call.seq,
				  diag_call_str(&sl->call, call, sizeof(call)));
			continue;
		}
		where_str(&s[r], &p->job->ranks[r], p->now, g, where,
			  sizeof(where));
		sb_printf(&p->t, "  rank %d never entered it: %s\n",
			  p->job->rank_offset + r, where);
		if (s[r].st.summary && *s[r].st.summary)
			sb_printf(&p->t, "    %s\n", s[r].st.summary);
		if (!p->vline[0])
			snprintf(p->vline, sizeof(p->vline), "rank %d never "
				 "entered %s", p->job->rank_offset + r,
				 p->vcall);
		if (!strcmp(p->verdict, "unknown"))
			p->verdict = "missing_rank";
	}
	free(done);
}

/* Ranks blocked in point-to-point calls, and a cycle of them. */
static void rep_p2p(struct rep *p)
{
	int *cyc = calloc(p->n, sizeof(int)), clen;

	for (int r = 0; r < p->n; r++) {
		const dri_ctl_slot *sl = &p->s[r].slot[DRI_CTL_P2P];
		char call[160];

		if (!p->s[r].alive || sl->state != DRI_CTL_IN_CALL)
			continue;
		sb_printf(&p->t, "  rank %d in %s for %.1fs\n",
			  p->job->rank_offset + r,
			  diag_call_str(&sl->call, call, sizeof(call)),
			  (p->now - sl->call.t_start) / 1e9);
	}
	clen = cyc ? p2p_cycle(p->s, p->n, cyc) : 0;
	if (clen > 0) {
		size_t off = p->t.len;

		p->verdict = "p2p_deadlock";
		sb_printf(&p->t, "  p2p deadlock: ");
		for (int i = 0; i < clen; i++) {
			const dri_ctl_call *c =
				&p->s[cyc[i]].slot[DRI_CTL_P2P].call;

			sb_printf(&p->t, "%srank %d waits to %s rank %d",
				  i ? ", " : "", p->job->rank_offset + cyc[i],
				  c->peer_send ? "send to" : "receive from",
				  c->peer);
		}
		sb_printf(&p->t, " (a cycle)\n");
		vline_from(p, off);
	}
	free(cyc);
}

/* The stack (or why there is none) that groups rank r with others. */
static const char *stack_key(const struct rsnap *x)
{
	if (x->st.key)
		return x->st.key;
	return x->st.summary && *x->st.summary ? x->st.summary : x->st.err;
}

/* A summary's innermost frame: its length. */
static size_t frame0_len(const char *s)
{
	const char *e = strstr(s, "  #");

	return e ? (size_t)(e - s) : strlen(s);
}

/* What a group's line shows: the first rank's stack, less its innermost
 * frame where the group's differ there (the library's insides: the
 * program's own is part of the key). */
static const char *stack_shown(const struct rep *p, const uint8_t *in, int r)
{
	const struct stack *st = &p->s[r].st;
	size_t len = st->key ? frame0_len(st->summary) : 0;

	if (!st->key)
		return stack_key(&p->s[r]);
	for (int q = r + 1; q < p->n; q++)
		if (in[q] && st->summary[len] &&
		    (frame0_len(p->s[q].st.summary) != len ||
		     memcmp(p->s[q].st.summary, st->summary, len)))
			return st->summary + len + 2;
	return st->summary;
}

/* Ranks with the same stack on one line; the odd one out named. */
static void rep_stacks(struct rep *p)
{
	uint8_t *grouped = calloc(p->n, 1);
	int ngroups = 0, odd = -1, big = 0;
	char list[256];

	if (!grouped)
		return;
	sb_printf(&p->t, "  stacks:\n");
	for (int r = 0; r < p->n; r++) {
		const char *key = stack_key(&p->s[r]);
		int cnt = 0;

		if (grouped[r])
			continue;
		memset(p->flags, 0, p->n);
		for (int q = r; q < p->n; q++)
			if (!grouped[q] && !strcmp(stack_key(&p->s[q]), key)) {
				p->flags[q] = grouped[q] = 1;
				cnt++;
			}
		ngroups++;
		if (cnt == 1)
			odd = r;
		else
			big++;
		sb_printf(&p->t, "    %s: %s%s\n",
			  rank_flags_str(p->flags, p->n, p->job->rank_offset,
					 list, sizeof(list)),
			  key == p->s[r].st.err ? "no stack: " : "",
			  stack_shown(p, p->flags, r));
	}
	if (ngroups == 2 && big == 1 && odd >= 0) {
		sb_printf(&p->t, "  rank %d is the odd one out\n",
			  p->job->rank_offset + odd);
		/* The verdict only if it still runs (not a rank that
		 * exited and so has no stack). */
		if (!p->vline[0] && p->s[odd].alive)
			snprintf(p->vline, sizeof(p->vline), "rank %d is the "
				 "odd one out (its stack differs)",
				 p->job->rank_offset + odd);
	}
	free(grouped);
}

/* A stack's frames as printed (those of the thread it was taken for). */
static json_t *jframes(const struct stack *st)
{
	json_t *a = json_array();

	for (int i = 0; a && i < st->nframes; i++)
		diag_jappend(&a, diag_jstr(st->frames[i]));
	return a;
}

/* Rank r's object in the JSON: the table's line and more (its call or
 * else its last one, its stack or why there is none). */
static json_t *jrank(const struct rep *p, int r, const dri_ctl_call *c,
		     double cpu, int pid)
{
	const struct rsnap *x = &p->s[r];
	const dri_ctl_call *last = x->ctl && x->slot[0].ncalls && !c ?
				   &x->slot[0].call : NULL;
	char st[64], ps[2] = { x->p1.state, 0 };

	return json_pack("{s:i, s:i, s:b, s:o, s:o, s:o, s:o, s:b, s:b, s:o, "
			 "s:o, s:o, s:s?, s:o, s:o, s:o, s:o}",
		"rank", p->job->rank_offset + r,
		"pid", pid,
		"alive", x->alive,
		"status", diag_jstr(rank_status_str(&p->job->ranks[r], st,
						    sizeof(st))),
		"proc_state", x->alive ? diag_jstr(ps) : json_null(),
		"wchan", diag_jstr(x->p1.wchan[0] ? x->p1.wchan : NULL),
		"cpu_pct", diag_jreal(cpu, 1),
		"libdistrun", x->ctl != NULL,
		"torn", x->torn,
		"call", c ? jcall(c, p->now) : json_null(),
		"last_call", last ? jcall(last, p->now) : json_null(),
		"user_code_s", x->ctl && !c && x->alive ?
			       diag_jreal((p->now - x->t_user) / 1e9, 3) :
			       json_null(),
		"stack_method", x->st.method,
		"stack_error", diag_jstr(x->st.method ? NULL : x->st.err),
		"stack_summary", diag_jstr(x->st.summary),
		"stack_group", diag_jstr(x->st.key),
		"stack", jframes(&x->st));
}

/* Rank r's line of the table and its object in the JSON. */
static void rep_rank(struct rep *p, int r)
{
	const struct rsnap *x = &p->s[r];
	const dri_ctl_call *c = x->busy >= 0 ? &x->slot[x->busy].call : NULL;
	char seq[24] = "-", call[160] = "-", wait[40] = "-";
	double cpu = p->cpu_dt > 0 ? 100 * (x->p1.cpu - x->p0.cpu) / p->cpu_dt
				   : 0;
	int pid = (int)(x->pid ? x->pid : p->job->ranks[r].pid);

	if (!x->alive)
		cpu = 0;
	if (c) {
		if (c->coll != DRI_P2P)
			snprintf(seq, sizeof(seq), "%llu",
				 (unsigned long long)c->seq);
		snprintf(call, sizeof(call), "%s", c->coll == DRI_P2P ?
			 (c->peer_send ? "send" : "recv") :
			 dri_coll_name((dri_coll)c->coll));
		snprintf(wait, sizeof(wait), c->peer >= 0 ? "%.1fs on %d" :
			 "%.1fs", (p->now - c->t_start) / 1e9, c->peer);
	} else if (x->ctl && x->slot[0].ncalls) {
		snprintf(seq, sizeof(seq), "%llu",
			 (unsigned long long)x->slot[0].call.seq);
		snprintf(call, sizeof(call), x->alive ? "(user code)" :
			 "(exited)");
	} else if (!x->alive) {
		snprintf(call, sizeof(call), "(exited)");
	}
	sb_printf(&p->t, "  %4d  %-7d  %-5c  %-5s  %-24s  %-14s  %5.1f  %s\n",
		  p->job->rank_offset + r, pid, x->alive ? x->p1.state : '-', seq, call, wait, cpu,
		  x->p1.wchan);
	diag_jappend(&p->ranks, jrank(p, r, c, cpu, pid));
}

void diag_report(struct job *job, const char *why)
{
	struct diag *d = job->diag;
	struct rep p = { .job = job, .n = job->o->nranks,
			 .verdict = "unknown" };

	if (!d || d->text)
		return;
	p.s = calloc(p.n, sizeof(*p.s));
	p.flags = calloc(p.n, 1);
	p.calls = json_array();
	p.ranks = json_array();
	if (!p.s || !p.flags) {
		fprintf(stderr, "distrun: out of memory for the diagnosis\n");
		goto out;
	}
	rep_gather(&p);

	if (job->nnodes > 1)
		sb_printf(&p.t, "distrun: %s (node %d: ranks %d-%d of %d)\n",
			  why, job->node_rank, job->rank_offset,
			  job->rank_offset + p.n - 1, job_world_size(job));
	else
		sb_printf(&p.t, "distrun: %s (%d rank%s)\n", why, p.n,
			  p.n == 1 ? "" : "s");
	for (int g = 0; g < DRI_CTL_GROUPS; g++)
		rep_group(&p, g);
	rep_p2p(&p);
	if (!p.nctl)
		sb_printf(&p.t, "  no rank has a control block (not libdistrun "
			  "programs): stacks and /proc only\n");
	rep_stacks(&p);
	sb_printf(&p.t, "  %4s  %-7s  %-5s  %-5s  %-24s  %-14s  %5s  %s\n",
		  "rank", "pid", "state", "seq", "call", "waiting", "cpu%",
		  "wchan");
	for (int r = 0; r < p.n; r++)
		rep_rank(&p, r);
	if (!strcmp(p.verdict, "unknown") && !p.nctl)
		p.verdict = "no_control_block";
	snprintf(d->vline, sizeof(d->vline), "%s", p.vline);
	d->text = sb_take(&p.t);
	/* Absent from --report when out of memory (the text is on stderr). */
	d->json = json_pack("{s:s, s:o, s:o, s:o, s:s, s:o, s:o}",
		"reason", job->stalled ? "stall" : job->timed_out ? "timeout" :
			  job->stop_signal ? "signal" : "stopped",
		"headline", diag_jstr(why),
		"calls", p.calls,
		"ranks", p.ranks,
		"verdict", p.verdict,
		"verdict_line", diag_jstr(p.vline[0] ? p.vline : NULL),
		"text", diag_jstr(d->text));
	p.calls = p.ranks = NULL;   /* json_pack took them, even on failure */
	fputs(d->text, stderr);
out:
	json_decref(p.calls);
	json_decref(p.ranks);
	if (p.s)
		for (int r = 0; r < p.n; r++)
			diag_stack_release(&p.s[r].st);
	free(p.s);
	free(p.flags);
	free(p.t.s);
}

/* ------------------------------------------------------ first failure */

void diag_rank_failed(struct job *job, int r)
{
	struct diag *d = job->diag;
	int n = job->o->nranks;
	struct rsnap *s;
	struct sb t = { 0 };
	json_t *calls = NULL;    /* the JSON's list (NULL: out of memory) */
	uint8_t *flags;
	const char *verdict = NULL;
	char list[256], st[64], call[160], gname[32], dead[64] = "";
	int64_t now;

	if (!d || d->text)
		return;
	s = calloc(n, sizeof(*s));
	flags = calloc(n, 1);
	if (!s || !flags)
		goto out;
	calls = json_array();
	for (int q = 0; q < n; q++)
		snap_take(job, q, &s[q]);
	/* The rank that died inside a call: this one, or one that died
	 * before it but is not reaped yet (a zombie). */
	for (int q = 0; q < n && s[r].busy < 0; q++) {
		struct pinfo pi;

		if (q == r || !s[q].ctl || s[q].busy < 0 || !s[q].alive)
			continue;
		diag_proc_read(job->ranks[q].pid, &pi);
		if (pi.state == 'Z') {
			struct rank fake = job->ranks[q];

			fake.state = RANK_EXITED;
			fake.status = pi.exit_code;
			snprintf(dead, sizeof(dead), "%s", rank_status_str(&fake,
				 st, sizeof(st)));
			r = q;
		}
	}
	if (!s[r].ctl)
		goto out;
	/* After the snapshots, as the stall report does: read before them,
	 * a rank that entered a call and died while 4096 snapshots were
	 * taken showed "-2.4s after it entered it". */
	now = diag_now_ns();
	/* Died inside a call. */
	if (s[r].busy >= 0) {
		const dri_ctl_call *c = &s[r].slot[s[r].busy].call;
		int others = 0;

		verdict = "killed";
		diag_group_name(c->group_id, gname, sizeof(gname));
		diag_call_str(c, call, sizeof(call));
		sb_printf(&t, "distrun: rank %d %s inside %s seq %llu %s, "
			  "%.1fs after it entered it\n", job->rank_offset + r,
			  dead[0] ? dead :
			  rank_status_str(&job->ranks[r], st, sizeof(st)),
			  gname, (unsigned long long)c->seq, call,
			  (now - c->t_start) / 1e9);
		for (int q = 0; q < n; q++) {
			const dri_ctl_slot *sl = &s[q].slot[s[r].busy];

			flags[q] = q != r && sl->call.seq == c->seq &&
				   sl->call.group_id == c->group_id &&
				   (sl->state == DRI_CTL_IN_CALL ||
				    sl->call.status != 0);
			others += flags[q];
		}
		if (others)
			sb_printf(&t, "  %s in it too\n",
				  rank_flags_str(flags, n, job->rank_offset, list,
					 sizeof(list)));
		/* Those that had not reached it (world: every rank). */
		for (int q = 0; q < n && c->coll != DRI_P2P; q++) {
			const dri_ctl_slot *sl = &s[q].slot[s[r].busy];
			char where[320];

			if (q == r || flags[q] || !s[q].alive || !s[q].ctl ||
			    (c->group_id != 0 && !sl->ncalls) ||
			    (sl->call.t_start && sl->call.seq >= c->seq))
				continue;
			where_str(&s[q], &job->ranks[q], now, c->group_id,
				  where, sizeof(where));
			sb_printf(&t, "  rank %d never entered it: %s\n",
				  job->rank_offset + q,
				  where);
		}
		flags[r] = 1;
		diag_jappend(&calls, json_pack("{s:I, s:I, s:o, s:o, s:i}",
			"group", (json_int_t)c->group_id,
			"seq", (json_int_t)c->seq,
			"call", diag_jstr(call),
			"ranks", jrank_list(flags, n, job->rank_offset),
			"failed_rank", job->rank_offset + r));
	}
	/* Different calls as one seq (the runtime's DR_EMISMATCH): each
	 * rank's call at the highest seq of a group, in it or just ended. */
	for (int g = 0; g < DRI_CTL_GROUPS && !verdict; g++) {
		uint64_t seq = 0;
		bool any = false, differ = false;
		const dri_ctl_call *first = NULL;

		for (int q = 0; q < n; q++)
			if (s[q].ctl && s[q].slot[g].call.t_start &&
			    s[q].slot[g].call.status == DR_EMISMATCH) {
				any = true;
				if (s[q].slot[g].call.seq > seq)
					seq = s[q].slot[g].call.seq;
			}
		if (!any)
			continue;
		for (int q = 0; q < n; q++) {
			const dri_ctl_call *c = &s[q].slot[g].call;

			if (!s[q].ctl || !c->t_start || c->seq != seq)
				continue;
			if (!first)
				first = c;
			else if (!diag_same_call(first, c))
				differ = true;
		}
		if (!differ)
			continue;
		verdict = "mismatch";
		diag_group_name(g, gname, sizeof(gname));
		sb_printf(&t, "distrun: mismatch: the ranks made different "
			  "calls as %s seq %llu\n", gname,
			  (unsigned long long)seq);
		uint8_t *done = calloc(n, 1);
		if (!done) {   /* an empty list would say no rank called */
			json_decref(calls);
			calls = NULL;
		}
		for (int q = 0; done && q < n; q++) {
			const dri_ctl_call *c = &s[q].slot[g].call;

			if (done[q] || !s[q].ctl || !c->t_start || c->seq != seq)
				continue;
			memset(flags, 0, n);
			for (int x = q; x < n; x++)
				if (!done[x] && s[x].ctl &&
				    s[x].slot[g].call.seq == seq &&
				    s[x].slot[g].call.t_start &&
				    diag_same_call(&s[x].slot[g].call, c))
					flags[x] = done[x] = 1;
			diag_call_str(c, call, sizeof(call));
			sb_printf(&t, "  %s called %s\n",
				  rank_flags_str(flags, n, job->rank_offset, list,
					 sizeof(list)),
				  call);
			diag_jappend(&calls, json_pack("{s:i, s:I, s:o, s:o}",
				"group", g, "seq", (json_int_t)seq,
				"call", diag_jstr(call),
				"ranks", jrank_list(flags, n,
						    job->rank_offset)));
		}
		free(done);
	}
	if (!verdict) {
		free(sb_take(&t));
		goto out;
	}
	d->text = sb_take(&t);
	d->json = json_pack("{s:s, s:o, s:s, s:i, s:o}",
		"reason", "rank failed",
		"calls", calls,
		"verdict", verdict,
		"failed_rank", job->rank_offset + r,
		"text", diag_jstr(d->text));
	calls = NULL;   /* json_pack took it, even on failure */
	fputs(d->text, stderr);
out:
	json_decref(calls);
	free(s);
	free(flags);
}
