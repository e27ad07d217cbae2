/*
 * example.h - what the four examples share beyond distrun.h: stop on the
 * first failing call, as the Python originals stop on an exception, but
 * with the library's own message on stderr.
 *
 * Header-only (the Makefile builds one .c per example).
 */
#ifndef EXAMPLE_H
#define EXAMPLE_H

#include <stdio.h>
#include <stdlib.h>

#include "distrun.h"

/* Exits with status 1 after naming the call and the reason, if err is not
 * DR_OK. */
static inline void check(dr_err err, const char *call)
{
	if (err == DR_OK)
		return;
	fprintf(stderr, "%s: %s: %s\n", call, dr_strerror(err), dr_last_error());
	exit(1);
}

/* Exits if a formatted string could not be made (out of memory). */
static inline char *check_str(char *s)
{
	if (!s) {
		fprintf(stderr, "out of memory formatting a tensor\n");
		exit(1);
	}
	return s;
}

/* Each line goes out when printed, as on a terminal, so that distrun's
 * timestamps tell when it was printed, not when the program exited. */
static inline void line_buffered_stdout(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

#endif /* EXAMPLE_H */
