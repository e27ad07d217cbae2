/*
 * nodes_job.c - the launcher's side of a multi-node job: the plan from
 * the options (or Slurm, Kubeflow, etcd's rendezvous), the join before
 * the ranks start, the node connections in the job loop, the stop, the
 * restart round under --max-restarts (re-executing distrun) and the end.
 * nodes.c does the talking; this file decides what the job does with it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "launcher.h"
#include "nodes_int.h"
#include "rendezvous.h"

/* ------------------------------------------- the launcher's side */

/* The plan from the options, else from Slurm or Kubeflow; then etcd's
 * rendezvous when asked.  0 with nnodes 1: a one-node job as ever. */
static int make_plan(struct job *job, struct node_plan *p, char *addr,
		     size_t addrsz, struct rdzv_keep **keep)
{
	struct opts *o = job->o;
	struct cluster c;
	char err[512];
	int rc;

	memset(p, 0, sizeof(*p));
	p->nnodes = o->max_nodes;
	p->node_rank = o->node_rank;
	p->port = o->master_port_given ? o->master_port : NODES_DEFAULT_PORT;
	p->run_id = o->rdzv_id;
	p->timeout = o->join_timeout;
	snprintf(addr, addrsz, "%s", o->master_addr);
	if (o->rdzv_backend && !strcmp(o->rdzv_backend, "etcd")) {
		struct rdzv_plan rp = {
			.endpoint = o->rdzv_endpoint, .run_id = o->rdzv_id,
			.min_nodes = o->min_nodes ? o->min_nodes : 1,
			.max_nodes = o->max_nodes ? o->max_nodes : 1,
			.nproc = o->nranks, .port = p->port,
			.timeout = o->join_timeout, .last_call = 5,
			.round = job->restarts, .argv = o->argv,
		};
		struct rdzv_result res;

		if (!o->rdzv_endpoint || !o->rdzv_id) {
			fprintf(stderr, "distrun: --rdzv-backend etcd needs "
				"--rdzv-endpoint HOST:PORT and --rdzv-id ID\n");
			return -1;
		}
		if (o->node_rank >= 0) {
			fprintf(stderr, "distrun: --node-rank is given by etcd's "
				"rendezvous, not on the command line\n");
			return -1;
		}
		if (rdzv_etcd(&rp, &res, err, sizeof(err))) {
			fprintf(stderr, "distrun: %s\n", err);
			return -1;
		}
		p->nnodes = res.nnodes;
		p->node_rank = res.node_rank;
		p->port = res.master_port;
		snprintf(addr, addrsz, "%s", res.master_addr);
		/* A node started afresh may have joined a restart's round:
		 * its ranks see that count, and its restarts left are the
		 * job's. */
		job->restarts = res.round;
		if (res.node_rank == 0 && res.nnodes > 1 && res.lease > 0 &&
		    !(*keep = rdzv_keep_start(o->rdzv_endpoint, res.lease, err,
					      sizeof(err)))) {
			fprintf(stderr, "distrun: %s\n", err);
			return -1;
		}
		return 0;
	}
	if (o->rdzv_endpoint) {
		/* Static: node 0's address and port, as torchrun takes it. */
		const char *colon = strrchr(o->rdzv_endpoint, ':');
		long port = colon ? strtol(colon + 1, NULL, 10) : 0;

		if (!colon || colon == o->rdzv_endpoint || port < 1 ||
		    port > 65535) {
			fprintf(stderr, "distrun: --rdzv-endpoint '%s': expected "
				"HOST:PORT\n", o->rdzv_endpoint);
			return -1;
		}
		snprintf(addr, addrsz, "%.*s", (int)(colon - o->rdzv_endpoint),
			 o->rdzv_endpoint);
		p->port = (int)port;
		o->master_addr_given = true;
	}
	if (o->min_nodes != o->max_nodes) {
		fprintf(stderr, "distrun: --nnodes %d:%d needs --rdzv-backend "
			"etcd (a static rendezvous has a fixed count)\n",
			o->min_nodes, o->max_nodes);
		return -1;
	}
	if (!o->max_nodes) {
		rc = cluster_detect(&c, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "distrun: %s\n", err);
			return -1;
		}
		if (rc == 0) {
			p->nnodes = c.nnodes;
			p->node_rank = c.node_rank;
			p->port = c.port;
			snprintf(addr, addrsz, "%s", c.master_addr);
			if (c.nproc && !o->nranks_given)
				o->nranks = c.nproc;
		}
	}
	if (p->nnodes <= 1) {
		if (p->node_rank > 0) {
			fprintf(stderr, "distrun: --node-rank %d needs --nnodes "
				"of more than %d\n", p->node_rank, p->node_rank);
			return -1;
		}
		p->nnodes = 1;
		return 0;
	}
	if (p->node_rank < 0) {
		fprintf(stderr, "distrun: --nnodes %d needs --node-rank (0 to "
			"%d; 0 on the host of --master-addr)\n", p->nnodes,
			p->nnodes - 1);
		return -1;
	}
	if (p->node_rank >= p->nnodes) {
		fprintf(stderr, "distrun: --node-rank %d is not less than "
			"--nnodes %d\n", p->node_rank, p->nnodes);
		return -1;
	}
	if (!o->master_addr_given && !c.source) {
		fprintf(stderr, "distrun: --nnodes %d needs --master-addr "
			"(node 0's address, the same on every node)\n",
			p->nnodes);
		return -1;
	}
	return 0;
}

