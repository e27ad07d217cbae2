/*
 * shm_check.c - the per-job segment and the shared-memory transport as a
 * rank sees them: `distrun -n N build/tests/shm_check MODE [ARG]`.
 *
 *   info          prints "rank R: transport T" and, with a segment, its
 *                 rank count, this rank's slot and the segment's size;
 *                 checks that its control block is where the layout says
 *                 and that the API refuses slots out of range
 *   kill BYTES [COLL]
 *                 all_reduce (or COLL: broadcast, reduce, all_gather,
 *                 all_to_all_v, barrier) of
 *                 BYTES bytes (float32) in a loop; after
 *                 three rounds the last rank SIGKILLs itself at the start
 *                 of the fourth; the others print the error they get
 *                 ("rank R: DR_EPEER: ...") and exit 0 if it is DR_EPEER
 *                 (they ignore SIGTERM, which distrun sends them at once)
 *   exit0         the last rank _exit(0)s after a barrier, without a word;
 *                 the others' next barrier must fail with DR_EPEER
 *   hold          init, barrier, prints "rank R: holding pid P segment
 *                 inode I", then sleeps until killed (for the tests that
 *                 kill a rank, distrun or everything)
 *   rss           prints "rank R: rss KB" (VmRSS) and "rank R: pss KB"
 *                 (its proportional share of them) after init and a few
 *                 collectives (small, and a 1 MiB all_reduce), for the
 *                 benchmark's RSS figures
 *   exact MAX     every collective at sizes up to MAX bytes per rank, with
 *                 float32 values whose sum depends on the order it is
 *                 taken in: each rank checks every element bit for bit
 *                 against the sum in rank order (0, 1, ... p-1) it
 *                 computes itself, and the data collectives against the
 *                 values sent (all_to_all_v with pieces of 0, n/2 and n
 *                 elements, by sender and receiver); prints
 *                 "rank R: exact ok"
 *   a2av MAX      only all_to_all_v, as exact runs it, at sizes up to MAX
 *                 bytes per rank; prints "rank R: a2av ok"
 *   differ KIND   rank size/2 calls something else than the others'
 *                 all_reduce(count=8): KIND count (count 9), or msgs
 *                 (monitored_barrier, which goes as messages); or than their
 *                 broadcast(count=8, root=0), a rooted call that may
 *                 return before the others have seen it: KIND root
 *                 (it takes itself for the root), bcount (count 9),
 *                 reduce (a reduce to rank 0), or swap (every rank r
 *                 broadcasts from rank r + 1: all wait); or than
 *                 their reduce or gather to rank 0: KIND rroots (it
 *                 reduces to itself: two roots wait for every rank),
 *                 groots (it gathers to itself), rgroots (it reduces to
 *                 itself, the others gather); or KIND big:
 *                 an all_gather of 16385 floats a rank against the
 *                 others' 16384 (single copy); or KIND a2av, a2av_big:
 *                 an all_to_all_v in which rank size/2 sends rank 0 one
 *                 element more than rank 0 expects (4, or 16384 floats a
 *                 piece: the slots, the single copy); then up to 3
 *                 barriers (differ KIND allreduce: 4 B all_reduces);
 *                 every rank prints the first error it gets and exits 0
 *                 on DR_EMISMATCH
 *   rooted ITERS  ITERS rounds of a broadcast, a reduce, a gather and a
 *                 scatter, the root going round the ranks, sizes from
 *                 4 B to 1.2 MiB per rank (120 KiB beyond 8 ranks),
 *                 nothing else between: every value checked; prints
 *                 "rank R: rooted ok"
 *   bye HOW BYTES [COLL]
 *                 as kill, but the last rank leaves on purpose at the
 *                 start of the fourth round: HOW destroy (it destroys
 *                 the group, then stays 2 s: only its goodbye tells),
 *                 return (it returns from main without a destroy: the
 *                 library's atexit says goodbye, then the process
 *                 exits 0); the others must get DR_EPEER as for kill
 *   leave KIND    the writers of a rooted call leave (destroy, exit 0)
 *                 right after it, the readers come 0.3 s later and must
 *                 get the data: KIND bcast (rank 0 broadcasts), reduce
 *                 (all but the last rank reduce to it); the writers
 *                 print "rank R: left", the readers "rank R: leave ok"
 *   stacked ITERS every rank moves onto the CPU rank 0 runs on (an
 *                 affinity of that CPU alone), runs barriers for 20 ms,
 *                 then allows itself its CPUs again and runs ITERS
 *                 barriers: ranks that do not outnumber the CPUs must
 *                 end on CPUs of their own (the kernel would leave them queued on one
 *                 for 10 ms and more), ranks that outnumber them no
 *                 more than their share on any; rank 0 prints "rank 0:
 *                 cpus C0 C1 ..." and every rank exits 1 if not
 *   late SECONDS  the last rank sleeps SECONDS before a 64 MiB all_reduce;
 *                 the others print the error they get and exit 0 on
 *                 DR_ETIMEDOUT (run with a short --timeout)
 *
 * With SHM_CHECK_NODUMP set, a rank makes itself non-dumpable before init
 * (then only a process with CAP_SYS_PTRACE may read its memory).
 *
 * Anything unexpected prints "rank R: ..." on stderr and exits 1.
 */
