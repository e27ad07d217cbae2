/*
 * handshake.c - fuzzes the challenge-response that starts every store and
 * transport connection (auth.h): the server's parsing of a HELLO, the
 * client's check of a CHAL, the server's check of a PROOF, with a peer
 * that changes any bit of any message in flight, or holds another key.
 *
 * Input: a flags byte (bit 0: store or transport role, bit 1: the client
 * has a key that differs in one bit, bits 2-7: which bit), then XOR masks
 * applied in flight to the HELLO (48 bytes), the CHAL (68) and the PROOF
 * (32), in that order; missing mask bytes are zero.  Property: the
 * handshake succeeds exactly when both keys are the same and no bit was
 * changed; when it succeeds each side learns the other's real rank (and
 * the server the client's world size); when it fails it leaves a message.
 */
#include "auth.h"
#include "error.h"
#include "fuzz.h"

static void xor_mask(unsigned char *msg, size_t n, const uint8_t **data,
		     size_t *size, int *changed)
{
	for (size_t i = 0; i < n && *size; i++, (*data)++, (*size)--) {
		msg[i] ^= **data;
		*changed |= **data != 0;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t skey[DRI_KEY_LEN], ckey[DRI_KEY_LEN];
	unsigned char hello[DRI_HS_HELLO], chal[DRI_HS_CHAL];
	unsigned char proof[DRI_HS_PROOF];
	dri_hs cli, srv;
	int role, wrong_key, changed = 0, rank = -1, wsize = -1, srank = -1;
	int ok = 0;

	if (size < 1)
		return 0;
	role = data[0] & 1 ? DRI_HS_TRANSPORT : DRI_HS_STORE;
	wrong_key = (data[0] >> 1) & 1;
	for (int i = 0; i < DRI_KEY_LEN; i++)
		skey[i] = (uint8_t)(i * 37 + 11);
	memcpy(ckey, skey, sizeof(ckey));
	if (wrong_key)
		ckey[(data[0] >> 2) % DRI_KEY_LEN] ^= (uint8_t)(1u << (data[0] >> 5));
	data++, size--;

	FUZZ_CHECK(dri_hs_hello(&cli, role, 5, 9) == DR_OK);
	memcpy(hello, cli.hello, sizeof(hello));
	xor_mask(hello, sizeof(hello), &data, &size, &changed);
	if (dri_hs_challenge(&srv, skey, hello, role, 2, &rank, &wsize) != DR_OK)
		goto out;
	memcpy(chal, srv.chal, sizeof(chal));
	xor_mask(chal, sizeof(chal), &data, &size, &changed);
	if (dri_hs_answer(&cli, ckey, chal, &srank, proof) != DR_OK)
		goto out;
	xor_mask(proof, sizeof(proof), &data, &size, &changed);
	if (!dri_hs_verify(&srv, skey, proof)) {
		dri_fail(DR_EAUTH, "proof refused"); /* as the servers do */
		goto out;
	}
	ok = 1;
	FUZZ_CHECK(rank == 5 && wsize == 9 && srank == 2);
out:
	FUZZ_CHECK(ok == (!wrong_key && !changed));
	if (!ok)
		FUZZ_CHECK(dr_last_error()[0] != 0);
	return 0;
}
