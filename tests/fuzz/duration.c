/*
 * duration.c - fuzzes the duration parsers: the launcher's (--timeout,
 * --grace) and the runtime's (DISTRUN_TIMEOUT), both fed text from
 * outside.  Input: the text itself.
 *
 * Properties: an accepted duration is finite and not negative (the
 * launcher's) or at least 1 ms and below 2^53 ms (the runtime's); a
 * refused one leaves a message (runtime).
 */
#include <math.h>

#include "dri.h"
#include "launcher.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	double secs = -1;
	int64_t ms = -1;
	int cmd_ok, rt_ok;

	if (!s)
		return 0;
	cmd_ok = parse_duration(s, &secs) == 0;
	if (cmd_ok)
		FUZZ_CHECK(isfinite(secs) && secs >= 0);
	rt_ok = dri_parse_duration(s, &ms) == DR_OK;
	if (rt_ok)
		FUZZ_CHECK(ms >= 1 && ms < (1LL << 53));
	else
		FUZZ_CHECK(dr_last_error()[0] != 0);
	free(s);
	return 0;
}
