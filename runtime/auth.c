/*
 * auth.c - SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), the job's secret
 * and keys, and the handshake that every store and transport connection
 * starts with.  auth.h says what the secret and the handshake are.
 *
 * Written here rather than taken from a crypto library so that libdistrun
 * depends on nothing but libc; the unit test checks the FIPS 180-4 and
 * RFC 4231 vectors.  Only integrity is needed (no encryption), and only at
 * connect time, so speed does not matter.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "error.h"
#include "wire.h"

/* ------------------------------------------------------------ SHA-256 */

static const uint32_t K256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n)
{
	return x >> n | x << (32 - n);
}

static void sha256_block(uint32_t h[8], const unsigned char *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, k;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3;
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10;
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = h[0], b = h[1], c = h[2], d = h[3];
	e = h[4], f = h[5], g = h[6], k = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t S1 = ror(e, 6) ^ ror(e, 11) ^ ror(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = k + S1 + ch + K256[i] + w[i];
		uint32_t S0 = ror(a, 2) ^ ror(a, 13) ^ ror(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = S0 + maj;
		k = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d;
	h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void dri_sha256_init(dri_sha256_ctx *c)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(c->h, iv, sizeof(iv));
	c->bytes = 0;
	c->used = 0;
}

void dri_sha256_update(dri_sha256_ctx *c, const void *data, size_t n)
{
	const unsigned char *p = data;

	c->bytes += n;
	while (n) {
		size_t k = 64 - c->used < n ? 64 - c->used : n;
		memcpy(c->buf + c->used, p, k);
		c->used += k;
		p += k;
		n -= k;
		if (c->used == 64) {
			sha256_block(c->h, c->buf);
			c->used = 0;
		}
	}
}

void dri_sha256_final(dri_sha256_ctx *c, uint8_t out[32])
{
	uint64_t bits = c->bytes * 8;
	unsigned char pad[72] = { 0x80 };
	size_t padlen = (c->used < 56 ? 56 : 120) - c->used;

	for (int i = 0; i < 8; i++)
		pad[padlen + i] = (unsigned char)(bits >> (56 - 8 * i));
	dri_sha256_update(c, pad, padlen + 8);
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 4; j++)
			out[4 * i + j] = (uint8_t)(c->h[i] >> (24 - 8 * j));
	explicit_bzero(c, sizeof(*c));
}

void dri_sha256(const void *p, size_t n, uint8_t out[32])
{
	dri_sha256_ctx c;

	dri_sha256_init(&c);
	dri_sha256_update(&c, p, n);
	dri_sha256_final(&c, out);
}

/* --------------------------------------------------------------- HMAC */

void dri_hmac_init(dri_hmac_ctx *c, const void *key, size_t klen)
{
	unsigned char k[64] = { 0 }, pad[64];

	if (klen > 64)
		dri_sha256(key, klen, k);
	else if (klen)
		memcpy(k, key, klen);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	dri_sha256_init(&c->inner);
	dri_sha256_update(&c->inner, pad, 64);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	dri_sha256_init(&c->outer);
	dri_sha256_update(&c->outer, pad, 64);
	explicit_bzero(k, sizeof(k));
	explicit_bzero(pad, sizeof(pad));
}

void dri_hmac_update(dri_hmac_ctx *c, const void *p, size_t n)
{
	dri_sha256_update(&c->inner, p, n);
}

void dri_hmac_final(dri_hmac_ctx *c, uint8_t out[32])
{
	uint8_t ih[32];

	dri_sha256_final(&c->inner, ih);
	dri_sha256_update(&c->outer, ih, sizeof(ih));
	dri_sha256_final(&c->outer, out);
	explicit_bzero(ih, sizeof(ih));
	/* inner and outer were started from the key's pads */
	explicit_bzero(c, sizeof(*c));
}

void dri_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n,
		     uint8_t out[32])
{
	dri_hmac_ctx c;

	dri_hmac_init(&c, key, klen);
	dri_hmac_update(&c, msg, n);
	dri_hmac_final(&c, out);
}

