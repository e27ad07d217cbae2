/*
 * clone_into.c - starting a child directly inside the job's cgroup.
 *
 * A rank that moves itself into the cgroup (a write to cgroup.procs
 * between vfork and exec) makes the kernel take the cgroup threadgroup
 * lock for writing, and the first such write in a while waits for an RCU
 * grace period: ~15 ms here, which doubled the start of a 4-rank job.
 * clone3's CLONE_INTO_CGROUP places the child in the cgroup as it is
 * created, under the read side of that lock, so no grace period is paid.
 *
 * glibc has no clone3 wrapper, and a child that shares our memory (as
 * vfork's does, so that no page table is copied) must run on a stack of
 * its own: a few instructions per architecture make the call, run fn(arg)
 * on the given stack in the child, and end the child with fn's value.
 * The parent is suspended (CLONE_VFORK) until the child execs or exits,
 * so one static stack serves every child.  fn must only make system
 * calls: it shares the parent's memory, errno and thread pointer, and it
 * must return (not _exit) so that nothing between it and the kernel
 * needs a stack that belongs to a thread the runtime knows.
 *
 * Where this is not possible (another architecture, a kernel before 5.7,
 * a seccomp filter that answers ENOSYS, a cgroup we may not place into)
 * clone_into() returns -errno and the caller moves the child the old way.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launcher.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#define CLONE3_VM 0x00000100ull
#define CLONE3_VFORK 0x00004000ull
#define CLONE3_INTO_CGROUP 0x200000000ull

/* struct clone_args of <linux/sched.h>, as of Linux 5.7 (CLONE_ARGS_SIZE_VER2) */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal;
	uint64_t stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

/* ThreadSanitizer cannot follow a child that runs on our memory behind
 * its back; vfork, which it knows, serves there. */
#if defined(__SANITIZE_THREAD__)
#define CLONE_INTO_OK 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CLONE_INTO_OK 0
#endif
#endif

#ifndef CLONE_INTO_OK
#if defined(__x86_64__) || defined(__aarch64__)
#define CLONE_INTO_OK 1
#else
#define CLONE_INTO_OK 0
#endif
#endif

#if CLONE_INTO_OK
/* long clone3_run(args, size, fn, arg): the raw system call; in the child,
 * fn(arg) on the new stack, then exit with its value. */
long clone3_run(struct clone3_args *args, size_t size, int (*fn)(void *),
		void *arg);
#if defined(__x86_64__)
__asm__(".text\n"
	".globl clone3_run\n"
	".hidden clone3_run\n"
	".type clone3_run,@function\n"
	"clone3_run:\n"
	"	mov %rdx, %r8\n"        /* fn and arg survive the syscall */
	"	mov %rcx, %r9\n"
	"	mov $435, %eax\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz 1f\n"               /* the parent, or an error */
	"	xor %ebp, %ebp\n"       /* the child: the end of its frames */
	"	mov %r9, %rdi\n"
	"	call *%r8\n"
	"	mov %eax, %edi\n"
	"	mov $60, %eax\n"        /* exit */
	"	syscall\n"
	"	hlt\n"
	"1:	ret\n"
	".size clone3_run, .-clone3_run\n");
#else /* __aarch64__ */
__asm__(".text\n"
	".globl clone3_run\n"
	".hidden clone3_run\n"
	".type clone3_run,%function\n"
	"clone3_run:\n"
	"	mov x10, x2\n"
	"	mov x11, x3\n"
	"	mov x8, #435\n"
	"	svc #0\n"
	"	cbnz x0, 1f\n"
	"	mov x29, #0\n"
	"	mov x30, #0\n"
	"	mov x0, x11\n"
	"	blr x10\n"
	"	mov x8, #93\n"          /* exit */
	"	svc #0\n"
	"	brk #0\n"
	"1:	ret\n"
	".size clone3_run, .-clone3_run\n");
#endif

static unsigned char child_stack[64 * 1024] __attribute__((aligned(64)));
#endif

pid_t clone_into(int cgroup_dirfd, int (*fn)(void *), void *arg)
{
#if CLONE_INTO_OK
	struct clone3_args ca;
	long r;

	memset(&ca, 0, sizeof(ca));
	ca.flags = CLONE3_VM | CLONE3_VFORK | CLONE3_INTO_CGROUP;
	ca.exit_signal = SIGCHLD;
	ca.stack = (uintptr_t)child_stack;
	ca.stack_size = sizeof(child_stack);
	ca.cgroup = (uint64_t)cgroup_dirfd;
	r = clone3_run(&ca, sizeof(ca), fn, arg);
	return (pid_t)r;
#else
	(void)cgroup_dirfd, (void)fn, (void)arg;
	return -ENOSYS;
#endif
}
