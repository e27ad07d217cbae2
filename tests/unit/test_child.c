/*
 * test_child.c - cmd/child.c, the launcher's one way to start a child
 * that is not a rank: exec errors come back as errors with no child left,
 * the child's signals are clean whatever the launcher blocks or ignores,
 * its fds are the ones asked for, and waits are bounded; a function's
 * child can be left to report later; PATH is searched as execvp does.
 */
#include "runner.h"
#include "../../cmd/child.c"

#include <errno.h>
#include <fcntl.h>

/* Runs argv as a child made from c, its stdout into buf. */
static int run(struct child *c, char **argv, char *buf, size_t n)
{
	int p[2], st;
	ssize_t got, len = 0;

	if (pipe2(p, O_CLOEXEC))
		return -1;
	c->argv = argv;
	c->out = p[1];
	if (child_start(c)) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	close(p[1]);
	while ((got = read(p[0], buf + len, n - 1 - (size_t)len)) > 0)
		len += got;
	buf[len] = 0;
	close(p[0]);
	if (child_wait(c, -1, &st))
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The same with sh -c script. */
static int run_sh(struct child *c, const char *script, char *buf, size_t n)
{
	char *argv[] = { "/bin/sh", "-c", (char *)script, NULL };

	return run(c, argv, buf, n);
}

/* No child of ours is left (a failed start reaps its own). */
static bool no_child(void)
{
	return waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD;
}

static int test_exec_missing(void)
{
	char *argv[] = { "/nonexistent/prog", NULL };
	struct child c = CHILD_INIT;

	c.argv = argv;
	CHECK(child_start(&c) == -1);
	CHECK(errno == ENOENT && c.step == CHILD_STEP_EXEC && c.pid == -1);
	CHECK(no_child());
	return 0;
}

static int test_exec_not_executable(void)
{
	char *argv[] = { "/etc/passwd", NULL };
	struct child c = CHILD_INIT;

	c.argv = argv;
	CHECK(child_start(&c) == -1);
	CHECK(errno == EACCES && c.step == CHILD_STEP_EXEC);
	CHECK(no_child());
	return 0;
}

static int test_cwd_missing(void)
{
	char *argv[] = { "/bin/true", NULL };
	struct child c = CHILD_INIT;

	c.argv = argv;
	c.cwd = "/nonexistent/dir";
	CHECK(child_start(&c) == -1);
	CHECK(errno == ENOENT && c.step == CHILD_STEP_CWD);
	CHECK(no_child());
	return 0;
}

/* The launcher blocks its stop signals and ignores SIGPIPE: the child
 * gets the mask it is given and SIGPIPE's default. */
static int test_signals_clean(void)
{
	/* Not through sh, which may clear its mask itself. */
	char *argv[] = { "/bin/grep", "-E", "^Sig(Blk|Ign)",
			 "/proc/self/status", NULL };
	struct child c = CHILD_INIT;
	sigset_t block, orig, want;
	char buf[512];

	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &orig);
	signal(SIGPIPE, SIG_IGN);
	CHECK(run(&c, argv, buf, sizeof(buf)) == 0);
	CHECKF(strstr(buf, "SigBlk:\t0000000000000000"), "%s", buf);
	/* SIGPIPE (bit 13) is no longer ignored. */
	CHECKF(!(strtoull(strstr(buf, "SigIgn:") + 7, NULL, 16) &
		 (1ULL << (SIGPIPE - 1))), "%s", buf);
	sigemptyset(&want);
	sigaddset(&want, SIGUSR1);
	c = (struct child)CHILD_INIT;
	c.mask = &want;
	CHECK(run(&c, argv, buf, sizeof(buf)) == 0);
	CHECKF(strstr(buf, "SigBlk:\t0000000000000200"), "%s", buf);
	return 0;
}

static int test_fds(void)
{
	struct child c = CHILD_INIT;
	int null = open("/dev/null", O_RDONLY);
	/* Above 3, which becomes the passed fd. */
	int keep = fcntl(null, F_DUPFD, 10), pass = fcntl(null, F_DUPFD, 20);
	char buf[256], script[256];

	CHECK(null > 2 && keep >= 10 && pass >= 20);
	c.in = CHILD_DEVNULL;
	c.pass_fd = pass;
	c.close_fds = true;
	snprintf(script, sizeof(script), "readlink /proc/self/fd/0; "
		 "test -e /proc/self/fd/3 && echo three; "
		 "test -e /proc/self/fd/%d || echo closed", keep);
	CHECK(run_sh(&c, script, buf, sizeof(buf)) == 0);
	CHECKF(!strcmp(buf, "/dev/null\nthree\nclosed\n"), "%s", buf);
	c = (struct child)CHILD_INIT;
	snprintf(script, sizeof(script), "test -e /proc/self/fd/%d && "
		 "echo inherited", keep);
	CHECK(run_sh(&c, script, buf, sizeof(buf)) == 0);
	CHECKF(!strcmp(buf, "inherited\n"), "%s", buf);
	return 0;
}

