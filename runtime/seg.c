/*
 * seg.c - the per-job segment on a rank's side: finding it, checking it,
 * mapping it, and the abort word.
 *
 * Under distrun the segment is a memfd the rank inherited, named by
 * DISTRUN_SEG_FD (cmd/job/segment.c made it).  Nothing from outside is taken
 * on trust: the fd must be a sealed memfd whose size is the header's
 * and the layout's for its rank count, with our magic and version, made
 * for this job (DISTRUN_JOB_ID) and with a control block for this rank.
 * Anything else leaves the rank without a segment, and dri_seg_why()
 * says why (the transport then falls back to TCP, or fails if shm was
 * asked for).  The fd is closed once mapped, so programs the rank starts
 * do not inherit it.
 *
 * Started by another launcher (torchrun, mpirun, srun), the ranks of a
 * host share a segment all the same (dri_seg_join): local rank 0 makes
 * the memfd and publishes "its pid and fd" in the job's store; the
 * others open it through /proc/PID/fd/FD, which the kernel grants only to
 * processes of the same user that may inspect local rank 0, and check it
 * as above against the job id of the rendezvous.  Nothing has a name here
 * either.
 *
 * The abort word is raised by the launcher (cmd/job/segment.c) when it reaps
 * a rank that failed; shm.c reads it in every wait.
 *
 * The mapping stays for the life of the process: control blocks are
 * written on every call (runtime/ctl.c), and a call racing with
 * dr_destroy_process_group must never write into an unmapped page.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "contract.h"
#include "error.h"
#include "rdzv.h"
#include "seg.h"

static struct {
	int tried, joined;
	dri_seg_hdr *hdr;
	int local;
	char why[256];
} joined_seg = { .local = -1 };

dri_seg_hdr *dri_seg_get(void)
{
	return joined_seg.hdr;
}

void *dri_seg_ctl(int local_rank)
{
	if (!joined_seg.hdr || local_rank < 0 || (uint32_t)local_rank >= joined_seg.hdr->nranks)
		return NULL;
	return (char *)joined_seg.hdr + joined_seg.hdr->ctl_off +
	       (uint64_t)local_rank * joined_seg.hdr->ctl_size;
}

int dri_seg_local_rank(void)
{
	return joined_seg.hdr ? joined_seg.local : -1;
}

const char *dri_seg_why(void)
{
	return joined_seg.why;
}

/* Checks the mapped header against the layout for its rank count and
 * against this job (job, or DISTRUN_JOB_ID when NULL); slot is this
 * rank's (-1: rank - first_rank).  Fills joined_seg.why and returns -1 if anything
 * is off. */
static int check_hdr(const dri_seg_hdr *h, uint64_t fsize, int rank,
		     const uint8_t *want_job, int slot)
{
	dri_seg_hdr want = { 0 };
	const char *jid = getenv(DRI_ENV_JOB_ID);
	uint8_t job[16];

	if (h->magic != DRI_SEG_MAGIC || h->version != DRI_SEG_VERSION) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "bad magic or version "
			 "(0x%08x v%u)", h->magic, h->version);
		return -1;
	}
	if (h->nranks == 0 || h->nranks > (1u << 20)) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "bad rank count %u", h->nranks);
		return -1;
	}
	dri_seg_layout(&want, h->nranks);
	if (h->size != fsize || want.size != h->size ||
	    want.ctl_off != h->ctl_off || want.ctl_size != h->ctl_size ||
	    want.xport_off != h->xport_off || want.rings_off != h->rings_off ||
	    want.ring_stride != h->ring_stride ||
	    want.ring_size != h->ring_size || want.blk_size != h->blk_size ||
	    want.coll_off != h->coll_off || want.coll_half != h->coll_half) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "its layout (%llu bytes for %u "
			 "ranks) is not this build's", (unsigned long long)fsize,
			 h->nranks);
		return -1;
	}
	if (want_job) {
		if (memcmp(want_job, h->job_id, 16)) {
			snprintf(joined_seg.why, sizeof(joined_seg.why), "it belongs to another job");
			return -1;
		}
		if (slot < 0 || (uint32_t)slot >= h->nranks) {
			snprintf(joined_seg.why, sizeof(joined_seg.why), "it has no slot %d (%u "
				 "ranks)", slot, h->nranks);
			return -1;
		}
		return 0;
	}
	if (jid)
		dri_seg_job_id(jid, job);
	if (!jid || memcmp(job, h->job_id, 16)) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "it belongs to another job "
			 "(DISTRUN_JOB_ID %s)", jid ? jid : "unset");
		return -1;
	}
	if (rank < h->first_rank ||
	    (int64_t)rank - h->first_rank >= (int64_t)h->nranks) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "it has no control block for "
			 "rank %d (ranks %d..%d)", rank, h->first_rank,
			 h->first_rank + (int)h->nranks - 1);
		return -1;
	}
	return 0;
}

/* Maps fd (a sealed memfd, checked as check_hdr says) into joined_seg; returns 0,
 * or -1 with joined_seg.why set (prefixed by what). */
