/*
 * rdzv.h - how a rank finds the job when distrun did not start it
 * (internal, never installed).
 *
 *   tcpstore.c   a client of torch's TCPStore, for ranks started by
 *                torchrun, whose agent already serves one at
 *                MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE)
 *   rdzv_env.c   rank, size and job identity from other launchers'
 *                variables (Open MPI, MPICH's hydra, PMIx, Slurm); the
 *                store address published through a file (file://PATH, or a
 *                private per-user file when every rank is on this host)
 *
 * init.c's rendezvous talks to either store through dri_kv, so the
 * exchange it runs is the same whoever serves the store.
 */
#ifndef DRI_RDZV_H
#define DRI_RDZV_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "store.h"

/* ------------------------------------------------- torch's TCPStore */

typedef struct dri_tcpstore dri_tcpstore;

/* The wire dialects: torch <= 2.0 (Debian 12's 1.13 among them) and torch
 * >= 2.1, whose clients open with VALIDATE and a magic number and whose
 * command codes are shifted by one. */
enum { DRI_TCPSTORE_V1 = 1, DRI_TCPSTORE_V2 = 2 };

/* Connects to the TCPStore at host:port (retrying until timeout_ms, as the
 * agent may not listen yet), finds out which dialect it speaks and keeps
 * the connection.  Every key this client uses is sent as "/" prefix key,
 * so prefix must keep them apart from torch's own ("/worker/...",
 * "torchelastic/...").  DR_ECONN if nothing answers, DR_EPROTO (naming
 * host:port) if what answers is not a TCPStore, DR_ETIMEDOUT if it stays
 * silent. */
dr_err dri_tcpstore_connect(const char *host, int port, const char *prefix,
			    int64_t timeout_ms, dri_tcpstore **out);
void dri_tcpstore_close(dri_tcpstore *ts);
int dri_tcpstore_fd(const dri_tcpstore *ts);
/* DRI_TCPSTORE_V1 or DRI_TCPSTORE_V2. */
int dri_tcpstore_dialect(const dri_tcpstore *ts);
/* As dri_store_set, _get (waits for the key, up to timeout_ms) and _add.
 * Values longer than DRI_TCPSTORE_VALUE_MAX are refused both ways. */
#define DRI_TCPSTORE_VALUE_MAX (64u << 20)
dr_err dri_tcpstore_set(dri_tcpstore *ts, const char *key, const void *val,
			size_t len, int64_t timeout_ms);
dr_err dri_tcpstore_get(dri_tcpstore *ts, const char *key, void **val,
			size_t *len, int64_t timeout_ms);
dr_err dri_tcpstore_add(dri_tcpstore *ts, const char *key, int64_t delta,
			int64_t *out, int64_t timeout_ms);

/* The framing, exposed for the unit tests.  A request of the given dialect
 * for cmd (DRI_TS_*), with key (already prefixed), a value (SET) or a
 * delta (ADD), into a malloc'ed buffer; NULL when out of memory. */
enum { DRI_TS_SET, DRI_TS_GET, DRI_TS_ADD, DRI_TS_WAIT, DRI_TS_NUMKEYS };
unsigned char *dri_tcpstore_encode(int dialect, int cmd, const char *key,
				   const void *val, size_t len, int64_t delta,
				   size_t *out_len);
/* The bytes a client sends first to tell the dialects apart (see
 * tcpstore.c), and how many reply bytes a 2.x server sends to them. */
extern const unsigned char dri_tcpstore_probe[9];
#define DRI_TCPSTORE_PROBE_REPLY 32

/* ------------------------------------------------------- either store */

typedef struct dri_kv {
	dri_store *st;        /* distrun's own store (store.c), or */
	dri_tcpstore *ts;     /* torch's, served by torchrun's agent */
	int64_t timeout_ms;   /* for the torch client's replies */
} dri_kv;

dr_err dri_kv_set(dri_kv *kv, const char *key, const void *val, size_t len);
dr_err dri_kv_get(dri_kv *kv, const char *key, void **val, size_t *len,
		  int64_t timeout_ms);
dr_err dri_kv_add(dri_kv *kv, const char *key, int64_t delta, int64_t *out);
int dri_kv_fd(const dri_kv *kv);
/* Closes whichever client is open; the struct can be reused. */
void dri_kv_close(dri_kv *kv);

/* ---------------------------------------------- finding the job */

typedef enum {
	DRI_RDZV_SERVE, /* rank 0 serves the store at host:port */
	DRI_RDZV_TORCH, /* torchrun's agent serves a TCPStore at host:port */
	DRI_RDZV_FILE,  /* rank 0 serves on an ephemeral port, published in path */
} dri_rdzv_mode;

typedef struct {
	dri_rdzv_mode mode;
	int rank, size;
	int local_rank, local_size; /* -1 when the launcher does not say */
	char host[256];             /* where the store is (FILE: once known) */
	int port;
	const char *bind;           /* where rank 0 serves it; NULL: everywhere */
	char path[1024];            /* FILE: the published address */
	int private_file;           /* path is in the private per-user dir */
	int loopback;               /* every rank here: serve on 127.0.0.1 */
	int published;              /* rank 0 wrote path (and must remove it) */
	char prefix[300];           /* TORCH: our keys' prefix */
	char job[512];              /* the launcher's job identity, if used */
} dri_rdzv_plan;

/* Reads init_method ("env://", "tcp://HOST:PORT", "file:///PATH") and the
 * environment into a plan.  rank and size, when >= 0 and > 0, are the
 * caller's and win over any variable.  DR_EINVAL for a bad method,
 * DR_EENV naming the variables found and what is missing.  Records the
 * launcher found for dr_get_launcher(). */
dr_err dri_rdzv_plan_make(const char *method, int rank, int size,
			  dri_rdzv_plan *p);
/* Rank 0, serving the store on port (ephemeral) for a FILE plan: sets
 * host and port and writes them to path, atomically. */
dr_err dri_rdzv_publish(dri_rdzv_plan *p, int port);
/* The other ranks of a FILE plan: wait (up to timeout_ms) for path, then
 * set host and port from it.  A file naming a process of this host that
 * is gone (a job killed before it removed the file) is not taken. */
dr_err dri_rdzv_lookup(dri_rdzv_plan *p, int64_t timeout_ms);
/* The job identity the store key is derived from (auth.h): what every
 * rank of the job knows before it connects, whichever launcher started
 * it (the port, TORCHELASTIC_RUN_ID, the launcher's job id, the world
 * size; for FILE, the path instead of the port). */
void dri_rdzv_identity(const dri_rdzv_plan *p, char *buf, size_t size);
/* The variables that must be the same on every rank (they choose how
 * the collectives run), and "NAME=VALUE\n" for each in order ("NAME\n"
 * if unset or empty): what rank 0 publishes at init for the others to
 * compare.  0, or -1 if it does not fit in size. */
#define DRI_RDZV_N_SETTINGS 6
extern const char *const dri_rdzv_setting_vars[DRI_RDZV_N_SETTINGS];
int dri_rdzv_settings(char *buf, size_t size);
/* Every rank has joined (or init failed): rank 0 removes the file it
 * published.  No-op otherwise. */
void dri_rdzv_joined(dri_rdzv_plan *p);

#endif /* DRI_RDZV_H */
