/*
 * coll_monitored.c - dr_monitored_barrier: a barrier that, when it times
 * out, says who is missing.
 *
 * As torch's gloo monitoredBarrier: group rank 0 collects an empty message
 * from every other rank within the timeout, then answers each with a
 * verdict.  Rank 0 alone can see who did not come, so it names them
 * ("Ranks 1, 3 failed to pass monitoredBarrier in 500 ms"; only the lowest
 * unless wait_all_ranks) and passes the same words to every rank that did
 * arrive, so that they fail with it too instead of waiting for a verdict
 * that never comes.  A rank other than 0 waits twice the timeout for the
 * verdict: rank 0 may itself arrive up to one timeout late and then wait
 * one more.  A timeout here is not fatal to the group (the transport only
 * cancels the receives), unlike a peer that died.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"

/* The verdict: "" if everyone arrived, else the message. */
#define VERDICT_LEN 256

static void name_missing(const dri_op *op, const dri_req *reqs, int wait_all,
			 char *msg)
{
	const dr_group *g = op->group;
	char list[VERDICT_LEN / 2] = "";
	size_t len = 0;
	int n = 0;

	for (int i = 1; i < g->size; i++) {
		if (__atomic_load_n(&reqs[i - 1].complete, __ATOMIC_ACQUIRE))
			continue;
		if (len + 16 > sizeof(list)) {
			snprintf(list + len, sizeof(list) - len, ", ...");
			break;
		}
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d",
					n ? ", " : "", dri_peer(g, i));
		n++;
		if (!wait_all)
			break;
	}
	snprintf(msg, VERDICT_LEN, "Rank%s %s failed to pass monitoredBarrier "
		 "in %" PRId64 " ms", n > 1 ? "s" : "", list, op->timeout_ms);
}

static dr_err monitored_root(const dri_op *op, int wait_all)
{
	const dr_group *g = op->group;
	int p = g->size, nsend = 0;
	dri_req *reqs = dri_scratch_get((size_t)(2 * p) * sizeof(*reqs));
	dri_req *sends = reqs ? reqs + p : NULL;
	char verdict[VERDICT_LEN] = "";
	dr_err err;

	if (!reqs)
		return DR_ENOMEM;
	for (int i = 1; i < p; i++) {
		err = dri_irecv(&reqs[i - 1], &op->id, dri_peer(g, i), NULL, 0);
		if (err) {
			dri_abandon(err); /* earlier receives are posted */
			goto out;
		}
	}
	err = dri_waitall_timeout(reqs, p - 1, op->timeout_ms);
	if (err && err != DR_ETIMEDOUT)
		goto out;
	if (err) {
		name_missing(op, reqs, wait_all, verdict);
		err = DR_OK;
		/* The late ones learn it when they come (their wait for
		 * the verdict ends at once instead of at twice the timeout),
		 * and a rank that came to another call finds the mismatch. */
		for (int i = 1; i < p; i++)
			if (!__atomic_load_n(&reqs[i - 1].complete, __ATOMIC_ACQUIRE))
				dri_give_up(&op->id, dri_peer(g, i));
	}
	for (int i = 1; i < p && !err; i++) {
		if (!__atomic_load_n(&reqs[i - 1].complete, __ATOMIC_ACQUIRE))
			continue;
		err = dri_isend(&sends[nsend], &op->id, dri_peer(g, i), verdict,
				sizeof(verdict));
		if (!err)
			nsend++;
	}
	err = dri_coll_wait(sends, nsend, err);
	if (!err && verdict[0])
		err = dri_fail(DR_ETIMEDOUT, "%s", verdict);
out:
	dri_scratch_put(reqs);
	return err;
}

static dr_err monitored_member(const dri_op *op)
{
	const dr_group *g = op->group;
	char verdict[VERDICT_LEN];
	dri_req reqs[2];
	dr_err err;

	err = dri_isend(&reqs[0], &op->id, dri_peer(g, 0), NULL, 0);
	if (!err)
		err = dri_irecv(&reqs[1], &op->id, dri_peer(g, 0), verdict,
				sizeof(verdict));
	if (err)
		return err;
	err = dri_waitall_timeout(reqs, 2, 2 * op->timeout_ms);
	if (err == DR_ETIMEDOUT && __atomic_load_n(&reqs[1].complete, __ATOMIC_ACQUIRE))
		return dri_fail(err, "Rank %d failed to pass monitoredBarrier "
				"in %" PRId64 " ms (rank %d, the monitor, gave up "
				"on it: it came later)", dri_peer(g, g->rank),
				op->timeout_ms, dri_peer(g, 0));
	if (err == DR_ETIMEDOUT)
		return dri_fail(err, "Rank %d failed to pass monitoredBarrier "
				"in %" PRId64 " ms (no verdict from it in twice "
				"that: it did not arrive, or gave up on this rank "
				"arriving late)", dri_peer(g, 0), op->timeout_ms);
	if (err)
		return err;
	verdict[VERDICT_LEN - 1] = '\0';
	if (verdict[0])
		return dri_fail(DR_ETIMEDOUT, "%s (reported by rank %d)", verdict,
				dri_peer(g, 0));
	return DR_OK;
}

dr_err dri_monitored_run(dri_op *op)
{
	int wait_all = op->count != 0;

	if (op->group->size == 1)
		return DR_OK;
	return op->group->rank == 0 ? monitored_root(op, wait_all)
				    : monitored_member(op);
}
