/*
 * seg.h - the layout of the per-job segment.
 *
 * One shared mapping per job on a host.  Under distrun, the launcher
 * creates it (memfd_create, sealed size) before it spawns, and every rank
 * inherits the fd named by DISTRUN_SEG_FD and maps it.  Ranks started by
 * another launcher build the same among their local ranks through the
 * rendezvous.  Nothing has a name, so nothing is left after any kill.
 *
 * Both the launcher (cmd/, through contract.h) and libdistrun (runtime/)
 * include this file.
 * It is a layout, not an API: offsets, never pointers, so that every
 * process can map it at any address.
 *
 *   [ dri_seg_hdr | control block x nranks | transport area ]
 *
 * The control blocks (DRI_CTL_SIZE bytes each, at ctl_off + rank *
 * ctl_size) hold what a rank publishes about itself for the launcher's
 * diagnosis (the call it is in, its flight record): runtime/ctl.h gives
 * their content.  The transport area belongs to the shared-memory
 * transport (runtime/shm*.c).
 *
 * Concurrency: the header is written once by its creator before anyone
 * else maps it, except the abort fields.  abort is a futex word: 0 while
 * the job is sound; whoever fails the job first (a rank, or the launcher
 * when it reaps a rank that died) fills abort_rank, abort_err and
 * abort_msg, then stores 1 with release order and wakes every futex
 * waiter of the transport area.  Readers load abort with acquire order
 * before they read the rest.
 */
#ifndef DRI_SEG_H
#define DRI_SEG_H

#include <stdint.h>

#include "distrun.h"

#define DRI_SEG_MAGIC 0x47455344u /* "DSEG" */
#define DRI_SEG_VERSION 9
/* Bytes of each rank's control block (a multiple of the page size, so a
 * rank's block never shares a page with another's). */
#define DRI_CTL_SIZE 16384u
#define DRI_SEG_ABORT_MSG 256

typedef struct {
	uint32_t magic;            /* DRI_SEG_MAGIC */
	uint32_t version;          /* DRI_SEG_VERSION */
	uint32_t nranks;           /* control blocks: ranks of this host */
	uint32_t ctl_size;         /* DRI_CTL_SIZE when created */
	uint64_t size;             /* bytes of the whole mapping */
	uint64_t ctl_off;          /* offset of rank 0's control block */
	uint64_t xport_off;        /* offset of the transport area */
	uint64_t xport_size;       /* its bytes (0: no shared-memory transport) */
	int32_t launcher_pid;      /* distrun's pid, 0 when ranks made it */
	int32_t first_rank;        /* global rank of control block 0 */
	uint8_t job_id[16];        /* the job it belongs to */

	uint32_t abort;            /* futex word: 0, then 1 once failed */
	int32_t abort_rank;        /* the rank at fault, -1 if none */
	int32_t abort_err;         /* a dr_err */
	uint32_t pad_;
	char abort_msg[DRI_SEG_ABORT_MSG];

	/* The transport area (shm.c), laid out by dri_seg_layout: a block
	 * per rank (dri_seg_rank, blk_size bytes each) at xport_off, then a
	 * ring per ordered pair of ranks, ring (s -> r) at rings_off +
	 * (s * nranks + r) * ring_stride.  ring_size is 0 when the segment
	 * has no room for the shared-memory transport. */
	uint64_t rings_off;
	uint64_t ring_stride;
	uint32_t ring_size;        /* data bytes of each ring, a power of 2 */
	uint32_t blk_size;
	/* Random, per segment: two segments of one job on one machine (two
	 * nodes of a job started there) are told apart by it. */
	uint64_t nonce;
	/* The collectives' slots (coll_shm.c), after the rings: two halves
	 * of coll_half bytes per rank, half h of local rank l at coll_off +
	 * (2 * l + h) * coll_half.  coll_half is 0 without rings. */
	uint64_t coll_off;
	uint64_t coll_half;
} dri_seg_hdr;

/* A call of the world through the segment's flags, as its rank
 * published it (coll_shm.c); each rank keeps its last DRI_SEG_CALLS. */
