/*
 * test_cluster.c - a multi-node job's shape from Slurm's and Kubeflow's
 * variables, as srun and the PyTorchJob operator set them.
 */
#include "runner.h"
#include "../../cmd/nodes/hostlist.c"
#include "../../cmd/nodes/cluster.c"

static void clear(void)
{
	static const char *v[] = { "SLURM_STEP_ID", "SLURM_NNODES",
		"SLURM_NODEID", "SLURM_NTASKS", "SLURM_JOB_ID",
		"SLURM_JOB_NODELIST", "MASTER_PORT", "MASTER_ADDR",
		"PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
		"PET_RDZV_ENDPOINT" };

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		unsetenv(v[i]);
}

static void slurm_step(const char *nodes, const char *id, const char *tasks,
		       const char *list)
{
	clear();
	setenv("SLURM_STEP_ID", "0", 1);
	setenv("SLURM_JOB_ID", "4242", 1);
	setenv("SLURM_NNODES", nodes, 1);
	setenv("SLURM_NODEID", id, 1);
	setenv("SLURM_NTASKS", tasks, 1);
	setenv("SLURM_JOB_NODELIST", list, 1);
}

static int test_slurm_step(void)
{
	struct cluster c;
	char err[256];

	slurm_step("3", "2", "3", "gpu[07-08],login1");
	CHECK(cluster_detect(&c, err, sizeof(err)) == 0);
	CHECK(c.nnodes == 3 && c.node_rank == 2);
	CHECK(!strcmp(c.master_addr, "gpu07"));
	CHECK(c.port == 20000 + 4242);
	setenv("MASTER_PORT", "31000", 1);
	CHECK(cluster_detect(&c, err, sizeof(err)) == 0 && c.port == 31000);
	return 0;
}

static int test_slurm_not_a_step(void)
{
	struct cluster c;
	char err[256];

	slurm_step("3", "0", "3", "n[1-3]");
	unsetenv("SLURM_STEP_ID"); /* an salloc shell */
	CHECK(cluster_detect(&c, err, sizeof(err)) == 1);
	slurm_step("1", "0", "1", "n1"); /* one node */
	CHECK(cluster_detect(&c, err, sizeof(err)) == 1);
	return 0;
}

static int test_slurm_bad(void)
{
	struct cluster c;
	char err[256];

	slurm_step("2", "0", "8", "n[1-2]");
	CHECK(cluster_detect(&c, err, sizeof(err)) == -1);
	CHECK(strstr(err, "one distrun a node"));
	slurm_step("2", "5", "2", "n[1-2]");
	CHECK(cluster_detect(&c, err, sizeof(err)) == -1);
	CHECK(strstr(err, "SLURM_NODEID"));
	slurm_step("3", "0", "3", "n[1-2]");
	CHECK(cluster_detect(&c, err, sizeof(err)) == -1);
	CHECK(strstr(err, "names 2 hosts"));
	slurm_step("2", "0", "2", "n[2-1]");
	CHECK(cluster_detect(&c, err, sizeof(err)) == -1);
	CHECK(strstr(err, "reversed"));
	return 0;
}

static int test_kubeflow(void)
{
	struct cluster c;
	char err[256];

	clear();
	setenv("PET_NNODES", "2", 1);
	setenv("PET_NODE_RANK", "1", 1);
	setenv("PET_NPROC_PER_NODE", "4", 1);
	setenv("MASTER_ADDR", "job-master-0", 1);
	setenv("MASTER_PORT", "23456", 1);
	CHECK(cluster_detect(&c, err, sizeof(err)) == 0);
	CHECK(c.nnodes == 2 && c.node_rank == 1 && c.nproc == 4);
	CHECK(!strcmp(c.master_addr, "job-master-0") && c.port == 23456);
	setenv("PET_RDZV_ENDPOINT", "job-master-0:29400", 1);
	setenv("PET_NNODES", "1:2", 1);
	CHECK(cluster_detect(&c, err, sizeof(err)) == 0 && c.port == 29400);
	CHECK(c.nnodes == 2);
	unsetenv("PET_NODE_RANK");
	CHECK(cluster_detect(&c, err, sizeof(err)) == -1);
	CHECK(strstr(err, "PET_NODE_RANK"));
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_slurm_step),
	UNIT(test_slurm_not_a_step),
	UNIT(test_slurm_bad),
	UNIT(test_kubeflow),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
