/*
 * shm.c - the shared-memory transport: rings of bytes between the ranks
 * of one host, a doorbell futex per rank, and a watch on the peers'
 * processes.
 *
 * Ring (s -> r) in the segment carries the same stream of framed
 * messages that a TCP connection from s to r would: transport.c frames,
 * matches and checks them the same way, so DR_EMISMATCH, ANY_SOURCE,
 * parking of large early messages and ABORT/BYE frames work alike on
 * both.  A ring has one writer and one reader: the writer owns tail, the
 * reader head; data is published by the release store of tail and
 * consumed by that of head.
 *
 * Waking only those who wait: after writing, s sets its bit in r's ready
 * bitmap and, only if r's waiting flag is up, bumps r's doorbell and
 * FUTEX_WAKEs it.  r, before it sleeps, reads the doorbell, raises
 * waiting, looks at its bitmap (and the abort word) once more, then
 * sleeps on the doorbell's old value: a write that lands in between
 * either shows in the bitmap or changes the doorbell, so no wake-up is
 * lost (sequentially consistent order on both sides).  The same goes
 * for room: a writer that found the ring full raises send_blocked, and
 * the reader that drains it sets the writer's bit.
 *
 * Failure: the launcher raises the segment's abort word when it reaps a
 * rank that failed and rings every doorbell; without a launcher, and for
 * a rank that exits without a word, each rank holds a pidfd for each shm
 * peer it has sent to or received from (opened then, so 256 ranks do not
 * hold 255 each), all in one epoll set, and looks at them every
 * DEATH_CHECK_MS (one epoll_wait), so a dead peer
 * is seen within that time whatever the call's timeout (without pidfds,
 * kill(pid, 0) tells the same once the peer is reaped).  A peer that
 * leaves on purpose says BYE through its ring first, and transport.c
 * fails every wait for it from then on, flags included.
 */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "copy.h"
#include "error.h"
#include "seg.h"
#include "shm.h"
#include "timeout.h"

/* The longest sleep between two looks at the peers' processes. */
#define DEATH_CHECK_MS 20
#define HOST_ID_MAX 64

enum { MODE_AUTO, MODE_SHM, MODE_TCP };

/* host_shm.pidfd[i] when it holds no pidfd: not watched; watched without one
 * (no pidfd_open before Linux 5.3, or no fd left), by kill(pid, 0); its
 * process was gone when the watch began (pidfd_open: ESRCH); its death
 * reported once already. */
enum { W_OFF = -1, W_PID = -2, W_GONE = -3, W_SEEN = -4 };

static struct {
	int mode;
	dri_seg_hdr *h;
	int rank, size, me;    /* me: our local index in the segment */
	int on;
	int *local;            /* world rank -> local index, -1: TCP */
	int *world;            /* local index -> world rank, -1: none */
	int *pidfd;            /* world rank -> pidfd, or W_* below */
	int epfd;              /* the pidfds, one look for all; -1: none */
	int nslow;             /* W_PID and W_GONE entries (no pidfd) */
	int *host_of;          /* world rank -> lowest world rank on its host */
	int npeers, ntcp;
	int oversub;
	int wsock;             /* poll wake-ups to us, -1: none (see notify) */
	int ssock;             /* sends wake-ups to pollers, -1: not yet */
	int64_t next_check;
	char host[HOST_ID_MAX + 1];
	/* A flag a collective waits for (dri_shm_want): dri_shm_wait does
	 * not sleep once *want >= want_val. */
	const uint64_t *want;
	uint64_t want_val;
	unsigned generation;   /* dri_shm_start calls */
	int per_cpu;           /* ranks on this host per CPU we may use */
} host_shm = { .me = -1, .wsock = -1, .ssock = -1, .epfd = -1 };

static unsigned char *xport(void)
{
	return (unsigned char *)host_shm.h + host_shm.h->xport_off;
}

static dri_seg_rank *blk(int local)
{
	return (dri_seg_rank *)(xport() + (uint64_t)local * host_shm.h->blk_size);
}

static dri_seg_ring *ring(int s, int r)
{
	return (dri_seg_ring *)((unsigned char *)host_shm.h + host_shm.h->rings_off +
				((uint64_t)s * host_shm.h->nranks + (uint64_t)r) *
					host_shm.h->ring_stride);
}

static long futex(uint32_t *w, int op, uint32_t val,
		  const struct timespec *ts)
{
	return syscall(SYS_futex, w, op, val, ts, NULL, 0);
}

/* ---------------------------------------------------------- set-up */

