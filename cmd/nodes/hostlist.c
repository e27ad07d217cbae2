/*
 * hostlist.c - Slurm's compact host lists and task counts, expanded.
 *
 * Inside an allocation Slurm names the nodes in SLURM_JOB_NODELIST with
 * its hostlist syntax and the tasks of each in SLURM_TASKS_PER_NODE:
 *
 *   node[01-04,07]           node01 node02 node03 node04 node07
 *   rack[1-2]-n[1-2]         rack1-n1 rack1-n2 rack2-n1 rack2-n2
 *   a1,b[2-3],c              a1 b2 b3 c     (',' or ' ' between items)
 *   2(x3),1                  2 2 2 1
 *
 * A range keeps the width of its lower bound ("01-04": two digits, as
 * Slurm prints them).  Several bracket groups in one name expand as their
 * product, leftmost slowest, which is the order Slurm gives.  Everything
 * here is bounded (HOSTLIST_MAX names, names of HOSTLIST_NAME_MAX bytes),
 * since the variables come from outside the process; bad input is an
 * error naming the offending piece, never a guess.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"

struct names {
	char **v;
	int n, cap;
};

static int fail(char *err, size_t errsz, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (err && errsz) {
		va_start(ap, fmt);
		vsnprintf(err, errsz, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static int names_push(struct names *ns, const char *s, size_t len)
{
	char *copy;

	if (ns->n >= HOSTLIST_MAX)
		return -1;
	if (ns->n == ns->cap) {
		int cap = ns->cap ? ns->cap * 2 : 16;
		char **v = realloc(ns->v, (size_t)cap * sizeof(*v));

		if (!v)
			return -1;
		ns->v = v;
		ns->cap = cap;
	}
	copy = strndup(s, len);
	if (!copy)
		return -1;
	ns->v[ns->n++] = copy;
	return 0;
}

void hostlist_free(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* One bracket group's ranges, "01-04,07", as (lo, hi, width) triples. */
struct range {
	unsigned long lo, hi;
	int width;
};

static int parse_ranges(const char *s, size_t len, struct range *r, int max,
			char *err, size_t errsz)
{
	int n = 0;
	size_t i = 0;

	while (i < len) {
		size_t start = i;
		unsigned long lo, hi;
		int width;
		char *end;

		if (!isdigit((unsigned char)s[i]))
			return fail(err, errsz, "expected a number in '[%.*s]'",
				    (int)len, s);
		errno = 0;
		lo = strtoul(s + i, &end, 10);
		width = (int)(end - (s + i));
		if (errno || width > 18)
			return fail(err, errsz, "number too long in '[%.*s]'",
				    (int)len, s);
		i = (size_t)(end - s);
		hi = lo;
		if (i < len && s[i] == '-') {
			i++;
			if (i >= len || !isdigit((unsigned char)s[i]))
				return fail(err, errsz, "open range in '[%.*s]'",
					    (int)len, s);
			errno = 0;
			hi = strtoul(s + i, &end, 10);
			if (errno || end - (s + i) > 18)
				return fail(err, errsz,
					    "number too long in '[%.*s]'",
					    (int)len, s);
			i = (size_t)(end - s);
			if (hi < lo)
				return fail(err, errsz,
					    "range %.*s is reversed",
					    (int)(i - start), s + start);
		}
		if (hi - lo >= HOSTLIST_MAX)
			return fail(err, errsz, "range %.*s has more than %d "
				    "names", (int)(i - start), s + start,
				    HOSTLIST_MAX);
		if (n == max)
			return fail(err, errsz, "too many ranges in '[%.*s]'",
				    (int)len, s);
		r[n++] = (struct range){ lo, hi, width };
		if (i < len) {
			if (s[i] != ',')
				return fail(err, errsz, "unexpected '%c' in "
					    "'[%.*s]'", s[i], (int)len, s);
			i++;
			if (i == len)
				return fail(err, errsz, "trailing ',' in '[%.*s]'",
					    (int)len, s);
		}
	}
	if (n == 0)
		return fail(err, errsz, "empty brackets");
	return n;
}

#define MAX_RANGES 256

/* Expands one name that may hold bracket groups, e.g. "rack[1-2]-n[1-2]",
 * by recursion over its groups: prefix is what has been built so far. */
static int expand_one(const char *s, size_t len, char *prefix, size_t plen,
		      struct names *ns, char *err, size_t errsz)
{
	const char *open = memchr(s, '[', len);
	const char *close;
	struct range r[MAX_RANGES];
	int nr;

