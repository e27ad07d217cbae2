/*
 * diag.c - say which rank is where, and why, when a job hangs or fails:
 * the hooks the job calls (diag_init, diag_env, diag_tick, diag_output,
 * diag_release), stall detection and the end-of-job summary.
 *
 * Sources, none of which needs the stuck ranks' help:
 *   - each rank's control block in the per-job segment (runtime/ctl.h):
 *     per group the call it is in (seq, op, dtype, count, root, the peer
 *     it waits on, since when) or the last it completed, and its flight
 *     record.  Only programs on libdistrun have one (diag_base.c reads
 *     them);
 *   - /proc and stacks, for any program (diag_stacks.c).
 *
 * Stall detection: the control blocks are sampled (a fingerprint of each:
 * calls begun and ended, requests completed) and output is watched; when
 * nothing moved on any rank for --stall-timeout the job is reported
 * (diag_report.c) and stopped.  --timeout and stop signals report first
 * too (job.c).  The summary: time in collectives per rank, and barriers
 * one rank reached much later than the others.
 *
 * Calls between the rooms go one way: diag.c -> diag_report.c ->
 * diag_stacks.c -> diag_base.c (scripts/layers checks it).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contract.h"
#include "diag_int.h"

#define SKEW_RECS 2000   /* calls looked at for barrier skew */

static uint64_t fingerprint(const dri_ctl *c)
{
	uint64_t fp = __atomic_load_n(&c->ring_head[0], __ATOMIC_RELAXED) * 7 +
		      __atomic_load_n(&c->ring_head[1], __ATOMIC_RELAXED);

	for (int s = 0; s < DRI_CTL_SLOTS; s++)
		fp = fp * 131 + __atomic_load_n(&c->slot[s].ver,
						__ATOMIC_RELAXED) * 31 +
		     __atomic_load_n(&c->slot[s].progress, __ATOMIC_RELAXED);
	return fp;
}

/* ------------------------------------------------------ lifecycle */

