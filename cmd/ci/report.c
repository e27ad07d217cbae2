/*
 * report.c - how the job went: the summary table on stderr and the JSON
 * file of --report, one jansson object: the diagnosis (diag_json) comes
 * as jansson values too and is merged in as it is, never as text.
 *
 * Both show, per rank, its exit status or signal, wall time (from fork to
 * reap), user and system CPU time and maximum resident set size, as wait4()
 * reported them for the rank and the descendants it waited for; and the
 * same for distrun itself (what launching and the output cost).  The JSON
 * also has the last lines of each failing rank's stderr (STDERR_TAIL
 * bytes, kept in a ring per rank as mux.c reads them), so a CI log shows
 * the traceback next to the verdict.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "launcher.h"
#include "ci.h"

void report_tail_add(struct rank *rk, const char *p, size_t n)
{
	if (!rk->err_tail) {
		rk->err_tail = malloc(STDERR_TAIL);
		if (!rk->err_tail)
			return;
	}
	if (n > STDERR_TAIL) {
		rk->err_bytes += n - STDERR_TAIL;
		p += n - STDERR_TAIL;
		n = STDERR_TAIL;
	}
	while (n > 0) {
		size_t at = rk->err_bytes % STDERR_TAIL,
		       k = n < STDERR_TAIL - at ? n : STDERR_TAIL - at;

		memcpy(rk->err_tail + at, p, k);
		rk->err_bytes += k;
		p += k;
		n -= k;
	}
}

/* The kept end of a rank's stderr from its first whole line, as valid
 * UTF-8 ('?' for bytes that are not).  Returns a JSON string or NULL. */
static json_t *stderr_tail(const struct rank *rk)
{
	size_t n = rk->err_bytes < STDERR_TAIL ? rk->err_bytes : STDERR_TAIL,
	       start = rk->err_bytes - n, i = 0, len = 0;
	unsigned char *lin = malloc(n + 1);
	char *out = malloc(n + 1);
	json_t *j = NULL;

	if (!rk->err_tail || !lin || !out)
		goto out;
	for (size_t k = 0; k < n; k++)
		lin[k] = rk->err_tail[(start + k) % STDERR_TAIL];
	if (start) {
		/* The first line was cut: start at the next one. */
		while (i < n && lin[i] != '\n')
			i++;
		i = i < n ? i + 1 : 0;
	}
	for (const unsigned char *p = lin + i, *end = lin + n; p < end;) {
		const unsigned char *c = p;

		if (ci_utf8_next(&p, end) < 0 || *c == 0)
			out[len++] = '?';
		else
			while (c < p)
				out[len++] = (char)*c++;
	}
	j = json_stringn(out, len);
out:
	free(lin);
	free(out);
	return j;
}

/* Whether the report carries a rank's stderr tail: a rank that failed on
 * its own, or every rank when the job was stopped from outside (a
 * timeout, a signal), where any of them may be the one that hangs. */
static bool wants_tail(const struct job *job, const struct rank *rk)
{
	if (!rk->err_bytes || rk->state == RANK_NEW)
		return false;
	if (job->first_fail < 0 && (job->timed_out || job->stop_signal))
		return true;
	return rk->state == RANK_EXITED && !rk->stopped && rk->status != 0;
}

static double tv_sec(struct timeval tv)
{
	return tv.tv_sec + tv.tv_usec / 1e6;
}

static double rank_wall(const struct rank *rk)
{
	if (rk->state == RANK_NEW)
		return 0;
	return (rk->state == RANK_EXITED ? rk->t_end : now_mono()) -
	       rk->t_start;
}

/* A short status for the table: "0", "3", "SIGSEGV", "running". */
static const char *short_status(const struct rank *rk, char *buf, size_t n)
{
	if (rk->state != RANK_EXITED)
		return rk->state == RANK_NEW ? "-" : "running";
	if (WIFEXITED(rk->status))
		snprintf(buf, n, "%d", WEXITSTATUS(rk->status));
	else if (WIFSIGNALED(rk->status))
		snprintf(buf, n, "%s", signal_name(WTERMSIG(rk->status)));
	else
		snprintf(buf, n, "?");
	return buf;
}

