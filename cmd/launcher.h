/*
 * launcher.h - the parts of the distrun launcher and how they meet.
 *
 * The launcher is one process that owns, for the whole job, every rank's
 * pipes and process group.  Its parts:
 *
 *   options.c  the option table (the one place an option is defined: it
 *              makes getopt's table and --help), parsing of counts,
 *              durations and rank lists
 *   port.c     the choice of MASTER_PORT and the socket that reserves it
 *   spawn.c    each rank's environment, PATH lookup, fork + exec with the
 *              exec error sent back over an O_CLOEXEC pipe
 *   clone_into.c  clone3 into the job's cgroup, vfork-style (spawn.c's)
 *   child.c    every other child (test cases, gdb, Python probes, the
 *              --preload server, the guard): start, exec errors, waits
 *   mux.c      the output multiplexer: whole lines, labels, colours,
 *              per-rank files, timestamps, non-blocking console writes
 *   segment.c  the per-job shared segment the ranks inherit (memfd)
 *   input.c    --stdin: the launcher's stdin copied into the chosen
 *              ranks' pipes from the event loop
 *   guard.c    a watchdog process that kills the ranks' process groups if
 *              distrun dies by SIGKILL
 *   job.c      the event loop: poll over pipes and a signalfd, reaping
 *              with wait4, stopping the job (TERM, grace, KILL)
 *   report.c   the end-of-job summary on stderr and the JSON report
 *   html.c     --html: one page of the run from the report and the trace
 *   outfile.c  --report, --junit, --tap, --trace, --html: "incomplete" from
 *              the start, the final text by temporary file and rename
 *   fmt.c      formatting helpers (signal names, statuses, rank lists);
 *              with runtime/clock.c, the bottom layer
 *
 * Calls go one way: main -> job -> (spawn, input, guard, mux, report) -> fmt,
 * clock.  The mux never calls back into the job loop: its writes do not
 * block, and the loop polls for the console (POLLOUT) itself.
 *
 * Ownership: struct job owns every fd and buffer named in it; job_release()
 * frees them.  Functions return 0 or -1 and have printed a one-line
 * "distrun: ..." message on -1, unless said otherwise.
 */
#ifndef DISTRUN_LAUNCHER_H
#define DISTRUN_LAUNCHER_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "contract.h"

#define DISTRUN_VERSION "0.1.0"
#define MAX_RANKS 4096

/* Exit codes of the launcher itself (rank statuses pass through). */
#define EXIT_USAGE 2        /* bad command line */
#define EXIT_TIMEOUT 124    /* --timeout expired, as timeout(1) */
#define EXIT_NOEXEC 126     /* program found but not executable */
#define EXIT_NOTFOUND 127   /* program not found */

/* ------------------------------------------------------------ options */

struct opts {
	int nranks;
	const char *master_addr;   /* default 127.0.0.1 */
	int master_port;           /* 0: choose one */
	bool raw;                  /* no "[r] " labels */
	bool timestamps;
	bool summary;              /* -v: always print the summary */
	bool quiet;                /* -q: no summary, not even on failure */
	int color;                 /* -1 auto, 0 never, 1 always */
	uint8_t *show;             /* nranks flags: rank shown on console */
	const char *output_dir;    /* NULL: no per-rank files */
	const char *output_dir_opt; /* the option that set it, for errors */
	double timeout;            /* seconds, 0: none */
	double grace;              /* seconds between TERM and KILL */
	const char *report;        /* JSON file, NULL: none */
	char **argv;               /* the program and its arguments */
	int argc;
	const char *ranks_arg;     /* --ranks as given, parsed once n is known */
	bool nranks_given;         /* -n was on the command line */

