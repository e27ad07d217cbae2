/*
 * cuda_colls.c - every collective on CUDA device buffers against the same
 * collective on host buffers.  Run under distrun: `distrun -n 4
 * build/tests/cuda_colls` (scripts/test-gpu runs it at n = 2 and 4, all
 * ranks sharing one GPU, and again with DISTRUN_CUDA_CHUNK small so that
 * every collective is cut in many chunks).
 *
 * Plain C, built with the rest of the tree: device memory comes from
 * dr_cuda_alloc (the driver loaded at run time), so no toolkit is needed.
 * Each case fills this rank's input with a pattern that depends on rank and
 * index (integer values, also for float32, so that sums are exact whatever
 * the algorithm's order), runs the collective once on host buffers and once
 * on device buffers, copies the device result back and compares bytes,
 * including the buffer a rank must leave untouched (reduce on a rank that
 * is not the root).
 *
 * Then barrier(device_ids), blocking and asynchronous, and the refusals of
 * mixed host/device buffers and of a device that does not exist.
 *
 * Without CUDA it checks instead that CUDA requests fail cleanly
 * (DR_ENOCUDA, "CUDA not available: ...") while host collectives work,
 * prints "skip - ..." and exits 0.  `cuda_colls --probe` only reports
 * whether CUDA is available (exit 0) or why not (exit 1), without joining
 * a job.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distrun.h"

enum { AR, BC, RD, AG, RS, GA, SC, A2A, A2AV };
static const char *const coll_names[] = {
	"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
	"gather", "scatter", "all_to_all", "all_to_all_v",
};

static int rank, n, dev, passed, failed;

static void fail(const char *what, const char *detail)
{
	failed++;
	printf("not ok - rank %d: %s: %s\n", rank, what, detail);
}

/* Elements rank i sends to rank j in all_to_all_v. */
static size_t a2av_count(size_t count, int i, int j)
{
	return count + (size_t)i + 2 * (size_t)j;
}

/* The call itself; send/recv are either both host or both device. */
static dr_err call(int coll, const void *send, void *recv, size_t count,
		   dr_dtype dt, dr_op op, int root, dr_work **work)
{
	size_t sc[64], rc[64];

	switch (coll) {
	case AR: return dr_all_reduce(recv, count, dt, op, NULL, work);
	case BC: return dr_broadcast(recv, count, dt, root, NULL, work);
	case RD: return dr_reduce(recv, count, dt, op, root, NULL, work);
	case AG: return dr_all_gather(send, recv, count, dt, NULL, work);
	case RS: return dr_reduce_scatter(send, recv, count, dt, op, NULL, work);
	case GA: return dr_gather(send, recv, count, dt, root, NULL, work);
	case SC: return dr_scatter(send, recv, count, dt, root, NULL, work);
	case A2A: return dr_all_to_all(send, recv, count, dt, NULL, work);
	default:
		for (int j = 0; j < n; j++) {
			sc[j] = a2av_count(count, rank, j);
			rc[j] = a2av_count(count, j, rank);
		}
		return dr_all_to_all_v(send, sc, recv, rc, dt, NULL, work);
	}
}

static dr_err call_wait(int coll, const void *send, void *recv, size_t count,
			dr_dtype dt, dr_op op, int root, int async)
{
	dr_work *w = NULL;
	dr_err err = call(coll, send, recv, count, dt, op, root, async ? &w : NULL);
	if (!err && async)
		err = dr_work_wait(w);
	dr_work_free(w);
	return err;
}

/* Bytes of this rank's send and receive buffers (in-place collectives use
 * the receive buffer only); 0 where a rank passes NULL. */
static void sizes(int coll, size_t count, size_t esz, int root, size_t *sb,
		  size_t *rb)
{
	size_t c = count * esz, all = c * (size_t)n;
	*sb = 0;
	*rb = c;
	switch (coll) {
	case AG: *sb = c; *rb = all; break;
	case RS: *sb = all; break;
	case GA: *sb = c; *rb = rank == root ? all : 0; break;
	case SC: *sb = rank == root ? all : 0; break;
	case A2A: *sb = all; *rb = all; break;
	case A2AV:
		*rb = 0;
		for (int j = 0; j < n; j++) {
			*sb += a2av_count(count, rank, j) * esz;
			*rb += a2av_count(count, j, rank) * esz;
		}
		break;
	default: break;
	}
}

