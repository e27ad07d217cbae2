/*
 * cluster.c - the shape of a multi-node job from the engine that started
 * distrun, so that `srun distrun -n 4 ./prog` or a Kubeflow PyTorchJob
 * needs no other flag.
 *
 * Slurm: inside a job step (SLURM_STEP_ID set) with one task a node
 * (SLURM_NTASKS == SLURM_NNODES), the node rank is SLURM_NODEID, the nodes
 * SLURM_NNODES, the hub the first host of SLURM_JOB_NODELIST (hostlist
 * syntax, hostlist.c), and the port MASTER_PORT if set, else one derived
 * from SLURM_JOB_ID so every node computes the same.  Without a step (a
 * plain `distrun` in an salloc shell) Slurm's variables describe the
 * allocation, not this command: they are ignored.
 *
 * Kubeflow's PyTorchJob sets PET_NNODES, PET_NODE_RANK,
 * PET_NPROC_PER_NODE, PET_RDZV_ENDPOINT (host:port) and MASTER_ADDR /
 * MASTER_PORT, as torchrun's environment variables.
 *
 * Values from the environment are checked as strictly as options: a bad
 * one is an error naming the variable.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "hostlist.h"

static int env_int(const char *name, long lo, long hi, long *out, char *err,
		   size_t n)
{
	const char *s = getenv(name);
	char *end;

	if (!s)
		return 1;
	errno = 0;
	*out = strtol(s, &end, 10);
	if (!*s || *end || errno || *out < lo || *out > hi) {
		snprintf(err, n, "%s='%s' is not a number in %ld..%ld", name, s,
			 lo, hi);
		return -1;
	}
	return 0;
}

static int from_slurm(struct cluster *c, char *err, size_t n)
{
	long nnodes, node, ntasks, job, port;
	const char *list = getenv("SLURM_JOB_NODELIST");
	char **hosts;
	int nh, rc;

	if (!getenv("SLURM_STEP_ID") || !getenv("SLURM_NNODES"))
		return 1;
	if (env_int("SLURM_NNODES", 1, 65536, &nnodes, err, n) ||
	    env_int("SLURM_NODEID", 0, nnodes - 1, &node, err, n) ||
	    env_int("SLURM_NTASKS", 1, LONG_MAX, &ntasks, err, n) ||
	    env_int("SLURM_JOB_ID", 0, LONG_MAX, &job, err, n))
		return -1;
	if (nnodes == 1)
		return 1; /* one node: nothing to join */
	if (ntasks != nnodes) {
		snprintf(err, n, "srun started %ld tasks on %ld nodes: run one "
			 "distrun a node (srun --ntasks-per-node=1 distrun -n "
			 "RANKS ...)", ntasks, nnodes);
		return -1;
	}
	if (!list) {
		snprintf(err, n, "SLURM_JOB_NODELIST is not set");
		return -1;
	}
	nh = hostlist_expand(list, &hosts, err, n);
	if (nh < 0)
		return -1;
	if (nh != nnodes) {
		snprintf(err, n, "SLURM_JOB_NODELIST '%s' names %d hosts but "
			 "SLURM_NNODES is %ld", list, nh, nnodes);
		hostlist_free(hosts, nh);
		return -1;
	}
	snprintf(c->master_addr, sizeof(c->master_addr), "%s", hosts[0]);
	hostlist_free(hosts, nh);
	rc = env_int("MASTER_PORT", 1, 65535, &port, err, n);
	if (rc < 0)
		return -1;
	c->nnodes = (int)nnodes;
	c->node_rank = (int)node;
	c->port = rc == 0 ? (int)port : 20000 + (int)(job % 20000);
	c->source = "Slurm";
	return 0;
}

static int from_kubeflow(struct cluster *c, char *err, size_t n)
{
	const char *nn = getenv("PET_NNODES"), *ep, *addr;
	long nodes, node, nproc, port;
	int rc;

	if (!nn)
		return 1;
	/* "2" or "MIN:MAX": a static job takes MAX nodes. */
	nodes = strtol(strchr(nn, ':') ? strchr(nn, ':') + 1 : nn, NULL, 10);
	if (nodes < 1 || nodes > 65536) {
		snprintf(err, n, "PET_NNODES='%s' is not a node count", nn);
		return -1;
	}
	if (env_int("PET_NODE_RANK", 0, nodes - 1, &node, err, n)) {
		if (!getenv("PET_NODE_RANK"))
			snprintf(err, n, "PET_NNODES is set but PET_NODE_RANK "
				 "is not");
		return -1;
	}
	rc = env_int("PET_NPROC_PER_NODE", 1, 4096, &nproc, err, n);
	if (rc < 0)
		return -1;
	c->nproc = rc == 0 ? (int)nproc : 0;
	ep = getenv("PET_RDZV_ENDPOINT");
	addr = getenv("MASTER_ADDR");
	if (ep && strrchr(ep, ':')) {
		const char *colon = strrchr(ep, ':');

		snprintf(c->master_addr, sizeof(c->master_addr), "%.*s",
			 (int)(colon - ep), ep);
		port = strtol(colon + 1, NULL, 10);
		if (port < 1 || port > 65535) {
			snprintf(err, n, "PET_RDZV_ENDPOINT='%s' has no port", ep);
			return -1;
		}
	} else if (addr) {
		snprintf(c->master_addr, sizeof(c->master_addr), "%s", addr);
		if (env_int("MASTER_PORT", 1, 65535, &port, err, n)) {
			if (!getenv("MASTER_PORT"))
				snprintf(err, n, "MASTER_ADDR is set but "
					 "MASTER_PORT is not");
			return -1;
		}
	} else {
		snprintf(err, n, "PET_NNODES is set but neither "
			 "PET_RDZV_ENDPOINT nor MASTER_ADDR is");
		return -1;
	}
	c->nnodes = (int)nodes;
	c->node_rank = (int)node;
	c->port = (int)port;
	c->source = "Kubeflow (PET_*)";
	return 0;
}

int cluster_detect(struct cluster *c, char *err, size_t n)
{
	int rc;

	memset(c, 0, sizeof(*c));
	rc = from_slurm(c, err, n);
	if (rc <= 0)
		return rc;
	return from_kubeflow(c, err, n);
}
