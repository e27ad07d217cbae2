/*
 * spawn_floor.c - the launch floor for scripts/bench-launch: posix_spawn N
 * copies of PROGRAM (with ARG...), then wait for them all.  What any
 * launcher must pay to start N processes here; distrun's launch is
 * measured against it.
 *
 *   spawn_floor N PROGRAM [ARG]...
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char **environ;

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[1]) : 0, failed = 0;

	if (n < 1) {
		fprintf(stderr, "usage: spawn_floor N PROGRAM [ARG]...\n");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		pid_t pid;

		if (posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2, environ)) {
			perror("spawn_floor: posix_spawn");
			failed = 1;
			break;
		}
	}
	while (wait(NULL) > 0)
		;
	return failed;
}
