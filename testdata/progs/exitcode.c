/*
 * exitcode - launcher fixture: `exitcode CODE [RANK [DELAY_MS]]`.  The rank
 * RANK (every rank if not given) exits with CODE after DELAY_MS; the others
 * print "waiting" and wait to be stopped (at most 120 s, so that a broken
 * test never leaves it behind).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *rank = getenv("RANK");

	if (argc < 2) {
		fprintf(stderr, "usage: exitcode CODE [RANK [DELAY_MS]]\n");
		return 2;
	}
	if (argc < 3 || (rank && atoi(rank) == atoi(argv[2]))) {
		if (argc > 3) {
			long ms = atol(argv[3]);
			struct timespec ts = { ms / 1000, ms % 1000 * 1000000 };

			nanosleep(&ts, NULL);
		}
		return atoi(argv[1]);
	}
	printf("waiting\n");
	fflush(stdout);
	alarm(120);
	for (;;)
		pause();
}
