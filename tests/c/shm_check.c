/*
 * shm_check.c - the per-job segment and the shared-memory transport as a
 * rank sees them: `distrun -n N build/tests/shm_check MODE [ARG]`.
 *
 *   info          prints "rank R: transport T" and, with a segment, its
 *                 rank count, this rank's slot and the segment's size;
 *                 checks that its control block is where the layout says
 *                 and that the API refuses slots out of range
 *   kill BYTES    all_reduce of BYTES bytes (float32) in a loop; after
 *                 three rounds the last rank SIGKILLs itself at the start
 *                 of the fourth; the others print the error they get
 *                 ("rank R: DR_EPEER: ...") and exit 0 if it is DR_EPEER
 *                 (they ignore SIGTERM, which distrun sends them at once)
 *   exit0         the last rank _exit(0)s after a barrier, without a word;
 *                 the others' next barrier must fail with DR_EPEER
 *   hold          init, barrier, prints "rank R: holding pid P segment
 *                 inode I", then sleeps until killed (for the tests that
 *                 kill a rank, distrun or everything)
 *   rss           prints "rank R: rss KB" (VmRSS) after init and a few
 *                 collectives, for the benchmark's RSS column
 *
 * Anything unexpected prints "rank R: ..." on stderr and exits 1.
 */
#include <distrun.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seg.h"
#include "seg.h"

static int rank, size;

#define DIE(...)                                                             \
	do {                                                                 \
		fprintf(stderr, "rank %d: ", rank);                          \
		fprintf(stderr, __VA_ARGS__);                                \
		fputc('\n', stderr);                                         \
		exit(1);                                                     \
	} while (0)

#define TRY(call)                                                            \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_)                                                      \
			DIE("%s failed: %s: %s", #call, dr_err_name(e_),     \
			    dr_last_error());                                \
	} while (0)

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

static int mode_kill(size_t bytes)
{
	size_t count = bytes / 4 ? bytes / 4 : 1;
	float *buf = calloc(count, sizeof(float));

	if (!buf)
		DIE("out of memory");
	/* distrun stops the job at the first failure: the survivors stay
	 * to tell what their call returned. */
	signal(SIGTERM, SIG_IGN);
	for (int it = 0;; it++) {
		dr_err e;

		if (it == 3 && rank == size - 1) {
			fflush(stdout);
			raise(SIGKILL);
		}
		e = dr_all_reduce(buf, count, DR_FLOAT32, DR_SUM, NULL, NULL);
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
	char line[256];
	FILE *f;

	for (int i = 0; i < 10; i++) {
		TRY(dr_all_reduce(x, 1024, DR_FLOAT32, DR_SUM, NULL, NULL));
		TRY(dr_barrier(NULL, NULL, NULL, 0));
	}
	f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			printf("rank %d: rss %ld KB\n", rank, atol(line + 6));
	if (f)
		fclose(f);
	return 0;
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
	TRY(dr_init_process_group(NULL, NULL));
	rank = dr_get_rank();
	size = dr_get_world_size();
	if (!strcmp(mode, "info"))
		rc = mode_info();
	else if (!strcmp(mode, "kill") && argc > 2)
		rc = mode_kill((size_t)strtoull(argv[2], NULL, 0));
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
