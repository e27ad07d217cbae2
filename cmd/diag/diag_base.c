/*
 * diag_base.c - the bottom of the diagnosis: a growable string (struct sb:
 * the diagnosis's text, and the JSON text that trace.c and html.c
 * stream); helpers for the jansson values of its part of --report (a
 * string made valid UTF-8, a real rounded as the report has always given
 * it, a list that is whole or absent); and the readers of the ranks'
 * control blocks in the per-job segment (runtime/ctl.h): the block of a
 * local rank, its flight records harvested into the launcher's memory
 * (--trace, the summary's barrier skew), a call named as a phrase
 * ("all_reduce(float32 x 4, sum)"), the launcher's clock as the ranks
 * write it.  Everything here reads; nothing starts, signals or waits.
 * The other rooms: diag.c (the job's hooks, stall detection, the
 * summary), diag_stacks.c (/proc, gdb and Python stacks), diag_report.c
 * (the report); diag_int.h says what they share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distrun.h"
#include "contract.h"
#include "diag_int.h"
#include "ci.h"

/* ------------------------------------------------------ strings */

void sb_vprintf(struct sb *b, const char *fmt, va_list ap)
{
	va_list aq;
	int n;

	if (b->oom)
		return;
	va_copy(aq, ap);
	n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0,
		      fmt, aq);
	va_end(aq);
	if (n < 0)
		return;
	if (!b->s || b->len + (size_t)n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + (size_t)n + 1)
			cap *= 2;
		p = realloc(b->s, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->s = p;
		b->cap = cap;
		vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
	}
	b->len += n;
}

void sb_printf(struct sb *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sb_vprintf(b, fmt, ap);
	va_end(ap);
}

void sb_json_str(struct sb *b, const char *s)
{
	if (!s) {
		sb_printf(b, "null");
		return;
	}
	sb_printf(b, "\"");
	const unsigned char *end = (const unsigned char *)s + strlen(s);

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		const unsigned char *c = p;

		/* Bytes that are not UTF-8 (a line cut inside a character,
		 * binary output) would make the whole text invalid JSON. */
		if (*p >= 0x80) {
			if (ci_utf8_next(&c, end) < 0)
				sb_printf(b, "\\ufffd");
			else
				sb_printf(b, "%.*s", (int)(c - p), (const char *)p);
			p = c - 1;
			continue;
		}
		if (*p == '"' || *p == '\\')
			sb_printf(b, "\\%c", *p);
		else if (*p == '\n')
			sb_printf(b, "\\n");
		else if (*p == '\t')
			sb_printf(b, "\\t");
		else if (*p < 0x20 || *p == 0x7f)
			sb_printf(b, "\\u%04x", *p);
		else
			sb_printf(b, "%c", *p);
	}
	sb_printf(b, "\"");
}

char *sb_take(struct sb *b)
{
	char *s = b->s ? b->s : strdup("");

	*b = (struct sb){ 0 };
	return s;
}

/* ------------------------------------------------------ JSON values */

json_t *diag_jstr(const char *s)
{
	const unsigned char *p, *end;
	char *u, *w;
	json_t *j;

	if (!s)
		return json_null();
	j = json_string(s);
	if (j)
		return j;
	/* Not UTF-8 (or out of memory): each byte that does not start a
	 * character becomes U+FFFD, 3 bytes at most for 1. */
	p = (const unsigned char *)s;
	end = p + strlen(s);
	u = w = malloc(3 * (size_t)(end - p) + 1);
	if (!u)
		return NULL;
	while (p < end) {
		const unsigned char *c = p;

		if (ci_utf8_next(&p, end) < 0) {
			memcpy(w, "\xef\xbf\xbd", 3);
			w += 3;
		} else {
			memcpy(w, c, (size_t)(p - c));
			w += p - c;
		}
	}
	j = json_stringn(u, (size_t)(w - u));
	free(u);
	return j;
}

json_t *diag_jreal(double v, int decimals)
{
	/* Through the decimal text, not round(v * 1000) / 1000, which rounds
	 * ties the other way (2.0625: "2.062" printed, 2.063 by round()):
	 * the same double as when the diagnosis was JSON text that report.c
	 * parsed, so --report's bytes stay as they were.  DBL_MAX in %f is
	 * 309 digits before the point. */
	char buf[320 + 32];

	snprintf(buf, sizeof(buf), "%.*f", decimals, v);
	return json_real(strtod(buf, NULL));
}