static void fill(void *p, size_t bytes, dr_dtype dt)
{
	if (dt == DR_FLOAT32) {
		float *f = p;
		for (size_t i = 0; i < bytes / 4; i++)
			f[i] = (float)((rank + 1) * (int)(i % 1013 + 1));
	} else {
		int32_t *v = p;
		for (size_t i = 0; i < bytes / 4; i++)
			v[i] = (rank + 1) * (int32_t)(i % 1013 + 1) + (int32_t)(i / 1013);
	}
}

static int test_case(int coll, size_t count, dr_dtype dt, dr_op op, int async)
{
	size_t sb, rb, esz = dr_dtype_size(dt);
	int root = (coll == BC || coll == SC) ? n - 1 : 1 % n;
	int in_place = coll == AR || coll == BC || coll == RD;
	char what[160], detail[256];
	void *hs = NULL, *hr = NULL, *back = NULL, *ds = NULL, *dre = NULL;
	dr_err err;
	int ok = 0;

	snprintf(what, sizeof what, "%s%s(count=%zu, %s, %s)", async ? "async " : "",
		 coll_names[coll], count, dr_dtype_name(dt), dr_op_name(op));
	sizes(coll, count, esz, root, &sb, &rb);
	if (in_place)
		sb = rb;
	hs = malloc(sb + 1);
	hr = malloc(rb + 1);
	back = malloc(rb + 1);
	if (!hs || !hr || !back) {
		fail(what, "out of host memory");
		goto out;
	}
	fill(hs, sb, dt);
	memset(hr, 0x5a, rb);
	if (in_place)
		memcpy(hr, hs, rb);
	if ((sb && !in_place && (err = dr_cuda_alloc(dev, sb, &ds))) ||
	    (rb && (err = dr_cuda_alloc(dev, rb, &dre))) ||
	    (ds && (err = dr_cuda_memcpy(ds, hs, sb))) ||
	    (dre && (err = dr_cuda_memcpy(dre, hr, rb)))) {
		snprintf(detail, sizeof detail, "setting up: %s", dr_last_error());
		fail(what, detail);
		goto out;
	}
	/* Host first, then device: the same call on both kinds of buffer. */
	err = call_wait(coll, in_place ? NULL : (sb ? hs : NULL), rb ? hr : NULL,
			count, dt, op, root, async);
	if (err) {
		snprintf(detail, sizeof detail, "on host buffers: %s: %s",
			 dr_err_name(err), dr_last_error());
		fail(what, detail);
		goto out;
	}
	err = call_wait(coll, ds, dre, count, dt, op, root, async);
	if (!err && rb)
		err = dr_cuda_memcpy(back, dre, rb);
	if (err) {
		snprintf(detail, sizeof detail, "on device buffers: %s: %s",
			 dr_err_name(err), dr_last_error());
		fail(what, detail);
		goto out;
	}
	for (size_t i = 0; i < rb; i++)
		if (((unsigned char *)back)[i] != ((unsigned char *)hr)[i]) {
			snprintf(detail, sizeof detail,
				 "byte %zu (element %zu) differs: device result 0x%02x, host 0x%02x",
				 i, i / esz, ((unsigned char *)back)[i],
				 ((unsigned char *)hr)[i]);
			fail(what, detail);
			goto out;
		}
	ok = 1;
	passed++;
out:
	dr_cuda_free(ds);
	dr_cuda_free(dre);
	free(hs);
	free(hr);
	free(back);
	return ok;
}

/* A device recvbuf with a host sendbuf: refused on every rank alike. */
static void test_mixed(void)
{
	int32_t host[4] = { 0 };
	void *d = NULL;
	const char *what = "all_gather(host sendbuf, device recvbuf)";
	if (dr_cuda_alloc(dev, sizeof host * (size_t)n, &d)) {
		fail(what, dr_last_error());
		return;
	}
	dr_err err = dr_all_gather(host, d, 4, DR_INT32, NULL, NULL);
	if (err == DR_EINVAL && strstr(dr_last_error(), "same device"))
		passed++;
	else
		fail(what, err ? dr_last_error() : "accepted");
	dr_cuda_free(d);
}

/* barrier(device_ids): blocking and asynchronous; a device that does not
 * exist is refused on every rank alike (last: the call fails). */
