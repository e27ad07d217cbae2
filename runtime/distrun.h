/*
 * distrun.h - the one public header of libdistrun.
 *
 * libdistrun gives C programs what torch.distributed gives Python: a process
 * group made at start-up (dr_init_process_group), collectives over it
 * (barrier, all_reduce, broadcast, reduce, all_gather, gather, scatter,
 * reduce_scatter, all_to_all), point-to-point messages, subgroups, and CUDA
 * device synchronisation.  Transport is TCP; the program is started by
 * `distrun -n N ./prog` (or torchrun, or anything that sets MASTER_ADDR,
 * MASTER_PORT, RANK and WORLD_SIZE).
 *
 * Conventions, for every call below:
 *   - A call that can fail returns a dr_err.  DR_OK (0) is success; on any
 *     other value dr_last_error() returns a message naming what was wrong
 *     (per thread, valid until the thread's next failing call).  The library
 *     never prints and never exits.
 *   - Ranks given as arguments (src, dst, root) are ranks in the world, as in
 *     torch.distributed; group == NULL means the world group.
 *   - work == NULL: the call blocks until the operation has completed on this
 *     rank (async_op=False).  work != NULL: the call returns at once with a
 *     handle in *work (async_op=True); the operation progresses in the
 *     background without the caller's help; the buffers must stay valid and
 *     untouched until dr_work_wait() returns.  The caller owns the handle and
 *     releases it with dr_work_free().  If a call returns an error, *work is
 *     set to NULL and no operation was started.
 *   - Every wait has a timeout: DISTRUN_TIMEOUT (seconds, or a duration like
 *     "90s", "5m") or dr_init_options.timeout_ms; default 30 minutes as in
 *     torch.
 *   - Calls on one group are ordered: every rank of the group must issue the
 *     same collectives in the same order (blocking and asynchronous alike).
 *     A rank whose call differs from its peers' (another collective, count,
 *     dtype, op or root) gets DR_EMISMATCH naming both sides.
 *   - A failure once a collective has started (a peer that died, a
 *     mismatch, a timeout, or this rank running out of memory or failing
 *     a CUDA call half-way) is final: the process group is aborted, the
 *     peers fail at once with this rank's reason, and later calls fail
 *     with DR_EABORTED.  Bad arguments fail before anything is sent, on
 *     the calling rank alone; the group goes on.
 *   - Threads: calls on one group must come from one thread at a time (the
 *     caller serialises them, as torch expects for a group); calls on
 *     different groups may come from different threads at once.  Init,
 *     destroy, dr_new_group and dr_group_destroy must not run at the same
 *     time as any other call.  dr_work handles may be waited on, polled
 *     and freed from any thread, one thread per handle.
 *   - Each group runs its asynchronous calls in order on a thread of its
 *     own (started by its first asynchronous call), as torch gives each
 *     group its own queue: ranks may issue asynchronous calls on two
 *     groups in different orders without waiting on each other.  A
 *     blocking call on a group runs after the group's earlier
 *     asynchronous calls.
 *   - Buffers of one call are all host memory or all on one CUDA device
 *     (buffers a rank does not use excepted, such as a non-root's gather
 *     recvbuf); mixing fails with DR_EINVAL on the calling rank before
 *     anything is sent.  Point-to-point calls take host memory only.
 */
#ifndef DISTRUN_H
#define DISTRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DR_API __attribute__((visibility("default")))
#else
#define DR_API
#endif

#define DR_VERSION_MAJOR 0
#define DR_VERSION_MINOR 1
#define DR_VERSION_PATCH 0

/* ------------------------------------------------------------------ errors */