static dr_err parse_mode(const char *s, int *mode)
{
	if (!s || !*s || !strcmp(s, "auto"))
		*mode = MODE_AUTO;
	else if (!strcmp(s, "shm"))
		*mode = MODE_SHM;
	else if (!strcmp(s, "tcp"))
		*mode = MODE_TCP;
	else
		return DR_EINVAL;
	return DR_OK;
}

static dr_err host_id(int slot);

dr_err dri_shm_configure(const char *opt)
{
	const char *env = getenv("DISTRUN_TRANSPORT");

	if (opt && *opt) {
		if (parse_mode(opt, &host_shm.mode))
			return dri_fail(DR_EINVAL, "dr_init_options.transport "
					"'%s': use \"auto\", \"shm\" or \"tcp\"",
					opt);
	} else if (parse_mode(env, &host_shm.mode)) {
		return dri_fail(DR_EENV, "DISTRUN_TRANSPORT='%s': use auto, shm "
				"or tcp", env);
	}
	if (dri_shm_direct_mode() < 0)
		return dri_fail(DR_EENV, "DISTRUN_SHM_DIRECT='%s': use auto, on "
				"or off", getenv("DISTRUN_SHM_DIRECT"));
	/* The host identity's variables too, here, before the rendezvous:
	 * every rank then fails on its own with their name, rather than one
	 * first and the others at its closed store. */
	return host_id(-1);
}

int dri_shm_direct_mode(void)
{
	const char *s = getenv("DISTRUN_SHM_DIRECT");

	if (!s || !*s || !strcmp(s, "auto"))
		return DRI_SHM_DIRECT_AUTO;
	if (!strcmp(s, "on") || !strcmp(s, "1"))
		return DRI_SHM_DIRECT_ON;
	if (!strcmp(s, "off") || !strcmp(s, "0"))
		return DRI_SHM_DIRECT_OFF;
	return -1;
}

int dri_shm_wanted(void)
{
	return host_shm.mode != MODE_TCP;
}

/* DISTRUN_PRETEND_HOSTS=A+B+...: host 0 takes the first A slots, host 1
 * the next B and so on (uneven hosts, for the hierarchical collectives'
 * tests); slots past the sum start over at host 0. */
static dr_err pretend_sizes(const char *k, int slot)
{
	long sizes[64], sum = 0;
	int n = 0, h = 0;
	const char *p = k;

	while (*p) {
		char *end;
		long v = strtol(p, &end, 10);

		if (*p < '0' || *p > '9' || v < 1 || v > 1 << 20 || n == 64 ||
		    (*end && *end != '+') || (*end == '+' && !end[1]))
			return dri_fail(DR_EENV, "DISTRUN_PRETEND_HOSTS='%s' is "
					"not a count of hosts nor sizes A+B+...",
					k);
		sizes[n++] = v;
		sum += v;
		p = *end ? end + 1 : end;
	}
	slot = slot >= 0 ? (int)(slot % sum) : 0;
	while (slot >= sizes[h])
		slot -= (int)sizes[h++];
	snprintf(host_shm.host, sizeof(host_shm.host), "pretend%d", h);
	return DR_OK;
}

/* Pretend hosts, so one machine's ranks can be split into several that
 * use shared memory inside and TCP between: DISTRUN_HOST_ID names this
 * rank's host; DISTRUN_PRETEND_HOSTS=K (for test suites, which cannot
 * give each rank its own variable) puts slot i on host i % K, so that
 * neighbours are on different hosts (A+B+...: consecutive slots, above). */
static dr_err host_id(int slot)
{
	const char *s = getenv("DISTRUN_HOST_ID");
	const char *k = getenv("DISTRUN_PRETEND_HOSTS");

	host_shm.host[0] = 0;
	if ((!s || !*s) && k && *k && strchr(k, '+'))
		return pretend_sizes(k, slot);
	if ((!s || !*s) && k && *k) {
		char *end;
		long v = strtol(k, &end, 10);

		if (*end || v < 1 || v > 1 << 20)
			return dri_fail(DR_EENV, "DISTRUN_PRETEND_HOSTS='%s' is "
					"not a count of hosts", k);
		snprintf(host_shm.host, sizeof(host_shm.host), "pretend%ld",
			 slot >= 0 ? slot % v : 0);
		return DR_OK;
	}
	if (!s || !*s)
		return DR_OK;
	if (strlen(s) > HOST_ID_MAX || strspn(s, "abcdefghijklmnopqrstuvwxyz"
					      "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
					      "0123456789._-") != strlen(s))
		return dri_fail(DR_EENV, "DISTRUN_HOST_ID='%s': at most %d "
				"letters, digits, '.', '_' or '-'", s,
				HOST_ID_MAX);
	strcpy(host_shm.host, s);
	return DR_OK;
}

