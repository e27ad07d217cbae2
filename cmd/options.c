/*
 * options.c - distrun's command line: the option table and its parsers.
 *
 * Every option is defined once, in opt_table[] below: getopt_long's table
 * and the --help text are both made from it, and tests/options.bats checks
 * that man/distrun.1 names the same long options.  Parsing stops at the
 * first non-option (the program), so `distrun -n 2 prog -n 5` gives prog
 * its own -n 5; `--` also ends the options.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contract.h"
#include "launcher.h"
#include "ci.h"

enum {
	OPT_NPROC = 'n',
	OPT_SUMMARY = 'v',
	OPT_QUIET = 'q',
	OPT_HELP = 'h',
	OPT_VERSION = 'V',
	OPT_NPROC_US = 256,
	OPT_MASTER_ADDR,
	OPT_MASTER_ADDR_US,
	OPT_MASTER_PORT,
	OPT_MASTER_PORT_US,
	OPT_RAW,
	OPT_RANKS,
	OPT_OUTPUT_DIR,
	OPT_TIMESTAMPS,
	OPT_TIMEOUT,
	OPT_GRACE,
	OPT_REPORT,
	OPT_COLOR,
	OPT_MODULE = 'm',
	OPT_NO_PYTHON = 300,
	OPT_NO_PYTHON_US,
	OPT_PYTHON,
	OPT_STANDALONE,
	OPT_NNODES,
	OPT_NODE_RANK,
	OPT_NODE_RANK_US,
	OPT_RDZV_BACKEND,
	OPT_RDZV_BACKEND_US,
	OPT_RDZV_ENDPOINT,
	OPT_RDZV_ENDPOINT_US,
	OPT_RDZV_ID,
	OPT_RDZV_ID_US,
	OPT_JOIN_TIMEOUT,
	OPT_IFACE,
	OPT_JUNIT,
	OPT_TAP,
	OPT_STALL_TIMEOUT,
	OPT_TRACE,
	OPT_HTML,
	OPT_MAX_RESTARTS,
	OPT_MAX_RESTARTS_US,
	OPT_LOG_DIR,
	OPT_LOG_DIR_US,
	OPT_REDIRECTS,
	OPT_TEE,
	OPT_STDIN,
	OPT_PRELOAD,
	OPT_BUFFERED,
};

struct opt_def {
	int id;
	const char *name;
	const char *arg;        /* NULL: takes no argument */
	const char *help;       /* NULL: an alias, listed with the one before */
};

