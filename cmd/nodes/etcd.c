/*
 * etcd.c - etcd v3 through its JSON gateway (see etcd.h).
 *
 * The gateway maps each gRPC call to POST /v3/<service>/<call> with the
 * request as JSON; keys and values are base64, 64-bit numbers are JSON
 * strings.  One curl handle is reused (keep-alive); every request has its
 * own time limit; replies larger than ETCD_REPLY_MAX are refused.  A
 * watch is a stream of JSON results: we read it until the first result
 * that holds events, or until the time limit, then drop the connection.
 *
 * libcurl is loaded with dlopen() when the first etcd handle is opened,
 * not linked: it brings some thirty libraries (gnutls, krb5, ldap...) whose
 * loading cost every start of distrun 10 ms, for a feature only
 * --rdzv-backend etcd uses.  <curl/curl.h> gives the types and constants;
 * the functions come from the table `lc`.
 */
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"

#define CALL_MS 5000

/* libcurl's functions, filled by curl_load(). */
static struct {
	void *dl;
	CURLcode (*global_init)(long);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_perform)(CURL *);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	const char *(*easy_strerror)(CURLcode);
	void (*easy_cleanup)(CURL *);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
} lc;

/* Loads libcurl.so.4 once (it stays loaded: curl_global_cleanup is never
 * called, as before).  Returns 0, or -1 with the reason in err. */
static int curl_load(char *err, size_t errsz)
{
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
#define SYM(f, n) { n, offsetof(__typeof__(lc), f) }
		SYM(global_init, "curl_global_init"),
		SYM(easy_init, "curl_easy_init"),
		SYM(easy_setopt, "curl_easy_setopt"),
		SYM(easy_perform, "curl_easy_perform"),
		SYM(easy_getinfo, "curl_easy_getinfo"),
		SYM(easy_strerror, "curl_easy_strerror"),
		SYM(easy_cleanup, "curl_easy_cleanup"),
		SYM(slist_append, "curl_slist_append"),
		SYM(slist_free_all, "curl_slist_free_all"),
#undef SYM
	};
	void *dl;

	if (lc.dl)
		return 0;
	dl = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		snprintf(err, errsz, "--rdzv-backend etcd needs libcurl "
			 "(libcurl.so.4; Debian: apt-get install libcurl4): "
			 "%s", dlerror());
		return -1;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *f = dlsym(dl, syms[i].name);

		if (!f) {
			snprintf(err, errsz, "libcurl.so.4 has no %s: too "
				 "old a libcurl", syms[i].name);
			dlclose(dl);
			return -1;
		}
		memcpy((char *)&lc + syms[i].off, &f, sizeof(f));
	}
	lc.dl = dl;
	return 0;
}

struct etcd {
	CURL *curl;
	char base[300];
	char host[256];
	int port;
	char err[256];
	struct curl_slist *hdrs;
	int call_ms;            /* each call's limit (CALL_MS) */
};

struct reply {
	char *buf;
	size_t len;
	int watch;              /* stop at the first result with events */
	int events;
};

static const char b64[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const char *s)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(4 * ((n + 2) / 3) + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)(unsigned char)s[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)(unsigned char)s[i + 1] << 8;
		if (i + 2 < n)
			v |= (unsigned char)s[i + 2];
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = 0;
	return out;
}

/* Decodes base64 (RFC 4648, padded, canonical: what etcd writes) into a
 * NUL-terminated string; NULL on anything else, or on bytes with a NUL. */