/* Waits (up to the job's timeout) until no other local rank whose
 * process lives is in a process group (seg.h: active).  Only a rank that
 * joins again can find one: in a job's first group nobody is yet. */
static dr_err wait_peers_left(void)
{
	int64_t deadline = dri_now_ms() + dri_timeout_ms();

	for (uint32_t l = 0; l < host_shm.h->nranks; l++) {
		dri_seg_rank *b = blk((int)l);

		while ((int)l != host_shm.me &&
		       __atomic_load_n(&b->active, __ATOMIC_ACQUIRE)) {
			int32_t pid = __atomic_load_n(&b->pid, __ATOMIC_ACQUIRE);

			if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
				break; /* gone without a destroy */
			if (dri_now_ms() >= deadline)
				return dri_fail(DR_ETIMEDOUT, "local rank %u (pid %d) "
						"is still in the last process group "
						"after %lld ms: every rank must destroy "
						"it before the new one can start", l,
						(int)pid, (long long)dri_timeout_ms());
			nanosleep(&(struct timespec){ 0, 1000 * 1000 }, NULL);
		}
	}
	return DR_OK;
}

dr_err dri_shm_addr_suffix(char *buf, size_t size)
{
	dri_seg_hdr *h = dri_seg_get();
	dr_err err;

	buf[0] = 0;
	host_shm.h = NULL;
	err = host_id(dri_seg_local_rank());
	if (err)
		return err;
	if (host_shm.mode == MODE_TCP)
		return DR_OK;
	if (!h || !h->ring_size) {
		const char *why = !h ? dri_seg_why() : "";

		if (host_shm.mode == MODE_AUTO)
			return DR_OK;
		if (h)
			return dri_fail(DR_EINVAL, "transport shm: the job's "
					"segment has no room for it (%u ranks, "
					"more than %d)", h->nranks,
					DRI_SEG_SHM_MAX);
		return dri_fail(DR_EINVAL, "transport shm: this rank has no "
				"shared segment (%s)", *why ? why :
				"not started by distrun");
	}
	host_shm.h = h;
	host_shm.me = dri_seg_local_rank();
	snprintf(buf, size, "|");
	for (int i = 0; i < 16; i++)
		snprintf(buf + 1 + 2 * i, size - 1 - 2 * i, "%02x", h->job_id[i]);
	snprintf(buf + 33, size - 33, ".%016llx/%s/%d",
		 (unsigned long long)h->nonce, host_shm.host, host_shm.me);
	/* A peer still in the last process group may read our flags (its
	 * last call) and write to our rings (its goodbye): not before it
	 * has left may we start again. */
	err = wait_peers_left();
	if (err)
		return err;
	/* Our inbound rings start empty: what an earlier process group of
	 * ours left unread there is not for this one.  No peer writes to
	 * us before it has our address, which is published after this.  A
	 * slot that never had a process group (no pid yet) has rings nobody
	 * wrote: left alone, for each ring's first look maps a page of the
	 * segment (a rank per slot and a ring per pair: 256 MiB and most of
	 * the start's time at 256 ranks). */
	for (uint32_t s = 0; blk(host_shm.me)->pid && s < h->nranks; s++) {
		dri_seg_ring *rg = ring((int)s, host_shm.me);

		__atomic_store_n(&rg->head, __atomic_load_n(&rg->tail,
				 __ATOMIC_ACQUIRE), __ATOMIC_SEQ_CST);
	}
	/* Nor do the flags of the collectives (coll_shm.c) carry over. */
	memset(blk(host_shm.me)->call, 0, sizeof(blk(host_shm.me)->call));
	memset(&blk(host_shm.me)->last, 0, sizeof(blk(host_shm.me)->last));
	memset(blk(host_shm.me)->lean, 0, sizeof(blk(host_shm.me)->lean));
	__atomic_store_n(&blk(host_shm.me)->left, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&blk(host_shm.me)->up, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&blk(host_shm.me)->down, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&blk(host_shm.me)->pid, (int32_t)getpid(), __ATOMIC_RELEASE);
	return DR_OK;
}

static int ncpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	return CPU_COUNT(&set);
}

/* "SEGID/HOST/LOCAL": the length of "SEGID/HOST" (the part two ranks on
 * one host share), or -1 if malformed. */
