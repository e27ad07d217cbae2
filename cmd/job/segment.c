/*
 * segment.c - the per-job segment on the launcher's side: made before the
 * first rank is spawned, inherited by every rank, raised when a rank dies.
 *
 * The segment is a memfd (runtime/seg.h gives its layout): it has no name
 * in any filesystem, so a kill -9 of anything (a rank, distrun, all of
 * them) leaves nothing behind, and /dev/shm quotas do not apply.  Its size
 * is sealed, so no rank can shrink it under the others (a SIGBUS) or grow
 * it.  The fd is close-on-exec in distrun; spawn.c clears that flag in
 * each child between fork and exec, and DISTRUN_SEG_FD names it.
 *
 * distrun keeps the segment mapped for the whole job: the diagnosis reads
 * the ranks' control blocks from it (job->seg), and when distrun reaps a
 * rank that failed it raises the abort word and wakes every rank's
 * doorbell, so the survivors fail with DR_EPEER at once instead of at
 * their timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "distrun.h"
#include "launcher.h"
#include "contract.h"

static void futex_wake_all(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

int segment_create(struct job *job)
{
	dri_seg_hdr layout = { 0 }, *h;
	int fd, hi;
	void *p;

	dri_seg_layout(&layout, (uint32_t)job->o->nranks);
	fd = memfd_create("distrun-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		goto fail;
	/* Above 2: the child's dup2 onto 0, 1 and 2 must not close it. */
	hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	fd = hi;
	if (fd < 0 || ftruncate(fd, (off_t)layout.size) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		goto fail;
	p = mmap(NULL, layout.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto fail;
	h = p;
	*h = layout;
	h->magic = DRI_SEG_MAGIC;
	h->version = DRI_SEG_VERSION;
	h->launcher_pid = (int32_t)getpid();
	h->first_rank = job->rank_offset;
	if (getrandom(&h->nonce, sizeof(h->nonce), GRND_NONBLOCK) !=
	    sizeof(h->nonce))
		h->nonce = (uint64_t)getpid() << 32 ^ (uint64_t)now_real();
	dri_seg_job_id(job->run_id, h->job_id);
	h->abort_rank = -1;
	job->seg = p;
	job->seg_size = layout.size;
	job->seg_fd = fd;
	return 0;
fail:
	/* The job still runs, over TCP: the ranks see no DISTRUN_SEG_FD. */
	fprintf(stderr, "distrun: warning: no shared segment (%s); ranks use "
		"TCP only\n", strerror(errno));
	if (fd >= 0)
		close(fd);
	job->seg_fd = -1;
	return -1;
}

void segment_abort(struct job *job, int r, const char *why)
{
	dri_seg_hdr *h = job->seg;
	unsigned char *x;

	if (!h || __atomic_load_n(&h->abort, __ATOMIC_ACQUIRE))
		return;
	h->abort_rank = job->rank_offset + r;
	h->abort_err = DR_EPEER;
	snprintf(h->abort_msg, sizeof(h->abort_msg), "rank %d %s (seen by "
		 "distrun)", job->rank_offset + r, why);
	__atomic_store_n(&h->abort, 1, __ATOMIC_RELEASE);
	futex_wake_all(&h->abort);
	x = (unsigned char *)h + h->xport_off;
	for (uint32_t i = 0; h->blk_size && i < h->nranks; i++) {
		dri_seg_rank *b = (dri_seg_rank *)(x + (uint64_t)i * h->blk_size);

		__atomic_fetch_add(&b->doorbell, 1, __ATOMIC_SEQ_CST);
		futex_wake_all(&b->doorbell);
	}
}

void segment_release(struct job *job)
{
	if (job->seg)
		munmap(job->seg, job->seg_size);
	if (job->seg_fd >= 0)
		close(job->seg_fd);
	job->seg = NULL;
	job->seg_size = 0;
	job->seg_fd = -1;
}
