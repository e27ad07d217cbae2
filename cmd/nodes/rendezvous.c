/*
 * rendezvous.c - dynamic rendezvous of the nodes through etcd (v3).
 *
 * `--rdzv-backend etcd --rdzv-endpoint HOST:2379 --rdzv-id JOB --nnodes
 * MIN:MAX`: every node writes itself into one key, /distrun/rdzv/JOB/state,
 * with compare-and-swap transactions (a write that lost the race reads
 * again and retries), so the nodes agree on one ordered list:
 *
 *   {"state": "open", "nodes": [{"addr", "port", "nproc", "token"}, ...],
 *    "last_call_until": unix ms}
 *
 * Once MIN nodes are in, a last-call window (--rdzv-last-call, default
 * 5 s) opens; the round closes when MAX nodes are in or the window ends,
 * and the first node to see that writes "closed".  A node's rank is its
 * place in the list; node 0's address and port become the hub's of the
 * static protocol (nodes.c), which runs the job from there.  A node that
 * comes after the close is told so.  The key is attached to a lease every
 * node keeps alive while it waits, so a round whose nodes all died goes
 * away by itself (after RDZV_TTL seconds) and the next job with that id
 * starts afresh.  Waiting is an etcd watch, bounded by the nearest
 * deadline; the whole rendezvous by --join-timeout.
 *
 * A restart (--max-restarts) meets in a key of its own,
 * /distrun/rdzv/JOB/roundN/state, and the node that makes it points
 * /distrun/rdzv/JOB/current ({"round": N}, on the round's lease) at it in
 * the same transaction: a node started afresh reads that first and
 * joins the round the job is in, or is told that round started without
 * it.  Once a round is closed, its
 * node 0 renews the lease for as long as the job runs (rdzv_keep_*), so
 * the closed state, and with it the answer to a late node, stays.
 *
 * etcd is outside the job: whoever may write there is not thereby one of
 * the job's nodes.  So what nodes write is authenticated with a key only
 * the job's nodes have (dri_auth_store_key of "distrun etcd RDZV-ID": the
 * job's secret, as for the static protocol): every node entry carries a
 * MAC of itself ("mac"), and the whole document one of its fields, its
 * entries and the etcd key it belongs under ("docmac"), made again by
 * whoever writes it.  A reader drops an entry whose MAC is wrong (a
 * stranger took no slot: the document is written back without it),
 * and does not believe a document whose own MAC is wrong (a pre-written
 * "closed", a stranger's round): before it has joined it replaces it
 * with a round of its own, after, it stops, saying so.  The pointer to a
 * restart's round carries a MAC too, or is ignored.  The document also
 * names the program (an HMAC of argv, so etcd learns nothing of it) and
 * --nnodes: two different jobs given one --rdzv-id are told so instead
 * of merging into one world.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "contract.h"
#include "etcd.h"
#include "rendezvous.h"

#define RDZV_TTL 15

/* What a rendezvous is checked with: the job's key, the etcd key of the
 * round, and the program's and --nnodes' fingerprint. */
struct seal {
	uint8_t key[DRI_KEY_LEN];
	char where[300];
	char prog[65];
};

static void mac_hex(const struct seal *sl, const char *what, const char *s,
		    char out[65])
{
	uint8_t m[32];
	dri_hmac_ctx c;

	dri_hmac_init(&c, sl->key, sizeof(sl->key));
	dri_hmac_update(&c, what, strlen(what) + 1);
	dri_hmac_update(&c, sl->where, strlen(sl->where) + 1);
	dri_hmac_update(&c, s, strlen(s));
	dri_hmac_final(&c, m);
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", m[i]);
	explicit_bzero(m, sizeof(m));
}

/* One entry's bytes as its MAC covers them. */
static void entry_text(json_t *n, char *buf, size_t len)
{
	snprintf(buf, len, "%s %lld %lld %s",
		 json_string_value(json_object_get(n, "addr")) ?: "",
		 (long long)json_integer_value(json_object_get(n, "port")),
		 (long long)json_integer_value(json_object_get(n, "nproc")),
		 json_string_value(json_object_get(n, "token")) ?: "");
}

static json_t *entry_make(const struct seal *sl, const char *addr, int port,
			  int nproc, const char *token)
{
	json_t *n = json_pack("{s:s,s:i,s:i,s:s}", "addr", addr, "port", port,
			      "nproc", nproc, "token", token);
	char text[400], mac[65];

	if (!n)
		return NULL;
	entry_text(n, text, sizeof(text));
	mac_hex(sl, "distrun rdzv node", text, mac);
	json_object_set_new(n, "mac", json_string(mac));
	return n;
}