static int suffix_key_len(const char *sfx)
{
	const char *slash = strrchr(sfx, '/');

	return slash && slash > sfx ? (int)(slash - sfx) : -1;
}

/* The abstract socket name of local rank l's poll wake-ups: the
 * segment's nonce keeps two jobs (or two nodes of one job) apart. */
static socklen_t wake_addr(int l, struct sockaddr_un *a)
{
	int n;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1,
		     "distrun-%016llx-%d", (unsigned long long)host_shm.h->nonce, l);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* With peers on both sides, our socket for poll wake-ups (notify); none
 * (a bind that fails) leaves poll's short naps as the fallback. */
static void wake_sock_open(void)
{
	struct sockaddr_un a;
	socklen_t len = wake_addr(host_shm.me, &a);

	host_shm.wsock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (host_shm.wsock >= 0 && bind(host_shm.wsock, (struct sockaddr *)&a, len)) {
		close(host_shm.wsock);
		host_shm.wsock = -1;
	}
}

/* Which ranks share a host, as every rank sees it (the same addresses,
 * so the same map everywhere): those whose suffixes agree up to the local
 * slot.  A rank without shared memory is a host of its own. */
static dr_err host_map(const char **sfx, int size)
{
	host_shm.host_of = malloc((size_t)size * sizeof(int));
	if (!host_shm.host_of)
		return dri_fail(DR_ENOMEM, "out of memory for %d peers", size);
	for (int i = 0; i < size; i++) {
		int kl = suffix_key_len(sfx[i]);

		host_shm.host_of[i] = i;
		for (int j = 0; kl > 0 && j < i; j++)
			if (host_shm.host_of[j] == j && suffix_key_len(sfx[j]) == kl &&
			    !memcmp(sfx[i], sfx[j], (size_t)kl)) {
				host_shm.host_of[i] = j;
				break;
			}
	}
	return DR_OK;
}

dr_err dri_shm_start(int rank, int size, char **addrs)
{
	const char **sfx = calloc((size_t)size, sizeof(*sfx));
	int nlocal = 1, klen;
	dr_err err = DR_OK;

	host_shm.rank = rank;
	host_shm.size = size;
	host_shm.npeers = host_shm.ntcp = 0;
	host_shm.local = malloc((size_t)size * sizeof(int));
	host_shm.pidfd = malloc((size_t)size * sizeof(int));
	host_shm.world = host_shm.h ? malloc(host_shm.h->nranks * sizeof(int)) : NULL;
	if (!sfx || !host_shm.local || !host_shm.pidfd || (host_shm.h && !host_shm.world)) {
		free(sfx);
		dri_shm_stop();
		return dri_fail(DR_ENOMEM, "out of memory for %d peers", size);
	}
	for (int i = 0; host_shm.h && i < (int)host_shm.h->nranks; i++)
		host_shm.world[i] = -1;
	for (int i = 0; i < size; i++) {
		char *bar = strchr(addrs[i], '|');

		host_shm.local[i] = -1;
		host_shm.pidfd[i] = W_OFF;
		sfx[i] = "";
		if (bar) {
			*bar = 0; /* the TCP address stays in addrs[i] */
			sfx[i] = bar + 1;
		}
	}
	klen = suffix_key_len(sfx[rank]);
	for (int i = 0; host_shm.h && klen > 0 && i < size; i++) {
		const char *p = sfx[i];
		char *end;
		long l;

		if (i == rank || suffix_key_len(p) != klen ||
		    memcmp(p, sfx[rank], (size_t)klen))
			continue;
		l = strtol(p + klen + 1, &end, 10);
		if (*end || end == p + klen + 1 || l < 0 ||
		    l >= (long)host_shm.h->nranks || l == host_shm.me || host_shm.world[l] >= 0) {
			err = dri_fail(DR_EPROTO, "rank %d publishes shared "
				       "memory slot '%s'", i, p + klen + 1);
			break;
		}
		host_shm.local[i] = (int)l;
		host_shm.world[l] = i;
		host_shm.npeers++;
		nlocal++;
	}
	if (!err)
		err = host_map(sfx, size);
	free(sfx);
	if (err) {
		dri_shm_stop();
		return err;
	}
	host_shm.ntcp = size - 1 - host_shm.npeers;
	if (host_shm.mode == MODE_SHM && host_shm.ntcp) {
		dri_shm_stop();
		return dri_fail(DR_EINVAL, "transport shm: %d of %d peers are "
				"not on this host (or not in shared memory); use "
				"auto", host_shm.ntcp, size - 1);
	}
	if (!host_shm.npeers)
		host_shm.h = NULL;
	if (host_shm.h && host_shm.ntcp)
		wake_sock_open();
	host_shm.oversub = nlocal > ncpus();
	host_shm.per_cpu = (nlocal + ncpus() - 1) / ncpus();
	host_shm.next_check = 0;
	host_shm.on = 1;
	host_shm.generation++;
	if (host_shm.h)
		__atomic_store_n(&blk(host_shm.me)->active, 1, __ATOMIC_RELEASE);
	/* With the whole world here, the collectives wait on flags, not
	 * messages: watch, from now while they live, the ranks whose flags
	 * this rank waits for (coll_shm.c: all of them, or its parent and
	 * children in the tree), so that one that exits even between two
	 * calls is seen. */
	for (int i = 0; host_shm.h && host_shm.npeers == size - 1 && i < size; i++)
		if (i != rank && (size <= DRI_SHM_FLAT_MAX ||
				  i == (rank - 1) / DRI_SHM_TREE_K ||
				  (i - 1) / DRI_SHM_TREE_K == rank))
			dri_shm_watch(i);
	return DR_OK;
}

