/*
 * store.c - fuzzes the rendezvous store's server (runtime/store.c) with
 * whatever bytes clients that proved the key send: its framing, request
 * parsing, limits, parked GETs and the answers they get from another
 * client's SET.  (Before the key is proved, the server reads only the
 * fixed-size handshake: handshake.c fuzzes that.)
 *
 * Input: chunks, each a byte whose low 2 bits pick one of 4 clients and
 * whose high 6 bits, with the next byte, give a length, then that many
 * bytes for that client; a frame may span chunks, as it may span reads.
 * The harness runs a model of the protocol beside the server (frames as
 * store.c's header comment gives them; keys are C strings, cut at a NUL
 * byte, as the server takes them) and checks, after every chunk, that
 * the server drops a client exactly when the model says the frame was
 * bad, and that each client's reply bytes are exactly the model's.
 */
#include "store.h"
#include "fuzz.h"

#define CLIENTS 4
#define KEY_MAX 1023
#define FRAME_MAX (4u + 3 + KEY_MAX + ((size_t)64 << 20))

enum { CMD_SET = 1, CMD_GET = 2, CMD_ADD = 3 };

struct entry {
	char key[KEY_MAX + 1];
	struct fuzz_bytes val;
};

struct model {
	struct entry *kv;
	size_t nkv;
	struct {
		struct fuzz_bytes in;       /* not yet a whole frame */
		struct fuzz_bytes want;     /* replies the server must have queued */
		char parked[KEY_MAX + 1];
		uint32_t parked_seq;
		int has_parked;
	} cl[CLIENTS];
};

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void reply(struct fuzz_bytes *b, uint32_t seq, const void *val, size_t n)
{
	unsigned char h[9];
	uint32_t len = (uint32_t)n + 5;

	for (int i = 0; i < 4; i++) {
		h[i] = (unsigned char)(len >> (8 * i));
		h[4 + i] = (unsigned char)(seq >> (8 * i));
	}
	h[8] = 0; /* ok: the fuzzer stays far below every limit */
	fuzz_put(b, h, 9);
	fuzz_put(b, val, n);
}

static struct entry *find(struct model *m, const char *key)
{
	for (size_t i = 0; i < m->nkv; i++)
		if (!strcmp(m->kv[i].key, key))
			return &m->kv[i];
	return NULL;
}

static void store(struct model *m, const char *key, const void *v, size_t n)
{
	struct entry *e = find(m, key);

	if (!e) {
		m->kv = realloc(m->kv, (m->nkv + 1) * sizeof(*m->kv));
		FUZZ_CHECK(m->kv);
		e = &m->kv[m->nkv++];
		memset(e, 0, sizeof(*e));
		strcpy(e->key, key);
	}
	e->val.len = 0;
	fuzz_put(&e->val, v, n);
	for (int c = 0; c < CLIENTS; c++)
		if (m->cl[c].has_parked && !strcmp(m->cl[c].parked, key)) {
			m->cl[c].has_parked = 0;
			reply(&m->cl[c].want, m->cl[c].parked_seq, v, n);
		}
}

/* One whole request of client c; 0 if the server must drop it. */
static int request(struct model *m, int c, const unsigned char *r, size_t len)
{
	char key[KEY_MAX + 1];
	size_t klen, vlen;
	uint32_t seq;
	struct entry *e;

	if (len < 7)
		return 0;
	seq = rd32(r);
	r += 4, len -= 4;
	klen = (size_t)r[1] | (size_t)r[2] << 8;
	if (klen > KEY_MAX || 3 + klen > len)
		return 0;
	memcpy(key, r + 3, klen);
	key[klen] = 0;
	vlen = len - 3 - klen;
	switch (r[0]) {
	case CMD_SET:
		reply(&m->cl[c].want, seq, NULL, 0);
		store(m, key, r + 3 + klen, vlen);
		return 1;
	case CMD_GET:
		if ((e = find(m, key))) {
			reply(&m->cl[c].want, seq, e->val.p, e->val.len);
		} else {
			m->cl[c].has_parked = 1;
			m->cl[c].parked_seq = seq;
			strcpy(m->cl[c].parked, key);
		}
		return 1;
	case CMD_ADD: {
		uint64_t cur = 0, delta;
		if (vlen != 8)
			return 0;
		memcpy(&delta, r + 3 + klen, 8);
		if ((e = find(m, key)) && e->val.len == 8)
			memcpy(&cur, e->val.p, 8);
		cur += delta;
		reply(&m->cl[c].want, seq, &cur, 8);
		store(m, key, &cur, 8);
		return 1;
	}
	}
	return 0;
}

/* Client c's bytes in the model: 0 if the server must drop it. */
static int feed(struct model *m, int c, const uint8_t *p, size_t n)
{
	struct fuzz_bytes *in = &m->cl[c].in;
	size_t off = 0;

	if (!n)
		return 1;
	fuzz_put(in, p, n);
	while (in->len - off >= 4) {
		uint32_t flen = rd32(in->p + off);
		if (flen > FRAME_MAX)
			return 0;
		if (in->len - off - 4 < flen)
			break;
		if (!request(m, c, in->p + off + 4, flen))
			return 0;
		off += 4 + flen;
	}
	memmove(in->p, in->p + off, in->len - off);
	in->len -= off;
	return 1;
}

static void drop(struct model *m, int c)
{
	m->cl[c].in.len = 0;
	m->cl[c].want.len = 0;
	m->cl[c].has_parked = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dri_store_server *srv = dri_store_server_local();
	struct model m;

	if (!srv)
		return 0;
	memset(&m, 0, sizeof(m));
	while (size >= 2) {
		int c = data[0] & 3;
		size_t n = (size_t)(data[0] >> 2) << 8 | data[1];
		int kept;

		data += 2, size -= 2;
		if (n > size)
			n = size;
		kept = feed(&m, c, data, n);
		FUZZ_CHECK((dri_store_feed(srv, (unsigned)c, data, n) == 0) == kept);
		if (!kept)
			drop(&m, c);
		data += n, size -= n;
		for (int k = 0; k < CLIENTS; k++) {
			const unsigned char *got;
			size_t len = dri_store_take(srv, (unsigned)k, &got);
			FUZZ_CHECK(len == m.cl[k].want.len);
			FUZZ_CHECK(!len || !memcmp(got, m.cl[k].want.p, len));
			m.cl[k].want.len = 0;
		}
	}
	dri_store_server_stop(srv);
	for (size_t i = 0; i < m.nkv; i++)
		free(m.kv[i].val.p);
	free(m.kv);
	for (int c = 0; c < CLIENTS; c++) {
		free(m.cl[c].in.p);
		free(m.cl[c].want.p);
	}
	return 0;
}
