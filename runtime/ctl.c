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
#include "ctl_write.h"
#include "error.h"

/* This rank's control block in the segment (NULL: nothing published) and
 * the clock of its times (ctl_write.h). */
dri_ctl *dri_ctl_own;
clockid_t dri_ctl_clk = CLOCK_MONOTONIC_COARSE;

/* The call this thread is in (one at a time: a collective never starts
 * another on the same thread, nor does a blocking send). */
static _Thread_local struct {
	int active;
	dri_ctl_slot *slot;     /* its slot, NULL if none */
	dri_ctl_call *cur;      /* the record being written */
	dri_ctl_call call;      /* a call without a slot */
} this_call;

void dri_ctl_attach(int rank, int world_size)
{
	const char *mode = getenv(DRI_ENV_CTL);

	dri_ctl_own = NULL;
	/* DISTRUN_CTL=off: publish nothing (to measure what it costs). */
	if (mode && !strcmp(mode, "off"))
		return;
	dri_ctl_clk = mode && !strcmp(mode, "precise")
			      ? CLOCK_MONOTONIC : CLOCK_MONOTONIC_COARSE;
	dri_ctl_attach_to(dri_seg_ctl(dri_seg_local_rank()), rank, world_size);
}

/* Linux 5.14's madvise: the pages' tables filled for writing now. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Brings the block's lines into this CPU's cache.  The first pass
 * through the flight record writes a line from memory at each call (the
 * first ~112 barriers of a program took 2-4x the time of the later ones,
 * docs/small-calls-log-1.md).  Read, not taken for writing: a line no other
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

	dri_ctl_own = NULL;
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

		c->clock_res_ns = clock_getres(dri_ctl_clk, &res) ? 0 :
				  (uint32_t)(res.tv_sec * 1000000000 + res.tv_nsec);
	}
	c->t_attach = dri_ctl_now_ns();
	c->t_user = c->t_attach;
	c->version = DRI_CTL_VERSION;
	__atomic_store_n(&c->magic, DRI_CTL_MAGIC, __ATOMIC_RELEASE);
	dri_ctl_own = c;
}

void dri_ctl_detach(void)
{
	if (!dri_ctl_own)
		return;
	__atomic_store_n(&dri_ctl_own->finished, 1, __ATOMIC_RELEASE);
	dri_ctl_own = NULL;
}

void dri_ctl_begin(const dri_msg_id *id, int peer, int peer_send)
{
	dri_ctl_slot *s;
	dri_ctl_call *c;

	if (!dri_ctl_own)
		return;
	if (id->coll == DRI_P2P)
		s = &dri_ctl_own->slot[DRI_CTL_P2P];
	else
		s = id->group_id < DRI_CTL_GROUPS ? &dri_ctl_own->slot[id->group_id] : NULL;
	/* Written in place: the slot's call, or ours for a group without
	 * one (the ring gets a copy at the end). */
	c = s ? &s->call : &this_call.call;
	this_call.active = 1;
	this_call.slot = s;
	this_call.cur = c;
	dri_ctl_slot_begin(s, c, id, peer, peer_send);
}

void dri_ctl_world_adopt(void)
{
	if (!dri_ctl_own)
		return;
	this_call.active = 1;
	this_call.slot = &dri_ctl_own->slot[DRI_CTL_WORLD];
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
	dri_ctl_slot_open(s);
	s->call.peer = peer;
	s->call.peer_send = is_send;
	dri_ctl_slot_close(s);
}

void dri_ctl_end(dr_err err)
{
	dri_ctl_slot *s = this_call.slot;

	if (!dri_ctl_own || !this_call.active)
		return;
	this_call.active = 0;
	this_call.slot = NULL;
	dri_ctl_call_finish(s, this_call.cur, err, dri_ctl_now_ns());
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
	int64_t now = dri_ctl_now_ns();
	size_t at = 0;
	int named = 0, more = 0;

	if (!len)
		return 0;
	out[0] = 0;
	/* Only the world: every rank is a member, so an empty slot is a
	 * rank that has not called at all. */
	if (!dri_ctl_own || !h || group_id != 0)
		return 0;
	for (uint32_t l = 0; l < h->nranks; l++) {
		const dri_ctl *c = dri_seg_ctl((int)l);
		dri_ctl_slot sl;
		char st, how[96];

		if (!c || c == dri_ctl_own ||
		    __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != DRI_CTL_MAGIC ||
		    c->rank == self || c->world_size != dri_ctl_own->world_size ||
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
