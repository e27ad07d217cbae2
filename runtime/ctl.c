/*
 * ctl.c - this rank's control block: the call it is in, per group, and the
 * flight recorder of its last calls (layout and readers in ctl.h).
 *
 * group.c calls dri_ctl_begin/dri_ctl_end around every collective it runs
 * (blocking on the caller's thread, asynchronous on the group's progress
 * thread), p2p.c around blocking sends and receives, and the transport
 * calls dri_ctl_wait as the request a wait blocks on changes, which names
 * the peer the call waits for and counts progress inside long calls.
 *
 * Cost: these run on every call, so they are plain stores into memory
 * that no other thread of ours writes, two reads of the coarse clock and
 * one atomic add (the ring's head, shared by the threads of the rank);
 * without a segment (a program started by another launcher) one test of a
 * pointer.  The stores are ordered for the launcher's seqlock readers by
 * release fences only: no lock, no system call.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "contract.h"
#include "error.h"

/* This rank's control block in the segment (NULL: nothing published). */
static dri_ctl *own_block;
/* Coarse by default: a fraction of the precise clock's cost, to the
 * kernel's tick (1-4 ms), which stall reports, time in collectives (an
 * unbiased sum over many calls) and barrier skew (>= 50 ms) need; exact
 * with DISTRUN_CTL=precise, which distrun sets for --trace. */
static clockid_t clk = CLOCK_MONOTONIC_COARSE;

/* The call this thread is in (one at a time: a collective never starts
 * another on the same thread, nor does a blocking send). */
static _Thread_local struct {
	int active;
	dri_ctl_slot *slot;     /* its slot, NULL if none */
	dri_ctl_call *cur;      /* the record being written */
	dri_ctl_call call;      /* a call without a slot */
} this_call;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The seqlock around a slot's update: odd while written. */
static void slot_open(dri_ctl_slot *s)
{
	__atomic_store_n(&s->ver, s->ver + 1, __ATOMIC_RELAXED);
	DRI_CTL_FENCE(__ATOMIC_RELEASE);
}

static void slot_close(dri_ctl_slot *s)
{
	__atomic_store_n(&s->ver, s->ver + 1, __ATOMIC_RELEASE);
}

void dri_ctl_attach(int rank, int world_size)
{
	const char *mode = getenv(DRI_ENV_CTL);

	own_block = NULL;
	/* DISTRUN_CTL=off: publish nothing (to measure what it costs). */
	if (mode && !strcmp(mode, "off"))
		return;
	clk = mode && !strcmp(mode, "precise") ? CLOCK_MONOTONIC
					       : CLOCK_MONOTONIC_COARSE;
	dri_ctl_attach_to(dri_seg_ctl(dri_seg_local_rank()), rank, world_size);
}

/* Linux 5.14's madvise: the pages' tables filled for writing now. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Brings the block's lines into this CPU's cache.  The first pass
 * through the flight record writes a line from memory at each call (the
 * first ~112 barriers of a program took 2-4x the time of the later ones,
 * docs/benchmarks.md).  Read, not taken for writing: a line no other
 * cache holds comes exclusive and is then written without a transfer,
 * and PREFETCHW measured slower here. */
static void warm(const dri_ctl *c)
{
	uint64_t x = 0;

	for (size_t o = 0; o + sizeof(uint64_t) <= sizeof(*c); o += 64)
		x ^= __atomic_load_n((const uint64_t *)((const char *)c + o),
				     __ATOMIC_RELAXED);
	__asm__ __volatile__("" : : "r"(x)); /* (the loads are kept) */
}

