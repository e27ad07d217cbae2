/*
 * coll_shm_direct.c - single copy for the collectives through the
 * segment (coll_shm_flags.h): a rank reads the others' buffers straight
 * into its own with process_vm_readv instead of through the slots.
 *
 * A flat broadcast, all_gather, gather, scatter,
 * all_to_all or all_to_all_v whose readers read at least DIRECT_MIN
 * bytes of a rank (a broadcast or gather: at most ROOTED_DIRECT_MAX in
 * all) skips the slots: every rank publishes the address of what is
 * read of it (seg.h: xaddr), one phase (the call's check), each reader
 * copies straight from the others' buffers into its own with
 * process_vm_readv, one phase (nobody returns while its buffer is
 * read).  One copy instead of two, and no chunks.  The first such call
 * of a process group probes first (probe_direct): it goes this way
 * only if every rank could read every other's memory right (ptrace
 * rules, pid namespaces and seccomp can forbid it) and, unless
 * DISTRUN_SHM_DIRECT=on, one copy was measured faster than two.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "clock.h"
#include "coll_shm_flags.h"
#include "copy.h"
#include "shm.h"
#include "transport.h"

/* process_vm_readv reads DIRECT_PIECE bytes at a time (the abort is
 * looked at between pieces); the probe reads PROBE_BYTES of every other
 * rank (coll_shm_flags.h: DIRECT_MIN). */
#define DIRECT_PIECE ((size_t)4 << 20)
#define PROBE_BYTES ((size_t)256 << 10)
/* The address rank i published (seg.h: xaddr or probe_addr). */
static uint64_t peer_addr(int i, int probe)
{
	dri_seg_rank *b = dri_cs_blk(i);

	return __atomic_load_n(probe ? &b->probe_addr : &b->xaddr,
			       __ATOMIC_RELAXED);
}

/* n bytes at src in rank peer's memory into dst; 0, or the errno. */
static int cma_copy(int peer, void *dst, uint64_t src, size_t n)
{
	pid_t pid = __atomic_load_n(&dri_cs_blk(peer)->pid, __ATOMIC_ACQUIRE);

	for (size_t o = 0; o < n;) {
		size_t k = n - o < DIRECT_PIECE ? n - o : DIRECT_PIECE;
		struct iovec l = { (char *)dst + o, k };
		struct iovec r = { (void *)(uintptr_t)(src + o), k };
		ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? errno : EIO;
		o += (size_t)got;
		if (o < n && dri_transport_check())
			return ECANCELED;
	}
	return 0;
}

/* cma_copy of rank peer's published buffer at offset off, as an error
 * of call c: the job's (an abort a peer sent before it left, which the
 * rings may hold still; a death) if it has one, else the failed read. */
dr_err dri_cs_cma_read(const struct call *c, int peer, void *dst, size_t off,
		       size_t n)
{
	int e = cma_copy(peer, dst, peer_addr(peer, 0) + off, n);
	dr_err err;

	if (!e)
		return DR_OK;
	if ((err = dri_transport_stale_check(&c->op->id)))
		return err;
	return dri_fail(DR_EPEER, "reading rank %d's buffer (process_vm_readv): "
			"%s", peer, strerror(e));
}

/* The single copy's reads: n bytes at offset off of every other rank's
 * published buffer into out + i * n (from < 0), or of rank from's alone
 * into out; each reader starts after itself, so that not every rank
 * reads rank 0 first. */
dr_err dri_cs_direct_reads(const struct call *c, int from, char *out,
			   size_t off, size_t n)
{
	dr_err err = DR_OK;

	for (int k = 1; !err && k < c->p; k++) {
		int i = (c->r + k) % c->p;

		if (from < 0)
			err = dri_cs_cma_read(c, i, out + (size_t)i * n, off, n);
		else if (i == from)
			err = dri_cs_cma_read(c, i, out, off, n);
	}
	return err;
}

/* Word j of what rank i's probe buffer holds at phase e: the readers
 * know it, so a read that reaches another process (another pid
 * namespace) or other memory is found out. */
static uint64_t probe_word(int i, uint64_t e, size_t j)
{
	uint64_t x = ((uint64_t)i << 48 ^ e << 24 ^ j) * 0x9e3779b97f4a7c15ull;

	return x ^ x >> 29;
}

/* Whether the n bytes at p are rank i's probe pattern of phase e. */
static int probe_good(const char *p, int i, uint64_t e, size_t n)
{
	for (size_t j = 0; j < n / 8; j++) {
		uint64_t w;

		memcpy(&w, p + 8 * j, 8);
		if (w != probe_word(i, e, j))
			return 0;
	}
	return 1;
}

/* Before the first call that could go the single-copy way (after its
 * first phase e, which published every rank's probe buffer, buf here):
 * each rank times the two copies of the slots' way (its pattern into
 * its slot; one phase; each other's out of theirs) against reading each
 * other's probe buffer with process_vm_readv, and checks what it read
 * (a pid of another namespace reads another process, or nothing).  It
 * publishes what it found; one phase; calls go the single-copy way if
 * every rank read every other right: from DIRECT_MIN if one copy was
 * the faster for at least half of them (a rank the scheduler took off
 * its CPU mid-way does not decide alone) or DISTRUN_SHM_DIRECT=on, else
 * from DIRECT_SURE.  Every rank takes the same decision (dri_cs.direct). */
