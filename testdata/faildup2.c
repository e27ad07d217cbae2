/*
 * faildup2.c - an LD_PRELOAD library for the tests: in any process but
 * the one that loaded it (a vfork or fork child of the launcher, before
 * its exec), dup2 and dup3 onto fds 0-2 fail with EBADF, as when the fd
 * limit is below 3.  Shows how the launcher reports a rank that could not
 * get its stdin, stdout and stderr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

static pid_t loader;

__attribute__((constructor)) static void init(void)
{
	loader = getpid();
}

int dup2(int oldfd, int newfd)
{
	static int (*real)(int, int);

	if (newfd <= 2 && loader && getpid() != loader) {
		errno = EBADF;
		return -1;
	}
	if (!real)
		real = (int (*)(int, int))dlsym(RTLD_NEXT, "dup2");
	return real(oldfd, newfd);
}

int dup3(int oldfd, int newfd, int flags)
{
	static int (*real)(int, int, int);

	if (newfd <= 2 && loader && getpid() != loader) {
		errno = EBADF;
		return -1;
	}
	if (!real)
		real = (int (*)(int, int, int))dlsym(RTLD_NEXT, "dup3");
	return real(oldfd, newfd, flags);
}
