/*
 * spew - launcher fixture and benchmark load: `spew BYTES [LINE_LEN]`
 * writes BYTES bytes to stdout as lines of LINE_LEN bytes (default 100,
 * newline included), in 64 KiB writes, as fast as it can.  The lines
 * carry a sequence number so tests can check none is lost or torn.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(1, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	long long total = argc > 1 ? atoll(argv[1]) : 1 << 20;
	long len = argc > 2 ? atol(argv[2]) : 100;
	size_t cap = 65536, used = 0;
	char *buf, *line;
	long long seq = 0;
	int rc;

	if (len < 12 || len > 1 << 20 || total < 0) {
		fprintf(stderr, "usage: spew BYTES [LINE_LEN >= 12]\n");
		return 2;
	}
	if ((size_t)len > cap)
		cap = len;
	buf = malloc(cap);
	line = malloc(len);
	if (!buf || !line)
		return 1;
	memset(line, 'x', len);
	line[len - 1] = '\n';
	while (total >= len) {
		if (used + len > cap) {
			if (write_all(buf, used))
				return 1;   /* the reader is gone */
			used = 0;
		}
		memcpy(buf + used, line, len);
		snprintf(buf + used, 12, "%010lld", seq++ % 10000000000LL);
		buf[used + 10] = ' ';
		used += len;
		total -= len;
	}
	if (total > 0) {
		memset(buf + used, 'y', total - 1);
		buf[used + total - 1] = '\n';
		used += total;
	}
	rc = write_all(buf, used) ? 1 : 0;
	free(buf);
	free(line);
	return rc;
}
