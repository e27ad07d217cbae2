/*
 * sec_victim.c - the job that tests/security.bats attacks.
 *
 *   wait DIR    after init, writes DIR/addrs ("store HOST PORT", then
 *               "rank R HOST:PORT" per rank) and DIR/pid.R, then the last
 *               rank waits for DIR/go while the others wait in dr_recv for
 *               its message (polling their sockets, so attacks on them are
 *               met at once).  Then p2p, all_reduce,
 *               broadcast and a barrier with exact values; "rank R: ok"
 *   init        init only: prints "init: NAME: message"
 *   closefd     after a barrier, the last rank closes its connected
 *               sockets under the runtime, then every rank calls a barrier
 *               (the others 0.2 s later) and prints its error
 *   args        calls with counts whose size wraps, NULL buffers, a dtype,
 *               op or root out of range: DR_EINVAL on the calling rank,
 *               nothing sent, then an exact all_reduce
 *   late DIR [LATE]  rank LATE (default 1) calls a monitored barrier
 *               only after rank 0's timed out on it; then a barrier, an
 *               all_reduce and a monitored barrier must work
 *   newgroup    the last rank passes dr_new_group another count, then
 *               another list: DR_EMISMATCH on every rank, and the world
 *               goes on
 *   waitclock DIR  rank 0 waits 50 ms for an asynchronous all_reduce the
 *               others join only after that wait gave up (DR_ETIMEDOUT, not
 *               complete); then it completes with the exact sum.  Run with
 *               the wall clock shifted (testdata/clockshift.c): a wait timed
 *               by the wall clock would not give up
 *   retry PORT  alone (no launcher): an init that fails after the
 *               transport listens (world size 2, nobody else comes), then
 *               an init of a 1-rank world that must work; checks that no
 *               fd leaked
 */
#include <dirent.h>
#include <distrun.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

static int rank, size;

#include "check.h"

static void mode_wait(const char *dir)
{
	char path[512];
	int32_t v[4], sum[4];
	FILE *f;

	if (rank == 0) {
		snprintf(path, sizeof(path), "%s/addrs.tmp", dir);
		f = fopen(path, "w");
		if (!f)
			DIE("cannot write %s", path);
		fprintf(f, "store %s %s\n", getenv("MASTER_ADDR"),
			getenv("MASTER_PORT"));
		for (int r = 0; r < size; r++) {
			char key[32];
			void *a;
			size_t len;
			snprintf(key, sizeof(key), "addr/%d", r);
			TRY(dri_store_get(dri_world_store(), key, &a, &len, 10000));
			fprintf(f, "rank %d %s\n", r, (char *)a);
			free(a);
		}
		fclose(f);
		char final[512];
		snprintf(final, sizeof(final), "%s/addrs", dir);
		rename(path, final);
	}
	snprintf(path, sizeof(path), "%s/pid.%d", dir, rank);
	f = fopen(path, "w");
	if (!f)
		DIE("cannot write %s", path);
	fprintf(f, "%d\n", (int)getpid());
	fclose(f);
	if (rank == size - 1) {
		snprintf(path, sizeof(path), "%s/go", dir);
		for (int i = 0; access(path, F_OK); i++) {
			if (i > 1200)
				DIE("no %s after 120 s", path);
			usleep(100000);
		}
		int32_t msg[4] = { 7, 8, 9, 10 };
		for (int r = 0; r < size - 1; r++)
			TRY(dr_send(msg, 4, DR_INT32, r, 5, NULL));
	} else {
		TRY(dr_recv(v, 4, DR_INT32, size - 1, 5, NULL, NULL));
		if (v[0] != 7 || v[1] != 8 || v[2] != 9 || v[3] != 10)
			DIE("received from rank %d: %d %d %d %d", size - 1, v[0],
			    v[1], v[2], v[3]);
	}
	for (int i = 0; i < 4; i++)
		sum[i] = rank + i;
	TRY(dr_all_reduce(sum, 4, DR_INT32, DR_SUM, NULL, NULL));
	for (int i = 0; i < 4; i++)
		if (sum[i] != size * (size - 1) / 2 + size * i)
			DIE("all_reduce: element %d is %d", i, sum[i]);
	v[0] = rank == 0 ? 42 : -1;
	TRY(dr_broadcast(v, 1, DR_INT32, 0, NULL, NULL));
	if (v[0] != 42)
		DIE("broadcast gave %d", v[0]);
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	TRY(dr_destroy_process_group());
	printf("rank %d: ok\n", rank);
}

