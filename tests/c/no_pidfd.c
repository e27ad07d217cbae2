/*
 * no_pidfd.c - runs a program as on a kernel without pidfd_open (Linux
 * before 5.3): a seccomp filter makes that call fail with ENOSYS, then
 * the program is exec'd with its arguments.
 *
 *   no_pidfd PROG [ARGS...]
 *
 * The shared-memory transport watches its peers through pidfds; without
 * them it must still see a peer whose process exited (kill(pid, 0)), and
 * shm.bats checks that through this wrapper.  Exits 126 if the filter
 * cannot be installed, 127 if PROG cannot be run.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int main(int argc, char **argv)
{
#ifdef ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & 0xffff)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
#endif

	if (argc < 2) {
		fprintf(stderr, "usage: no_pidfd PROG [ARGS...]\n");
		return 2;
	}
#ifdef ARCH
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		fprintf(stderr, "no_pidfd: seccomp: %s\n", strerror(errno));
		return 126;
	}
#else
	fprintf(stderr, "no_pidfd: no seccomp filter for this architecture\n");
	return 126;
#endif
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_pidfd: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