#define DRI_SEG_CALLS 256
/* Most ranks of an all_to_all_v through the segment (coll_shm.c). */
#define DRI_SEG_A2AV_MAX 16
typedef struct {
	uint64_t seq;              /* the call's seq + 1; 0: none */
	uint64_t phase;            /* its first phase */
	uint64_t count;
	int32_t coll, dtype, op, root;
} dri_seg_call;
/* In coll of the copy on up's line (never in a record): the rank's call
 * before this one went through the flags, was seq - 1, and the rank
 * found every other rank's record of it the same as its own (the lean
 * barrier and all_reduce, coll_shm_quick.c).  A peer still at that call
 * that sees the copy of this one needs no look at the record: its call
 * was checked against this rank's from both sides. */
#define DRI_SEG_PREV_CHECKED (1 << 30)
/* In coll of the copy on up's line too: every call of the rank through
 * the flags before this one was found the same on every rank (it has
 * none left to check: coll_shm_flags.c), flat.  A peer whose up it
 * reads anyway closes its own rooted calls of a lower seq and of phases
 * before the copy's on that word, with no look at their records
 * (coll_shm_flags.c: low_up). */
#define DRI_SEG_ALL_CHECKED (1 << 29)
#define DRI_SEG_MARKS (DRI_SEG_PREV_CHECKED | DRI_SEG_ALL_CHECKED)

/* Bytes of a rooted call's data that ride in its record (below). */
#define DRI_SEG_INLINE 24
/* A rank's record of one of its calls (call[] below), a line each: for a
 * broadcast of at most DRI_SEG_INLINE bytes, its root's data; for such a
 * reduce, a non-root's (coll_shm.c: the readers wait on the record, and
 * find the data in the same transfer). */
typedef struct {
	dri_seg_call c;
	unsigned char data[DRI_SEG_INLINE];
} __attribute__((aligned(64))) dri_seg_rec;
_Static_assert(sizeof(dri_seg_rec) == 64, "a record is one cache line");

/* A rank's arrival at a phase of one parity, on a line of its own
 * (lean[] below): up, the copy of its latest record on up's line as it
 * was then; tiny[(e >> 1) & 1], the data of an all_reduce of at most 8
 * bytes at phase e (coll_shm_reduce.c, coll_shm_quick.c), written
 * before the arrival at e, over phase e - 4's, once every rank has
 * arrived at e - 3 (done reading it): dri_cs_tiny. */
typedef struct {
	uint64_t up;
	dri_seg_call last;
	uint64_t tiny[2];
} __attribute__((aligned(64))) dri_seg_lean;
_Static_assert(sizeof(dri_seg_lean) == 64, "a lean line is one cache line");

/* Each rank's block at the start of the transport area.  A sender that
 * put bytes into ring (s -> r), or a receiver that made room in ring
 * (r -> s), sets the peer's bit in the other rank's ready bitmap, then,
 * if that rank's waiting flag is up, bumps its doorbell and wakes it
 * (FUTEX_WAKE, shared).  The launcher bumps and wakes every doorbell
 * when it raises abort. */
