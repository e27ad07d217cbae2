/*
 * test_hostlist.c - Slurm host lists and task counts.  The expected
 * expansions are what Slurm's own `scontrol show hostnames` (Debian's
 * slurm-wlm 22.05) printed for the same expressions.
 */
#include "runner.h"
#include "../../cmd/nodes/hostlist.c"

static int expands_to(const char *expr, const char *want)
{
	char **v, err[256], got[4096] = "";
	int n = hostlist_expand(expr, &v, err, sizeof(err));

	if (n < 0) {
		fprintf(stderr, "%s: %s\n", expr, err);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		if (i)
			strcat(got, " ");
		strcat(got, v[i]);
	}
	hostlist_free(v, n);
	if (strcmp(got, want)) {
		fprintf(stderr, "%s: got '%s', want '%s'\n", expr, got, want);
		return 0;
	}
	return 1;
}

static int refused(const char *expr, const char *why)
{
	char **v, err[256];

	if (hostlist_expand(expr, &v, err, sizeof(err)) != -1 || v)
		return 0;
	if (!strstr(err, why)) {
		fprintf(stderr, "%s: message '%s' lacks '%s'\n", expr, err, why);
		return 0;
	}
	return 1;
}

static int test_slurm_examples(void)
{
	CHECK(expands_to("node[01-04,07]", "node01 node02 node03 node04 node07"));
	CHECK(expands_to("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2"));
	CHECK(expands_to("a1,b[2-3],c", "a1 b2 b3 c"));
	CHECK(expands_to("tux[0-5,12,20-25]", "tux0 tux1 tux2 tux3 tux4 tux5 "
			 "tux12 tux20 tux21 tux22 tux23 tux24 tux25"));
	CHECK(expands_to("n[9-11]", "n9 n10 n11"));
	CHECK(expands_to("n[098-101]", "n098 n099 n100 n101"));
	CHECK(expands_to("a b", "a b"));
	CHECK(expands_to("node1,node[2-5,12]", "node1 node2 node3 node4 node5 node12"));
	CHECK(expands_to("localhost", "localhost"));
	return 0;
}

static int test_bad_lists(void)
{
	CHECK(refused("n[5-3]", "reversed"));
	CHECK(refused("n[1-2", "unbalanced"));
	CHECK(refused("n1-2]", "unbalanced"));
	CHECK(refused("n[[1]]", "unbalanced"));
	CHECK(refused("n[]", "empty"));
	CHECK(refused("n[a-b]", "expected a number"));
	CHECK(refused("n[1-]", "open range"));
	CHECK(refused("n[1,]", "trailing"));
	CHECK(refused("a,,b", "empty item"));
	CHECK(refused("a,", "trailing"));
	CHECK(refused("", "empty"));
	CHECK(refused("a\tb", "bad character"));
	CHECK(refused("n[0-99999999]", "more than"));
	CHECK(refused("n[1-300]x[1-300]", "more than"));
	return 0;
}

static int test_long_names(void)
{
	char big[600];

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	CHECK(refused(big, "longer than"));
	return 0;
}

static int tasks_are(const char *expr, const char *want)
{
	int v[64], n;
	char err[256], got[512] = "";

	n = tasks_per_node_expand(expr, v, 64, err, sizeof(err));
	if (n < 0) {
		fprintf(stderr, "%s: %s\n", expr, err);
		return 0;
	}
	for (int i = 0; i < n; i++)
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%d",
			 i ? " " : "", v[i]);
	if (strcmp(got, want)) {
		fprintf(stderr, "%s: got '%s', want '%s'\n", expr, got, want);
		return 0;
	}
	return 1;
}

static int test_tasks_per_node(void)
{
	int v[4];
	char err[256];

	CHECK(tasks_are("2(x3),1", "2 2 2 1"));
	CHECK(tasks_are("4", "4"));
	CHECK(tasks_are("1,2,3", "1 2 3"));
	CHECK(tasks_are("16(x2)", "16 16"));
	CHECK(tasks_per_node_expand("2(x5)", v, 4, err, sizeof(err)) == -1);
	CHECK(strstr(err, "more than 4"));
	CHECK(tasks_per_node_expand("2(3)", v, 4, err, sizeof(err)) == -1);
	CHECK(tasks_per_node_expand("0", v, 4, err, sizeof(err)) == -1);
	CHECK(tasks_per_node_expand("1,", v, 4, err, sizeof(err)) == -1);
	CHECK(tasks_per_node_expand("1x", v, 4, err, sizeof(err)) == -1);
	CHECK(tasks_per_node_expand("", v, 4, err, sizeof(err)) == -1);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_slurm_examples),
	UNIT(test_bad_lists),
	UNIT(test_long_names),
	UNIT(test_tasks_per_node),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
