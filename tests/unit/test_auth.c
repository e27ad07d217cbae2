/*
 * test_auth.c - auth.c on its own: SHA-256 against FIPS 180-4's examples,
 * HMAC-SHA256 against RFC 4231's test cases, the handshake (both ways, a
 * wrong key, a replayed proof, a role that is not the server's), and where
 * the secret comes from (DISTRUN_SECRET, DISTRUN_SECRET_FILE and its
 * checks, the per-user key file made 0600 in a 0700 directory).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "error.h"
#include "runner.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static int sha_is(const void *msg, size_t n, const char *want)
{
	uint8_t d[32];
	char h[65];

	dri_sha256(msg, n, d);
	hex(d, 32, h);
	CHECKF(!strcmp(h, want), "sha256 = %s, want %s", h, want);
	return 0;
}

static int test_sha256_fips_180_4(void)
{
	const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	dri_sha256_ctx c;
	uint8_t d[32];
	char h[65], *a = malloc(1000000);

	CHECK(sha_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
	CHECK(sha_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
	CHECK(sha_is(m2, strlen(m2), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
	CHECK(a);
	memset(a, 'a', 1000000);
	CHECK(sha_is(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
	/* the same in uneven pieces */
	dri_sha256_init(&c);
	for (size_t off = 0, k = 1; off < 1000000; off += k, k = k * 3 % 1000 + 1)
		dri_sha256_update(&c, a + off, off + k > 1000000 ? 1000000 - off : k);
	dri_sha256_final(&c, d);
	hex(d, 32, h);
	CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
	free(a);
	return 0;
}

static int hmac_is(const void *key, size_t kn, const void *msg, size_t n,
		   const char *want)
{
	uint8_t d[32];
	char h[65];

	dri_hmac_sha256(key, kn, msg, n, d);
	hex(d, 32, h);
	CHECKF(!strcmp(h, want), "hmac = %s, want %s", h, want);
	return 0;
}

