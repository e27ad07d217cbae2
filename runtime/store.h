/*
 * store.h - the rendezvous key-value store of distrun's own protocol
 * (store.c, the server): rank 0 serves it on a thread, every rank talks
 * to it through a client (store_client.c).  torch's TCPStore client and
 * the common interface init uses for either are in rdzv.h.
 *
 * Layer 2: above the handshake (auth.h), sockets (net.h) and timeouts.
 */
#ifndef DRI_STORE_H
#define DRI_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "distrun.h"

/* The rendezvous key-value store (store.c).  Rank 0 runs the server on a
 * thread; every rank (rank 0 too) talks to it through a client.  Keys are
 * strings, values bytes.  Every call that waits takes a timeout and fails
 * with DR_ETIMEDOUT naming the key. */
typedef struct dri_store_server dri_store_server;
typedef struct dri_store dri_store;

/* Listens on every address of host (NULL or "" = every interface) at
 * port and serves on a thread until dri_store_server_stop.  Only clients
 * that prove key (auth.h) are served.  DR_ECONN if the port is taken. */
dr_err dri_store_server_start(const char *host, int port,
			      const uint8_t key[32], dri_store_server **out);
void dri_store_server_stop(dri_store_server *srv);
/* The port the server listens on (useful after binding port 0). */
int dri_store_server_port(const dri_store_server *srv);
/* The server's request handling alone, for tests/fuzz/store.c: a server
 * with no thread, no socket and no handshake (NULL when out of memory;
 * free it with dri_store_server_stop).  dri_store_feed appends len bytes
 * to what client id sent after proving the key (the client is made at
 * its first bytes), serves every whole frame and keeps a partial one for
 * the next call; -1 when the server drops the client (a bad frame, a
 * limit), whose state is then gone.  dri_store_take points *out at the
 * reply frames queued for client id since the last take (a parked GET's
 * answer may come from another client's SET) and returns their length;
 * valid until the next dri_store_feed. */
dri_store_server *dri_store_server_local(void);
int dri_store_feed(dri_store_server *srv, unsigned id, const void *in,
		   size_t len);
size_t dri_store_take(dri_store_server *srv, unsigned id,
		      const unsigned char **out);
/* Connects and proves key (as rank), retrying until timeout_ms passes
 * (the server may start later).  DR_EAUTH at once if the server does not
 * have the key. */
dr_err dri_store_connect(const char *host, int port, const uint8_t key[32],
			 int rank, int64_t timeout_ms, dri_store **out);
void dri_store_close(dri_store *st);
/* The client's socket (init uses its local address as the rank's own). */
int dri_store_fd(const dri_store *st);
dr_err dri_store_set(dri_store *st, const char *key, const void *val,
		     size_t len);
/* Waits until key exists, then returns a malloc'ed copy of its value
 * (NUL-terminated for convenience; *len excludes the NUL). */
dr_err dri_store_get(dri_store *st, const char *key, void **val, size_t *len,
		     int64_t timeout_ms);
/* Adds delta to the integer stored at key (0 if absent); *out (may be
 * NULL) receives the new value. */
dr_err dri_store_add(dri_store *st, const char *key, int64_t delta,
		     int64_t *out);

/* The process group's store client (init.c; valid between init and
 * destroy): for the tests that look at what the store holds. */
dri_store *dri_world_store(void);

#endif
