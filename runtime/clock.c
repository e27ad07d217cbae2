/*
 * clock.c - the monotonic clock and the duration parser (see clock.h).
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

int64_t dri_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dri_now_ms_late(void)
{
	/* The margin in ns: 0 until known, -1 without a coarse clock. */
	static int64_t margin_ns;
	int64_t m = __atomic_load_n(&margin_ns, __ATOMIC_RELAXED);
	struct timespec ts;

	if (!m) {
		m = clock_getres(CLOCK_MONOTONIC_COARSE, &ts) ? -1
			: 2 * ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
		__atomic_store_n(&margin_ns, m, __ATOMIC_RELAXED);
	}
	if (m < 0 || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts))
		return dri_now_ms();
	return ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + m + 999999) /
	       1000000;
}

int64_t dri_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double dri_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double dri_real_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int dri_duration_parse(const char *s, int64_t *ms, const char **why)
{
	static const struct { const char *unit; double ms; } units[] = {
		{ "", 1000 }, { "s", 1000 }, { "ms", 1 }, { "m", 60000 },
		{ "h", 3600000 }, { "d", 86400000 },
	};
	size_t len, digits;
	char num[64], *end;
	double v;

	if (!s || !*s) {
		*why = "empty duration";
		return -1;
	}
	/* Our own scan of the number: strtod alone would also take a sign,
	 * leading space, hex, "inf" and exponents. */
	len = strspn(s, "0123456789.");
	digits = 0;
	for (size_t i = 0; i < len; i++)
		digits += s[i] != '.';
	if (!digits || len >= sizeof(num) || memchr(s, '.', len) !=
	    memrchr(s, '.', len)) {
		*why = "expected a number and a unit, like 90s, 250ms, 5m, "
		       "1h or 1d";
		return -1;
	}
	memcpy(num, s, len);
	num[len] = 0;
	v = strtod(num, &end);
	if (*end || !isfinite(v)) {
		*why = "expected a number and a unit, like 90s, 250ms, 5m, "
		       "1h or 1d";
		return -1;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		double t;

		if (strcmp(s + len, units[i].unit))
			continue;
		t = v * units[i].ms;
		if (t > (double)DRI_DURATION_MAX_MS) {
			*why = "too long (at most 285 years)";
			return -1;
		}
		*ms = (int64_t)(t + 0.5);
		if (*ms == 0 && t > 0)
			*ms = 1;
		return 0;
	}
	*why = "unknown unit (use ms, s, m, h or d)";
	return -1;
}

void dri_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	struct timespec ts;

	/* The monotonic clock, whatever clock cv was made with: a wall clock
	 * set back (NTP, an admin) must not stretch a wait, nor one set
	 * forward cut it short. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_clockwait(cv, mu, CLOCK_MONOTONIC, &ts);
}

int dri_thread_start(pthread_t *t, const pthread_attr_t *attr,
		     void *(*fn)(void *), void *arg)
{
	static const int faults[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL,
				      SIGTRAP, SIGSYS };
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		sigdelset(&all, faults[i]);
	/* The new thread inherits the mask in force when it is created. */
	rc = pthread_sigmask(SIG_SETMASK, &all, &old);
	if (rc)
		return rc;
	rc = pthread_create(t, attr, fn, arg);
	/* cannot fail: a valid how, a set it gave us */
	(void)pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}
