/*
 * hostlist.c - fuzzes Slurm's host lists and task counts as the launcher
 * expands them (cmd/nodes/hostlist.c): SLURM_JOB_NODELIST ("node[01-04,07],a1")
 * and SLURM_TASKS_PER_NODE ("2(x3),1"), which come from the environment.
 *
 * Input: a byte whose low 2 bits say what the rest is:
 *   0  a host list, as is;
 *   1  the recipe of a well-formed host list: the harness writes the list
 *      (items of a prefix and up to two bracket groups of ranges, zero
 *      padded or not) and the names it must expand to, in Slurm's order;
 *   2  a task count list, as is (the next byte sets the node limit);
 *   3  the recipe of a well-formed task count list and its expansion.
 * Properties: a refused list leaves a message and no names; an accepted
 * one has 1..HOSTLIST_MAX names, each non-empty, printable, shorter than
 * HOSTLIST_NAME_MAX and free of the list's own syntax ("[],"), and the
 * names joined with ',' expand to themselves; a list without brackets is
 * its items.  Task counts: 1..limit nodes, each count positive, nothing
 * written past the count, and the counts written back as "c(xN)" runs
 * expand to the same.  A well-formed recipe expands to exactly its names.
 */
#include <ctype.h>

#include "hostlist.h"
#include "fuzz.h"

/* The round trip of a list: bounded, as the joined list grows with it. */
#define ROUNDTRIP_MAX 4096

struct src {
	const uint8_t *p;
	size_t n;
};

static unsigned take(struct src *s)
{
	if (!s->n)
		return 0;
	s->n--;
	return *s->p++;
}

static void check_names(char **names, int n)
{
	FUZZ_CHECK(n >= 1 && n <= HOSTLIST_MAX && names);
	for (int i = 0; i < n; i++) {
		size_t len = strlen(names[i]);

		FUZZ_CHECK(len > 0 && len < HOSTLIST_NAME_MAX);
		for (size_t k = 0; k < len; k++) {
			unsigned char c = (unsigned char)names[i][k];

			FUZZ_CHECK(isgraph(c) && c != '[' && c != ']' &&
				   c != ',');
		}
	}
}

/* Joined with ',', the names are a list of plain items: themselves. */
static void check_roundtrip(char **names, int n)
{
	size_t len = 1;
	char *joined, err[256], **again;
	int m;

	if (n > ROUNDTRIP_MAX)
		return;
	for (int i = 0; i < n; i++)
		len += strlen(names[i]) + 1;
	joined = malloc(len);
	FUZZ_CHECK(joined);
	joined[0] = 0;
	for (int i = 0; i < n; i++) {
		if (i)
			strcat(joined, ",");
		strcat(joined, names[i]);
	}
	m = hostlist_expand(joined, &again, err, sizeof(err));
	FUZZ_CHECK(m == n);
	for (int i = 0; i < n; i++)
		FUZZ_CHECK(!strcmp(again[i], names[i]));
	hostlist_free(again, m);
	free(joined);
}

/* Without brackets a list is its items, split at ',' and ' '. */
static void check_plain(const char *s, char **names, int n)
{
	int i = 0;

	while (*s) {
		size_t len = strcspn(s, ", ");

		FUZZ_CHECK(i < n && strlen(names[i]) == len &&
			   !memcmp(names[i], s, len));
		i++;
		s += len;
		if (*s)
			s++;
	}
	FUZZ_CHECK(i == n);
}

static void raw_hostlist(const char *s)
{
	char err[256] = "", **names = (char **)1;
	int n = hostlist_expand(s, &names, err, sizeof(err));

	if (n < 0) {
		FUZZ_CHECK(n == -1 && !names && err[0]);
		return;
	}
	check_names(names, n);
	if (!strpbrk(s, "[]"))
		check_plain(s, names, n);
	check_roundtrip(names, n);
	hostlist_free(names, n);
}

/* A recipe's list and names: items of a prefix, up to two groups of up to
 * three ranges (each up to 8 numbers, lower bound padded to a width),
 * and a suffix after each group: at most 4 * 24 * 24 names. */
struct expect {
	char list[1024];
	char (*names)[HOSTLIST_NAME_MAX];
	int n;
};

static void word(struct src *s, char *out, size_t max, int first)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyz0123456789-._";
	size_t len = take(s) % (max + 1), i;

	for (i = 0; i < len; i++) {
		unsigned v = take(s);

		/* A name that starts with a digit is fine; an empty prefix
		 * too, as long as the item has a group. */
		out[i] = first && i == 0 ? alpha[v % 26] : alpha[v % 39];
	}
	out[i] = 0;
}

/* The names of one item, by expanding the group at level g. */
static void product(struct expect *e, const char *prefix,
		    const unsigned long (*lo)[3], const unsigned long (*hi)[3],
		    const int (*width)[3], const int *nr, char sfx[][8],
		    int g, int groups)
{
	if (g == groups) {
		FUZZ_CHECK(strlen(prefix) < HOSTLIST_NAME_MAX);
		strcpy(e->names[e->n++], prefix);
		return;
	}
	for (int r = 0; r < nr[g]; r++)
		for (unsigned long v = lo[g][r]; v <= hi[g][r]; v++) {
			char next[HOSTLIST_NAME_MAX];

			snprintf(next, sizeof(next), "%s%0*lu%s", prefix,
				 width[g][r], v, sfx[g]);
			product(e, next, lo, hi, width, nr, sfx, g + 1, groups);
		}
}