#include <distrun.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "seg.h"

static int rank, size;

#include "check.h"

static int mode_info(void)
{
	dri_seg_hdr *h = dri_seg_get();
	const char *t = dr_transport_name();

	if (!t)
		DIE("dr_transport_name() is NULL after init");
	printf("rank %d: transport %s\n", rank, t);
	if (h) {
		int l = dri_seg_local_rank();
		char *ctl = dri_seg_ctl(l);

		if (l < 0 || ctl != (char *)h + h->ctl_off +
					    (size_t)l * DRI_CTL_SIZE)
			DIE("control block of slot %d at the wrong place", l);
		if (dri_seg_ctl(-1) || dri_seg_ctl((int)h->nranks))
			DIE("dri_seg_ctl accepts a slot out of range");
		printf("rank %d: segment ranks %u slot %d size %llu launcher %s\n",
		       rank, h->nranks, l, (unsigned long long)h->size,
		       h->launcher_pid > 0 ? "distrun" : "none");
	} else {
		printf("rank %d: no segment (%s)\n", rank, dri_seg_why());
	}
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	return 0;
}

/* how: NULL (SIGKILL), "destroy" or "return" (mode bye). */
static int mode_kill(size_t bytes, const char *coll, const char *how)
{
	size_t count = bytes / 4 ? bytes / 4 : 1;
	float *buf = calloc(count * (size_t)(size + 1), sizeof(float));

	if (!buf)
		DIE("out of memory");
	for (int it = 0;; it++) {
		dr_err e;

		if (it == 3 && rank == size - 1) {
			fflush(stdout);
			if (!how)
				raise(SIGKILL);
			if (!strcmp(how, "return"))
				exit(0); /* as a return from main */
			TRY(dr_destroy_process_group());
			sleep(2);
			_exit(0);
		}
		if (!strcmp(coll, "broadcast"))
			e = dr_broadcast(buf, count, DR_FLOAT32, 0, NULL, NULL);
		else if (!strcmp(coll, "reduce"))
			e = dr_reduce(buf, count, DR_FLOAT32, DR_SUM, 0, NULL,
				      NULL);
		else if (!strcmp(coll, "all_gather"))
			e = dr_all_gather(buf, buf + count, count, DR_FLOAT32,
					  NULL, NULL);
		else if (!strcmp(coll, "barrier"))
			e = dr_barrier(NULL, NULL, NULL, 0);
		else if (!strcmp(coll, "all_to_all_v")) {
			size_t piece[2 * 64];

			if (size > 64)
				DIE("all_to_all_v kill runs on at most 64 ranks");
			for (int i = 0; i < 2 * size; i++)
				piece[i] = count / (size_t)size;
			e = dr_all_to_all_v(buf, piece, buf + count, piece + size,
					    DR_FLOAT32, NULL, NULL);
		} else
			e = dr_all_reduce(buf, count, DR_FLOAT32, DR_SUM, NULL,
					  NULL);
		if (e) {
			printf("rank %d: %s: %s\n", rank, dr_err_name(e),
			       dr_last_error());
			fflush(stdout);
			_exit(e == DR_EPEER ? 0 : 1);
		}
		if (it > 1000)
			DIE("all_reduce went on without the dead rank");
	}
}

