/*
 * timeout.c - the job's timeout (timeout.h): one value, set at init from
 * the options or DISTRUN_TIMEOUT, read by every layer that waits.
 */
#include <stdlib.h>

#include "clock.h"
#include "error.h"
#include "timeout.h"

#define DEFAULT_TIMEOUT_MS (30 * 60 * 1000LL)

/* Written by init and destroy only, which run while no call does. */
static int64_t job_timeout_ms;

/* The timeout from DISTRUN_TIMEOUT, or the default; *why says what is
 * wrong with a malformed variable (NULL if nothing).  Leaves the last
 * error alone: dri_timeout_ms() is read on the way out of failures
 * whose message must survive. */
static int64_t env_timeout(const char **why)
{
	const char *s = getenv("DISTRUN_TIMEOUT");
	int64_t ms;

	*why = NULL;
	if (!s || !*s)
		return DEFAULT_TIMEOUT_MS;
	if (dri_duration_parse(s, &ms, why) || (!ms && (*why = "must be "
							"positive"))) {
		if (!*why)
			*why = "malformed";
		return DEFAULT_TIMEOUT_MS;
	}
	return ms;
}

dr_err dri_timeout_init(int64_t opt_ms)
{
	const char *why = NULL;
	int64_t ms = opt_ms > 0 ? opt_ms : env_timeout(&why);

	if (why)
		return dri_fail(DR_EENV, "DISTRUN_TIMEOUT: bad duration '%s': %s",
				getenv("DISTRUN_TIMEOUT"), why);
	job_timeout_ms = ms;
	return DR_OK;
}

void dri_timeout_clear(void)
{
	job_timeout_ms = 0;
}

int64_t dri_timeout_ms(void)
{
	const char *why;

	return job_timeout_ms > 0 ? job_timeout_ms : env_timeout(&why);
}

int64_t dri_deadline(int64_t timeout_ms)
{
	int64_t t = timeout_ms > 0 ? timeout_ms : dri_timeout_ms();

	/* dri_duration_parse bounds t, so this cannot overflow.  A few ms
	 * late at most, read at every call in a few ns. */
	return dri_now_ms_late() + t;
}
