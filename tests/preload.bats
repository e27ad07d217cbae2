#!/usr/bin/env bats
# --preload MODULES: Python ranks forked from one warm interpreter
# (cmd/job/preload.c, cmd/job/preload.py).  A rank must not be able to tell how it
# was started: each test runs the same job both ways and compares.  Most
# preload json (cheap); the torch tests pay its import once per job.

load common

PY=/usr/bin/python3
FIX=$SRCDIR/testdata/preload

setup() {
	cd "$FIX"
}

# Output without timings (the summary is off: -q) and sorted (ranks
# interleave).
norm() { sed -E 's/after [0-9.]+s/after Ts/' | sort; }

# both OUTVAR ARGS...: runs distrun ARGS plainly and with --preload json;
# fails unless both give the same status; the outputs, normalised, in
# $plain and $warm.
both() {
	run "$DISTRUN" -q "$@"
	plain_status=$status plain=$(norm <<<"$output")
	run "$DISTRUN" -q --preload json "$@"
	warm_status=$status warm=$(norm <<<"$output")
	[ "$plain_status" -eq "$warm_status" ] ||
		{ echo "plain $plain_status: $plain"; echo "warm $warm_status: $warm"; false; }
}

@test "preload: argv, __file__, __name__, sys.path[0], cwd, stdin, stdio as a fresh interpreter" {
	run bash -c "echo hello | '$DISTRUN' -q -n 2 $PY ident.py x 'y z'"
	plain=$(norm <<<"$output")
	run bash -c "echo hello | '$DISTRUN' -q --preload json -n 2 $PY ident.py x 'y z'"
	[ "$status" -eq 0 ]
	[ "$(norm <<<"$output")" = "$plain" ]
	grep -qF "[0] argv ['ident.py', 'x', 'y z']" <<<"$output"
	grep -qF "[1] file $FIX/ident.py" <<<"$output"
	grep -qF "[0] stdin hello" <<<"$output"
	grep -qF "[1] stdin <eof>" <<<"$output"
	grep -qF "[0] pgid True" <<<"$output"
}

@test "preload: breakpoint() on rank 0 reads distrun's stdin" {
	run bash -c "printf 'p 6*7\\nc\\n' | '$DISTRUN' -q -n 1 $PY bp.py"
	plain=$output
	run bash -c "printf 'p 6*7\\nc\\n' | '$DISTRUN' -q --preload json -n 1 $PY bp.py"
	[ "$status" -eq 0 ]
	[ "$output" = "$plain" ]
	grep -qF "[0] (Pdb) 42" <<<"$output"
	grep -qF "[0] done" <<<"$output"
}

@test "preload: -m MODULE and -c CODE run as python -m and -c do" {
	both -n 1 $PY -m pkg
	[ "$warm_status" -eq 3 ]
	[ "$warm" = "$plain" ]
	grep -qF "[0] module __main__ pkg.__main__ True 0" <<<"$warm"
	both -n 1 $PY -c 'import sys; print(sys.argv, __name__, repr(sys.path[0])); 1/0' q
	[ "$warm_status" -eq 1 ]
	[ "$warm" = "$plain" ]
	grep -qF "[0] ['-c', 'q'] __main__ ''" <<<"$warm"
	grep -qF '[0]   File "<string>", line 1, in <module>' <<<"$warm"
}

@test "preload: an uncaught exception exits 1 with the same traceback" {
	both -n 2 $PY fail.py raise
	[ "$warm_status" -eq 1 ]
	[ "$warm" = "$plain" ]
	grep -qF "[1] ValueError: rank 1 failed" <<<"$warm"
	grep -qF "[1]   File \"$FIX/fail.py\", line 11, in inner" <<<"$warm"
	# No frame of the server above the script's.
	! grep -q preload.py <<<"$warm"
}

@test "preload: SystemExit(7) exits 7, SystemExit('a message') prints it and exits 1" {
	both -n 2 $PY fail.py exit7
	[ "$warm_status" -eq 7 ]
	[ "$warm" = "$plain" ]
	both -n 2 $PY fail.py exitmsg
	[ "$warm_status" -eq 1 ]
	grep -qF "[1] a message" <<<"$warm"
}