static int mode_stacked(int iters)
{
	cpu_set_t had, one;
	int32_t cpu = sched_getcpu(), cpus[64];
	struct timespec t0, t1;
	char line[512];
	size_t at;
	int ncpu;

	if (size > 64 || cpu < 0 || sched_getaffinity(0, sizeof(had), &had))
		DIE("stacked: at most 64 ranks, a CPU number and an affinity mask");
	TRY(dr_broadcast(&cpu, 1, DR_INT32, 0, NULL, NULL));
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		DIE("sched_setaffinity(CPU %d): %s", (int)cpu, strerror(errno));
	/* Barriers for 20 ms there: longer than a rank waits between two
	 * moves (coll_shm.c: MOVE_MS), so a move at the first call does not
	 * hold back the one this test wants. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int32_t more = 1; more;) {
		TRY(dr_barrier(NULL, NULL, NULL, 0));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		more = (t1.tv_sec - t0.tv_sec) * 1000000000L +
		       (t1.tv_nsec - t0.tv_nsec) < 20000000L;
		TRY(dr_broadcast(&more, 1, DR_INT32, 0, NULL, NULL));
	}
	if (sched_setaffinity(0, sizeof(had), &had))
		DIE("sched_setaffinity back: %s", strerror(errno));
	for (int i = 0; i < iters; i++)
		TRY(dr_barrier(NULL, NULL, NULL, 0));
	cpu = sched_getcpu();
	TRY(dr_all_gather(&cpu, cpus, 1, DR_INT32, NULL, NULL));
	at = (size_t)snprintf(line, sizeof(line), "rank %d: cpus", rank);
	for (int i = 0; i < size && at < sizeof(line); i++)
		at += (size_t)snprintf(line + at, sizeof(line) - at, " %d",
				       (int)cpus[i]);
	if (!rank)
		printf("%s\n", line);
	ncpu = CPU_COUNT(&had);
	if (size > ncpu) {
		/* More ranks than CPUs: none may have more than its share. */
		for (int i = 0; i < size; i++) {
			int n = 0;

			for (int j = 0; j < size; j++)
				n += cpus[j] == cpus[i];
			if (n > (size + ncpu - 1) / ncpu)
				DIE("%d ranks still share CPU %d after %d "
				    "barriers (%d CPUs)", n, (int)cpus[i],
				    iters, ncpu);
		}
		return 0;
	}
	for (int i = 0; i < size; i++)
		for (int j = i + 1; j < size; j++)
			if (cpus[i] == cpus[j])
				DIE("ranks %d and %d still share CPU %d after "
				    "%d barriers", i, j, (int)cpus[i], iters);
	return 0;
}

static int mode_exit0(void)
{
	dr_err e;

	TRY(dr_barrier(NULL, NULL, NULL, 0));
	if (rank == size - 1)
		_exit(0);
	e = dr_barrier(NULL, NULL, NULL, 0);
	printf("rank %d: %s: %s\n", rank, dr_err_name(e), dr_last_error());
	fflush(stdout);
	_exit(e == DR_EPEER ? 0 : 1);
}