static void recipe_hostlist(struct src *s)
{
	struct expect e = { .n = 0 };
	int items = 1 + (int)(take(s) % 4), n;
	char err[256], **names;

	e.names = malloc(4 * 24 * 24 * sizeof(*e.names));
	FUZZ_CHECK(e.names);
	for (int it = 0; it < items; it++) {
		char prefix[16], sfx[2][8];
		unsigned long lo[2][3], hi[2][3];
		int width[2][3], nr[2], groups = (int)(take(s) % 3);
		size_t at = strlen(e.list);

		word(s, prefix, 12, 1);
		if (!groups && !*prefix)
			strcpy(prefix, "n");
		at += (size_t)sprintf(e.list + at, "%s%s", it ? "," : "",
				      prefix);
		for (int g = 0; g < groups; g++) {
			nr[g] = 1 + (int)(take(s) % 3);
			at += (size_t)sprintf(e.list + at, "[");
			for (int r = 0; r < nr[g]; r++) {
				int w = 1 + (int)(take(s) % 4);
				unsigned long span = take(s) % 8;

				lo[g][r] = take(s) * 7u % 1000;
				hi[g][r] = lo[g][r] + span;
				at += (size_t)sprintf(e.list + at, "%s%0*lu",
						      r ? "," : "", w, lo[g][r]);
				/* The parser's width: the lower bound's
				 * digits as written. */
				width[g][r] = snprintf(NULL, 0, "%0*lu", w,
						       lo[g][r]);
				if (span || take(s) & 1)
					at += (size_t)sprintf(e.list + at,
							      "-%lu", hi[g][r]);
			}
			word(s, sfx[g], 6, 0);
			at += (size_t)sprintf(e.list + at, "]%s", sfx[g]);
		}
		product(&e, prefix, lo, hi, width, nr, sfx, 0, groups);
	}
	n = hostlist_expand(e.list, &names, err, sizeof(err));
	if (n != e.n)
		fprintf(stderr, "'%s': %d names, want %d (%s)\n", e.list, n,
			e.n, n < 0 ? err : "");
	FUZZ_CHECK(n == e.n);
	for (int i = 0; i < n; i++)
		FUZZ_CHECK(!strcmp(names[i], e.names[i]));
	check_names(names, n);
	hostlist_free(names, n);
	free(e.names);
}

#define TASKS_MAX 512
#define CANARY 0x5a5a5a5a

/* Counts written back as runs, "c" or "c(xN)", expand to themselves. */
static void check_tasks_roundtrip(const int *out, int n, int max)
{
	char *s = malloc((size_t)n * 24 + 1), err[256];
	int *again = malloc((size_t)max * sizeof(*again)), m;
	size_t at = 0;

	FUZZ_CHECK(s && again);
	s[0] = 0;
	for (int i = 0; i < n;) {
		int k = i;

		while (k < n && out[k] == out[i])
			k++;
		at += (size_t)sprintf(s + at, k - i > 1 ? "%s%d(x%d)" : "%s%d",
				      i ? "," : "", out[i], k - i);
		i = k;
	}
	m = tasks_per_node_expand(s, again, max, err, sizeof(err));
	FUZZ_CHECK(m == n && !memcmp(again, out, (size_t)n * sizeof(*out)));
	free(again);
	free(s);
}

static void raw_tasks(const char *s, int max)
{
	int *out = malloc((TASKS_MAX + 1) * sizeof(*out)), n;
	char err[256] = "";

	FUZZ_CHECK(out);
	for (int i = 0; i <= TASKS_MAX; i++)
		out[i] = CANARY;
	n = tasks_per_node_expand(s, out, max, err, sizeof(err));
	if (n < 0) {
		FUZZ_CHECK(n == -1 && err[0]);
	} else {
		FUZZ_CHECK(n >= 1 && n <= max);
		for (int i = 0; i < n; i++)
			FUZZ_CHECK(out[i] >= 1);
		check_tasks_roundtrip(out, n, max);
	}
	for (int i = n < 0 ? max : n; i <= TASKS_MAX; i++)
		FUZZ_CHECK(out[i] == CANARY);
	free(out);
}

static void recipe_tasks(struct src *s)
{
	int want[TASKS_MAX], got[TASKS_MAX], n = 0, runs = 1 + (int)(take(s) % 8);
	char list[512], err[256];
	size_t at = 0;

	for (int r = 0; r < runs; r++) {
		int count = 1 + (int)(take(s) | take(s) << 8);
		int rep = (int)(take(s) % 40);

		/* No repeat ("4"), or "(x1)" and up, as Slurm may write. */
		at += (size_t)(rep ? sprintf(list + at, "%s%d(x%d)",
					     r ? "," : "", count, rep)
				   : sprintf(list + at, "%s%d", r ? "," : "",
					     count));
		for (int k = 0; k < (rep ? rep : 1); k++)
			want[n++] = count;
	}
	FUZZ_CHECK(tasks_per_node_expand(list, got, TASKS_MAX, err,
					 sizeof(err)) == n);
	FUZZ_CHECK(!memcmp(got, want, (size_t)n * sizeof(*got)));
	/* One node fewer than the list holds: refused, with a message. */
	err[0] = 0;
	FUZZ_CHECK(tasks_per_node_expand(list, got, n - 1, err,
					 sizeof(err)) == -1 && err[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct src s = { data + 1, size ? size - 1 : 0 };
	char *str;

	if (!size)
		return 0;
	switch (data[0] & 3) {
	case 0:
		if ((str = fuzz_cstr(data + 1, size - 1))) {
			raw_hostlist(str);
			free(str);
		}
		break;
	case 1:
		recipe_hostlist(&s);
		break;
	case 2:
		if (size >= 2 && (str = fuzz_cstr(data + 2, size - 2))) {
			raw_tasks(str, 1 + data[1] % TASKS_MAX);
			free(str);
		}
		break;
	case 3:
		recipe_tasks(&s);
		break;
	}
	return 0;
}