static int map_checked(int fd, const char *what, int rank,
		       const uint8_t *job, int slot)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	void *p;

	errno = 0;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || seals < 0 ||
	    (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
		    (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    st.st_size < (off_t)sizeof(dri_seg_hdr)) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "%s is not the job's sealed "
			 "memfd (%s)", what,
			 errno ? dri_strerror(errno) : "wrong kind or size");
		return -1;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	if (p == MAP_FAILED) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "mmap of %s: %s", what,
			 dri_strerror(errno));
		return -1;
	}
	if (check_hdr(p, (uint64_t)st.st_size, rank, job, slot)) {
		char tmp[160];

		munmap(p, (size_t)st.st_size);
		snprintf(tmp, sizeof(tmp), "%.159s", joined_seg.why);
		snprintf(joined_seg.why, sizeof(joined_seg.why), "segment %.60s refused: %s",
			 what, tmp);
		return -1;
	}
	joined_seg.hdr = p;
	joined_seg.local = job ? slot : rank - joined_seg.hdr->first_rank;
	return 0;
}

dr_err dri_seg_attach(int rank)
{
	const char *s = getenv(DRI_ENV_SEG_FD);
	char what[64], *end;
	long fd;

	if (joined_seg.tried)
		return DR_OK;
	joined_seg.tried = 1;
	if (!s || !*s)
		return DR_OK;
	errno = 0;
	fd = strtol(s, &end, 10);
	if (errno || *end || fd < 3 || fd > 1 << 20) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "%s='%s' is not an fd number",
			 DRI_ENV_SEG_FD, s);
		return DR_OK;
	}
	/* A sealed memfd: a file someone else could resize is refused. */
	snprintf(what, sizeof(what), "%s=%ld", DRI_ENV_SEG_FD, fd);
	if (!map_checked((int)fd, what, rank, NULL, -1))
		close((int)fd);
	return DR_OK;
}

/* ------------------------------------------ under another launcher */

/* This host, for the ranks that must find the same segment: its name and
 * boot id (a container's hostname may repeat across machines; its boot
 * id does not repeat across reboots). */
static void host_key(char *buf, size_t size)
{
	char name[128] = "?", boot[40] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	gethostname(name, sizeof(name) - 1);
	if (f) {
		if (!fgets(boot, sizeof(boot), f))
			boot[0] = 0;
		fclose(f);
	}
	boot[strcspn(boot, "\n")] = 0;
	snprintf(buf, size, "%.100s/%.36s", name, boot);
}

static int creator_fd = -1;

/* Local rank 0 makes the segment and says where it is: "PID FD", which
 * the others open as /proc/PID/fd/FD (the kernel lets only processes of
 * the same user that may inspect ours do that), or "none REASON". */
static dr_err seg_create(dri_kv *kv, const char *key, const uint8_t job[16],
			 int nlocal)
{
	dri_seg_hdr layout = { 0 }, *h;
	char val[300];
	int fd = -1;
	void *p;

	dri_seg_layout(&layout, (uint32_t)nlocal);
	fd = memfd_create("distrun-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)layout.size) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "memfd: %s", dri_strerror(errno));
		goto fail;
	}
	p = mmap(NULL, layout.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "mmap: %s", dri_strerror(errno));
		goto fail;
	}
	h = p;
	*h = layout;
	h->magic = DRI_SEG_MAGIC;
	h->version = DRI_SEG_VERSION;
	h->launcher_pid = 0;
	h->first_rank = -1;
	memcpy(h->job_id, job, 16);
	if (getrandom(&h->nonce, sizeof(h->nonce), GRND_NONBLOCK) !=
	    sizeof(h->nonce))
		h->nonce = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
	h->abort_rank = -1;
	joined_seg.hdr = h;
	joined_seg.local = 0;
	creator_fd = fd;
	snprintf(val, sizeof(val), "%d %d", (int)getpid(), fd);
	return dri_kv_set(kv, key, val, strlen(val));
fail:
	if (fd >= 0)
		close(fd);
	snprintf(val, sizeof(val), "none %s", joined_seg.why);
	return dri_kv_set(kv, key, val, strlen(val));
}

dr_err dri_seg_join(dri_kv *kv, int local_rank, int local_size,
		    const uint8_t job[16], int64_t timeout_ms)
{
	char key[256], hk[160], path[64], what[96];
	void *val = NULL;
	size_t len;
	int pid, fdn, fd;
	dr_err err;

	if (joined_seg.hdr || !joined_seg.tried || joined_seg.joined)
		return DR_OK;
	joined_seg.joined = 1;
	if (local_rank < 0 || local_size < 1) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "the launcher does not say how "
			 "many ranks run on this host");
		return DR_OK;
	}
	if (local_size == 1)
		return DR_OK; /* nobody to share it with */
	host_key(hk, sizeof(hk));
	snprintf(key, sizeof(key), "seg/%s", hk);
	if (local_rank == 0)
		return seg_create(kv, key, job, local_size);
	err = dri_kv_get(kv, key, &val, &len, timeout_ms);
	if (err)
		return dri_fail(err, "local rank 0's shared segment: %s",
				dr_last_error());
	if (sscanf(val, "%d %d", &pid, &fdn) != 2) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "local rank 0 made no segment "
			 "(%.200s)", (char *)val + (len > 5 ? 5 : len));
		free(val);
		return DR_OK;
	}
	free(val);
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fdn);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		snprintf(joined_seg.why, sizeof(joined_seg.why), "local rank 0's segment %s: %s",
			 path, dri_strerror(errno));
		return DR_OK;
	}
	snprintf(what, sizeof(what), "of local rank 0 (%s)", path);
	map_checked(fd, what, -1, job, local_rank);
	close(fd);
	return DR_OK;
}
