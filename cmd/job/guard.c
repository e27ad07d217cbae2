/*
 * guard.c - the guard: a tiny process that kills the whole job if distrun
 * dies without cleaning up (kill -9, a crash, the OOM killer), and the
 * job's cgroup that lets it find every descendant.
 *
 * PR_SET_PDEATHSIG takes care of the ranks themselves, but not of what
 * they fork, and a process that calls setsid() after a double fork is in
 * no process group of ours.  So:
 *
 *  - Where a cgroup v2 subtree can be made (a cgroup2 mount, and our own
 *    cgroup writable: root, or a delegated systemd user cgroup), distrun
 *    makes "distrun.PID.RUNID" below its own cgroup (a new one: a name
 *    that exists is never shared, another is tried), and every rank moves
 *    itself into it before exec, or is made in it by clone3 (spawn.c,
 *    clone_into.c).  Whatever a rank forks stays in it, whatever it
 *    does with sessions and groups.
 *  - Before the ranks start, distrun forks the guard (child.c), which
 *    keeps the read end of a pipe, and shares a page with it (a
 *    MAP_SHARED mapping made before the fork): a slot per rank, where
 *    distrun puts the rank's pid (also its process group) when it starts
 *    the rank, and 0 when it has seen the rank exit, before it reaps it:
 *    a pid that can be reused is never in the guard's list, so the guard
 *    never signals a stranger's group.  Plain stores, no message: the
 *    guard sleeps until the pipe's EOF, and is not woken twice a rank.
 *  - If the pipe reaches EOF, distrun is gone: the guard kills the cgroup
 *    (cgroup.kill, or each pid of cgroup.procs where that file is
 *    missing), the ranks' process groups still listed, and, without a
 *    cgroup, every process of our own uid whose environment holds this
 *    job's DISTRUN_JOB_ID, its DISTRUN_SECRET and this node's GROUP_RANK
 *    (what a rank forks inherits them); then removes the cgroup and
 *    exits.  At a clean end distrun kills and reaps the guard and removes
 *    the cgroup itself.
 *
 * The fallback must not reach beyond the job: a job id can be guessed (in
 * multi-node mode it is the user's --rdzv-id), but the secret cannot, and
 * another user's process is never looked at.  GROUP_RANK keeps apart
 * two nodes of one job that share a host (and so the secret).
 *
 * DISTRUN_CGROUP=0 turns the cgroup off (the fallback then does the work);
 * a cgroup that could not be made for another reason than a lack of
 * permission (a cgroup2 mount we may not write is the common case, and
 * silent) is warned about.
 * The guard keeps no other fd (so no rank pipe stays open because of it)
 * and has the stop signals blocked, as distrun has: it ends only by EOF or
 * by SIGKILL.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

/* The ranks' process groups (0: none), shared with the guard. */
static pid_t *pgids;
static size_t npgids;
/* The guard's report of its set-up (child_report), until read. */
static struct child guard_child = CHILD_INIT;
static bool guard_killed;

/* ------------------------------------------------------------ cgroup */

/* Where the cgroup2 hierarchy is mounted: /sys/fs/cgroup on a unified
 * system, /sys/fs/cgroup/unified on a hybrid one, and where neither is
 * cgroup2, the first cgroup2 mount of /proc/self/mountinfo (which the
 * kernel takes a while to write out: a statfs is cheaper). */
static int cgroup2_mount(char *buf, size_t n)
{
	static const char *const usual[] = { "/sys/fs/cgroup",
					      "/sys/fs/cgroup/unified" };
	FILE *f;
	char line[4096];
	int rc = -1;

	for (size_t i = 0; i < sizeof(usual) / sizeof(usual[0]); i++) {
		struct statfs sf;

		if (!statfs(usual[i], &sf) &&
		    sf.f_type == CGROUP2_SUPER_MAGIC && strlen(usual[i]) < n) {
			strcpy(buf, usual[i]);
			return 0;
		}
	}
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char mnt[4096];
		const char *sep = strstr(line, " - ");

		if (!sep || strncmp(sep, " - cgroup2 ", 11))
			continue;
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 &&
		    strlen(mnt) < n) {
			strcpy(buf, mnt);
			rc = 0;
			break;
		}
	}
	fclose(f);
	return rc;
}

