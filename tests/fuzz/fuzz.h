/*
 * fuzz.h - what every harness in tests/fuzz/ shares.
 *
 * A harness is one file defining LLVMFuzzerTestOneInput: `make fuzz` links
 * it with libFuzzer (clang), and every build links it with replay.c into
 * NAME-replay, which feeds it each file of testdata/fuzz/NAME/ so that the
 * corpus is a regression test wherever `make test` runs.  A harness checks
 * properties of what the parser returns (round trips, ranges), not only
 * that it does not crash: FUZZ_CHECK aborts, which both drivers report as
 * a failure with the input that caused it.
 */
#ifndef DISTRUN_FUZZ_H
#define DISTRUN_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed\n",    \
				__FILE__, __LINE__, #cond);                  \
			abort();                                             \
		}                                                            \
	} while (0)

/* A NUL-terminated copy of data (malloc'ed to the exact size, so that the
 * sanitizers see a read past the end); NULL when out of memory. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s) {
		memcpy(s, data, size);
		s[size] = 0;
	}
	return s;
}

/* A growing byte string, for the harnesses' models; aborts when out of
 * memory (a harness has nothing better to do then). */
struct fuzz_bytes {
	unsigned char *p;
	size_t len, cap;
};

static inline void fuzz_put(struct fuzz_bytes *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		FUZZ_CHECK(b->p);
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

#endif
