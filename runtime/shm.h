/*
 * shm.h - the shared-memory transport, as transport.c drives it.
 *
 * Peers on this host (same segment, same host identity) exchange the very
 * byte stream they would send over TCP, through a ring per ordered pair in
 * the segment's transport area (runtime/seg.h).  transport.c keeps the
 * framing, matching, parking and abort logic for both; this file only
 * moves bytes, says who has something to read or room to write, waits on
 * a futex and watches the peers' processes.  Everything here is called
 * with transport.c's lock held, except dri_shm_wait.
 */
#ifndef DRI_SHM_H
#define DRI_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "seg.h"
#include "wire.h"

/* Before the rendezvous: the transport asked for (the init option, else
 * DISTRUN_TRANSPORT: "auto", "shm" or "tcp"; NULL or "" = auto).  DR_EINVAL
 * (option) or DR_EENV (variable) naming the bad value. */
dr_err dri_shm_configure(const char *opt);
/* Whether this rank may use shared memory (not DISTRUN_TRANSPORT=tcp). */
int dri_shm_wanted(void);
/* DISTRUN_SHM_DIRECT, single copy for large calls through the segment
 * (coll_shm.c): one of these, or -1 for another value
 * (dri_shm_configure fails on it). */
enum { DRI_SHM_DIRECT_OFF, DRI_SHM_DIRECT_AUTO, DRI_SHM_DIRECT_ON };
int dri_shm_direct_mode(void);
/* After dri_seg_attach: what this rank publishes with its address,
 * "|SEGID/HOST/LOCAL", or "" when it will not use shared memory (then
 * nobody uses it with this rank).  DR_EINVAL/DR_EENV if shm was asked
 * for and cannot be had (the reason named), or DISTRUN_HOST_ID is bad. */
dr_err dri_shm_addr_suffix(char *buf, size_t size);
/* At transport start: strips every peer's suffix from addrs and decides
 * which peers are reached through shared memory (those whose suffix
 * names our segment and host). */
dr_err dri_shm_start(int rank, int size, char **addrs);
void dri_shm_stop(void);

/* Whether world rank peer goes through shared memory. */
int dri_shm_is_peer(int peer);
/* The host of world rank peer, named by the lowest world rank on it: the
 * same answer on every rank (hosts as the shared-memory transport cuts
 * them; a rank without it is a host alone).  rank itself before start. */
int dri_shm_host_of(int rank);
/* How many peers go through shared memory, and through TCP. */
int dri_shm_npeers(void);
int dri_shm_ntcp(void);
/* "shm", "tcp" or "shm+tcp" once started; "none" before. */
const char *dri_shm_transport_name(void);

/* Copies up to the ring's free room from iov into the ring to peer;
 * returns the bytes taken (0: full, the caller retries when peer shows up
 * in dri_shm_ready).  If all is true, takes all or nothing (frames sent
 * in an abort, which must not be torn). */
size_t dri_shm_sendv(int peer, const struct iovec *iov, int n, int all);
/* Copies up to len bytes that peer sent into buf; returns them (0:
 * nothing there yet). */
size_t dri_shm_recv(int peer, void *buf, size_t len);
/* Writes into out (up to max) the world ranks whose rings changed since
 * the last call (bytes to read, or room to write); returns how many. */
int dri_shm_ready(int *out, int max);

/* The launcher's abort word: 0 while the job is sound, else the dr_err it
 * names with its message in msg. */
dr_err dri_shm_aborted(char *msg, size_t size);
/* Watches peer's process from now on (a request to or from it). */
void dri_shm_watch(int peer);
/* A shm peer whose process has exited (checked at most every few tens of
 * milliseconds), or -1. */
int dri_shm_dead_peer(int64_t now_ms);
/* Sleeps until a peer writes to us or makes room, dri_shm_wake, the
 * launcher's abort, or timeout_ms (capped, so the death watch runs).
 * Called without transport.c's lock.  Returns 1 if woken, 0 on timeout. */
int dri_shm_wait(int64_t timeout_ms);
/* With peers over TCP too, a rank sleeps in poll(): this descriptor
 * (-1: none) becomes readable when a shm peer writes to us while
 * dri_shm_poll_arm(1) is in force.  Arm before poll (it returns 1 when a
 * ring already changed or the job aborted: do not sleep), disarm after. */
#define DRI_SHM_POLL_MS 20 /* the longest such sleep: the death watch */
int dri_shm_poll_fd(void);
int dri_shm_poll_arm(int on);
/* Wakes this rank's dri_shm_wait (another thread has work for it). */
void dri_shm_wake(void);
/* Whether ranks on this host outnumber the CPUs this process may use. */
int dri_shm_oversubscribed(void);
/* Ranks on this host per CPU this process may use (rounded up). */
int dri_shm_ranks_per_cpu(void);