	/* Several nodes (nodes.c): --nnodes MIN:MAX, --node-rank,
	 * --rdzv-backend static|etcd, --rdzv-endpoint, --rdzv-id. */
	int min_nodes, max_nodes;  /* 0: not given */
	int node_rank;             /* -1: not given */
	const char *rdzv_backend;  /* NULL: static */
	const char *rdzv_endpoint;
	const char *rdzv_id;
	double join_timeout;       /* seconds for every node to join */
	bool master_addr_given;
	bool master_port_given;
	int *sizes, nsizes;        /* -n as a list of world sizes (ci.h) */
	const char *junit;         /* --junit FILE, NULL: none */
	const char *tap;           /* --tap FILE, NULL: none */
	double stall_timeout;      /* seconds, 0: none (diag.c) */
	const char *trace;         /* --trace FILE, NULL: none (trace.c) */
	const char *html;          /* --html FILE, NULL: none (html.c) */
	bool module;               /* -m: argv[0] is a Python module */
	bool no_python;            /* --no-python: never add an interpreter */
	bool buffered;             /* --buffered: no line-buffering shim */
	const char *python;        /* --python, NULL: DISTRUN_PYTHON/python3 */
	int max_restarts;          /* --max-restarts */
	/* torchrun's --log-dir, --redirects, --tee: per local rank, a mask
	 * of 1 stdout, 2 stderr (NULL: 0 for all).  A stream goes to
	 * LOGDIR/ID_X/attempt_K/R/std{out,err}.log if redirected or teed,
	 * and to the console unless redirected and not teed. */
	const char *log_dir;
	uint8_t *redirects, *tee;
	char **argv_alloc;         /* argv with the interpreter added, or NULL */
	const char *python_from;   /* where the interpreter came from, or NULL */
	int stdin_rank;            /* --stdin: a global rank, or STDIN_* */
	const char *preload;       /* --preload MODULES, NULL: DISTRUN_PRELOAD */
};

/* --stdin's values besides a rank (input.c). */
#define STDIN_NONE (-1)
#define STDIN_ALL (-2)

/* Parses argv into *o.  Returns 0, or the exit status to use at once:
 * EXIT_USAGE after a one-line error and the usage hint, or -1 after
 * --help/--version (exit 0). */
int opts_parse(struct opts *o, int argc, char **argv);
/* Where output goes (--report, --output-dir), checked before anything
 * starts, so a job does not run for an hour to fail at writing its report:
 * this makes the file and the directory if missing.  Apart from
 * opts_parse, which has no effect outside *o (the fuzzer runs it).
 * Returns 0, or -1 after a one-line error and the usage hint. */
int opts_check_paths(const struct opts *o);
/* fmt.c: a duration in seconds, by runtime/clock.c's one parser (so the same as
 * DISTRUN_TIMEOUT's): "90s", "5m", "1h", "1d", "250ms", "2".  Returns -1
 * on bad input, without printing. */
int parse_duration(const char *s, double *out);
/* fmt.c, as parse_duration: "4", "1,2,4", "1-8", "1,2,8-16": world sizes in order, each 1 to
 * MAX_RANKS, none twice.  On success *sizes is malloc'd.  Returns -1 on bad
 * input without printing. */
int parse_sizes(const char *s, int **sizes, int *n);
void opts_release(struct opts *o);
/* Whether the job records its timeline (flight records, output lines):
 * for --trace and --html. */
static inline bool opts_timeline(const struct opts *o)
{
	return o->trace || o->html;
}

/* ------------------------------------------------------------ ranks */

enum rank_state { RANK_NEW, RANK_RUNNING, RANK_EXITED };

/* The step of starting a rank that failed (struct rank's spawn_step). */
enum { SPAWN_STEP_EXEC, SPAWN_STEP_FDS };

struct linebuf {
	char *buf;
	size_t len, cap;
	size_t shown;              /* bytes of buf already on the console */
	double since;              /* when the partial line last grew */
	bool pending;              /* len > shown: counted in mux.c */
};