static bool entry_ok(const struct seal *sl, json_t *n)
{
	const char *mac = json_string_value(json_object_get(n, "mac"));
	char text[400], want[65];

	if (!json_is_object(n) || !mac)
		return false;
	entry_text(n, text, sizeof(text));
	mac_hex(sl, "distrun rdzv node", text, want);
	return !strcmp(mac, want);
}

/* The document's MAC, over its fields and its entries' MACs. */
static void doc_mac(const struct seal *sl, json_t *st, char out[65])
{
	json_t *nodes = json_object_get(st, "nodes");
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f) {
		memset(out, 0, 65);   /* matches no MAC */
		return;
	}
	fprintf(f, "%s %lld %lld %s",
		json_string_value(json_object_get(st, "state")) ?: "",
		(long long)json_integer_value(json_object_get(st,
							      "last_call_until")),
		(long long)json_integer_value(json_object_get(st, "lease")),
		json_string_value(json_object_get(st, "prog")) ?: "");
	for (size_t i = 0; i < json_array_size(nodes); i++)
		fprintf(f, " %s", json_string_value(json_object_get(
			json_array_get(nodes, i), "mac")) ?: "");
	fclose(f);
	mac_hex(sl, "distrun rdzv state", text ? text : "", out);
	free(text);
}

/* Serializes st with its MAC; malloc'd, or NULL. */
static char *doc_seal(const struct seal *sl, json_t *st)
{
	char mac[65];

	doc_mac(sl, st, mac);
	json_object_set_new(st, "docmac", json_string(mac));
	return json_dumps(st, JSON_COMPACT);
}

/* Drops the entries of st whose MAC is wrong (how many), then says
 * whether what is left is a document the job's nodes wrote. */
static bool doc_check(const struct seal *sl, json_t *st, int *dropped)
{
	json_t *nodes = json_object_get(st, "nodes");
	const char *mac = json_string_value(json_object_get(st, "docmac"));
	char want[65];

	*dropped = 0;
	for (size_t i = json_array_size(nodes); i-- > 0;)
		if (!entry_ok(sl, json_array_get(nodes, i))) {
			json_array_remove(nodes, i);
			++*dropped;
		}
	if (!mac)
		return false;
	doc_mac(sl, st, want);
	return !strcmp(mac, want);
}

/* The key and fingerprint of this job's rendezvous; -1 with a message
 * when the job's secret cannot be had. */
static int seal_init(struct seal *sl, const struct rdzv_plan *p, char *err,
		     size_t errsz)
{
	char ident[300];
	dri_hmac_ctx c;
	uint8_t m[32];

	memset(sl, 0, sizeof(*sl));
	snprintf(ident, sizeof(ident), "distrun etcd %s", p->run_id);
	if (dri_auth_store_key(ident, sl->key)) {
		snprintf(err, errsz, "etcd rendezvous: %s", dr_last_error());
		return -1;
	}
	dri_hmac_init(&c, sl->key, sizeof(sl->key));
	dri_hmac_update(&c, "distrun rdzv program", 21);
	for (char *const *a = p->argv; a && *a; a++)
		dri_hmac_update(&c, *a, strlen(*a) + 1);
	snprintf(ident, sizeof(ident), "nnodes %d:%d", p->min_nodes,
		 p->max_nodes);
	dri_hmac_update(&c, ident, strlen(ident));
	dri_hmac_final(&c, m);
	for (int i = 0; i < 16; i++)
		sprintf(sl->prog + 2 * i, "%02x", m[i]);
	return 0;
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The address of ours that reaches etcd: a UDP connect() sends nothing
 * but makes the kernel pick the route. */
static int own_addr(const char *host, int port, char *out, size_t n)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM };
	struct addrinfo *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ps[16];
	int fd, rc = -1;

	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(host, ps, &hints, &ai))
		return -1;
	fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && !connect(fd, ai->ai_addr, ai->ai_addrlen) &&
	    !getsockname(fd, (struct sockaddr *)&ss, &sl) &&
	    !getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)n, NULL,
			 0, NI_NUMERICHOST))
		rc = 0;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return rc;
}