int dri_ct_equal(const void *a, const void *b, size_t n)
{
	const volatile unsigned char *x = a, *y = b;
	unsigned char d = 0;

	for (size_t i = 0; i < n; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

dr_err dri_random(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n) {
		ssize_t k = getrandom(p, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return dri_fail(DR_ESYS, "getrandom: %s", dri_strerror(errno));
		p += k;
		n -= (size_t)k;
	}
	return DR_OK;
}

/* ---------------------------------------------------------- the secret */

#define SECRET_MIN 16   /* bytes: 128 bits */
#define SECRET_MAX 4096
#define KEYFILE_BYTES 32

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Hex digits (whitespace at the end allowed) into bytes; -1 if not hex. */
static int unhex(const char *s, size_t len, unsigned char *out, size_t cap,
		 size_t *n)
{
	while (len && (s[len - 1] == '\n' || s[len - 1] == '\r' ||
		       s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (len % 2 || len / 2 > cap)
		return -1;
	for (size_t i = 0; i < len; i += 2) {
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i / 2] = (unsigned char)(hi << 4 | lo);
	}
	*n = len / 2;
	return 0;
}

/* Reads a secret file that must be a regular file of this user, readable
 * by nobody else.  The file holds hex (what distrun writes) or, when it
 * is not hex, its bytes are the secret. */
static dr_err read_secret_file(const char *what, const char *path,
			       unsigned char *out, size_t *n)
{
	char buf[SECRET_MAX * 2 + 2];
	struct stat st;
	ssize_t k;
	size_t len = 0;
	dr_err err = DR_OK;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return dri_fail(DR_EENV, "%s %s: %s", what, path, dri_strerror(errno));
	if (fstat(fd, &st) < 0) {
		err = dri_fail(DR_EENV, "%s %s: %s", what, path, dri_strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		err = dri_fail(DR_EENV, "%s %s is not a regular file", what, path);
		goto out;
	}
	if (st.st_uid != geteuid()) {
		err = dri_fail(DR_EENV, "%s %s is owned by uid %u, not by this "
			       "user (uid %u): refused", what, path,
			       (unsigned)st.st_uid, (unsigned)geteuid());
		goto out;
	}
	if (st.st_mode & 077) {
		err = dri_fail(DR_EENV, "%s %s has mode %04o: it must not be "
			       "readable or writable by group or other (chmod "
			       "600 %s)", what, path, (unsigned)(st.st_mode & 07777),
			       path);
		goto out;
	}
	while (len < sizeof(buf) && (k = read(fd, buf + len, sizeof(buf) - len)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			err = dri_fail(DR_EENV, "%s %s: %s", what, path,
				       dri_strerror(errno));
			goto out;
		}
		len += (size_t)k;
	}
	if (unhex(buf, len, out, SECRET_MAX, n) < 0) {
		if (len > SECRET_MAX) {
			err = dri_fail(DR_EENV, "%s %s is larger than %d bytes",
				       what, path, SECRET_MAX);
			goto out;
		}
		memcpy(out, buf, len);
		*n = len;
	}
	if (*n < SECRET_MIN)
		err = dri_fail(DR_EENV, "%s %s holds %zu bytes: a secret needs "
			       "at least %d", what, path, *n, SECRET_MIN);
out:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return err;
}

/* mkdir that accepts an existing directory; the caller checks it. */
static int mkdir_ok(const char *path)
{
	return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

/* The per-user key file: checked, or made on first use.  Made in a
 * temporary file then linked to its name, so that ranks starting at once
 * all read the same whole secret (link fails if another won). */
static dr_err user_key_file(unsigned char *out, size_t *n)
{
	char dir[4096], path[4200], tmp[4300];
	const char *base = getenv("XDG_CONFIG_HOME"), *home;
	struct stat st;
	dr_err err;

	if (base && base[0] == '/') {
		if (mkdir_ok(base) < 0)
			return dri_fail(DR_EENV, "per-user key file: cannot "
					"create %s: %s", base, dri_strerror(errno));
		snprintf(dir, sizeof(dir), "%s/distrun", base);
	} else {
		home = getenv("HOME");
		if (!home || home[0] != '/') {
			struct passwd *pw = getpwuid(geteuid());
			home = pw ? pw->pw_dir : NULL;
		}
		if (!home)
			return dri_fail(DR_EENV, "no secret for this job: "
					"DISTRUN_SECRET and DISTRUN_SECRET_FILE "
					"are unset and there is no home directory "
					"for the per-user key file");
		snprintf(path, sizeof(path), "%s/.config", home);
		if (mkdir_ok(path) < 0)
			return dri_fail(DR_EENV, "per-user key file: cannot "
					"create %s: %s", path, dri_strerror(errno));
		snprintf(dir, sizeof(dir), "%s/.config/distrun", home);
	}
	if (mkdir_ok(dir) < 0)
		return dri_fail(DR_EENV, "per-user key file: cannot create %s: "
				"%s", dir, dri_strerror(errno));
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return dri_fail(DR_EENV, "per-user key file: %s is not a "
				"directory", dir);
	if (st.st_uid != geteuid() || (st.st_mode & 077))
		return dri_fail(DR_EENV, "per-user key file: directory %s must "
				"be owned by uid %u with mode 0700 (it is uid %u, "
				"mode %04o): refused", dir, (unsigned)geteuid(),
				(unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777));
	snprintf(path, sizeof(path), "%s/secret", dir);
	if (access(path, F_OK) < 0 && errno == ENOENT) {
		unsigned char raw[KEYFILE_BYTES];
		char hex[2 * KEYFILE_BYTES + 1];
		int fd;

		snprintf(tmp, sizeof(tmp), "%s/.secret.%ld", dir, (long)getpid());
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
			  O_CLOEXEC, 0600);
		if (fd < 0)
			return dri_fail(DR_EENV, "per-user key file: cannot "
					"create %s: %s", tmp, dri_strerror(errno));
		err = dri_random(raw, sizeof(raw));
		for (int i = 0; i < KEYFILE_BYTES; i++)
			snprintf(hex + 2 * i, 3, "%02x", raw[i]);
		hex[2 * KEYFILE_BYTES] = '\n';
		explicit_bzero(raw, sizeof(raw));
		if (!err && (write(fd, hex, sizeof(hex)) != (ssize_t)sizeof(hex) ||
			     fsync(fd) < 0))
			err = dri_fail(DR_EENV, "per-user key file: cannot write "
				       "%s: %s", tmp, dri_strerror(errno));
		explicit_bzero(hex, sizeof(hex));
		close(fd);
		if (!err && link(tmp, path) < 0 && errno != EEXIST)
			err = dri_fail(DR_EENV, "per-user key file: cannot "
				       "create %s: %s", path, dri_strerror(errno));
		unlink(tmp);
		if (err)
			return err;
	}
	return read_secret_file("per-user key file", path, out, n);
}

int dri_auth_disabled(void)
{
	const char *a = getenv("DISTRUN_AUTH");

	return a && !strcmp(a, "none");
}

/* The secret, from the first source that is set (auth.h). */
static dr_err find_secret(unsigned char *out, size_t *n)
{
	const char *a = getenv("DISTRUN_AUTH"), *s, *f;

	*n = 0;
	if (a && *a && strcmp(a, "none") && strcmp(a, "secret"))
		return dri_fail(DR_EENV, "DISTRUN_AUTH='%s': use 'none' (no "
				"authentication, insecure) or leave it unset", a);
	if (dri_auth_disabled())
		return DR_OK;
	s = getenv(DRI_ENV_SECRET);
	if (s && *s) {
		if (unhex(s, strlen(s), out, SECRET_MAX, n) < 0 ||
		    *n < SECRET_MIN)
			return dri_fail(DR_EENV, "DISTRUN_SECRET must be at least "
					"%d hex digits (%d bytes), an even number "
					"of them", 2 * SECRET_MIN, SECRET_MIN);
		return DR_OK;
	}
	f = getenv("DISTRUN_SECRET_FILE");
	if (f && *f)
		return read_secret_file("DISTRUN_SECRET_FILE", f, out, n);
	return user_key_file(out, n);
}

void dri_auth_identity(char *buf, size_t size, int port, const char *run_id,
		       int world_size)
{
	snprintf(buf, size, "port=%d\nrun=%s\nworld=%d", port,
		 run_id ? run_id : "", world_size);
}

dr_err dri_auth_store_key(const char *identity, uint8_t key[DRI_KEY_LEN])
{
	static const char label[] = "distrun job key";
	unsigned char *secret = malloc(SECRET_MAX);
	size_t n;
	dri_hmac_ctx c;
	dr_err err;

	if (!secret)
		return dri_fail(DR_ENOMEM, "out of memory");
	err = find_secret(secret, &n);
	if (!err) {
		dri_hmac_init(&c, secret, n);
		dri_hmac_update(&c, label, sizeof(label)); /* with its NUL */
		dri_hmac_update(&c, identity, strlen(identity));
		dri_hmac_final(&c, key);
	}
	explicit_bzero(secret, SECRET_MAX);
	explicit_bzero(&c, sizeof(c));
	free(secret);
	return err;
}

void dri_auth_transport_key(const uint8_t store_key[DRI_KEY_LEN],
			    const void *nonce, size_t n,
			    uint8_t key[DRI_KEY_LEN])
{
	static const char label[] = "distrun transport key";
	dri_hmac_ctx c;

	dri_hmac_init(&c, store_key, DRI_KEY_LEN);
	dri_hmac_update(&c, label, sizeof(label));
	dri_hmac_update(&c, nonce, n);
	dri_hmac_final(&c, key);
}

/* ------------------------------------------------------- the handshake */

#define HS_MAGIC 0x41485244u /* "DRHA" */
#define HS_VERSION 2

/* HMAC(key, label || HELLO || nonce_s || server rank). */
static void hs_mac(const uint8_t key[DRI_KEY_LEN], const char *label,
		   const dri_hs *hs, uint8_t out[32])
{
	dri_hmac_ctx c;

	dri_hmac_init(&c, key, DRI_KEY_LEN);
	dri_hmac_update(&c, label, strlen(label) + 1);
	dri_hmac_update(&c, hs->hello, DRI_HS_HELLO);
	dri_hmac_update(&c, hs->chal, 36); /* nonce_s, rank */
	dri_hmac_final(&c, out);
}

dr_err dri_hs_hello(dri_hs *hs, int role, int rank, int size)
{
	unsigned char *b = hs->hello;

	memset(hs, 0, sizeof(*hs));
	hs->role = role;
	dri_put32(b, HS_MAGIC);
	b[4] = HS_VERSION;
	b[5] = 0;
	b[6] = (unsigned char)role;
	b[7] = 0;
	dri_put32(b + 8, (uint32_t)rank);
	dri_put32(b + 12, (uint32_t)size);
	return dri_random(b + 16, 32);
}

dr_err dri_hs_challenge(dri_hs *hs, const uint8_t key[DRI_KEY_LEN],
			const unsigned char hello[DRI_HS_HELLO], int role,
			int my_rank, int *rank, int *size)
{
	dr_err err;

	memset(hs, 0, sizeof(*hs));
	if (dri_get32(hello) != HS_MAGIC || hello[4] != HS_VERSION ||
	    hello[6] != role)
		return dri_fail(DR_EPROTO, "not a distrun handshake");
	memcpy(hs->hello, hello, DRI_HS_HELLO);
	hs->role = role;
	*rank = (int)dri_get32(hello + 8);
	*size = (int)dri_get32(hello + 12);
	err = dri_random(hs->chal, 32);
	if (err)
		return err;
	dri_put32(hs->chal + 32, (uint32_t)my_rank);
	hs_mac(key, "distrun server", hs, hs->chal + 36);
	return DR_OK;
}

dr_err dri_hs_answer(dri_hs *hs, const uint8_t key[DRI_KEY_LEN],
		     const unsigned char chal[DRI_HS_CHAL], int *srv_rank,
		     unsigned char proof[DRI_HS_PROOF])
{
	uint8_t want[32];

	memcpy(hs->chal, chal, DRI_HS_CHAL);
	hs_mac(key, "distrun server", hs, want);
	if (!dri_ct_equal(want, chal + 36, 32))
		return dri_fail(DR_EAUTH, "the peer does not have this job's "
				"key: %s", dri_auth_disabled() ?
				"this rank runs with DISTRUN_AUTH=none and the "
				"peer does not (or the other way round)" :
				"it was started with another secret or another "
				"job identity (every rank needs the same "
				"DISTRUN_SECRET, DISTRUN_SECRET_FILE or per-user "
				"key file, and the same MASTER_PORT, WORLD_SIZE "
				"and TORCHELASTIC_RUN_ID)");
	*srv_rank = (int)dri_get32(chal + 32);
	hs_mac(key, "distrun client", hs, proof);
	return DR_OK;
}

int dri_hs_verify(const dri_hs *hs, const uint8_t key[DRI_KEY_LEN],
		  const unsigned char proof[DRI_HS_PROOF])
{
	uint8_t want[32];

	hs_mac(key, "distrun client", hs, want);
	return dri_ct_equal(want, proof, 32);
}