struct rank {
	pid_t pid;                 /* also its process group id */
	enum rank_state state;
	int out_fd, err_fd;        /* read ends, -1 once at EOF */
	struct linebuf line[2];    /* partial line of stdout, stderr */
	int file_fd[2];            /* --output-dir files, -1 if none */
	int file_errno[2];         /* why a write to one failed (ENOSPC...), 0 */
	int status;                /* wait status once exited */
	int exec_errno;            /* errno from a failed exec, or 0 */
	int spawn_step;            /* SPAWN_STEP_*: what exec_errno is of */
	bool stopped;              /* was running when distrun stopped it */
	bool out_grown;            /* its stdout pipe grown (mux_read) */
	char suspended;            /* then stopped by a signal ('T') or a
				    * tracer ('t') itself; 0 if not */
	double t_start, t_end;     /* monotonic seconds */
	struct rusage ru;
	char *err_tail;            /* last STDERR_TAIL bytes of stderr, a ring
				      (report.c), NULL until it prints */
	size_t err_bytes;          /* bytes of stderr seen */
};

/* How much of each rank's stderr the JSON report keeps for failing ranks. */
#define STDERR_TAIL 4096

/* ------------------------------------------------------------ job */

struct job {
	struct opts *o;
	struct rank *ranks;
	int nlive;                 /* ranks not yet reaped */
	int nopen;                 /* output fds not yet at EOF */
	int sigfd;
	int port_fd;               /* socket holding MASTER_PORT, or -1 */
	int port_lock_fd;          /* its lock against other jobs, or -1 */
	int guard_fd;              /* pipe to the guard process, or -1 */
	pid_t guard_pid;           /* 0: none */
	int master_port;
	char run_id[40];
	char *torch_logs;          /* --log-dir's LOGDIR/ID_X, or NULL */
	char *prog_path;           /* resolved program (malloc) */
	char **env;                /* environment template (spawn.c) */
	int devnull;               /* the ranks' stdin */
	int cgroup_fd;             /* the job cgroup's cgroup.procs, or -1
				      (guard_cgroup_procs opens it) */
	int cgroup_dirfd;          /* the job cgroup's directory, or -1 */
	char *cgroup_dir;          /* the job's cgroup (malloc), or NULL */
	sigset_t orig_mask;        /* restored in the ranks */
	double t0;                 /* monotonic start */
	double real_t0, real_t1;   /* wall clock start and end (epoch s) */
	/* The per-job segment (segment.c; layout in runtime/seg.h): mapped
	 * for the whole job, NULL if it could not be made. */
	int seg_fd;                /* -1: none */
	bool linebuf;              /* ranks get the line-buffering shim */
	int pipe_size;             /* what a full stdout pipe grows to, 0 */
	void *seg;                 /* a dri_seg_hdr */
	size_t seg_size;

	/* How the job ended. */
	int first_fail;            /* rank index, -1: none */
	int stop_signal;           /* signal that made distrun stop, 0: none */
	bool timed_out;
	bool stopping;             /* TERM sent, waiting for the grace */
	double kill_at;            /* monotonic time to send SIGKILL */
	bool killed;               /* SIGKILL sent */
	bool leftovers;            /* stopping what exited ranks left */
	bool output_broken;        /* EPIPE on our stdout or stderr */
	bool spawn_failed;         /* fork or pipe failed for some rank */
	bool stalled;              /* --stall-timeout stopped it */
	int restarts;              /* --max-restarts used so far */
	int exit_status;

	/* A job over several nodes (nodes.c); one node: nnodes 1, offset 0. */
	struct nodes *nodes;       /* NULL on a single node */
	int nnodes, node_rank;
	int world_size;            /* ranks of the whole job */
	int rank_offset;           /* global rank of our local rank 0 */
	char node_secret[65];      /* the ranks' DISTRUN_SECRET, or "" */
	bool node_stop;            /* stopped because another node failed */
	int node_stop_status;
	struct diag *diag;         /* diag.c's state, NULL: none */
	struct input *input;       /* input.c's state, NULL: no rank reads
				      distrun's stdin */
	struct preload *preload;   /* preload.c's state, NULL: no --preload */
	/* How a rank's end reaches the job loop from below it (preload.c
	 * learns of forked ranks' ends): set by job_run. */
	void (*rank_exited)(struct job *job, int r, int status,
			    const struct rusage *ru);
};

/* The ranks of the whole job: this node's unless there are several. */
static inline int job_world_size(const struct job *job)
{
	return job->world_size > 0 ? job->world_size : job->o->nranks;
}

