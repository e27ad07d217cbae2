/*
 * port.c - choosing MASTER_PORT so that concurrent jobs never share one,
 * and so that nobody else can take it before rank 0 serves it.
 *
 * When rank 0 is a libdistrun program (port_takes_fds: the program file
 * names the variable below, or links libdistrun.so), distrun itself
 * listens on MASTER_ADDR's addresses at the port (dri_net_listen, the
 * call rank 0's store would make) and hands the listening sockets to rank
 * 0: they are inherited, named in DISTRUN_STORE_FDS ("3" or "3,4"), and
 * the store takes them (store.c checks each is a listening TCP socket on
 * MASTER_PORT).  So the port is listened on from before any rank exists
 * to the end of the job: no other process can bind it in between, and a
 * restarted rank 0 inherits the same sockets.
 *
 * Any other program (torch's own TCPStore binds MASTER_PORT itself) gets
 * the older scheme: distrun binds a TCP socket to 0.0.0.0 and the port
 * with SO_REUSEADDR, never listens on it, and keeps it until the job
 * ends; the kernel then hands the port to no other port-0 bind and no
 * outgoing connect, while rank 0 (SO_REUSEADDR too) can still bind and
 * listen.  That leaves a window a local user can race (bind the port with
 * SO_REUSEADDR and listen first): docs/security.md says so.
 *
 * Two jobs given the same --master-port must not both start.  A listening
 * socket settles it by itself, but the older scheme needs a lock: an
 * abstract Unix socket "\0distrun/port/N", taken in both schemes.  Its
 * namespace is the network namespace, as the port's is; it has no file
 * and goes with the process, however distrun dies.  Any user can create
 * such a name, so a name held by another user is not believed: the lock
 * listens, and whoever finds the name taken connects and asks the holder's
 * uid (SO_PEERCRED).  Only our own uid's lock stops us; a stranger's sends
 * us to the per-user name "\0distrun/port/N/UID", and when that is
 * squatted too we go on without a lock, saying so.
 *
 * Every socket here is close-on-exec; spawn.c clears that for rank 0
 * alone on the listening ones.
 */
#include <arpa/inet.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "launcher.h"
#include "contract.h"

/* The listening sockets handed to rank 0, or none. */
static int store_fds[DRI_NET_MAXFD];
static int nstore_fds;

/* Binds and listens on one lock name; the socket, or -1 with errno. */
static int lock_bind(const struct sockaddr_un *sa, socklen_t len)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), e;

	if (fd < 0)
		return -1;
	/* listen: so that others can ask whose it is.  Nobody accepts;
	 * a check queues one connection until its checker closes it. */
	if (!bind(fd, (const struct sockaddr *)sa, len) && !listen(fd, SOMAXCONN))
		return fd;
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

/* The uid holding a lock name (listening), or -1 when it cannot be told:
 * nobody listens there (not a distrun lock), or its queue is full. */
static long lock_owner(const struct sockaddr_un *sa, socklen_t len)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	long uid = -1;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	if (!connect(fd, (const struct sockaddr *)sa, len) &&
	    !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl))
		uid = (long)cr.uid;
	close(fd);
	return uid;
}

/* Takes the port's lock: 0 and *fd (-1: every name is a stranger's, we
 * go on without; *stranger: a name was another user's), or -1 with errno EADDRINUSE (another job of ours has
 * it) or another errno (no Unix sockets: no lock). */
static int port_lock(int port, int *fd, bool *stranger)
{
	uid_t me = getuid();
	int held = -1;

	*fd = -1;
	*stranger = false;
	/* Both names are looked at: a job of ours that found the first
	 * squatted holds the second. */
	for (int k = 0; k < 2; k++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		socklen_t len;
		long uid;
		int n = k ? snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
				     "distrun/port/%d/%lu", port,
				     (unsigned long)me) :
			    snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
				     "distrun/port/%d", port);

		/* sun_path[0] = 0: the abstract namespace. */
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
		if (held < 0) {
			held = lock_bind(&sa, len);
			if (held >= 0)
				continue;
			if (errno != EADDRINUSE)
				return -1;
		}
		uid = lock_owner(&sa, len);
		if (uid == (long)me) {
			if (held >= 0)
				close(held);
			errno = EADDRINUSE;
			return -1;
		}
		*stranger = true;
	}
	*fd = held;
	return 0;
}

/* Binds 0.0.0.0:port (0: any) with SO_REUSEADDR; fills *port. */
static int port_bind(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int one = 1, fd, e;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	sa.sin_port = htons((uint16_t)*port);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len))
		goto fail;
	*port = ntohs(sa.sin_port);
	return fd;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

/* Listens on MASTER_ADDR's addresses at port (0: any); fills *port and
 * store_fds, or -1 with errno. */
static int port_listen(const char *host, int *port)
{
	dr_err err = dri_net_listen(host, *port, store_fds, &nstore_fds);

	if (err) {
		nstore_fds = 0;
		errno = err == DR_ECONN ? EADDRINUSE : EADDRNOTAVAIL;
		return -1;
	}
	*port = dri_net_port(store_fds[0]);
	return 0;
}

static void port_unlisten(void)
{
	while (nstore_fds > 0)
		close(store_fds[--nstore_fds]);
}

/* The program PATH would run for name (execvp's search), malloc'd, or
 * NULL: spawn.c says why when it runs it. */
static char *port_find_program(const char *name)
{
	char *path;
	bool denied;

	if (strchr(name, '/'))
		return strdup(name);
	return child_which(name, &path, &denied) ? NULL : path;
}

