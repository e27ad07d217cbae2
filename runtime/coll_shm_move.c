/*
 * coll_shm_move.c - the collectives that move data without reducing it,
 * through the segment's slots and flags (coll_shm_flags.h) or the single
 * copy (coll_shm_direct.c): broadcast, all_gather, gather, scatter,
 * all_to_all and all_to_all_v.
 *
 *   broadcast: rooted; in a tree, the root copies a chunk in, one phase,
 *     the others copy it out while the root copies the next one into the
 *     other half.  At most DRI_SEG_INLINE bytes ride in the root's record
 *     of the call; at most a small slot's, through one of them.
 *   gather, scatter: rooted; in a tree one phase per chunk.
 *   all_gather, all_to_all: one phase per chunk.
 *   all_to_all_v (up to DRI_SEG_A2AV_MAX ranks): the counts first (every
 *     rank's send and receive counts in its block, checked by every rank
 *     at the first phase), then the single copy or rounds through the
 *     slots, chosen from every rank's counts (dri_cs_a2av).
 * Each goes the single-copy way instead where coll_shm_direct.c says.
 */
#include <stdint.h>
#include <string.h>

#include "coll_shm_flags.h"
#include "copy.h"
#include "transport.h"

/* A broadcast or a gather, where the readers of a rank's buffer (or the
 * root reading the others') read more than this in all, goes through
 * the slots: there the copying in is shared out and overlaps the
 * copying out, which beats one copy done alone by a slower syscall
 * (README, Benchmarks). */
#define ROOTED_DIRECT_MAX ((size_t)4 << 20)
/* With more ranks than CPUs, a broadcast of less than this goes through
 * the slots (where its root does not wait for the readers: measured
 * 1.13-1.17x faster from 64 to 256 KiB on 4 ranks on 2 cores; 1 MiB
 * went 1.6x faster the single-copy way). */
#define BCAST_CROWDED_MIN ((size_t)512 << 10)
/* A gather of less than this per rank goes through the slots too, where
 * its non-roots write and return (32 KiB a rank on 2 ranks: 1.04x
 * faster there; 64 KiB: 1.1x slower). */
#define GATHER_DIRECT_MIN ((size_t)64 << 10)
/* broadcast: the root copies a chunk into a half and goes on (flat:
 * rooted; in a tree, one phase per chunk), the others copy it out. */
dr_err dri_cs_broadcast(struct call *c)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype), chunk = dri_cs.chunk;
	char *buf = op->buf;
	int root = op->root, me = c->r == root, direct;
	dr_err err = DR_OK;

	if (!c->tree && n <= DRI_SEG_INLINE) {
		/* tiny: in the root's record of the call */
		c->inl = 1;
		if (me) {
			c->inl_src = buf;
			c->inl_len = n;
			dri_cs_post(c);
		} else if (!(err = dri_cs_take(c, root))) {
			memcpy(buf, dri_cs_inl_data(c, root), n);
			dri_cs_done(c);
		}
		return err;
	}
	if (!c->tree && n <= dri_cs.sub_bytes) {
		/* small: through a small slot, LAG calls in flight */
		if ((err = dri_cs_next_sub(c, me)))
			return err;
		if (me) {
			dri_copy(dri_cs_cur_slot(c, root), buf, n);
			dri_cs_post(c);
		} else if (!(err = dri_cs_take(c, root))) {
			dri_copy(buf, dri_cs_cur_slot(c, root), n);
			dri_cs_done(c);
		}
		return err;
	}
	if ((err = dri_cs_direct_start(c, n * (size_t)(c->p - 1) <=
				       ROOTED_DIRECT_MAX ? n : 0,
				       BCAST_CROWDED_MIN, buf, &direct)) ||
	    direct) {
		if (!err && !me)
			err = dri_cs_direct_reads(c, root, buf, 0, n);
		return err ? err : dri_cs_phase(c);
	}
	for (size_t a = 0; a < n && !err; a += chunk) {
		size_t k = n - a < chunk ? n - a : chunk;
		int h;

		if ((err = dri_cs_next_half(c, me, &h)))
			break;
		if (me)
			dri_copy(dri_cs_slot(c->r, h), buf + a, k);
		if (c->tree) {
			if (!(err = dri_cs_phase(c)) && !me)
				dri_copy(buf + a, dri_cs_slot(root, h), k);
		} else if (me) {
			dri_cs_post(c);
		} else if (!(err = dri_cs_take(c, root))) {
			dri_copy(buf + a, dri_cs_slot(root, h), k);
			dri_cs_done(c);
		}
	}
	return err;
}

