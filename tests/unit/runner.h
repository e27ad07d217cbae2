/*
 * runner.h - the unit tests' runner: a table of {name, fn}, each test run
 * in a forked child under a timeout, so that a crash or a hang fails that
 * test alone.  A test fails by returning non-zero or through CHECK().
 *
 *   static int test_foo(void) { CHECK(1 + 1 == 2); return 0; }
 *   static const struct unit_test tests[] = { UNIT(test_foo), { 0 } };
 *   int main(int argc, char **argv) { return unit_run(tests, argc, argv); }
 *
 * `prog NAME...` runs only the named tests.  Prints one TAP-like line per
 * test and a closing "N passed, N failed".
 */
#ifndef UNIT_RUNNER_H
#define UNIT_RUNNER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct unit_test {
	const char *name;
	int (*fn)(void);
	unsigned timeout_s; /* 0: 60 s */
};

#define UNIT(fn) { #fn, fn, 0 }
#define UNIT_TIMEOUT(fn, s) { #fn, fn, s }

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n",         \
				__FILE__, __LINE__, #cond);                  \
			return 1;                                            \
		}                                                            \
	} while (0)

#define CHECKF(cond, ...)                                                    \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ",         \
				__FILE__, __LINE__, #cond);                  \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			return 1;                                            \
		}                                                            \
	} while (0)

static int unit_selected(const char *name, int argc, char **argv)
{
	if (argc < 2)
		return 1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

static int unit_run(const struct unit_test *tests, int argc, char **argv)
{
	int passed = 0, failed = 0;
	for (const struct unit_test *t = tests; t->name; t++) {
		if (!unit_selected(t->name, argc, argv))
			continue;
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 2;
		}
		if (pid == 0) {
			alarm(t->timeout_s ? t->timeout_s : 60);
			_exit(t->fn() ? 1 : 0);
		}
		int st = 0;
		while (waitpid(pid, &st, 0) < 0)
			;
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			passed++;
			printf("ok - %s\n", t->name);
		} else {
			failed++;
			if (WIFSIGNALED(st))
				printf("not ok - %s (%s%s)\n", t->name,
				       strsignal(WTERMSIG(st)),
				       WTERMSIG(st) == SIGALRM ? ": timed out" : "");
			else
				printf("not ok - %s\n", t->name);
		}
	}
	printf("%s: %d passed, %d failed\n", argv[0], passed, failed);
	return failed ? 1 : 0;
}

#endif