/* XX(NAME, message): the enum dr_err and dr_strerror() both come from here. */
#define DR_ERR_MAP(XX)                                                        \
	XX(OK, "success")                                                     \
	XX(EINVAL, "invalid argument")                                        \
	XX(ENOINIT, "default process group has not been initialized")         \
	XX(EALREADY, "process group is already initialized")                  \
	XX(EENV, "missing or invalid environment variable")                   \
	XX(ETIMEDOUT, "operation timed out")                                  \
	XX(ECONN, "could not connect to a peer")                              \
	XX(EPEER, "a peer closed its connection or died")                     \
	XX(EMISMATCH, "ranks made different collective calls")                \
	XX(EPROTO, "protocol error on a connection")                          \
	XX(ENOMEM, "out of memory")                                           \
	XX(ESYS, "system call failed")                                        \
	XX(ENOTMEMBER, "this rank is not a member of the group")              \
	XX(ENOTSUP, "operation not supported for this dtype")                 \
	XX(ENOCUDA, "CUDA not available")                                     \
	XX(ECUDA, "CUDA call failed")                                         \
	XX(EABORTED, "process group aborted after an earlier error")          \
	XX(EAUTH, "a peer could not prove the job's secret")

typedef enum {
#define DR_XX_ENUM(name, msg) DR_##name,
	DR_ERR_MAP(DR_XX_ENUM)
#undef DR_XX_ENUM
	DR_ERR_COUNT_
} dr_err;

/* Static string for an error code ("unknown error" for values outside the
 * table).  Never NULL, never freed. */
DR_API const char *dr_strerror(dr_err err);

/* Name of the code itself, e.g. "DR_EMISMATCH".  Never NULL. */
DR_API const char *dr_err_name(dr_err err);

/* Detail of this thread's last failing call, e.g. "rank 2 called
 * all_reduce(count=3, float32, sum) but rank 1 called barrier".  "" if no
 * call has failed yet.  The string belongs to the library. */
DR_API const char *dr_last_error(void);

/* ------------------------------------------------------ dtypes and ops */

typedef enum {
	DR_INT8,
	DR_UINT8,
	DR_INT32,
	DR_INT64,
	DR_FLOAT16,  /* IEEE binary16 in uint16_t; reduced in float, rounded to nearest even */
	DR_BFLOAT16, /* bfloat16 in uint16_t; reduced in float, rounded to nearest even */
	DR_FLOAT32,
	DR_FLOAT64,
	DR_DTYPE_COUNT_
} dr_dtype;

typedef enum {
	DR_SUM,
	DR_AVG,     /* sum, divided once by the group size at the end */
	DR_PRODUCT,
	DR_MIN,
	DR_MAX,
	DR_BAND,    /* bitwise ops: integer dtypes only, DR_ENOTSUP otherwise */
	DR_BOR,
	DR_BXOR,
	DR_OP_COUNT_
} dr_op;

/* Bytes per element (0 for an invalid dtype). */
DR_API size_t dr_dtype_size(dr_dtype dtype);
/* "float32", "sum", ...; "invalid" for out-of-range values. */
DR_API const char *dr_dtype_name(dr_dtype dtype);
DR_API const char *dr_op_name(dr_op op);

/* ------------------------------------------------------- process group */

typedef struct dr_group dr_group; /* opaque; NULL means the world */
typedef struct dr_work dr_work;   /* opaque handle of an asynchronous call */

typedef struct {
	const char *backend;     /* "tcp" (also accepted: "gloo"); NULL = "tcp" */
	const char *init_method; /* "env://", "tcp://host:port", "file:///path"
				  * or "tcpstore://host:port/prefix" (a
				  * client of a torch TCPStore that serves
				  * there); NULL = env:// */
	int rank;                /* -1: from RANK */
	int world_size;          /* -1: from WORLD_SIZE */
	int64_t timeout_ms;      /* <= 0: DISTRUN_TIMEOUT, else 30 minutes */
	const char *transport;   /* "auto", "shm", "tcp"; NULL: DISTRUN_TRANSPORT,
				  * else auto (shared memory with the peers on
				  * this host, TCP with the others) */
} dr_init_options;

#define DR_INIT_OPTIONS_INIT { NULL, NULL, -1, -1, 0, NULL }