static const char *rank_note(const struct job *job, int r)
{
	if (r == job->first_fail)
		return "first failure";
	if (job->ranks[r].exec_errno)
		return job->ranks[r].spawn_step == SPAWN_STEP_FDS ?
		       "cannot set up fds" : "cannot run";
	/* A rank distrun signalled that exited with a status of its own
	 * (before the signal came, or from its handler) says so itself. */
	if (job->ranks[r].stopped && job->ranks[r].state == RANK_EXITED &&
	    WIFEXITED(job->ranks[r].status))
		return WEXITSTATUS(job->ranks[r].status) ? "failed too" : "";
	if (job->ranks[r].stopped && job->ranks[r].suspended)
		return job->ranks[r].suspended == 't' ?
		       "was held by a debugger" : "was stopped (SIGSTOP?)";
	if (job->ranks[r].stopped)
		return job->timed_out ? "timed out" : "stopped";
	if (job->ranks[r].file_errno[0] || job->ranks[r].file_errno[1])
		return "output file incomplete";
	return "";
}

void report_summary(struct job *job)
{
	double wall = (job->real_t1 - job->real_t0);
	struct rusage self;

	if (job->nodes)
		fprintf(stderr, "distrun: node %d of %d: ranks %d-%d of %d, "
			"%.3fs, exit status %d\n", job->node_rank, job->nnodes,
			job->rank_offset, job->rank_offset + job->o->nranks - 1,
			job_world_size(job), wall, job->exit_status);
	else
		fprintf(stderr, "distrun: %d rank%s, %.3fs, exit status %d\n",
			job->o->nranks, job->o->nranks == 1 ? "" : "s", wall,
			job->exit_status);
	fprintf(stderr, "%6s  %-9s %10s %10s %10s %10s  %s\n", "rank",
		"status", "wall", "user", "sys", "maxrss", "note");
	for (int r = 0; r < job->o->nranks; r++) {
		const struct rank *rk = &job->ranks[r];
		const char *note = rank_note(job, r);
		char st[32];

		fprintf(stderr, "%6d  %-9s %9.3fs %9.3fs %9.3fs %6.1f MiB%s%s\n",
			job->rank_offset + r, short_status(rk, st, sizeof(st)),
			rank_wall(rk), tv_sec(rk->ru.ru_utime),
			tv_sec(rk->ru.ru_stime), rk->ru.ru_maxrss / 1024.0,
			*note ? "  " : "", note);
	}
	if (!getrusage(RUSAGE_SELF, &self))
		fprintf(stderr, "%6s  %-9s %10s %9.3fs %9.3fs %6.1f MiB\n",
			"distrun", "", "", tv_sec(self.ru_utime),
			tv_sec(self.ru_stime), self.ru_maxrss / 1024.0);
	diag_summary(job);
}

static json_t *iso_time(double t)
{
	time_t s = (time_t)t;
	struct tm tm;
	char buf[64];

	gmtime_r(&s, &tm);
	snprintf(buf + strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm),
		 16, ".%03dZ", (int)((t - s) * 1000));
	return json_string(buf);
}

static const char *job_reason(const struct job *job)
{
	if (job->first_fail >= 0)
		return "rank failed";
	if (job->stalled)
		return "stall";
	if (job->timed_out)
		return "timeout";
	if (job->stop_signal)
		return "signal";
	if (job->exit_status == EXIT_NOEXEC || job->exit_status == EXIT_NOTFOUND)
		return "cannot run";
	for (int r = 0; job->exit_status && r < job->o->nranks; r++)
		if (job->ranks[r].file_errno[0] || job->ranks[r].file_errno[1])
			return "output files incomplete";
	return job->exit_status ? "error" : "ok";
}

