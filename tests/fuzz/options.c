/*
 * options.c - fuzzes distrun's whole command line (opts_parse): every
 * option, its argument parser, abbreviations of long options, missing
 * arguments, `--`, the program and its own arguments.
 *
 * Input: the arguments after "distrun", separated by NUL bytes (at most
 * 64).  Properties: a command line that is accepted has 1 to MAX_RANKS
 * ranks, a port in 0..65535, a program (argv[argc] is NULL), a positive
 * --timeout if any, a --grace that is not negative, a --stdin that is a
 * rank, all or none, and a shown-ranks flag for every rank; one that is
 * refused says so with EXIT_USAGE.
 */
#include <math.h>

#include "launcher.h"
#include "fuzz.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *argv[MAX_ARGS + 2];
	char *text = fuzz_cstr(data, size);
	struct opts o;
	int argc = 1, rc;

	if (!text)
		return 0;
	argv[0] = "distrun";
	for (char *p = text; argc <= MAX_ARGS && p <= text + size;
	     p += strlen(p) + 1)
		argv[argc++] = p;
	argv[argc] = NULL;
	optind = 0; /* glibc: start a fresh scan */
	rc = opts_parse(&o, argc, argv);
	FUZZ_CHECK(rc == 0 || rc == EXIT_USAGE || rc == -1);
	if (rc == 0) {
		FUZZ_CHECK(o.nranks >= 1 && o.nranks <= MAX_RANKS);
		FUZZ_CHECK(o.master_port >= 0 && o.master_port <= 65535);
		FUZZ_CHECK(o.master_addr && *o.master_addr);
		FUZZ_CHECK(o.argc >= 1 && o.argv[0] && !o.argv[o.argc]);
		FUZZ_CHECK(o.timeout >= 0 && isfinite(o.timeout));
		FUZZ_CHECK(o.grace >= 0 && isfinite(o.grace));
		FUZZ_CHECK(o.stdin_rank >= STDIN_ALL);  /* a rank, all, none */
		FUZZ_CHECK(o.show);
		for (int r = 0; r < o.nranks; r++)
			FUZZ_CHECK(o.show[r] <= 1);
	}
	opts_release(&o);
	free(text);
	return 0;
}