void dri_ctl_attach_to(dri_ctl *c, int rank, int world_size)
{
	long pg = sysconf(_SC_PAGESIZE);

	own_block = NULL;
	if (!c)
		return;
	/* The flight recorder's pages are first written in the program's
	 * first calls, each a fault of a few us there (a loop of 300
	 * barriers right after init took 1.2-1.45x as long a call as a long
	 * one): fault them in now.  An older kernel says EINVAL: no harm. */
	if (pg > 0) {
		uintptr_t a = (uintptr_t)c & ~(uintptr_t)(pg - 1);

		(void)madvise((void *)a, (uintptr_t)c + sizeof(*c) - a,
			      MADV_POPULATE_WRITE);
	}
	warm(c);
	/* A block left by an earlier process group of this rank keeps its
	 * flight record; the header says who writes it now. */
	c->rank = rank;
	c->pid = (int32_t)getpid();
	c->world_size = world_size;
	c->finished = 0;
	{
		struct timespec res;

		c->clock_res_ns = clock_getres(clk, &res) ? 0 :
				  (uint32_t)(res.tv_sec * 1000000000 + res.tv_nsec);
	}
	c->t_attach = now_ns();
	c->t_user = c->t_attach;
	c->version = DRI_CTL_VERSION;
	__atomic_store_n(&c->magic, DRI_CTL_MAGIC, __ATOMIC_RELEASE);
	own_block = c;
}

void dri_ctl_detach(void)
{
	if (!own_block)
		return;
	__atomic_store_n(&own_block->finished, 1, __ATOMIC_RELEASE);
	own_block = NULL;
}

/* A call starts: into c (a slot's, open if s is set). */
static inline void call_fill(dri_ctl_call *c, const dri_msg_id *id, int peer,
			     int peer_send)
{
	c->group_id = id->group_id;
	c->coll = id->coll;
	c->seq = id->seq;
	c->count = id->count;
	c->bytes = id->dtype >= 0 ? id->count * dr_dtype_size(id->dtype) : 0;
	c->dtype = id->dtype;
	c->op = id->op;
	c->root = id->root;
	c->peer = peer;
	c->peer_send = peer_send;
	c->status = 0;
	c->t_start = now_ns();
	c->t_end = 0;
}

void dri_ctl_begin(const dri_msg_id *id, int peer, int peer_send)
{
	dri_ctl_slot *s;
	dri_ctl_call *c;

	if (!own_block)
		return;
	if (id->coll == DRI_P2P)
		s = &own_block->slot[DRI_CTL_P2P];
	else
		s = id->group_id < DRI_CTL_GROUPS ? &own_block->slot[id->group_id] : NULL;
	/* Written in place: the slot's call, or ours for a group without
	 * one (the ring gets a copy at the end). */
	c = s ? &s->call : &this_call.call;
	this_call.active = 1;
	this_call.slot = s;
	this_call.cur = c;
	if (s)
		slot_open(s);
	call_fill(c, id, peer, peer_send);
	if (s) {
		s->state = DRI_CTL_IN_CALL;
		slot_close(s);
	}
}

void dri_ctl_world_begin(const dri_msg_id *id)
{
	dri_ctl_slot *s;

	if (!own_block)
		return;
	s = &own_block->slot[DRI_CTL_WORLD];
	slot_open(s);
	call_fill(&s->call, id, -1, 0);
	s->state = DRI_CTL_IN_CALL;
	slot_close(s);
}

void dri_ctl_world_adopt(void)
{
	if (!own_block)
		return;
	this_call.active = 1;
	this_call.slot = &own_block->slot[DRI_CTL_WORLD];
	this_call.cur = &this_call.slot->call;
}

void dri_ctl_wait(int peer, int is_send)
{
	dri_ctl_slot *s = this_call.slot;

	/* No clock read here: it would cost as much as the rest of the
	 * hooks together (the launcher counts the wait from t_start). */
	if (!s)
		return;
	/* A counter for the launcher's fingerprint only: a torn read of
	 * it is harmless, so no seqlock. */
	s->progress++;
	if (s->call.peer == peer && s->call.peer_send == is_send)
		return;
	slot_open(s);
	s->call.peer = peer;
	s->call.peer_send = is_send;
	slot_close(s);
}

/* Call c ended with err at t: its slot s (if any) goes idle, and it
 * goes into the ring. */
