/*
 * fmt.c - the launcher's formatting helpers: signal names, a rank's status
 * in words, rank lists ("0-3,5"); and the parsers of the values users
 * write in more than one place (durations, lists of world sizes: options
 * and test lists).  With the clock (runtime/clock.h, the
 * now_mono()/now_real() of launcher.h) these are the bottom of cmd/: they
 * call nothing else of distrun, so the job loop, the mux and the report
 * all use them without calling each other.
 */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "contract.h"
#include "launcher.h"

const char *signal_name(int sig)
{
	static char buf[32];
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev) {
		snprintf(buf, sizeof(buf), "SIG%s", abbrev);
		return buf;
	}
	snprintf(buf, sizeof(buf), "signal %d", sig);
	return buf;
}

const char *rank_status_str(const struct rank *rk, char *buf, size_t n)
{
	if (rk->state == RANK_NEW)
		snprintf(buf, n, "not started");
	else if (rk->state == RANK_RUNNING)
		snprintf(buf, n, "running");
	else if (WIFEXITED(rk->status))
		snprintf(buf, n, "exited with status %d",
			 WEXITSTATUS(rk->status));
	else if (WIFSIGNALED(rk->status))
		snprintf(buf, n, "was killed by %s",
			 signal_name(WTERMSIG(rk->status)));
	else
		snprintf(buf, n, "ended with wait status %#x", rk->status);
	return buf;
}

const char *rank_list_str(const uint8_t *flags, int n, char *buf, size_t sz)
{
	size_t len = 0;

	buf[0] = 0;
	for (int r = 0; r < n; r++) {
		int e = r;

		if (!flags[r])
			continue;
		while (e + 1 < n && flags[e + 1])
			e++;
		if (len + 24 >= sz) {
			snprintf(buf + len, sz - len, "...");
			return buf;
		}
		len += snprintf(buf + len, sz - len, "%s%d", len ? "," : "", r);
		if (e > r)
			len += snprintf(buf + len, sz - len, "-%d", e);
		r = e;
	}
	if (!len)
		snprintf(buf, sz, "none");
	return buf;
}

/* ------------------------------------------------ values users write */

int parse_duration(const char *s, double *out)
{
	const char *why;
	int64_t ms;

	if (dri_duration_parse(s, &ms, &why))
		return -1;
	*out = ms / 1000.0;
	return 0;
}

int parse_sizes(const char *s, int **sizes, int *n)
{
	uint8_t seen[MAX_RANKS + 1] = { 0 };
	int *v = NULL, len = 0, cap = 0;
	const char *p = s;

	for (;;) {
		char *end;
		long a, b;

		if (!isdigit((unsigned char)*p))
			goto bad;
		errno = 0;
		a = strtol(p, &end, 10);
		b = a;
		if (*end == '-') {
			p = end + 1;
			if (!isdigit((unsigned char)*p))
				goto bad;
			b = strtol(p, &end, 10);
		}
		if (errno || a < 1 || b > MAX_RANKS || a > b)
			goto bad;
		for (long k = a; k <= b; k++) {
			if (seen[k])
				goto bad;
			seen[k] = 1;
			if (len == cap) {
				int *nv = realloc(v, (cap = cap ? 2 * cap : 8) *
						  sizeof(*v));

				if (!nv)
					goto bad;
				v = nv;
			}
			v[len++] = (int)k;
		}
		if (!*end)
			break;
		if (*end != ',')
			goto bad;
		p = end + 1;
	}
	*sizes = v;
	*n = len;
	return 0;
bad:
	free(v);
	return -1;
}