void dri_shm_stop(void)
{
	/* After the transport's goodbyes: nothing more of ours comes. */
	if (host_shm.on && host_shm.h && host_shm.me >= 0)
		__atomic_store_n(&blk(host_shm.me)->active, 0, __ATOMIC_RELEASE);
	for (int i = 0; host_shm.pidfd && i < host_shm.size; i++)
		if (host_shm.pidfd[i] >= 0)
			close(host_shm.pidfd[i]);
	if (host_shm.epfd >= 0)
		close(host_shm.epfd);
	host_shm.epfd = -1;
	host_shm.nslow = 0;
	free(host_shm.local);
	free(host_shm.world);
	free(host_shm.pidfd);
	free(host_shm.host_of);
	if (host_shm.wsock >= 0)
		close(host_shm.wsock);
	if (host_shm.ssock >= 0)
		close(host_shm.ssock);
	host_shm.wsock = host_shm.ssock = -1;
	host_shm.local = host_shm.world = host_shm.pidfd = host_shm.host_of = NULL;
	host_shm.npeers = host_shm.ntcp = 0;
	host_shm.on = 0;
	host_shm.h = NULL;
}

int dri_shm_is_peer(int peer)
{
	return host_shm.h && host_shm.local && peer >= 0 && peer < host_shm.size &&
	       host_shm.local[peer] >= 0;
}

int dri_shm_host_of(int rank)
{
	return host_shm.host_of && rank >= 0 && rank < host_shm.size ? host_shm.host_of[rank] : rank;
}

int dri_shm_npeers(void)
{
	return host_shm.on ? host_shm.npeers : 0;
}

int dri_shm_ntcp(void)
{
	return host_shm.on ? host_shm.ntcp : 0;
}

const char *dri_shm_transport_name(void)
{
	if (!host_shm.on)
		return "none";
	if (host_shm.npeers && host_shm.ntcp)
		return "shm+tcp";
	if (host_shm.npeers)
		return "shm";
	/* A job of one rank talks to nobody: it has what it asked for. */
	return host_shm.ntcp || host_shm.mode != MODE_SHM ? "tcp" : "shm";
}

const char *dr_transport_name(void)
{
	return host_shm.on ? dri_shm_transport_name() : NULL;
}

int dri_shm_oversubscribed(void)
{
	return host_shm.oversub;
}

int dri_shm_ranks_per_cpu(void)
{
	return host_shm.per_cpu;
}

/* ------------------------------------------------------------ bytes */

/* A rank with peers over TCP too sleeps in poll(), which a futex wake
 * does not end: it raises waiting to WAIT_POLL, and we send it a
 * datagram as well.  Lost (a full socket buffer) only when one is
 * pending already. */
static void wake_poller(int l)
{
	struct sockaddr_un a;
	socklen_t len;

	if (host_shm.ssock < 0)
		host_shm.ssock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK |
				 SOCK_CLOEXEC, 0);
	if (host_shm.ssock < 0)
		return;
	len = wake_addr(l, &a);
	(void)!sendto(host_shm.ssock, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL,
		      (struct sockaddr *)&a, len);
}

enum { WAIT_FUTEX = 1, WAIT_POLL = 2 };