/* nodes.c: joins the other nodes when the options (or Slurm's or
 * Kubeflow's variables) ask for several; fills the job's node fields.
 * 0 (also on one node), or -1 after a message. */
int nodes_setup(struct job *job);
/* The job loop's part: fds to poll, what they say, our failure, our end
 * (returns the job's exit status over every node). */
int nodes_job_pollfds(struct job *job, struct pollfd *pfd, int max);
/* True when what the other nodes said stops this node's job (the job
 * loop then stops it: job.c is above this file). */
bool nodes_job_handle(struct job *job);
void nodes_job_stopping(struct job *job);
int nodes_job_finish(struct job *job, int status);
/* After a failed round through etcd with --max-restarts left (a lost
 * node, a rank that failed; not a signal or --timeout): says so and
 * returns the next round's number, else 0 (naming the lost node when the
 * restarts are used up).  nodes_reexec then starts this distrun afresh
 * (its argv, DISTRUN_RESTART_COUNT=round, mask: the signal mask it was
 * started with) once everything is released; it returns only if exec
 * fails, after a message. */
int nodes_job_restart(struct job *job, int status);
void nodes_reexec(char **argv, int round, const sigset_t *mask);

/* Monotonic and wall-clock time in seconds (runtime/clock.h: the
 * runtime's own clock, shared). */
static inline double now_mono(void)
{
	return dri_now_s();
}

static inline double now_real(void)
{
	return dri_real_s();
}

/* port.c: fills job->master_port, port_fd and port_lock_fd; -1 after a
 * message when the port is taken (by another job, or a listener). */
int port_reserve(struct job *job);
/* port.c: the listening sockets for rank 0 (DISTRUN_STORE_FDS), if the
 * program takes them; their number, 0 if none. */
int port_store_fds(const int **fds);

/* spawn.c: spawn_prepare() finds the program and builds the environment;
 * it returns 0, or an exit status (126, 127, 1) after a message.
 * spawn_all() starts every rank; on -1 the ranks already started are in
 * job->ranks (state RANK_RUNNING) for job.c to stop. */
int spawn_prepare(struct job *job);
/* TORCHELASTIC_RESTART_COUNT for the ranks started next. */
void spawn_set_restart(struct job *job, int count);
int spawn_all(struct job *job);
void spawn_release(struct job *job);
/* clone_into.c: runs fn(arg) in a child made inside the cgroup whose
 * directory is cgroup_dirfd, sharing our memory (we wait) until it execs
 * or fn returns (its exit status).  The pid, or -errno (-ENOSYS where
 * this build or kernel cannot). */
pid_t clone_into(int cgroup_dirfd, int (*fn)(void *), void *arg);

/* ------------------------------------------------------------ child.c */

/*
 * A child process other than a rank, as git's start_command() starts one.
 * The caller fills a struct child from CHILD_INIT, then:
 *
 *   child_start(&c)   forks (vfork: no memory is copied) and execs
 *                     c.argv, or runs c.fn(c.arg) in a forked child;
 *                     returns 0 with c.pid once the exec has happened, or
 *                     -1 with errno and c.step (what failed: the fork or a
 *                     pipe, the launcher already gone, the fds, the
 *                     working directory, the exec), with no child left.
 *                     It prints nothing: each caller words its error.
 *                     With c.fn and c.later it returns once forked (0 and
 *                     c.pid, or -1), without waiting for the child to set
 *                     up: child_report(&c) then tells, as child_start
 *                     would have (0, or -1 with errno and c.step), and
 *                     leaves a child that failed to be reaped.
 *   child_wait(&c, ms, &st)    reaps it, waiting at most ms (-1: for
 *                     ever, 0: not at all): 0 with its waitpid status, 1
 *                     if it still runs, -1 with errno (ECHILD: it was
 *                     reaped elsewhere, as a runner's waitpid(-1) does).
 *   child_finish(&c, ms, &st)  waits ms for it to end by itself, then
 *                     SIGKILLs and reaps it: 0 if it ended by itself, 1
 *                     if it was killed (st filled either way), -1.
 *
 * The fds: c.in, c.out and c.err become the child's 0, 1, 2 (CHILD_INIT:
 * ours; CHILD_DEVNULL: /dev/null); c.pass_fd, if >= 0, becomes its fd 3.
 * They stay the caller's to close.  Every other fd of ours is close-on-
 * exec, and close_fds closes what we inherited without the flag too.
 * Never pass an fd below 3 as pass_fd, nor an fd below 3 that an earlier
 * of in, out, err replaces.  The child gets c.mask as its signal mask
 * (NULL: none blocked) and SIGPIPE and caught signals at their defaults;
 * c.fn's child keeps the launcher's signals as they are.
 */
