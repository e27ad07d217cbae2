/*
 * rdzv_env.c - where a rank learns its place in the job and where the
 * store is, whoever started it: distrun or torchrun (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT), Open MPI's mpirun, MPICH's mpiexec (hydra),
 * a PMIx launcher, or Slurm's srun; and the two ways to meet without
 * MASTER_*: a file://PATH init method, and, when every rank is on this
 * host, a private per-user file named after the launcher's job id.
 *
 * Rank and size come from one source, the first of these whose rank
 * variable is set: RANK/WORLD_SIZE, then OMPI_COMM_WORLD_RANK/SIZE, then
 * PMI_RANK/PMI_SIZE (hydra), then SLURM_PROCID/SLURM_NTASKS, then
 * PMIX_RANK (whose size only WORLD_SIZE can give).  Never a rank from one
 * launcher and a size from another: inside a Slurm allocation mpirun's
 * ranks also see the allocation's SLURM_NTASKS.
 *
 * The published file holds "HOST:PORT PID NODE\n" and is renamed into
 * place, so a reader sees all of it or nothing.  Rank 0 removes it once
 * every rank has joined (init.c calls dri_rdzv_joined after the address
 * exchange), or when init fails.  A rank 0 killed before that leaves the
 * file; the next job's rank 0 removes such files in the private directory
 * when the PID they name is gone, and a reader on the writer's host
 * ignores a file whose PID is gone (a file:// path reused after a crash)
 * and waits for this job's.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "rdzv.h"

static char launcher_seen[64];

const char *dr_get_launcher(void)
{
	return launcher_seen;
}

/* ------------------------------------------------------- environment */

static const char *env(const char *name)
{
	const char *s = getenv(name);

	return s && *s ? s : NULL;
}

/* Notes "NAME=value" in the list of what was found. */
static void note(char *found, size_t size, const char *name)
{
	const char *v = env(name);
	size_t used = strlen(found);

	if (v && used + 1 < size)
		snprintf(found + used, size - used, "%s%s=%s", used ? ", " : "",
			 name, v);
}

/* An integer variable in [lo, hi]; DR_EENV naming it and its value
 * otherwise, or (missing) naming what was found instead. */
static dr_err env_int(const char *name, long lo, long hi, int *out,
		      const char *found)
{
	const char *s = env(name);
	char *end;
	long v;

	if (!s)
		return dri_fail(DR_EENV, "environment variable %s is not set "
				"(found %s; start the program with `distrun -n "
				"N`, or set MASTER_ADDR, MASTER_PORT, RANK and "
				"WORLD_SIZE)", name, *found ? found :
				"no launcher's variables");
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi)
		return dri_fail(DR_EENV, "environment variable %s='%s' is not "
				"an integer in [%ld, %ld]", name, s, lo, hi);
	*out = (int)v;
	return DR_OK;
}

/* The process id of the nearest ancestor whose command is comm (hydra's
 * proxy: every rank on a host has the same one, even behind a shell), and
 * its start time, so a reused pid is another identity; 0 if none. */
static long ancestor(const char *comm, unsigned long long *start)
{
	pid_t pid = getppid();

	for (int depth = 0; depth < 16 && pid > 1; depth++) {
		char path[64], buf[1024], *rp;
		FILE *f;
		size_t n;
		int ppid = 0;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		f = fopen(path, "r");
		if (!f)
			return 0;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		rp = strrchr(buf, ')');
		if (!rp || !strchr(buf, '('))
			return 0;
		*rp = 0;
		/* fields after comm: state ppid ... starttime is field 22 */
		if (sscanf(rp + 2, "%*c %d", &ppid) != 1)
			return 0;
		if (!strcmp(strchr(buf, '(') + 1, comm)) {
			char *p = rp + 2;
			for (int i = 3; i < 22 && p; i++)
				p = strchr(p + 1, ' ');
			*start = p ? strtoull(p + 1, NULL, 10) : 0;
			return pid;
		}
		pid = ppid;
	}
	return 0;
}

/* A launcher: which variables give rank, size, local size and the job. */
struct launcher {
	const char *name;
	const char *rank, *size, *local_rank, *local_size;
};