/* Tells local rank l that our ring with it changed. */
static void notify(int l)
{
	dri_seg_rank *b = blk(l);
	uint64_t bit = 1ull << (host_shm.me % 64), *w = &b->ready[host_shm.me / 64];
	uint32_t waiting;

	if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & bit))
		__atomic_fetch_or(w, bit, __ATOMIC_SEQ_CST);
	else
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	waiting = __atomic_load_n(&b->waiting, __ATOMIC_SEQ_CST);
	if (waiting) {
		__atomic_fetch_add(&b->doorbell, 1, __ATOMIC_SEQ_CST);
		futex(&b->doorbell, FUTEX_WAKE, 1, NULL);
	}
	if (waiting == WAIT_POLL)
		wake_poller(l);
}

size_t dri_shm_sendv(int peer, const struct iovec *iov, int n, int all)
{
	int l = host_shm.local[peer];
	dri_seg_ring *rg = ring(host_shm.me, l);
	uint64_t size = host_shm.h->ring_size, tail = rg->tail;
	uint64_t head = __atomic_load_n(&rg->head, __ATOMIC_ACQUIRE);
	size_t room = (size_t)(size - (tail - head)), want = 0, put = 0;

	for (int k = 0; k < n; k++)
		want += iov[k].iov_len;
	if (room < want) {
		/* Full: the reader sets our bit when it makes room.  Look
		 * again after raising the flag, in case it just did. */
		__atomic_store_n(&rg->send_blocked, 1, __ATOMIC_SEQ_CST);
		head = __atomic_load_n(&rg->head, __ATOMIC_SEQ_CST);
		room = (size_t)(size - (tail - head));
	}
	if (all && room < want)
		return 0;
	for (int k = 0; k < n && put < room; k++) {
		const unsigned char *src = iov[k].iov_base;
		size_t len = iov[k].iov_len;

		if (len > room - put)
			len = room - put;
		while (len) {
			size_t at = (size_t)((tail + put) & (size - 1));
			size_t c = size - at < len ? size - at : len;

			dri_copy(rg->data + at, src, c);
			src += c;
			len -= c;
			put += c;
		}
	}
	if (put) {
		__atomic_store_n(&rg->tail, tail + put, __ATOMIC_SEQ_CST);
		notify(l);
	}
	return put;
}

size_t dri_shm_recv(int peer, void *buf, size_t len)
{
	int l = host_shm.local[peer];
	dri_seg_ring *rg = ring(l, host_shm.me);
	uint64_t size = host_shm.h->ring_size, head = rg->head;
	uint64_t avail = __atomic_load_n(&rg->tail, __ATOMIC_ACQUIRE) - head;
	unsigned char *dst = buf;
	size_t got = 0;

	if (avail > size)
		avail = 0; /* torn: only a peer writing garbage; never read it */
	if (len > avail)
		len = (size_t)avail;
	while (got < len) {
		size_t at = (size_t)((head + got) & (size - 1));
		size_t c = size - at < len - got ? size - at : len - got;

		dri_copy(dst + got, rg->data + at, c);
		got += c;
	}
	if (got) {
		__atomic_store_n(&rg->head, head + got, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&rg->send_blocked, __ATOMIC_SEQ_CST) &&
		    __atomic_exchange_n(&rg->send_blocked, 0, __ATOMIC_SEQ_CST))
			notify(l);
	}
	return got;
}

int dri_shm_ready(int *out, int max)
{
	dri_seg_rank *b;
	int n = 0;

	if (!host_shm.h)
		return 0;
	b = blk(host_shm.me);
	for (uint32_t w = 0; w < (host_shm.h->nranks + 63) / 64 && n < max; w++) {
		uint64_t x;

		if (!__atomic_load_n(&b->ready[w], __ATOMIC_RELAXED))
			continue;
		x = __atomic_exchange_n(&b->ready[w], 0, __ATOMIC_SEQ_CST);
		while (x) {
			int l = (int)(w * 64) + __builtin_ctzll(x);

			x &= x - 1;
			if (host_shm.world[l] >= 0 && n < max)
				out[n++] = host_shm.world[l];
			else if (host_shm.world[l] >= 0) /* no room: keep it for later */
				__atomic_fetch_or(&b->ready[w], 1ull << (l % 64),
						  __ATOMIC_SEQ_CST);
		}
	}
	return n;
}

/* ---------------------------------------------------------- waiting */

