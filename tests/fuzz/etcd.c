/*
 * etcd.c - fuzzes what the launcher believes of etcd's answers: the v3
 * JSON gateway's replies as cmd/nodes/etcd.c reads them (range, txn, lease
 * grant and keep-alive, watch streams; base64 values, 64-bit numbers as
 * strings), and the rendezvous state document that cmd/nodes/rendezvous.c keeps in
 * etcd and reads back ({"state", "nodes": [{"addr", "port", "nproc",
 * "token"}], "last_call_until", "lease"}).  etcd is outside the job:
 * whatever it says must be refused with a message or read exactly.
 *
 * No HTTP: etcd_set_fake answers each call from the input, in pieces of
 * a size the input picks, as libcurl would deliver them.
 *
 * Input: a byte whose bit 0 picks the mode and whose other bits give the
 * piece size, then records, each a byte giving its kind (bits 0-2) and a
 * variant (bits 3-7), and for kinds 0 and 1 a 2-byte length and that many
 * bytes:
 *   0  a raw reply body (variant bit 0: HTTP 200, else 400 + variant);
 *   1  a key that exists, holding those bytes (the harness encodes them
 *      in base64; "TOKEN" in them becomes the token the launcher wrote);
 *   2  a key that does not exist;  3  a transaction's outcome;
 *   4  a lease granted;  5  a lease renewed;  6  a watch event;
 *   7  a connection that fails.
 * Mode 0 runs etcd.h's calls, the record's variant picking which, each
 * on the next record's answer, against a model of the gateway's JSON
 * (base64 as RFC 4648 writes it, revisions as decimal strings): a value
 * read is exactly the decoded bytes, revisions and lease ids are the
 * numbers sent, a refused reply leaves a message.  Mode 1 runs the whole
 * etcd rendezvous (rdzv_etcd) on the records: it must end, and a node
 * told it is in has a rank below the node count and node 0's address and
 * port exactly as the last state document it read gives them.
 */
#include <errno.h>
#include <jansson.h>

#include "etcd.h"
/* cmd/nodes/rendezvous.h, not the runtime's (-Iruntime comes first) */
#include "../../cmd/nodes/rendezvous.h"
#include "fuzz.h"

struct script {
	const uint8_t *p;
	size_t n;
	char token[17];       /* the launcher's, from its last write */
	char *last_doc;       /* the last state document served */
	char *body;           /* the reply being served (NULL: none) */
	long status;          /* its HTTP status */
};

static unsigned take(struct script *s)
{
	if (!s->n)
		return 0;
	s->n--;
	return *s->p++;
}

static const char b64[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const char *s, size_t n)
{
	char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
	uint32_t acc = 0;
	int bits = 0;

	FUZZ_CHECK(out);
	/* Six bits at a time off an accumulator, then '=' to a multiple
	 * of four. */
	for (size_t i = 0; i < n; i++) {
		acc = acc << 8 | (unsigned char)s[i];
		for (bits += 8; bits >= 6; bits -= 6)
			*o++ = b64[acc >> (bits - 6) & 63];
	}
	if (bits)
		*o++ = b64[acc << (6 - bits) & 63];
	while ((o - out) % 4)
		*o++ = '=';
	*o = 0;
	return out;
}

/* RFC 4648 base64, padded, strictly: NULL if s is not one (or decodes to
 * bytes with a NUL, which no C string holds). */
static char *b64_strict(const char *s, size_t *len)
{
	size_t n = strlen(s), o = 0, pad = 0;
	char *out;

	if (n % 4)
		return NULL;
	while (pad < 2 && pad < n && s[n - 1 - pad] == '=')
		pad++;
	out = malloc(n / 4 * 3 + 1);
	FUZZ_CHECK(out);
	for (size_t i = 0; i < n; i += 4) {
		uint32_t v = 0;

		for (size_t k = 0; k < 4; k++) {
			const char *p = s[i + k] ? strchr(b64, s[i + k]) : NULL;

			if (i + k >= n - pad)
				p = b64; /* padding: zero bits */
			else if (!p)
				goto bad;
			v = v << 6 | (uint32_t)(p - b64);
		}
		out[o++] = (char)(v >> 16);
		if (i + 4 < n || pad < 2)
			out[o++] = (char)(v >> 8);
		if (i + 4 < n || pad < 1)
			out[o++] = (char)v;
		/* The bits padding drops must be zero (canonical). */
		if (i + 4 == n && ((pad == 2 && (v & 0xffff)) ||
				   (pad == 1 && (v & 0xff))))
			goto bad;
	}
	out[o] = 0;
	if (memchr(out, 0, o))
		goto bad;
	*len = o;
	return out;
bad:
	free(out);
	return NULL;
}