static char *b64_decode(const char *s)
{
	size_t n = strlen(s), o = 0, pad = 0;
	char *out;
	uint32_t v = 0;

	if (n % 4)
		return NULL;
	while (pad < 2 && pad < n && s[n - 1 - pad] == '=')
		pad++;
	out = malloc(n / 4 * 3 + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n - pad; i++) {
		const char *p = strchr(b64, s[i]);

		if (!p)
			goto bad;
		v = v << 6 | (uint32_t)(p - b64);
		if (i % 4 == 3) {
			out[o++] = (char)(v >> 16);
			out[o++] = (char)(v >> 8);
			out[o++] = (char)v;
			v = 0;
		}
	}
	/* The last group: 2 or 3 characters, the bits past the bytes zero. */
	if (pad == 2) {
		if (v & 0xf)
			goto bad;
		out[o++] = (char)(v >> 4);
	} else if (pad == 1) {
		if (v & 0x3)
			goto bad;
		out[o++] = (char)(v >> 10);
		out[o++] = (char)(v >> 2);
	}
	out[o] = 0;
	if (memchr(out, 0, o))
		goto bad;
	return out;
bad:
	free(out);
	return NULL;
}

static int seterr(struct etcd *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int seterr(struct etcd *e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->err, sizeof(e->err), fmt, ap);
	va_end(ap);
	return -1;
}

const char *etcd_error(const struct etcd *e)
{
	return e->err;
}

const char *etcd_host(const struct etcd *e)
{
	return e->host;
}

int etcd_port(const struct etcd *e)
{
	return e->port;
}

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	size_t k = size * n;
	char *nb;

	if (r->len + k > ETCD_REPLY_MAX)
		return 0;
	nb = realloc(r->buf, r->len + k + 1);
	if (!nb)
		return 0;
	r->buf = nb;
	memcpy(r->buf + r->len, p, k);
	r->len += k;
	r->buf[r->len] = 0;
	if (r->watch && strstr(r->buf, "\"events\"")) {
		r->events = 1;
		return 0; /* enough: stop the stream */
	}
	return k;
}

static json_t *post(struct etcd *e, const char *path, json_t *body);

static const struct etcd_fake *fake;

void etcd_set_fake(const struct etcd_fake *f)
{
	fake = f;
}

/* The fake's answer to one request, delivered as curl_easy_perform
 * delivers a reply: a reader that takes less than a piece stops it. */
static CURLcode fake_perform(const char *path, const char *req, long *code,
			     struct reply *r)
{
	const char *body;
	size_t len, off = 0;

	if (fake->answer(fake->arg, path, req, code, &body, &len))
		return CURLE_COULDNT_CONNECT;
	while (off < len) {
		size_t k = len - off;

		if (fake->chunk && k > fake->chunk)
			k = fake->chunk;

		if (on_data((char *)body + off, 1, k, r) != k)
			return CURLE_WRITE_ERROR;
		off += k;
	}
	return CURLE_OK;
}

/* etcd's own authentication: "name:password" gives a token that every
 * later call carries. */
static int etcd_login(struct etcd *e, const char *user)
{
	const char *colon = strchr(user, ':');
	char name[128], hdr[600];
	const char *tok;
	json_t *j;

	if (!colon || (size_t)(colon - user) >= sizeof(name))
		return seterr(e, "DISTRUN_ETCD_USER must be NAME:PASSWORD");
	memcpy(name, user, (size_t)(colon - user));
	name[colon - user] = 0;
	j = post(e, "/v3/auth/authenticate", json_pack("{s:s,s:s}", "name",
						       name, "password",
						       colon + 1));
	if (!j)
		return -1;
	tok = json_string_value(json_object_get(j, "token"));
	if (!tok || strlen(tok) > 500 || strpbrk(tok, "\r\n")) {
		json_decref(j);
		return seterr(e, "etcd gave no token for user %s", name);
	}
	snprintf(hdr, sizeof(hdr), "Authorization: %s", tok);
	json_decref(j);
	e->hdrs = lc.slist_append(e->hdrs, hdr);
	lc.easy_setopt(e->curl, CURLOPT_HTTPHEADER, e->hdrs);
	return 0;
}

