/*
 * subgroup.c - dr_new_group and the small calls on a group handle.
 *
 * As torch's new_group, making a group is collective over the world: every
 * rank calls it, in the same order, with the same members, whether or not
 * it is one.  That is what lets each process number its groups with a
 * plain counter and still agree with every other process on which id a
 * group's messages carry.  Members are sorted (torch sorts them too), so
 * {3, 1} and {1, 3} are one group, group rank i being the i-th smallest.
 *
 * Ranks that call new_group with different members would silently build
 * different groups whose messages then cross; so the call ends with a
 * cheap agreement over the world: the maximum of a hash of the member list
 * and of its complement, by dissemination (ceil(lg p) rounds, the peers a
 * dissemination barrier talks to anyway).  If every rank passed the same
 * list both come back unchanged; otherwise every rank sees a difference
 * and fails with DR_EMISMATCH.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"

/* Ids of groups made by dr_new_group; the world is 0.  Every rank makes
 * the same groups in the same order, so the counters agree. */
static uint32_t next_group_id = 1;

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* FNV-1a over the member count and list. */
static uint64_t hash_ranks(const int *ranks, int n)
{
	uint64_t h = 1469598103934665603ull;

	for (int b = 0; b < 4; b++) {
		h ^= ((uint32_t)n >> (8 * b)) & 0xff;
		h *= 1099511628211ull;
	}
	for (int i = 0; i < n; i++) {
		uint32_t v = (uint32_t)ranks[i];
		for (int b = 0; b < 4; b++) {
			h ^= (v >> (8 * b)) & 0xff;
			h *= 1099511628211ull;
		}
	}
	return h;
}

/* op->buf holds {h, ~h}; leaves there the maximum of each over the world. */
static dr_err agree_run(dri_op *op)
{
	const dr_group *g = op->group;
	int p = g->size, r = g->rank;
	uint64_t *acc = op->buf, in[2];

	for (int d = 1; d < p; d <<= 1) {
		dr_err err = dri_sendrecv(&op->id, dri_peer(g, dri_mod(r + d, p)),
					  acc, sizeof(in),
					  dri_peer(g, dri_mod(r - d, p)), in,
					  sizeof(in));
		if (err)
			return err;
		for (int i = 0; i < 2; i++)
			if (in[i] > acc[i])
				acc[i] = in[i];
	}
	return DR_OK;
}

static dr_err check_ranks(const int *ranks, int n, int world)
{
	unsigned char *seen;

	if (n < 1 || n > world)
		return dri_fail(DR_EINVAL, "new_group: %d ranks; a group has "
				"1 to %d (the world size)", n, world);
	if (!ranks)
		return dri_fail(DR_EINVAL, "new_group: ranks is NULL");
	seen = calloc((size_t)world, 1);
	if (!seen)
		return dri_fail(DR_ENOMEM, "new_group: out of memory");
	for (int i = 0; i < n; i++) {
		if (ranks[i] < 0 || ranks[i] >= world) {
			free(seen);
			return dri_fail(DR_EINVAL, "new_group: rank %d (ranks[%d]) "
					"is not in the world of %d", ranks[i], i,
					world);
		}
		if (seen[ranks[i]]++) {
			free(seen);
			return dri_fail(DR_EINVAL, "new_group: rank %d appears "
					"twice", ranks[i]);
		}
	}
	free(seen);
	return DR_OK;
}

