/*
 * coll_hier.c - collectives in two levels: inside each host, then between
 * one leader per host.
 *
 * When a group's ranks span several hosts and some host holds more than
 * one of them, a flat algorithm sends most of its messages between hosts
 * (ranks are usually numbered host by host, so a ring or a tree crosses
 * hosts at every other step, and round-robin placement makes it every
 * step).  Here:
 *   all_reduce  reduce to the host's leader (shared memory), all_reduce
 *               among the leaders (the network), broadcast in the host;
 *   broadcast   the root's host leads with the root itself; a tree among
 *               the leaders, then one inside each host;
 *   barrier     the host's ranks report to their leader, the leaders run
 *               the dissemination barrier, the leaders release their
 *               host;
 *   all_gather  the host's blocks to its leader, each leader's run of
 *               blocks to every other leader in one message (hosts may
 *               hold different numbers of ranks), the whole result
 *               broadcast inside each host.
 * Each level is the flat algorithm run over a group of the pieces (the
 * entry point hands its flat runs in, coll_hier.h, so that the coll_*.c
 * files call this one and never the other way), with the call's own
 * message identity: a rank whose call differs fails the receive that
 * meets it with DR_EMISMATCH, as in the flat run.  A pair of ranks talks in one level only (two ranks of one
 * host never both lead), or in levels one after the other, so the
 * transport's in-order matching per peer keeps the levels apart.
 *
 * Results are bit-identical on every rank: the reduction happens once,
 * in a fixed order (the flat reduce's tree inside a host, the flat
 * all_reduce among leaders, whose every rank gets the same bits), and the
 * other ranks receive copies.  AVG reduces as SUM and the leaders divide
 * once by the group's size.
 *
 * Hosts are those of the shared-memory transport (dri_shm_host_of: the
 * same map on every rank).  The leader of a host is its lowest group
 * index (the root for a broadcast's root host).  Which calls go this way:
 * dri_hier_wanted, by the measurements of scripts/bench-nodes.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "coll_hier.h"
#include "copy.h"
#include "shm.h"

enum { HIER_AUTO, HIER_ON, HIER_OFF, HIER_BAD };

/* The two levels of one call, as this rank sees them. */
typedef struct {
	dr_group local;    /* this rank's host: its members in group order */
	dr_group leaders;  /* one rank per host, hosts in group order */
	int leader;        /* world rank leading this rank's host */
	int widest;        /* ranks on the host that holds the most */
	int *mem;          /* local.ranks and leaders.ranks */
} hier_plan;

static int hier_mode_of(const char *s)
{
	if (!s || !*s || !strcmp(s, "auto"))
		return HIER_AUTO;
	if (!strcmp(s, "on") || !strcmp(s, "1"))
		return HIER_ON;
	if (!strcmp(s, "off") || !strcmp(s, "0"))
		return HIER_OFF;
	return HIER_BAD;
}

/* DISTRUN_HIER, read once per process group (every call asks): the
 * mode + 1 in the low byte, the generation above. */
static int hier_mode(void)
{
	static uint64_t cache;
	uint64_t c = __atomic_load_n(&cache, __ATOMIC_RELAXED);
	uint64_t gen = dri_shm_generation();
	int mode;

	if ((c & 0xff) && c >> 8 == gen)
		return (int)(c & 0xff) - 1;
	mode = hier_mode_of(getenv("DISTRUN_HIER"));
	__atomic_store_n(&cache, gen << 8 | (uint64_t)(mode + 1), __ATOMIC_RELAXED);
	return mode;
}

/* Cuts g into hosts; root (a world rank, -1: none) leads its host.
 * Returns 1 with *h filled (free h->mem) when the call has two levels:
 * several hosts, one of them with several ranks; else 0 (or -1 out of
 * memory, message set). */