/* Our own cgroup v2 path, the "0::PATH" line of /proc/self/cgroup. */
static int cgroup_self(char *buf, size_t n)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096];
	int rc = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3)) {
			line[strcspn(line, "\n")] = 0;
			if (strlen(line + 3) < n) {
				strcpy(buf, line + 3);
				rc = 0;
			}
			break;
		}
	fclose(f);
	return rc;
}

/* Makes the job's cgroup; on any failure the job runs without one. */
static void cgroup_create(struct job *job)
{
	const char *env = getenv("DISTRUN_CGROUP");
	char mnt[2048], self[2048], path[4200];
	int e = 0;

	if ((env && !strcmp(env, "0")) || cgroup2_mount(mnt, sizeof(mnt)) ||
	    cgroup_self(self, sizeof(self)))
		return;
	for (int k = 0; k < 8; k++) {
		char sfx[16] = "";

		if (k)
			snprintf(sfx, sizeof(sfx), ".%d", k);
		snprintf(path, sizeof(path), "%s%s%sdistrun.%ld.%.32s%s", mnt,
			 self, strcmp(self, "/") ? "/" : "", (long)getpid(),
			 job->run_id, sfx);
		e = mkdir(path, 0755) ? errno : 0;
		if (e != EEXIST)
			break;
	}
	if (e) {
		if (e != EACCES && e != EPERM && e != EROFS)
			fprintf(stderr, "distrun: warning: cannot make the "
				"job's cgroup %s: %s; a kill -9 of distrun "
				"then stops only what keeps the job's "
				"environment\n", path, strerror(e));
		return;
	}
	job->cgroup_dir = strdup(path);
	/* for clone_into(); cgroup.procs is opened when first needed (a
	 * process that moves itself in: guard_cgroup_procs) */
	if (job->cgroup_dir)
		job->cgroup_dirfd = open(job->cgroup_dir, O_RDONLY |
					 O_DIRECTORY | O_CLOEXEC);
	if (!job->cgroup_dir || job->cgroup_dirfd < 0) {
		fprintf(stderr, "distrun: warning: cannot use the job's "
			"cgroup %s: %s; a kill -9 of distrun then stops only "
			"what keeps the job's environment\n", path,
			strerror(errno));
		rmdir(path);
		free(job->cgroup_dir);
		job->cgroup_dir = NULL;
		job->cgroup_dirfd = -1;
	}
}

int guard_cgroup_procs(struct job *job)
{
	static bool said;

	if (job->cgroup_fd >= 0 || job->cgroup_dirfd < 0)
		return job->cgroup_fd;
	job->cgroup_fd = openat(job->cgroup_dirfd, "cgroup.procs",
				O_WRONLY | O_CLOEXEC);
	if (job->cgroup_fd < 0 && !said) {
		said = true;
		fprintf(stderr, "distrun: warning: cannot use the job's "
			"cgroup %s/cgroup.procs: %s; a kill -9 of distrun then "
			"stops only what keeps the job's environment\n",
			job->cgroup_dir, strerror(errno));
	}
	return job->cgroup_fd;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* SIGKILLs every process of the cgroup, waits (bounded: 2 s) for it to
 * empty, and removes it.  An empty cgroup (a job that ended cleanly) is
 * only removed: rmdir fails with EBUSY while a process is in it. */
static void cgroup_kill_remove(const char *dir)
{
	char path[4200];
	int fd;

	if (!rmdir(dir) || errno != EBUSY)
		return;
	snprintf(path, sizeof(path), "%s/cgroup.kill", dir);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "1", 1);
		close(fd);
	}
	/* Also pid by pid: cgroup.kill is Linux 5.14 or later.  A pid read
	 * from cgroup.procs is a member of the job, and cannot be reused
	 * before whoever reaps it has. */
	for (int i = 0; i < 100 && rmdir(dir) && errno == EBUSY; i++) {
		FILE *f;
		int pid;

		snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
		f = fopen(path, "re");
		if (!f)
			break;
		while (fscanf(f, "%d", &pid) == 1)
			kill(pid, SIGKILL);
		fclose(f);
		sleep_ms(20);
	}
}

/* ------------------------------------------------------------ fallback */