dr_err dr_new_group(const int *ranks, int n, dr_group **group)
{
	dri_op op = { 0 };
	uint64_t h = 0, acc[2];
	int *sorted = NULL;
	char why[256];
	dr_group *world;
	dr_err err, bad;

	if (!group)
		return dri_fail(DR_EINVAL, "new_group: group is NULL");
	*group = NULL;
	err = dri_coll_group("new_group", NULL, &world);
	if (err)
		return err;
	/* A rank whose list is bad still takes part in the agreement, with a
	 * value no list hashes to in practice, so that the others fail at
	 * once instead of waiting for it until the timeout. */
	bad = check_ranks(ranks, n, world->size);
	if (!bad) {
		sorted = malloc((size_t)n * sizeof(*sorted));
		if (!sorted)
			bad = dri_fail(DR_ENOMEM, "new_group: out of memory");
	}
	if (bad) {
		snprintf(why, sizeof(why), "%s", dr_last_error());
		acc[0] = acc[1] = UINT64_MAX;
	} else {
		memcpy(sorted, ranks, (size_t)n * sizeof(*sorted));
		qsort(sorted, (size_t)n, sizeof(*sorted), cmp_int);
		h = hash_ranks(sorted, n);
		acc[0] = h;
		acc[1] = ~h;
	}
	op.run = agree_run;
	op.id.coll = DRI_NEW_GROUP;
	/* Not n: a different count must fail this call on every rank, as a
	 * different list does, not abort the world as a mismatched message
	 * would. */
	op.id.count = 0;
	op.id.dtype = -1;
	op.id.op = -1;
	op.id.root = -1;
	op.group = world;
	op.buf = acc;
	op.count = 2;
	op.root = -1;
	op.device = -1;
	err = dri_submit(&op, NULL);
	if (bad) {
		err = dri_fail(bad, "%s", why);
		goto out;
	}
	if (err)
		goto out;
	if (acc[0] != h || acc[1] != ~h) {
		err = dri_fail(DR_EMISMATCH, "new_group: ranks passed different "
			       "members; this rank passed %d ranks starting "
			       "with %d", n, sorted[0]);
		goto out;
	}
	*group = dri_group_create(next_group_id++, sorted, n);
	if (!*group)
		err = dri_fail(DR_ENOMEM, "new_group: out of memory");
out:
	free(sorted);
	return err;
}

dr_err dr_new_subgroup(const int *ranks, int n, uint32_t id,
		       dr_group **group)
{
	dr_group *world;
	int *sorted = NULL;
	dr_err err;

	if (!group)
		return dri_fail(DR_EINVAL, "new_subgroup: group is NULL");
	*group = NULL;
	err = dri_coll_group("new_subgroup", NULL, &world);
	if (err)
		return err;
	if (id >= DR_SUBGROUP_ID_MAX)
		return dri_fail(DR_EINVAL, "new_subgroup: id %u is not below "
				"%u", (unsigned)id, (unsigned)DR_SUBGROUP_ID_MAX);
	err = check_ranks(ranks, n, world->size);
	if (err)
		return err;
	sorted = malloc((size_t)n * sizeof(*sorted));
	if (!sorted)
		return dri_fail(DR_ENOMEM, "new_subgroup: out of memory");
	memcpy(sorted, ranks, (size_t)n * sizeof(*sorted));
	qsort(sorted, (size_t)n, sizeof(*sorted), cmp_int);
	if (!bsearch(&world->rank, sorted, (size_t)n, sizeof(*sorted),
		     cmp_int)) {
		err = dri_fail(DR_ENOTMEMBER, "new_subgroup: rank %d is not "
			       "one of the %d ranks given (only members call "
			       "it)", world->rank, n);
		goto out;
	}
	/* The top bit keeps these ids apart from dr_new_group's counter. */
	*group = dri_group_create(0x80000000u | id, sorted, n);
	if (!*group)
		err = dri_fail(DR_ENOMEM, "new_subgroup: out of memory");
out:
	free(sorted);
	return err;
}

int dr_group_rank(const dr_group *group)
{
	if (!group)
		group = dri_world();
	return group ? group->rank : -1;
}

int dr_group_size(const dr_group *group)
{
	if (!group)
		group = dri_world();
	return group ? group->size : -1;
}

void dr_group_destroy(dr_group *group)
{
	if (group && group != dri_world())
		dri_group_free(group);
}
