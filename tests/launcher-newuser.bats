#!/usr/bin/env bats
# What a new user tripped on (issue 31): output held back by stdio, the
# torchrun flags --redirects/--tee/--log_dir, the wrong Python, start-up
# cost, prompts without a newline, the README's commands, verdicts that
# name the odd rank, test lists, command-line nits.

load common
bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_TMPDIR"
}

# --- start-up: libcurl only for --rdzv-backend etcd ----------------------

@test "the launcher is not linked with libcurl (it loads it for etcd alone)" {
	run readelf -d "$DISTRUN"
	[ "$status" -eq 0 ]
	[[ "$output" != *"libcurl"* ]]
	# What it needs at start: the C library, and jansson only where
	# its archive is missing (Makefile: JANSSON_STATIC); symbols bound
	# at start (BIND_NOW).
	run sh -c "readelf -d '$DISTRUN' | sed -n 's/.*(NEEDED).*\\[\\(.*\\)\\]/\\1/p'"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -qx 'libc.so.6' <<<"$output"
	! grep -vxE 'libc\.so\.6|libjansson\.so\.4|lib(m|dl|pthread|asan|ubsan|tsan)\.so\.[0-9]+' <<<"$output" || false
	if [ -e "$(cc -print-file-name=libjansson.a)" ]; then
		! grep -q libjansson <<<"$output" || false
	fi
	readelf -d "$DISTRUN" | grep -q 'BIND_NOW'
	# The JSON it writes still works, from the archive.
	run "$DISTRUN" -n 1 --report report.json true
	[ "$status" -eq 0 ]
	grep -q '"world_size": 1' report.json
	# Nor does a plain start load it.
	run env LD_DEBUG=files "$DISTRUN" -n 1 true
	[ "$status" -eq 0 ]
	[[ "$output" != *"libcurl"* ]]
}