static const struct opt_def opt_table[] = {
	{ OPT_NPROC, "nproc-per-node", "N",
	  "number of ranks to start (1 to 4096, default 1); a list "
	  "(1,2,4 or 1-8) runs the job once per size" },
	{ OPT_NPROC_US, "nproc_per_node", "N", NULL },
	{ OPT_MASTER_ADDR, "master-addr", "ADDR",
	  "MASTER_ADDR for the ranks (default 127.0.0.1)" },
	{ OPT_MASTER_ADDR_US, "master_addr", "ADDR", NULL },
	{ OPT_MASTER_PORT, "master-port", "PORT",
	  "MASTER_PORT for the ranks (default: a free one)" },
	{ OPT_MASTER_PORT_US, "master_port", "PORT", NULL },
	{ OPT_NNODES, "nnodes", "N|MIN:MAX",
	  "nodes of the job, one distrun each (default 1)" },
	{ OPT_NODE_RANK, "node-rank", "K",
	  "this node's rank with a static rendezvous (0 hosts it)" },
	{ OPT_NODE_RANK_US, "node_rank", "K", NULL },
	{ OPT_RDZV_BACKEND, "rdzv-backend", "NAME",
	  "how nodes meet: static (default) or etcd" },
	{ OPT_RDZV_BACKEND_US, "rdzv_backend", "NAME", NULL },
	{ OPT_RDZV_ENDPOINT, "rdzv-endpoint", "HOST:PORT",
	  "the etcd server, for --rdzv-backend etcd" },
	{ OPT_RDZV_ENDPOINT_US, "rdzv_endpoint", "HOST:PORT", NULL },
	{ OPT_RDZV_ID, "rdzv-id", "ID",
	  "the job's name in the rendezvous (same on every node)" },
	{ OPT_RDZV_ID_US, "rdzv_id", "ID", NULL },
	{ OPT_JOIN_TIMEOUT, "join-timeout", "DURATION",
	  "how long nodes may take to join (default 10m)" },
	{ OPT_IFACE, "iface", "NAME",
	  "the network interface ranks listen on (DISTRUN_IFACE)" },
	{ OPT_RAW, "raw", NULL,
	  "print the ranks' lines without the [rank] label" },
	{ OPT_RANKS, "ranks", "LIST",
	  "show only these ranks' output (0,2-3 or none)" },
	{ OPT_OUTPUT_DIR, "output-dir", "DIR",
	  "also write DIR/rank.N.stdout, DIR/rank.N.stderr" },
	{ OPT_STDIN, "stdin", "RANK|all|none",
	  "who reads stdin: a rank (default 0), all or none" },
	{ OPT_BUFFERED, "buffered", NULL,
	  "leave the ranks' stdout buffered as on any pipe (default: "
	  "line-buffered)" },
	{ OPT_TIMESTAMPS, "timestamps", NULL,
	  "prefix lines with the seconds since the start" },
	{ OPT_COLOR, "color", "WHEN",
	  "colour labels: auto (default), always, never" },
	{ OPT_TIMEOUT, "timeout", "DURATION",
	  "stop the job after DURATION (90s, 5m); exit 124" },
	{ OPT_STALL_TIMEOUT, "stall-timeout", "DURATION",
	  "report and stop when nothing progressed for DURATION" },
	{ OPT_GRACE, "grace", "DURATION",
	  "delay from SIGTERM to SIGKILL (default 5s)" },
	{ OPT_REPORT, "report", "FILE",
	  "write the per-rank summary as JSON to FILE" },
	{ OPT_JUNIT, "junit", "FILE",
	  "write the result as JUnit XML to FILE" },
	{ OPT_TAP, "tap", "FILE",
	  "write the result as TAP version 13 to FILE (- for stdout)" },
	{ OPT_TRACE, "trace", "FILE",
	  "write a timeline (Chrome trace JSON) to FILE" },
	{ OPT_HTML, "html", "FILE",
	  "write a self-contained HTML page of the run to FILE" },
	{ OPT_MAX_RESTARTS, "max-restarts", "N",
	  "restart the whole job up to N times on failure (several "
	  "nodes: through --rdzv-backend etcd)" },
	{ OPT_MAX_RESTARTS_US, "max_restarts", "N", NULL },
	{ OPT_LOG_DIR, "log-dir", "DIR",
	  "torchrun's log files: DIR/ID_X/attempt_K/RANK/stdout.log "
	  "(parents made)" },
	{ OPT_LOG_DIR_US, "log_dir", "DIR", NULL },
	{ OPT_REDIRECTS, "redirects", "MASK",
	  "to the log files only: 1 stdout, 2 stderr, 3 both (or per "
	  "local rank: 0:3,1:2)" },
	{ OPT_TEE, "tee", "MASK",
	  "to the log files and the console (as --redirects)" },
	{ OPT_MODULE, "module", NULL,
	  "PROGRAM is a Python module (PYTHON -m PROGRAM)" },
	{ OPT_NO_PYTHON, "no-python", NULL,
	  "run PROGRAM itself even if it ends in .py" },
	{ OPT_NO_PYTHON_US, "no_python", NULL, NULL },
	{ OPT_PYTHON, "python", "PATH",
	  "Python for .py and -m ($DISTRUN_PYTHON, python3)" },
	{ OPT_PRELOAD, "preload", "MODULES",
	  "fork Python ranks from one interpreter that imported MODULES "
	  "(torch,numpy; $DISTRUN_PRELOAD)" },
	{ OPT_STANDALONE, "standalone", NULL,
	  "one node (torchrun): same as --nnodes 1" },
	{ OPT_SUMMARY, "summary", NULL,
	  "always print the summary (default: on failure)" },
	{ OPT_QUIET, "quiet", NULL,
	  "never print the summary table" },
	{ OPT_HELP, "help", NULL, "show this help and exit" },
	{ OPT_VERSION, "version", NULL, "show the version and exit" },
};
#define N_OPTS (sizeof(opt_table) / sizeof(opt_table[0]))

static void usage_hint(const char *fmt, const char *arg)
{
	fputs("distrun: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nTry 'distrun --help'.\n", stderr);
}

/* text from column col, its lines broken at spaces before column
 * width; the lines after the first start at col too. */
