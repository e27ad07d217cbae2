/*
 * cuda_stage.h - device buffers in collectives (cuda_stage.c): a call on
 * device memory is staged through pinned host memory around the host
 * algorithm, and the barrier's device synchronisation.  The driver itself
 * is below, in cuda_driver.h.
 *
 * Layer 5, with the collectives.
 */
#ifndef DRI_CUDA_STAGE_H
#define DRI_CUDA_STAGE_H

#include "group.h"

/* Makes op, whose buffers are on op->device, a staged call: its run
 * becomes the staging through pinned host memory around the host
 * algorithm (kept in host_run); its start checks the buffers and records
 * the user's stream at submission (dri_coll_op calls this). */
void dri_cuda_stage_op(dri_op *op);
/* Checks that every buffer op uses on this rank (not a non-root's
 * gather recvbuf or scatter sendbuf) is on op->device: DR_EINVAL naming
 * the buffer and where it is otherwise.  The start of a staged call runs
 * it before the call takes its sequence number, so a rank mixing host and
 * device buffers fails alone and at once. */
dr_err dri_cuda_check_buffers(const dri_op *op);
/* For a barrier with device ids: checks them (DR_ENOCUDA without CUDA,
 * DR_EINVAL out of range; messages start with call) and sets op's start
 * and release so that each device's stream is marked at submission, or
 * with whole_device each device is synchronised whole when it runs. */
dr_err dri_cuda_barrier_op(dri_op *op, const char *call, const int *device_ids,
			   int n, int whole_device);
/* In the barrier's run, before the host barrier: waits for what
 * dri_cuda_barrier_op set up (nothing for an op without it). */
dr_err dri_cuda_barrier_wait(dri_op *op);

#endif
