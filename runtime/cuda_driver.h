/*
 * cuda_driver.h - the CUDA driver as libdistrun loads it (cuda_driver.c),
 * for the code that stages collectives through it (cuda_stage.c), and the
 * pointer query every entry point makes: below the collectives, knowing
 * nothing of them (layer 4, beside the groups; it needs only the clock,
 * the error state and the job's timeout).
 *
 * The driver API is declared here by hand with its ABI names, so that no
 * toolkit header is needed to build; the function table is filled once by
 * dlsym.  Every call into the driver goes through dri_cu.<Name>(...) after
 * dri_cu_ready() said yes.  Devices are used in their primary context (the
 * one the CUDA runtime uses), entered with dri_cu_enter and left with
 * dri_cu_leave on the calling thread.
 */
#ifndef DRI_CUDA_DRIVER_H
#define DRI_CUDA_DRIVER_H

#include <stdint.h>

#include "clock.h"
#include "error.h"
#include "timeout.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

/* The device a pointer lives on, or -1 for host memory (and always -1
 * without CUDA).  Called by every collective entry point, so it must cost
 * well under a microsecond on host memory where CUDA is absent: no
 * filesystem work per call (a dlopen(RTLD_NOLOAD) searches the disk for a
 * library that is not loaded, which costs more than a whole barrier); it
 * watches the link map (dl_iterate_phdr) instead. */
int dri_cuda_ptr_device(const void *p);
/* What its first call on a thread would read, read now: the calling
 * thread's stack (pthread_getattr_np: /proc/self/maps for the main
 * thread), the heap's start (/proc/self/stat), the link map once.  Some
 * 130 us, which dr_init_process_group pays instead of the program's
 * first collective with data (scripts/first_calls.c, docs/small-calls-log-2.md);
 * another thread still reads its own stack at its first call. */
void dri_cuda_ptr_prepare(void);
/* Whether this thread's reads are done (for the tests). */
int dri_cuda_ptr_prepared(void);

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_CONTEXT_IS_DESTROYED 709
/* The implicit streams: one legacy default stream per context, the same
 * on every thread; and the calling thread's own default stream, a
 * different one on each thread. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2

/* The ABI names (cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on); the
 * unsuffixed cuMemcpy, cuMemcpyAsync, cuEventRecord, cuStreamWaitEvent are
 * the legacy-default-stream variants, which is what a NULL stream means
 * here. */
