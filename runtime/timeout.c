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

/* The timeout from DISTRUN_TIMEOUT, or the default; *err set if the
 * variable is malformed. */
static int64_t env_timeout(dr_err *err)
{
	const char *s = getenv("DISTRUN_TIMEOUT");
	const char *why;
	int64_t ms;

	*err = DR_OK;
	if (!s || !*s)
		return DEFAULT_TIMEOUT_MS;
	if (dri_duration_parse(s, &ms, &why) || (!ms && (why = "must be "
						       "positive"))) {
		*err = dri_fail(DR_EENV, "DISTRUN_TIMEOUT: bad duration '%s': %s",
				s, why);
		return DEFAULT_TIMEOUT_MS;
	}
	return ms;
}

dr_err dri_timeout_init(int64_t opt_ms)
{
	dr_err err = DR_OK;
	int64_t ms = opt_ms > 0 ? opt_ms : env_timeout(&err);

	if (!err)
		job_timeout_ms = ms;
	return err;
}

void dri_timeout_clear(void)
{
	job_timeout_ms = 0;
}

int64_t dri_timeout_ms(void)
{
	dr_err err;

	return job_timeout_ms > 0 ? job_timeout_ms : env_timeout(&err);
}

int64_t dri_deadline(int64_t timeout_ms)
{
	int64_t t = timeout_ms > 0 ? timeout_ms : dri_timeout_ms();

	/* dri_duration_parse bounds t, so this cannot overflow.  A few ms
	 * late at most, read at every call in a few ns. */
	return dri_now_ms_late() + t;
}
