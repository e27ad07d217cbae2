/*
 * clock.h - time for the runtime and the launcher alike: one monotonic
 * clock for every deadline, and one parser for every duration a user
 * writes (distrun --timeout and --grace, DISTRUN_TIMEOUT), so that the
 * launcher and the library can never read "1d" differently.
 *
 * This is the bottom layer: it depends on nothing else of distrun (no
 * error state, no allocation), so cmd/ links it as it is.
 */
#ifndef DRI_CLOCK_H
#define DRI_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds, nanoseconds and seconds: deadlines
 * and durations.  Never goes back, not even when the wall clock is set. */
int64_t dri_now_ms(void);
int64_t dri_now_ns(void);
double dri_now_s(void);

/* A time in milliseconds no earlier than dri_now_ms() and at most two
 * ticks of the kernel's clock (1-4 ms each) later: CLOCK_MONOTONIC_COARSE
 * plus that margin, read in a few ns where dri_now_ms() takes 25 and more
 * on a VM.  For deadlines, set at every call (a deadline that far late
 * is nothing), never for durations. */
int64_t dri_now_ms_late(void);

/* CLOCK_REALTIME in seconds since the epoch: only for times shown to
 * people (report start and end), never for a deadline. */
double dri_real_s(void);

/* The largest duration accepted: about 285 years, so that a deadline in
 * milliseconds, seconds as a double, or poll's timeout never overflow. */
#define DRI_DURATION_MAX_MS (9000000000000000LL)

/* Parses a duration: a decimal number (digits, an optional fraction, no
 * sign, no exponent, no space) and a unit: none or "s" (seconds), "ms",
 * "m", "h" or "d".  "90", "1.5s", "250ms", "5m", "1h", "1d".  Returns 0
 * and *ms (rounded to the nearest millisecond; a value above 0 but below
 * 1 ms gives 1), or -1 with *why saying what was wrong (a static string)
 * and *ms untouched.  Zero is accepted: callers that need a positive
 * duration check that themselves. */
int dri_duration_parse(const char *s, int64_t *ms, const char **why);

/* Waits on cv for at most ms milliseconds from now, by CLOCK_MONOTONIC
 * (pthread_cond_clockwait), so that setting the wall clock changes no
 * wait.  Every condition wait of distrun goes through here. */
void dri_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

/* pthread_create for the library's own threads (progress, store server,
 * CUDA synchronisation): the thread starts with every asynchronous
 * signal blocked, whatever the caller's mask, so that a program's
 * SIGINT, SIGTERM, SIGCHLD or timer signal goes to a thread of the
 * program, never runs its handler on ours (nor interrupts our system
 * calls).  The faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS)
 * stay unblocked: blocked, a crash would kill the process without the
 * program's or a sanitizer's handler.  Returns pthread_create's value. */
int dri_thread_start(pthread_t *t, const pthread_attr_t *attr,
		     void *(*fn)(void *), void *arg);

#endif
