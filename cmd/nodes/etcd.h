/*
 * etcd.h - a small client of etcd's v3 API through its JSON gateway
 * (libcurl + jansson): get, put, compare-and-swap transactions, leases
 * with keep-alive, and a bounded watch.  What distrun's etcd rendezvous
 * needs, nothing more.  Every call takes or uses a deadline; every reply
 * is bounded (ETCD_REPLY_MAX) and checked before use.
 *
 * torchrun's own etcd backends speak etcd's v2 API, which etcd 3.4 (as
 * Debian ships it) has off by default; this speaks v3, on by default.
 */
#ifndef DISTRUN_ETCD_H
#define DISTRUN_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define ETCD_REPLY_MAX (1 << 20)

struct etcd;

/* endpoint: "host:port" or "http://host:port" (https where libcurl has
 * TLS; DISTRUN_ETCD_CACERT, _CERT, _KEY, and _USER "name:password" for
 * etcd's own authentication, which is then used for every call).  0, or
 * -1 with a message in err. */
int etcd_open(struct etcd **out, const char *endpoint, char *err,
	      size_t errsz);
void etcd_close(struct etcd *e);
/* Every later call within call_ms (at most the default, 5 s), on a
 * connection of its own that is closed after it: a launcher keeping the
 * handle while its ranks run holds no socket they would inherit, and a
 * gone etcd stalls its loop briefly. */
void etcd_set_oneshot(struct etcd *e, int call_ms);
/* The last error's text ("connection refused", "etcd: ..."). */
const char *etcd_error(const struct etcd *e);
/* The host part of the endpoint (for finding our own address). */
const char *etcd_host(const struct etcd *e);
int etcd_port(const struct etcd *e);

/* Reads key: 1 found (*val malloc'ed, NUL-terminated; *mod_rev its
 * revision), 0 absent (*rev still the store's revision), -1 error.
 * rev may be NULL. */
int etcd_get(struct etcd *e, const char *key, char **val, int64_t *mod_rev,
	     int64_t *rev);
/* Writes key = val if its mod revision is still mod_rev (0: only if the
 * key does not exist), attached to lease (0: none, -1: the lease it has).  1 written, 0 the
 * compare failed (someone else wrote first), -1 error. */
int etcd_cas(struct etcd *e, const char *key, int64_t mod_rev,
	     const char *val, int64_t lease);
/* The same, writing key2 = val2 too (on the same lease) in the same
 * transaction when it succeeds; key2 NULL: etcd_cas. */
int etcd_cas_with(struct etcd *e, const char *key, int64_t mod_rev,
		  const char *val, int64_t lease, const char *key2,
		  const char *val2);
/* Unconditional put. 0 or -1. */
int etcd_put(struct etcd *e, const char *key, const char *val, int64_t lease);
/* A lease of ttl seconds: its id (> 0), or -1. */
int64_t etcd_lease_grant(struct etcd *e, int ttl);
/* Renews a lease: 1 alive, 0 expired or unknown, -1 error. */
int etcd_lease_keepalive(struct etcd *e, int64_t id);
int etcd_lease_revoke(struct etcd *e, int64_t id);
/* Waits until key changes after revision after_rev, or timeout_ms pass:
 * 1 changed, 0 timeout, -1 error. */
int etcd_watch(struct etcd *e, const char *key, int64_t after_rev,
	       int timeout_ms);

/* The fuzz harness's way in (tests/fuzz/etcd.c): while a fake is set,
 * every call's HTTP exchange is answered by answer() instead of the
 * network.  It gets the call's path ("/v3/kv/range") and request JSON and
 * returns 0 with the reply's HTTP status and body (delivered to the
 * reply's reader in pieces of at most chunk bytes, as libcurl would), or
 * -1 for a connection that failed.  Not for production use: one fake for
 * the whole process, set before any call. */
struct etcd_fake {
	int (*answer)(void *arg, const char *path, const char *request,
		      long *status, const char **body, size_t *len);
	void *arg;
	size_t chunk;
};
void etcd_set_fake(const struct etcd_fake *fake);

#endif