int etcd_open(struct etcd **out, const char *endpoint, char *err,
	      size_t errsz)
{
	struct etcd *e;
	const char *hp = endpoint;
	const char *scheme = "http";
	const char *colon;
	const char *v;

	*out = NULL;
	if (!strncmp(hp, "http://", 7)) {
		hp += 7;
	} else if (!strncmp(hp, "https://", 8)) {
		hp += 8;
		scheme = "https";
	}
	colon = strrchr(hp, ':');
	if (!*hp || !colon || colon == hp || !colon[1] ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    atoi(colon + 1) < 1 || atoi(colon + 1) > 65535 ||
	    (size_t)(colon - hp) >= sizeof(e->host) || strchr(hp, '/')) {
		snprintf(err, errsz, "bad etcd endpoint '%s' (want HOST:PORT)",
			 endpoint);
		return -1;
	}
	if (curl_load(err, errsz))
		return -1;
	e = calloc(1, sizeof(*e));
	if (!e || lc.global_init(CURL_GLOBAL_DEFAULT) ||
	    !(e->curl = lc.easy_init())) {
		snprintf(err, errsz, "cannot start libcurl");
		free(e);
		return -1;
	}
	memcpy(e->host, hp, (size_t)(colon - hp));
	e->port = atoi(colon + 1);
	snprintf(e->base, sizeof(e->base), "%s://%s", scheme, hp);
	e->call_ms = CALL_MS;
	e->hdrs = lc.slist_append(NULL, "Content-Type: application/json");
	lc.easy_setopt(e->curl, CURLOPT_HTTPHEADER, e->hdrs);
	lc.easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
	lc.easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	lc.easy_setopt(e->curl, CURLOPT_NOPROXY, "*");
	if ((v = getenv("DISTRUN_ETCD_CACERT")))
		lc.easy_setopt(e->curl, CURLOPT_CAINFO, v);
	if ((v = getenv("DISTRUN_ETCD_CERT")))
		lc.easy_setopt(e->curl, CURLOPT_SSLCERT, v);
	if ((v = getenv("DISTRUN_ETCD_KEY")))
		lc.easy_setopt(e->curl, CURLOPT_SSLKEY, v);
	*out = e;
	if ((v = getenv("DISTRUN_ETCD_USER")) && etcd_login(e, v)) {
		snprintf(err, errsz, "%s", e->err);
		etcd_close(e);
		*out = NULL;
		return -1;
	}
	return 0;
}

void etcd_set_oneshot(struct etcd *e, int call_ms)
{
	e->call_ms = call_ms > 0 && call_ms < CALL_MS ? call_ms : CALL_MS;
	lc.easy_setopt(e->curl, CURLOPT_FORBID_REUSE, 1L);
}

void etcd_close(struct etcd *e)
{
	if (!e)
		return;
	lc.easy_cleanup(e->curl);
	lc.slist_free_all(e->hdrs);
	free(e);
}

/* POSTs body (consumed) to path; the parsed reply, or NULL (e->err). */
static json_t *call(struct etcd *e, const char *path, json_t *body,
		    int timeout_ms, struct reply *r)
{
	char url[400];
	char *s = json_dumps(body, JSON_COMPACT);
	CURLcode rc;
	long code = 0;
	json_t *j;

	json_decref(body);
	if (!s) {
		seterr(e, "out of memory");
		return NULL;
	}
	snprintf(url, sizeof(url), "%s%s", e->base, path);
	lc.easy_setopt(e->curl, CURLOPT_URL, url);
	lc.easy_setopt(e->curl, CURLOPT_POSTFIELDS, s);
	lc.easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_data);
	lc.easy_setopt(e->curl, CURLOPT_WRITEDATA, r);
	lc.easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	lc.easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(timeout_ms < CALL_MS ? timeout_ms : CALL_MS));
	if (fake) {
		rc = fake_perform(path, s, &code, r);
	} else {
		rc = lc.easy_perform(e->curl);
		lc.easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &code);
	}
	free(s);
	/* A watch ends with events, at its time limit, or when the server
	 * closes the stream: the caller reads the key again in every case,
	 * and a server that is gone fails that read with its reason. */
	if (r->watch && (r->events || rc == CURLE_OPERATION_TIMEDOUT ||
			 rc == CURLE_OK))
		return json_object();
	if (rc != CURLE_OK) {
		seterr(e, "etcd at %s: %s", e->base, lc.easy_strerror(rc));
		return NULL;
	}
	j = r->buf ? json_loads(r->buf, 0, NULL) : NULL;
	if (code != 200 || !json_is_object(j)) {
		const char *msg = json_string_value(json_object_get(j, "error"));

		if (!msg)
			msg = json_string_value(json_object_get(j, "message"));
		seterr(e, "etcd at %s answered %ld%s%s", e->base, code,
		       msg ? ": " : "", msg ? msg : code == 200 ?
		       " with something that is not a JSON object" : "");
		json_decref(j);
		return NULL;
	}
	return j;
}

