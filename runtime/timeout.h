/*
 * timeout.h - the job's timeout and the deadline of a call.
 *
 * The timeout is the time one call (a collective, a p2p wait, a store
 * get) may take: dr_init_options.timeout_ms, else DISTRUN_TIMEOUT, else
 * 30 minutes as torch.  A call turns it into a deadline when it starts
 * running (dri_deadline) and passes that deadline down to every wait it
 * makes, so that a call of many waits still ends at one time.
 *
 * Layer: just above the clock and the error state (clock.h, error.h);
 * everything that waits is above it.
 */
#ifndef DRI_TIMEOUT_H
#define DRI_TIMEOUT_H

#include <stdint.h>

#include "distrun.h"

/* Sets the job's timeout at init: opt_ms when above 0, else
 * DISTRUN_TIMEOUT, else the default.  DR_EENV (message set) for a
 * malformed DISTRUN_TIMEOUT, the timeout then unchanged. */
dr_err dri_timeout_init(int64_t opt_ms);
/* Back to "not set" (destroy, a failed init). */
void dri_timeout_clear(void);
/* The job's timeout in milliseconds: as set by dri_timeout_init, or
 * before init DISTRUN_TIMEOUT (the default when absent or malformed). */
int64_t dri_timeout_ms(void);
/* The deadline (dri_now_ms() time) of a call starting now with timeout
 * timeout_ms, or with the job's timeout when timeout_ms <= 0; from the
 * coarse clock, so up to two of its ticks late (dri_now_ms_late). */
int64_t dri_deadline(int64_t timeout_ms);

#endif