#define CHILD_DEVNULL (-1)
enum { CHILD_STEP_PARENT, CHILD_STEP_FDS, CHILD_STEP_CWD, CHILD_STEP_EXEC };
struct child {
	char *const *argv;         /* NULL-terminated */
	const char *path;          /* what to exec, NULL: argv[0] (no PATH
				      search) */
	char *const *env;          /* NULL: ours (environ) */
	const char *cwd;           /* NULL: ours */
	int in, out, err;          /* see above */
	int pass_fd;               /* the child's fd 3, -1: none */
	bool close_fds;            /* close inherited fds above 2 (3) */
	bool new_pgroup;           /* leads its own process group */
	int pdeathsig;             /* sent when the launcher dies, 0: none */
	int cgroup_fd;             /* a cgroup.procs to enter, -1: none */
	const sigset_t *mask;      /* the exec'd program's signal mask */
	int (*fn)(void *arg);      /* run instead of exec: its exit status */
	void *arg;
	bool later;                /* c.fn only: see child_report() */
	int report_fd;             /* out: what child_report() reads, -1 */

	pid_t pid;                 /* out: -1 until started, after reaped */
	int step;                  /* out: CHILD_STEP_* that failed */
};
#define CHILD_INIT { .in = 0, .out = 1, .err = 2, .pass_fd = -1, \
		     .cgroup_fd = -1, .report_fd = -1, .pid = -1 }
int child_start(struct child *c);
int child_report(struct child *c);
/* Like execvp's search of PATH for name (which has no '/'), done in the
 * parent: 0 and in *out (malloc'd) the first regular file there that we
 * may run; 1 when there is none (*denied: one we may not run was seen);
 * -1 when out of memory.  The answer is kept for the next call with the
 * same name: port.c and spawn.c both look the program up. */
int child_which(const char *name, char **out, bool *denied);
int child_wait(struct child *c, int timeout_ms, int *status);
int child_finish(struct child *c, int grace_ms, int *status);
/* What an exec'd child gets: SIGPIPE and caught signals at their
 * defaults, mask (NULL: none) as its mask.  For a process about to exec
 * itself anew too (nodes_reexec). */
void child_reset_signals(const sigset_t *mask);
/* The same in two halves, for many children: the set to reset, looked
 * up once in the parent (a sigaction call per signal), then in each
 * child (async-signal-safe) only those reset and mask set. */
void child_caught_signals(sigset_t *caught);
void child_reset_caught(const sigset_t *caught, const sigset_t *mask);

/* segment.c: segment_create() before spawn_prepare() (the ranks'
 * environment names the fd); on -1 (after a warning) the job runs
 * without one.  segment_abort() raises the abort word for rank r, which
 * failed ("killed by SIGKILL", ...), and wakes every rank. */
int segment_create(struct job *job);
void segment_abort(struct job *job, int r, const char *why);
void segment_release(struct job *job);

/* input.c: --stdin.  input_setup() once the ranks' global numbers are
 * known (after nodes_setup): 0, or an exit status after a message
 * (EXIT_USAGE: no such rank).  input_pipe() gives the fd that rank r is to
 * have as its stdin in *rfd: job->devnull, or a new pipe's read end, which
 * the caller closes once the rank is started; -1 (errno set) if the pipe
 * cannot be made.  input_pollfds() and input_handle() are the job loop's
 * part (fd 0 POLLIN, the rank pipes POLLOUT); they never block. */