static json_t *post(struct etcd *e, const char *path, json_t *body)
{
	struct reply r = { 0 };
	json_t *j = call(e, path, body, e->call_ms, &r);

	free(r.buf);
	return j;
}

/* etcd's 64-bit numbers (revisions, lease ids, TTLs): decimal JSON
 * strings, or absent for 0 (proto3 leaves zeros out).  0 with *out, or -1
 * for anything else: a revision that is not a number is not guessed. */
static int num(json_t *o, const char *k, int64_t *out)
{
	json_t *v = json_object_get(o, k);
	const char *s;
	char *end;

	*out = 0;
	if (!v)
		return 0;
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return *out >= 0 ? 0 : -1;
	}
	s = json_string_value(v);
	if (!s || !*s || strspn(s, "0123456789") != strlen(s))
		return -1;
	errno = 0;
	*out = strtoll(s, &end, 10);
	return errno ? -1 : 0;
}

static json_t *key_json(const char *key)
{
	char *k = b64_encode(key);
	json_t *j = k ? json_pack("{s:s}", "key", k) : NULL;

	free(k);
	return j;
}

int etcd_get(struct etcd *e, const char *key, char **val, int64_t *mod_rev,
	     int64_t *rev)
{
	json_t *req = key_json(key), *j, *kvs, *kv;
	int64_t r;
	int found = 0;

	*val = NULL;
	if (!req)
		return seterr(e, "out of memory");
	j = post(e, "/v3/kv/range", req);
	if (!j)
		return -1;
	kvs = json_object_get(j, "kvs");
	kv = json_array_get(kvs, 0);
	if (num(json_object_get(j, "header"), "revision", &r) ||
	    (kvs && !json_is_array(kvs)) || (kv && !json_is_object(kv))) {
		json_decref(j);
		return seterr(e, "etcd at %s: a bad answer to reading key %s",
			      e->base, key);
	}
	if (rev)
		*rev = r;
	if (kv) {
		json_t *jv = json_object_get(kv, "value");
		const char *v = json_string_value(jv);

		/* An empty value is left out; a key that exists was written
		 * at some revision. */
		*val = jv && !v ? NULL : b64_decode(v ? v : "");
		if (!*val || num(kv, "mod_revision", mod_rev) || *mod_rev < 1) {
			free(*val);
			*val = NULL;
			json_decref(j);
			return seterr(e, "etcd: key %s holds a bad value", key);
		}
		found = 1;
	}
	json_decref(j);
	return found;
}

static json_t *put_req(const char *key, const char *val, int64_t lease)
{
	char *k = b64_encode(key), *v = b64_encode(val), ls[32];
	json_t *j = NULL;

	snprintf(ls, sizeof(ls), "%" PRId64, lease);
	if (k && v && lease < 0)
		j = json_pack("{s:s,s:s,s:b}", "key", k, "value", v,
			      "ignore_lease", 1);
	else if (k && v)
		j = lease ? json_pack("{s:s,s:s,s:s}", "key", k, "value", v,
				      "lease", ls)
			  : json_pack("{s:s,s:s}", "key", k, "value", v);
	free(k);
	free(v);
	return j;
}

int etcd_put(struct etcd *e, const char *key, const char *val, int64_t lease)
{
	json_t *req = put_req(key, val, lease), *j;

	if (!req)
		return seterr(e, "out of memory");
	j = post(e, "/v3/kv/put", req);
	json_decref(j);
	return j ? 0 : -1;
}

