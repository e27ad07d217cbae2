/*
 * testlist.c - the test lists of `distrun test`: a file a person writes by
 * hand, one test a line.  The grammar is in man/distrun.1 (TEST LISTS):
 *
 *     # comment
 *     n=1,2,4 timeout=30s env=OMP_NUM_THREADS=2  ./allreduce --size 1M
 *     name=crash n=2 exit=SIGSEGV                 ./crash
 *     n=2 stdout[0]='^sum = 3$' xfail="issue 12" ./sum
 *     skip="needs a GPU"                          ./gpu_test
 *
 * A line is words split as a shell splits them (single quotes, double
 * quotes with \" and \\, a backslash outside quotes, # starting a comment,
 * a backslash at the end of a line joins the next).  The KEY=VALUE words
 * come first; the first word that is not one (or the word after `--`)
 * starts the command, so the program's own arguments may hold anything.
 * Whether a word is a key is decided on its unquoted leading characters,
 * so '--x=1' or "a=b" as a program name is never taken for a key.
 *
 * Every file is parsed and checked (keys, sizes, durations, regexes,
 * expected-output files, the program) before any test runs; each error is
 * printed as FILE:LINE: and all of them are printed, not only the first.
 */
#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher.h"
#include "ci.h"

int parse_exit_expect(const char *s)
{
	char *end;
	long v;
	int sig;

	if (isdigit((unsigned char)*s)) {
		errno = 0;
		v = strtol(s, &end, 10);
		return errno || *end || v > 255 ? -1 : (int)v;
	}
	if (!strncasecmp(s, "SIG", 3))
		s += 3;
	for (sig = 1; sig < NSIG; sig++) {
		const char *abbrev = sigabbrev_np(sig);

		if (abbrev && !strcasecmp(abbrev, s))
			return 128 + sig;
	}
	return -1;
}

/* "0", "1-3", "0,2": a rank list as in --ranks. */
static bool ranks_valid(const char *s)
{
	int *v;
	int n;

	/* parse_sizes refuses rank 0: shift by one to reuse it. */
	char buf[256];
	size_t len = 0;
	const char *p = s;

	while (*p && len + 8 < sizeof(buf)) {
		char *end;
		long a;

		if (!isdigit((unsigned char)*p))
			return false;
		a = strtol(p, &end, 10);
		len += snprintf(buf + len, sizeof(buf) - len, "%ld", a + 1);
		if (*end == '-' || *end == ',')
			buf[len++] = *end++;
		else if (*end)
			return false;
		buf[len] = 0;
		p = end;
	}
	if (*p || parse_sizes(buf, &v, &n))
		return false;
	free(v);
	return true;
}

/* ------------------------------------------------------------ words */

struct word {
	char *s;                   /* unquoted text */
	int key_len;               /* length of an unquoted key before '=', 0 */
};

struct lexer {
	FILE *f;
	const char *path;
	int line;                  /* of the logical line's first physical one */
	int next_line;
	int errors;
};