static int mode_rss(void)
{
	float x[1024] = { 0 };
	size_t big = (1u << 20) / sizeof(float);
	float *y = calloc(big, sizeof(float));
	char line[256];
	FILE *f;

	if (!y)
		DIE("out of memory");
	for (int i = 0; i < 10; i++) {
		TRY(dr_all_reduce(x, 1024, DR_FLOAT32, DR_SUM, NULL, NULL));
		TRY(dr_barrier(NULL, NULL, NULL, 0));
	}
	/* and a large one: the slots of every rank, or the ring's scratch */
	TRY(dr_all_reduce(y, big, DR_FLOAT32, DR_SUM, NULL, NULL));
	free(y);
	f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			printf("rank %d: rss %ld KB\n", rank, atol(line + 6));
	if (f)
		fclose(f);
	/* The proportional share: a page of the segment mapped by k ranks
	 * counts 1/k here (RSS counts it whole in each, and the kernel maps
	 * up to 16 pages around each one a rank reads). */
	f = fopen("/proc/self/smaps_rollup", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Pss:", 4))
			printf("rank %d: pss %ld KB\n", rank, atol(line + 4));
	if (f)
		fclose(f);
	return 0;
}

/* Element i of rank r's data: magnitudes from 2^-12 to 2^12 and both
 * signs, so that a float sum rounds differently in another order. */
static float val(int r, size_t i)
{
	float m = 1.0f + (float)((r * 7919 + i * 104729) % 1000) / 1000.0f;
	int e = (int)((r + i) % 3) * 12 - 12;

	m = ldexpf(m, e);
	return (r + i) % 2 ? -m : m;
}

/* The sum of element i over ranks 0 .. size-1, of data block j, in rank
 * order. */
static float sum_in_order(size_t i)
{
	volatile float acc = val(0, i);

	for (int r = 1; r < size; r++)
		acc = acc + val(r, i);
	return acc;
}

static void expect(const char *what, size_t count, const float *got,
		   float (*want)(size_t, void *), void *arg)
{
	for (size_t i = 0; i < count; i++) {
		float w = want(i, arg);

		if (memcmp(&w, &got[i], sizeof(w)))
			DIE("%s count %zu: element %zu is %.9g, want %.9g", what,
			    count, i, (double)got[i], (double)w);
	}
}

static float want_sum(size_t i, void *arg)
{
	return sum_in_order(i + *(size_t *)arg);
}

/* block b of element i: rank b's element off + i */
struct from { int r; size_t off; };
static float want_val(size_t i, void *arg)
{
	const struct from *f = arg;

	return val(f->r, f->off + i);
}

/* all_to_all_v's piece from rank i to rank j: 0, n/2 or n elements */
static size_t a2av_piece(int i, int j, size_t n)
{
	return n * (size_t)((i + 2 * j) % 3) / 2;
}

/* An all_to_all_v of uneven pieces (a2av_piece) of a (at least n * size
 * floats) into b, every piece checked; DR_OK or the call's error. */
static dr_err a2av_uneven(float *a, float *b, size_t n)
{
	size_t *sc = calloc(2 * (size_t)size, sizeof(size_t)), *rc = sc + size;
	size_t got = 0;
	dr_err err;

	if (!sc)
		DIE("out of memory");
	for (int j = 0; j < size; j++) {
		sc[j] = a2av_piece(rank, j, n);
		rc[j] = a2av_piece(j, rank, n);
	}
	for (size_t i = 0; i < n * (size_t)size; i++)
		a[i] = val(rank, i);
	if ((err = dr_all_to_all_v(a, sc, b, rc, DR_FLOAT32, NULL, NULL))) {
		free(sc);
		return err;
	}
	for (int i = 0; i < size; i++) {
		size_t src = 0;

		for (int j = 0; j < rank; j++)
			src += a2av_piece(i, j, n);
		expect("all_to_all_v", rc[i], b + got, want_val,
		       &(struct from){ i, src });
		got += rc[i];
	}
	free(sc);
	return DR_OK;
}

static int mode_exact(size_t max)
{
	size_t counts[] = { 1, 2, 7, 100, 1000, 4099, 65536, 300001, 4u << 20 };
	float *a = malloc(max * (size_t)size + 64), *b = malloc(max * (size_t)size + 64);

	if (!a || !b)
		DIE("out of memory");
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		size_t n = counts[k], zero = 0;
		int last = size - 1;

		if (n * 4 > max)
			break;
		for (size_t i = 0; i < n; i++)
			a[i] = val(rank, i);
		TRY(dr_all_reduce(a, n, DR_FLOAT32, DR_SUM, NULL, NULL));
		expect("all_reduce", n, a, want_sum, &zero);

		for (size_t i = 0; i < n; i++)
			a[i] = val(rank, i);
		TRY(dr_reduce(a, n, DR_FLOAT32, DR_SUM, last, NULL, NULL));
		if (rank == last)
			expect("reduce", n, a, want_sum, &zero);
		else
			expect("reduce (not the root's, kept)", n, a, want_val,
			       &(struct from){ rank, 0 });

		for (size_t i = 0; i < n * (size_t)size; i++)
			a[i] = val(rank, i);
		TRY(dr_reduce_scatter(a, b, n, DR_FLOAT32, DR_SUM, NULL, NULL));
		{
			size_t off = (size_t)rank * n;
			expect("reduce_scatter", n, b, want_sum, &off);
		}

		for (size_t i = 0; i < n; i++)
			a[i] = rank == 1 % size ? val(1, i) : 0;
		TRY(dr_broadcast(a, n, DR_FLOAT32, 1 % size, NULL, NULL));
		expect("broadcast", n, a, want_val, &(struct from){ 1 % size, 0 });

		for (size_t i = 0; i < n; i++)
			a[i] = val(rank, i);
		TRY(dr_all_gather(a, b, n, DR_FLOAT32, NULL, NULL));
		for (int r = 0; r < size; r++)
			expect("all_gather", n, b + (size_t)r * n, want_val,
			       &(struct from){ r, 0 });
		TRY(dr_gather(a, b, n, DR_FLOAT32, last, NULL, NULL));
		for (int r = 0; rank == last && r < size; r++)
			expect("gather", n, b + (size_t)r * n, want_val,
			       &(struct from){ r, 0 });

		for (size_t i = 0; i < n * (size_t)size; i++)
			a[i] = val(rank, i);
		TRY(dr_scatter(a, b, n, DR_FLOAT32, 0, NULL, NULL));
		expect("scatter", n, b, want_val,
		       &(struct from){ 0, (size_t)rank * n });
		TRY(dr_all_to_all(a, b, n, DR_FLOAT32, NULL, NULL));
		for (int r = 0; r < size; r++)
			expect("all_to_all", n, b + (size_t)r * n, want_val,
			       &(struct from){ r, (size_t)rank * n });
		TRY(a2av_uneven(a, b, n));
		TRY(dr_barrier(NULL, NULL, NULL, 0));
	}
	printf("rank %d: exact ok\n", rank);
	free(a);
	free(b);
	return 0;
}

