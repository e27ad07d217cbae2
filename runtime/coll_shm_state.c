/*
 * coll_shm_state.c - the phase/flag engine's state (coll_shm_flags.c is
 * the engine): configured at a process group's first call, the lines
 * of the calls' records warmed, and where the ranks run: the CPUs this
 * thread may use, the CPU each rank says it runs on (seg.h: cpu), and
 * the move of a waiting rank off a crowded CPU (rebalance), which the
 * engine's waits call.
 */
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll_shm_flags.h"
#include "shm.h"

/* Ranks per CPU beyond which a waiting rank sleeps at once instead of
 * spinning first (unless DISTRUN_SPIN_US is set). */
#define SPIN_MAX_PER_CPU 16

/* This process's calls through the flags (coll_shm_flags.h). */
struct dri_cs_state dri_cs;

void dri_cs_configure(void)
{
	const char *e = getenv("DISTRUN_SHM_COLL"), *spin = getenv("DISTRUN_SPIN_US");

	dri_cs.off = e && !strcmp(e, "0");
	/* Spin, unless ranks crowd the CPUs more than SPIN_MAX_PER_CPU to
	 * one: then every spinning rank keeps the one it waits for off its
	 * CPU, and sleeping at once wins (coll_shm_flags.c's head). */
	if (spin && *spin)
		dri_cs.spin_us = atoll(spin);
	else
		dri_cs.spin_us = dri_shm_ranks_per_cpu() > SPIN_MAX_PER_CPU ? 0 : 100;
	if (dri_cs.spin_us < 0)
		dri_cs.spin_us = 0;
	dri_cs.oversub = dri_shm_oversubscribed();
#if defined(__x86_64__) || defined(__i386__)
	{
		unsigned a, b, c, d;

		/* CPUID 0x80000001, ECX bit 8: PRFCHW (3DNowPrefetch) */
		dri_cs.prefetchw = __get_cpuid(0x80000001, &a, &b, &c, &d) &&
				   (c & (1u << 8));
	}
#endif
	dri_cs.cpu = -1;
	dri_cs.moved_ms = 0;
	dri_cs_allowed_get();
	dri_cs.direct_mode = dri_shm_direct_mode();
	dri_cs.direct = dri_cs.direct_mode == DRI_SHM_DIRECT_OFF ? -1 : 0;
	dri_cs.crowded = 0;
	dri_cs.chunk = dri_shm_slot_bytes();
	dri_cs.sub_bytes = dri_cs.chunk >= SUB_HALF_MIN ? SUB_BYTES : 0;
	dri_cs.chunk -= NSUB / 2 * dri_cs.sub_bytes;
	dri_cs.sub_off = dri_cs.chunk;
	if ((e = getenv("DISTRUN_SHM_CHUNK")) && atoll(e) >= 4096 &&
	    (size_t)atoll(e) < dri_cs.chunk)
		dri_cs.chunk = (size_t)atoll(e) / 64 * 64;
	/* A new process group: every rank's flags start from 0 again. */
	dri_cs.phase = dri_cs.ncall = dri_cs.safe = dri_cs.a2av = 0;
	dri_cs.checked = dri_cs.thru_seq = dri_cs.thru_phase = 0;
	dri_cs.marked = 0;
	dri_cs.owed = 0;
	dri_cs.owing = 0;
	dri_cs.lead.root = -1;
	dri_cs.lead.behind = dri_cs.lead.judge = 0;
	dri_cs.lead.every = DRI_CS_LEAD_EVERY;
	dri_cs.use = dri_cs.sub = 0;
	memset(dri_cs.need, 0, sizeof(dri_cs.need));
	memset(dri_cs.need_sub, 0, sizeof(dri_cs.need_sub));
	memset(dri_cs.past, 0, sizeof(dri_cs.past));
	dri_cs.open = dri_cs.waits = 0;
	dri_cs.nblk = 0;
	memset(dri_cs.seen, 0, sizeof(dri_cs.seen));
	dri_cs.generation = dri_shm_generation();
	dri_cs.configured = 1;
}

void dri_cs_warm(int r, int peers)
{
	if (!peers) {
		/* an add of 0: the line for writing, its value unchanged (a
		 * peer may read it) */
		for (int k = 0; k < DRI_SEG_CALLS; k++)
			__atomic_fetch_add(&dri_cs_blk(r)->call[k].c.seq, 0,
					   __ATOMIC_RELAXED);
		return;
	}
	/* (flat: the peers whose records a call reads) */
	for (int i = 0; i < dri_cs.nblk && dri_cs.nblk <= DRI_SHM_FLAT_MAX; i++)
		for (int k = 0; i != r && k < DRI_SEG_CALLS; k++)
			(void)__atomic_load_n(&dri_cs_blk(i)->call[k].c.seq,
					      __ATOMIC_RELAXED);
}

int dri_cs_leave(int r, int64_t wait_ns)
{
	const int64_t until = dri_now_ns() + wait_ns;
	int behind = 0;

	__atomic_store_n(&dri_cs.blk[r]->left, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < dri_cs.nblk; i++) {
		const uint32_t *left = &dri_cs.blk[i]->left;

		if (i == r)
			continue;
		while (!__atomic_load_n(left, __ATOMIC_ACQUIRE) &&
		       dri_now_ns() < until) {
			if (dri_cs.oversub)
				sched_yield();
			else
				dri_cpu_relax();
		}
		behind += !__atomic_load_n(left, __ATOMIC_ACQUIRE);
	}
	return behind;
}