/* The entries of the job's environment the fallback looks for. */
#define N_WANT 3
struct want {
	char s[N_WANT][128];
	size_t len[N_WANT];
};

/* Whether /proc/PID is a process of our real uid. */
static bool same_uid(const char *pid)
{
	char path[300], line[256];
	unsigned long uid = (unsigned long)-1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/status", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %lu", &uid) == 1)
			break;
	fclose(f);
	return uid == (unsigned long)getuid();
}

/* Does /proc/PID/environ hold every entry of w (NUL-terminated there)? */
static bool environ_has(const char *pid, const struct want *w)
{
	static char buf[1 << 16];
	char path[300];
	size_t have = 0;
	bool found = false;
	unsigned seen = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%s/environ", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *p = buf, *end;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		end = buf + have + n;
		*end = 0;
		/* Whole entries only; a partial last one is kept. */
		while (p < end) {
			size_t len = strnlen(p, end - p);

			if (p + len == end)
				break;
			for (int i = 0; i < N_WANT; i++)
				if (len == w->len[i] && !memcmp(p, w->s[i], len))
					seen |= 1u << i;
			if (seen == (1u << N_WANT) - 1) {
				found = true;
				goto out;
			}
			p += len + 1;
		}
		have = end - p;
		if (have >= sizeof(buf) - 1)
			have = 0;   /* an entry of 64 KiB: not ours */
		memmove(buf, p, have);
	}
out:
	close(fd);
	return found;
}

/* Kills every process of our uid whose environment says it belongs to
 * this job, until a pass finds none (they may fork meanwhile). */
static void kill_by_environ(const struct want *w)
{
	pid_t self = getpid();

	for (int pass = 0; pass < 50; pass++) {
		DIR *d = opendir("/proc");
		struct dirent *e;
		int found = 0;

		if (!d)
			return;
		while ((e = readdir(d))) {
			if (e->d_name[0] < '1' || e->d_name[0] > '9' ||
			    atoi(e->d_name) == self)
				continue;
			if (same_uid(e->d_name) && environ_has(e->d_name, w)) {
				kill(atoi(e->d_name), SIGKILL);
				found++;
			}
		}
		closedir(d);
		if (!found)
			return;
		sleep_ms(20);
	}
}

/* ------------------------------------------------------------ the guard */

/* What the guard's child needs: it is forked, so these are its copy. */
struct guard_args {
	const char *cgroup_dir;
	struct want w;
};

/* The guard itself: its pipe's read end is fd 3 (child.c), fds 0-2 are
 * /dev/null, and it has no other. */
static int guard_main(void *arg)
{
	struct guard_args *a = arg;
	struct want *w = &a->w;
	const char *cgroup_dir = a->cgroup_dir;
	char buf[64];
	int rd = 3;

	/* Nothing is written to the pipe: only its EOF is awaited. */
	for (;;) {
		ssize_t r = read(rd, buf, sizeof(buf));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
	}
	/* distrun is gone; what it stored before is all there.  Never 0
	 * (our own group) nor 1 (kill(-1) is every process). */
	for (size_t i = 0; i < npgids; i++) {
		pid_t pg = __atomic_load_n(&pgids[i], __ATOMIC_ACQUIRE);

		if (pg > 1)
			killpg(pg, SIGKILL);
	}
	if (cgroup_dir)
		cgroup_kill_remove(cgroup_dir);
	else
		kill_by_environ(w);
	explicit_bzero(w, sizeof(*w));
	return 0;
}

/* What the fallback looks for: the job id, the secret, the node, as
 * spawn.c put them in the ranks' environment.  Without the secret there
 * (never the case under distrun), nothing matches. */
static void want_fill(const struct job *job, struct want *w)
{
	static const char *const names[N_WANT] = { DRI_ENV_JOB_ID "=",
		DRI_ENV_SECRET "=", "GROUP_RANK=" };

	memset(w, 0, sizeof(*w));
	for (int i = 0; i < N_WANT; i++)
		for (char **e = job->env; e && *e; e++)
			if (!strncmp(*e, names[i], strlen(names[i])) &&
			    strlen(*e) < sizeof(w->s[i])) {
				w->len[i] = strlen(*e);
				memcpy(w->s[i], *e, w->len[i]);
				break;
			}
	for (int i = 0; i < N_WANT; i++)
		if (!w->len[i])
			w->len[i] = (size_t)-1;   /* matches no entry */
}