static int mode_a2av(size_t max)
{
	size_t counts[] = { 1, 7, 1000, 65536, 300001, 4u << 20 };
	float *a = malloc(max * (size_t)size + 64), *b = malloc(max * (size_t)size + 64);

	if (!a || !b)
		DIE("out of memory");
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
		if (counts[k] * 4 <= max)
			TRY(a2av_uneven(a, b, counts[k]));
	printf("rank %d: a2av ok\n", rank);
	free(a);
	free(b);
	return 0;
}

static int mode_differ(const char *kind, int then_ar)
{
	float buf[16] = { 0 }, got[32 * 16];
	size_t counts[64];
	/* rooted kinds: 8 floats, or with "small-" 4 (16 bytes: the data
	 * rides in the writer's record of the call) */
	size_t bc = strncmp(kind, "small-", 6) ? 8 : 4;
	dr_err e;

	kind += bc == 4 ? 6 : 0;
	for (int i = 0; i < 64; i++)
		counts[i] = 0;
	if (size > 32)
		DIE("differ runs on at most 32 ranks");
	counts[0] = counts[size] = 1; /* rank 0's piece, both ways */
	/* A rank that sees the mismatch may abort while another is still
	 * leaving this barrier (in a tree, the release travels down): that
	 * one reports it here. */
	e = dr_barrier(NULL, NULL, NULL, 0);
	if (!e && strcmp(kind, "count") && strcmp(kind, "msgs") &&
	    strcmp(kind, "tiny") && strcmp(kind, "big") &&
	    strncmp(kind, "a2av", 4)) {
		/* rooted: the error may come at a later call */
		int odd = rank == size / 2;

		if (!strcmp(kind, "rroots") || !strcmp(kind, "rgroots"))
			e = odd ? dr_reduce(buf, bc, DR_FLOAT32, DR_SUM, rank,
					    NULL, NULL)
			  : kind[1] == 'r' ? dr_reduce(buf, bc, DR_FLOAT32,
						       DR_SUM, 0, NULL, NULL)
			  : dr_gather(buf, got, bc, DR_FLOAT32, 0, NULL, NULL);
		else if (!strcmp(kind, "groots"))
			e = dr_gather(buf, got, bc, DR_FLOAT32, odd ? rank : 0,
				      NULL, NULL);
		else if (!strcmp(kind, "swap"))
			e = dr_broadcast(buf, bc, DR_FLOAT32, (rank + 1) % size,
					 NULL, NULL);
		else if (!strcmp(kind, "rop")) /* the root sees it at once */
			e = dr_reduce(buf, bc, DR_FLOAT32, odd ? DR_MAX : DR_SUM,
				      0, NULL, NULL);
		else if (!odd)
			e = dr_broadcast(buf, bc, DR_FLOAT32, 0, NULL, NULL);
		else if (!strcmp(kind, "root"))
			e = dr_broadcast(buf, bc, DR_FLOAT32, rank, NULL, NULL);
		else if (!strcmp(kind, "bcount"))
			e = dr_broadcast(buf, bc + 1, DR_FLOAT32, 0, NULL, NULL);
		else if (!strcmp(kind, "reduce"))
			e = dr_reduce(buf, bc, DR_FLOAT32, DR_SUM, 0, NULL, NULL);
		else
			DIE("unknown differ kind '%s'", kind);
		/* then barriers, or (THEN allreduce) all_reduces of 4 B,
		 * which the lean way takes with the rooted call open */
		for (int k = 0; !e && k < 3; k++)
			e = then_ar ? dr_all_reduce(buf, 1, DR_FLOAT32, DR_SUM,
						    NULL, NULL)
				    : dr_barrier(NULL, NULL, NULL, 0);
	} else if (e)
		;
	else if (!strcmp(kind, "big")) { /* 64 KiB a rank: single copy */
		size_t n = rank == size / 2 ? 16385 : 16384;
		float *a = calloc(n * (size_t)(size + 1), sizeof(float));

		if (!a)
			DIE("out of memory");
		e = dr_all_gather(a, a + n, n, DR_FLOAT32, NULL, NULL);
	} else if (!strncmp(kind, "a2av", 4)) {
		/* rank size/2 sends rank 0 one element more than it expects */
		size_t n = strcmp(kind, "a2av_big") ? 4 : 16384;
		size_t sc[32], rc[32];
		float *a = calloc((n + 1) * (size_t)size * 2, sizeof(float));

		if (!a)
			DIE("out of memory");
		for (int j = 0; j < size; j++)
			sc[j] = rc[j] = n;
		if (rank == size / 2 && rank)
			sc[0] = n + 1;
		e = dr_all_to_all_v(a, sc, a + (n + 1) * (size_t)size, rc,
				    DR_FLOAT32, NULL, NULL);
	} else if (!strcmp(kind, "tiny")) /* 8 B against 4 B: on up's line */
		e = dr_all_reduce(buf, rank == size / 2 ? 1 : 2, DR_FLOAT32,
				  DR_SUM, NULL, NULL);
	else if (rank != size / 2)
		e = dr_all_reduce(buf, 8, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(kind, "count"))
		e = dr_all_reduce(buf, 9, DR_FLOAT32, DR_SUM, NULL, NULL);
	else if (!strcmp(kind, "msgs"))
		e = dr_monitored_barrier(NULL, 0, 0);
	printf("rank %d: %s: %s\n", rank, dr_err_name(e), dr_last_error());
	fflush(stdout);
	_exit(e == DR_EMISMATCH ? 0 : 1);
}