/* Joins the job: rank 0 hosts a key-value store at MASTER_ADDR:MASTER_PORT
 * (or the tcp:// address; under torchrun the agent's TCPStore serves
 * instead; without MASTER_* under mpirun, mpiexec or srun on one host, or
 * with file:///PATH, at an address published in a file: see distrun.3,
 * "Under other launchers"); every rank registers its listening address there
 * and connections between ranks are then made as the collectives need them.
 * Blocks until every rank has joined or the timeout passes.  Errors:
 * DR_EENV (a variable missing or malformed, named in dr_last_error),
 * DR_EINVAL (bad backend or init_method), DR_EALREADY, DR_ETIMEDOUT,
 * DR_ECONN. */
DR_API dr_err dr_init_process_group(const char *backend, const char *init_method);
DR_API dr_err dr_init_process_group_opts(const dr_init_options *opts);

/* The transport this rank got at init: "shm" (every peer through shared
 * memory), "tcp" (every peer through TCP), "shm+tcp" (some of each); NULL
 * before init.  With transport "shm" asked for and not possible, init
 * fails with DR_EINVAL instead, saying why. */
DR_API const char *dr_transport_name(void);

/* 1 between a successful init and destroy, else 0. */
DR_API int dr_is_initialized(void);

/* Rank in the world and world size; -1 before init. */
DR_API int dr_get_rank(void);
DR_API int dr_get_world_size(void);

/* The launcher whose variables the last dr_init_process_group read:
 * "torchrun or distrun", "Open MPI", "MPICH (hydra)", "Slurm", "PMIx",
 * or "" if none.  Set even when init failed; the string belongs to the
 * library. */
DR_API const char *dr_get_launcher(void);

/* Waits for outstanding asynchronous work, closes every connection and
 * frees every group: subgroups the program did not destroy lose their
 * threads and members here.  Their handles stay safe: dr_group_rank gives
 * -1 and dr_group_size 0, other calls fail, and dr_group_destroy frees
 * what is left of them.  Work handles stay valid until dr_work_free;
 * point-to-point work still out fails with DR_EABORTED (a receive at
 * once, a send after up to 2 s to drain), never holding destroy up.
 * Safe to call after an error.  DR_ENOINIT if not initialized. */
DR_API dr_err dr_destroy_process_group(void);

/* ------------------------------------------------------------- groups */

/* Collective over the world: every rank calls it, in the same order, with
 * the same ranks (world ranks, any order, no duplicates), as torch's
 * new_group.  Ranks outside the group get a valid handle too, whose use in
 * a collective fails with DR_ENOTMEMBER.  The caller owns *group and
 * releases it with dr_group_destroy(). */
DR_API dr_err dr_new_group(const int *ranks, int n, dr_group **group);

/* As dr_new_group, but only the members call it, each with the same id:
 * for callers that see a group on its members only (torch's backends,
 * whose new_group never reaches the ranks outside).  id is the caller's
 * numbering of its groups (below DR_SUBGROUP_ID_MAX; two groups alive at
 * once must not share one) and is kept apart from dr_new_group's.  The
 * member lists are not compared across ranks: a member given another list
 * than its peers waits for messages that never come, until the timeout.
 * DR_ENOTMEMBER if this rank is not in ranks, DR_EINVAL for bad ranks or
 * id.  Not collective: nothing is sent.  The caller owns *group and
 * releases it with dr_group_destroy(). */
#define DR_SUBGROUP_ID_MAX 0x80000000u
DR_API dr_err dr_new_subgroup(const int *ranks, int n, uint32_t id,
			      dr_group **group);

/* This rank's index in the group, -1 if not a member (or before init, or
 * once the process group is destroyed).  NULL = world. */
DR_API int dr_group_rank(const dr_group *group);
/* Number of ranks in the group; NULL = world (-1 before init); 0 for a
 * group whose process group was destroyed. */
DR_API int dr_group_size(const dr_group *group);
/* Frees a group made by dr_new_group, before or after
 * dr_destroy_process_group (NULL is a no-op).  Waits for the group's
 * outstanding asynchronous calls first.  Not collective. */
DR_API void dr_group_destroy(dr_group *group);

/* -------------------------------------------------------- collectives */