dr_err dri_shm_aborted(char *msg, size_t size)
{
	dri_seg_hdr *h = host_shm.h ? host_shm.h : dri_seg_get();
	int32_t e;

	if (!h || !__atomic_load_n(&h->abort, __ATOMIC_ACQUIRE))
		return DR_OK;
	e = h->abort_err;
	snprintf(msg, size, "%.*s", DRI_SEG_ABORT_MSG, h->abort_msg);
	return e > DR_OK && e < DR_ERR_COUNT_ ? (dr_err)e : DR_EPEER;
}

void dri_shm_watch(int peer)
{
	int32_t pid;
	int fd;

	if (!dri_shm_is_peer(peer) || host_shm.pidfd[peer] != W_OFF)
		return;
	pid = __atomic_load_n(&blk(host_shm.local[peer])->pid, __ATOMIC_ACQUIRE);
	if (pid <= 0)
		return;
	fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (fd < 0) {
		/* A peer that is already gone must not go unwatched (it may
		 * have exited between two calls, and been reaped), nor one we
		 * cannot get a pidfd for: the launcher's abort word is raised
		 * only for a rank that failed, not for one that returned 0. */
		host_shm.pidfd[peer] = errno == ESRCH ? W_GONE : W_PID;
		host_shm.nslow++;
		return;
	}
	/* The pidfds go into one epoll set, so that a look at all of them
	 * is one call: a rank of 256 watches up to 255, and a poll() each
	 * every DEATH_CHECK_MS was a third of a busy job's time.  No set,
	 * or no room in it: watched by kill(). */
	if (host_shm.epfd < 0)
		host_shm.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (host_shm.epfd < 0 ||
	    epoll_ctl(host_shm.epfd, EPOLL_CTL_ADD, fd,
		      &(struct epoll_event){ .events = EPOLLIN,
					     .data.u32 = (uint32_t)peer })) {
		close(fd);
		host_shm.pidfd[peer] = W_PID;
		host_shm.nslow++;
		return;
	}
	host_shm.pidfd[peer] = fd;
}