/* Whether s holds a space or a control character: no host name does. */
static int has_space(const char *s)
{
	for (; *s; s++)
		if (!isgraph((unsigned char)*s))
			return 1;
	return 0;
}

static int fail(char *err, size_t n, const char *what, struct etcd *e)
{
	snprintf(err, n, "%s: %s", what, etcd_error(e));
	return -1;
}

/* The round the job is in, for a node started afresh: N from the key
 * /distrun/rdzv/JOB/current, 0 where there is none (no restart yet, or
 * one whose round is gone), -1 with a message. */
static int current_round(struct etcd *e, struct seal *sl, const char *run_id,
			 char *err, size_t errsz)
{
	char key[300], *val = NULL, text[32], want[65];
	const char *mac;
	int64_t mod;
	json_t *j;
	json_int_t r;
	int got;
	bool ok;

	snprintf(key, sizeof(key), "/distrun/rdzv/%s/current", run_id);
	got = etcd_get(e, key, &val, &mod, NULL);
	if (got <= 0)
		return got < 0 ? fail(err, errsz, "etcd rendezvous", e) : 0;
	j = json_loads(val, 0, NULL);
	free(val);
	r = json_integer_value(json_object_get(j, "round"));
	mac = json_string_value(json_object_get(j, "mac"));
	snprintf(sl->where, sizeof(sl->where), "%s", key);
	snprintf(text, sizeof(text), "%lld", (long long)r);
	mac_hex(sl, "distrun rdzv round", text, want);
	ok = mac && !strcmp(mac, want);
	json_decref(j);
	/* Not written by one of the job's nodes: not believed. */
	if (!ok)
		return 0;
	/* etcd is outside the job: a round is a small positive number. */
	if (r < 1 || r > 1000000) {
		snprintf(err, errsz, "etcd key %s does not hold a distrun "
			 "round", key);
		return -1;
	}
	return (int)r;
}