/* Every rank of the group waits until all have called it.  With
 * device_ids (n_device_ids > 0), first waits for the selected stream
 * (dr_cuda_set_stream; the legacy default stream if none) of each listed
 * CUDA device as it stood at the call, so that the work queued on that
 * stream before the call is complete on every rank when it returns.
 * Only that stream: work on other streams that do not synchronise with it
 * (non-blocking streams, such as PyTorch's side streams, and other
 * threads' per-thread default streams) is not waited for; for all the
 * work of a device use dr_cuda_barrier_device.  DR_ENOCUDA where CUDA is
 * not available (the message says why), DR_EINVAL for a device id out of
 * range. */
DR_API dr_err dr_barrier(dr_group *group, dr_work **work,
			 const int *device_ids, int n_device_ids);

/* As dr_barrier with device ids, but each listed device is synchronised
 * whole (cuCtxSynchronize of its primary context: every stream, every
 * thread's), bounded by the timeout.  Asynchronously, it waits for what
 * the devices hold when the barrier runs, which includes what they held
 * at the call.  n_device_ids must be at least 1. */
DR_API dr_err dr_cuda_barrier_device(dr_group *group, dr_work **work,
				     const int *device_ids, int n_device_ids);

/* buf (count elements) becomes the reduction of every rank's buf. */
DR_API dr_err dr_all_reduce(void *buf, size_t count, dr_dtype dtype, dr_op op,
			    dr_group *group, dr_work **work);

/* buf of every rank becomes src's buf. */
DR_API dr_err dr_broadcast(void *buf, size_t count, dr_dtype dtype, int src,
			   dr_group *group, dr_work **work);

/* dst's buf becomes the reduction of every rank's buf; the buf of every
 * other rank is left untouched. */
DR_API dr_err dr_reduce(void *buf, size_t count, dr_dtype dtype, dr_op op,
			int dst, dr_group *group, dr_work **work);

/* recvbuf (count * group size elements) receives every rank's sendbuf in
 * group-rank order.  sendbuf may be recvbuf + group_rank * count. */
DR_API dr_err dr_all_gather(const void *sendbuf, void *recvbuf, size_t count,
			    dr_dtype dtype, dr_group *group, dr_work **work);

/* As all_gather, but only dst receives; recvbuf is ignored elsewhere (may
 * be NULL). */
DR_API dr_err dr_gather(const void *sendbuf, void *recvbuf, size_t count,
			dr_dtype dtype, int dst, dr_group *group, dr_work **work);

/* src's sendbuf (count * group size elements) is cut in group-size pieces;
 * piece i goes to recvbuf of group rank i.  sendbuf is ignored elsewhere. */
DR_API dr_err dr_scatter(const void *sendbuf, void *recvbuf, size_t count,
			 dr_dtype dtype, int src, dr_group *group, dr_work **work);

/* sendbuf holds count * group size elements; recvbuf (count elements) of
 * group rank i receives the reduction of piece i of every rank's sendbuf. */
DR_API dr_err dr_reduce_scatter(const void *sendbuf, void *recvbuf, size_t count,
				dr_dtype dtype, dr_op op, dr_group *group,
				dr_work **work);

/* Piece j (count elements) of sendbuf goes to group rank j, landing as
 * piece i of its recvbuf, where i is this rank's group rank. */
DR_API dr_err dr_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
			    dr_dtype dtype, dr_group *group, dr_work **work);

/* Variable splits: send_counts[j] elements go to group rank j, recv_counts[i]
 * elements come from group rank i; pieces are contiguous, in rank order.
 * The count arrays are copied; they need not outlive the call. */
DR_API dr_err dr_all_to_all_v(const void *sendbuf, const size_t *send_counts,
			      void *recvbuf, const size_t *recv_counts,
			      dr_dtype dtype, dr_group *group, dr_work **work);

/* Barrier that names who is missing: on timeout (timeout_ms; <= 0 means the
 * default) fails with DR_ETIMEDOUT and a message "Ranks 1, 3 failed to pass
 * monitoredBarrier" naming the ranks that did not arrive (all of them when
 * wait_all_ranks, else the first).  Blocking only. */
DR_API dr_err dr_monitored_barrier(dr_group *group, int64_t timeout_ms,
				   int wait_all_ranks);

/* ---------------------------------------------------- point-to-point */

