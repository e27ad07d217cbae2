/*
 * preload.h - --preload MODULES: Python ranks forked from one warm
 * interpreter (preload.c, and the server it talks to, cmd/job/preload.py).
 *
 * The steps, all from spawn.c and job.c:
 *
 *   preload_begin()   in spawn_all, before the first rank: decides whether
 *                     the job can be preloaded (a Python program, options
 *                     the server understands), starts the warm interpreter
 *                     (or asks the sweep's broker for a shared one) and
 *                     waits, bounded and aborted by a signal, for it to
 *                     have imported the modules.  Any failure is one line
 *                     and the ranks start the usual way.
 *   preload_fork()    instead of vfork + exec for rank r: the server forks
 *                     the rank and the pid comes back.  -1: start this
 *                     rank the usual way (said once).
 *   preload_pollfds(), preload_handle()
 *                     the job loop's part: "EXITED pid" (the guard forgets
 *                     the pid, then the server may reap it) and "STATUS
 *                     pid status rusage" (job_rank_exited).
 *   preload_release() closes the connection; the server, with no client
 *                     left, exits, and is reaped (SIGKILL after 2 s).
 *
 * A sweep (`-n 1,2,4`) and `distrun test` run every case as a child
 * distrun; preload_broker_init() in the parent makes a broker socket the
 * children inherit (DISTRUN_PRELOAD_BROKER), and the parent's loop calls
 * preload_broker_handle() when it is readable: a child sends its server's
 * command line, environment and working directory with one end of a new
 * socket pair; the broker starts one server per distinct such key and
 * hands the socket to it, so every case with the same interpreter,
 * options and modules forks from one warm interpreter.
 */
#ifndef DISTRUN_PRELOAD_H
#define DISTRUN_PRELOAD_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct job;

/* 0, or -1 after a message when --preload or DISTRUN_PRELOAD is bad
 * (the job then exits EXIT_USAGE).  Takes DISTRUN_PRELOAD_BROKER out of
 * distrun's environment (the ranks must not inherit it). */
int preload_prepare(struct job *job);
void preload_begin(struct job *job);
int preload_fork(struct job *job, int r, int in, int out, int err,
		 pid_t *pid);
/* True if pid is the warm interpreter (not a leftover of a rank). */
bool preload_owns(const struct job *job, pid_t pid);
int preload_pollfds(struct job *job, struct pollfd *pfd, int max);
void preload_handle(struct job *job, const struct pollfd *pfd, int n);
void preload_release(struct job *job);

/* The broker of a sweep or `distrun test` (testrun.c).  init: 0 or -1
 * (then the cases start their own servers); the fd to poll, or -1. */
int preload_broker_init(const sigset_t *orig_mask);
int preload_broker_fd(void);
void preload_broker_handle(void);
void preload_broker_release(void);

/* Between preload.c and preload_broker.c. */
#define PRELOAD_BROKER_ENV "DISTRUN_PRELOAD_BROKER"
/* How long a server with no client left may take to exit. */
#define PRELOAD_EXIT_WAIT 2.0
/* A server spec's fields: the path to exec, argv (+ how, "3"), cwd and
 * env, as pointers into spec in one malloc'd array; v[0] is the path,
 * argv starts at v + 1.  NULL when malformed or out of memory. */
char **preload_spec_split(const char *spec, size_t len, int argc,
			  const char *how, const char **cwd, char ***env);
struct child;
/* Fills c (child.c) to start the server: v from preload_spec_split, fd
 * as its fd 3, its own process group, PR_SET_PDEATHSIG, cgroup_fd (-1:
 * none) to enter, mask as its signal mask. */
void preload_server_child(struct child *c, char **v, char **env,
			  const char *cwd, int fd, int cgroup_fd,
			  const sigset_t *mask);

#endif