static void help_text(const char *text, int col, int width)
{
	const char *p = text;

	while (*p) {
		size_t room = (size_t)(width - col), n = strlen(p);

		if (n > room) {
			n = room;
			while (n > 0 && p[n] != ' ')
				n--;
			if (!n) /* one word longer than the room */
				n = strcspn(p, " ");
		}
		printf("%.*s\n", (int)n, p);
		p += n;
		while (*p == ' ')
			p++;
		if (*p)
			printf("%*s", col, "");
	}
}

static void print_help(void)
{
	printf("Usage: distrun [OPTION]... [-n N] PROGRAM [ARG]...\n"
	       "Start N ranks of PROGRAM on this machine with the torchrun "
	       "environment\n(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), "
	       "show their output\nwith a [rank] label, and exit with the "
	       "first failing rank's status.\n\nOptions:\n");
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt_def *d = &opt_table[i];
		char left[160];
		int len;

		if (!d->help)
			continue;
		len = snprintf(left, sizeof(left), "  %s--%s",
			       d->id < 256 ? (char[]){ '-', (char)d->id, ',',
						       ' ', 0 } : "    ",
			       d->name);
		/* Aliases (the entries with no help after this one). */
		for (size_t j = i + 1; j < N_OPTS && !opt_table[j].help; j++)
			len += snprintf(left + len, sizeof(left) - len,
					", --%s", opt_table[j].name);
		if (d->arg)
			len += snprintf(left + len, sizeof(left) - len, " %s",
					d->arg);
		if (len > 30)
			printf("%s\n%32s", left, "");
		else
			printf("%-32s", left);
		help_text(d->help, 32, 79);
	}
	printf("\nExit status: 0 if every rank exits 0; else the first "
	       "failing rank's status\n(128+N if killed by signal N); "
	       "124 on --timeout; 126/127 if PROGRAM\ncannot be run; "
	       "2 on a bad command line.  See distrun(1).\n");
}

/* A whole decimal integer in [lo, hi], or -1. */
static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* A duration option in seconds, by the parser the runtime's
 * DISTRUN_TIMEOUT also uses; positive: zero is refused too.  Returns 0,
 * or -1 after the usage message. */
static int parse_duration_opt(const char *opt, const char *s, bool positive,
			      double *out)
{
	const char *why = "must be more than 0";
	int64_t ms;

	if (dri_duration_parse(s, &ms, &why) || (positive && !ms)) {
		fprintf(stderr, "distrun: invalid %s '%s': %s\n"
			"Try 'distrun --help'.\n", opt, s, why);
		return -1;
	}
	*out = ms / 1000.0;
	return 0;
}

/* torchrun's --redirects/--tee value: a mask for every local rank ("3")
 * or local rank:mask pairs ("0:3,1:2"; the ranks not named get 0), as
 * torch's Std.from_str.  Into *out (MAX_RANKS masks).  Returns 0, or -1
 * after the usage message. */
static int parse_std_map(const char *opt, const char *s, uint8_t **out)
{
	uint8_t *m = calloc(MAX_RANKS, 1);
	const char *p = s;

	if (!m) {
		perror("distrun");
		return -1;
	}
	free(*out);
	*out = m;
	if (s[0] >= '0' && s[0] <= '3' && !s[1]) {
		memset(m, s[0] - '0', MAX_RANKS);
		return 0;
	}
	for (;;) {
		char *end;
		long r;

		if (*p < '0' || *p > '9')
			goto bad;
		errno = 0;
		r = strtol(p, &end, 10);
		if (errno || r >= MAX_RANKS || *end != ':' || end[1] < '0' ||
		    end[1] > '3')
			goto bad;
		m[r] = (uint8_t)(end[1] - '0');
		p = end + 2;
		if (!*p)
			return 0;
		if (*p++ != ',')
			goto bad;
	}
bad:
	fprintf(stderr, "distrun: %s '%s': expected 0 (none), 1 (stdout), 2 "
		"(stderr) or 3 (both), for every rank or per local rank as in "
		"0:3,1:2\nTry 'distrun --help'.\n", opt, s);
	return -1;
}