static int mode_rooted(int iters)
{
	/* beyond 8 ranks at most 120 KiB a rank: gather's and scatter's
	 * buffers are size times that */
	size_t max = size > 8 ? 30001 : 300001;
	size_t counts[] = { 1, 16, 16384, max };
	float *a = malloc(max * sizeof(float) * (size_t)size);
	float *b = malloc(max * sizeof(float) * (size_t)size);

	if (!a || !b)
		DIE("out of memory");
	for (int it = 0; it < iters; it++) {
		size_t n = counts[it % 4], off = (size_t)it;
		int root = (it + it / 4) % size;

		for (size_t i = 0; i < n; i++)
			a[i] = rank == root ? val(root, off + i) : 0;
		TRY(dr_broadcast(a, n, DR_FLOAT32, root, NULL, NULL));
		expect("broadcast", n, a, want_val, &(struct from){ root, off });
		for (size_t i = 0; i < n; i++)
			a[i] = val(rank, off + i);
		TRY(dr_reduce(a, n, DR_FLOAT32, DR_SUM, root, NULL, NULL));
		if (rank == root)
			expect("reduce", n, a, want_sum, &off);
		else
			expect("reduce (not the root's, kept)", n, a, want_val,
			       &(struct from){ rank, off });
		/* 8 B all_reduces on up's line around a 4 B broadcast: the
		 * root goes on at once and must not overwrite its data of two
		 * phases ago before the others have read it */
		for (int k = 0; k < 2; k++) {
			for (size_t i = 0; i < 2; i++)
				a[i] = val(rank, off + 7 * (size_t)k + i);
			TRY(dr_all_reduce(a, 2, DR_FLOAT32, DR_SUM, NULL, NULL));
			expect("all_reduce (8 B, between rooted calls)", 2, a,
			       want_sum, &(size_t){ off + 7 * (size_t)k });
			if (k)
				break;
			a[0] = rank == root ? val(root, off) : 0;
			TRY(dr_broadcast(a, 1, DR_FLOAT32, root, NULL, NULL));
			expect("broadcast (4 B)", 1, a, want_val,
			       &(struct from){ root, off });
		}
		for (size_t i = 0; i < n; i++)
			a[i] = val(rank, off + i);
		TRY(dr_gather(a, b, n, DR_FLOAT32, root, NULL, NULL));
		for (int r = 0; rank == root && r < size; r++)
			expect("gather", n, b + (size_t)r * n, want_val,
			       &(struct from){ r, off });
		for (size_t i = 0; i < n * (size_t)size; i++)
			a[i] = rank == root ? val(root, off + i) : 0;
		TRY(dr_scatter(a, b, n, DR_FLOAT32, root, NULL, NULL));
		expect("scatter", n, b, want_val,
		       &(struct from){ root, off + (size_t)rank * n });
	}
	printf("rank %d: rooted ok\n", rank);
	free(a);
	free(b);
	return 0;
}