static int plan_make(const dr_group *g, int root, hier_plan *h)
{
	int p = g->size, world = dri_world()->size, nl = 0, nh = 0;
	int me = dri_peer(g, g->rank), myhost = dri_shm_host_of(me);
	int roothost = root >= 0 ? dri_shm_host_of(root) : -1;
	int *seen;

	memset(h, 0, sizeof(*h));
	if (p < 3)
		return 0;
	h->mem = malloc((size_t)(2 * p + world) * sizeof(int));
	if (!h->mem) {
		dri_fail(DR_ENOMEM, "out of memory for a group of %d", p);
		return -1;
	}
	seen = h->mem + 2 * p;
	memset(seen, 0, (size_t)world * sizeof(int));
	for (int i = 0; i < p; i++) {
		int w = dri_peer(g, i), host = dri_shm_host_of(w);

		if (host == myhost)
			h->mem[nl++] = w;
		if (!seen[host]++)
			h->mem[p + nh++] = host == roothost ? root : w;
		if (seen[host] > h->widest)
			h->widest = seen[host];
	}
	h->leader = myhost == roothost ? root : h->mem[0];
	if (nh < 2 || nh == p) {
		free(h->mem);
		h->mem = NULL;
		return 0;
	}
	h->local.id = h->leaders.id = g->id;
	h->local.size = nl;
	h->local.ranks = h->mem;
	h->local.rank = dri_group_index(&h->local, me);
	h->leaders.size = nh;
	h->leaders.ranks = h->mem + p;
	h->leaders.rank = dri_group_index(&h->leaders, me);
	return 1;
}

/* Where two levels beat the flat algorithms, measured on pretend hosts
 * (shared memory inside, loopback TCP between; README's Benchmarks):
 * latency-bound calls (a barrier; all_reduce and broadcast up to
 * DRI_COLL_SMALL_BYTES; all_gather up to a result of
 * DRI_HIER_GATHER_BYTES, measured on network namespaces by
 * scripts/bench-nodes) once some host holds three ranks or more.  With
 * two a host, the two extra hops inside the hosts cost what the
 * exchanges between hosts save.  Large calls stay flat: between hosts
 * as fast as memory (loopback, veth), the copies inside the hosts cost
 * more than the bytes saved between them; DISTRUN_HIER=on is for
 * networks much slower than memory. */
static int hier_pays(const dri_op *op, const hier_plan *h)
{
	size_t bytes = op->count * dr_dtype_size(op->dtype);

	if (h->widest < 3)
		return 0;
	if (op->id.coll == DRI_ALL_GATHER) /* by the whole result */
		return bytes * (size_t)op->group->size <= DRI_HIER_GATHER_BYTES;
	return op->id.coll == DRI_BARRIER || bytes <= DRI_COLL_SMALL_BYTES;
}

int dri_hier_wanted(const dri_op *op)
{
	hier_plan h;
	int mode, two;

	/* One host (every peer in shared memory): one level, and the
	 * per-call look at the environment and the plan are not needed. */
	if (dri_shm_all_local() || (mode = hier_mode()) == HIER_OFF)
		return 0;
	two = plan_make(op->group, op->id.coll == DRI_BROADCAST ? op->root : -1,
			&h);
	free(h.mem);
	if (two < 0 || (two && mode == HIER_BAD))
		return 1; /* the schedule fails it, naming why */
	return two && (mode == HIER_ON || hier_pays(op, &h));
}

/* The plan of op, or an error: a bad DISTRUN_HIER, no memory, or a group
 * that has no two levels after all. */
static dr_err plan_get(dri_op *op, int root, hier_plan *h)
{
	int two;

	if (hier_mode() == HIER_BAD)
		return dri_fail(DR_EENV, "DISTRUN_HIER='%s': use auto, on or off",
				getenv("DISTRUN_HIER"));
	two = plan_make(op->group, root, h);
	if (two < 0)
		return DR_ENOMEM;
	/* every level's messages, and the copies of op made after this */
	op->id.tag = DRI_HIER_TAG;
	if (!two)
		return dri_fail(DR_EINVAL, "%s: the group has no two levels of "
				"hosts", dri_coll_name((dri_coll)op->id.coll));
	return DR_OK;
}

