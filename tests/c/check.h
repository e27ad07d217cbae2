/*
 * check.h - how the test programs of tests/c/ fail: DIE prints "rank R: "
 * and the message on stderr and exits 1; TRY(call) dies naming the call,
 * its error and dr_last_error().  The including file defines the int
 * `rank` they print.
 */
#ifndef DR_TEST_CHECK_H
#define DR_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <distrun.h>

#define DIE(...)                                                             \
	do {                                                                 \
		fprintf(stderr, "rank %d: ", rank);                          \
		fprintf(stderr, __VA_ARGS__);                                \
		fputc('\n', stderr);                                         \
		exit(1);                                                     \
	} while (0)

#define TRY(call)                                                            \
	do {                                                                 \
		dr_err e_ = (call);                                          \
		if (e_)                                                      \
			DIE("%s failed: %s: %s", #call, dr_err_name(e_),     \
			    dr_last_error());                                \
	} while (0)

#endif