/* This launcher's round: DISTRUN_RESTART_COUNT, which only nodes_reexec
 * sets (and which the ranks do not inherit). */
static int restart_round(struct job *job)
{
	const char *s = getenv("DISTRUN_RESTART_COUNT");
	char *end;
	long v;

	job->restarts = 0;
	if (!s)
		return 0;
	v = strtol(s, &end, 10);
	if (!*s || *end || v < 0 || v > job->o->max_restarts) {
		fprintf(stderr, "distrun: DISTRUN_RESTART_COUNT='%s': not a "
			"restart within --max-restarts %d\n", s,
			job->o->max_restarts);
		return -1;
	}
	job->restarts = (int)v;
	unsetenv("DISTRUN_RESTART_COUNT");
	return 0;
}

int nodes_setup(struct job *job)
{
	static char addr[256];
	struct opts *o = job->o;
	struct node_plan p;
	struct node_start st;
	struct rdzv_keep *keep = NULL;

	job->nnodes = 1;
	job->node_rank = 0;
	if (restart_round(job) ||
	    make_plan(job, &p, addr, sizeof(addr), &keep))
		goto fail;
	if (p.nnodes <= 1)
		return 0;
	if (o->max_restarts > 0 && !(o->rdzv_backend &&
				     !strcmp(o->rdzv_backend, "etcd"))) {
		/* Several nodes (here from Slurm's or Kubeflow's variables):
		 * a restart would have to be agreed by every node, which
		 * only etcd's rounds do (nodes_job_restart). */
		fprintf(stderr, "distrun: --max-restarts restarts a job on one "
			"node only; this job has %d nodes\n", p.nnodes);
		goto fail;
	}
	if (o->show && !o->ranks_arg) {
		/* -n may have come from PET_NPROC_PER_NODE. */
		uint8_t *show = realloc(o->show, (size_t)o->nranks);

		if (!show)
			goto fail;
		memset(show, 1, (size_t)o->nranks);
		o->show = show;
	}
	p.master_addr = addr;
	p.nproc = o->nranks;
	if (p.node_rank == 0) {
		/* Rank 0's store: a free port, held as for one node, on
		 * the address the ranks will be given (port.c may listen
		 * there for rank 0). */
		o->master_port = 0;
		o->master_addr = addr;
		if (port_reserve(job))
			goto fail;
		p.rank_port = job->master_port;
	}
	if (nodes_join(&job->nodes, &p, &st))
		goto fail;
	job->nnodes = st.nnodes;
	job->node_rank = st.node_rank;
	job->world_size = st.world_size;
	job->rank_offset = st.rank_offset;
	job->master_port = st.master_port;
	o->master_port = st.master_port;
	o->master_addr = addr;
	snprintf(job->node_secret, sizeof(job->node_secret), "%s",
		 st.secret_hex);
	/* Every node's ranks carry the same run id. */
	snprintf(job->run_id, sizeof(job->run_id), "%.39s", st.run_id);
	job->nodes->keep = keep;
	return 0;
fail:
	rdzv_keep_stop(keep);
	return -1;
}