int input_setup(struct job *job);
int input_pipe(struct job *job, int r, int *rfd);
int input_pollfds(struct job *job, struct pollfd *pfd, int max);
void input_handle(struct job *job, const struct pollfd *pfd, int n);
void input_release(struct job *job);

/* guard.c: guard_start() before the first rank (it also makes the job's
 * cgroup where it can), guard_started() once the ranks are started (it
 * warns if the guard could not set up, and the job goes on without it),
 * guard_add() for rank r's process group, guard_forget() when the rank
 * has exited but before it is reaped (neither is a system call),
 * guard_done() once the job has ended cleanly (it kills the guard and
 * removes the cgroup), guard_release() last (it reaps the guard, which
 * died meanwhile).
 * guard_cgroup_procs() is the cgroup's cgroup.procs for a process that
 * moves itself in, opened on first use (-1: no cgroup, or a warning). */
int guard_start(struct job *job);
void guard_started(struct job *job);
void guard_add(struct job *job, int r, pid_t pgid);
void guard_forget(struct job *job, int r);
void guard_done(struct job *job);
void guard_release(struct job *job);
int guard_cgroup_procs(struct job *job);

/* mux.c */
int mux_init(struct job *job);
/* Reads what is available on rank r's stream s (0 stdout, 1 stderr).
 * Returns 1 if data was read, 0 at EOF (fd closed), -1 on error. */
int mux_read(struct job *job, int r, int s);
/* Writes what the console takes now of what is pending; never waits. */
void mux_flush(struct job *job);
/* The fd to poll for POLLOUT while output for stream s (0 stdout, 1
 * stderr) is pending, else -1. */
int mux_pending_fd(int s);
/* True while so much is pending that the ranks should not be read. */
bool mux_full(void);
/* Drops what is pending, saying so (a reader that does not read). */
void mux_give_up(struct job *job);
/* Flushes, waiting at most seconds for a slow reader. */
void mux_drain(struct job *job, double seconds);
/* At EOF of a stream: emits its partial last line with a newline. */
void mux_finish(struct job *job, int r, int s);
/* When a partial line (a prompt) that has not grown for PARTIAL_WAIT
 * seconds is due to be shown, or -1; mux_show_partials shows those due,
 * without a newline: the rest of the line follows it when it comes. */
#define PARTIAL_WAIT 0.2
double mux_partial_deadline(struct job *job);
void mux_show_partials(struct job *job);
/* Closes the --output-dir / --log-dir files, and says on stderr which of
 * them are incomplete (a write or the close failed: a full disk, a quota)
 * and why.  Returns how many are. */
int mux_close_files(struct job *job);
void mux_release(struct job *job);
/* torchrun's log files of the attempt job->restarts (--log-dir,
 * --redirects, --tee), each rank's fds replaced.  Returns 0 or -1. */
int mux_open_logs(struct job *job);
/* Whether rank r's stream s is shown on the console (--redirects). */
bool opts_console(const struct opts *o, int r, int s);

/* pyhint.c: after a job whose first failing Python rank died of
 * ModuleNotFoundError/ImportError, names the interpreter and the others
 * here that have the module. */
void pyhint_rank_failed(struct job *job);

/* job.c */
int job_run(struct job *job);
/* Starts stopping the job: sig to every rank's group, SIGKILL after the
 * grace period. */
void job_stop(struct job *job, int sig);
void job_release(struct job *job);

/* fmt.c */
/* Writes the ranks whose flag is set, as "0-3,5", into buf. */
const char *rank_list_str(const uint8_t *flags, int n, char *buf, size_t sz);
/* "SIGTERM"; a static buffer. */
const char *signal_name(int sig);
/* "exit status 3", "killed by SIGSEGV", "running", ... into buf. */
const char *rank_status_str(const struct rank *rk, char *buf, size_t n);

