/*
 * diag_int.h - what the diagnosis's own files (cmd/diag*.c) share, and no
 * other part of the launcher: diag.h and launcher.h are its public face.
 * The rooms, calls going one way: diag.c (the job's hooks, stalls, the
 * summary) -> diag_report.c (the report) -> diag_stacks.c (/proc and
 * stacks) -> diag_base.c (the string builder, JSON values, control-block
 * readers).
 */
#ifndef DISTRUN_DIAG_INT_H
#define DISTRUN_DIAG_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "diag.h"

/* diag_base.c: the JSON of --report ("diagnosis", "collectives",
 * "barrier_skew") is built as jansson values, which report.c merges into
 * its object.  Each returns a new reference, or NULL when out of memory.
 * diag_jstr: s as a JSON string, bytes that are not UTF-8 (a line cut
 * inside a character, binary in a stack frame) as U+FFFD, where jansson
 * would refuse the string; NULL gives null. */
json_t *diag_jstr(const char *s);
/* v rounded to decimals places, the precision the diagnosis reports
 * (the clocks mean no more); a value that is not finite gives NULL. */
json_t *diag_jreal(double v, int decimals);
/* Appends v (stolen) to the array *a; if v is NULL or the append fails,
 * *a is released and set to NULL: a list is whole or absent, never
 * silently short (and a NULL *a stays NULL). */
void diag_jappend(json_t **a, json_t *v);

/* diag_base.c: the same call (op, count, dtype, reduce op, root)? */
bool diag_same_call(const dri_ctl_call *a, const dri_ctl_call *b);
/* "world" or "group 3" into buf. */
void diag_group_name(uint32_t g, char *buf, size_t n);

/* diag_stacks.c: a process seen through /proc. */
struct pinfo {
	char state;          /* R, S, D, T, Z, or '?' */
	char wchan[64];
	double cpu;          /* user + system seconds */
	int exit_code;       /* a zombie's wait status */
};

void diag_proc_read(pid_t pid, struct pinfo *pi);

/* diag_stacks.c: one rank's stack, or why there is none. */
struct stack {
	const char *method;  /* "gdb", "python", NULL: none */
	char err[200];       /* why there is none */
	struct sb raw;       /* what the tool printed */
	char *summary;       /* one line, as shown */
	char *key;           /* what groups ranks: summary less the frame
			      * numbers and an innermost frame of glibc or
			      * the library; NULL: summary */
	char **frames;       /* the selected thread's frames, as printed */
	int nframes;
	/* collection */
	struct child gdb;    /* while method is "gdb" */
	int fd;              /* gdb's output, or the Python memfd */
	off_t py_from;       /* memfd size before our signal */
	off_t py_last;
	int py_still;        /* polls with no growth */
	double deadline;
	bool done;
};

/* The stacks of processes pids[0..nranks) into sts, within the bounds
 * (pids[r] <= 0: not running). */
void diag_stacks_collect(struct job *job, struct stack *sts,
			 const pid_t *pids);
void diag_stack_release(struct stack *st);

#endif