/* An etcd number: a decimal string (or a JSON integer) >= 0, absent 0;
 * -1 when it is something else. */
static int64_t strict_num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	const char *s;
	char *end;
	long long n;

	if (!v)
		return 0;
	if (json_is_integer(v))
		return json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
	if (!json_is_string(v) || !*(s = json_string_value(v)) ||
	    strspn(s, "0123456789") != strlen(s))
		return -1;
	errno = 0;
	n = strtoll(s, &end, 10);
	return errno ? -1 : n;
}

/* Replaces "TOKEN" in v with the launcher's token. */
static char *with_token(struct script *s, const uint8_t *p, size_t n)
{
	char *v = fuzz_cstr(p, n), *at;

	FUZZ_CHECK(v);
	while (s->token[0] && (at = strstr(v, "TOKEN"))) {
		char *nv;

		FUZZ_CHECK(asprintf(&nv, "%.*s%s%s", (int)(at - v), v, s->token,
				    at + 5) > 0);
		free(v);
		v = nv;
	}
	return v;
}

/* Learns the token from a write: the last "token" in its value. */
static void learn_token(struct script *s, const char *request)
{
	json_t *j = json_loads(request, 0, NULL), *put;
	const char *v;
	char *doc, *at, *last = NULL;
	size_t len;

	FUZZ_CHECK(json_is_object(j));
	put = json_object_get(json_array_get(json_object_get(j, "success"), 0),
			      "requestPut");
	v = json_string_value(json_object_get(put ? put : j, "value"));
	if (v && (doc = b64_strict(v, &len))) {
		for (at = doc; (at = strstr(at, "\"token\":\"")); at++)
			last = at + 9;
		if (last && strlen(last) >= 16)
			snprintf(s->token, sizeof(s->token), "%.16s", last);
		free(doc);
	}
	json_decref(j);
}

static int answer(void *arg, const char *path, const char *request,
		  long *status, const char **body, size_t *len)
{
	struct script *s = arg;
	unsigned kind, variant;
	size_t n = 0;
	const uint8_t *payload = NULL;
	char *b = NULL, *v;

	/* Every request is a JSON object; a write's value is base64. */
	if (strstr(path, "/kv/put") || strstr(path, "/kv/txn"))
		learn_token(s, request);
	free(s->body);
	s->body = NULL;
	if (!s->n)
		return -1;
	kind = take(s);
	variant = kind >> 3;
	kind &= 7;
	if (kind <= 1) {
		n = take(s);
		n |= (size_t)take(s) << 8;
		if (n > s->n)
			n = s->n;
		payload = s->p;
		s->p += n, s->n -= n;
	}
	*status = 200;
	s->status = 200;
	switch (kind) {
	case 0:
		if (!(variant & 1))
			*status = s->status = 400 + variant;
		b = fuzz_cstr(payload, n);
		FUZZ_CHECK(b);
		*len = n;
		break;
	case 1:
		v = with_token(s, payload, n);
		/* The state document, when it answers a read (the same
		 * record may answer another call). */
		if (strstr(path, "/kv/range")) {
			free(s->last_doc);
			s->last_doc = strdup(v);
			FUZZ_CHECK(s->last_doc);
		}
		b = v;
		v = b64_encode(b, strlen(b));
		free(b);
		b = NULL;
		FUZZ_CHECK(asprintf(&b, "{\"header\":{\"revision\":\"%u\"},"
				    "\"kvs\":[{\"key\":\"eA==\",\"value\":\"%s\","
				    "\"mod_revision\":\"%u\"}],\"count\":\"1\"}",
				    20 + variant, v, 10 + variant) > 0);
		free(v);
		break;
	case 2:
		FUZZ_CHECK(asprintf(&b, "{\"header\":{\"revision\":\"%u\"}}",
				    3 + variant) > 0);
		break;
	case 3:
		FUZZ_CHECK(asprintf(&b, "{\"header\":{},\"succeeded\":%s}",
				    variant & 1 ? "true" : "false") > 0);
		break;
	case 4:
		FUZZ_CHECK(asprintf(&b, "{\"ID\":\"%u\",\"TTL\":\"15\"}",
				    variant) > 0);
		break;
	case 5:
		FUZZ_CHECK(asprintf(&b, "{\"result\":{\"ID\":\"7\",\"TTL\":"
				    "\"%u\"}}", variant) > 0);
		break;
	case 6:
		b = strdup("{\"result\":{\"header\":{},\"created\":true}}\n"
			   "{\"result\":{\"header\":{},\"events\":[{\"kv\":"
			   "{\"key\":\"eA==\"}}]}}\n");
		FUZZ_CHECK(b);
		break;
	case 7:
		return -1;
	}
	if (kind)
		*len = strlen(b);
	s->body = b;
	*body = b;
	return 0;
}