/* report.c */
/* Keeps the end of rank r's stderr for the report (called by mux.c). */
void report_tail_add(struct rank *rk, const char *p, size_t n);
void report_summary(struct job *job);
int report_json(struct job *job);

/* diag.c: what every rank is doing (its control block in the segment,
 * /proc, stacks by gdb or Python's faulthandler), stall detection, and the
 * report of a job that hangs or fails; trace.c: --trace.  These print
 * nothing on failure of their own beyond the report's "stacks: why not"
 * lines: a diagnosis must never stop the job from stopping. */
int diag_init(struct job *job);
/* Environment entries for every rank (the Python stack helper), appended
 * to env at *k; they are freed by diag_release. */
int diag_env(struct job *job, char **env, size_t *k);
/* Each round of the event loop: samples the control blocks (progress,
 * flight records for --trace) and, past --stall-timeout, reports the
 * stall and returns true: the job loop then stops the job. */
bool diag_tick(struct job *job);
/* When diag_tick needs to run next (monotonic s), or -1. */
double diag_deadline(const struct job *job);
/* n bytes of rank r's stream s came in (progress; trace instants). */
void diag_output(struct job *job, int r, int s, const char *p, size_t n);
/* The report of a job about to be stopped (why: "timeout after 15s", "got
 * SIGINT", "no progress for 30.0s"), on stderr and kept for --report.
 * Call it before any rank is signalled. */
void diag_report(struct job *job, const char *why);
/* Rank r failed first: the verdict if it died inside a collective or the
 * ranks called different ones (no stacks: the job stops at once). */
void diag_rank_failed(struct job *job, int r);
/* Lines under the summary table: time in collectives, barrier skew. */
void diag_summary(struct job *job);
/* The state letter of process pid in /proc (R, S, D, T, t, Z), '?' if
 * unknown. */
char diag_proc_state(pid_t pid);
/* The keys diag adds to the --report object ("diagnosis", "collectives",
 * "barrier_skew"), as a JSON object (jansson's json_t, a new reference),
 * or NULL if none.  A key it could not make for want of memory is absent. */
struct json_t;   /* <jansson.h>: diag.c and report.c include it */
struct json_t *diag_json(struct job *job);
void diag_release(struct job *job);
/* The diagnosis's verdict in one line ("rank 1 never entered world seq 1
 * barrier (ranks 0,2-3 waiting)"), or NULL. */
const char *diag_verdict_line(const struct job *job);
/* trace.c: the timeline as Chrome trace JSON text (malloc'd; NULL after
 * a message when out of memory).  max_calls > 0 keeps only each rank's
 * last max_calls calls and max_calls output lines (otherData says how
 * many were left out); 0 keeps everything.  trace_write writes the whole
 * one to --trace FILE. */
char *trace_text(struct job *job, size_t max_calls);
int trace_write(struct job *job);

/* report.c: the --report object as JSON text (malloc'd, NULL when out of
 * memory). */
char *report_text(struct job *job);

/* html.c: --html FILE, one page for a job (html_job), or for a sweep or a
 * `distrun test` run (ci.h). */
int html_job(struct job *job);

/* outfile.c: --report, --junit, --tap, --trace and --html are written to
 * a temporary file in their directory and renamed into place once whole.
 * outfile_open: 0, or -1 after a message ("distrun: WHAT PATH: ...");
 * then write to of->f and outfile_commit (0, or -1 after a message; the
 * temporary file is removed either way) or outfile_abort. */
struct outfile {
	FILE *f;
	const char *path, *what;
	char *final, *tmp;         /* NULL: written in place */
};
int outfile_open(struct outfile *of, const char *path, const char *what);
int outfile_commit(struct outfile *of);
void outfile_abort(struct outfile *of);
/* All of data to path, the same way. */
int outfile_write(const char *path, const char *what, const char *data,
		  size_t len);
/* At the start of a run: each file given (NULL: none) says "incomplete"
 * until the run replaces it, so a killed distrun leaves no old verdict.
 * 0, or -1 after a message. */
int outfiles_mark(const char *report, const char *junit, const char *tap,
		  const char *trace, const char *html);

#endif
