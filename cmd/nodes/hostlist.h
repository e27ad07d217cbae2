/*
 * hostlist.h - Slurm's host lists (SLURM_JOB_NODELIST) and task counts
 * (SLURM_TASKS_PER_NODE), expanded.  Pure functions: no I/O, no globals.
 */
#ifndef DISTRUN_HOSTLIST_H
#define DISTRUN_HOSTLIST_H

#include <stddef.h>

#define HOSTLIST_MAX 65536      /* names one list may expand to */
#define HOSTLIST_NAME_MAX 256   /* bytes of one name, with its NUL */

/* Expands "node[01-04,07],login1" into *out, a malloc'ed array of
 * malloc'ed names (free with hostlist_free).  Returns the count, or -1
 * with a message in err (what was wrong and where) and *out NULL. */
int hostlist_expand(const char *s, char ***out, char *err, size_t errsz);
void hostlist_free(char **names, int n);

/* Expands "2(x3),1" into out[0..max): returns the count of nodes, or -1
 * with a message in err. */
int tasks_per_node_expand(const char *s, int *out, int max, char *err,
			  size_t errsz);

#endif