static const struct launcher launchers[] = {
	{ "torchrun or distrun", "RANK", "WORLD_SIZE", "LOCAL_RANK",
	  "LOCAL_WORLD_SIZE" },
	{ "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	  "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE" },
	{ "MPICH (hydra)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
	  "MPI_LOCALNRANKS" },
	{ "Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL },
	{ "PMIx", "PMIX_RANK", "WORLD_SIZE", NULL, NULL },
};

/* Every variable worth naming in a message, in the order above. */
static void note_all(char *found, size_t size)
{
	static const char *const names[] = {
		"RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
		"MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
		"OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
		"MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS",
		"SLURM_STEP_NUM_NODES", "SLURM_JOB_ID", "SLURM_STEP_ID",
		"PMIX_RANK", "PMIX_NAMESPACE",
	};

	found[0] = 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		note(found, size, names[i]);
}

/* Whether every rank runs on this host, as far as the launcher says. */
static int all_local(const struct launcher *l, int size)
{
	const char *s;

	if (!strcmp(l->name, "Slurm")) {
		s = env("SLURM_STEP_NUM_NODES");
		if (!s)
			s = env("SLURM_NNODES");
		return s && !strcmp(s, "1");
	}
	s = l->local_size ? env(l->local_size) : NULL;
	return s && atoi(s) == size;
}

/* The job's identity as the launcher gives it to every rank alike; ""
 * when it gives none. */
static void job_identity(const struct launcher *l, char *buf, size_t size)
{
	const char *a, *b;
	unsigned long long start = 0;
	long pid;

	buf[0] = 0;
	if (!strcmp(l->name, "Open MPI")) {
		a = env("OMPI_MCA_ess_base_jobid");
		b = env("OMPI_MCA_orte_hnp_uri");
		if (!a && !b)
			a = env("PMIX_NAMESPACE");
		if (a || b)
			snprintf(buf, size, "ompi/%s/%s", a ? a : "",
				 b ? b : "");
	} else if (!strcmp(l->name, "MPICH (hydra)")) {
		if ((a = env("PMI_KVSNAME")))
			snprintf(buf, size, "hydra/%s", a);
		else if ((pid = ancestor("hydra_pmi_proxy", &start)))
			snprintf(buf, size, "hydra/%ld/%llu", pid, start);
	} else if (!strcmp(l->name, "Slurm")) {
		a = env("SLURM_JOB_ID");
		if (!a)
			a = env("SLURM_JOBID");
		b = env("SLURM_STEP_ID");
		if (!b)
			b = env("SLURM_STEPID");
		if (a && b)
			snprintf(buf, size, "slurm/%s.%s", a, b);
	} else if (!strcmp(l->name, "PMIx")) {
		if ((a = env("PMIX_NAMESPACE")))
			snprintf(buf, size, "pmix/%s", a);
	}
}

/* ---------------------------------------------------------- the plan */

/* Parses "tcp://host:port" (host may be "[v6]"). */
/* url is SCHEME://HOST:PORT[/...]; skip is the length of "SCHEME://". */
static dr_err parse_tcp_url(const char *url, size_t skip, char *host,
			    size_t hsize, int *port)
{
	const char *p = url + skip, *colon;
	char *end;
	long v;
	size_t hl;

	if (*p == '[') {
		const char *rb = strchr(p, ']');
		if (!rb || rb[1] != ':')
			goto bad;
		p++;
		hl = (size_t)(rb - p);
		colon = rb + 1;
	} else {
		colon = strrchr(p, ':');
		if (!colon)
			goto bad;
		hl = (size_t)(colon - p);
	}
	if (!hl || hl >= hsize)
		goto bad;
	memcpy(host, p, hl);
	host[hl] = 0;
	errno = 0;
	v = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || (*end && *end != '?' && *end != '/') ||
	    v < 1 || v > 65535)
		goto bad;
	*port = (int)v;
	return DR_OK;
bad:
	return dri_fail(DR_EINVAL, "init_method '%s': expected %.*sHOST:PORT "
			"with a port in 1..65535", url, (int)skip, url);
}

/* 64-bit FNV-1a: names the published file after the job identity.  Not a
 * secret: the directory is private, the name only has to differ. */
static uint64_t fnv1a(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

/* The private per-user directory: $XDG_RUNTIME_DIR/distrun or
 * /tmp/distrun-UID, made 0700 if missing, refused unless it is a real
 * directory of ours that nobody else can enter. */
static dr_err private_dir(char *buf, size_t size)
{
	const char *xdg = env("XDG_RUNTIME_DIR");
	struct stat st;

	/* A session without one (ssh, a batch node) may still inherit the
	 * variable: fall back to /tmp rather than fail. */
	if (xdg && (stat(xdg, &st) < 0 || !S_ISDIR(st.st_mode)))
		xdg = NULL;
	if (xdg)
		snprintf(buf, size, "%s/distrun", xdg);
	else
		snprintf(buf, size, "/tmp/distrun-%u", (unsigned)geteuid());
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return dri_fail(DR_ESYS, "cannot create the directory %s for "
				"the rendezvous file: %s", buf, dri_strerror(errno));
	if (lstat(buf, &st) < 0)
		return dri_fail(DR_ESYS, "%s: %s", buf, dri_strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return dri_fail(DR_ESYS, "%s is not a directory (a symbolic "
				"link or a file): refusing it for the rendezvous "
				"file", buf);
	if (st.st_uid != geteuid())
		return dri_fail(DR_ESYS, "%s belongs to uid %u, not to us (uid "
				"%u): refusing it for the rendezvous file", buf,
				(unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & 077)
		return dri_fail(DR_ESYS, "%s has mode %04o: others can reach it; "
				"refusing it for the rendezvous file (chmod 700 "
				"it)", buf, (unsigned)(st.st_mode & 07777));
	return DR_OK;
}

dr_err dri_rdzv_plan_make(const char *method, int rank, int size,
			  dri_rdzv_plan *p)
{
	const struct launcher *l = NULL;
	char found[768];
	const char *a;
	dr_err err;

	memset(p, 0, sizeof(*p));
	p->local_rank = p->local_size = -1;
	launcher_seen[0] = 0;
	note_all(found, sizeof(found));
	for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++)
		if (env(launchers[i].rank)) {
			l = &launchers[i];
			break;
		}
	if (l)
		snprintf(launcher_seen, sizeof(launcher_seen), "%s", l->name);
	if (!strncmp(method, "file://", 7)) {
		p->mode = DRI_RDZV_FILE;
		if (method[7] != '/' || strlen(method + 7) >= sizeof(p->path))
			return dri_fail(DR_EINVAL, "init_method '%s': expected "
					"file:///ABSOLUTE/PATH", method);
		snprintf(p->path, sizeof(p->path), "%s", method + 7);
	} else if (!strncmp(method, "tcp://", 6)) {
		p->mode = DRI_RDZV_SERVE;
		err = parse_tcp_url(method, 6, p->host, sizeof(p->host), &p->port);
		if (err)
			return err;
	} else if (!strncmp(method, "tcpstore://", 11)) {
		/* A TCPStore of torch's that a process of the job already
		 * serves (the distrun_torch backend passes the one torch's
		 * init_process_group made): a client of it, keys under the
		 * prefix after the port. */
		const char *slash = strchr(method + 11, '/');

		p->mode = DRI_RDZV_TORCH;
		err = parse_tcp_url(method, 11, p->host, sizeof(p->host),
				    &p->port);
		if (err)
			return err;
		if (!slash || !slash[1] || strlen(slash + 1) >= sizeof(p->prefix))
			return dri_fail(DR_EINVAL, "init_method '%s': expected "
					"tcpstore://HOST:PORT/PREFIX with a "
					"prefix of 1 to %zu bytes", method,
					sizeof(p->prefix) - 1);
		snprintf(p->prefix, sizeof(p->prefix), "%s", slash + 1);
	} else if (strcmp(method, "env://")) {
		return dri_fail(DR_EINVAL, "dr_init_process_group: init_method "
				"'%s' is not supported (use \"env://\", "
				"\"tcp://HOST:PORT\", \"file:///PATH\" or "
				"\"tcpstore://HOST:PORT/PREFIX\")",
				method);
	}

	/* Rank and size: the caller's, else the first launcher's. */
	p->rank = rank;
	p->size = size;
	if (size <= 0 && (err = env_int(l ? l->size : "WORLD_SIZE", 1, 1 << 20,
					&p->size, found)))
		return err;
	if (rank < 0 && (err = env_int(l ? l->rank : "RANK", 0, 1 << 20,
				       &p->rank, found)))
		return err;
	if (p->rank >= p->size)
		return dri_fail(DR_EENV, "RANK=%d is not below WORLD_SIZE=%d%s%s%s",
				p->rank, p->size, l ? " (from " : "",
				l ? l->name : "", l ? ")" : "");
	if (l && l->local_rank && env(l->local_rank))
		p->local_rank = atoi(env(l->local_rank));
	if (l && all_local(l, p->size))
		p->local_size = p->size;
	if (p->mode != DRI_RDZV_SERVE || p->host[0]) {
		if (p->mode == DRI_RDZV_FILE) {
			p->loopback = l && all_local(l, p->size);
			p->bind = p->loopback ? "127.0.0.1" : NULL;
		}
		return DR_OK;
	}

	/* env://: MASTER_* when given; the agent's TCPStore under torchrun. */
	if ((a = env("MASTER_ADDR")) || env("MASTER_PORT")) {
		if (!a)
			return dri_fail(DR_EENV, "environment variable "
					"MASTER_ADDR is not set but MASTER_PORT "
					"is (found %s)", found);
		if (strlen(a) >= sizeof(p->host))
			return dri_fail(DR_EENV, "MASTER_ADDR is too long");
		strcpy(p->host, a);
		err = env_int("MASTER_PORT", 1, 65535, &p->port, found);
		if (err)
			return err;
		a = env("TORCHELASTIC_USE_AGENT_STORE");
		if (a && !strcmp(a, "True")) {
			const char *run = env("TORCHELASTIC_RUN_ID");
			const char *restart = env("TORCHELASTIC_RESTART_COUNT");
			p->mode = DRI_RDZV_TORCH;
			snprintf(p->prefix, sizeof(p->prefix),
				 "distrun/%s/attempt_%s/", run ? run : "none",
				 restart ? restart : "0");
		}
		return DR_OK;
	}

	/* No MASTER_*: a private file, if every rank is here and the
	 * launcher names the job. */
	if (!l || l == &launchers[0])
		return dri_fail(DR_EENV, "environment variable MASTER_ADDR is "
				"not set (found %s; start the program with "
				"`distrun -n N`, under mpirun, mpiexec or srun, "
				"or set MASTER_ADDR, MASTER_PORT, RANK and "
				"WORLD_SIZE)", *found ? found : "no launcher's "
				"variables");
	if (p->local_size != p->size)
		return dri_fail(DR_EENV, "started by %s (found %s), with ranks "
				"on more than one host, or the launcher does not "
				"say: set MASTER_ADDR and MASTER_PORT (rank 0's "
				"host and a free port), or use init_method "
				"file:///PATH on a shared filesystem", l->name,
				found);
	job_identity(l, p->job, sizeof(p->job));
	if (!p->job[0])
		return dri_fail(DR_EENV, "started by %s (found %s), but it names "
				"no job (expected %s): set MASTER_ADDR and "
				"MASTER_PORT, or use init_method file:///PATH",
				l->name, found,
				!strcmp(l->name, "Slurm") ?
				"SLURM_JOB_ID and SLURM_STEP_ID" :
				!strcmp(l->name, "Open MPI") ?
				"OMPI_MCA_ess_base_jobid" :
				!strcmp(l->name, "PMIx") ? "PMIX_NAMESPACE" :
				"PMI_KVSNAME or a hydra_pmi_proxy parent");
	err = private_dir(p->path, sizeof(p->path));
	if (err)
		return err;
	{
		size_t n = strlen(p->path);
		snprintf(p->path + n, sizeof(p->path) - n, "/job-%016llx.addr",
			 (unsigned long long)fnv1a(p->job));
	}
	p->mode = DRI_RDZV_FILE;
	p->private_file = 1;
	p->loopback = 1;
	p->bind = "127.0.0.1";
	return DR_OK;
}

/* ------------------------------------------------ the published file */

/* Removes files in the private directory whose writer is gone (a rank 0
 * killed before everyone joined). */
static void sweep(const char *path)
{
	char dir[PATH_MAX], f[PATH_MAX + 300];
	const char *slash = strrchr(path, '/');
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char buf[128];
		long pid = 0;
		ssize_t n;
		int fd;
		const char *sp;

		if (strncmp(de->d_name, "job-", 4))
			continue;
		snprintf(f, sizeof(f), "%s/%s", dir, de->d_name);
		fd = open(f, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = 0;
		sp = strchr(buf, ' ');
		if (sp)
			pid = strtol(sp + 1, NULL, 10);
		if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH)
			unlink(f);
	}
	closedir(d);
}

/* This host's name, for the file (a reader compares it with its own
 * before it trusts the PID there). */
static void node_name(char *buf, size_t size)
{
	if (gethostname(buf, size) < 0)
		snprintf(buf, size, "?");
	buf[size - 1] = 0;
}

dr_err dri_rdzv_publish(dri_rdzv_plan *p, int port)
{
	char tmp[sizeof(p->path) + 32], line[600], node[256];
	int fd, n;

	node_name(node, sizeof(node));
	snprintf(p->host, sizeof(p->host), "%s", p->loopback ? "127.0.0.1" :
		 node);
	p->port = port;
	if (p->private_file)
		sweep(p->path);
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", p->path, (int)getpid());
	n = snprintf(line, sizeof(line), "%s:%d %d %s\n", p->host, port,
		     (int)getpid(), node);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd < 0)
		return dri_fail(DR_ESYS, "cannot create %s to publish the store's "
				"address: %s", tmp, dri_strerror(errno));
	if (write(fd, line, (size_t)n) != n || close(fd) < 0) {
		int e = errno;
		unlink(tmp);
		return dri_fail(DR_ESYS, "cannot write %s: %s", tmp, dri_strerror(e));
	}
	if (rename(tmp, p->path) < 0) {
		int e = errno;
		unlink(tmp);
		return dri_fail(DR_ESYS, "cannot rename %s to %s: %s", tmp,
				p->path, dri_strerror(e));
	}
	p->published = 1;
	return DR_OK;
}

/* Reads the published address: 1 found, 0 not (yet, or only a dead job's
 * file), -1 an error (message set). */
static int lookup(dri_rdzv_plan *p, dr_err *err)
{
	char buf[600], node[256], me[256], *colon;
	struct stat st;
	ssize_t n;
	long port, pid;
	int fd, used = 0;

	fd = open(p->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		*err = dri_fail(DR_ESYS, "cannot read the rendezvous file %s: %s",
			 p->path, dri_strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || (p->private_file && st.st_uid != geteuid())) {
		close(fd);
		*err = dri_fail(DR_ESYS, "the rendezvous file %s is not ours", p->path);
		return -1;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	colon = strchr(buf, ' ');
	if (colon)
		*colon = 0;
	if (!colon || sscanf(colon + 1, "%ld %255s%n", &pid, node, &used) != 2)
		goto bad;
	colon = strrchr(buf, ':');
	if (!colon || colon == buf || (size_t)(colon - buf) >= sizeof(p->host))
		goto bad;
	port = strtol(colon + 1, NULL, 10);
	if (port < 1 || port > 65535)
		goto bad;
	node_name(me, sizeof(me));
	if (!strcmp(node, me) && pid > 0 && kill((pid_t)pid, 0) < 0 &&
	    errno == ESRCH)
		return 0; /* its writer is gone: wait for this job's rank 0 */
	memcpy(p->host, buf, (size_t)(colon - buf));
	p->host[colon - buf] = 0;
	p->port = (int)port;
	return 1;
bad:
	*err = dri_fail(DR_EPROTO, "the rendezvous file %s does not hold \"HOST:PORT "
		 "PID NODE\" (remove it if a job left it)", p->path);
	return -1;
}

dr_err dri_rdzv_lookup(dri_rdzv_plan *p, int64_t timeout_ms)
{
	int64_t deadline = dri_now_ms() + timeout_ms;
	dr_err err = DR_OK;
	int r;

	while (!(r = lookup(p, &err))) {
		if (dri_now_ms() >= deadline)
			return dri_fail(DR_ETIMEDOUT, "rank %d: rank 0 did not "
					"publish the store's address in %s within "
					"%lld ms (is rank 0 running?)", p->rank,
					p->path, (long long)timeout_ms);
		nanosleep(&(struct timespec){ 0, 20 * 1000000 }, NULL);
	}
	return r < 0 ? err : DR_OK;
}

void dri_rdzv_identity(const dri_rdzv_plan *p, char *buf, size_t size)
{
	const char *run = getenv("TORCHELASTIC_RUN_ID");
	char id[2048];

	snprintf(id, sizeof(id), "%s|%s|%s", run ? run : "", p->job,
		 p->mode == DRI_RDZV_FILE ? p->path : "");
	/* FILE: the port is known only once rank 0 has published it. */
	dri_auth_identity(buf, size, p->mode == DRI_RDZV_FILE ? 0 : p->port, id,
			  p->size);
}

void dri_rdzv_joined(dri_rdzv_plan *p)
{
	if (p->published) {
		unlink(p->path);
		p->published = 0;
	}
}

/* Variables that choose the collectives' algorithms (which levels, which
 * path, how large a piece): with another value on one rank its calls go
 * another way than the others', and they wait for each other until the
 * timeout.  Every rank must have rank 0's. */
const char *const dri_rdzv_setting_vars[DRI_RDZV_N_SETTINGS] = {
	"DISTRUN_HIER", "DISTRUN_PRETEND_HOSTS", "DISTRUN_SHM_COLL",
	"DISTRUN_SHM_CHUNK", "DISTRUN_SHM_DIRECT", "DISTRUN_TREE_FROM",
};

int dri_rdzv_settings(char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = 0;
	for (size_t i = 0; i < DRI_RDZV_N_SETTINGS; i++) {
		const char *v = getenv(dri_rdzv_setting_vars[i]);
		int n = v && *v ? snprintf(buf + used, size - used, "%s=%s\n",
					   dri_rdzv_setting_vars[i], v)
				: snprintf(buf + used, size - used, "%s\n",
					   dri_rdzv_setting_vars[i]);

		if (n < 0 || (size_t)n >= size - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}