typedef struct {
	uint32_t doorbell;         /* futex word */
	uint32_t waiting;          /* 1 while the rank may sleep on it */
	int32_t pid;               /* the rank's pid once it has mapped */
	/* 1 from the rank's transport start to its stop (destroy): while
	 * it is, peers of its process group may still read its flags and
	 * rings, so a peer that joins a new process group (init again)
	 * resets its own only once no other rank is (shm.c). */
	uint32_t active;
	/* 1 once the rank has left init's closing barrier (0 from its
	 * transport start): the ranks wait for each other's before they
	 * return from init (coll_shm_state.c: dri_shm_coll_leave_init). */
	uint32_t left;
	uint32_t pad_[11];
	/* The collectives through the segment (coll_shm.c), each word
	 * written by this rank alone, on lines of their own.  up: the
	 * phases it has arrived at (its data for them is in its slot; in
	 * a rooted call, a rank that only reads arrives once it has read);
	 * down: with a tree of flags, the phases it has released to its
	 * children.  call[n % DRI_SEG_CALLS]: the rank's n-th call through
	 * the flags (counted from 0 at each transport start), written
	 * before up reaches that call's first phase and read by the peers
	 * that wait for it and by those that check that the calls were the
	 * same (DR_EMISMATCH).  A rank may return from a rooted call before
	 * the others have checked it (coll_shm.c checks it DRI_SEG_CALLS / 2
	 * calls later), so record n is written again only at call n +
	 * DRI_SEG_CALLS, which a rank reaches only once every rank is past
	 * its check of call n; so is the small rooted call's data in it
	 * (dri_seg_rec). */
	/* On up's line, so that a peer that sees up move has it in the
	 * same transfer: last, a copy of the rank's latest record (the one
	 * the peers look for, unless it went on). */
	uint64_t up;
	dri_seg_call last;
	uint64_t pad5_[2];
	uint64_t down;
	/* Single copy (coll_shm.c), on down's line: the address in this
	 * rank's memory of the buffer its current call's readers read with
	 * process_vm_readv; of what the probe reads; what its probe found
	 * (bit 0: it read every other rank right, bit 1: one copy was the
	 * faster, bit 2: its host's ranks outnumber its CPUs).  cpu: 1 +
	 * the CPU the rank saw itself on when its latest call through the
	 * flags began (sched_getcpu), 0 before; written only when it
	 * changes (coll_shm.c: rebalance, and the spin that yields only
	 * to a rank on its CPU). */
	uint64_t xaddr, probe_addr, probe_verdict;
	int32_t cpu;
	uint32_t pad4_;
	uint64_t pad3_[3];
	/* Every flat arrival of the rank at phase e again on lean[e & 1],
	 * with the copy up's line has then (written by this rank alone,
	 * before up: a reader that saw up finds it there too).
	 * The small blocking calls' waiters (coll_shm_quick.c) look there:
	 * a rank writes the line of phase e + 1 once every other rank has
	 * arrived at e, so all are done reading it (they read it at e - 1),
	 * and takes it for writing as soon as it sees them there, not when
	 * it stores its next arrival; one line would still be read by a
	 * peer then (docs/small-calls-log-2.md, "Two lines of arrival"). */
	dri_seg_lean lean[2];
	/* An all_to_all_v through the segment (coll_shm.c, up to
	 * DRI_SEG_A2AV_MAX ranks): its send counts, then its receive
	 * counts, one per rank, in [n & 1] for the rank's n-th such call.
	 * Written before the call's first phase; every rank checks them
	 * all there, and a reader finds its piece from them.  [n & 1] is
	 * written again at call n + 2, whose writer is then past call
	 * n + 1's first phase, so every reader is done with call n. */
	uint64_t a2av_counts[2][2 * DRI_SEG_A2AV_MAX];
	dri_seg_rec call[DRI_SEG_CALLS];
	uint64_t ready[];          /* nranks bits */
} dri_seg_rank;

/* Ring (s -> r): a byte stream, one writer (s), one reader (r). */
typedef struct {
	uint64_t head;             /* bytes consumed, written by r */
	uint64_t pad0_[7];
	uint64_t tail;             /* bytes produced, written by s */
	uint32_t send_blocked;     /* s waits for room: r sets s's bit */
	uint32_t pad1_[13];
	unsigned char data[];
} dri_seg_ring;

#define DRI_SEG_ALIGN(x, a) (((x) + (a) - 1) / (a) * (a))
/* Most ranks with a transport area (the rings are O(n^2) in all). */
#define DRI_SEG_SHM_MAX 512

/* Ring bytes per ordered pair for n ranks: large rings move large
 * messages in fewer rounds; small ones keep the segment near O(n) per
 * rank (a rank maps n rings in and n out, and touches only the pages
 * of the peers it talks to). */
static inline uint32_t dri_seg_ring_bytes(uint32_t n)
{
	if (n > DRI_SEG_SHM_MAX)
		return 0;
	if (n <= 4)
		return 128u << 10;
	if (n <= 16)
		return 64u << 10;
	if (n <= 64)
		return 16u << 10;
	return 4u << 10;
}

/* Bytes of each half of a rank's collective slot for n ranks: large
 * halves move a large message in fewer phases, small ones keep the
 * segment O(n) per rank. */
static inline uint64_t dri_seg_coll_half(uint32_t n)
{
	if (n > DRI_SEG_SHM_MAX)
		return 0;
	if (n <= 8)
		return 2u << 20;
	if (n <= 16)
		return 1u << 20;
	if (n <= 64)
		return 256u << 10;
	return 64u << 10;
}

/* The 16 bytes of the job id a segment carries, from the run id its
 * ranks see as DISTRUN_JOB_ID: a single-node job's 32 hex digits as
 * they are; any other run id (several nodes share node 0's, such as
 * "HOST:PORT" or the rendezvous id) hashed, so that it still names the
 * job.  Launcher and ranks use this one function. */