int etcd_cas(struct etcd *e, const char *key, int64_t mod_rev,
	     const char *val, int64_t lease)
{
	return etcd_cas_with(e, key, mod_rev, val, lease, NULL, NULL);
}

int etcd_cas_with(struct etcd *e, const char *key, int64_t mod_rev,
		  const char *val, int64_t lease, const char *key2,
		  const char *val2)
{
	json_t *put = put_req(key, val, lease), *cmp, *req, *j;
	json_t *put2 = key2 ? put_req(key2, val2, lease) : NULL;
	char *k = b64_encode(key), rs[32];
	int ok;

	snprintf(rs, sizeof(rs), "%" PRId64, mod_rev);
	cmp = k ? (mod_rev ? json_pack("{s:s,s:s,s:s,s:s}", "key", k, "target",
				       "MOD", "result", "EQUAL", "mod_revision",
				       rs)
			   : json_pack("{s:s,s:s,s:s,s:s}", "key", k, "target",
				       "CREATE", "result", "EQUAL",
				       "create_revision", "0"))
		: NULL;
	free(k);
	if (!put || !cmp || (key2 && !put2)) {
		json_decref(put);
		json_decref(put2);
		json_decref(cmp);
		return seterr(e, "out of memory");
	}
	req = key2 ? json_pack("{s:[o],s:[{s:o},{s:o}]}", "compare", cmp,
			       "success", "requestPut", put, "requestPut", put2)
		   : json_pack("{s:[o],s:[{s:o}]}", "compare", cmp, "success",
			       "requestPut", put);
	if (!req)
		return seterr(e, "out of memory");
	j = post(e, "/v3/kv/txn", req);
	if (!j)
		return -1;
	ok = json_is_true(json_object_get(j, "succeeded"));
	json_decref(j);
	return ok;
}

int64_t etcd_lease_grant(struct etcd *e, int ttl)
{
	json_t *j = post(e, "/v3/lease/grant", json_pack("{s:i}", "TTL", ttl));
	int64_t id;

	if (!j)
		return -1;
	if (num(j, "ID", &id))
		id = 0;
	json_decref(j);
	return id > 0 ? id : seterr(e, "etcd granted no lease");
}

int etcd_lease_keepalive(struct etcd *e, int64_t id)
{
	char s[32];
	json_t *j;
	int64_t ttl;

	snprintf(s, sizeof(s), "%" PRId64, id);
	j = post(e, "/v3/lease/keepalive", json_pack("{s:s}", "ID", s));
	if (!j)
		return -1;
	if (num(json_object_get(j, "result"), "TTL", &ttl)) {
		json_decref(j);
		return seterr(e, "etcd at %s: a bad answer to renewing lease "
			      "%s", e->base, s);
	}
	json_decref(j);
	return ttl > 0;
}

int etcd_lease_revoke(struct etcd *e, int64_t id)
{
	char s[32];
	json_t *j;

	snprintf(s, sizeof(s), "%" PRId64, id);
	j = post(e, "/v3/lease/revoke", json_pack("{s:s}", "ID", s));
	json_decref(j);
	return j ? 0 : -1;
}

int etcd_watch(struct etcd *e, const char *key, int64_t after_rev,
	       int timeout_ms)
{
	struct reply r = { .watch = 1 };
	char *k = b64_encode(key), rs[32];
	json_t *req, *j;
	int changed;

	if (!k)
		return seterr(e, "out of memory");
	snprintf(rs, sizeof(rs), "%" PRId64, after_rev + 1);
	req = json_pack("{s:{s:s,s:s}}", "create_request", "key", k,
			"start_revision", rs);
	free(k);
	if (!req)
		return seterr(e, "out of memory");
	j = call(e, "/v3/watch", req, timeout_ms > 0 ? timeout_ms : 1, &r);
	changed = r.events;
	free(r.buf);
	json_decref(j);
	/* The handle's connection was cut mid-stream: start afresh. */
	lc.easy_setopt(e->curl, CURLOPT_FORBID_REUSE, 0L);
	return j ? changed : -1;
}
