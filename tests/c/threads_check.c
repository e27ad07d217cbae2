/*
 * threads_check.c - the library's threads and the program's, as a rank
 * sees them: `distrun -n N build/tests/threads_check MODE [ARG]`.
 *
 *   sigmask   with no signal blocked in the program, init (rank 0 starts
 *             the store's thread), an asynchronous all_reduce (a group's
 *             progress thread) and an isend/irecv pair (the
 *             point-to-point thread): every thread the library started
 *             must block every asynchronous signal (SigBlk in
 *             /proc/self/task/T/status); then 200 process-directed
 *             SIGUSR1 must each run the program's handler on its main
 *             thread.  Prints "rank R: sigmask ok (T library threads)"
 *   scratch N N threads in turn each make a blocking 1 MiB all_reduce
 *             and exit; the process's resident memory must not grow
 *             by the scratch each thread used (a leak: N x ~1 MiB;
 *             under ASan, whose quarantine keeps freed memory resident,
 *             its leak checker finds such a scratch at exit instead;
 *             under TSan, which keeps every finished thread's history,
 *             the plain and ASan builds make this check).
 *             Prints "rank R: scratch ok (grew K KiB over N threads)"
 *
 * Anything else prints "rank R: ..." on stderr and exits 1.
 */
#include <dirent.h>
#include <distrun.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int rank = -1, size;

/* ThreadSanitizer starts a background thread of its own, lazily, at the
 * program's first pthread_create, with every signal blocked. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#include "check.h"

/* Thread ids of this process, into out (up to max); returns how many. */
static int task_ids(int *out, int max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		DIE("opendir /proc/self/task");
	while ((e = readdir(d)) && n < max)
		if (e->d_name[0] != '.')
			out[n++] = atoi(e->d_name);
	closedir(d);
	return n;
}

/* Thread tid's blocked signals (SigBlk), as a bit mask (bit s-1: s). */
static unsigned long long sig_blocked(int tid)
{
	char path[64], line[256];
	unsigned long long m = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
	f = fopen(path, "r");
	if (!f)
		return ~0ull; /* gone meanwhile: nothing to hold against it */
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "SigBlk:", 7))
			m = strtoull(line + 7, NULL, 16);
	fclose(f);
	return m;
}

static volatile sig_atomic_t usr1_count, usr1_elsewhere;
static pid_t main_tid;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_count++;
	if ((pid_t)syscall(SYS_gettid) != main_tid)
		usr1_elsewhere++;
}

