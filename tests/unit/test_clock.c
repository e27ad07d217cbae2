/*
 * test_clock.c - the one duration parser (runtime/clock.c) that both
 * distrun's --timeout/--grace and the runtime's DISTRUN_TIMEOUT use, and
 * the monotonic clock.
 */
#include <string.h>
#include <time.h>

#include <stdlib.h>

#include "clock.h"
#include "error.h"
#include "runner.h"
#include "timeout.h"

static int test_durations_in_every_unit(void)
{
	static const struct { const char *s; int64_t ms; } ok[] = {
		{ "90", 90000 }, { "90s", 90000 }, { "5m", 300000 },
		{ "1h", 3600000 }, { "1.5h", 5400000 }, { "250ms", 250 },
		{ "0.5", 500 }, { "1d", 86400000 }, { "2.5d", 216000000 },
		{ ".5s", 500 }, { "0", 0 }, { "0ms", 0 }, { "0.0001s", 1 },
	};
	int64_t ms;
	const char *why;

	for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++) {
		CHECKF(dri_duration_parse(ok[i].s, &ms, &why) == 0, "%s", ok[i].s);
		CHECKF(ms == ok[i].ms, "%s gave %lld", ok[i].s, (long long)ms);
	}
	return 0;
}

static int test_bad_durations_say_why(void)
{
	static const char *bad[] = { "", "soon", "5x", "-3", "+3", " 3",
				     "1e400", "1e3", "m", "5 m", "0x10",
				     "inf", "nan", "1..2", ".", "1.2.3",
				     "3s ", "3S", "1w" };
	int64_t ms = 42;
	const char *why;

	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		why = NULL;
		CHECKF(dri_duration_parse(bad[i], &ms, &why) == -1, "'%s'", bad[i]);
		CHECKF(why && *why, "'%s'", bad[i]);
		CHECK(ms == 42);
	}
	CHECK(dri_duration_parse(NULL, &ms, &why) == -1);
	CHECK(dri_duration_parse("3w", &ms, &why) == -1 && strstr(why, "unit"));
	return 0;
}

static int test_huge_durations_are_refused(void)
{
	int64_t ms;
	const char *why;

	CHECK(dri_duration_parse("1000000000d", &ms, &why) == -1);
	CHECK(strstr(why, "too long"));
	CHECK(dri_duration_parse("100000d", &ms, &why) == 0);
	CHECK(ms == 100000LL * 86400000);
	return 0;
}

static int test_monotonic_clock_goes_forward(void)
{
	int64_t a = dri_now_ms();
	double s = dri_now_s();

	CHECK(a >= 0 && s >= 0);
	CHECK(dri_now_ms() >= a);
	CHECK(dri_now_s() >= s);
	CHECK(dri_real_s() > 1.6e9);    /* after 2020 */
	return 0;
}

/* The deadline clock is never behind the precise one, and ahead of it by
 * two coarse ticks at most (plus the millisecond it rounds up). */
static int test_late_clock_is_never_early(void)
{
	struct timespec res;
	int64_t tick_ms = 0;

	if (!clock_getres(CLOCK_MONOTONIC_COARSE, &res))
		tick_ms = (res.tv_sec * 1000000000LL + res.tv_nsec + 999999) /
			  1000000;
	for (int i = 0; i < 200000; i++) {
		int64_t before = dri_now_ms(), late = dri_now_ms_late();
		int64_t after = dri_now_ms();

		CHECK(late >= before);
		CHECK(late <= after + 2 * tick_ms + 1);
	}
	return 0;
}

/* Reading the job's timeout on the way out of a failure keeps that
 * failure's message, even with a malformed DISTRUN_TIMEOUT; init is
 * where the variable is refused. */
static int test_timeout_leaves_the_last_error(void)
{
	setenv("DISTRUN_TIMEOUT", "soon", 1);
	dri_fail(DR_EPEER, "the real failure");
	CHECK(dri_timeout_ms() == 30 * 60 * 1000);
	CHECK(dri_deadline(0) > dri_now_ms());
	CHECKF(!strcmp(dr_last_error(), "the real failure"), "%s",
	       dr_last_error());
	CHECK(dri_timeout_init(0) == DR_EENV);
	CHECKF(strstr(dr_last_error(), "DISTRUN_TIMEOUT: bad duration 'soon'"),
	       "%s", dr_last_error());
	setenv("DISTRUN_TIMEOUT", "0", 1);
	CHECK(dri_timeout_init(0) == DR_EENV);
	CHECK(strstr(dr_last_error(), "must be positive"));
	CHECK(dri_timeout_init(1500) == DR_OK && dri_timeout_ms() == 1500);
	dri_timeout_clear();
	setenv("DISTRUN_TIMEOUT", "2m", 1);
	CHECK(dri_timeout_init(0) == DR_OK && dri_timeout_ms() == 120000);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_timeout_leaves_the_last_error),
	UNIT(test_durations_in_every_unit),
	UNIT(test_bad_durations_say_why),
	UNIT(test_huge_durations_are_refused),
	UNIT(test_monotonic_clock_goes_forward),
	UNIT(test_late_clock_is_never_early),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
