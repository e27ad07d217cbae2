/*
 * contract.h - what the launcher (cmd/) and libdistrun (runtime/) agree
 * on, in one place both sides include: the only runtime header cmd/ uses
 * besides the public distrun.h (tests/layers.bats checks it).
 *
 *   the environment  the variables distrun sets for a rank beyond
 *                    torchrun's (RANK, WORLD_SIZE, MASTER_ADDR ...), by
 *                    name below; a rank reads them at init;
 *   the segment      the per-job shared memory the ranks inherit (its fd
 *                    in DRI_ENV_SEG_FD): header, abort word, control
 *                    blocks, transport area (seg.h);
 *   the control      what a rank publishes in its block for the
 *     block          launcher's diagnosis and --trace, and how to read it
 *                    without the rank's help (ctl.h);
 *   the handshake    how a connection proves the job's secret (the
 *                    ranks' links, the store, the nodes' rendezvous):
 *                    HMAC-SHA256 over both sides' challenges (auth.h);
 *   shared base      the monotonic clock both sides stamp with (clock.h),
 *                    the names of calls and codes (error.h), and the
 *                    addresses a job listens on (net.h).
 *
 * A change to any of these is a change of the contract: seg.h's
 * DRI_SEG_VERSION and ctl.h's DRI_CTL_VERSION say which one a segment
 * holds, and a rank refuses a segment of another version.
 */
#ifndef DRI_CONTRACT_H
#define DRI_CONTRACT_H

#include "auth.h"
#include "clock.h"
#include "ctl.h"
#include "error.h"
#include "net.h"
#include "seg.h"

/* DRI_ENV_SECRET, "DISTRUN_SECRET": the job's key, 64 hex digits, that
 * connections between ranks and to the store prove; never printed.
 * Defined in auth.h, whose handshake reads it. */
/* The job's id (distrun's run id, or --rdzv-id): names the segment's key
 * in the store and, with the secret, the job's processes for the guard. */
#define DRI_ENV_JOB_ID "DISTRUN_JOB_ID"
/* The world size as distrun started it. */
#define DRI_ENV_NRANKS "DISTRUN_NRANKS"
/* The fd of the per-job segment the rank inherits (seg.h). */
#define DRI_ENV_SEG_FD "DISTRUN_SEG_FD"
/* Rank 0 only: "3,4", the listening sockets of MASTER_PORT that distrun
 * opened for its store (port.c), so that no other process can take the
 * port between distrun's choice and the rank's bind. */
#define DRI_ENV_STORE_FDS "DISTRUN_STORE_FDS"
/* "DEV:INO" of the pipe the rank's stdout is, for the line-buffering shim
 * (cmd/job/shim/linebuf.c), or "off". */
#define DRI_ENV_LINEBUF "DISTRUN_LINEBUF"
/* "precise": the control block's times from CLOCK_MONOTONIC (--trace);
 * "off": publish nothing (to measure what it costs). */
#define DRI_ENV_CTL "DISTRUN_CTL"

#endif /* DRI_CONTRACT_H */