/* all_gather (root < 0) and gather: each rank's block in chunks of a
 * half; every rank (gather: the root) copies the others' out. */
dr_err dri_cs_gather(struct call *c, int root)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype), chunk = dri_cs.chunk;
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	int reads = root < 0 || c->r == root;
	/* gather, flat: the others write and go on, the root reads */
	int rooted = root >= 0 && !c->tree;
	int writes = !rooted || c->r != root;
	int sub = rooted && n <= dri_cs.sub_bytes; /* then one chunk */
	int direct;
	dr_err err = DR_OK;

	if (reads && in != out + (size_t)c->r * n &&
	    (uintptr_t)in < (uintptr_t)out + n * (size_t)c->p &&
	    (uintptr_t)out < (uintptr_t)in + n) {
		/* sendbuf inside recvbuf, elsewhere than our block */
		if (!(own = dri_scratch_get(n)))
			return DR_ENOMEM; /* dri_submit aborts the group */
		dri_copy(own, in, n);
		in = own;
	}
	if ((err = dri_cs_direct_start(c, root < 0 || (n >= GATHER_DIRECT_MIN &&
				n * (size_t)(c->p - 1) <= ROOTED_DIRECT_MAX) ? n : 0,
				0, in, &direct)) || direct) {
		if (!err && reads)
			err = dri_cs_direct_reads(c, -1, out, 0, n);
		if (!err && reads && in != out + (size_t)c->r * n)
			dri_copy(out + (size_t)c->r * n, in, n);
		dri_scratch_put(own);
		return err ? err : dri_cs_phase(c);
	}
	for (size_t a = 0; a < n && !err; a += chunk) {
		size_t k = n - a < chunk ? n - a : chunk;
		int h;

		if ((err = sub ? dri_cs_next_sub(c, writes)
			       : dri_cs_next_half(c, writes, &h)))
			break;
		if (writes)
			dri_copy(dri_cs_cur_slot(c, c->r), in + a, k);
		if (!rooted) {
			if ((err = dri_cs_phase(c)) || !reads)
				continue;
		} else if (writes) {
			dri_cs_post(c);
			continue;
		} else if ((err = dri_cs_take(c, -1))) {
			break;
		}
		for (int i = 0; i < c->p; i++)
			if (i != c->r)
				dri_copy(out + (size_t)i * n + a,
					 dri_cs_cur_slot(c, i), k);
		if (rooted)
			dri_cs_done(c);
	}
	if (!err && reads && in != out + (size_t)c->r * n)
		dri_copy(out + (size_t)c->r * n, in, n);
	dri_scratch_put(own);
	return err;
}

/* scatter (all == 0: the root's sendbuf) and all_to_all (every rank's):
 * piece j of a sender's sendbuf goes to rank j, in chunks of a half cut
 * in p. */
dr_err dri_cs_spread(struct call *c, int all)
{
	const dri_op *op = c->op;
	size_t n = op->count * dr_dtype_size(op->dtype);
	size_t chunk = dri_cs.chunk / (size_t)c->p;
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	int root = all ? -1 : op->root;
	size_t span = all ? n * (size_t)c->p : n;
	/* scatter, flat: the root writes and goes on, the others read */
	int rooted = !all && !c->tree, writes = all || c->r == root;
	int sub = rooted && n * (size_t)c->p <= dri_cs.sub_bytes; /* one chunk */
	int direct;
	dr_err err = DR_OK;

	if ((all || c->r == root) &&
	    (uintptr_t)in < (uintptr_t)out + span &&
	    (uintptr_t)out < (uintptr_t)in + n * (size_t)c->p) {
		/* sendbuf and recvbuf overlap: send from a copy */
		if (!(own = dri_scratch_get(n * (size_t)c->p)))
			return DR_ENOMEM; /* dri_submit aborts the group */
		dri_copy(own, in, n * (size_t)c->p);
		in = own;
	}
	if ((err = dri_cs_direct_start(c, n, 0, in, &direct)) || direct) {
		if (!err && (all || c->r != root))
			err = dri_cs_direct_reads(c, all ? -1 : root, out,
					   (size_t)c->r * n, n);
		if (!err && (all || c->r == root))
			memmove(out + (all ? (size_t)c->r * n : 0),
				in + (size_t)c->r * n, n);
		dri_scratch_put(own);
		return err ? err : dri_cs_phase(c);
	}
	for (size_t a = 0; a < n && !err; a += chunk) {
		size_t k = n - a < chunk ? n - a : chunk;
		int h;

		if ((err = sub ? dri_cs_next_sub(c, writes)
			       : dri_cs_next_half(c, writes, &h)))
			break;
		if (writes)
			for (int j = 0; j < c->p; j++)
				if (j != c->r)
					dri_copy(dri_cs_cur_slot(c, c->r) +
						 (size_t)j * k,
						 in + (size_t)j * n + a, k);
		if (!rooted) {
			if ((err = dri_cs_phase(c)))
				break;
		} else if (writes) {
			dri_cs_post(c);
			continue;
		} else if ((err = dri_cs_take(c, root))) {
			break;
		}
		for (int i = 0; i < c->p; i++)
			if (i != c->r && (all || i == root))
				dri_copy(out + (all ? (size_t)i * n : 0) + a,
					 dri_cs_cur_slot(c, i) + (size_t)c->r * k, k);
		if (rooted)
			dri_cs_done(c);
	}
	if (!err && (all || c->r == root))
		memmove(out + (all ? (size_t)c->r * n : 0),
			in + (size_t)c->r * n, n);
	dri_scratch_put(own);
	return err;
}

