/*
 * killself - launcher fixture: `killself SIGNUM [RANK]`.  The rank RANK
 * (every rank if not given) kills itself with signal SIGNUM; the others wait
 * to be stopped (at most 120 s).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *rank = getenv("RANK");
	struct rlimit no_core = { 0, 0 };

	if (argc < 2) {
		fprintf(stderr, "usage: killself SIGNUM [RANK]\n");
		return 2;
	}
	setrlimit(RLIMIT_CORE, &no_core);
	if (argc < 3 || (rank && atoi(rank) == atoi(argv[2]))) {
		signal(atoi(argv[1]), SIG_DFL);
		raise(atoi(argv[1]));
		return 0;
	}
	alarm(120);
	for (;;)
		pause();
}
