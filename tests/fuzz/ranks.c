/*
 * ranks.c - fuzzes the launcher's --ranks list ("0,2-3", "none") through
 * opts_parse, as `distrun -n N --ranks LIST prog` would.
 *
 * Input: two bytes giving N (1 to 4096), then the list.  Properties: an
 * accepted list marks only ranks below N, each flag 0 or 1, and printing
 * the flags as a list (rank_list_str, what the summary shows) and parsing
 * that again gives the same flags.
 */
#include "launcher.h"
#include "fuzz.h"

static int parse(int n, const char *list, struct opts *o)
{
	char nbuf[16];
	char *argv[] = { "distrun", "-n", nbuf, "--ranks", (char *)list,
			 "prog", NULL };

	snprintf(nbuf, sizeof(nbuf), "%d", n);
	optind = 0; /* glibc: start a fresh scan */
	return opts_parse(o, 6, argv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct opts o, again;
	char *list, *printed;
	int n;

	if (size < 2)
		return 0;
	n = 1 + ((data[0] | data[1] << 8) % MAX_RANKS);
	list = fuzz_cstr(data + 2, size - 2);
	if (!list)
		return 0;
	if (parse(n, list, &o) == 0) {
		FUZZ_CHECK(o.nranks == n && o.show);
		for (int r = 0; r < n; r++)
			FUZZ_CHECK(o.show[r] == 0 || o.show[r] == 1);
		/* Long enough for any list of n ranks: no "..." cut. */
		printed = malloc((size_t)n * 12 + 32);
		if (printed) {
			rank_list_str(o.show, n, printed, (size_t)n * 12 + 32);
			FUZZ_CHECK(parse(n, printed, &again) == 0);
			FUZZ_CHECK(!memcmp(o.show, again.show, (size_t)n));
			opts_release(&again);
			free(printed);
		}
	}
	opts_release(&o);
	free(list);
	return 0;
}