/* The collectives through the segment (coll_shm.c), for jobs whose
 * ranks all share it.  all_local: every peer is in shared memory and the
 * segment has slots.  blk: the block of world rank peer (this rank's
 * own too); slot: half (0 or 1) of peer's collective slot, slot_bytes
 * bytes each.  ring_peer wakes peer if it sleeps in dri_shm_wait (no
 * ready bit: a flag changed, not a ring).  want: dri_shm_wait sleeps
 * only while *word < val (NULL: no flag).  pending: bytes in a ring for
 * us, or the launcher's abort: the transport must look.  peer_call: 1
 * with the peer's published call in *id if it is in the world call of
 * sequence seq through flags (a receive of that seq from it would never
 * come: the calls differ). */
#define DRI_SHM_FLAT_MAX 16 /* beyond, a tree of flags */
#define DRI_SHM_TREE_K 8     /* children per rank in the tree */
int dri_shm_all_local(void);
/* Counts transport starts: the flags start from 0 again at each. */
unsigned dri_shm_generation(void);
dri_seg_rank *dri_shm_blk(int peer);
void *dri_shm_slot(int peer, int half);
size_t dri_shm_slot_bytes(void);
void dri_shm_ring_peer(int peer);
void dri_shm_want(const uint64_t *word, uint64_t val);
int dri_shm_pending(void);
int dri_shm_peer_call(int peer, uint64_t seq, dri_msg_id *id);
/* The same from peer's record k (0 .. DRI_SEG_CALLS - 1), only if it is of phase phase
 * (0: any). */
int dri_shm_read_call(int peer, int k, uint64_t seq, uint64_t phase,
		      dri_msg_id *id);
/* The same, from record k alone (not the copy on up's line): where the
 * data of a small rooted call is (seg.h: dri_seg_rec). */
int dri_shm_read_rec(int peer, int k, uint64_t seq, uint64_t phase,
		     dri_msg_id *id);
/* The call in record c into *id as written (coll with its marks) if it
 * is seq's (and of first phase phase, unless 0): a seqlock read, 0 if it
 * is another or changed. */
static inline int dri_shm_read_raw(const dri_seg_call *c, uint64_t seq,
				   uint64_t phase, dri_msg_id *id)
{
	if (__atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) != seq + 1 ||
	    (phase && __atomic_load_n(&c->phase, __ATOMIC_ACQUIRE) != phase))
		return 0;
	*id = (dri_msg_id){
		.coll = (uint32_t)__atomic_load_n(&c->coll, __ATOMIC_RELAXED),
		.seq = seq,
		.count = __atomic_load_n(&c->count, __ATOMIC_RELAXED),
		.dtype = __atomic_load_n(&c->dtype, __ATOMIC_RELAXED),
		.op = __atomic_load_n(&c->op, __ATOMIC_RELAXED),
		.root = __atomic_load_n(&c->root, __ATOMIC_RELAXED),
	};
	/* Still that call: the peer did not move on while we read. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&c->seq, __ATOMIC_RELAXED) == seq + 1;
}

/* The same, the call alone (no marks).  Inline: the quick path
 * (coll_shm_quick.c) reads it at every call. */
static inline int dri_shm_read_at(const dri_seg_call *c, uint64_t seq,
				  uint64_t phase, dri_msg_id *id)
{
	if (!dri_shm_read_raw(c, seq, phase, id))
		return 0;
	id->coll &= ~(uint32_t)DRI_SEG_MARKS;
	return 1;
}

/* Whether c is a rank's copy (on up's line) that says every call of the
 * rank through the flags before it was found the same on every rank
 * (DRI_SEG_ALL_CHECKED); then its seq and first phase (a seqlock read,
 * as dri_shm_read_raw's). */
static inline int dri_shm_all_checked(const dri_seg_call *c, uint64_t *seq,
				      uint64_t *phase)
{
	uint64_t s = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
	int32_t coll;

	if (!s)
		return 0;
	coll = __atomic_load_n(&c->coll, __ATOMIC_RELAXED);
	*phase = __atomic_load_n(&c->phase, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	*seq = s - 1;
	return (coll & DRI_SEG_ALL_CHECKED) &&
	       __atomic_load_n(&c->seq, __ATOMIC_RELAXED) == s;
}

/* Whether c is a rank's copy (on up's line) of its call seq + 1 that
 * says it checked its call seq against every other rank's
 * (DRI_SEG_PREV_CHECKED). */
static inline int dri_shm_checked_at(const dri_seg_call *c, uint64_t seq)
{
	dri_msg_id next;

	return dri_shm_read_raw(c, seq + 1, 0, &next) &&
	       (next.coll & DRI_SEG_PREV_CHECKED);
}

/* dri_shm_read_call from rank block b (its record k: 0 ..
 * DRI_SEG_CALLS - 1): the copy on up's line first, most often the one
 * asked for, then the record of the call's number. */
static inline int dri_shm_read_blk(const dri_seg_rank *b, int k, uint64_t seq,
				   uint64_t phase, dri_msg_id *id)
{
	return dri_shm_read_at(&b->last, seq, phase, id) ||
	       dri_shm_read_at(&b->call[k].c, seq, phase, id);
}

/* The pause of a spin on a flag: the sibling thread of the core runs,
 * and the spin's exit is not a mispredicted branch. */
static inline void dri_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif /* DRI_SHM_H */