int guard_start(struct job *job)
{
	struct child c = CHILD_INIT;
	struct guard_args a;
	int fds[2];

	job->guard_fd = -1;
	cgroup_create(job);
	npgids = (size_t)job->o->nranks;
	pgids = mmap(NULL, npgids * sizeof(*pgids), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (pgids == MAP_FAILED) {
		pgids = NULL;
		goto fail;
	}
	if (pipe2(fds, O_CLOEXEC))
		goto fail;
	a.cgroup_dir = job->cgroup_dir;
	want_fill(job, &a.w);
	/* Forked, no exec: it keeps distrun's blocked stop signals, so it
	 * ends only by EOF or SIGKILL, and no pdeathsig, as it is to outlive
	 * distrun.  It keeps no fd but its pipe, so that no rank's pipe stays
	 * open because of it. */
	c.fn = guard_main;
	c.arg = &a;
	c.in = c.out = c.err = CHILD_DEVNULL;
	c.pass_fd = fds[0];
	c.close_fds = true;
	/* Its set-up is looked at once the ranks are started
	 * (guard_started): meanwhile it runs beside us. */
	c.later = true;
	if (child_start(&c)) {
		explicit_bzero(&a.w, sizeof(a.w));
		close(fds[0]);
		close(fds[1]);
		goto fail;
	}
	explicit_bzero(&a.w, sizeof(a.w));
	close(fds[0]);
	guard_child = c;
	job->guard_fd = fds[1];
	job->guard_pid = c.pid;
	return 0;
fail:
	fprintf(stderr, "distrun: cannot start the guard process: %s\n",
		strerror(errno));
	return -1;
}

void guard_started(struct job *job)
{
	if (!child_report(&guard_child))
		return;
	/* What keeps the guard from /dev/null on its fds 0-2 (an fd limit
	 * under 3, a seccomp filter) keeps the ranks from their pipes too,
	 * and they say so in their own words: the job goes on, without the
	 * guard, as when the guard dies (it has exited: job.c reaps it). */
	fprintf(stderr, "distrun: warning: the guard process could not set up "
		"its descriptors (%s): a kill -9 of distrun will not stop the "
		"job's processes\n", strerror(errno));
	if (job->guard_fd >= 0)
		close(job->guard_fd);
	job->guard_fd = -1;
}

void guard_add(struct job *job, int r, pid_t pgid)
{
	(void)job;
	if (pgids && r >= 0 && (size_t)r < npgids)
		__atomic_store_n(&pgids[r], pgid, __ATOMIC_RELEASE);
}

void guard_forget(struct job *job, int r)
{
	guard_add(job, r, 0);
}

void guard_done(struct job *job)
{
	/* Not yet reaped (job.c forgets it when it reaps it): still ours,
	 * so its pid cannot be another's.  It dies while we clean up, and
	 * guard_release() reaps it. */
	if (job->guard_pid > 0 && !guard_killed) {
		kill(job->guard_pid, SIGKILL);
		guard_killed = true;
	}
	if (guard_child.report_fd >= 0)
		close(guard_child.report_fd);
	guard_child.report_fd = -1;
	if (job->guard_fd >= 0)
		close(job->guard_fd);
	job->guard_fd = -1;
	if (job->cgroup_fd >= 0)
		close(job->cgroup_fd);
	if (job->cgroup_dirfd >= 0)
		close(job->cgroup_dirfd);
	job->cgroup_fd = job->cgroup_dirfd = -1;
	if (job->cgroup_dir) {
		/* Empty by now, unless distrun gave up on processes that
		 * ignore even SIGKILL (D state): then end them this way. */
		cgroup_kill_remove(job->cgroup_dir);
		free(job->cgroup_dir);
		job->cgroup_dir = NULL;
	}
}

void guard_release(struct job *job)
{
	guard_done(job);
	if (job->guard_pid > 0) {
		guard_child.pid = job->guard_pid;
		child_wait(&guard_child, -1, NULL);
		job->guard_pid = 0;
	}
	if (pgids)
		munmap(pgids, npgids * sizeof(*pgids));
	pgids = NULL;
	npgids = 0;
}