int rdzv_etcd(const struct rdzv_plan *p, struct rdzv_result *res, char *err,
	      size_t errsz)
{
	struct etcd *e = NULL;
	struct seal sl;
	char key[300], ckey[300], cval[128], me_addr[64], token[17];
	uint8_t tok[8];
	double deadline = mono() + p->timeout;
	int64_t lease = 0;
	int joined = -1, rc = -1, round = p->round;

	memset(res, 0, sizeof(*res));
	if (seal_init(&sl, p, err, errsz))
		return -1;
	if (etcd_open(&e, p->endpoint, err, errsz))
		goto out;
	/* A node started afresh joins the round of a restart, if there is
	 * one; a restarted node knows its round. */
	if (!round && (round = current_round(e, &sl, p->run_id, err,
					     errsz)) < 0)
		goto out;
	/* A restart meets in a key of its own: the last round's is closed. */
	if (round)
		snprintf(key, sizeof(key), "/distrun/rdzv/%s/round%d/state",
			 p->run_id, round);
	else
		snprintf(key, sizeof(key), "/distrun/rdzv/%s/state", p->run_id);
	snprintf(sl.where, sizeof(sl.where), "%s", key);
	if (p->addr && *p->addr)
		snprintf(me_addr, sizeof(me_addr), "%s", p->addr);
	else if (own_addr(etcd_host(e), etcd_port(e), me_addr,
			  sizeof(me_addr))) {
		snprintf(err, errsz, "cannot find an address of this host that "
			 "reaches etcd at %s (use --iface)", p->endpoint);
		goto out;
	}
	if (dri_random(tok, sizeof(tok))) {
		snprintf(err, errsz, "%s", dr_last_error());
		goto out;
	}
	for (int i = 0; i < 8; i++)
		sprintf(token + 2 * i, "%02x", tok[i]);

	while (mono() < deadline) {
		char *val = NULL;
		int64_t mod = 0, rev = 0, until;
		json_t *st = NULL, *nodes, *mine;
		int got = etcd_get(e, key, &val, &mod, &rev), n, w, dropped = 0;
		const char *state;

		if (got < 0) {
			fail(err, errsz, "etcd rendezvous", e);
			goto out;
		}
		if (got) {
			st = json_loads(val, 0, NULL);
			free(val);
			if (!doc_check(&sl, st, &dropped)) {
				/* Not the job's nodes' document. */
				json_decref(st);
				if (joined >= 0) {
					snprintf(err, errsz, "the rendezvous "
						 "state of %s in etcd was "
						 "overwritten by a writer without "
						 "the job's secret", p->run_id);
					goto out;
				}
				fprintf(stderr, "distrun: etcd key %s holds a "
					"rendezvous not written with the job's "
					"secret; replacing it\n", key);
				got = 0;
			}
		}
		if (!got) {
			char *s;

			if (joined >= 0) {
				snprintf(err, errsz, "the rendezvous state of "
					 "%s vanished from etcd", p->run_id);
				goto out;
			}
			lease = etcd_lease_grant(e, RDZV_TTL);
			if (lease < 0) {
				fail(err, errsz, "etcd lease", e);
				goto out;
			}
			st = json_pack("{s:s,s:[o],s:I,s:I,s:s}", "state",
				       "open", "nodes", entry_make(&sl, me_addr,
				       p->port, p->nproc, token),
				       "last_call_until", (json_int_t)0,
				       "lease", (json_int_t)lease, "prog",
				       sl.prog);
			if (p->min_nodes <= 1)
				json_object_set_new(st, "last_call_until",
					json_integer(wall_ms() +
						     (json_int_t)(p->last_call * 1000)));
			if (p->max_nodes == 1)
				json_object_set_new(st, "state",
						    json_string("closed"));
			/* A restart's round is made and pointed at in one
			 * transaction: a node started afresh that finds
			 * the round finds the pointer too. */
			snprintf(ckey, sizeof(ckey), "/distrun/rdzv/%s/current",
				 p->run_id);
			{
				char text[32], mac[65];

				snprintf(text, sizeof(text), "%d", round);
				snprintf(sl.where, sizeof(sl.where), "%s", ckey);
				mac_hex(&sl, "distrun rdzv round", text, mac);
				snprintf(sl.where, sizeof(sl.where), "%s", key);
				snprintf(cval, sizeof(cval),
					 "{\"round\":%d,\"mac\":\"%s\"}",
					 round, mac);
			}
			s = st ? doc_seal(&sl, st) : NULL;
			json_decref(st);
			/* mod: a document not ours is replaced, if it is
			 * still the one read */
			if (s && etcd_cas_with(e, key, mod, s, lease,
					       round ? ckey : NULL, cval) == 1)
				joined = 0;
			free(s);
			continue;
		}
		nodes = json_object_get(st, "nodes");
		state = json_string_value(json_object_get(st, "state"));
		if (strcmp(json_string_value(json_object_get(st, "prog")) ?: "",
			   sl.prog)) {
			json_decref(st);
			snprintf(err, errsz, "rendezvous %s is held by nodes that "
				 "run another program, or with another "
				 "--nnodes: two jobs given one --rdzv-id?",
				 p->run_id);
			goto out;
		}
		if (!json_is_array(nodes) || !state ||
		    json_array_size(nodes) > (size_t)p->max_nodes) {
			json_decref(st);
			snprintf(err, errsz, "etcd key %s does not hold a "
				 "distrun rendezvous of at most %d nodes", key,
				 p->max_nodes);
			goto out;
		}
		n = (int)json_array_size(nodes);
		/* Every node keeps the round's lease alive while it waits. */
		lease = json_integer_value(json_object_get(st, "lease"));
		if (lease > 0)
			etcd_lease_keepalive(e, lease);
		until = json_integer_value(json_object_get(st,
							    "last_call_until"));
		/* etcd is outside the job: a window that ends before 1970
		 * is a bad document, not a subtraction that overflows. */
		if (until < 0) {
			json_decref(st);
			snprintf(err, errsz, "etcd key %s holds a bad "
				 "rendezvous", key);
			goto out;
		}
		if (!strcmp(state, "closed")) {
			if (joined < 0) {
				char rs[32] = "";

				if (round)
					snprintf(rs, sizeof(rs), " (restart %d)",
						 round);
				snprintf(err, errsz, "rendezvous %s is closed: "
					 "its job%s started with %d nodes; this "
					 "node came too late", p->run_id, rs, n);
				json_decref(st);
				goto out;
			}
			res->nnodes = n;
			res->node_rank = joined;
			res->round = round;
			res->lease = lease;
			json_t *n0 = json_array_get(nodes, 0);
			const char *a = json_string_value(json_object_get(n0,
								  "addr"));
			json_int_t port = json_integer_value(
				json_object_get(n0, "port"));
			/* Node 0's address whole (never cut to fit) and
			 * printable, its port a port (never its low bits). */
			snprintf(res->master_addr, sizeof(res->master_addr), "%s",
				 a && strlen(a) < sizeof(res->master_addr) &&
				 !has_space(a) ? a : "");
			res->master_port = port >= 1 && port <= 65535 ?
					   (int)port : 0;
			mine = json_array_get(nodes, (size_t)joined);
			if (!*res->master_addr || !res->master_port ||
			    strcmp(json_string_value(json_object_get(mine,
						"token")) ?: "", token)) {
				snprintf(err, errsz, "etcd key %s holds a bad "
					 "rendezvous", key);
				json_decref(st);
				goto out;
			}
			json_decref(st);
			rc = 0;
			goto out;
		}
		if (dropped && strcmp(state, "closed")) {
			/* A stranger's entries: written back without them. */
			fprintf(stderr, "distrun: dropped %d entr%s of etcd key "
				"%s not written with the job's secret\n",
				dropped, dropped == 1 ? "y" : "ies", key);
		} else if (joined < 0) {
			json_array_append_new(nodes, entry_make(&sl, me_addr,
				p->port, p->nproc, token));
			if (n + 1 >= p->min_nodes && !until)
				json_object_set_new(st, "last_call_until",
					json_integer(wall_ms() +
						     (json_int_t)(p->last_call * 1000)));
			if (n + 1 >= p->max_nodes)
				json_object_set_new(st, "state",
						    json_string("closed"));
		} else if (n >= p->min_nodes && until && wall_ms() >= until) {
			json_object_set_new(st, "state", json_string("closed"));
		} else {
			/* Wait for a change, or for the window to end. */
			double wait = deadline - mono();

			if (until && (until - wall_ms()) / 1000.0 < wait)
				wait = (until - wall_ms()) / 1000.0;
			if (wait > RDZV_TTL / 3.0)
				wait = RDZV_TTL / 3.0;
			/* A window that ended long ago (fewer than MIN
			 * nodes came in it): the shortest watch, not a
			 * negative time that overflows an int. */
			if (wait < 0)
				wait = 0;
			json_decref(st);
			w = (int)(wait * 1000);
			if (etcd_watch(e, key, rev, w > 10 ? w : 10) < 0) {
				fail(err, errsz, "etcd watch", e);
				goto out;
			}
			continue;
		}
		{
			char *s = doc_seal(&sl, st);
			int ok = s ? etcd_cas(e, key, mod, s, -1) : -1;

			free(s);
			json_decref(st);
			if (ok < 0) {
				fail(err, errsz, "etcd rendezvous", e);
				goto out;
			}
			if (ok && joined < 0 && !dropped)
				joined = n;
		}
	}
	snprintf(err, errsz, "rendezvous %s through etcd at %s: not enough "
		 "nodes (at least %d) within %.0fs", p->run_id, p->endpoint,
		 p->min_nodes, p->timeout);
out:
	etcd_close(e);
	explicit_bzero(&sl, sizeof(sl));
	return rc;
}

