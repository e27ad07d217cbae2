/*
 * check.h - how the test programs of tests/c/ fail: DIE prints "rank R: "
 * and the message on stderr and exits 1; TRY(call) dies naming the call,
 * its error and dr_last_error().  The including file defines the int
 * `rank` they print.
 *
 * The collectives' programs (coll_more.c, coll_limits.c) report on stdout,
 * where the tests read every rank's verdict, and count what they checked
 * ("rank R: ok, N checks"): FAIL names the file and line, CHECK_OK(call)
 * and CHECK_ERR(want, call) count a check; they need `long checks` too.
 */
#ifndef DR_TEST_CHECK_H
#define DR_TEST_CHECK_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include <distrun.h>

/*
 * One write for the whole line: the launcher may stop this rank between
 * two writes when another rank failed first, and a line cut after its
 * "rank R: " would say nothing.
 */
#define DIE(...)                                                             \
	do {                                                                 \
		char die_[2048];                                             \
		snprintf(die_, sizeof die_, __VA_ARGS__);                    \
		fprintf(stderr, "rank %d: %s\n", rank, die_);                \
		exit(1);                                                     \
	} while (0)

#define TRY(call)                                                            \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_)                                                      \
			DIE("%s failed: %s: %s", #call, dr_err_name(e_),     \
			    dr_last_error());                                \
	} while (0)

#define FAIL(...)                                                            \
	do {                                                                 \
		printf("rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);   \
		printf(__VA_ARGS__);                                         \
		printf("\n");                                                \
		fflush(stdout);                                              \
		exit(1);                                                     \
	} while (0)

#define CHECK_OK(call)                                                       \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_ != DR_OK)                                             \
			FAIL("%s: %s: %s", #call, dr_err_name(e_),           \
			     dr_last_error());                               \
		checks++;                                                    \
	} while (0)

#define CHECK_ERR(want, call)                                                \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_ != (want))                                            \
			FAIL("%s: got %s, want %s (%s)", #call,              \
			     dr_err_name(e_), dr_err_name(want),             \
			     dr_last_error());                               \
		checks++;                                                    \
	} while (0)

/* Entries of a directory but . and .. (/proc/self/fd, /proc/self/task);
 * 0 if it cannot be read. */
static inline int check_dir_entries(const char *path)
{
	int n = 0;
	DIR *d = opendir(path);

	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* malloc that fails the test instead of returning NULL (FAIL's file) */
#define CHECK_ALLOC(n) check_alloc_(n, rank)
static inline void *check_alloc_(size_t n, int rank)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		FAIL("out of memory");
	return p;
}

#endif