static void lex_error(struct lexer *lx, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void lex_error(struct lexer *lx, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "distrun: %s:%d: ", lx->path, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	lx->errors++;
}

static int buf_put(char **b, size_t *len, size_t *cap, int c)
{
	if (*len + 1 >= *cap) {
		char *nb = realloc(*b, *cap = *cap ? 2 * *cap : 64);

		if (!nb)
			return -1;
		*b = nb;
	}
	(*b)[(*len)++] = (char)c;
	(*b)[*len] = 0;
	return 0;
}

static bool key_char(int c)
{
	return islower(c) || c == '-' || c == '[' || c == ']' || c == ',' ||
	       isdigit(c);
}

/* Reads the next logical line's words into *w (NULL-terminated array).
 * Returns the number of words, or -1 at EOF or on a fatal error. */
static int lex_line(struct lexer *lx, struct word **out)
{
	struct word *w = NULL;
	int nw = 0, cap = 0, c;
	char *b = NULL;
	size_t len = 0, bcap = 0;
	bool in_word = false, plain = true, got_any = false;
	int quote = 0;

	lx->line = lx->next_line;
	for (;;) {
		c = fgetc(lx->f);
		if (c == EOF && !got_any && !in_word && !nw) {
			free(w);
			*out = NULL;
			return -1;
		}
		got_any = true;
		if (c == '\n')
			lx->next_line++;
		if (quote == '\'') {
			if (c == EOF) {
				lex_error(lx, lx->line, "missing closing '");
				break;
			}
			if (c == '\'')
				quote = 0;
			else if (buf_put(&b, &len, &bcap, c))
				goto oom;
			continue;
		}
		if (quote == '"') {
			if (c == EOF) {
				lex_error(lx, lx->line, "missing closing \"");
				break;
			}
			if (c == '"') {
				quote = 0;
				continue;
			}
			if (c == '\\') {
				int d = fgetc(lx->f);

				if (d == '\n') {
					lx->next_line++;
					continue;
				}
				if (d != '"' && d != '\\' && d != EOF &&
				    buf_put(&b, &len, &bcap, '\\'))
					goto oom;
				c = d;
				if (c == EOF)
					continue;
			}
			if (buf_put(&b, &len, &bcap, c))
				goto oom;
			continue;
		}
		if (c == EOF || c == '\n' || c == ' ' || c == '\t' ||
		    c == '\r' || (c == '#' && !in_word)) {
			if (in_word) {
				struct word *nw2;
				char *eq;

				if (nw + 2 > cap) {
					nw2 = realloc(w, (cap = cap ? 2 * cap : 8)
						      * sizeof(*w));
					if (!nw2)
						goto oom;
					w = nw2;
				}
				w[nw].s = b ? b : strdup("");
				if (!w[nw].s)
					goto oom;
				eq = strchr(w[nw].s, '=');
				w[nw].key_len = plain && eq && eq > w[nw].s &&
						islower((unsigned char)w[nw].s[0]) ?
						(int)(eq - w[nw].s) : 0;
				nw++;
				b = NULL;
				len = bcap = 0;
				in_word = false;
				plain = true;
			}
			if (c == '#') {
				while ((c = fgetc(lx->f)) != EOF && c != '\n')
					;
				if (c == '\n')
					lx->next_line++;
			}
			if (c == EOF || c == '\n')
				break;
			continue;
		}
		if (c == '\\') {
			int d = fgetc(lx->f);

			if (d == '\n') {
				/* Continuation: the line (and a word) goes on. */
				lx->next_line++;
				continue;
			}
			if (d != EOF)
				ungetc(d, lx->f);
		}
		if (!in_word) {
			in_word = true;
			if (buf_put(&b, &len, &bcap, 0) == 0)
				len = 0;
			else
				goto oom;
		}
		if (c == '\'' || c == '"') {
			/* A quote before the '=' makes the word not a key. */
			if (!strchr(b, '='))
				plain = false;
			quote = c;
			continue;
		}
		if (c == '\\') {
			int d = fgetc(lx->f);

			if (d == EOF)
				continue;
			if (!strchr(b, '='))
				plain = false;
			c = d;
		} else if (!strchr(b, '=') && c != '=' && !key_char(c)) {
			plain = false;
		}
		if (buf_put(&b, &len, &bcap, c))
			goto oom;
	}
	free(b);
	if (!w) {
		w = calloc(1, sizeof(*w));
		if (!w)
			goto oom;
	}
	w[nw].s = NULL;
	*out = w;
	return nw;
oom:
	perror("distrun");
	free(b);
	for (int i = 0; i < nw; i++)
		free(w[i].s);
	free(w);
	*out = NULL;
	return -1;
}

/* ------------------------------------------------------------ programs */

const char *testlist_check_program(const char *prog, const char *dir)
{
	static char msg[256];
	char path[PATH_MAX];
	struct stat st;

	if (!*prog)
		return "the program is empty";
	if (!strchr(prog, '/')) {
		const char *p = getenv("PATH");
		char *copy, *save = NULL;

		if (!p || !*p)
			p = "/usr/local/bin:/usr/bin:/bin";
		copy = strdup(p);
		if (!copy)
			return "out of memory";
		for (char *d = strtok_r(copy, ":", &save); d;
		     d = strtok_r(NULL, ":", &save)) {
			snprintf(path, sizeof(path), "%s/%s", *d ? d : ".",
				 prog);
			if (!stat(path, &st) && S_ISREG(st.st_mode) &&
			    !access(path, X_OK)) {
				free(copy);
				return NULL;
			}
		}
		free(copy);
		snprintf(msg, sizeof(msg), "program '%s' not found in PATH",
			 prog);
		return msg;
	}
	if (prog[0] == '/' || !dir)
		snprintf(path, sizeof(path), "%s", prog);
	else
		snprintf(path, sizeof(path), "%s/%s", dir, prog);
	if (stat(path, &st)) {
		snprintf(msg, sizeof(msg), "program '%s' not found", prog);
		return msg;
	}
	if (!S_ISREG(st.st_mode) || access(path, X_OK)) {
		snprintf(msg, sizeof(msg), "program '%s' is not executable",
			 prog);
		return msg;
	}
	return NULL;
}

/* As on the command line (spawn.c): a PROGRAM ending in .py runs with
 * Python unless --no-python, so it need only be readable there. */
static const char *check_test_program(const struct ci_test *t,
				      const char *dir)
{
	static char msg[256];
	const char *prog = t->argv[0];
	size_t len = strlen(prog);
	char path[PATH_MAX];
	bool no_python = false;

	for (int i = 0; i < t->nopt; i++)
		no_python |= !strcmp(t->opt[i], "--no-python") ||
			     !strcmp(t->opt[i], "--no_python");
	if (no_python || len < 4 || strcmp(prog + len - 3, ".py") ||
	    !strchr(prog, '/'))
		return testlist_check_program(prog, dir);
	if (prog[0] == '/' || !dir)
		snprintf(path, sizeof(path), "%s", prog);
	else
		snprintf(path, sizeof(path), "%s/%s", dir, prog);
	if (access(path, R_OK)) {
		snprintf(msg, sizeof(msg), "script '%s': %s", prog,
			 strerror(errno));
		return msg;
	}
	return NULL;
}

/* The first world size two tests share, or 0. */
static int shared_size(const struct ci_test *a, const struct ci_test *b)
{
	for (int i = 0; i < a->nsizes; i++)
		for (int k = 0; k < b->nsizes; k++)
			if (a->sizes[i] == b->sizes[k])
				return a->sizes[i];
	return 0;
}

/* Two tests of a list with one name and a world size in common would be
 * two cases NAME[n=N] reported alike (JUnit, TAP, --report): an error
 * naming both lines. */
static int check_duplicate_names(const struct ci_list *l, const char *path)
{
	int errors = 0;

	for (int i = 0; i < l->ntests; i++)
		for (int k = 0; k < i; k++) {
			const struct ci_test *a = &l->tests[i], *b = &l->tests[k];
			int n;

			if (strcmp(a->name, b->name) ||
			    !(n = shared_size(a, b)))
				continue;
			fprintf(stderr, "distrun: %s:%d: duplicate test "
				"'%s[n=%d]' (also line %d; give one a "
				"name=)\n", path, a->line, a->name, n, b->line);
			errors++;
			break;
		}
	return errors;
}

/* ------------------------------------------------------------ keys */

static int strv_push(char ***v, int *n, const char *s)
{
	char **nv = realloc(*v, (*n + 2) * sizeof(**v));

	if (!nv)
		return -1;
	*v = nv;
	nv[*n] = strdup(s);
	if (!nv[*n])
		return -1;
	nv[++*n] = NULL;
	return 0;
}

static const char known_keys[] = "name, n, timeout, env, exit, stdout, "
	"stderr, stdout-file, stderr-file, xfail, skip, opt";

/* Applies one KEY=VALUE word to t.  Returns 0, or -1 after an error. */
static int apply_key(struct lexer *lx, struct ci_list *l, struct ci_test *t,
		     const struct word *w)
{
	char key[64], *ranks = NULL;
	const char *val = w->s + w->key_len + 1;
	char *br;

	if (w->key_len >= (int)sizeof(key)) {
		lex_error(lx, lx->line, "unknown key '%.*s'", w->key_len, w->s);
		return -1;
	}
	memcpy(key, w->s, w->key_len);
	key[w->key_len] = 0;
	br = strchr(key, '[');
	if (br) {
		size_t kl = strlen(key);

		if (key[kl - 1] != ']' || kl - (br - key) < 3) {
			lex_error(lx, lx->line, "bad key '%s': expected like "
				  "stdout[0]= or stderr[1-3]=", key);
			return -1;
		}
		key[kl - 1] = 0;
		*br = 0;
		ranks = br + 1;
	}
	if (ranks && strcmp(key, "stdout") && strcmp(key, "stderr") &&
	    strcmp(key, "stdout-file") && strcmp(key, "stderr-file")) {
		lex_error(lx, lx->line, "key '%s' takes no [ranks]", key);
		return -1;
	}
	if (!strcmp(key, "name")) {
		if (!*val) {
			lex_error(lx, lx->line, "name= is empty");
			return -1;
		}
		free(t->name);
		t->name = strdup(val);
	} else if (!strcmp(key, "n")) {
		free(t->sizes);
		t->sizes = NULL;
		if (parse_sizes(val, &t->sizes, &t->nsizes)) {
			lex_error(lx, lx->line, "bad world sizes 'n=%s': "
				  "expected sizes from 1 to %d like 1,2,4 or "
				  "1-8", val, MAX_RANKS);
			return -1;
		}
	} else if (!strcmp(key, "timeout")) {
		if (parse_duration(val, &t->timeout) || t->timeout <= 0) {
			lex_error(lx, lx->line, "bad 'timeout=%s': expected a "
				  "duration like 30s, 5m", val);
			return -1;
		}
	} else if (!strcmp(key, "env")) {
		const char *eq = strchr(val, '=');

		if (!eq || eq == val) {
			lex_error(lx, lx->line, "bad 'env=%s': expected "
				  "env=NAME=VALUE", val);
			return -1;
		}
		if (strv_push(&t->env, &t->nenv, val))
			goto oom;
	} else if (!strcmp(key, "opt")) {
		if (*val != '-') {
			lex_error(lx, lx->line, "bad 'opt=%s': expected a "
				  "distrun option like opt=--grace=1s", val);
			return -1;
		}
		if (strv_push(&t->opt, &t->nopt, val))
			goto oom;
	} else if (!strcmp(key, "exit")) {
		t->exit_expect = parse_exit_expect(val);
		if (t->exit_expect < 0) {
			lex_error(lx, lx->line, "bad 'exit=%s': expected a "
				  "status 0-255 or a signal like SIGSEGV", val);
			return -1;
		}
	} else if (!strcmp(key, "xfail") || !strcmp(key, "skip")) {
		char **dst = key[0] == 'x' ? &t->xfail : &t->skip;

		free(*dst);
		*dst = strdup(*val ? val : key[0] == 'x' ?
			      "expected to fail" : "skipped");
		if (!*dst)
			goto oom;
	} else if (!strcmp(key, "stdout") || !strcmp(key, "stderr") ||
		   !strcmp(key, "stdout-file") || !strcmp(key, "stderr-file")) {
		struct ci_expect *e, *ne;

		if (ranks && !ranks_valid(ranks)) {
			lex_error(lx, lx->line, "bad ranks '[%s]' in %s=: "
				  "expected like [0] or [1-3]", ranks, key);
			return -1;
		}
		ne = realloc(t->expect, (t->nexpect + 1) * sizeof(*ne));
		if (!ne)
			goto oom;
		t->expect = ne;
		e = &ne[t->nexpect];
		memset(e, 0, sizeof(*e));
		e->stream = !strncmp(key, "stderr", 6) ? CI_STDERR : CI_STDOUT;
		e->is_file = strchr(key, '-') != NULL;
		if (e->is_file) {
			char path[PATH_MAX];

			if (val[0] == '/')
				snprintf(path, sizeof(path), "%s", val);
			else
				snprintf(path, sizeof(path), "%s/%s", l->dir,
					 val);
			if (access(path, R_OK)) {
				lex_error(lx, lx->line, "%s=%s: %s", key, val,
					  strerror(errno));
				return -1;
			}
			e->text = strdup(path);
		} else {
			int rc = regcomp(&e->re, val, REG_EXTENDED |
					 REG_NEWLINE | REG_NOSUB);

			if (rc) {
				char msg[128];

				regerror(rc, &e->re, msg, sizeof(msg));
				lex_error(lx, lx->line, "bad regex in %s=%s: "
					  "%s", key, val, msg);
				return -1;
			}
			e->text = strdup(val);
		}
		e->ranks = ranks ? strdup(ranks) : NULL;
		t->nexpect++;
		if (!e->text || (ranks && !e->ranks))
			goto oom;
	} else {
		lex_error(lx, lx->line, "unknown key '%s' (known: %s)", key,
			  known_keys);
		return -1;
	}
	if (!strcmp(key, "name") && !t->name)
		goto oom;
	return 0;
oom:
	lex_error(lx, lx->line, "out of memory");
	return -1;
}

static void test_release(struct ci_test *t)
{
	free(t->name);
	for (int i = 0; i < t->argc; i++)
		free(t->argv[i]);
	free(t->argv);
	free(t->sizes);
	for (int i = 0; i < t->nenv; i++)
		free(t->env[i]);
	free(t->env);
	for (int i = 0; i < t->nopt; i++)
		free(t->opt[i]);
	free(t->opt);
	free(t->xfail);
	free(t->skip);
	for (int i = 0; i < t->nexpect; i++) {
		if (!t->expect[i].is_file)
			regfree(&t->expect[i].re);
		free(t->expect[i].text);
		free(t->expect[i].ranks);
	}
	free(t->expect);
}

/* The default name: the program's base name and its arguments. */
static char *default_name(const struct ci_test *t)
{
	size_t len = 0, cap = 1;
	char *s;

	for (int i = 0; i < t->argc; i++)
		cap += strlen(t->argv[i]) + 1;
	s = malloc(cap);
	if (!s)
		return NULL;
	for (int i = 0; i < t->argc; i++) {
		const char *a = t->argv[i];

		if (!i && strrchr(a, '/'))
			a = strrchr(a, '/') + 1;
		len += snprintf(s + len, cap - len, "%s%s", i ? " " : "", a);
	}
	s[len] = 0;
	return s;
}

int testlist_load(struct ci_list *l, const char *path,
		  const int *default_sizes, int ndefault)
{
	struct lexer lx = { .path = path, .next_line = 1 };
	struct word *w;
	char *tmp;
	int nw;

	memset(l, 0, sizeof(*l));
	l->path = strdup(path);
	tmp = strdup(path);
	if (!l->path || !tmp) {
		free(tmp);
		perror("distrun");
		return -1;
	}
	l->dir = strdup(dirname(tmp));
	free(tmp);
	tmp = strdup(path);
	if (!l->dir || !tmp) {
		free(tmp);
		perror("distrun");
		return -1;
	}
	l->suite = strdup(basename(tmp));
	free(tmp);
	if (!l->suite) {
		perror("distrun");
		return -1;
	}
	if (strrchr(l->suite, '.') && strrchr(l->suite, '.') != l->suite)
		*strrchr(l->suite, '.') = 0;
	lx.f = fopen(path, "re");
	if (!lx.f) {
		fprintf(stderr, "distrun: test list %s: %s\n", path,
			strerror(errno));
		return -1;
	}
	while ((nw = lex_line(&lx, &w)) >= 0) {
		struct ci_test t = { .file = l->path, .line = lx.line };
		int i = 0, bad = 0;

		if (nw == 0) {
			free(w);
			continue;
		}
		for (; i < nw && w[i].key_len; i++)
			bad |= apply_key(&lx, l, &t, &w[i]);
		if (i < nw && !strcmp(w[i].s, "--"))
			i++;
		if (i == nw) {
			lex_error(&lx, lx.line, "missing the program to run");
			bad = 1;
		}
		for (; !bad && i < nw; i++)
			if (strv_push(&t.argv, &t.argc, w[i].s)) {
				lex_error(&lx, lx.line, "out of memory");
				bad = 1;
			}
		if (!bad && !t.skip) {
			const char *why = check_test_program(&t, l->dir);

			if (why) {
				lex_error(&lx, lx.line, "%s", why);
				bad = 1;
			}
		}
		if (!bad && !t.sizes) {
			t.sizes = malloc(ndefault * sizeof(int));
			if (!t.sizes)
				bad = 1;
			else
				memcpy(t.sizes, default_sizes,
				       ndefault * sizeof(int));
			t.nsizes = ndefault;
		}
		if (!bad && !t.name && !(t.name = default_name(&t)))
			bad = 1;
		for (int k = 0; k < nw; k++)
			free(w[k].s);
		free(w);
		if (!bad) {
			struct ci_test *nt = realloc(l->tests, (l->ntests + 1) *
						     sizeof(*nt));

			if (nt) {
				l->tests = nt;
				l->tests[l->ntests++] = t;
				continue;
			}
			lex_error(&lx, lx.line, "out of memory");
		}
		test_release(&t);
	}
	if (ferror(lx.f))
		lex_error(&lx, lx.next_line, "read error");
	fclose(lx.f);
	lx.errors += check_duplicate_names(l, path);
	if (!lx.errors && !l->ntests) {
		fprintf(stderr, "distrun: test list %s: no tests\n", path);
		return -1;
	}
	return lx.errors ? -1 : 0;
}

void testlist_release(struct ci_list *l)
{
	for (int i = 0; i < l->ntests; i++)
		test_release(&l->tests[i]);
	free(l->tests);
	free(l->path);
	free(l->suite);
	free(l->dir);
	memset(l, 0, sizeof(*l));
}
