/*
 * clockshift.c - an LD_PRELOAD library for the tests: the wall clock, as
 * the process reads it (clock_gettime(CLOCK_REALTIME*), gettimeofday,
 * time), is CLOCKSHIFT_S seconds ahead (or behind, negative); the
 * monotonic clocks are untouched.  A process that computed a wait's
 * deadline from the wall clock (pthread_cond_timedwait's default clock)
 * would then wait CLOCKSHIFT_S longer, as after an administrator or NTP
 * set the clock forward: the tests show that no wait of distrun does.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long shift(void)
{
	const char *s = getenv("CLOCKSHIFT_S");
	return s ? atol(s) : 0;
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);
	int rc;

	if (!real)
		real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT,
								    "clock_gettime");
	rc = real(clk, ts);
	if (!rc && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
		ts->tv_sec += shift();
	return rc;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	struct timespec ts;

	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts))
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (t)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
