/*
 * linebuf.c - libdistrun-linebuf.so, preloaded into every rank (spawn.c):
 * makes a rank's stdout line-buffered when it is distrun's pipe, so that a
 * C rank's lines reach the console as it prints them and survive a crash
 * or a hang, as on a terminal or under mpirun's pty; isatty(1) stays false.
 *
 * stdio buffers a pipe fully (4 KiB or more) and writes it at exit; a
 * rank killed by a signal, or stuck in a collective, never writes it.
 * The launcher passes the pipe's identity in DISTRUN_LINEBUF ("DEV:INO"),
 * so a pipe the rank makes itself (`gen | sort` in a rank's shell) keeps
 * its full buffering.  Nothing else is touched; a statically linked
 * program does not load this (see distrun(1), OUTPUT).
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "contract.h"

/* The decimal number at *s, up to the character end; advances *s past
 * end.  By hand: sscanf's first call costs every rank ~30 us here. */
static bool parse_ull(const char **s, char end, unsigned long long *v)
{
	const char *p = *s;
	unsigned long long x = 0;

	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');

		if (x > (ULLONG_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	if (p == *s || *p != end)
		return false;
	*v = x;
	*s = p + 1;
	return true;
}

__attribute__((constructor)) static void linebuf_init(void)
{
	const char *want = getenv(DRI_ENV_LINEBUF);
	unsigned long long dev, ino;
	struct stat st;

	/* "DEV:INO", nothing else */
	if (!want || !parse_ull(&want, ':', &dev) || !parse_ull(&want, 0, &ino))
		return;
	if (fstat(1, &st) || !S_ISFIFO(st.st_mode) ||
	    (unsigned long long)st.st_dev != dev ||
	    (unsigned long long)st.st_ino != ino)
		return;
	setvbuf(stdout, NULL, _IOLBF, 0);
}