static const char *const port_marks[] = { DRI_ENV_STORE_FDS, "libdistrun.so" };

static bool has_mark(const char *p, size_t n)
{
	for (size_t i = 0; i < 2; i++)
		if (memmem(p, n, port_marks[i], strlen(port_marks[i])))
			return true;
	return false;
}

/* has_mark over the parts of an ELF file where a mark can be: the
 * dynamic strings (a DT_NEEDED of libdistrun.so) and the read-only data
 * (the variable's name in a static libdistrun), not the code: a 6.8 MB
 * python3 is 2 MB of them, 0.2 ms instead of 1.6.  The whole file where
 * the section headers are missing, odd or of another class or order. */
static bool elf_has_mark(const char *map, size_t size)
{
	const unsigned char data = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ?
				   ELFDATA2LSB : ELFDATA2MSB;
	Elf64_Ehdr eh;
	Elf64_Shdr sh, names;
	bool looked = false;

	if (size < sizeof(eh))
		return has_mark(map, size);
	memcpy(&eh, map, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != data ||
	    eh.e_shentsize != sizeof(sh) || !eh.e_shoff || eh.e_shoff > size ||
	    eh.e_shnum > (size - eh.e_shoff) / sizeof(sh) ||
	    eh.e_shstrndx >= eh.e_shnum)
		return has_mark(map, size);
	memcpy(&names, map + eh.e_shoff + eh.e_shstrndx * sizeof(sh), sizeof(sh));
	if (names.sh_offset > size || names.sh_size > size - names.sh_offset)
		return has_mark(map, size);
	for (size_t i = 0; i < eh.e_shnum; i++) {
		const char *name;

		memcpy(&sh, map + eh.e_shoff + i * sizeof(sh), sizeof(sh));
		if (sh.sh_type == SHT_NOBITS || sh.sh_name >= names.sh_size ||
		    sh.sh_offset > size || sh.sh_size > size - sh.sh_offset)
			continue;
		name = map + names.sh_offset + sh.sh_name;
		if (!memchr(name, 0, names.sh_size - sh.sh_name))
			continue;
		if (strcmp(name, ".dynstr") && strncmp(name, ".rodata", 7))
			continue;
		looked = true;
		if (has_mark(map + sh.sh_offset, sh.sh_size))
			return true;
	}
	return looked ? false : has_mark(map, size);
}

/* Whether rank 0's program takes the listening sockets: an ELF file
 * (not a script, not Python, whose torch binds the port itself) that
 * holds the name of the variable (libdistrun linked in statically) or
 * of the shared library.  A wrapper script gets the older scheme. */
static bool port_takes_fds(const char *name)
{
	char *path = port_find_program(name);
	struct stat st;
	bool yes = false;
	void *map;
	int fd;

	fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	free(path);
	if (fd < 0)
		return false;
	/* 1 GiB: a larger program is not looked through. */
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < 4 ||
	    st.st_size > (off_t)1 << 30)
		goto out;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		goto out;
	if (!memcmp(map, "\177ELF", 4))
		yes = elf_has_mark(map, (size_t)st.st_size);
	munmap(map, (size_t)st.st_size);
out:
	close(fd);
	return yes;
}

/* Holds port (0: picks one) in the scheme chosen; fills *port. */
static int port_hold(struct job *job, bool handoff, int *port)
{
	if (handoff)
		return port_listen(job->o->master_addr, port);
	job->port_fd = port_bind(port);
	return job->port_fd < 0 ? -1 : 0;
}

static void port_unhold(struct job *job)
{
	port_unlisten();
	if (job->port_fd >= 0)
		close(job->port_fd);
	job->port_fd = -1;
}

int port_reserve(struct job *job)
{
	bool handoff = port_takes_fds(job->o->argv[0]);
	int port = job->o->master_port;
	bool stranger = false;

	job->port_fd = job->port_lock_fd = -1;
	if (port) {
		if (port_lock(port, &job->port_lock_fd, &stranger) &&
		    errno == EADDRINUSE) {
			fprintf(stderr, "distrun: --master-port %d is in use "
				"by another distrun job\n", port);
			return -1;
		}
		/* Without the lock (no Unix sockets?) the bind still
		 * catches a port that is listened on. */
		if (port_hold(job, handoff, &port)) {
			fprintf(stderr, "distrun: --master-port %d: %s%s\n",
				port, strerror(errno), errno == EADDRINUSE ?
				" (another program listens on it)" : "");
			goto fail;
		}
		goto out;
	}
	/* A port another job of ours has locked (its --master-port, when
	 * nothing was bound to it yet) is skipped. */
	for (int tries = 0; tries < 64; tries++) {
		port = 0;
		if (port_hold(job, handoff, &port))
			break;
		if (!port_lock(port, &job->port_lock_fd, &stranger) ||
		    errno != EADDRINUSE)
			goto out;
		port_unhold(job);
	}
	fprintf(stderr, "distrun: cannot reserve a MASTER_PORT: %s "
		"(use --master-port)\n", strerror(errno));
	return -1;
out:
	if (job->port_lock_fd < 0 && stranger)
		fprintf(stderr, "distrun: warning: the lock names of port %d "
			"are held by another user; going on without a lock\n",
			port);
	job->master_port = port;
	return 0;
fail:
	if (job->port_lock_fd >= 0)
		close(job->port_lock_fd);
	job->port_lock_fd = -1;
	port_unhold(job);
	return -1;
}

int port_store_fds(const int **fds)
{
	*fds = store_fds;
	return nstore_fds;
}