int nodes_job_pollfds(struct job *job, struct pollfd *pfd, int max)
{
	return nodes_pollfds(job->nodes, pfd, max);
}

bool nodes_job_handle(struct job *job)
{
	struct node_event ev;

	nodes_handle(job->nodes, &ev);
	if (ev.kind == NODE_EV_NONE || job->stopping)
		return false;
	if (ev.rank >= 0)
		fprintf(stderr, "distrun: rank %d on node %d %s; stopping "
			"node %d\n", ev.rank, ev.node, ev.desc, job->node_rank);
	else
		fprintf(stderr, "distrun: %s; stopping node %d\n", ev.desc,
			job->node_rank);
	job->node_stop = true;
	job->node_stop_status = ev.status;
	return true;
}

void nodes_job_stopping(struct job *job)
{
	char desc[160], st[64];
	int status = 1, rank = -1;

	if (!job->nodes || job->node_stop)
		return;
	if (job->first_fail >= 0) {
		const struct rank *rk = &job->ranks[job->first_fail];

		rank = job->rank_offset + job->first_fail;
		status = WIFEXITED(rk->status) ? WEXITSTATUS(rk->status) :
			 128 + WTERMSIG(rk->status);
		snprintf(desc, sizeof(desc), "%s after %.3fs",
			 rank_status_str(rk, st, sizeof(st)),
			 rk->t_end - job->t0);
	} else if (job->timed_out) {
		status = EXIT_TIMEOUT;
		snprintf(desc, sizeof(desc), "node %d timed out after %gs",
			 job->node_rank, job->o->timeout);
	} else if (job->stop_signal) {
		status = 128 + job->stop_signal;
		snprintf(desc, sizeof(desc), "node %d got %s", job->node_rank,
			 signal_name(job->stop_signal));
	} else {
		snprintf(desc, sizeof(desc), "node %d stopped", job->node_rank);
	}
	nodes_fail(job->nodes, rank, status, desc);
}

int nodes_job_restart(struct job *job, int status)
{
	struct nodes *nd = job->nodes;
	const struct opts *o = job->o;
	char what[224];

	if (!status || !nd || !nd->failed || !o->rdzv_backend ||
	    strcmp(o->rdzv_backend, "etcd") ||
	    (nd->fail_kind != FAIL_RANK && nd->fail_kind != FAIL_LOST))
		return 0;
	if (nd->fail_rank >= 0)
		snprintf(what, sizeof(what), "rank %d on node %d %s",
			 nd->fail_rank, nd->fail_node, nd->fail_desc);
	else
		snprintf(what, sizeof(what), "%s", nd->fail_desc);
	if (job->restarts >= o->max_restarts) {
		if (o->max_restarts)
			fprintf(stderr, "distrun: %s; no restarts left "
				"(--max-restarts %d)\n", what, o->max_restarts);
		return 0;
	}
	fprintf(stderr, "distrun: %s; node %d restarts the rendezvous "
		"(restart %d of %d)\n", what, job->node_rank,
		job->restarts + 1, o->max_restarts);
	return job->restarts + 1;
}

void nodes_reexec(char **argv, int round, const sigset_t *mask)
{
	char v[16];

	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	/* By its path, so that ps and /proc/PID/comm still say distrun
	 * (the path itself may be gone: then the kernel's link to it). */
	self[n > 0 ? n : 0] = 0;
	if (n <= 0 || (size_t)n >= sizeof(self) - 1 || strstr(self, " (deleted)"))
		snprintf(self, sizeof(self), "/proc/self/exe");
	snprintf(v, sizeof(v), "%d", round);
	fflush(NULL);
	/* A blocked mask and an ignored SIGPIPE survive exec: the new
	 * distrun would take them for what it was started with, and give
	 * its ranks SIGTERM and SIGINT blocked. */
	child_reset_signals(mask);
	if (!setenv("DISTRUN_RESTART_COUNT", v, 1))
		execv(self, argv);
	fprintf(stderr, "distrun: cannot start again for restart %d: %s\n",
		round, strerror(errno));
}

int nodes_job_finish(struct job *job, int status)
{
	double left = 1e9;

	if (!job->nodes)
		return status;
	if (job->o->timeout > 0)
		left = job->t0 + job->o->timeout + job->o->grace + 10 -
		       now_mono();
	return nodes_finish(job->nodes, status, left > 1 ? left : 1);
}