/* Rank i's count of what it sends to (send: 1) or receives from rank j
 * in the current all_to_all_v, as it published it (seg.h). */
static uint64_t a2av_count(int i, int send, int j)
{
	return __atomic_load_n(&dri_cs_blk(i)->a2av_counts[dri_cs.a2av & 1]
			       [(send ? 0 : DRI_SEG_A2AV_MAX) + j],
			       __ATOMIC_RELAXED);
}

/* After an all_to_all_v's first phase: every rank's send counts against
 * their receivers' receive counts, in the same order on every rank, so
 * that every rank names the same first pair (sender, receiver), as a
 * receiver of messages would: DR_EMISMATCH, the group aborted. */
static dr_err a2av_check(const struct call *c)
{
	for (int j = 0; j < c->p; j++)
		for (int i = 0; i < c->p; i++) {
			uint64_t sent = a2av_count(i, 1, j);
			uint64_t want = a2av_count(j, 0, i);
			dri_msg_id a = c->op->id, b = c->op->id;
			char why[768];
			dr_err err;

			if (sent == want)
				continue;
			if ((err = dri_transport_stale_check(&c->op->id)))
				return err;
			a.count = sent;
			b.count = want;
			dri_msg_mismatch(&b, 0, &a, 0, i, j, why, sizeof(why));
			dri_transport_abort(DR_EMISMATCH, why);
			return dri_fail(DR_EMISMATCH, "%s", why);
		}
	return DR_OK;
}

/* all_to_all_v (p <= DRI_SEG_A2AV_MAX): every rank publishes its send
 * and receive counts (and, for the single copy, its sendbuf); one phase
 * (the call's check, and a2av_check's).  Then every rank knows every
 * piece and takes the same way: the single copy if one piece has
 * DIRECT_MIN bytes or more and the probe allows it (each reads its
 * pieces with process_vm_readv, one phase); else through the slots, in
 * rounds as many as the largest piece needs: in each, a sender copies
 * the next part of its piece for rank j into the j-th p-th of its slot,
 * one phase, each receiver copies its parts out. */