/* The model's reading of the reply just served: the object, or NULL
 * where etcd.c must fail the call. */
static json_t *model_reply(const struct script *s)
{
	json_t *j;

	if (s->status != 200 || !s->body)
		return NULL;
	j = json_loads(s->body, 0, NULL);
	if (!json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* What etcd_get must return for reply j, and the value and revisions. */
static int model_get(json_t *j, char **want, int64_t *mod, int64_t *rev)
{
	json_t *kvs = json_object_get(j, "kvs"), *kv = json_array_get(kvs, 0);
	const char *v;
	size_t len;

	*want = NULL;
	if (!j || (*rev = strict_num(json_object_get(j, "header"),
				     "revision")) < 0 ||
	    (kvs && !json_is_array(kvs)))
		return -1;
	if (!kv)
		return 0;
	/* proto3's JSON leaves an empty value out; a key that exists has
	 * been modified at some revision. */
	v = json_string_value(json_object_get(kv, "value"));
	if (!json_is_object(kv) || (json_object_get(kv, "value") && !v) ||
	    (*mod = strict_num(kv, "mod_revision")) < 1 ||
	    !(*want = b64_strict(v ? v : "", &len)))
		return -1;
	return 1;
}

static void api_calls(struct etcd *e, struct script *s)
{
	while (s->n) {
		unsigned op = take(s) % 7;
		json_t *j = NULL;
		int rc = 0;

		switch (op) {
		case 0: {
			char *val = (char *)1, *want;
			int64_t mod = -5, rev = -5, wmod = 0, wrev = 0;

			rc = etcd_get(e, "x", &val, &mod, &rev);
			j = model_reply(s);
			FUZZ_CHECK(rc == model_get(j, &want, &wmod, &wrev));
			if (rc < 0)
				FUZZ_CHECK(!val && etcd_error(e)[0]);
			else
				FUZZ_CHECK(rev == wrev);
			if (rc == 0)
				FUZZ_CHECK(!val);
			if (rc == 1)
				FUZZ_CHECK(val && !strcmp(val, want) &&
					   mod == wmod);
			free(want);
			free(val == (char *)1 ? NULL : val);
			break;
		}
		case 1:
			rc = etcd_cas(e, "x", s->n & 1 ? 0 : 12, "{}",
				      s->n & 2 ? -1 : 0);
			j = model_reply(s);
			FUZZ_CHECK(rc == (!j ? -1 :
				   json_is_true(json_object_get(j, "succeeded"))));
			break;
		case 2:
			rc = etcd_put(e, "x", "v", 7);
			j = model_reply(s);
			FUZZ_CHECK(rc == (j ? 0 : -1));
			break;
		case 3: {
			int64_t id = etcd_lease_grant(e, 15), want;

			j = model_reply(s);
			want = j ? strict_num(j, "ID") : -1;
			FUZZ_CHECK(id == (want > 0 ? want : -1));
			if (id < 0)
				FUZZ_CHECK(etcd_error(e)[0]);
			break;
		}
		case 4: {
			int64_t ttl;

			rc = etcd_lease_keepalive(e, 7);
			j = model_reply(s);
			ttl = j ? strict_num(json_object_get(j, "result"), "TTL")
				: -1;
			FUZZ_CHECK(rc == (ttl < 0 ? -1 : ttl > 0));
			break;
		}
		case 5:
			rc = etcd_lease_revoke(e, 7);
			j = model_reply(s);
			FUZZ_CHECK(rc == (j ? 0 : -1));
			break;
		default:
			/* A watch ends at an event, at its time limit or at
			 * the stream's end, whatever the status: the caller
			 * reads the key again.  Only a failed connection is
			 * an error. */
			rc = etcd_watch(e, "x", 4, 1000);
			if (s->body)
				FUZZ_CHECK(rc == !!strstr(s->body, "\"events\""));
			else
				FUZZ_CHECK(rc == -1 && etcd_error(e)[0]);
			break;
		}
		if (rc < 0)
			FUZZ_CHECK(etcd_error(e)[0]);
		json_decref(j);
	}
}

static void rendezvous(struct script *s, unsigned bits)
{
	struct rdzv_plan p = {
		.endpoint = "127.0.0.1:2379", .run_id = "fz",
		.min_nodes = 1 + (int)(bits & 3), .nproc = 2, .port = 29400,
		.addr = "10.0.0.9", .timeout = 30,
		.last_call = (bits >> 2 & 3) * 0.5,
	};
	struct rdzv_result res;
	char err[512] = "";
	json_t *doc, *nodes, *n0;

	p.max_nodes = p.min_nodes + (int)(bits >> 4 & 3);
	if (rdzv_etcd(&p, &res, err, sizeof(err))) {
		FUZZ_CHECK(err[0]);
		return;
	}
	/* In: the document it read last says so. */
	FUZZ_CHECK(s->last_doc);
	doc = json_loads(s->last_doc, 0, NULL);
	nodes = json_object_get(doc, "nodes");
	n0 = json_array_get(nodes, 0);
	FUZZ_CHECK(res.nnodes >= 1 && res.nnodes <= p.max_nodes &&
		   (size_t)res.nnodes == json_array_size(nodes));
	FUZZ_CHECK(res.node_rank >= 0 && res.node_rank < res.nnodes);
	FUZZ_CHECK(!strcmp(json_string_value(json_object_get(doc, "state")),
			   "closed"));
	FUZZ_CHECK(json_is_string(json_object_get(n0, "addr")) &&
		   !strcmp(res.master_addr,
			   json_string_value(json_object_get(n0, "addr"))));
	FUZZ_CHECK(json_is_integer(json_object_get(n0, "port")) &&
		   res.master_port == json_integer_value(
			   json_object_get(n0, "port")));
	FUZZ_CHECK(res.master_port >= 1 && res.master_port <= 65535);
	json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct script s = { .p = data + 1, .n = size ? size - 1 : 0 };
	struct etcd_fake f = { answer, &s, 1 };
	struct etcd *e;
	char err[256];

	if (size < 2)
		return 0;
	/* Pieces of 1 to 64 bytes, or whole. */
	f.chunk = data[0] >> 1 & 63 ? (size_t)(data[0] >> 1 & 63) : 0;
	etcd_set_fake(&f);
	if (data[0] & 1) {
		rendezvous(&s, take(&s));
	} else {
		FUZZ_CHECK(!etcd_open(&e, "127.0.0.1:2379", err, sizeof(err)));
		api_calls(e, &s);
		etcd_close(e);
	}
	etcd_set_fake(NULL);
	free(s.body);
	free(s.last_doc);
	return 0;
}