/* The CPUs this thread may use, into dri_cs.allowed; 0 if unknown. */
int dri_cs_allowed_get(void)
{
	dri_cs.allowed_n = dri_cs.ncall;
	dri_cs.nallowed = sched_getaffinity(0, sizeof(dri_cs.allowed), &dri_cs.allowed)
			     ? 0 : CPU_COUNT(&dri_cs.allowed);
	return dri_cs.nallowed;
}

/* With no more ranks than CPUs, two can still end up queued on one CPU
 * while another idles: a wake-up puts the woken rank on the waker's CPU
 * (the rendezvous' last reply does), and the kernel's balancer leaves a
 * task that ran within the last half millisecond where it is, which a
 * spinning rank always has, for 10 ms and more.  Every phase then costs
 * a switch (measured: a barrier of 2 ranks right after init 6-12 us
 * instead of 0.4, in 4 to 8 of 16 runs).  So a waiting rank looks where
 * the ranks of its call said they run (seg.h: cpu) and, if its CPU has
 * more of them than another it may use, moves to the one with the
 * fewest: it allows itself that CPU alone, which makes the kernel move
 * it at once, then every CPU it had again.  Ranks that share a CPU do
 * not run at once, so the first to wait moves and the others see it
 * gone.  With more ranks than CPUs the same holds for their share:
 * 3 ranks on one of 2 CPUs and 1 on the other cost a switch more each
 * call than 2 and 2, so one of the 3 moves (the spin that does not
 * yield to ranks elsewhere makes the kernel's balancing slower still);
 * there rebalance runs at every wait, and looks at the CPUs it may use
 * every ALLOWED_CALLS calls while that was one.  A rank moves at most
 * once every MOVE_MS.  Flat calls only (up
 * to DRI_SHM_FLAT_MAX ranks). */
#define MOVE_MS 10
#define ALLOWED_CALLS 32

void dri_cs_rebalance(const struct call *c)
{
	int32_t pub[DRI_SHM_FLAT_MAX];
	int here = 0, best = -1, best_n = DRI_SHM_FLAT_MAX + 1, used = 0;
	cpu_set_t one;
	int64_t now;

	if (c->tree)
		return;
	/* Where we are now: the kernel may have moved us since the call
	 * began (and another rank that looks may take us for still here). */
	dri_cs_note_cpu(c->r);
	if (dri_cs.cpu <= 0)
		return;
	for (int i = 0; i < c->p; i++) {
		pub[i] = i == c->r ? dri_cs.cpu
			 : __atomic_load_n(&dri_cs_blk(i)->cpu, __ATOMIC_RELAXED);
		here += pub[i] == dri_cs.cpu;
	}
	if (here < 2)
		return;
	if (dri_cs.nallowed < 2 || !CPU_ISSET(dri_cs.cpu - 1, &dri_cs.allowed)) {
		/* One CPU allowed when last seen, or not ours: look again
		 * (the set may have changed since: taskset -p, cgroups),
		 * at every call that waits long with a CPU each, every
		 * ALLOWED_CALLS calls where ranks outnumber the CPUs
		 * (there every call looks here). */
		if (dri_cs.oversub && dri_cs.ncall - dri_cs.allowed_n < ALLOWED_CALLS)
			return;
		if (dri_cs_allowed_get() < 2 || !CPU_ISSET(dri_cs.cpu - 1, &dri_cs.allowed))
			return;
	}
	/* The fewest ranks on another CPU we may use: none if the ranks
	 * use fewer of them than there are (the usual case, with more
	 * CPUs than ranks, costs no walk of the set), else the least
	 * crowded of theirs.  O(p^2) with p <= DRI_SHM_FLAT_MAX. */
	for (int i = 0; i < c->p; i++) {
		int n = 0, seen = 0;

		if (pub[i] <= 0 || !CPU_ISSET(pub[i] - 1, &dri_cs.allowed))
			continue;
		for (int j = 0; j < c->p; j++) {
			n += pub[j] == pub[i];
			seen |= j < i && pub[j] == pub[i];
		}
		if (seen)
			continue;
		used++;
		if (pub[i] != dri_cs.cpu && n < best_n) {
			best = pub[i] - 1;
			best_n = n;
		}
	}
	if (used < dri_cs.nallowed)
		best_n = 0;
	/* Only if that evens them out: here - 1 on ours, best_n + 1 there. */
	if (best_n + 1 >= here)
		return;
	now = dri_now_ms();
	if (dri_cs.moved_ms && now - dri_cs.moved_ms < MOVE_MS)
		return;
	if (!best_n) {
		best = -1;
		for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
			int taken = 0;

			if (!CPU_ISSET(cpu, &dri_cs.allowed))
				continue;
			for (int i = 0; i < c->p && !taken; i++)
				taken = pub[i] == cpu + 1;
			if (!taken) {
				best = cpu;
				break;
			}
		}
	}
	if (best < 0)
		return;
	/* The set may have changed since configure (taskset -p, cgroups):
	 * move only within the one we have now, and give it back. */
	if (!dri_cs_allowed_get() || !CPU_ISSET(best, &dri_cs.allowed))
		return;
	CPU_ZERO(&one);
	CPU_SET(best, &one);
	/* Say where we go first: a rank that shares our CPU runs the moment
	 * we leave it, and must not take us for still there and move too. */
	dri_cs.cpu = best + 1;
	__atomic_store_n(&dri_cs_blk(c->r)->cpu, dri_cs.cpu, __ATOMIC_RELAXED);
	if (!sched_setaffinity(0, sizeof(one), &one)) {
		(void)sched_setaffinity(0, sizeof(dri_cs.allowed), &dri_cs.allowed);
		dri_cs.moved_ms = now;
	}
	dri_cs_note_cpu(c->r);
}