void diag_jappend(json_t **a, json_t *v)
{
	/* json_array_append_new releases v when *a is NULL. */
	if (json_array_append_new(*a, v)) {
		json_decref(*a);
		*a = NULL;
	}
}

/* --------------------------------------------------- control blocks */

int64_t diag_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const dri_ctl *diag_ctl(const struct job *job, int r)
{
	const dri_seg_hdr *h = job->seg;
	const dri_ctl *c;

	if (!h || r < 0 || (uint32_t)r >= h->nranks ||
	    h->ctl_size < sizeof(dri_ctl))
		return NULL;
	c = (const dri_ctl *)((const char *)h + h->ctl_off +
			      (uint64_t)r * h->ctl_size);
	if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != DRI_CTL_MAGIC ||
	    c->version != DRI_CTL_VERSION)
		return NULL;
	return c;
}

const char *diag_call_str(const dri_ctl_call *c, char *buf, size_t n)
{
	const char *name = dri_coll_name((dri_coll)c->coll);
	size_t len;

	if (c->coll == DRI_BARRIER || c->coll == DRI_MONITORED_BARRIER ||
	    c->coll == DRI_NEW_GROUP) {
		snprintf(buf, n, "%s", name);
		return buf;
	}
	if (c->coll == DRI_P2P) {
		snprintf(buf, n, "%s %s rank %d (%s x %llu)",
			 c->peer_send ? "send" : "recv",
			 c->peer_send ? "to" : "from", c->peer,
			 dr_dtype_name((dr_dtype)c->dtype),
			 (unsigned long long)c->count);
		return buf;
	}
	len = (size_t)snprintf(buf, n, "%s(", name);
	if (len < n && c->dtype >= 0)
		len += (size_t)snprintf(buf + len, n - len, "%s x %llu",
				dr_dtype_name((dr_dtype)c->dtype),
				(unsigned long long)c->count);
	if (len < n && c->op >= 0)
		len += (size_t)snprintf(buf + len, n - len, ", %s",
					dr_op_name((dr_op)c->op));
	if (len < n && c->root >= 0)
		len += (size_t)snprintf(buf + len, n - len, ", root %d",
					c->root);
	if (len < n)
		snprintf(buf + len, n - len, ")");
	return buf;
}

bool diag_same_call(const dri_ctl_call *a, const dri_ctl_call *b)
{
	return a->coll == b->coll && a->count == b->count &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

void diag_group_name(uint32_t g, char *buf, size_t n)
{
	if (g == 0)
		snprintf(buf, n, "world");
	else
		snprintf(buf, n, "group %u", g);
}

void diag_harvest(struct job *job, int r)
{
	struct diag_rank *dr = &job->diag->rk[r];
	const dri_ctl *c = diag_ctl(job, r);

	if (!c)
		return;
	for (int ring = 0; ring < DRI_CTL_RINGS; ring++) {
		uint64_t head = __atomic_load_n(&c->ring_head[ring],
						__ATOMIC_ACQUIRE);
		uint64_t len = dri_ctl_ring_len(ring), *next = &dr->next_idx[ring];

		if (head > *next + len) {
			dr->dropped += head - len - *next;
			*next = head - len;
		}
		for (; *next < head; (*next)++) {
			dri_ctl_call call;

			if (dri_ctl_read_rec(c, ring, *next, &call)) {
				/* Still being written: come back next time,
				 * unless its writer is gone. */
				if (job->ranks[r].state == RANK_RUNNING)
					break;
				dr->dropped++;
				continue;
			}
			if (dr->nrec == dr->caprec) {
				size_t cap = dr->caprec ? 2 * dr->caprec : 256;
				dri_ctl_call *p = realloc(dr->recs,
							  cap * sizeof(*p));

				if (!p) {
					dr->dropped++;
					continue;
				}
				dr->recs = p;
				dr->caprec = cap;
			}
			dr->recs[dr->nrec++] = call;
		}
	}
}