dr_err dri_hier_all_reduce(dri_op *op, dri_flat_fn reduce,
			   dri_flat_fn all_reduce, dri_flat_fn broadcast)
{
	hier_plan h;
	int me = dri_peer(op->group, op->group->rank);
	dr_err err = plan_get(op, -1, &h);
	dri_op sub = *op;

	if (err)
		return err;
	/* One division at the end, by the whole group's size. */
	if (op->redop == DR_AVG)
		sub.redop = DR_SUM;
	sub.root = h.leader;
	sub.group = &h.local;
	if (h.local.size > 1)
		err = reduce(&sub);
	if (!err && me == h.leader) {
		sub.group = &h.leaders;
		sub.root = -1;
		err = all_reduce(&sub);
		if (!err)
			dri_reduce_finish(op->buf, op->count, op->dtype,
					  op->redop, op->group->size);
	}
	sub.group = &h.local;
	sub.root = h.leader;
	if (!err && h.local.size > 1)
		err = broadcast(&sub);
	free(h.mem);
	return err;
}

dr_err dri_hier_broadcast(dri_op *op, dri_flat_fn broadcast)
{
	hier_plan h;
	int me = dri_peer(op->group, op->group->rank);
	dr_err err = plan_get(op, op->root, &h);
	dri_op sub = *op;

	if (err)
		return err;
	if (me == h.leader) {
		sub.group = &h.leaders;
		err = broadcast(&sub);
	}
	sub.group = &h.local;
	sub.root = h.leader;
	if (!err && h.local.size > 1)
		err = broadcast(&sub);
	free(h.mem);
	return err;
}

/* Inside a host: every rank reports to the leader (up) or the leader
 * releases every rank (down), with empty messages; the leader posts all
 * of its at once. */
static dr_err local_fan(const dri_op *op, const hier_plan *h, int me, int up)
{
	int n = h->local.size, k = 0;
	dri_req *reqs;
	dr_err err = DR_OK;

	if (me != h->leader)
		return up ? dri_send(&op->id, h->leader, NULL, 0)
			  : dri_recv(&op->id, h->leader, NULL, 0);
	reqs = dri_scratch_get((size_t)n * sizeof(*reqs));
	if (!reqs)
		return DR_ENOMEM;
	for (int i = 0; i < n && !err; i++) {
		int w = h->local.ranks[i];

		if (w == me)
			continue;
		err = up ? dri_irecv(&reqs[k], &op->id, w, dri_or_empty(NULL), 0)
			 : dri_isend(&reqs[k], &op->id, w, dri_or_empty(NULL), 0);
		if (!err)
			k++;
	}
	err = dri_coll_wait(reqs, k, err);
	dri_scratch_put(reqs);
	return err;
}

dr_err dri_hier_barrier(dri_op *op, dri_flat_fn barrier)
{
	hier_plan h;
	int me = dri_peer(op->group, op->group->rank);
	dr_err err = plan_get(op, -1, &h);
	dri_op sub = *op;

	if (err)
		return err;
	if (h.local.size > 1)
		err = local_fan(op, &h, me, 1);
	if (!err && me == h.leader) {
		sub.group = &h.leaders;
		err = barrier(&sub);
	}
	if (!err && h.local.size > 1)
		err = local_fan(op, &h, me, 0);
	free(h.mem);
	return err;
}

/* The leader's part of all_gather: its host's blocks into pack (in the
 * host's order, hosts one after the other: slot[i] is group index i's
 * place), then its run of them to every other leader and theirs from
 * each, every message posted at once; then the result in group order. */