@test "preload: a rank killed by SIGSEGV is 139 with faulthandler's report" {
	both -n 2 $PY fail.py segv
	[ "$warm_status" -eq 139 ]
	for out in "$plain" "$warm"; do
		grep -qF "distrun: rank 1 was killed by SIGSEGV" <<<"$out"
		grep -qF "[1] Fatal Python error: Segmentation fault" <<<"$out"
		grep -qF "[1]   File \"$FIX/fail.py\", line 17 in inner" <<<"$out"
	done
}

@test "preload: a hanging job times out (124) with the ranks' Python stacks" {
	both --timeout 2s -n 2 $PY fail.py hang
	[ "$warm_status" -eq 124 ]
	for out in "$plain" "$warm"; do
		grep -q "time.sleep(300) fail.py:20" <<<"$out" || { echo "$out"; false; }
	done
}

@test "preload: atexit handlers run, buffered output is flushed, multiprocessing works" {
	for method in fork spawn; do
		both -n 2 $PY atexit_flush.py $method
		[ "$warm_status" -eq 0 ]
		# The ranks' lines (spawn's resource tracker may outlive a
		# rank for a moment: distrun's lines about it vary by timing).
		[ "$(grep '^\[' <<<"$warm")" = "$(grep '^\[' <<<"$plain")" ]
		grep -qF "[1] pool $method [1, 4, 9]" <<<"$warm"
		grep -qF "[0] buffered line" <<<"$warm"
		grep -qF "[0] atexit ran" <<<"$warm"
	done
}

@test "preload: a missing module or one that starts a thread: one line, then the usual way" {
	run "$DISTRUN" -q --preload json,nosuchmod -n 2 $PY fail.py ok
	[ "$status" -eq 0 ]
	[ "$(grep -c '^distrun:' <<<"$output")" -eq 1 ]
	grep -qF "distrun: --preload json,nosuchmod: cannot import nosuchmod (ModuleNotFoundError: No module named 'nosuchmod'); starting the ranks the usual way" <<<"$output"
	grep -qF "[1] rank 1 ok" <<<"$output"
	PYTHONPATH=$FIX run "$DISTRUN" -q --preload threads_at_import -n 2 $PY fail.py ok
	[ "$status" -eq 0 ]
	[ "$(grep -c '^distrun:' <<<"$output")" -eq 1 ]
	grep -q "distrun: --preload threads_at_import: the warm interpreter runs 2 threads .*; starting the ranks the usual way" <<<"$output"
	grep -qF "[0] rank 0 ok" <<<"$output"
}

@test "preload: -v says how the ranks started; bad lists are usage errors; not Python: the usual way" {
	run "$DISTRUN" -v --preload json -n 1 $PY fail.py ok
	[ "$status" -eq 0 ]
	grep -q "^distrun: ranks are forked from a warm $PY that imported json in " <<<"$output"
	run "$DISTRUN" --preload 'json,' -n 1 $PY fail.py ok
	[ "$status" -eq 2 ]
	grep -qF "distrun: --preload: bad module list 'json,'" <<<"$output"
	DISTRUN_PRELOAD='a b' run "$DISTRUN" -n 1 $PY fail.py ok
	[ "$status" -eq 2 ]
	grep -qF "distrun: DISTRUN_PRELOAD: bad module list 'a b'" <<<"$output"
	# From the environment, for a program that is not Python: silent.
	DISTRUN_PRELOAD=json run "$DISTRUN" -q -n 1 echo hi
	[ "$status" -eq 0 ]
	[ "$output" = "[0] hi" ]
	DISTRUN_PRELOAD=json run "$DISTRUN" -v -n 1 $PY fail.py ok
	grep -q "^distrun: ranks are forked from a warm" <<<"$output"
}