static int mode_leave(const char *kind)
{
	enum { N = 1024 };
	static float a[N];
	int bcast = !strcmp(kind, "bcast"), last = size - 1, zero = 0;
	int writer = bcast ? rank == 0 : rank != last;

	if (!bcast && strcmp(kind, "reduce"))
		DIE("unknown leave kind '%s'", kind);
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	for (size_t i = 0; i < N; i++)
		a[i] = val(rank, i);
	/* The writers are most likely gone by then; the test holds either
	 * way. */
	if (!writer)
		usleep(300000);
	if (bcast)
		TRY(dr_broadcast(a, N, DR_FLOAT32, 0, NULL, NULL));
	else
		TRY(dr_reduce(a, N, DR_FLOAT32, DR_SUM, last, NULL, NULL));
	if (writer) {
		printf("rank %d: left\n", rank);
		return 0;
	}
	if (bcast)
		expect("broadcast", N, a, want_val, &(struct from){ 0, 0 });
	else
		expect("reduce", N, a, want_sum, &(size_t){ (size_t)zero });
	printf("rank %d: leave ok\n", rank);
	return 0;
}

static int mode_late(int seconds)
{
	size_t count = (64u << 20) / 4;
	float *buf = calloc(count, sizeof(float));
	dr_err e;

	if (!buf)
		DIE("out of memory");
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	if (rank == size - 1) {
		sleep((unsigned)seconds);
		_exit(0);
	}
	e = dr_all_reduce(buf, count, DR_FLOAT32, DR_SUM, NULL, NULL);
	printf("rank %d: %s: %s\n", rank, dr_err_name(e), dr_last_error());
	fflush(stdout);
	_exit(e == DR_ETIMEDOUT ? 0 : 1);
}