static dr_err gather_leaders(const dri_op *op, const hier_plan *h, int me,
			     const int *slot, const int *run, char *pack,
			     size_t blk)
{
	const dr_group *g = op->group;
	int p = g->size, nh = h->leaders.size, mine = h->leaders.rank, k = 0;
	dri_req *reqs = dri_scratch_get((size_t)(p + 2 * nh) * sizeof(*reqs));
	dr_err err = DR_OK;

	if (!reqs)
		return DR_ENOMEM;
	for (int i = 0; i < p && !err; i++) {
		int w = dri_peer(g, i);

		if (w == me)
			dri_copy(pack + (size_t)slot[i] * blk, op->sendbuf,
				 blk);
		else if (dri_shm_host_of(w) == dri_shm_host_of(me) &&
			 !(err = dri_irecv(&reqs[k], &op->id, w,
					   pack + (size_t)slot[i] * blk, blk)))
			k++;
	}
	err = dri_coll_wait(reqs, k, err);
	k = 0;
	for (int j = 0; j < nh && !err; j++) {
		int w = h->leaders.ranks[j];

		if (j == mine)
			continue;
		err = dri_irecv(&reqs[k], &op->id, w,
				pack + (size_t)run[j] * blk,
				(size_t)(run[j + 1] - run[j]) * blk);
		if (!err)
			k++;
		if (!err)
			err = dri_isend(&reqs[k], &op->id, w,
					pack + (size_t)run[mine] * blk,
					(size_t)(run[mine + 1] - run[mine]) * blk);
		if (!err)
			k++;
	}
	err = dri_coll_wait(reqs, k, err);
	for (int i = 0; i < p && !err; i++)
		dri_copy((char *)op->buf + (size_t)i * blk,
			 pack + (size_t)slot[i] * blk, blk);
	dri_scratch_put(reqs);
	return err;
}

dr_err dri_hier_all_gather(dri_op *op, dri_flat_fn broadcast)
{
	hier_plan h;
	const dr_group *g = op->group;
	int me = dri_peer(g, g->rank), p = g->size, nh;
	size_t blk = op->count * dr_dtype_size(op->dtype);
	dr_err err = plan_get(op, -1, &h);
	dri_op sub = *op;
	int *slot = NULL, *run;
	char *pack = NULL;

	if (err)
		return err;
	nh = h.leaders.size;
	/* slot[i]: group index i's place when the hosts' blocks lie one
	 * host after the other (leaders' order), each host's in group
	 * order; run[j] .. run[j + 1]: host j's places.  Every rank knows
	 * the map, so no counts travel. */
	slot = dri_scratch_get((size_t)(p + nh + 1) * sizeof(int));
	if (!slot) {
		err = DR_ENOMEM;
		goto out;
	}
	run = slot + p;
	memset(run, 0, (size_t)(nh + 1) * sizeof(int));
	for (int i = 0; i < p; i++) {
		int host = dri_shm_host_of(dri_peer(g, i)), j = 0;

		while (j < nh && dri_shm_host_of(h.leaders.ranks[j]) != host)
			j++;
		slot[i] = j;  /* the host for now */
		run[j + 1]++;
	}
	for (int j = 0; j < nh; j++)
		run[j + 1] += run[j];
	{
		int *next = dri_scratch_get((size_t)nh * sizeof(int));

		if (!next) {
			err = DR_ENOMEM;
			goto out;
		}
		memcpy(next, run, (size_t)nh * sizeof(int));
		for (int i = 0; i < p; i++)
			slot[i] = next[slot[i]]++;
		dri_scratch_put(next);
	}
	if (me != h.leader) {
		err = dri_send(&op->id, h.leader, op->sendbuf, blk);
	} else {
		pack = dri_scratch_get((size_t)p * blk);
		err = pack ? gather_leaders(op, &h, me, slot, run, pack, blk)
			   : DR_ENOMEM;
	}
	if (!err && h.local.size > 1) {
		sub.group = &h.local;
		sub.root = h.leader;
		sub.count = op->count * (size_t)p;
		err = broadcast(&sub);
	}
out:
	dri_scratch_put(pack);
	dri_scratch_put(slot);
	free(h.mem);
	return err;
}