static int test_hmac_rfc_4231(void)
{
	unsigned char k[131], m[50];
	const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	const char *t7 = "This is a test using a larger than block-size key and a "
			 "larger than block-size data. The key needs to be hashed "
			 "before being used by the HMAC algorithm.";

	memset(k, 0x0b, 20);
	CHECK(hmac_is(k, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7") == 0);
	CHECK(hmac_is("Jefe", 4, "what do ya want for nothing?", 28,
		      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") == 0);
	memset(k, 0xaa, sizeof(k));
	memset(m, 0xdd, sizeof(m));
	CHECK(hmac_is(k, 20, m, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe") == 0);
	CHECK(hmac_is(k, 131, t6, strlen(t6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54") == 0);
	CHECK(hmac_is(k, 131, t7, strlen(t7), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2") == 0);
	return 0;
}

static int test_ct_equal(void)
{
	CHECK(dri_ct_equal("abcd", "abcd", 4));
	CHECK(!dri_ct_equal("abcd", "abce", 4));
	CHECK(!dri_ct_equal("xbcd", "abcd", 4));
	CHECK(dri_ct_equal("", "", 0));
	return 0;
}

static int test_handshake_both_ways(void)
{
	uint8_t key[32] = { 7 }, bad[32] = { 8 };
	unsigned char proof[DRI_HS_PROOF];
	dri_hs cli, srv, srv2;
	int rank, size, srank;

	CHECK(dri_hs_hello(&cli, DRI_HS_TRANSPORT, 3, 8) == DR_OK);
	CHECK(dri_hs_challenge(&srv, key, cli.hello, DRI_HS_TRANSPORT, 5,
			       &rank, &size) == DR_OK);
	CHECK(rank == 3 && size == 8);
	CHECK(dri_hs_answer(&cli, key, srv.chal, &srank, proof) == DR_OK);
	CHECK(srank == 5);
	CHECK(dri_hs_verify(&srv, key, proof));
	CHECK(!dri_hs_verify(&srv, bad, proof));
	/* A replayed proof is worthless: the next challenge has a new nonce. */
	CHECK(dri_hs_challenge(&srv2, key, cli.hello, DRI_HS_TRANSPORT, 5,
			       &rank, &size) == DR_OK);
	CHECK(memcmp(srv.chal, srv2.chal, 32));
	CHECK(!dri_hs_verify(&srv2, key, proof));
	/* A server without the key cannot pass for one. */
	CHECK(dri_hs_challenge(&srv, bad, cli.hello, DRI_HS_TRANSPORT, 5,
			       &rank, &size) == DR_OK);
	CHECK(dri_hs_answer(&cli, key, srv.chal, &srank, proof) == DR_EAUTH);
	/* A challenge with another rank in it is not the server's. */
	CHECK(dri_hs_challenge(&srv, key, cli.hello, DRI_HS_TRANSPORT, 5,
			       &rank, &size) == DR_OK);
	srv.chal[32] = 6;
	CHECK(dri_hs_answer(&cli, key, srv.chal, &srank, proof) == DR_EAUTH);
	/* A store HELLO is not a transport one. */
	CHECK(dri_hs_challenge(&srv, key, cli.hello, DRI_HS_STORE, 0, &rank,
			       &size) == DR_EPROTO);
	return 0;
}

static int test_secret_sources(void)
{
	char dir[] = "/tmp/dr-auth-XXXXXX", path[256];
	uint8_t a[32], b[32], c[32];
	struct stat st;
	int fd;

	CHECK(mkdtemp(dir));
	unsetenv("DISTRUN_AUTH");
	unsetenv("DISTRUN_SECRET_FILE");
	setenv("DISTRUN_SECRET", "00112233445566778899aabbccddeeff", 1);
	CHECK(dri_auth_store_key("port=1", a) == DR_OK);
	CHECK(dri_auth_store_key("port=2", b) == DR_OK);
	CHECK(memcmp(a, b, 32)); /* another job identity, another key */
	setenv("DISTRUN_SECRET", "0011", 1);
	CHECK(dri_auth_store_key("port=1", b) == DR_EENV);
	CHECK(strstr(dr_last_error(), "DISTRUN_SECRET"));
	setenv("DISTRUN_SECRET", "zz112233445566778899aabbccddeeff", 1);
	CHECK(dri_auth_store_key("port=1", b) == DR_EENV);
	unsetenv("DISTRUN_SECRET");

	/* DISTRUN_SECRET_FILE: the same hex, so the same key */
	snprintf(path, sizeof(path), "%s/s", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, "00112233445566778899aabbccddeeff\n", 33) == 33);
	close(fd);
	setenv("DISTRUN_SECRET_FILE", path, 1);
	CHECK(dri_auth_store_key("port=1", b) == DR_OK);
	CHECK(!memcmp(a, b, 32));
	CHECK(chmod(path, 0640) == 0);
	CHECK(dri_auth_store_key("port=1", b) == DR_EENV);
	CHECKF(strstr(dr_last_error(), "mode 0640"), "%s", dr_last_error());
	CHECK(chmod(path, 0600) == 0);
	setenv("DISTRUN_SECRET_FILE", dir, 1);
	CHECK(dri_auth_store_key("port=1", b) == DR_EENV);
	CHECK(strstr(dr_last_error(), "not a regular file"));
	unsetenv("DISTRUN_SECRET_FILE");

	/* the per-user key file: made on first use, the same after */
	setenv("XDG_CONFIG_HOME", dir, 1);
	CHECK(dri_auth_store_key("port=1", b) == DR_OK);
	snprintf(path, sizeof(path), "%s/distrun/secret", dir);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	snprintf(path, sizeof(path), "%s/distrun", dir);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);
	CHECK(dri_auth_store_key("port=1", c) == DR_OK);
	CHECK(!memcmp(b, c, 32) && memcmp(a, b, 32));
	CHECK(chmod(path, 0755) == 0);
	CHECK(dri_auth_store_key("port=1", c) == DR_EENV);
	CHECKF(strstr(dr_last_error(), "mode 0700"), "%s", dr_last_error());
	CHECK(chmod(path, 0700) == 0);

	/* DISTRUN_AUTH=none: a key anyone can compute, the same for all */
	setenv("DISTRUN_AUTH", "none", 1);
	CHECK(dri_auth_store_key("port=1", c) == DR_OK);
	CHECK(memcmp(b, c, 32));
	setenv("DISTRUN_AUTH", "nope", 1);
	CHECK(dri_auth_store_key("port=1", c) == DR_EENV);
	unsetenv("DISTRUN_AUTH");
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	CHECK(system(path) == 0);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_sha256_fips_180_4),
	UNIT(test_hmac_rfc_4231),
	UNIT(test_ct_equal),
	UNIT(test_handshake_both_ways),
	UNIT(test_secret_sources),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
