/*
 * replay.c - the driver that runs a fuzz harness without libFuzzer: each
 * argument is a file or a directory of files (not recursive), and every
 * file is handed to LLVMFuzzerTestOneInput once, in name order, in a
 * buffer of exactly its size.  Built with the normal compiler (and with
 * the sanitizers under ASAN=1), so the kept corpus in testdata/fuzz/ is
 * replayed by `make test` everywhere, not only where clang is.
 *
 * Prints "NAME: replayed N inputs" on success; a harness that finds a
 * fault aborts (or the sanitizer stops it) after "replaying FILE" named
 * the input on stderr.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Harnesses that need set-up define it; libFuzzer calls it the same way. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;
	int rc = -1;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out;
	/* malloc(0) may return NULL: keep one byte, hand over n. */
	buf = malloc(n ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		goto out;
	fprintf(stderr, "replaying %s\n", path);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "replay: %s: cannot read it\n", path);
	free(buf);
	fclose(f);
	return rc;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file in dir; returns how many, or -1. */
static long replay_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	long done = 0;

	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		char *path;
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		if (asprintf(&path, "%s/%s", dir, e->d_name) < 0)
			goto fail;
		if (stat(path, &st) || !S_ISREG(st.st_mode)) {
			free(path);
			continue;
		}
		if (n == cap) {
			char **nn = realloc(names, (cap = cap ? 2 * cap : 64) *
						   sizeof(*nn));
			if (!nn) {
				free(path);
				goto fail;
			}
			names = nn;
		}
		names[n++] = path;
	}
	qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n; i++) {
		if (done >= 0 && replay_file(names[i]) == 0)
			done++;
		else
			done = -1;
	}
	goto out;
fail:
	fprintf(stderr, "replay: %s: out of memory\n", dir);
	done = -1;
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return done;
}

int main(int argc, char **argv)
{
	const char *name = strrchr(argv[0], '/');
	long total = 0;

	name = name ? name + 1 : argv[0];
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", name);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		long k;

		if (stat(argv[i], &st)) {
			fprintf(stderr, "replay: %s: %s\n", argv[i],
				strerror(errno));
			return 1;
		}
		k = S_ISDIR(st.st_mode) ? replay_dir(argv[i])
					: (replay_file(argv[i]) ? -1 : 1);
		if (k < 0)
			return 1;
		total += k;
	}
	printf("%s: replayed %ld inputs\n", name, total);
	return 0;
}