struct rdzv_keep {
	struct etcd *e;
	int64_t lease;
	int fd;
};

struct rdzv_keep *rdzv_keep_start(const char *endpoint, int64_t lease,
				  char *err, size_t errsz)
{
	/* A third of the TTL: two renewals may fail before it expires. */
	struct itimerspec it = { { RDZV_TTL / 3, 0 }, { RDZV_TTL / 3, 0 } };
	struct rdzv_keep *k = calloc(1, sizeof(*k));

	if (!k) {
		snprintf(err, errsz, "out of memory");
		return NULL;
	}
	k->lease = lease;
	k->fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (k->fd < 0 || timerfd_settime(k->fd, 0, &it, NULL)) {
		snprintf(err, errsz, "timerfd for etcd's lease: %s",
			 strerror(errno));
		goto fail;
	}
	if (etcd_open(&k->e, endpoint, err, errsz))
		goto fail;
	etcd_set_oneshot(k->e, 1000);
	return k;
fail:
	rdzv_keep_stop(k);
	return NULL;
}

int rdzv_keep_fd(const struct rdzv_keep *k)
{
	return k ? k->fd : -1;
}

void rdzv_keep_tick(struct rdzv_keep *k)
{
	uint64_t n;

	if (!k || read(k->fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
		return;
	etcd_lease_keepalive(k->e, k->lease);
}

void rdzv_keep_stop(struct rdzv_keep *k)
{
	if (!k)
		return;
	if (k->fd >= 0)
		close(k->fd);
	etcd_close(k->e);
	free(k);
}
