/*
 * ctl.h - what a rank publishes in its control block of the per-job
 * segment, for the launcher to read at any time without the rank's help.
 *
 * The control block (DRI_CTL_SIZE bytes per local rank, seg.h) holds:
 *   - per group (the first DRI_CTL_GROUPS group ids, plus one slot for
 *     blocking point-to-point calls), the call the rank is in: group, seq,
 *     op, dtype, count, root, the peer it waits on and since when; or, when
 *     idle, the last call it completed and when, which is "in user code
 *     since then";
 *   - per group, how many calls completed and the time spent in them;
 *   - two rings of the last completed calls (the flight recorder), read
 *     by the stall report and --trace: the world group's last
 *     DRI_CTL_RING_WORLD collectives, and the last DRI_CTL_RING_OTHER calls
 *     of every other group and of blocking point-to-point.
 *
 * Writers are the rank's own threads, with plain stores: a group slot has
 * one writer at a time (a group's calls run one at a time, group.c), so
 * does the world's ring, and records of the other ring are claimed by an
 * atomic add on its head (groups' progress threads share it).  Readers (the
 * launcher, another process) take a consistent snapshot by the seqlock
 * word of each slot and record: `ver` is odd while it is being written.
 * A rank killed in the middle of a write leaves `ver` odd for ever; a
 * reader gives up after a few tries and says so (dri_ctl_read_*).
 *
 * Times are CLOCK_MONOTONIC nanoseconds: the same clock for every process
 * of a host, so the launcher compares ranks' times with each other and with
 * its own.  They are read from CLOCK_MONOTONIC_COARSE (the same clock to
 * the kernel's tick, clock_res_ns) unless DISTRUN_CTL=precise (--trace).
 *
 * Both the launcher (cmd/diag/, through contract.h) and libdistrun
 * (runtime/ctl.c) include this file; only ctl.c and ctl_write.h (its
 * inline part, on every call's way) write.
 */
#ifndef DRI_CTL_H
#define DRI_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "seg.h"
#include "wire.h"

#define DRI_CTL_MAGIC 0x4c544344u /* "DCTL" */
#define DRI_CTL_VERSION 1
/* Group ids 0 .. DRI_CTL_GROUPS-1 have a slot each (world is 0); calls of
 * later groups reach only the ring. */
#define DRI_CTL_GROUPS 8
/* The slot of blocking point-to-point calls (dr_send, dr_recv). */
#define DRI_CTL_P2P DRI_CTL_GROUPS
#define DRI_CTL_SLOTS (DRI_CTL_GROUPS + 1)
/* Records in the flight recorder's rings. */
#define DRI_CTL_RING_WORLD 112
#define DRI_CTL_RING_OTHER 48
enum { DRI_CTL_WORLD, DRI_CTL_OTHER, DRI_CTL_RINGS };

/* One call: the one a slot is in, or a record of one that ended. */
typedef struct {
	uint32_t group_id;
	uint32_t coll;         /* dri_coll (error.h) */
	uint64_t seq;          /* the group's call number; 0 for p2p */
	uint64_t count;        /* elements, as the user gave them */
	uint64_t bytes;        /* count x dtype size */
	int32_t dtype;         /* dr_dtype, -1 if none */
	int32_t op;            /* dr_op, -1 if none */
	int32_t root;          /* world rank, -1 if none */
	int32_t peer;          /* world rank waited on, -1 if not known */
	int32_t peer_send;     /* 1: waiting to send to peer, 0: to receive */
	int32_t status;        /* dr_err once ended, 0 before */
	int64_t t_start;       /* ns: entered the call */
	int64_t t_end;         /* ns: left the call, 0 while in it */
} dri_ctl_call;

enum { DRI_CTL_IDLE = 0, DRI_CTL_IN_CALL = 1 };

/* One group's slot. */
typedef struct {
	uint32_t ver;          /* seqlock: odd while written */
	uint32_t state;        /* DRI_CTL_IDLE, DRI_CTL_IN_CALL */
	uint64_t ncalls;       /* calls completed */
	uint64_t progress;     /* requests completed inside calls (no
				* seqlock: a counter to see movement by) */
	int64_t ns_in_calls;   /* time in completed calls */
	dri_ctl_call call;     /* in a call: it; idle: the last one, if any */
} dri_ctl_slot;

/* One flight record: ver is 2 * (its index in the ring's history) + 2
 * once written, odd while being written. */
typedef struct {
	uint64_t ver;
	dri_ctl_call call;
} dri_ctl_rec;

typedef struct {
	uint32_t magic;        /* DRI_CTL_MAGIC once the rank attached */
	uint32_t version;      /* DRI_CTL_VERSION */
	int32_t rank;          /* world rank */
	int32_t pid;
	int32_t world_size;
	uint32_t finished;     /* 1 after dr_destroy_process_group */
	uint32_t clock_res_ns; /* resolution of the times below */
	uint32_t pad0_;
	int64_t t_attach;      /* ns: init */
	int64_t t_user;        /* ns: left its last call (user code since) */
	uint64_t ring_head[DRI_CTL_RINGS]; /* records ever claimed */
	dri_ctl_slot slot[DRI_CTL_SLOTS];
	dri_ctl_rec ring_world[DRI_CTL_RING_WORLD];
	dri_ctl_rec ring_other[DRI_CTL_RING_OTHER];
} dri_ctl;