/* The inode of our mapping of the segment, from /proc/self/maps ("-" if
 * none), so a test can look for it in every process's maps later. */
static const char *seg_inode(void)
{
	static char ino[32] = "-";
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long i;

		if (strstr(line, "memfd:distrun-segment") &&
		    sscanf(line, "%*s %*s %*s %*s %llu", &i) == 1) {
			snprintf(ino, sizeof(ino), "%llu", i);
			break;
		}
	}
	if (f)
		fclose(f);
	return ino;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "info";
	int rc = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* A process whose memory others may read only with CAP_SYS_PTRACE
	 * (the single-copy tests drop it). */
	if (getenv("SHM_CHECK_NODUMP") && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
		DIE("prctl(PR_SET_DUMPABLE): %s", strerror(errno));
	/* kill: distrun stops the job at the first failure, the survivors
	 * stay to tell what their call returned.  From before init: a
	 * writer of rooted calls does not wait, so the last rank may die
	 * before a slow one has left init. */
	if (!strcmp(mode, "kill") || !strcmp(mode, "bye"))
		signal(SIGTERM, SIG_IGN);
	TRY(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	size = dr_get_world_size();
	if (!strcmp(mode, "info"))
		rc = mode_info();
	else if (!strcmp(mode, "kill") && argc > 2)
		rc = mode_kill((size_t)strtoull(argv[2], NULL, 0),
			       argc > 3 ? argv[3] : "all_reduce", NULL);
	else if (!strcmp(mode, "bye") && argc > 3)
		rc = mode_kill((size_t)strtoull(argv[3], NULL, 0),
			       argc > 4 ? argv[4] : "all_reduce", argv[2]);
	else if (!strcmp(mode, "differ") && argc > 2)
		rc = mode_differ(argv[2], argc > 3 &&
					  !strcmp(argv[3], "allreduce"));
	else if (!strcmp(mode, "late") && argc > 2)
		rc = mode_late(atoi(argv[2]));
	else if (!strcmp(mode, "exact") && argc > 2)
		rc = mode_exact((size_t)strtoull(argv[2], NULL, 0));
	else if (!strcmp(mode, "a2av") && argc > 2)
		rc = mode_a2av((size_t)strtoull(argv[2], NULL, 0));
	else if (!strcmp(mode, "rooted") && argc > 2)
		rc = mode_rooted(atoi(argv[2]));
	else if (!strcmp(mode, "leave") && argc > 2)
		rc = mode_leave(argv[2]);
	else if (!strcmp(mode, "stacked") && argc > 2)
		rc = mode_stacked(atoi(argv[2]));
	else if (!strcmp(mode, "exit0"))
		rc = mode_exit0();
	else if (!strcmp(mode, "rss"))
		rc = mode_rss();
	else if (!strcmp(mode, "hold")) {
		TRY(dr_barrier(NULL, NULL, NULL, 0));
		printf("rank %d: holding pid %d segment inode %s\n", rank,
		       (int)getpid(), seg_inode());
		for (;;)
			pause();
	} else
		DIE("unknown mode '%s'", mode);
	TRY(dr_destroy_process_group());
	return rc;
}