static inline void call_finish(dri_ctl_slot *s, dri_ctl_call *c, dr_err err,
			       int64_t t)
{
	dri_ctl_rec *r;
	uint64_t idx;
	int world = c->group_id == 0 && c->coll != DRI_P2P;

	if (s)
		slot_open(s);
	c->t_end = t;
	c->status = err;
	if (s) {
		s->state = DRI_CTL_IDLE;
		s->ncalls++;
		s->ns_in_calls += t - c->t_start;
		slot_close(s);
	}
	if (world) {
		/* The world's ring has one writer: no atomic add, the head
		 * moves once the record is whole. */
		idx = own_block->ring_head[DRI_CTL_WORLD];
		r = &own_block->ring_world[idx % DRI_CTL_RING_WORLD];
	} else {
		idx = __atomic_fetch_add(&own_block->ring_head[DRI_CTL_OTHER], 1,
					 __ATOMIC_RELAXED);
		r = &own_block->ring_other[idx % DRI_CTL_RING_OTHER];
	}
	__atomic_store_n(&r->ver, 2 * idx + 1, __ATOMIC_RELAXED);
	DRI_CTL_FENCE(__ATOMIC_RELEASE);
	r->call = *c;
	__atomic_store_n(&r->ver, 2 * idx + 2, __ATOMIC_RELEASE);
	if (world)
		__atomic_store_n(&own_block->ring_head[DRI_CTL_WORLD], idx + 1,
				 __ATOMIC_RELEASE);
	__atomic_store_n(&own_block->t_user, c->t_end, __ATOMIC_RELAXED);
}

void dri_ctl_end(dr_err err)
{
	dri_ctl_slot *s = this_call.slot;

	if (!own_block || !this_call.active)
		return;
	this_call.active = 0;
	this_call.slot = NULL;
	call_finish(s, this_call.cur, err, now_ns());
}

void dri_ctl_world_end(void)
{
	if (own_block)
		call_finish(&own_block->slot[DRI_CTL_WORLD],
			    &own_block->slot[DRI_CTL_WORLD].call, DR_OK, now_ns());
}

/* ------------------------------------------------ who is behind */

/* The state letter of process pid (/proc/PID/stat's third field), or 0
 * if it cannot be read.  Only system calls: a rank may call this while
 * it holds the transport's lock. */
static char proc_state(int32_t pid)
{
	char path[40], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* "pid (comm) S ...": comm may hold spaces and parentheses */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

size_t dri_ctl_behind(uint32_t group_id, uint64_t seq, int self, char *out,
		      size_t len)
{
	const dri_seg_hdr *h = dri_seg_get();
	int64_t now = now_ns();
	size_t at = 0;
	int named = 0, more = 0;

	if (!len)
		return 0;
	out[0] = 0;
	/* Only the world: every rank is a member, so an empty slot is a
	 * rank that has not called at all. */
	if (!own_block || !h || group_id != 0)
		return 0;
	for (uint32_t l = 0; l < h->nranks; l++) {
		const dri_ctl *c = dri_seg_ctl((int)l);
		dri_ctl_slot sl;
		char st, how[96];

		if (!c || c == own_block ||
		    __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != DRI_CTL_MAGIC ||
		    c->rank == self || c->world_size != own_block->world_size ||
		    __atomic_load_n(&c->finished, __ATOMIC_ACQUIRE) ||
		    dri_ctl_read_slot(c, DRI_CTL_WORLD, &sl))
			continue;
		if (sl.call.seq >= seq && (sl.ncalls || sl.state == DRI_CTL_IN_CALL))
			continue; /* in this call, or past it */
		if (named == 4) {
			more++;
			continue;
		}
		st = proc_state(c->pid);
		if (st == 'T' || st == 't')
			snprintf(how, sizeof(how), "its process is stopped%s",
				 st == 't' ? " by a debugger" : ": SIGSTOP?");
		else if (st == 'Z' || st == 'X')
			snprintf(how, sizeof(how), "its process has exited");
		else if (sl.state == DRI_CTL_IN_CALL)
			snprintf(how, sizeof(how), "it is in %s seq %llu",
				 dri_coll_name((dri_coll)sl.call.coll),
				 (unsigned long long)sl.call.seq);
		else
			snprintf(how, sizeof(how), "in its own code for %.1f s",
				 (double)(now - c->t_user) / 1e9);
		at += (size_t)snprintf(out + at, at < len ? len - at : 0,
				       "%srank %d (%s)", named ? ", " :
				       "not yet in this call: ", (int)c->rank, how);
		named++;
		if (at >= len)
			break;
	}
	if (more && at < len)
		at += (size_t)snprintf(out + at, len - at, " and %d more", more);
	return at < len ? at : len - 1;
}