static const char *helper_dir(void)
{
	static char dir[PATH_MAX + 32];
	char exe[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	struct stat st;

	if (n <= 0)
		return NULL;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	snprintf(dir, sizeof(dir), "%s/../share/distrun/python", exe);
	char probe[PATH_MAX + 64];
	snprintf(probe, sizeof(probe), "%s/sitecustomize.py", dir);
	if (stat(probe, &st))
		return NULL;
	return dir;
}

int diag_init(struct job *job)
{
	struct diag *d = calloc(1, sizeof(*d));

	if (d)
		d->rk = calloc(job->o->nranks, sizeof(*d->rk));
	if (!d || !d->rk) {
		free(d);
		perror("distrun");
		return -1;
	}
	d->last_activity = now_mono();
	job->diag = d;
	return 0;
}

int diag_env(struct job *job, char **env, size_t *k)
{
	struct diag *d = job->diag;
	const char *dir = helper_dir(), *old = getenv("PYTHONPATH");

	if (!d)
		return 0;
	/* Fatal signals dump the Python stack (faulthandler), unless the
	 * user chose otherwise. */
	if (!getenv("PYTHONFAULTHANDLER"))
		d->env[d->nenv++] = strdup("PYTHONFAULTHANDLER=1");
	/* Exact times in the control blocks for the timeline. */
	if (opts_timeline(job->o) && !getenv(DRI_ENV_CTL))
		d->env[d->nenv++] = strdup(DRI_ENV_CTL "=precise");
	if (dir) {
		struct sb b = { 0 };

		d->env[d->nenv++] = strdup("DISTRUN_PYSTACKS=1");
		sb_printf(&b, "PYTHONPATH=%s%s%s", dir, old && *old ? ":" : "",
			  old && *old ? old : "");
		d->env[d->nenv++] = b.oom ? NULL : sb_take(&b);
	}
	for (int i = 0; i < d->nenv; i++) {
		if (!d->env[i])
			return -1;
		env[(*k)++] = d->env[i];
	}
	return 0;
}

const char *diag_verdict_line(const struct job *job)
{
	return job->diag && job->diag->vline[0] ? job->diag->vline : NULL;
}

void diag_release(struct job *job)
{
	struct diag *d = job->diag;

	if (!d)
		return;
	for (int r = 0; r < job->o->nranks; r++)
		free(d->rk[r].recs);
	for (size_t i = 0; i < d->nlines; i++)
		free(d->lines[i].text);
	for (int i = 0; i < d->nenv; i++)
		free(d->env[i]);
	free(d->lines);
	free(d->rk);
	free(d->text);
	json_decref(d->json);
	free(d);
	job->diag = NULL;
}

/* ------------------------------------------------ sampling, stalls */

static double sample_period(const struct job *job)
{
	double p = 0.25;

	if (opts_timeline(job->o))
		p = 0.02;
	if (job->o->stall_timeout > 0 && job->o->stall_timeout / 4 < p)
		p = job->o->stall_timeout / 4;
	return p;
}

double diag_deadline(const struct job *job)
{
	const struct diag *d = job->diag;

	if (!d || job->stopping || (!opts_timeline(job->o) && !job->o->stall_timeout))
		return -1;
	return d->next_sample;
}

bool diag_tick(struct job *job)
{
	struct diag *d = job->diag;
	double t = now_mono();

	if (!d || job->stopping || t < d->next_sample ||
	    (!opts_timeline(job->o) && !job->o->stall_timeout))
		return false;
	d->next_sample = t + sample_period(job);
	for (int r = 0; r < job->o->nranks; r++) {
		const dri_ctl *c = diag_ctl(job, r);
		uint64_t fp;

		if (!c)
			continue;
		fp = fingerprint(c);
		if (fp != d->rk[r].fp) {
			d->rk[r].fp = fp;
			d->last_activity = t;
			d->clock_started = true;
		}
		if (opts_timeline(job->o))
			diag_harvest(job, r);
	}
	/* Until a rank's first call or line (Python importing torch, a
	 * program reading its data), the job is starting, not stalled. */
	if (!d->clock_started)
		d->last_activity = t;
	if (job->o->stall_timeout > 0 &&
	    t - d->last_activity >= job->o->stall_timeout) {
		char why[96];

		snprintf(why, sizeof(why), "no progress for %.1fs",
			 t - d->last_activity);
		job->stalled = true;
		job->timed_out = true;
		diag_report(job, why);
		if (d->vline[0])
			fprintf(stderr, "distrun: %s: %s\n", why, d->vline);
		return true;
	}
	return false;
}

void diag_output(struct job *job, int r, int s, const char *p, size_t n)
{
	struct diag *d = job->diag;
	struct diag_rank *dr;
	double t;

	if (!d)
		return;
	t = now_mono();
	d->last_activity = t;
	d->clock_started = true;
	if (!opts_timeline(job->o))
		return;
	dr = &d->rk[r];
	for (const char *end = p + n; p < end; p++) {
		bool nl = *p == '\n';

		if (!dr->part_len[s])
			dr->part_t[s] = t;
		if (!nl && dr->part_len[s] < DIAG_LINE_MAX) {
			dr->part[s][dr->part_len[s]++] = *p;
			continue;
		}
		if (!nl)
			continue;   /* cut: the rest of a long line */
		dr->part[s][dr->part_len[s]] = 0;
		if (d->nlines >= DIAG_LINES_MAX) {
			d->lines_dropped++;
		} else {
			if (d->nlines == d->caplines) {
				size_t cap = d->caplines ? 2 * d->caplines : 256;
				struct diag_line *l = realloc(d->lines,
							cap * sizeof(*l));

				if (!l) {
					d->lines_dropped++;
					dr->part_len[s] = 0;
					continue;
				}
				d->lines = l;
				d->caplines = cap;
			}
			d->lines[d->nlines] = (struct diag_line){
				dr->part_t[s], r, s, strdup(dr->part[s]) };
			if (d->lines[d->nlines].text)
				d->nlines++;
		}
		dr->part_len[s] = 0;
	}
}

/* ------------------------------------------------------------ summary */

struct skew {
	uint32_t group;
	uint64_t seq;
	int rank;
	double late;
};

/* Barriers at which one rank came much later than every other: up to
 * max of them, largest first. */
static int barrier_skews(struct job *job, struct skew *out, int max)
{
	int n = job->o->nranks, found = 0;
	struct diag_rank *r0;

	if (n < 2)
		return 0;
	for (int r = 0; r < n; r++)
		diag_harvest(job, r);
	r0 = &job->diag->rk[0];
	/* The last SKEW_RECS calls of rank 0 (a long --trace holds many),
	 * each looked up in every other rank's records. */
	for (size_t i = r0->nrec > SKEW_RECS ? r0->nrec - SKEW_RECS : 0;
	     i < r0->nrec; i++) {
		const dri_ctl_call *c = &r0->recs[i];
		int64_t last = -1, second = -1;
		int last_rank = -1, seen = 1;

		if (c->coll != DRI_BARRIER && c->coll != DRI_MONITORED_BARRIER)
			continue;
		last = c->t_start;
		last_rank = 0;
		for (int r = 1; r < n; r++) {
			struct diag_rank *dr = &job->diag->rk[r];

			for (size_t k = dr->nrec > 2 * SKEW_RECS ?
					dr->nrec - 2 * SKEW_RECS : 0;
			     k < dr->nrec; k++) {
				const dri_ctl_call *o = &dr->recs[k];

				if (o->group_id != c->group_id || o->seq != c->seq ||
				    o->coll != c->coll)
					continue;
				seen++;
				if (o->t_start > last) {
					second = last;
					last = o->t_start;
					last_rank = r;
				} else if (o->t_start > second) {
					second = o->t_start;
				}
				break;
			}
		}
		if (seen != n || second < 0 || last - second < 50000000)
			continue;
		struct skew k = { c->group_id, c->seq, last_rank,
				  (last - second) / 1e9 };
		int at = found < max ? found++ : max - 1;
		if (at == max - 1 && found == max && out[at].late >= k.late)
			continue;
		out[at] = k;
		for (; at > 0 && out[at].late > out[at - 1].late; at--) {
			struct skew x = out[at];
			out[at] = out[at - 1];
			out[at - 1] = x;
		}
	}
	return found;
}

static void coll_time(const struct job *job, int r, double *secs,
		      uint64_t *calls)
{
	const dri_ctl *c = diag_ctl(job, r);
	dri_ctl_slot sl;

	*secs = 0;
	*calls = 0;
	if (!c)
		return;
	for (int i = 0; i < DRI_CTL_SLOTS; i++) {
		dri_ctl_read_slot(c, i, &sl);
		*secs += sl.ns_in_calls / 1e9;
		*calls += sl.ncalls;
	}
}

void diag_summary(struct job *job)
{
	struct skew sk[3];
	int n = job->o->nranks, k, any = 0;

	if (!job->diag)
		return;
	for (int r = 0; r < n; r++)
		any |= diag_ctl(job, r) != NULL;
	if (!any)
		return;
	fprintf(stderr, "%6s  time in collectives (calls):", "");
	for (int r = 0; r < n && r < 64; r++) {
		double secs;
		uint64_t calls;

		coll_time(job, r, &secs, &calls);
		fprintf(stderr, "%s rank %d %.3fs (%llu)", r ? "," : "",
			job->rank_offset + r, secs,
			(unsigned long long)calls);
	}
	fprintf(stderr, "%s\n", n > 64 ? ", ... (all in --report)" : "");
	k = barrier_skews(job, sk, 3);
	for (int i = 0; i < k; i++) {
		char g[32];

		diag_group_name(sk[i].group, g, sizeof(g));
		fprintf(stderr, "%6s  rank %d arrived %.2f s after the others at "
			"%sbarrier seq %llu\n", "",
			job->rank_offset + sk[i].rank, sk[i].late,
			sk[i].group ? g : "", (unsigned long long)sk[i].seq);
	}
}

/* The summary's time in collectives per rank, for --report. */
static json_t *jcollectives(struct job *job)
{
	json_t *a = json_array();

	for (int r = 0; a && r < job->o->nranks; r++) {
		double secs;
		uint64_t calls;

		coll_time(job, r, &secs, &calls);
		diag_jappend(&a, json_pack("{s:i, s:o, s:I}",
			"rank", job->rank_offset + r,
			"time_s", diag_jreal(secs, 6),
			"calls", (json_int_t)calls));
	}
	return a;
}

/* The summary's late arrivals at barriers, for --report. */
static json_t *jskews(struct job *job)
{
	struct skew sk[3];
	int k = barrier_skews(job, sk, 3);
	json_t *a = json_array();

	for (int i = 0; a && i < k; i++)
		diag_jappend(&a, json_pack("{s:I, s:I, s:i, s:o}",
			"group", (json_int_t)sk[i].group,
			"seq", (json_int_t)sk[i].seq,
			"rank", job->rank_offset + sk[i].rank,
			"late_s", diag_jreal(sk[i].late, 3)));
	return a;
}

json_t *diag_json(struct job *job)
{
	struct diag *d = job->diag;
	json_t *j;
	int any = 0;

	if (!d || !(j = json_object()))
		return NULL;
	/* A key whose value is NULL (out of memory) is left out. */
	if (d->json)
		json_object_set(j, "diagnosis", d->json);
	for (int r = 0; r < job->o->nranks; r++)
		any |= diag_ctl(job, r) != NULL;
	if (any) {
		json_object_set_new(j, "collectives", jcollectives(job));
		json_object_set_new(j, "barrier_skew", jskews(job));
	}
	return j;
}
