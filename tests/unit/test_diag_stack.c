/*
 * test_diag_stack.c - cmd/diag/diag_stacks.c's one-line summary of a gdb
 * stack and the key by which the stall report groups ranks: ranks in the
 * same call from the same line share the key whether gdb caught them in
 * the futex or between two of its timeouts, deeper or shallower inside
 * the library; a different line or call gives another key, and so does
 * another line of the program's own code where a rank is caught in it.
 */
#include "runner.h"
#include "../../cmd/diag/diag_stacks.c"

/* A stack of the given gdb frame lines, summarised. */
static void summarise(struct stack *st, const char **frames, int n)
{
	*st = (struct stack){ 0 };
	st->frames = calloc((size_t)n, sizeof(*st->frames));
	for (int i = 0; i < n; i++)
		st->frames[st->nframes++] = strdup(frames[i]);
	gdb_summary(st);
}

static const char *in_futex[] = {
	"#0  syscall () at ../sysdeps/unix/sysv/linux/x86_64/syscall.S:38",
	"#1  0x1 in futex (w=0x7f) at runtime/shm.c:115",
	"#2  dri_shm_wait (timeout_ms=20) at runtime/shm.c:823",
	"#3  0x2 in dri_cs_lean (g=0x1) at runtime/coll_shm_quick.c:268",
	"#4  0x3 in dr_barrier (g=0x0) at runtime/coll_api.c:71",
	"#5  0x4 in main () at tests/c/diag_hang.c:93",
};

/* Between two futex timeouts, one frame less deep. */
static const char *between[] = {
	"#0  0x5 in dri_transport_flag_wait (id=0x1) at runtime/wait.c:190",
	"#1  0x2 in dri_cs_lean (g=0x1) at runtime/coll_shm_quick.c:268",
	"#2  0x3 in dr_barrier (g=0x0) at runtime/coll_api.c:71",
	"#3  0x4 in main () at tests/c/diag_hang.c:93",
};

/* The same call from another line. */
static const char *elsewhere[] = {
	"#0  syscall () at ../sysdeps/unix/sysv/linux/x86_64/syscall.S:38",
	"#1  0x3 in dr_barrier (g=0x0) at runtime/coll_api.c:71",
	"#2  0x4 in main () at tests/c/diag_hang.c:118",
};

static int test_key_leaves_out_the_innermost_frame(void)
{
	struct stack a, b, c;

	summarise(&a, in_futex, 6);
	summarise(&b, between, 4);
	summarise(&c, elsewhere, 3);
	CHECKF(!strcmp(a.summary, "#0 syscall (syscall.S:38)  "
		       "#4 dr_barrier (coll_api.c:71)  #5 main (diag_hang.c:93)"),
	       "%s", a.summary);
	CHECKF(!strcmp(b.summary, "#0 dri_transport_flag_wait (wait.c:190)  "
		       "#2 dr_barrier (coll_api.c:71)  #3 main (diag_hang.c:93)"),
	       "%s", b.summary);
	CHECK(a.key && b.key && c.key);
	CHECKF(!strcmp(a.key, "dr_barrier (coll_api.c:71) < main (diag_hang.c:93)"),
	       "%s", a.key);
	CHECK(!strcmp(a.key, b.key));
	CHECK(strcmp(a.key, c.key));
	/* The caller frames as a group shows them when #0 differs. */
	CHECKF(!strcmp(strstr(a.summary, "  #") + 2,
		       "#4 dr_barrier (coll_api.c:71)  #5 main (diag_hang.c:93)"),
	       "%s", a.summary);
	diag_stack_release(&a);
	diag_stack_release(&b);
	diag_stack_release(&c);
	return 0;
}

/* A stack of library insides alone has no caller frames: the summary
 * itself groups it. */
static int test_no_caller_frames_no_key(void)
{
	static const char *inside[] = {
		"#0  syscall () at ../sysdeps/unix/sysv/linux/x86_64/syscall.S:38",
		"#1  0x1 in start_thread (arg=0x0) at ./nptl/pthread_create.c:442",
	};
	struct stack a;

	summarise(&a, inside, 2);
	CHECKF(!strcmp(a.summary, "#0 syscall (syscall.S:38)"), "%s",
	       a.summary);
	CHECK(a.key == NULL);
	diag_stack_release(&a);
	return 0;
}

/* Ranks in the program's own code: its innermost frame is part of the
 * key, so two lines of one function called from one place differ. */
static int test_program_frame0_in_the_key(void)
{
	static const char *at40[] = {
		"#0  stuck (n=3) at tests/c/diag_hang.c:40",
		"#1  0x4 in main () at tests/c/diag_hang.c:100",
	};
	static const char *at42[] = {
		"#0  stuck (n=3) at tests/c/diag_hang.c:42",
		"#1  0x4 in main () at tests/c/diag_hang.c:100",
	};
	struct stack a, b;

	summarise(&a, at40, 2);
	summarise(&b, at42, 2);
	CHECK(a.key && b.key);
	CHECKF(!strcmp(a.key, "stuck (diag_hang.c:40) < main (diag_hang.c:100)"),
	       "%s", a.key);
	CHECK(strcmp(a.key, b.key));
	diag_stack_release(&a);
	diag_stack_release(&b);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_key_leaves_out_the_innermost_frame),
	UNIT(test_no_caller_frames_no_key),
	UNIT(test_program_frame0_in_the_key),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