static void test_barrier_devices(void)
{
	dr_work *w = NULL;
	int bad = dr_cuda_device_count();
	dr_err err = dr_barrier(NULL, NULL, &dev, 1);
	if (err)
		fail("barrier(device_ids)", dr_last_error());
	else
		passed++;
	err = dr_barrier(NULL, &w, &dev, 1);
	if (!err)
		err = dr_work_wait(w);
	dr_work_free(w);
	if (err)
		fail("async barrier(device_ids)", dr_last_error());
	else
		passed++;
	err = dr_barrier(NULL, NULL, &bad, 1);
	if (err == DR_EINVAL && strstr(dr_last_error(), "out of range"))
		passed++;
	else
		fail("barrier(device_ids) with a device out of range",
		     err ? dr_last_error() : "accepted");
}

/* Without CUDA: every CUDA request fails with DR_ENOCUDA and a reason. */
static int no_cuda_checks(void)
{
	void *p = (void *)1;
	int dev0 = 0;
	int32_t x = rank + 1;
	dr_err err;

	if ((err = dr_cuda_alloc(0, 64, &p)) != DR_ENOCUDA || p)
		fail("dr_cuda_alloc without CUDA", "expected DR_ENOCUDA, NULL");
	if (strncmp(dr_last_error(), "CUDA not available: ", 20))
		fail("message without CUDA", dr_last_error());
	if ((err = dr_barrier(NULL, NULL, &dev0, 1)) != DR_ENOCUDA)
		fail("barrier(device_ids) without CUDA", dr_err_name(err));
	if ((err = dr_all_reduce(&x, 1, DR_INT32, DR_SUM, NULL, NULL)) ||
	    x != n * (n + 1) / 2)
		fail("host all_reduce after the CUDA errors", dr_last_error());
	if (failed)
		return 1;
	dr_cuda_set_stream(0, NULL);
	printf("skip - rank %d: %s; the no-CUDA paths behave\n", rank,
	       dr_last_error());
	return 0;
}

int main(int argc, char **argv)
{
	static const size_t counts[] = { 1, 1027, 300007, 3000001 };
	static const struct { dr_dtype dt; dr_op op; } red[] = {
		{ DR_INT32, DR_SUM }, { DR_FLOAT32, DR_SUM }, { DR_INT32, DR_MAX },
		{ DR_FLOAT32, DR_AVG },
	};
	const char *lr = getenv("LOCAL_RANK");
	int rc;

	if (argc > 1 && !strcmp(argv[1], "--probe")) {
		if (dr_cuda_available()) {
			printf("CUDA available: %d device(s)\n", dr_cuda_device_count());
			return 0;
		}
		dr_cuda_set_stream(0, NULL);
		printf("%s\n", dr_last_error());
		return 1;
	}
	if (dr_init_process_group(NULL, NULL)) {
		fprintf(stderr, "init: %s\n", dr_last_error());
		return 1;
	}
	rank = dr_get_rank();
	n = dr_get_world_size();
	if (n > 64) {
		fprintf(stderr, "at most 64 ranks\n");
		return 1;
	}
	if (!dr_cuda_available()) {
		rc = no_cuda_checks();
		dr_destroy_process_group();
		return rc;
	}
	dev = (lr ? atoi(lr) : rank) % dr_cuda_device_count();

	for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
		size_t count = counts[c];
		for (size_t k = 0; k < sizeof red / sizeof red[0]; k++)
			test_case(AR, count, red[k].dt, red[k].op, 0);
		test_case(AR, count, DR_INT32, DR_SUM, 1);
		test_case(BC, count, DR_INT32, DR_SUM, 0);
		test_case(RD, count, DR_INT32, DR_SUM, 0);
		if (count > 300007)
			continue; /* the rest hold n blocks: keep them modest */
		test_case(AG, count, DR_INT32, DR_SUM, 0);
		test_case(AG, count, DR_FLOAT32, DR_SUM, 1);
		test_case(RS, count, DR_INT32, DR_SUM, 0);
		test_case(RS, count, DR_FLOAT32, DR_MAX, 1);
		test_case(GA, count, DR_INT32, DR_SUM, 0);
		test_case(SC, count, DR_INT32, DR_SUM, 0);
		test_case(A2A, count, DR_INT32, DR_SUM, 0);
		test_case(A2AV, count, DR_INT32, DR_SUM, 0);
	}
	test_mixed();
	test_barrier_devices();
	dr_destroy_process_group();
	printf("rank %d: %d passed, %d failed\n", rank, passed, failed);
	return failed ? 1 : 0;
}
