/*
 * hang - launcher fixture: prints "pid P" (and "grandchild G" with --fork,
 * after forking a child that hangs too), then waits to be stopped.
 * --ignore-term ignores SIGTERM, SIGINT and SIGHUP, so only SIGKILL ends
 * it.  --exit with --fork: the rank exits at once, leaving the grandchild
 * behind (holding the output pipe).  Everything ends by itself after
 * 120 s, so that a broken test never leaves processes behind for long.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int ignore = 0, fork_child = 0, exit_now = 0;
	struct rlimit no_core = { 0, 0 };

	setrlimit(RLIMIT_CORE, &no_core);   /* SIGQUIT tests: no core files */

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ignore-term"))
			ignore = 1;
		else if (!strcmp(argv[i], "--fork"))
			fork_child = 1;
		else if (!strcmp(argv[i], "--exit"))
			exit_now = 1;
	}
	if (ignore) {
		signal(SIGTERM, SIG_IGN);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
	}
	alarm(120);
	if (fork_child) {
		pid_t pid = fork();

		if (pid == 0) {
			alarm(120);
			for (;;)
				pause();
		}
		printf("grandchild %d\n", (int)pid);
	}
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	if (exit_now)
		return 0;
	for (;;)
		pause();
}