static int mode_sigmask(void)
{
	static const int must[] = { SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2,
				    SIGPIPE, SIGALRM, SIGTERM, SIGCHLD, SIGCONT,
				    SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGXCPU,
				    SIGXFSZ, SIGVTALRM, SIGPROF, SIGWINCH, SIGIO,
				    SIGPWR, 34, 40, 50, 64 };
	int before[512], nbefore, now[512], nnow, lib = 0, tsan_own = 0;
	int32_t a = 1, x, y = -1;
	dr_work *w, *ws, *wr;
	struct sigaction sa;
	sigset_t none;

	main_tid = (pid_t)syscall(SYS_gettid);
	sigemptyset(&none);
	if (pthread_sigmask(SIG_SETMASK, &none, NULL))
		DIE("pthread_sigmask");
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL))
		DIE("sigaction");
	nbefore = task_ids(before, 512);
	TRY(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	size = dr_get_world_size();
	x = rank;
	TRY(dr_all_reduce(&a, 1, DR_INT32, DR_SUM, NULL, &w));
	TRY(dr_irecv(&y, 1, DR_INT32, (rank + size - 1) % size, 5, NULL, &wr));
	TRY(dr_isend(&x, 1, DR_INT32, (rank + 1) % size, 5, NULL, &ws));
	/* A thread glibc has just created runs with every signal blocked
	 * until it starts: look once they have. */
	usleep(100 * 1000);
	nnow = task_ids(now, 512);
	for (int i = 0; i < nnow; i++) {
		int old = 0;
		unsigned long long m;

		for (int k = 0; k < nbefore; k++)
			old |= before[k] == now[i];
		if (old)
			continue; /* the program's, or a sanitizer's */
		lib++;
		m = sig_blocked(now[i]);
		for (size_t k = 0; k < sizeof(must) / sizeof(must[0]); k++)
			if (!(m & (1ull << (must[k] - 1))))
				DIE("library thread %d does not block signal %d "
				    "(SigBlk %016llx)", now[i], must[k], m);
		for (int t = 0; t < 100 && (m & (1ull << (SIGSEGV - 1))); t++) {
			usleep(10 * 1000);
			m = sig_blocked(now[i]);
		}
		if ((m & (1ull << (SIGSEGV - 1))) && UNDER_TSAN && !tsan_own) {
			tsan_own = 1; /* one such thread: the sanitizer's */
			lib--;
			continue;
		}
		if (m & (1ull << (SIGSEGV - 1)))
			DIE("library thread %d blocks SIGSEGV: a crash there "
			    "would skip every handler (SigBlk %016llx)", now[i], m);
	}
	if (!lib && size > 1)
		DIE("no library thread found after an asynchronous call");
	for (int i = 0; i < 200; i++) {
		kill(getpid(), SIGUSR1);
		/* delivered before kill returns to an unblocked thread */
	}
	TRY(dr_work_wait(w));
	TRY(dr_work_wait(wr));
	TRY(dr_work_wait(ws));
	dr_work_free(w);
	dr_work_free(wr);
	dr_work_free(ws);
	if (a != size || y != (rank + size - 1) % size)
		DIE("all_reduce gave %d, the ring %d", (int)a, (int)y);
	for (int t = 0; t < 1000 && usr1_count < 200; t++)
		usleep(1000);
	if (usr1_count != 200 || usr1_elsewhere)
		DIE("%d of 200 SIGUSR1 handled, %d of them on a library thread",
		    (int)usr1_count, (int)usr1_elsewhere);
	TRY(dr_destroy_process_group());
	printf("rank %d: sigmask ok (%d library threads)\n", rank, lib);
	return 0;
}

/* Resident memory in KiB. */
static long rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		DIE("fopen /proc/self/status");
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = atol(line + 6);
	fclose(f);
	return kib;
}

#define BIG ((1u << 20) / sizeof(float))

static void *one_call(void *arg)
{
	float *buf = arg;

	for (size_t i = 0; i < BIG; i++)
		buf[i] = 1.0f;
	TRY(dr_all_reduce(buf, BIG, DR_FLOAT32, DR_SUM, NULL, NULL));
	if (buf[BIG - 1] != (float)size)
		DIE("all_reduce gave %g", (double)buf[BIG - 1]);
	return NULL;
}

static int mode_scratch(int n)
{
	float *buf = malloc(BIG * sizeof(float));
	long base = 0, grew;
	pthread_t t;

	if (!buf)
		DIE("out of memory");
	TRY(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	size = dr_get_world_size();
	/* two first, so that what stays (arenas, caches) is there */
	for (int i = 0; i < n + 2; i++) {
		if (i == 2)
			base = rss_kib();
		if (pthread_create(&t, NULL, one_call, buf) || pthread_join(t, NULL))
			DIE("thread %d", i);
	}
	grew = rss_kib() - base;
	/* A leak keeps about 1 MiB a thread; allow an eighth of that.
	 * Under ASan freed memory sits in its quarantine: there its leak
	 * checker, at exit, finds a scratch lost with its thread. */
#if !defined(__SANITIZE_ADDRESS__) && !UNDER_TSAN
	if (grew > (long)n * 1024 / 8) {
		free(buf);
		DIE("resident memory grew by %ld KiB over %d threads", grew, n);
	}
#endif
	TRY(dr_destroy_process_group());
	free(buf);
	printf("rank %d: scratch ok (grew %ld KiB over %d threads)\n", rank,
	       grew, n);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "sigmask"))
		return mode_sigmask();
	if (!strcmp(mode, "scratch") && argc > 2)
		return mode_scratch(atoi(argv[2]));
	DIE("usage: threads_check sigmask | scratch N");
}