#define DRI_CU_FUNCS(XX)                                                      \
	XX(Init, "cuInit", (unsigned flags))                                  \
	XX(DeviceGetCount, "cuDeviceGetCount", (int *n))                      \
	XX(DeviceGet, "cuDeviceGet", (CUdevice *dev, int ordinal))            \
	XX(GetErrorName, "cuGetErrorName", (CUresult e, const char **s))      \
	XX(GetErrorString, "cuGetErrorString", (CUresult e, const char **s))  \
	XX(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                \
	   (CUcontext *ctx, CUdevice dev))                                    \
	XX(DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState",            \
	   (CUdevice dev, unsigned *flags, int *active))                      \
	XX(CtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx))            \
	XX(CtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext *ctx))             \
	XX(CtxGetCurrent, "cuCtxGetCurrent", (CUcontext *ctx))                \
	XX(CtxSynchronize, "cuCtxSynchronize", (void))                        \
	XX(PointerGetAttributes, "cuPointerGetAttributes",                    \
	   (unsigned n, int *attrs, void **data, CUdeviceptr p))              \
	XX(StreamCreate, "cuStreamCreate", (CUstream *s, unsigned flags))     \
	XX(StreamGetCtx, "cuStreamGetCtx", (CUstream s, CUcontext *ctx))      \
	XX(EventCreate, "cuEventCreate", (CUevent *e, unsigned flags))        \
	XX(EventRecord, "cuEventRecord", (CUevent e, CUstream s))             \
	XX(EventQuery, "cuEventQuery", (CUevent e))                           \
	XX(StreamWaitEvent, "cuStreamWaitEvent",                              \
	   (CUstream s, CUevent e, unsigned flags))                           \
	XX(MemcpyAsync, "cuMemcpyAsync",                                      \
	   (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))          \
	XX(Memcpy, "cuMemcpy", (CUdeviceptr dst, CUdeviceptr src, size_t n))  \
	XX(MemHostAlloc, "cuMemHostAlloc", (void **p, size_t n, unsigned fl)) \
	XX(MemFreeHost, "cuMemFreeHost", (void *p))                           \
	XX(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr *p, size_t n))             \
	XX(MemFree, "cuMemFree_v2", (CUdeviceptr p))

struct dri_cu_api {
#define DRI_CU_XX_PTR(name, sym, args) CUresult (*name) args;
	DRI_CU_FUNCS(DRI_CU_XX_PTR)
#undef DRI_CU_XX_PTR
};
/* Valid once dri_cu_ready() has returned 1. */
extern struct dri_cu_api dri_cu;

static inline CUdeviceptr dri_cu_ptr(const void *p)
{
	return (CUdeviceptr)(uintptr_t)p;
}

/* Loads and initialises the driver on first call (the same thread-safe
 * once as dr_cuda_available); 1 when CUDA is usable in this process (not
 * in a child forked after the parent used it). */
int dri_cu_ready(void);
/* DR_ENOCUDA, "CUDA not available: <why>". */
dr_err dri_cu_unavailable(void);
/* Devices (valid when ready). */
int dri_cu_ndev(void);
/* DR_ECUDA "<call> on cuda:<device> failed: <driver's name for r>". */
dr_err dri_cu_fail(CUresult r, const char *call, int device);
/* Whether r says the object was made in a context that is gone (a
 * cudaDeviceReset since): then the object will never work again. */
int dri_cu_dead(CUresult r);

/* Makes device's primary context current on this thread (a push; the
 * caller pops with dri_cu_leave).  Retained on the first use of the device
 * and kept.  A context reset since (cudaDeviceReset) is retained again and
 * the device's generation advances, so that objects made before are not
 * used again (dri_cu_generation). */
dr_err dri_cu_enter(int device);
void dri_cu_leave(void);
/* The device's generation: objects made in its context carry it. */
unsigned dri_cu_generation(int device);
/* Called when a driver object of device answered with a dri_cu_dead code:
 * advances the generation if it still is gen. */
void dri_cu_context_lost(int device, unsigned gen);
/* The primary context of device, NULL if never entered. */
CUcontext dri_cu_context(int device);

/* dr_cuda_set_stream's stream for device (CU_STREAM_LEGACY when none). */
CUstream dri_cu_user_stream(int device);

/* An event of device's context (entered by the caller) from a pool, and
 * back.  Events of an older generation are dropped, never reused. */
dr_err dri_cu_event_get(int device, CUevent *ev, unsigned *gen);
void dri_cu_event_put(int device, CUevent ev, unsigned gen);

/* Takes a pooled event and records it on stream s of device (entered by
 * the caller).  An event of a context reset since (the record answers a
 * dri_cu_dead code) advances the generation and is tried once more with a
 * fresh one.  On success the caller gives *ev back with dri_cu_event_put. */
dr_err dri_cu_record(int device, CUstream s, CUevent *ev, unsigned *gen);

/* Waits for an event without cuEventSynchronize, which has no timeout:
 * DR_ETIMEDOUT naming what after the deadline (dri_now_ms clock). */
dr_err dri_cu_wait_event(CUevent ev, int device, int64_t deadline,
			 const char *what);
/* cuCtxSynchronize of device's context, bounded by the deadline: it runs
 * on a helper thread, and a wait that passes the deadline fails with
 * DR_ETIMEDOUT (the helper ends when the device does). */
dr_err dri_cu_sync_context(int device, int64_t deadline);

/* The device of a pointer once the driver is loaded: -1 for host memory;
 * managed memory counts as its device's (it must be staged: the host
 * algorithm would read it before the user's stream wrote it). */
int dri_cu_ptr_device(const void *p);

#endif /* DRI_CUDA_DRIVER_H */
