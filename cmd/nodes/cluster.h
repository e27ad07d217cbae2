/*
 * cluster.h - a multi-node job's shape from Slurm or Kubeflow variables.
 */
#ifndef DISTRUN_CLUSTER_H
#define DISTRUN_CLUSTER_H

#include <stddef.h>

struct cluster {
	int nnodes, node_rank;
	char master_addr[256];
	int port;
	int nproc;              /* ranks a node, 0: not said */
	const char *source;     /* "Slurm", "Kubeflow (PET_*)" */
};

/* 0 with *c filled when distrun runs as one node of a multi-node Slurm
 * step or PyTorchJob; 1 when not; -1 with a message naming the bad
 * variable. */
int cluster_detect(struct cluster *c, char *err, size_t n);

#endif
