/*
 * envdump - launcher fixture: prints NAME=value for each NAME given (or
 * "NAME is unset"), or the whole environment with no arguments, so tests
 * can see what distrun gives each rank.
 */
#include <stdio.h>
#include <stdlib.h>

extern char **environ;

int main(int argc, char **argv)
{
	if (argc == 1) {
		for (char **e = environ; *e; e++)
			puts(*e);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *v = getenv(argv[i]);

		if (v)
			printf("%s=%s\n", argv[i], v);
		else
			printf("%s is unset\n", argv[i]);
	}
	return 0;
}