/* "0,2-3" or "none" into o->show; needs o->nranks. */
static int parse_ranks(struct opts *o, const char *s)
{
	const char *p = s;

	o->show = calloc(o->nranks, 1);
	if (!o->show) {
		perror("distrun");
		return -1;
	}
	if (!strcmp(s, "none"))
		return 0;
	for (;;) {
		char *end;
		long a, b;

		/* A digit first: strtol would also take " -1" (leading
		 * space, then a sign) and mark rank -1, before o->show. */
		if (*p < '0' || *p > '9')
			goto bad;
		errno = 0;
		a = strtol(p, &end, 10);
		if (errno || end == p)
			goto bad;
		b = a;
		if (*end == '-') {
			p = end + 1;
			if (*p < '0' || *p > '9')
				goto bad;
			b = strtol(p, &end, 10);
			if (errno || end == p)
				goto bad;
		}
		if (a > b) {
			fprintf(stderr, "distrun: --ranks '%s': the range "
				"%ld-%ld is reversed (write %ld-%ld)\nTry "
				"'distrun --help'.\n", s, a, b, b, a);
			return -1;
		}
		if (b >= o->nranks) {
			fprintf(stderr, "distrun: --ranks '%s': rank %ld is "
				"not in 0..%d\nTry 'distrun --help'.\n",
				s, b, o->nranks - 1);
			return -1;
		}
		memset(o->show + a, 1, b - a + 1);
		if (!*end)
			return 0;
		if (*end != ',')
			goto bad;
		p = end + 1;
	}
bad:
	usage_hint("--ranks '%s': expected a list like 0,2-3 or none", s);
	return -1;
}