#define DR_ANY_SOURCE (-1)

/* Messages between a pair of ranks with the same tag arrive in the order
 * sent.  dst/src are world ranks.  A receive whose count differs from the
 * message's fails with DR_EMISMATCH.  buf must be host memory: CUDA
 * device memory fails with DR_ENOTSUP (stage it through host memory). */
DR_API dr_err dr_send(const void *buf, size_t count, dr_dtype dtype, int dst,
		      int tag, dr_group *group);
/* src may be DR_ANY_SOURCE; *out_src (may be NULL) receives the sender. */
DR_API dr_err dr_recv(void *buf, size_t count, dr_dtype dtype, int src,
		      int tag, dr_group *group, int *out_src);
DR_API dr_err dr_isend(const void *buf, size_t count, dr_dtype dtype, int dst,
		       int tag, dr_group *group, dr_work **work);
DR_API dr_err dr_irecv(void *buf, size_t count, dr_dtype dtype, int src,
		       int tag, dr_group *group, dr_work **work);

/* ------------------------------------------------------- work handles */

/* Blocks until the operation has completed (for a collective: completed
 * everywhere it must be for this rank's buffers to hold the result) and
 * returns its status.  Calling it again returns the same status. */
DR_API dr_err dr_work_wait(dr_work *work);
/* As dr_work_wait, but gives up after timeout_ms (<= 0: the job's
 * timeout) with DR_ETIMEDOUT; the operation goes on and the handle stays
 * valid. */
DR_API dr_err dr_work_wait_timeout(dr_work *work, int64_t timeout_ms);
/* 1 if the operation has finished (successfully or not), else 0.  Never
 * blocks. */
DR_API int dr_work_is_completed(dr_work *work);
/* Status of a finished operation (DR_OK while still running). */
DR_API dr_err dr_work_status(dr_work *work);
/* Sender of a completed dr_irecv, -1 otherwise. */
DR_API int dr_work_source(dr_work *work);
/* Releases the handle; if the operation is still running, waits for it
 * first.  NULL is a no-op. */
DR_API void dr_work_free(dr_work *work);

/* --------------------------------------------------------------- CUDA */

/* 1 if the CUDA runtime could be loaded and at least one device is
 * present, else 0.  Never fails, never crashes without CUDA. */
DR_API int dr_cuda_available(void);
/* Number of CUDA devices (0 without CUDA). */
DR_API int dr_cuda_device_count(void);
/* Selects the stream (a cudaStream_t) that dr_barrier's device_ids
 * synchronise and that device-buffer collectives order against on
 * `device`; NULL selects the legacy default stream.  A call takes the
 * stream selected when it is made: a later dr_cuda_set_stream does not
 * move it.  cudaStreamPerThread names the calling thread's stream: a
 * blocking collective takes it, an asynchronous one on device buffers
 * fails with DR_EINVAL (it completes on another thread).  DR_ENOCUDA
 * without CUDA, DR_EINVAL for a device out of range or a stream of
 * another context than the device's primary one. */
DR_API dr_err dr_cuda_set_stream(int device, void *stream);

/* Device memory for C programs built without the CUDA toolkit (the
 * examples, tests): the same run-time-loaded driver, the device's primary
 * context (the one the CUDA runtime uses), so these pointers mix freely
 * with cudaMalloc'ed ones.  Each fails with DR_ENOCUDA without CUDA. */
/* *ptr receives bytes of memory on device.  DR_EINVAL for a device out of
 * range, DR_ECUDA if the driver refuses (out of memory ...). */
DR_API dr_err dr_cuda_alloc(int device, size_t bytes, void **ptr);
/* Frees memory from dr_cuda_alloc or cudaMalloc; NULL is a no-op. */
DR_API dr_err dr_cuda_free(void *ptr);
/* Copies bytes between host and device memory in any direction; blocks
 * until the copy is done (also device to device and from pageable host
 * memory, where cuMemcpy returns early), ordered after earlier work on the
 * legacy default stream; DR_ETIMEDOUT after the timeout. */
DR_API dr_err dr_cuda_memcpy(void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* DISTRUN_H */