char *report_text(struct job *job)
{
	const struct opts *o = job->o;
	json_t *root = json_object(), *cmd = json_array(),
	       *ranks = json_array();
	struct rusage self;
	char *text = NULL;

	if (!root || !cmd || !ranks)
		goto out;
	for (int i = 0; i < o->argc; i++)
		json_array_append_new(cmd, json_string(o->argv[i]));
	json_object_set(root, "command", cmd);
	json_object_set_new(root, "world_size",
			    json_integer(job_world_size(job)));
	if (job->nodes) {
		json_object_set_new(root, "nnodes", json_integer(job->nnodes));
		json_object_set_new(root, "node_rank",
				    json_integer(job->node_rank));
		json_object_set_new(root, "local_world_size",
				    json_integer(o->nranks));
	}
	json_object_set_new(root, "run_id", json_string(job->run_id));
	json_object_set_new(root, "master_addr", json_string(o->master_addr));
	json_object_set_new(root, "master_port",
			    json_integer(job->master_port));
	json_object_set_new(root, "start", iso_time(job->real_t0));
	json_object_set_new(root, "end", iso_time(job->real_t1));
	json_object_set_new(root, "wall_s",
			    json_real(job->real_t1 - job->real_t0));
	/* false in the file distrun writes at its start (outfile.c) */
	json_object_set_new(root, "complete", json_true());
	json_object_set_new(root, "exit_status", json_integer(job->exit_status));
	json_object_set_new(root, "restarts", json_integer(job->restarts));
	json_object_set_new(root, "reason", json_string(job_reason(job)));
	json_object_set_new(root, "first_failed_rank", job->first_fail >= 0 ?
			    json_integer(job->rank_offset + job->first_fail) :
			    json_null());
	json_object_set_new(root, "signal", job->stop_signal ?
			    json_string(signal_name(job->stop_signal)) :
			    json_null());
	for (int r = 0; r < o->nranks; r++) {
		const struct rank *rk = &job->ranks[r];
		bool exited = rk->state == RANK_EXITED;
		bool sig = exited && WIFSIGNALED(rk->status);
		json_t *j = json_object();

		if (!j)
			goto out;
		json_object_set_new(j, "rank", json_integer(job->rank_offset + r));
		json_object_set_new(j, "pid", json_integer(rk->pid));
		json_object_set_new(j, "state", json_string(
			!exited ? (rk->state == RANK_NEW ? "not started" :
				   "running") :
			sig ? "signaled" : "exited"));
		json_object_set_new(j, "exit_code",
			exited && WIFEXITED(rk->status) ?
			json_integer(WEXITSTATUS(rk->status)) : json_null());
		json_object_set_new(j, "signal", sig ?
			json_string(signal_name(WTERMSIG(rk->status))) :
			json_null());
		json_object_set_new(j, "status", json_integer(!exited ? -1 :
			sig ? 128 + WTERMSIG(rk->status) :
			WEXITSTATUS(rk->status)));
		json_object_set_new(j, "note", json_string(rank_note(job, r)));
		json_object_set_new(j, "wall_s", json_real(rank_wall(rk)));
		json_object_set_new(j, "user_s",
				    json_real(tv_sec(rk->ru.ru_utime)));
		json_object_set_new(j, "sys_s",
				    json_real(tv_sec(rk->ru.ru_stime)));
		json_object_set_new(j, "maxrss_kib",
				    json_integer(rk->ru.ru_maxrss));
		if (wants_tail(job, rk))
			json_object_set_new(j, "stderr_tail", stderr_tail(rk));
		for (int s = 0; s < 2; s++)
			if (rk->file_errno[s])
				json_object_set_new(j, s ? "stderr_file_error" :
						    "stdout_file_error",
						    json_string(strerror(
							rk->file_errno[s])));
		json_array_append_new(ranks, j);
	}
	json_object_set(root, "ranks", ranks);
	/* diag.c's keys: "diagnosis", "collectives", "barrier_skew" */
	json_object_update_new(root, diag_json(job));
	if (!getrusage(RUSAGE_SELF, &self)) {
		json_t *l = json_pack("{s:f, s:f, s:I}",
			"user_s", tv_sec(self.ru_utime),
			"sys_s", tv_sec(self.ru_stime),
			"maxrss_kib", (json_int_t)self.ru_maxrss);

		if (l)
			json_object_set_new(root, "launcher", l);
	}
	text = json_dumps(root, JSON_INDENT(2));
out:
	json_decref(cmd);
	json_decref(ranks);
	json_decref(root);
	return text;
}

int report_json(struct job *job)
{
	char *t = report_text(job);
	struct outfile of;
	int rc = -1;

	if (!t)
		fprintf(stderr, "distrun: --report %s: out of memory\n",
			job->o->report);
	else if (!outfile_open(&of, job->o->report, "--report")) {
		fputs(t, of.f);
		fputc('\n', of.f);
		rc = outfile_commit(&of);
	}
	free(t);
	return rc;
}
