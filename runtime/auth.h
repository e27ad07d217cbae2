/*
 * auth.h - who may talk to a job: SHA-256, HMAC-SHA256, the job's secret
 * and keys, and the challenge-response handshake that starts every store
 * and transport connection (auth.c).  Internal: never installed.
 *
 * The secret.  A job has one secret, 32 random bytes or more, found in
 * this order:
 *   DISTRUN_AUTH=none     no secret: the keys below are computed from
 *                         public values, so anyone can join (insecure,
 *                         only when the user says so);
 *   DISTRUN_SECRET=HEX    what distrun gives its ranks (a fresh secret per
 *                         job; the environment of a process is readable
 *                         only by its owner and root);
 *   DISTRUN_SECRET_FILE=PATH  the bytes of a regular file owned by the
 *                         user and not readable by group or other;
 *   the per-user key file $XDG_CONFIG_HOME/distrun/secret (default
 *                         ~/.config/distrun/secret), created with 32
 *                         random bytes on first use, mode 0600 in a 0700
 *                         directory, owner and mode checked every time:
 *                         ranks started by mpirun, srun or torchrun on one
 *                         host, or with a shared home, then agree.
 *
 * The keys.  The store key is HMAC(secret, "distrun job key" || identity),
 * identity being what every rank knows before it connects (the rendezvous
 * port, the run id, the world size): two jobs of one user with one secret
 * still cannot cross.  The transport key is HMAC(store key, "distrun
 * transport key" || the job nonce rank 0 publishes in the store), unique to
 * this run of the job.
 *
 * The handshake, both ways, before anything else is read or answered:
 *   client -> server  HELLO  magic, version, role, rank, size, nonce_c
 *   server -> client  CHAL   nonce_s, server rank,
 *                            HMAC(key, "distrun server" || HELLO || nonce_s || rank)
 *   client -> server  PROOF  HMAC(key, "distrun client" || HELLO || nonce_s || rank)
 * Both nonces are fresh from getrandom, so a recorded handshake proves
 * nothing the next time; role and ranks are inside both MACs.  All three
 * are fixed-size, so an unauthenticated peer costs a fixed few bytes.
 */
#ifndef DRI_AUTH_H
#define DRI_AUTH_H

/* The variable that holds the job's key (contract.h). */
#define DRI_ENV_SECRET "DISTRUN_SECRET"

#include <stddef.h>
#include <stdint.h>

#include "distrun.h"

#define DRI_KEY_LEN 32

/* --------------------------------------------------- SHA-256, HMAC */

typedef struct {
	uint32_t h[8];
	uint64_t bytes;
	unsigned char buf[64];
	size_t used;
} dri_sha256_ctx;

void dri_sha256_init(dri_sha256_ctx *c);
void dri_sha256_update(dri_sha256_ctx *c, const void *p, size_t n);
void dri_sha256_final(dri_sha256_ctx *c, uint8_t out[32]);
void dri_sha256(const void *p, size_t n, uint8_t out[32]);

typedef struct {
	dri_sha256_ctx inner, outer;
} dri_hmac_ctx;

void dri_hmac_init(dri_hmac_ctx *c, const void *key, size_t klen);
void dri_hmac_update(dri_hmac_ctx *c, const void *p, size_t n);
void dri_hmac_final(dri_hmac_ctx *c, uint8_t out[32]);
void dri_hmac_sha256(const void *key, size_t klen, const void *msg,
		     size_t n, uint8_t out[32]);

/* 1 if the n bytes are equal; the time taken does not depend on where
 * they differ. */
int dri_ct_equal(const void *a, const void *b, size_t n);

/* n bytes from getrandom (never a weaker source): DR_ESYS if it fails. */
dr_err dri_random(void *buf, size_t n);

/* ------------------------------------------------------ the keys */

/* The job identity every rank agrees on before it connects: the
 * rendezvous port, the run id (TORCHELASTIC_RUN_ID, "" if none) and the
 * world size.  Not MASTER_ADDR: hosts may spell it differently. */
void dri_auth_identity(char *buf, size_t size, int port, const char *run_id,
		       int world_size);
/* Finds the secret (see above) and derives the store key for identity.
 * DR_EENV naming the variable or file when one is set but unusable. */
dr_err dri_auth_store_key(const char *identity, uint8_t key[DRI_KEY_LEN]);
/* The transport key from the store key and the job nonce. */
void dri_auth_transport_key(const uint8_t store_key[DRI_KEY_LEN],
			    const void *nonce, size_t n,
			    uint8_t key[DRI_KEY_LEN]);
/* 1 when DISTRUN_AUTH=none: then a failed handshake says so. */
int dri_auth_disabled(void);

/* ------------------------------------------------- the handshake */

enum { DRI_HS_STORE = 1, DRI_HS_TRANSPORT = 2 };
#define DRI_HS_HELLO 48
#define DRI_HS_CHAL 68
#define DRI_HS_PROOF 32
/* How long a server waits for an unauthenticated peer's handshake. */
#define DRI_HS_MS 5000

/* One side's state during a handshake. */
typedef struct {
	unsigned char hello[DRI_HS_HELLO];
	unsigned char chal[DRI_HS_CHAL];
	int role;
} dri_hs;

/* Client: a HELLO with a fresh nonce into hs->hello. */
dr_err dri_hs_hello(dri_hs *hs, int role, int rank, int size);
/* Server: checks a HELLO (magic, version, role) and gives the sender's
 * rank and size; fills hs->chal with the challenge to send.  DR_EPROTO
 * for a HELLO that is not one. */
dr_err dri_hs_challenge(dri_hs *hs, const uint8_t key[DRI_KEY_LEN],
			const unsigned char hello[DRI_HS_HELLO], int role,
			int my_rank, int *rank, int *size);
/* Client: checks the server's MAC in chal (against hs->hello), gives the
 * server's rank and the PROOF to send.  DR_EAUTH if the server does not
 * have the key. */
dr_err dri_hs_answer(dri_hs *hs, const uint8_t key[DRI_KEY_LEN],
		     const unsigned char chal[DRI_HS_CHAL], int *srv_rank,
		     unsigned char proof[DRI_HS_PROOF]);
/* Server: 1 if proof is the client's correct answer to hs->chal. */
int dri_hs_verify(const dri_hs *hs, const uint8_t key[DRI_KEY_LEN],
		  const unsigned char proof[DRI_HS_PROOF]);

#endif /* DRI_AUTH_H */