static void mode_closefd(void)
{
	dr_err e;

	TRY(dr_barrier(NULL, NULL, NULL, 0));
	if (rank == size - 1) {
		/* every connected socket: the ones to the peers and the store */
		for (int fd = 3; fd < 1024; fd++) {
			struct sockaddr_storage ss;
			socklen_t len = sizeof(ss);
			if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
				close(fd);
		}
	}
	/* The others come 0.2 s later: the last rank waits in the barrier
	 * first and finds its sockets closed (else a peer that sees the
	 * connection end first fails, and the launcher stops the last rank
	 * with that peer's failure as the cause) */
	if (rank != size - 1)
		nanosleep(&(struct timespec){ 0, 200000000L }, NULL);
	e = dr_barrier(NULL, NULL, NULL, 0);
	printf("rank %d: barrier: %s: %s\n", rank, dr_err_name(e),
	       e ? dr_last_error() : "");
	exit(e ? 3 : 0);
}

/* A call that must fail with DR_EINVAL on this rank alone. */
#define EXPECT_EINVAL(call)                                                  \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_ != DR_EINVAL)                                         \
			DIE("%s gave %s, not DR_EINVAL: %s", #call,          \
			    dr_err_name(e_), dr_last_error());               \
		printf("rank %d: %s\n", rank, dr_last_error());             \
	} while (0)

static void mode_args(void)
{
	size_t wrap = SIZE_MAX / 4 + 2; /* x 4 bytes wraps to 8 */
	int32_t v[4] = { 1, 2, 3, 4 }, big[64];

	EXPECT_EINVAL(dr_all_reduce(v, wrap, DR_FLOAT32, DR_SUM, NULL, NULL));
	EXPECT_EINVAL(dr_broadcast(v, wrap, DR_INT32, 0, NULL, NULL));
	EXPECT_EINVAL(dr_reduce(v, wrap, DR_INT32, DR_SUM, 0, NULL, NULL));
	EXPECT_EINVAL(dr_all_gather(v, big, wrap / 8, DR_INT32, NULL, NULL));
	if (rank == 0)
		EXPECT_EINVAL(dr_send(v, wrap, DR_INT32, 1, 3, NULL));
	else
		EXPECT_EINVAL(dr_recv(v, wrap, DR_INT32, 0, 3, NULL, NULL));
	EXPECT_EINVAL(dr_all_reduce(NULL, 4, DR_INT32, DR_SUM, NULL, NULL));
	EXPECT_EINVAL(dr_all_reduce(v, 4, (dr_dtype)99, DR_SUM, NULL, NULL));
	EXPECT_EINVAL(dr_all_reduce(v, 4, DR_INT32, (dr_op)99, NULL, NULL));
	EXPECT_EINVAL(dr_broadcast(v, 4, DR_INT32, size, NULL, NULL));
	/* nothing was sent: the group goes on with exact values */
	TRY(dr_all_reduce(v, 4, DR_INT32, DR_SUM, NULL, NULL));
	for (int i = 0; i < 4; i++)
		if (v[i] != size * (i + 1))
			DIE("all_reduce after the refused calls: v[%d] = %d", i,
			    v[i]);
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	printf("rank %d: args ok\n", rank);
}

/* Rank LATE comes to a monitored barrier only after rank 0 gave up on it;
 * both time out, then the group goes on. */
static void mode_late(const char *dir, int late)
{
	char path[512];
	int32_t v = 1;
	dr_err e;

	if (late < 1 || late >= size)
		DIE("late rank %d: not in 1..%d", late, size - 1);
	snprintf(path, sizeof(path), "%s/gave-up", dir);
	if (rank == late)
		for (int i = 0; access(path, F_OK); i++) {
			if (i > 1200)
				DIE("no %s after 120 s", path);
			usleep(100000);
		}
	e = dr_monitored_barrier(NULL, 500, 0);
	printf("rank %d: monitored_barrier: %s: %s\n", rank, dr_err_name(e),
	       e ? dr_last_error() : "");
	if (e != DR_ETIMEDOUT)
		DIE("the monitored barrier did not time out");
	if (rank == 0) {
		FILE *f = fopen(path, "w");
		if (!f)
			DIE("cannot write %s", path);
		fclose(f);
	}
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	TRY(dr_all_reduce(&v, 1, DR_INT32, DR_SUM, NULL, NULL));
	if (v != size)
		DIE("all_reduce after the late arrival gave %d", v);
	TRY(dr_monitored_barrier(NULL, 60000, 0));
	printf("rank %d: late ok\n", rank);
}

/* rank 0's dr_work_wait_timeout gives up on a call the others join only
 * after it has: a condition wait timed by the wall clock would sleep for
 * as long as the wall clock was set forward. */