static int test_pgroup_and_finish(void)
{
	char *argv[] = { "/bin/sleep", "10", NULL };
	struct child c = CHILD_INIT;
	double t0 = now_mono();
	int st;

	c.argv = argv;
	c.new_pgroup = true;
	c.pdeathsig = SIGKILL;
	CHECK(child_start(&c) == 0);
	CHECK(getpgid(c.pid) == c.pid);
	CHECK(child_wait(&c, 0, &st) == 1);
	CHECK(child_finish(&c, 100, &st) == 1);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK(c.pid == -1 && now_mono() - t0 < 5);
	CHECK(child_wait(&c, 0, &st) == -1 && errno == ECHILD);
	return 0;
}

static int seven(void *arg)
{
	sigset_t m;

	/* A forked function keeps the launcher's signals. */
	sigprocmask(SIG_SETMASK, NULL, &m);
	return sigismember(&m, SIGTERM) && *(int *)arg == 42 ? 7 : 1;
}

/* c runs seven(arg) with SIGTERM blocked in the launcher. */
static void fn_child(struct child *c, int *arg)
{
	sigset_t block;

	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, NULL);
	*c = (struct child)CHILD_INIT;
	c->fn = seven;
	c->arg = arg;
	c->in = c->out = c->err = CHILD_DEVNULL;
}

static int test_fn(void)
{
	struct child c;
	int arg = 42, st;

	fn_child(&c, &arg);
	c.close_fds = true;
	CHECK(child_start(&c) == 0);
	CHECK(child_finish(&c, 5000, &st) == 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7);
	return 0;
}

/* c.later: child_start returns once forked; child_report tells what it
 * would have, and leaves a child that failed to be reaped. */
static int test_fn_later(void)
{
	struct child c;
	int arg = 42, st;

	fn_child(&c, &arg);
	c.later = true;
	CHECK(child_start(&c) == 0 && c.pid > 0 && c.report_fd >= 0);
	CHECK(child_report(&c) == 0 && c.report_fd == -1);
	CHECK(child_finish(&c, 5000, &st) == 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7);
	/* a step that fails: reported late, the child left to reap */
	fn_child(&c, &arg);
	c.cwd = "/nonexistent/dir";
	c.later = true;
	CHECK(child_start(&c) == 0 && c.pid > 0);
	CHECK(child_report(&c) == -1);
	CHECK(errno == ENOENT && c.step == CHILD_STEP_CWD);
	CHECK(child_wait(&c, -1, &st) == 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	CHECK(no_child());
	return 0;
}

/* Writes an empty file of the given mode at dir/name. */
static int touch(const char *dir, const char *name, mode_t mode)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -1;
	close(fd);
	return chmod(path, mode);
}

/* child_which: execvp's search of PATH, remembered for the same name. */
static int test_which(void)
{
	char dir[] = "/tmp/test_child.XXXXXX", want[256], *path;
	bool denied;

	CHECK(mkdtemp(dir) != NULL);
	CHECK(!touch(dir, "runs", 0755) && !touch(dir, "norun", 0644));
	CHECK(mkdir(strcat(strcpy(want, dir), "/adir"), 0755) == 0);
	snprintf(want, sizeof(want), "/nonexistent:%s", dir);
	CHECK(setenv("PATH", want, 1) == 0);
	CHECK(child_which("runs", &path, &denied) == 0 && !denied);
	snprintf(want, sizeof(want), "%s/runs", dir);
	CHECKF(!strcmp(path, want), "%s", path);
	free(path);
	CHECK(child_which("norun", &path, &denied) == 1 && denied && !path);
	CHECK(child_which("adir", &path, &denied) == 1 && !denied && !path);
	CHECK(child_which("nosuch", &path, &denied) == 1 && !denied);
	/* the last answer is kept: no second search for the same name */
	CHECK(child_which("nosuch", &path, &denied) == 1 && !denied);
	CHECK(child_which("runs", &path, &denied) == 0);
	free(path);
	CHECK(!touch(dir, "runs", 0644));
	CHECK(child_which("runs", &path, &denied) == 0);
	free(path);
	snprintf(want, sizeof(want), "%s/runs", dir);
	CHECK(unlink(want) == 0);
	snprintf(want, sizeof(want), "%s/norun", dir);
	CHECK(unlink(want) == 0);
	snprintf(want, sizeof(want), "%s/adir", dir);
	CHECK(rmdir(want) == 0 && rmdir(dir) == 0);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_exec_missing),
	UNIT(test_exec_not_executable),
	UNIT(test_cwd_missing),
	UNIT(test_signals_clean),
	UNIT(test_fds),
	UNIT(test_pgroup_and_finish),
	UNIT(test_fn),
	UNIT(test_fn_later),
	UNIT(test_which),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