/* Whether the process of peer i, watched without a pidfd, has exited. */
static int peer_gone(int i)
{
	int32_t pid;

	if (host_shm.pidfd[i] == W_GONE)
		return 1;
	if (host_shm.pidfd[i] != W_PID)
		return 0;
	/* Without a pidfd: gone once reaped (a zombie still answers, but
	 * its parent, distrun or another launcher, reaps it at once). */
	pid = __atomic_load_n(&blk(host_shm.local[i])->pid, __ATOMIC_ACQUIRE);
	return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

int dri_shm_dead_peer(int64_t now_ms)
{
	struct epoll_event ev;

	if (!host_shm.pidfd || now_ms < host_shm.next_check)
		return -1;
	host_shm.next_check = now_ms + DEATH_CHECK_MS;
	if (host_shm.epfd >= 0 && epoll_wait(host_shm.epfd, &ev, 1, 0) == 1 &&
	    (int)ev.data.u32 < host_shm.size &&
	    host_shm.pidfd[ev.data.u32] >= 0) {
		int i = (int)ev.data.u32;

		close(host_shm.pidfd[i]); /* and so out of the set */
		host_shm.pidfd[i] = W_SEEN;
		return i;
	}
	for (int i = 0; host_shm.nslow && i < host_shm.size; i++)
		if (peer_gone(i)) {
			host_shm.pidfd[i] = W_SEEN;
			host_shm.nslow--;
			return i;
		}
	return -1;
}

static int has_ready(const dri_seg_rank *b)
{
	for (uint32_t w = 0; w < (host_shm.h->nranks + 63) / 64; w++)
		if (__atomic_load_n(&b->ready[w], __ATOMIC_SEQ_CST))
			return 1;
	return 0;
}

int dri_shm_wait(int64_t timeout_ms)
{
	dri_seg_rank *b = blk(host_shm.me);
	struct timespec ts;
	uint32_t d;
	long rc = 0;

	if (timeout_ms > DEATH_CHECK_MS)
		timeout_ms = DEATH_CHECK_MS;
	if (timeout_ms < 1)
		timeout_ms = 1;
	ts.tv_sec = timeout_ms / 1000;
	ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000;
	d = __atomic_load_n(&b->doorbell, __ATOMIC_SEQ_CST);
	__atomic_store_n(&b->waiting, WAIT_FUTEX, __ATOMIC_SEQ_CST);
	/* host_shm.want is set by the thread that waits on a flag, maybe another
	 * one: a stale pair only skips one sleep or takes one. */
	const uint64_t *want = __atomic_load_n(&host_shm.want, __ATOMIC_SEQ_CST);
	uint64_t want_val = __atomic_load_n(&host_shm.want_val, __ATOMIC_SEQ_CST);
	if (!has_ready(b) && !__atomic_load_n(&host_shm.h->abort, __ATOMIC_SEQ_CST) &&
	    !(want && __atomic_load_n(want, __ATOMIC_SEQ_CST) >= want_val))
		rc = futex(&b->doorbell, FUTEX_WAIT, d, &ts);
	__atomic_store_n(&b->waiting, 0, __ATOMIC_RELAXED);
	return !(rc < 0 && errno == ETIMEDOUT);
}

int dri_shm_poll_fd(void)
{
	return host_shm.on ? host_shm.wsock : -1;
}

int dri_shm_poll_arm(int on)
{
	dri_seg_rank *b;

	if (!host_shm.h || host_shm.wsock < 0)
		return 0;
	b = blk(host_shm.me);
	if (!on) {
		__atomic_store_n(&b->waiting, 0, __ATOMIC_RELAXED);
		return 0;
	}
	__atomic_store_n(&b->waiting, WAIT_POLL, __ATOMIC_SEQ_CST);
	return has_ready(b) || __atomic_load_n(&host_shm.h->abort, __ATOMIC_SEQ_CST);
}

void dri_shm_wake(void)
{
	dri_seg_rank *b;

	if (!host_shm.h)
		return;
	b = blk(host_shm.me);
	__atomic_fetch_add(&b->doorbell, 1, __ATOMIC_SEQ_CST);
	futex(&b->doorbell, FUTEX_WAKE, 1, NULL);
}

/* ------------------------------------- collectives (coll_shm.c) */

unsigned dri_shm_generation(void)
{
	return host_shm.generation;
}

int dri_shm_all_local(void)
{
	return host_shm.on && host_shm.h && host_shm.h->coll_half && host_shm.size > 1 &&
	       host_shm.npeers == host_shm.size - 1;
}

dri_seg_rank *dri_shm_blk(int peer)
{
	return blk(host_shm.local ? (peer == host_shm.rank ? host_shm.me : host_shm.local[peer]) : host_shm.me);
}

void *dri_shm_slot(int peer, int half)
{
	int l = peer == host_shm.rank ? host_shm.me : host_shm.local[peer];

	return (unsigned char *)host_shm.h + host_shm.h->coll_off +
	       (2 * (uint64_t)l + (uint64_t)half) * host_shm.h->coll_half;
}

size_t dri_shm_slot_bytes(void)
{
	return host_shm.h ? (size_t)host_shm.h->coll_half : 0;
}

void dri_shm_ring_peer(int peer)
{
	dri_seg_rank *b;

	if (peer == host_shm.rank || !dri_shm_is_peer(peer))
		return;
	b = blk(host_shm.local[peer]);
	if (__atomic_load_n(&b->waiting, __ATOMIC_SEQ_CST)) {
		__atomic_fetch_add(&b->doorbell, 1, __ATOMIC_SEQ_CST);
		futex(&b->doorbell, FUTEX_WAKE, 1, NULL);
	}
}

void dri_shm_want(const uint64_t *word, uint64_t val)
{
	__atomic_store_n(&host_shm.want_val, val, __ATOMIC_SEQ_CST);
	__atomic_store_n(&host_shm.want, word, __ATOMIC_SEQ_CST);
}

int dri_shm_pending(void)
{
	return has_ready(blk(host_shm.me)) ||
	       __atomic_load_n(&host_shm.h->abort, __ATOMIC_ACQUIRE);
}

int dri_shm_read_call(int peer, int k, uint64_t seq, uint64_t phase,
		      dri_msg_id *id)
{
	if (!dri_shm_is_peer(peer) || k < 0 || k >= DRI_SEG_CALLS)
		return 0;
	return dri_shm_read_blk(blk(host_shm.local[peer]), k, seq, phase, id);
}

int dri_shm_read_rec(int peer, int k, uint64_t seq, uint64_t phase,
		     dri_msg_id *id)
{
	if (!dri_shm_is_peer(peer) || k < 0 || k >= DRI_SEG_CALLS)
		return 0;
	return dri_shm_read_at(&blk(host_shm.local[peer])->call[k].c, seq, phase, id);
}

int dri_shm_peer_call(int peer, uint64_t seq, dri_msg_id *id)
{
	for (int k = 0; k < DRI_SEG_CALLS; k++)
		if (dri_shm_read_call(peer, k, seq, 0, id))
			return 1;
	return 0;
}