@test "preload: a sweep and distrun test fork every run from one warm interpreter" {
	export PRELOAD_OUT=$BATS_TEST_TMPDIR/sweep
	mkdir -p "$PRELOAD_OUT"
	run "$DISTRUN" -q --preload json -n 1,2,3 $PY ppid.py
	[ "$status" -eq 0 ]
	[ "$(ls "$PRELOAD_OUT" | wc -l)" -eq 6 ]
	[ "$(cat "$PRELOAD_OUT"/* | sort -u | wc -l)" -eq 1 ]
	server=$(cat "$PRELOAD_OUT/0.1")
	[ "$(cat /proc/$server/comm 2>/dev/null)" != python3 ]   # gone by now
	export PRELOAD_OUT=$BATS_TEST_TMPDIR/test
	mkdir -p "$PRELOAD_OUT"
	DISTRUN_PRELOAD=json run "$DISTRUN" test -q -n 1,2 -- $PY ppid.py
	[ "$status" -eq 0 ]
	[ "$(ls "$PRELOAD_OUT" | wc -l)" -eq 3 ]
	[ "$(cat "$PRELOAD_OUT"/* | sort -u | wc -l)" -eq 1 ]
	# Without --preload every rank is distrun's own child.
	export PRELOAD_OUT=$BATS_TEST_TMPDIR/plain
	mkdir -p "$PRELOAD_OUT"
	run "$DISTRUN" -q -n 1,2 $PY ppid.py
	[ "$(cat "$PRELOAD_OUT"/* | sort -u | wc -l)" -eq 2 ]
}

@test "preload: kill -9 of distrun leaves no rank and no warm interpreter" {
	out=$BATS_TEST_TMPDIR/out
	"$DISTRUN" --preload json -n 2 $PY sleeper.py >"$out" 2>&1 &
	pid=$!
	up() { [ "$(grep -c '] up ' "$out")" -eq 2 ]; }
	wait_until 20 up
	ranks=$(sed -n 's/.*] up \([0-9]*\)/\1/p' "$out")
	server=$(ps -o ppid= -p $(head -1 <<<"$ranks") | tr -d ' ')
	[ "$(ps -o ppid= -p "$server" | tr -d ' ')" -eq "$pid" ]
	kill -9 "$pid"
	wait "$pid" || true
	gone() { for p in $ranks $server; do ! kill -0 "$p" 2>/dev/null || return 1; done; }
	wait_until 5 gone
}

@test "preload: if the warm interpreter dies, its ranks die with it and the job fails" {
	out=$BATS_TEST_TMPDIR/out
	"$DISTRUN" --preload json -n 2 $PY sleeper.py >"$out" 2>&1 &
	pid=$!
	up() { [ "$(grep -c '] up ' "$out")" -eq 2 ]; }
	wait_until 20 up
	ranks=$(sed -n 's/.*] up \([0-9]*\)/\1/p' "$out")
	server=$(ps -o ppid= -p $(head -1 <<<"$ranks") | tr -d ' ')
	kill -9 "$server"
	status=0
	wait "$pid" || status=$?
	[ "$status" -eq 137 ]
	grep -qF "distrun: the warm interpreter died; the ranks it forked died with it" "$out"
	grep -q "distrun: rank [01] was killed by SIGKILL" "$out"
	for p in $ranks; do ! kill -0 "$p" 2>/dev/null; done
}

@test "preload torch: random, numpy and torch seeds are fresh per rank and per run; a gloo job runs" {
	require_torch
	run "$DISTRUN" -q --preload torch -n 2 $PY seeds.py
	[ "$status" -eq 0 ]
	first=$output
	run "$DISTRUN" -q --preload torch -n 2 $PY seeds.py
	[ "$status" -eq 0 ]
	for what in random numpy torch; do
		vals=$(printf '%s\n%s\n' "$first" "$output" | grep "] $what " | sed 's/^\[[0-9]\] //' | sort -u | wc -l)
		[ "$vals" -eq 4 ] || { echo "$what: $first / $output"; false; }
	done
	run "$DISTRUN" -q --preload torch -n 4 $PY gloo.py
	[ "$status" -eq 0 ]
	[ "$(grep -c 'sum 4 of 4' <<<"$output")" -eq 4 ]
}