_Static_assert(sizeof(dri_ctl) <= DRI_CTL_SIZE,
	       "the control block must fit DRI_CTL_SIZE");

/* The seqlock's fences.  ThreadSanitizer does not model fences (gcc
 * warns, -Werror fails); under it the readers are not instrumented
 * (DRI_CTL_NO_TSAN) and the fences are compiler barriers: readers live in
 * another process in real use, only tests/unit/test_ctl reads in-process. */
#ifdef __SANITIZE_THREAD__
#define DRI_CTL_FENCE(order) __asm__ __volatile__("" ::: "memory")
#define DRI_CTL_NO_TSAN __attribute__((no_sanitize_thread))
#else
#define DRI_CTL_FENCE(order) __atomic_thread_fence(order)
#define DRI_CTL_NO_TSAN
#endif

/* A copy that no sanitizer's memcpy interceptor sees. */
DRI_CTL_NO_TSAN static inline void dri_ctl_copy(void *dst, const void *src,
						size_t n)
{
	const volatile unsigned char *s = src;
	unsigned char *d = dst;

	for (size_t i = 0; i < n; i++)
		d[i] = s[i];
}

/* ------------------------------------------------------- readers */

/* A consistent copy of slot s of ctl into *out; 0, or -1 if it stayed
 * torn (its writer died while writing, or writes faster than we read). */
DRI_CTL_NO_TSAN static inline int dri_ctl_read_slot(const dri_ctl *ctl,
						    int s, dri_ctl_slot *out)
{
	const dri_ctl_slot *p = &ctl->slot[s];

	for (int tries = 0; tries < 1000; tries++) {
		uint32_t v = __atomic_load_n(&p->ver, __ATOMIC_ACQUIRE);

		if (v & 1)
			continue;
		dri_ctl_copy(out, p, sizeof(*out));
		DRI_CTL_FENCE(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->ver, __ATOMIC_RELAXED) == v)
			return 0;
	}
	dri_ctl_copy(out, p, sizeof(*out));
	return -1;
}

/* The records of ring `ring` (DRI_CTL_WORLD, DRI_CTL_OTHER). */
static inline uint64_t dri_ctl_ring_len(int ring)
{
	return ring == DRI_CTL_WORLD ? DRI_CTL_RING_WORLD : DRI_CTL_RING_OTHER;
}

static inline const dri_ctl_rec *dri_ctl_ring(const dri_ctl *ctl, int ring)
{
	return ring == DRI_CTL_WORLD ? ctl->ring_world : ctl->ring_other;
}

/* Record number idx (0 = the first ever) of a ring into *out: 0, or -1
 * if it was overwritten already or is not complete. */
DRI_CTL_NO_TSAN static inline int dri_ctl_read_rec(const dri_ctl *ctl,
						   int ring, uint64_t idx,
						   dri_ctl_call *out)
{
	const dri_ctl_rec *p = &dri_ctl_ring(ctl, ring)[idx %
							 dri_ctl_ring_len(ring)];
	uint64_t want = 2 * idx + 2;

	if (__atomic_load_n(&p->ver, __ATOMIC_ACQUIRE) != want)
		return -1;
	dri_ctl_copy(out, &p->call, sizeof(*out));
	DRI_CTL_FENCE(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&p->ver, __ATOMIC_RELAXED) == want ? 0 : -1;
}

/* ------------------------------------------------- writers (ctl.c) */

/* The launcher reads the blocks; only libdistrun calls these. */
/* Maps this rank's control block (in the segment distrun made, through
 * seg.c) and fills its header.  Without a segment every call below does
 * nothing but test a pointer. */
void dri_ctl_attach(int rank, int world_size);
/* The same with the block given (NULL: none), for tests. */
void dri_ctl_attach_to(dri_ctl *c, int rank, int world_size);
/* Marks the block finished; the data stays for the launcher to read. */
void dri_ctl_detach(void);
/* A call starts on this thread: it goes into its group's slot (groups
 * past DRI_CTL_GROUPS have none: they reach only the ring).  peer >= 0
 * for p2p: the rank it talks to. */
void dri_ctl_begin(const dri_msg_id *id, int peer, int peer_send);
/* The call this thread began ended with err: the slot goes idle and the
 * call is recorded in the ring. */
void dri_ctl_end(dr_err err);
/* The same for a blocking call of the world group (group 0, no peer)
 * on the quick path (coll_shm_quick.c), which may not wait at all: its
 * begin fills the world's slot alone; dri_ctl_world_adopt makes it the
 * thread's call before a wait (for dri_ctl_wait, then dri_ctl_end);
 * dri_ctl_world_end ends one that did not wait, with DR_OK. */
void dri_ctl_world_adopt(void);
/* (dri_ctl_world_begin and dri_ctl_world_end: inline, in ctl_write.h) */
/* The transport waits to send to (or receive from) peer now, inside the
 * call this thread is in (a request completed since the last time). */
void dri_ctl_wait(int peer, int is_send);
/* For a timeout's message: the ranks of this host (other than world rank
 * self) that have not entered call seq of the world group (group_id 0;
 * others give ""), and what they do instead, as "not yet in this call:
 * rank 5 (its process is stopped: SIGSTOP?)", into out.  Its length; 0
 * ("") when none is known to be behind, or without a segment. */
size_t dri_ctl_behind(uint32_t group_id, uint64_t seq, int self, char *out,
		      size_t len);

#endif /* DRI_CTL_H */
