/*
 * seg.h - the layout of the per-job segment.
 *
 * One shared mapping per job on a host.  Under distrun, the launcher
 * creates it (memfd_create, sealed size) before it spawns, and every rank
 * inherits the fd named by DISTRUN_SEG_FD and maps it.  Ranks started by
 * another launcher build the same among their local ranks through the
 * rendezvous.  Nothing has a name, so nothing is left after any kill.
 *
 * Both the launcher (cmd/) and libdistrun (runtime/) include this file.
 * It is a layout, not an API: offsets, never pointers, so that every
 * process can map it at any address.
 *
 *   [ dri_seg_hdr | control block x nranks | transport area ]
 *
 * The control blocks (DRI_CTL_SIZE bytes each, at ctl_off + rank *
 * ctl_size) hold what a rank publishes about itself for the launcher's
 * diagnosis (the call it is in, its flight record): runtime/ctl.h gives
 * their content.  The transport area belongs to the shared-memory
 * transport (runtime/shm*.c).
 *
 * Concurrency: the header is written once by its creator before anyone
 * else maps it, except the abort fields.  abort is a futex word: 0 while
 * the job is sound; whoever fails the job first (a rank, or the launcher
 * when it reaps a rank that died) fills abort_rank, abort_err and
 * abort_msg, then stores 1 with release order and wakes every futex
 * waiter of the transport area.  Readers load abort with acquire order
 * before they read the rest.
 */
#ifndef DRI_SEG_H
#define DRI_SEG_H

#include <stdint.h>

#define DRI_SEG_MAGIC 0x47455344u /* "DSEG" */
#define DRI_SEG_VERSION 1
/* The environment variable that names the inherited segment's fd. */
#define DRI_SEG_ENV_FD "DISTRUN_SEG_FD"
/* Bytes of each rank's control block (a multiple of the page size, so a
 * rank's block never shares a page with another's). */
#define DRI_CTL_SIZE 16384u
#define DRI_SEG_ABORT_MSG 256

typedef struct {
	uint32_t magic;            /* DRI_SEG_MAGIC */
	uint32_t version;          /* DRI_SEG_VERSION */
	uint32_t nranks;           /* control blocks: ranks of this host */
	uint32_t ctl_size;         /* DRI_CTL_SIZE when created */
	uint64_t size;             /* bytes of the whole mapping */
	uint64_t ctl_off;          /* offset of rank 0's control block */
	uint64_t xport_off;        /* offset of the transport area */
	uint64_t xport_size;       /* its bytes (0: no shared-memory transport) */
	int32_t launcher_pid;      /* distrun's pid, 0 when ranks made it */
	int32_t first_rank;        /* global rank of control block 0 */
	uint8_t job_id[16];        /* the job it belongs to */

	uint32_t abort;            /* futex word: 0, then 1 once failed */
	int32_t abort_rank;        /* the rank at fault, -1 if none */
	int32_t abort_err;         /* a dr_err */
	uint32_t pad_;
	char abort_msg[DRI_SEG_ABORT_MSG];
} dri_seg_hdr;

#endif /* DRI_SEG_H */