static inline void dri_seg_job_id(const char *run_id, uint8_t out[16])
{
	size_t n = 0;
	int hex = 1;

	while (run_id[n]) {
		char c = run_id[n++];
		hex &= (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
	}
	if (hex && n == 32) {
		for (int i = 0; i < 16; i++) {
			char d[2] = { run_id[2 * i], run_id[2 * i + 1] };
			for (int k = 0; k < 2; k++)
				d[k] = (char)(d[k] <= '9' ? d[k] - '0' : d[k] - 'a' + 10);
			out[i] = (uint8_t)(d[0] << 4 | d[1]);
		}
		return;
	}
	/* FNV-1a twice (two offset bases) */
	for (int half = 0; half < 2; half++) {
		uint64_t h = half ? 0x84222325cbf29ce4ull : 0xcbf29ce484222325ull;
		for (size_t i = 0; i < n; i++)
			h = (h ^ (unsigned char)run_id[i]) * 0x100000001b3ull;
		for (int i = 0; i < 8; i++)
			out[8 * half + i] = (uint8_t)(h >> (8 * i));
	}
}

/* Fills the layout fields of *h (nranks, ctl_size, size, ctl_off,
 * xport_off, xport_size, rings_off, ring_stride, ring_size, blk_size,
 * coll_off, coll_half)
 * for n ranks.  Creator and mappers use this one function, so they
 * cannot disagree. */
static inline void dri_seg_layout(dri_seg_hdr *h, uint32_t n)
{
	uint64_t off = DRI_SEG_ALIGN(sizeof(dri_seg_hdr), 4096);

	h->nranks = n;
	h->ctl_size = DRI_CTL_SIZE;
	h->ctl_off = off;
	off += (uint64_t)n * DRI_CTL_SIZE;
	h->xport_off = off;
	h->ring_size = dri_seg_ring_bytes(n);
	if (!h->ring_size) {
		h->blk_size = 0;
		h->rings_off = off;
		h->ring_stride = 0;
	} else {
		h->blk_size = (uint32_t)DRI_SEG_ALIGN(sizeof(dri_seg_rank) +
						      (n + 63) / 64 * 8, 64);
		h->rings_off = DRI_SEG_ALIGN(off + (uint64_t)n * h->blk_size,
					     4096);
		h->ring_stride = sizeof(dri_seg_ring) + h->ring_size;
		off = h->rings_off + (uint64_t)n * n * h->ring_stride;
	}
	off = DRI_SEG_ALIGN(off, 4096);
	h->coll_off = off;
	h->coll_half = h->ring_size ? dri_seg_coll_half(n) : 0;
	off += (uint64_t)n * 2 * h->coll_half;
	off = DRI_SEG_ALIGN(off, 4096);
	h->xport_size = off - h->xport_off;
	h->size = off;
}

/* --- runtime side (runtime/seg.c); cmd/ uses struct job's mapping. --- */

/* The job's segment as this process mapped it at init, or NULL when it
 * has none (not started by distrun, DISTRUN_TRANSPORT=tcp with no
 * segment, or one that failed validation: dri_seg_why says why).  Stays
 * mapped until the process exits. */
dri_seg_hdr *dri_seg_get(void);
/* The control block of local rank local_rank (0 .. nranks-1), or NULL. */
void *dri_seg_ctl(int local_rank);
/* This process's index among the segment's ranks, or -1. */
int dri_seg_local_rank(void);
/* Why there is no segment ("" when there is one, or none was offered). */
const char *dri_seg_why(void);
/* Maps the segment named by DISTRUN_SEG_FD, if any, for global rank
 * rank (once per process; later calls return the first result).
 * DR_OK also when there is none or it is not valid (then dri_seg_get()
 * is NULL and dri_seg_why() says why). */
dr_err dri_seg_attach(int rank);
struct dri_kv; /* rdzv.h */
/* Without a segment from distrun, after dri_seg_attach: local rank 0
 * makes one for the local_size ranks of this host and publishes where it
 * is under a key of this host in kv; the others map it.  DR_OK also when
 * it cannot be had (dri_seg_why says why); an error only if the store
 * fails. */
dr_err dri_seg_join(struct dri_kv *kv, int local_rank, int local_size,
		    const uint8_t job[16], int64_t timeout_ms);


#endif /* DRI_SEG_H */