/* mkdir -p: dir and its missing parents.  Returns 0 or -1 (errno). */
static int mkdir_parents(const char *dir)
{
	char path[PATH_MAX];
	size_t n = strlen(dir);

	if (n >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(path, dir, n + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(path, 0777) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(path, 0777) && errno != EEXIST ? -1 : 0;
}

/* The report file is opened without truncation (and left, if made here,
 * for report.c to overwrite); the output directory is made and must be
 * writable. */
int opts_check_paths(const struct opts *o)
{
	if (o->report) {
		int fd = open(o->report, O_WRONLY | O_CREAT | O_APPEND |
			      O_CLOEXEC, 0666);

		if (fd < 0) {
			fprintf(stderr, "distrun: --report %s: %s\nTry "
				"'distrun --help'.\n", o->report,
				strerror(errno));
			return -1;
		}
		close(fd);
	}
	if (o->log_dir && mkdir_parents(o->log_dir)) {
		/* As torchrun's os.makedirs(log_dir, exist_ok=True). */
		fprintf(stderr, "distrun: --log-dir %s: %s\nTry 'distrun "
			"--help'.\n", o->log_dir, strerror(errno));
		return -1;
	}
	if (o->output_dir) {
		const char *opt = o->output_dir_opt ? o->output_dir_opt :
				  "--output-dir";
		struct stat sb;

		if (mkdir(o->output_dir, 0777) && errno != EEXIST) {
			fprintf(stderr, "distrun: %s %s: %s\nTry "
				"'distrun --help'.\n", opt, o->output_dir,
				strerror(errno));
			return -1;
		}
		if (stat(o->output_dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
			errno = ENOTDIR;
		else if (!access(o->output_dir, W_OK | X_OK))
			errno = 0;
		if (errno) {
			fprintf(stderr, "distrun: %s %s: %s\nTry "
				"'distrun --help'.\n", opt, o->output_dir,
				strerror(errno));
			return -1;
		}
	}
	return 0;
}

int opts_parse(struct opts *o, int argc, char **argv)
{
	struct option longopts[N_OPTS + 1];
	long v;
	int c, li = 0, at, verbosity = 0;
	bool standalone = false;

	memset(o, 0, sizeof(*o));
	o->master_addr = "127.0.0.1";
	o->grace = 5;
	o->color = -1;
	o->node_rank = -1;
	o->stdin_rank = 0;      /* as mpirun: rank 0 reads distrun's stdin */
	o->join_timeout = 600;
	for (size_t i = 0; i < N_OPTS; i++)
		longopts[i] = (struct option){ opt_table[i].name,
			opt_table[i].arg ? required_argument : no_argument,
			NULL, opt_table[i].id };
	memset(&longopts[N_OPTS], 0, sizeof(longopts[N_OPTS]));

	opterr = 0;
	/* mpirun's and MPICH's -np N: the same as -n N (getopt would read
	 * -n p).  Only before the program. */
	for (int i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "-np"))
			argv[i] = "-n";
	}
	/* '+': stop at the program name; ':': report missing arguments. */
	for (;;) {
		at = optind;
		li = -1;
		c = getopt_long(argc, argv, "+:n:mvqhV", longopts, &li);
		if (c == -1)
			break;
		/* No abbreviations: getopt_long takes any unambiguous prefix
		 * (--nproc-per-nod), which a new option would make
		 * ambiguous and break a script. */
		if (li >= 0 && at < argc && !strncmp(argv[at], "--", 2) &&
		    strncmp(argv[at] + 2, longopts[li].name,
			    strlen(longopts[li].name) + 1) &&
		    strcspn(argv[at] + 2, "=") != strlen(longopts[li].name)) {
			fprintf(stderr, "distrun: unknown option '%.*s' (did "
				"you mean --%s? options are not abbreviated)\n"
				"Try 'distrun --help'.\n",
				(int)strcspn(argv[at], "="), argv[at],
				longopts[li].name);
			return EXIT_USAGE;
		}
		switch (c) {
		case OPT_NPROC:
		case OPT_NPROC_US:
			/* A later -n replaces an earlier one, lists too. */
			free(o->sizes);
			o->sizes = NULL;
			if (parse_sizes(optarg, &o->sizes, &o->nsizes)) {
				o->sizes = NULL;
				if (optarg[0] == 'p' && optarg == argv[optind - 1] + 2) {
					usage_hint("invalid '-%s': for mpirun's "
						   "-np N, give -n N or -np N "
						   "(apart)", optarg - 1);
					return EXIT_USAGE;
				}
				usage_hint(strpbrk(optarg, ",-") ?
					   "invalid world sizes '%s' (expected "
					   "a list like 1,2,4 or 1-8 of sizes "
					   "1 to 4096)" : "invalid number of "
					   "ranks '%s' (expected 1 to 4096)",
					   optarg);
				return EXIT_USAGE;
			}
			o->nranks = o->sizes[0];
			o->nranks_given = true;
			break;
		case OPT_NNODES: {
			long lo, hi;
			char *colon = strchr(optarg, ':');

			if (colon)
				*colon = 0;
			if (parse_int(optarg, 1, 4096, &lo) ||
			    (colon && parse_int(colon + 1, 1, 4096, &hi))) {
				if (colon)
					*colon = ':';
				usage_hint("invalid --nnodes '%s' (expected N or "
					   "MIN:MAX, 1 to 4096)", optarg);
				return EXIT_USAGE;
			}
			if (colon)
				*colon = ':';
			else
				hi = lo;
			if (lo > hi) {
				usage_hint("--nnodes %s: MIN is more than MAX",
					   optarg);
				return EXIT_USAGE;
			}
			o->min_nodes = (int)lo;
			o->max_nodes = (int)hi;
			break;
		}
		case OPT_NODE_RANK:
		case OPT_NODE_RANK_US:
			if (parse_int(optarg, 0, 4095, &v)) {
				usage_hint("invalid --node-rank '%s' (expected "
					   "0 to 4095)", optarg);
				return EXIT_USAGE;
			}
			o->node_rank = (int)v;
			break;
		case OPT_RDZV_BACKEND:
		case OPT_RDZV_BACKEND_US:
			if (!strcmp(optarg, "c10d") || !strcmp(optarg, "etcd-v2")) {
				usage_hint("--rdzv-backend %s is torch's own "
					   "protocol; distrun's nodes meet "
					   "statically or through etcd (v3)",
					   optarg);
				return EXIT_USAGE;
			}
			if (strcmp(optarg, "static") && strcmp(optarg, "etcd")) {
				usage_hint("--rdzv-backend '%s': expected static "
					   "or etcd", optarg);
				return EXIT_USAGE;
			}
			o->rdzv_backend = optarg;
			break;
		case OPT_RDZV_ENDPOINT:
		case OPT_RDZV_ENDPOINT_US:
			o->rdzv_endpoint = optarg;
			break;
		case OPT_RDZV_ID:
		case OPT_RDZV_ID_US:
			if (!*optarg || strlen(optarg) > 60 ||
			    strspn(optarg, "abcdefghijklmnopqrstuvwxyz"
				   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
			    strlen(optarg)) {
				usage_hint("--rdzv-id '%s': 1 to 60 letters, "
					   "digits, '.', '_' or '-'", optarg);
				return EXIT_USAGE;
			}
			o->rdzv_id = optarg;
			break;
		case OPT_IFACE:
			/* The ranks read it at init (runtime/init.c). */
			if (!*optarg || strlen(optarg) >= 16 ||
			    setenv("DISTRUN_IFACE", optarg, 1)) {
				usage_hint("--iface '%s': not an interface name",
					   optarg);
				return EXIT_USAGE;
			}
			break;
		case OPT_JOIN_TIMEOUT:
			if (parse_duration_opt("--join-timeout", optarg, true,
					       &o->join_timeout))
				return EXIT_USAGE;
			break;
		case OPT_MASTER_ADDR:
		case OPT_MASTER_ADDR_US:
			if (!*optarg) {
				usage_hint("%s--master-addr is empty", "");
				return EXIT_USAGE;
			}
			o->master_addr = optarg;
			o->master_addr_given = true;
			break;
		case OPT_MASTER_PORT:
		case OPT_MASTER_PORT_US:
			if (parse_int(optarg, 1, 65535, &v)) {
				usage_hint("invalid port '%s' (expected 1 to "
					   "65535)", optarg);
				return EXIT_USAGE;
			}
			o->master_port = (int)v;
			o->master_port_given = true;
			break;
		case OPT_RAW:
			o->raw = true;
			break;
		case OPT_RANKS:
			o->ranks_arg = optarg;
			break;
		case OPT_STDIN:
			if (!strcmp(optarg, "all"))
				o->stdin_rank = STDIN_ALL;
			else if (!strcmp(optarg, "none"))
				o->stdin_rank = STDIN_NONE;
			else if (optarg[0] >= '0' && optarg[0] <= '9' &&
				 !parse_int(optarg, 0, INT_MAX, &v))
				o->stdin_rank = (int)v;  /* checked in input.c */
			else {
				usage_hint("--stdin '%s': expected a rank (0, "
					   "1, ...), all or none", optarg);
				return EXIT_USAGE;
			}
			break;
		case OPT_OUTPUT_DIR:
			o->output_dir = optarg;
			break;
		case OPT_TIMESTAMPS:
			o->timestamps = true;
			break;
		case OPT_BUFFERED:
			o->buffered = true;
			break;
		case OPT_COLOR:
			if (!strcmp(optarg, "auto"))
				o->color = -1;
			else if (!strcmp(optarg, "always"))
				o->color = 1;
			else if (!strcmp(optarg, "never"))
				o->color = 0;
			else {
				usage_hint("--color '%s': expected auto, "
					   "always or never", optarg);
				return EXIT_USAGE;
			}
			break;
		case OPT_TIMEOUT:
			if (parse_duration_opt("--timeout", optarg, true,
					       &o->timeout))
				return EXIT_USAGE;
			break;
		case OPT_STALL_TIMEOUT:
			if (parse_duration(optarg, &o->stall_timeout) ||
			    o->stall_timeout <= 0) {
				usage_hint("invalid --stall-timeout '%s' "
					   "(expected a duration like 30s, 5m)",
					   optarg);
				return EXIT_USAGE;
			}
			break;
		case OPT_TRACE:
			if (!*optarg) {
				usage_hint("%s--trace needs a file name", "");
				return EXIT_USAGE;
			}
			o->trace = optarg;
			break;
		case OPT_HTML:
			o->html = *optarg ? optarg : NULL;  /* "": none */
			break;
		case OPT_GRACE:
			if (parse_duration_opt("--grace", optarg, false,
					       &o->grace))
				return EXIT_USAGE;
			break;
		case OPT_REPORT:
			o->report = optarg;
			break;
		case OPT_JUNIT:
			o->junit = *optarg ? optarg : NULL;  /* "": none */
			break;
		case OPT_TAP:
			o->tap = *optarg ? optarg : NULL;
			break;
		case OPT_SUMMARY:
			verbosity++;
			break;
		case OPT_QUIET:
			verbosity--;
			break;
		case OPT_MODULE:
			o->module = true;
			break;
		case OPT_LOG_DIR:
		case OPT_LOG_DIR_US:
			if (!*optarg) {
				usage_hint("%s--log-dir is empty", "");
				return EXIT_USAGE;
			}
			o->log_dir = optarg;
			break;
		case OPT_REDIRECTS:
		case OPT_TEE:
			if (parse_std_map(c == OPT_REDIRECTS ? "--redirects" :
					  "--tee", optarg, c == OPT_REDIRECTS ?
					  &o->redirects : &o->tee))
				return EXIT_USAGE;
			break;
		case OPT_NO_PYTHON:
		case OPT_NO_PYTHON_US:
			o->no_python = true;
			break;
		case OPT_PYTHON:
			if (!*optarg) {
				usage_hint("%s--python is empty", "");
				return EXIT_USAGE;
			}
			o->python = optarg;
			break;
		case OPT_PRELOAD:
			o->preload = optarg;   /* checked by preload.c */
			break;
		case OPT_STANDALONE:
			standalone = true;
			break;
		case OPT_MAX_RESTARTS:
		case OPT_MAX_RESTARTS_US:
			if (parse_int(optarg, 0, 1000000, &v)) {
				usage_hint("invalid --max-restarts '%s' "
					   "(expected 0 or more)", optarg);
				return EXIT_USAGE;
			}
			o->max_restarts = (int)v;
			break;
		case OPT_HELP:
			print_help();
			return -1;
		case OPT_VERSION:
			printf("distrun %s\n", DISTRUN_VERSION);
			return -1;
		case ':':
			usage_hint("option '%s' needs an argument",
				   argv[optind - 1]);
			return EXIT_USAGE;
		default:
			if (optopt) {
				char opt[3] = { '-', (char)optopt, 0 };
				usage_hint("unknown option '%s'", opt);
			} else {
				usage_hint("unknown option '%s'",
					   argv[optind - 1]);
			}
			return EXIT_USAGE;
		}
	}
	/* -v and -q count against each other: above 0 the summary always,
	 * 0 on failure (the default), below 0 never. */
	o->summary = verbosity > 0;
	o->quiet = verbosity < 0;
	if (optind >= argc) {
		usage_hint("%smissing the program to run", "");
		return EXIT_USAGE;
	}
	if (o->module && o->no_python) {
		usage_hint("%s-m/--module runs PROGRAM as a Python module; "
			   "--no-python runs PROGRAM itself: give one", "");
		return EXIT_USAGE;
	}
	if (standalone) {
		/* torchrun's --standalone: this node alone. */
		if (o->max_nodes > 1 || o->node_rank > 0 || o->rdzv_endpoint ||
		    o->rdzv_backend) {
			usage_hint("%s--standalone is one node: it cannot go "
				   "with --nnodes above 1, --node-rank above 0 "
				   "or --rdzv-*", "");
			return EXIT_USAGE;
		}
		o->min_nodes = o->max_nodes = 1;
	}
	/* Several nodes restart together only through etcd's rendezvous
	 * (nodes.c: a new round; a static one cannot number them again). */
	if (o->max_restarts > 0 && !(o->rdzv_backend &&
				     !strcmp(o->rdzv_backend, "etcd")) &&
	    (o->max_nodes > 1 || o->node_rank > 0 || o->rdzv_endpoint ||
	     o->rdzv_backend)) {
		usage_hint("%s--max-restarts restarts a job on one node only, "
			   "or on several through --rdzv-backend etcd; not with "
			   "a static rendezvous (--nnodes above 1, --node-rank, "
			   "--rdzv-endpoint)", "");
		return EXIT_USAGE;
	}
	if (!o->nranks)
		o->nranks = 1;  /* as torchrun's default */
	if (o->nsizes > 1)
		o->nranks = MAX_RANKS;  /* --ranks is checked per size */
	o->argv = argv + optind;
	o->argc = argc - optind;
	if (o->ranks_arg) {
		if (parse_ranks(o, o->ranks_arg))
			return EXIT_USAGE;
	} else {
		o->show = malloc(o->nranks);
		if (!o->show) {
			perror("distrun");
			return EXIT_USAGE;
		}
		memset(o->show, 1, o->nranks);
	}
	if (o->log_dir && o->output_dir) {
		usage_hint("%s--log-dir (torchrun's layout) and --output-dir "
			   "(rank.N.stdout): give one", "");
		return EXIT_USAGE;
	}
	return 0;
}

bool opts_console(const struct opts *o, int r, int s)
{
	int bit = 1 << s;

	return !(o->redirects && (o->redirects[r] & bit)) ||
	       (o->tee && (o->tee[r] & bit));
}

void opts_release(struct opts *o)
{
	free(o->show);
	o->show = NULL;
	free(o->sizes);
	o->sizes = NULL;
	free(o->redirects);
	free(o->tee);
	o->redirects = o->tee = NULL;
	free(o->argv_alloc);
	o->argv_alloc = NULL;
}
