/*
 * outfile.c - the files distrun writes for CI and people (--report,
 * --junit, --tap, --trace, --html): never half written, never last run's.
 *
 * A file is written into a temporary file in the same directory
 * (".NAME.XXXXXX", mode 0666 less the umask, as fopen would make it) and
 * renamed over NAME once complete, so a reader sees the old file or the
 * new one, never a torn one.  At the start of a run every such file is
 * replaced the same way by a short "incomplete" version (outfile_mark), so
 * a launcher killed by SIGKILL leaves "did not finish", not the previous
 * run's "exit_status 0".
 *
 * A symbolic link is kept: the file it points to is replaced.  A path
 * that is not a regular file (/dev/stdout, a FIFO) and "-" (stdout) are
 * written in place: they cannot be renamed over, and need not be.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher.h"
#include "ci.h"

static mode_t file_mode(void)
{
	static mode_t mode = (mode_t)-1;

	if (mode == (mode_t)-1) {
		mode_t m = umask(0);

		umask(m);
		mode = 0666 & ~m;
	}
	return mode;
}

int outfile_open(struct outfile *of, const char *path, const char *what)
{
	struct stat st;
	char real[PATH_MAX];
	const char *target = path, *slash;
	int fd;

	*of = (struct outfile){ .path = path, .what = what };
	if (!strcmp(path, "-")) {
		of->f = stdout;
		return 0;
	}
	if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
		of->f = fopen(path, "we");
		if (!of->f)
			goto fail;
		return 0;
	}
	if (!lstat(path, &st) && S_ISLNK(st.st_mode) && realpath(path, real))
		target = real;
	of->final = strdup(target);
	of->tmp = malloc(strlen(target) + 16);
	if (!of->final || !of->tmp) {
		errno = ENOMEM;
		goto fail;
	}
	slash = strrchr(target, '/');
	snprintf(of->tmp, strlen(target) + 16, "%.*s.%s.XXXXXX",
		 slash ? (int)(slash - target + 1) : 0, target,
		 slash ? slash + 1 : target);
	fd = mkostemp(of->tmp, O_CLOEXEC);
	if (fd < 0)
		goto fail;
	if (fchmod(fd, file_mode()) || !(of->f = fdopen(fd, "w"))) {
		int e = errno;

		close(fd);
		unlink(of->tmp);
		errno = e;
		goto fail;
	}
	return 0;
fail:
	fprintf(stderr, "distrun: %s %s: %s\n", what, path, strerror(errno));
	free(of->final);
	free(of->tmp);
	*of = (struct outfile){ 0 };
	return -1;
}

void outfile_abort(struct outfile *of)
{
	if (of->f && of->f != stdout)
		fclose(of->f);
	if (of->tmp)
		unlink(of->tmp);
	free(of->final);
	free(of->tmp);
	*of = (struct outfile){ 0 };
}

int outfile_commit(struct outfile *of)
{
	int bad, e;

	if (!of->f)
		return -1;
	bad = ferror(of->f);
	if (of->f == stdout) {
		bad |= fflush(stdout);
	} else {
		bad |= fflush(of->f) || (of->tmp && fsync(fileno(of->f)));
		bad |= fclose(of->f);
	}
	e = errno;
	of->f = NULL;
	if (!bad && of->tmp && rename(of->tmp, of->final))
		bad = 1, e = errno;
	if (bad)
		fprintf(stderr, "distrun: %s %s: cannot write the file: %s\n",
			of->what, of->path, strerror(e ? e : EIO));
	outfile_abort(of);
	return bad ? -1 : 0;
}

int outfile_write(const char *path, const char *what, const char *data,
		  size_t len)
{
	struct outfile of;

	if (outfile_open(&of, path, what))
		return -1;
	if (fwrite(data, 1, len, of.f) != len) {
		fprintf(stderr, "distrun: %s %s: %s\n", what, path,
			strerror(errno));
		outfile_abort(&of);
		return -1;
	}
	return outfile_commit(&of);
}

static int outfile_mark(const char *path, const char *what, const char *text)
{
	/* stdout (TAP to "-") gets the real thing only. */
	if (!path || !strcmp(path, "-"))
		return 0;
	return outfile_write(path, what, text, strlen(text));
}

/* What each kind of file says until the run ends. */
static const char MARK_REPORT[] =
	"{\n  \"complete\": false,\n  \"exit_status\": null,\n"
	"  \"reason\": \"incomplete\",\n  \"note\": \"distrun has not finished: "
	"it is still running, or it was killed before it could write this "
	"report\"\n}\n";
static const char MARK_JUNIT[] =
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	"<testsuites name=\"distrun\" tests=\"1\" failures=\"0\" errors=\"1\" "
	"skipped=\"0\" time=\"0\">\n"
	"  <testsuite name=\"distrun\" tests=\"1\" failures=\"0\" errors=\"1\" "
	"skipped=\"0\" time=\"0\">\n"
	"    <testcase classname=\"distrun\" name=\"incomplete\" time=\"0\">\n"
	"      <error type=\"incomplete\" message=\"distrun has not finished: "
	"still running, or killed before it wrote the results\"/>\n"
	"    </testcase>\n  </testsuite>\n</testsuites>\n";
static const char MARK_TAP[] =
	"TAP version 13\n1..1\nnot ok 1 - distrun has not finished\n"
	"Bail out! distrun has not finished: still running, or killed before "
	"it wrote the results\n";
static const char MARK_TRACE[] =
	"{\"traceEvents\":[],\"otherData\":{\"complete\":false,\"note\":"
	"\"distrun has not finished: still running, or killed\"}}\n";
static const char MARK_HTML[] =
	"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
	"<title>distrun: incomplete</title></head><body>\n"
	"<h1 id=\"verdict\">incomplete: distrun has not finished</h1>\n"
	"<p>It is still running, or it was killed before it could write this "
	"page.</p>\n</body></html>\n";

int outfiles_mark(const char *report, const char *junit, const char *tap,
		  const char *trace, const char *html)
{
	int rc = 0;

	rc |= outfile_mark(report, "--report", MARK_REPORT);
	rc |= outfile_mark(junit, "--junit", MARK_JUNIT);
	rc |= outfile_mark(tap, "--tap", MARK_TAP);
	rc |= outfile_mark(trace, "--trace", MARK_TRACE);
	rc |= outfile_mark(html, "--html", MARK_HTML);
	return rc;
}

/* Reads at most max bytes of path into a NUL-terminated malloc'd buffer
 * (ci.h). */
char *ci_read_file(const char *path, size_t max, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st))
		goto fail;
	if (len)
		*len = st.st_size;
	buf = malloc((size_t)st.st_size < max ? (size_t)st.st_size + 1 :
		     max + 1);
	if (!buf)
		goto fail;
	while (n < max && n < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + n, ((size_t)st.st_size < max ?
					       (size_t)st.st_size : max) - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += r;
	}
	buf[n] = 0;
	close(fd);
	return buf;
fail:
	free(buf);
	close(fd);
	return NULL;
}