@test "--rdzv-backend etcd without libcurl says what is missing" {
	lib=$(ldconfig -p | awk '/libcurl.so.4 .*x86-64/ { print $NF; exit }')
	[ -n "$lib" ] || skip "no libcurl.so.4 here"
	unshare -m true 2>/dev/null || skip "cannot make a mount namespace"
	run unshare -m sh -c "mount --bind /dev/null '$(readlink -f "$lib")' && exec '$DISTRUN' --rdzv-backend etcd --rdzv-endpoint 127.0.0.1:1 --rdzv-id x --nnodes 2 -n 1 true"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--rdzv-backend etcd needs libcurl (libcurl.so.4"* ]]
}

# --- a C rank's output: line-buffered, as on a terminal -----------------

# A plain C program (no libdistrun): a line, then a crash or a wait.
make_tick() {
	cat >tick.c <<-'C'
	#include <stdio.h>
	#include <stdlib.h>
	#include <unistd.h>
	int main(int argc, char **argv)
	{
		printf("rank %s start\n", getenv("RANK"));
		printf("stdout is %sa terminal\n", isatty(1) ? "" : "not ");
		if (argc > 1 && argv[1][0] == 'c') {
			/* Every rank has printed (a file each) before any
			 * crashes: the first crash stops the others. */
			char f[32];
			snprintf(f, sizeof(f), "ready.%s", getenv("RANK"));
			fclose(fopen(f, "w"));
			for (int i = 0; i < 200; i++) {
				int n = 0;
				for (int r = 0; r < atoi(getenv("WORLD_SIZE")); r++) {
					snprintf(f, sizeof(f), "ready.%d", r);
					n += !access(f, F_OK);
				}
				if (n == atoi(getenv("WORLD_SIZE")))
					break;
				usleep(50000);
			}
			abort();
		}
		for (int i = 0; i < 200 && access("go", F_OK); i++)
			usleep(50000);
		printf("rank %s end\n", getenv("RANK"));
		return 0;
	}
	C
	cc -o tick tick.c
}

@test "a C rank's lines survive its crash (stdout line-buffered, not a terminal)" {
	make_tick
	run "$DISTRUN" -n 4 ./tick crash
	[ "$status" -eq 134 ]
	for r in 0 1 2 3; do
		grep -qx "\[$r\] rank $r start" <<<"$output"
		grep -qx "\[$r\] stdout is not a terminal" <<<"$output"
	done
}

@test "a C rank's line shows while it runs, not at its exit" {
	make_tick
	"$DISTRUN" -n 2 ./tick >out 2>&1 &
	pid=$!
	wait_until 10 grep -q "rank 1 start" out || { touch go; wait $pid; false; }
	! grep -q "end" out
	touch go
	wait $pid
	grep -qx "\[0\] rank 0 end" out
}

@test "--buffered leaves a rank's stdout buffered as on any pipe" {
	make_tick
	run "$DISTRUN" --buffered -n 2 ./tick crash
	[ "$status" -eq 134 ]
	[[ "$output" != *"rank 0 start"* ]]
	# A pipe the rank makes itself keeps stdio's buffering too.
	run "$DISTRUN" -n 1 sh -c './tick crash | cat'
	[[ "$output" != *"rank 0 start"* ]]
}

# --- a prompt without a newline -----------------------------------------

@test "a prompt without a newline shows after a quiet moment; the rest of its line follows it" {
	cat >ask.py <<-'PY'
	import os, time
	print("x? ", end="", flush=True)
	for _ in range(200):
	    if os.path.exists("go"):
	        break
	    time.sleep(0.05)
	print("yes", flush=True)
	print("next line")
	PY
	"$DISTRUN" --python /usr/bin/python3 -n 1 ask.py >out 2>&1 &
	pid=$!
	wait_until 10 grep -q "x? " out || { touch go; wait $pid; false; }
	touch go
	wait $pid
	run cat out
	[ "${lines[0]}" = "[0] x? yes" ]
	[ "${lines[1]}" = "[0] next line" ]
	[ "${#lines[@]}" -eq 2 ]
}

@test "another rank's line ends a shown prompt's line: no torn lines" {
	cat >ask2.py <<-'PY'
	import os, time
	if os.environ["RANK"] == "0":
	    print("x? ", end="", flush=True)
	    while not os.path.exists("go"):
	        time.sleep(0.05)
	    print("yes", flush=True)
	else:
	    while not os.path.exists("asked"):
	        time.sleep(0.05)
	    print("other", flush=True)
	PY
	"$DISTRUN" --timeout 20s --python /usr/bin/python3 -n 2 ask2.py >out 2>&1 &
	pid=$!
	wait_until 10 grep -q "x? " out || { touch go asked; wait $pid; false; }
	touch asked
	# rank 0 goes on once distrun has shown rank 1's line (were both
	# ready at once, rank 0's "yes" could come first and end its line)
	wait_until 10 grep -q "other" out || { touch go; wait $pid; false; }
	touch go
	wait $pid
	run cat out
	echo "$output"
	[ "${lines[0]}" = "[0] x? " ]
	[ "${lines[1]}" = "[1] other" ]
	[ "${lines[2]}" = "[0] yes" ]
}

# --- the wrong Python -----------------------------------------------------

@test "a rank dead of ModuleNotFoundError: the interpreter is named, with the other python3 that has the module" {
	mkdir bad good mods
	echo 'print("hintmod here")' >mods/hintmod.py
	printf '#!/bin/sh\nexec /usr/bin/python3 "$@"\n' >bad/python3
	printf '#!/bin/sh\nPYTHONPATH=%s/mods exec /usr/bin/python3 "$@"\n' "$PWD" >good/python3
	chmod +x bad/python3 good/python3
	echo 'import hintmod' >train.py
	PATH=$PWD/bad:$PWD/good:/usr/bin:/bin run env -u DISTRUN_PYTHON "$DISTRUN" -q -n 2 train.py
	[ "$status" -eq 1 ]
	grep -q "^distrun: rank [01] died of ModuleNotFoundError (no module named 'hintmod') under $PWD/bad/python3 (python3 from PATH); choose another Python with --python PATH or DISTRUN_PYTHON=PATH$" <<<"$output"
	grep -qx "distrun: $PWD/good/python3 has 'hintmod': --python $PWD/good/python3" <<<"$output"
	[[ "$output" != *"/usr/bin/python3 has"* ]]
	# The named one works.
	PATH=$PWD/bad:$PWD/good:/usr/bin:/bin run "$DISTRUN" --python "$PWD/good/python3" -n 1 train.py
	[ "$status" -eq 0 ]
	[ "$output" = "[0] hintmod here" ]
}

# --- command-line nits ------------------------------------------------------

@test "-np N is mpirun's -n N; -npN says how to write it" {
	run "$DISTRUN" -np 2 echo hi
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'[0] hi\n[1] hi' ]
	run "$DISTRUN" -np4 true
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: invalid '-np4': for mpirun's -np N, give -n N or -np N (apart)" ]
	# The program's own -np is its own.
	run "$DISTRUN" -n 1 echo -np 3
	[ "$output" = "[0] -np 3" ]
}

@test "-v and -q count against each other: -q -v and -v -q print the summary on failure only" {
	for flags in "-q -v" "-v -q"; do
		run "$DISTRUN" $flags false
		[ "$status" -eq 1 ]
		[[ "$output" == *"first failure"* ]]
		run "$DISTRUN" $flags true
		[ -z "$output" ]
	done
	run "$DISTRUN" -v -v -q true
	[[ "$output" == *"exit status 0"* ]]
	run "$DISTRUN" -q false
	[[ "$output" != *"first failure"* ]]
}

