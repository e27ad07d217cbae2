/*
 * duration.c - fuzzes the one duration parser (runtime/clock.c) that the
 * launcher (--timeout, --grace) and the runtime (DISTRUN_TIMEOUT) share,
 * fed text from outside.  Input: the text itself.
 *
 * Properties: an accepted duration is between 0 and DRI_DURATION_MAX_MS
 * milliseconds, and a text that starts with something other than a digit
 * or a point is refused; a refused one says why and leaves *ms alone.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	const char *why = NULL;
	int64_t ms = -1;

	if (!s)
		return 0;
	if (dri_duration_parse(s, &ms, &why) == 0) {
		FUZZ_CHECK(ms >= 0 && ms <= DRI_DURATION_MAX_MS);
		FUZZ_CHECK(strchr("0123456789.", s[0]) && s[0]);
	} else {
		FUZZ_CHECK(why && *why);
		FUZZ_CHECK(ms == -1);
	}
	free(s);
	return 0;
}