static void mode_waitclock(const char *dir)
{
	char path[512];
	int32_t v = rank + 1;
	dr_work *w;

	snprintf(path, sizeof(path), "%s/gave-up", dir);
	if (rank == 0) {
		TRY(dr_all_reduce(&v, 1, DR_INT32, DR_SUM, NULL, &w));
		dr_err e = dr_work_wait_timeout(w, 50);
		if (e != DR_ETIMEDOUT || dr_work_is_completed(w))
			DIE("wait_timeout on a call nobody joined: %s",
			    dr_err_name(e));
		FILE *f = fopen(path, "w");
		if (!f)
			DIE("cannot write %s", path);
		fclose(f);
		TRY(dr_work_wait(w));
		dr_work_free(w);
	} else {
		for (int i = 0; access(path, F_OK); i++) {
			if (i > 1200)
				DIE("no %s after 120 s", path);
			usleep(100000);
		}
		TRY(dr_all_reduce(&v, 1, DR_INT32, DR_SUM, NULL, NULL));
	}
	if (v != size * (size + 1) / 2)
		DIE("all_reduce gave %d", (int)v);
	printf("rank %d: waitclock ok\n", rank);
}

/* The last rank passes dr_new_group one member fewer (then another list
 * of the same count): every rank fails the call, the world goes on. */
static void mode_newgroup(void)
{
	int all[64], other[64];
	dr_group *g = NULL;
	int32_t v = 1;
	dr_err e;

	for (int i = 0; i < size && i < 64; i++)
		all[i] = other[i] = i;
	other[0] = size - 1; /* {n-1, 1, 2, ..., n-1}: a duplicate... */
	other[size - 1] = 0; /* ... made a permutation, then one dropped */
	e = dr_new_group(all, rank == size - 1 ? size - 1 : size, &g);
	printf("rank %d: new_group (count): %s: %s\n", rank, dr_err_name(e),
	       e ? dr_last_error() : "");
	if (e != DR_EMISMATCH || g)
		DIE("a different count did not fail the call with DR_EMISMATCH");
	e = dr_new_group(rank == size - 1 ? other + 1 : all + 1, size - 1, &g);
	printf("rank %d: new_group (list): %s: %s\n", rank, dr_err_name(e),
	       e ? dr_last_error() : "");
	if (e != DR_EMISMATCH || g)
		DIE("a different list did not fail the call with DR_EMISMATCH");
	TRY(dr_all_reduce(&v, 1, DR_INT32, DR_SUM, NULL, NULL));
	if (v != size)
		DIE("all_reduce after the failed new_group gave %d", v);
	TRY(dr_new_group(all, size, &g));
	TRY(dr_barrier(g, NULL, NULL, 0));
	dr_group_destroy(g);
	printf("rank %d: newgroup ok\n", rank);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void mode_retry(const char *port)
{
	char url[64];
	dr_init_options o = DR_INIT_OPTIONS_INIT;
	int before = count_fds();
	dr_err e;

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%s", port);
	o.init_method = url;
	o.rank = 0;
	o.world_size = 2;
	o.timeout_ms = 500;
	e = dr_init_process_group_opts(&o);
	printf("first init: %s: %s\n", dr_err_name(e), dr_last_error());
	if (!e)
		DIE("init of a world of 2 with one rank succeeded");
	if (count_fds() != before)
		DIE("the failed init left %d fds open", count_fds() - before);
	o.world_size = 1;
	o.timeout_ms = 20000;
	e = dr_init_process_group_opts(&o);
	printf("second init: %s: %s\n", dr_err_name(e), e ? dr_last_error() : "");
	if (e)
		exit(3);
	TRY(dr_barrier(NULL, NULL, NULL, 0));
	TRY(dr_destroy_process_group());
	if (count_fds() != before)
		DIE("init and destroy left %d fds open", count_fds() - before);
	printf("retry: ok\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	dr_err e;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "retry") && argc == 3) {
		mode_retry(argv[2]);
		return 0;
	}
	e = dr_init_process_group(NULL, NULL);
	if (!strcmp(mode, "init")) {
		printf("init: %s: %s\n", dr_err_name(e), e ? dr_last_error() : "");
		return e ? 3 : 0;
	}
	if (e)
		DIE("init: %s: %s", dr_err_name(e), dr_last_error());
	rank = dr_get_rank();
	size = dr_get_world_size();
	if (!strcmp(mode, "wait") && argc == 3)
		mode_wait(argv[2]);
	else if (!strcmp(mode, "closefd"))
		mode_closefd();
	else if (!strcmp(mode, "args"))
		mode_args();
	else if (!strcmp(mode, "newgroup"))
		mode_newgroup();
	else if (!strcmp(mode, "late") && (argc == 3 || argc == 4))
		mode_late(argv[2], argc == 4 ? atoi(argv[3]) : 1);
	else if (!strcmp(mode, "waitclock") && argc == 3)
		mode_waitclock(argv[2]);
	else
		DIE("usage: sec_victim wait DIR | init | closefd | args | "
		    "late DIR [LATE] | waitclock DIR | newgroup | retry PORT");
	return 0;
}