dr_err dri_cs_a2av(struct call *c)
{
	const dri_op *op = c->op;
	int p = c->p, r = c->r, direct, pre, h0 = 0;
	size_t es = dr_dtype_size(op->dtype), lim = SIZE_MAX / es;
	/* a sender's part for each rank in a round (dri_cs.chunk >= 4096) */
	size_t q = dri_cs.chunk / (size_t)p / 64 * 64, rounds = 0;
	const size_t *sc = op->counts, *rc = op->counts + p;
	size_t stot = 0, rtot = 0, big = 0;
	/* per rank: where its piece starts in our sendbuf and recvbuf, and
	 * where our piece starts in its sendbuf */
	size_t soff[DRI_SEG_A2AV_MAX], roff[DRI_SEG_A2AV_MAX];
	size_t src[DRI_SEG_A2AV_MAX];
	const char *in = op->sendbuf;
	char *out = op->buf, *own = NULL;
	uint64_t *pub = dri_cs_blk(r)->a2av_counts[++dri_cs.a2av & 1];
	dr_err err = DR_OK;

	for (int i = 0; i < p; i++) {
		soff[i] = stot;
		roff[i] = rtot;
		stot += sc[i];
		rtot += rc[i];
		__atomic_store_n(&pub[i], (uint64_t)sc[i], __ATOMIC_RELAXED);
		__atomic_store_n(&pub[DRI_SEG_A2AV_MAX + i], (uint64_t)rc[i],
				 __ATOMIC_RELAXED);
	}
	if ((uintptr_t)in < (uintptr_t)out + rtot * es &&
	    (uintptr_t)out < (uintptr_t)in + stot * es) {
		/* sendbuf and recvbuf overlap: send from a copy */
		if (!(own = dri_scratch_get(stot * es)))
			return DR_ENOMEM; /* dri_submit aborts the group */
		dri_copy(own, in, stot * es);
		in = own;
	}
	/* Our pieces into a half now, if they could all go in one round:
	 * if every rank's can, the first phase is the only one (every rank
	 * takes the half alike; not while the probe, which writes a slot,
	 * is still to come). */
	if ((pre = dri_cs.direct != 0)) {
		size_t most = 0;

		for (int j = 0; j < p; j++)
			most = j != r && sc[j] * es > most ? sc[j] * es : most;
		if ((err = dri_cs_next_half(c, 1, &h0)))
			goto out;
		if (most <= q && !dri_cs_direct_for(most))
			for (int j = 0; j < p; j++)
				if (j != r)
					dri_copy(dri_cs_slot(r, h0) + (size_t)j * q,
						 in + soff[j] * es, sc[j] * es);
	}
	/* The first phase: direct_start's (and its probe), or our own. */
	if ((err = dri_cs_direct_start(c, dri_cs.direct < 0 ? 0 : dri_cs.direct > 1 ?
				DIRECT_SURE : DIRECT_MIN, 0, in, &direct)) ||
	    (c->first && (err = dri_cs_phase(c))) ||
	    (err = a2av_check(c)))
		goto out;
	for (int i = 0; i < p; i++) {
		uint64_t off = 0;

		/* i's numbers: bounded before they are used (i alone
		 * checked their sum against its memory) */
		for (int j = 0; j < p; j++) {
			uint64_t v = a2av_count(i, 1, j);

			if (j < r)
				off = v > lim - off ? lim + 1 : off + v;
			if (j != i) /* (its own piece stays at home) */
				big = v > big ? v : big;
		}
		if (off > lim || rc[i] > lim - off) {
			err = dri_fail(DR_EPEER, "rank %d's all_to_all_v send "
				       "counts add up to more than memory", i);
			dri_transport_abort(err, dr_last_error());
			goto out;
		}
		src[i] = (size_t)off;
	}
	big = big > lim ? lim : big;
	/* our own piece (from a copy if the buffers overlap) */
	memmove(out + roff[r] * es, in + soff[r] * es, sc[r] * es);
	if (direct && dri_cs_direct_for(big * es)) {
		for (int k = 1; !err && k < p; k++) {
			int i = (r + k) % p;

			err = dri_cs_cma_read(c, i, out + roff[i] * es, src[i] * es,
				       rc[i] * es);
		}
		/* nobody returns while its sendbuf is read */
		if (!err)
			err = dri_cs_phase(c);
		goto out;
	}
	if (pre && big * es <= q) {
		/* one round, written before the first phase */
		for (int i = 0; i < p; i++)
			if (i != r)
				dri_copy(out + roff[i] * es, dri_cs_slot(i, h0) +
					 (size_t)r * q, rc[i] * es);
		goto out;
	}
	if (q)
		rounds = (big * es + q - 1) / q;
	for (size_t t = 0; t < rounds && !err; t++) {
		size_t a = t * q;
		int h;

		if ((err = dri_cs_next_half(c, 1, &h)))
			break;
		for (int j = 0; j < p; j++)
			if (j != r && sc[j] * es > a)
				dri_copy(dri_cs_slot(r, h) + (size_t)j * q,
					 in + soff[j] * es + a,
					 sc[j] * es - a < q ? sc[j] * es - a
							    : q);
		if ((err = dri_cs_phase(c)))
			break;
		for (int i = 0; i < p; i++)
			if (i != r && rc[i] * es > a)
				dri_copy(out + roff[i] * es + a,
					 dri_cs_slot(i, h) + (size_t)r * q,
					 rc[i] * es - a < q ? rc[i] * es - a
							    : q);
	}
out:
	dri_scratch_put(own);
	return err;
}