static dr_err probe_direct(struct call *c, uint64_t *buf, size_t n, uint64_t e)
{
	dri_seg_rank *me = dri_cs_blk(c->r);
	char *tmp = dri_scratch_get(n);
	int64_t t0 = dri_now_ns(), in_ns, two = 0, one = 0;
	int works = tmp && buf, faster = 0;
	dr_err err;

	/* After phase e every rank is done with every slot (dri_cs.safe). */
	if (buf)
		dri_copy(dri_cs_slot(c->r, 0), buf, n);
	in_ns = dri_now_ns() - t0;
	if ((err = dri_cs_phase(c)))
		goto out;
	for (int k = 1; works && k < c->p; k++) {
		int i = (c->r + k) % c->p;

		t0 = dri_now_ns();
		dri_copy(tmp, dri_cs_slot(i, 0), n);
		two += in_ns + dri_now_ns() - t0;
		works = probe_good(tmp, i, e, n);
		t0 = dri_now_ns();
		works = works && !cma_copy(i, tmp, peer_addr(i, 1), n);
		one += dri_now_ns() - t0;
		works = works && probe_good(tmp, i, e, n);
	}
	faster = one < two;
	__atomic_store_n(&me->probe_verdict, (uint64_t)(works | faster << 1 |
			 dri_shm_oversubscribed() << 2), __ATOMIC_RELAXED);
	if ((err = dri_cs_phase(c)))
		goto out;
	works = 1;
	faster = dri_cs.crowded = 0;
	for (int i = 0; i < c->p; i++) {
		uint64_t v = __atomic_load_n(&dri_cs_blk(i)->probe_verdict,
					     __ATOMIC_RELAXED);

		works &= (int)(v & 1);
		faster += (int)(v >> 1 & 1);
		dri_cs.crowded |= (int)(v >> 2 & 1);
	}
	dri_cs.direct = !works ? -1
		   : dri_cs.direct_mode == DRI_SHM_DIRECT_ON || 2 * faster >= c->p
		   ? 1 : 2;
out:
	dri_scratch_put(tmp);
	free(buf);
	return err;
}

/* Whether pieces of `piece` bytes go the single-copy way, as the probe
 * found (dri_cs.direct: 1 from DIRECT_MIN, 2 from DIRECT_SURE). */
int dri_cs_direct_for(size_t piece)
{
	return dri_cs.direct == 1 ? piece >= DIRECT_MIN
			     : dri_cs.direct == 2 && piece >= DIRECT_SURE;
}

/* For a call whose readers read pieces of `piece` bytes of the others'
 * memory (0: none that could go this way): says whether it goes the
 * single-copy way (*direct); with more ranks than CPUs on some rank
 * (dri_cs.crowded), only pieces of at least crowded_min bytes do.  If it
 * may, this rank publishes addr (the buffer its readers read) and meets
 * the others once (the call's first phase: its check), after the probe
 * if none has been made.  The call then reads (cma_read) and meets them
 * once more before it returns, so that nobody's buffer is read after
 * its call returned.  Otherwise it goes through the slots.  Every
 * condition here is the same on every rank: the call's arguments, and
 * what the probe agreed. */
dr_err dri_cs_direct_start(struct call *c, size_t piece, size_t crowded_min,
			   const void *addr, int *direct)
{
	dri_seg_rank *me = dri_cs_blk(c->r);
	size_t n = dri_cs.chunk < PROBE_BYTES ? dri_cs.chunk : PROBE_BYTES;
	uint64_t *buf = NULL;
	dr_err err;

	*direct = 0;
	if (c->tree || piece < DIRECT_MIN || dri_cs.direct < 0 ||
	    (dri_cs.direct > 1 && piece < DIRECT_SURE) ||
	    (dri_cs.direct > 0 && dri_cs.crowded && piece < crowded_min))
		return DR_OK;
	__atomic_store_n(&me->xaddr, (uint64_t)(uintptr_t)addr, __ATOMIC_RELAXED);
	if (!dri_cs.direct) {
		/* The probe buffer: a pattern the readers can check. */
		if ((buf = malloc(n)))
			for (size_t j = 0; j < n / 8; j++)
				buf[j] = probe_word(c->r, dri_cs.phase + 1, j);
		__atomic_store_n(&me->probe_addr, (uint64_t)(uintptr_t)buf,
				 __ATOMIC_RELAXED);
	}
	if ((err = dri_cs_phase(c))) {
		free(buf);
		return err;
	}
	if (!dri_cs.direct && (err = probe_direct(c, buf, n, c->e)))
		return err;
	*direct = dri_cs_direct_for(piece) &&
		  (!dri_cs.crowded || piece >= crowded_min);
	return DR_OK;
}
