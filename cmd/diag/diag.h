/*
 * diag.h - what the diagnosis (cmd/diag*.c; diag_int.h is its inside)
 * and trace.c share: the flight records and output lines harvested during
 * the job, and a small string builder (diag_base.c) for text: the
 * diagnosis as people read it, and the JSON that is streamed rather than
 * built as values (trace.c's timeline, html.c's page).  The diagnosis's
 * part of --report is built as jansson values (diag_json, launcher.h),
 * which report.c merges into its object as they are.
 */
#ifndef DISTRUN_DIAG_H
#define DISTRUN_DIAG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "contract.h"
#include "launcher.h"

/* A growable string; on out of memory it stops growing and says so. */
struct sb {
	char *s;
	size_t len, cap;
	int oom;
};

void sb_printf(struct sb *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void sb_vprintf(struct sb *b, const char *fmt, va_list ap);
/* A JSON string literal of s (quotes, escapes) or null for NULL. */
void sb_json_str(struct sb *b, const char *s);
/* The text, owned by the caller ("" if empty), b reset. */
char *sb_take(struct sb *b);

/* One line of output, for --trace. */
struct diag_line {
	double t;              /* monotonic s */
	int rank, stream;
	char *text;            /* cut at DIAG_LINE_MAX */
};
#define DIAG_LINE_MAX 200
#define DIAG_LINES_MAX 100000

struct diag_rank {
	uint64_t fp;             /* fingerprint of the control block */
	/* --trace: the flight records read so far, in order. */
	dri_ctl_call *recs;
	size_t nrec, caprec;
	uint64_t next_idx[DRI_CTL_RINGS]; /* next record to read, per ring */
	uint64_t dropped;        /* overwritten before we read them */
	char part[2][DIAG_LINE_MAX + 1]; /* partial output line */
	size_t part_len[2];
	double part_t[2];
};

struct diag {
	double last_activity;    /* monotonic s: a rank's call or output */
	double next_sample;
	struct diag_rank *rk;
	struct diag_line *lines;
	size_t nlines, caplines;
	uint64_t lines_dropped;
	char *text;              /* the report, once made */
	struct json_t *json;     /* its structured form (a jansson object) */
	char vline[400];         /* the verdict in one line, or "" */
	bool clock_started;      /* a rank called or printed: stalls count */
	int nenv;
	char *env[5];
};

/* The control block of local rank r, NULL if none or not attached. */
const dri_ctl *diag_ctl(const struct job *job, int r);
/* Reads what rank r's ring holds beyond what was read (trace). */
void diag_harvest(struct job *job, int r);
/* "all_reduce(float32 x 4, sum)" into buf. */
const char *diag_call_str(const dri_ctl_call *c, char *buf, size_t n);
/* Monotonic ns of the launcher's clock, as the ranks write them. */
int64_t diag_now_ns(void);

#endif