@test "--no-python with -m is refused; abbreviated long options are refused, naming the option" {
	run "$DISTRUN" --no-python -m foo
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: -m/--module runs PROGRAM as a Python module; --no-python runs PROGRAM itself: give one" ]
	run "$DISTRUN" --nproc-per-nod 4 true
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: unknown option '--nproc-per-nod' (did you mean --nproc-per-node? options are not abbreviated)" ]
	run "$DISTRUN" --timeo=5s true
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: unknown option '--timeo' (did you mean --timeout? options are not abbreviated)" ]
	run "$DISTRUN" --nproc_per_node=2 --timeout=5s true
	[ "$status" -eq 0 ]
}

@test "the man page's ENVIRONMENT says the ranks' stdin is what --stdin says" {
	env=$(MANWIDTH=200 man -l "$SRCDIR/man/distrun.1" 2>/dev/null | sed -n '/^ENVIRONMENT/,/^OUTPUT/p')
	[ -n "$env" ]
	[[ "$env" != *"standard input is /dev/null."* ]]
	[[ "$env" == *"rank 0 reads distrun's standard input"* ]]
}

# --- verdicts that name the odd rank ---------------------------------------

@test "a hang's verdict line, JUnit message and TAP line name the odd rank, the call and its seq" {
	run "$DISTRUN" -n 4 --stall-timeout 2s --junit j.xml --tap t.tap "$CTESTS/diag_hang" skip
	[ "$status" -eq 124 ]
	verdict='rank 1 never entered world seq 1 barrier (ranks 0,2-3 waiting)'
	grep -qx "distrun: no progress for [0-9.]*s: $verdict" <<<"$output"
	grep -q "message=\"no progress after [0-9.]*s: $verdict\"" j.xml
	grep -qx "not ok 1 - diag_hang: diag_hang\[n=4\] - no progress after [0-9.]*s: $verdict" t.tap
	run "$DISTRUN" -n 4 --timeout 3s "$CTESTS/diag_hang" skip
	[ "$status" -eq 124 ]
	grep -qx "distrun: timeout after 3s: $verdict" <<<"$output"
}

@test "a sweep's console output has a header per size" {
	run "$DISTRUN" -n 1,2 sh -c 'echo "hi $WORLD_SIZE"'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "distrun: world size 1 (1 of 2)" ]
	[ "${lines[1]}" = "[0] hi 1" ]
	[ "${lines[2]}" = "distrun: world size 2 (2 of 2)" ]
}

@test "silence before the ranks' first call (importing, loading) is not a stall" {
	run "$DISTRUN" -n 2 --stall-timeout 1s sh -c "sleep 2.5; exec '$EXAMPLES/01_barrier'"
	[ "$status" -eq 0 ]
	[[ "$output" != *"no progress"* ]]
}

# --- test lists agree with the command line --------------------------------

@test "a test list runs a non-executable ./x.py as the command line does" {
	echo 'print("py ok")' >x.py
	chmod -x x.py
	printf 'n=1 ./x.py\n' >l.list
	DISTRUN_PYTHON=/usr/bin/python3 run "$DISTRUN" test l.list
	[ "$status" -eq 0 ]
	grep -q '^PASS      1 .*x.py\[n=1\]' <<<"$output"
	# --no-python in the line: then it must be executable.
	printf 'n=1 opt=--no-python ./x.py\n' >l2.list
	run "$DISTRUN" test l2.list
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: l2.list:1: program './x.py' is not executable" ]
}

@test "duplicate test names in a list are an error naming both lines" {
	printf 'name=a n=1 true\n# c\nname=a n=1 false\nn=1,2 true\nn=2,4 true\n' >l.list
	run "$DISTRUN" test l.list
	[ "$status" -eq 2 ]
	grep -qx "distrun: l.list:3: duplicate test 'a\[n=1\]' (also line 1; give one a name=)" <<<"$output"
	grep -qx "distrun: l.list:5: duplicate test 'true\[n=2\]' (also line 4; give one a name=)" <<<"$output"
	# One name at different sizes is fine: the cases differ.
	printf 'n=1 true\nn=2 true\n' >ok.list
	run "$DISTRUN" test ok.list
	[ "$status" -eq 0 ]
}

@test "a skip reads as a skip, not an error" {
	printf 'skip="needs a GPU" n=1 true\nname=other n=1 true\n' >l.list
	run "$DISTRUN" test --tap t.tap l.list
	[ "$status" -eq 0 ]
	grep -q '^SKIP      1 .*true\[n=1\]  skip: needs a GPU$' <<<"$output"
	[[ "$output" != *"error: needs a GPU"* ]]
	grep -qx 'ok 1 - l: true\[n=1\] # SKIP needs a GPU' t.tap
}