	if (!open) {
		if (plen + len >= HOSTLIST_NAME_MAX)
			return fail(err, errsz, "host name longer than %d bytes",
				    HOSTLIST_NAME_MAX - 1);
		memcpy(prefix + plen, s, len);
		if (plen + len == 0)
			return fail(err, errsz, "empty host name");
		if (names_push(ns, prefix, plen + len))
			return fail(err, errsz, "more than %d hosts, or out of "
				    "memory", HOSTLIST_MAX);
		return 0;
	}
	close = memchr(open, ']', len - (size_t)(open - s));
	if (!close)
		return fail(err, errsz, "'[' without ']' in '%.*s'", (int)len, s);
	if (memchr(open + 1, '[', (size_t)(close - open - 1)))
		return fail(err, errsz, "nested '[' in '%.*s'", (int)len, s);
	if (plen + (size_t)(open - s) >= HOSTLIST_NAME_MAX)
		return fail(err, errsz, "host name longer than %d bytes",
			    HOSTLIST_NAME_MAX - 1);
	memcpy(prefix + plen, s, (size_t)(open - s));
	plen += (size_t)(open - s);
	nr = parse_ranges(open + 1, (size_t)(close - open - 1), r, MAX_RANGES,
			  err, errsz);
	if (nr < 0)
		return -1;
	for (int k = 0; k < nr; k++) {
		for (unsigned long v = r[k].lo;; v++) {
			char num[32];
			int w = snprintf(num, sizeof(num), "%0*lu", r[k].width, v);

			if (plen + (size_t)w >= HOSTLIST_NAME_MAX)
				return fail(err, errsz, "host name longer than "
					    "%d bytes", HOSTLIST_NAME_MAX - 1);
			memcpy(prefix + plen, num, (size_t)w);
			if (expand_one(close + 1, len - (size_t)(close + 1 - s),
				       prefix, plen + (size_t)w, ns, err, errsz))
				return -1;
			if (v == r[k].hi)
				break;
		}
	}
	return 0;
}

int hostlist_expand(const char *s, char ***out, char *err, size_t errsz)
{
	struct names ns = { 0 };
	char prefix[HOSTLIST_NAME_MAX];
	size_t i = 0, len;

	*out = NULL;
	if (!s || !*s)
		return fail(err, errsz, "empty host list");
	len = strlen(s);
	while (i < len) {
		/* A top-level item ends at a ',' outside brackets. */
		size_t start = i;
		int depth = 0;

		for (; i < len; i++) {
			if (s[i] == '[')
				depth++;
			else if (s[i] == ']')
				depth--;
			else if ((s[i] == ',' || s[i] == ' ') && depth == 0)
				break;
			else if (!isgraph((unsigned char)s[i]))
				goto bad_char;
			if (depth < 0 || depth > 1)
				goto bad_brackets;
		}
		if (depth != 0)
			goto bad_brackets;
		if (i == start) {
			fail(err, errsz, "empty item in host list '%s'", s);
			goto fail;
		}
		if (expand_one(s + start, i - start, prefix, 0, &ns, err, errsz))
			goto fail;
		if (i < len && ++i == len) {
			fail(err, errsz, "trailing ',' in host list '%s'", s);
			goto fail;
		}
	}
	*out = ns.v;
	return ns.n;
bad_char:
	fail(err, errsz, "bad character in host list '%s'", s);
	goto fail;
bad_brackets:
	fail(err, errsz, "unbalanced brackets in host list '%s'", s);
fail:
	hostlist_free(ns.v, ns.n);
	return -1;
}

int tasks_per_node_expand(const char *s, int *out, int max, char *err,
			  size_t errsz)
{
	int n = 0;
	const char *p = s;

	if (!s || !*s)
		return fail(err, errsz, "empty task count list");
	while (*p) {
		unsigned long count, rep = 1;
		char *end;

		if (!isdigit((unsigned char)*p))
			return fail(err, errsz, "expected a number at '%s' in "
				    "'%s'", p, s);
		errno = 0;
		count = strtoul(p, &end, 10);
		if (errno || count == 0 || count > INT_MAX)
			return fail(err, errsz, "bad task count at '%s' in '%s'",
				    p, s);
		p = end;
		if (*p == '(') {
			if (p[1] != 'x' || !isdigit((unsigned char)p[2]))
				return fail(err, errsz, "expected '(xN)' at '%s' "
					    "in '%s'", p, s);
			errno = 0;
			rep = strtoul(p + 2, &end, 10);
			if (errno || rep == 0 || *end != ')')
				return fail(err, errsz, "bad repeat at '%s' in "
					    "'%s'", p, s);
			p = end + 1;
		}
		if (rep > (unsigned long)(max - n))
			return fail(err, errsz, "more than %d nodes in '%s'",
				    max, s);
		for (unsigned long k = 0; k < rep; k++)
			out[n++] = (int)count;
		if (*p == ',') {
			p++;
			if (!*p)
				return fail(err, errsz, "trailing ',' in '%s'", s);
		} else if (*p) {
			return fail(err, errsz, "unexpected '%c' in '%s'", *p, s);
		}
	}
	return n;
}
