#!/usr/bin/env bats
# The launcher's output: labels, whole lines, colours, per-rank files.

load common

@test "each line carries its rank's label" {
	run "$DISTRUN" -n 2 sh -c 'echo "hello from $RANK"; echo "bye from $RANK"'
	[ "$status" -eq 0 ]
	[ "$(grep -c '^\[0\] ' <<<"$output")" -eq 2 ]
	grep -qx '\[1\] hello from 1' <<<"$output"
	grep -qx '\[1\] bye from 1' <<<"$output"
}

@test "labels are padded to the widest rank" {
	run "$DISTRUN" -n 12 sh -c 'echo x'
	grep -qx '\[ 3\] x' <<<"$output"
	grep -qx '\[11\] x' <<<"$output"
}

@test "stderr lines stay on stderr, stdout lines on stdout" {
	"$DISTRUN" -n 2 sh -c 'echo out$RANK; echo err$RANK >&2' \
		>"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err"
	[ "$(sort "$BATS_TEST_TMPDIR/out")" = $'[0] out0\n[1] out1' ]
	[ "$(sort "$BATS_TEST_TMPDIR/err")" = $'[0] err0\n[1] err1' ]
}

@test "a last line without newline is flushed, ended by a newline" {
	run "$DISTRUN" -n 2 sh -c 'printf "partial $RANK"'
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'[0] partial 0\n[1] partial 1' ]
}

@test "a partial line is completed by what follows before it is shown" {
	run "$DISTRUN" -n 1 sh -c 'printf "one "; sleep 0.2; printf "two\n"; printf "three"'
	[ "$output" = $'[0] one two\n[0] three' ]
}

@test "a line of 1 MiB passes intact" {
	"$DISTRUN" -n 2 --raw "$TESTDATA/spew" 1048576 1048576 >"$BATS_TEST_TMPDIR/out"
	[ "$(wc -l <"$BATS_TEST_TMPDIR/out")" -eq 2 ]
	[ "$(awk '{ print length($0) }' "$BATS_TEST_TMPDIR/out" | sort -u)" = 1048575 ]
	"$DISTRUN" -n 2 "$TESTDATA/spew" 1048576 1048576 >"$BATS_TEST_TMPDIR/out"
	[ "$(cut -c1-4 "$BATS_TEST_TMPDIR/out" | sort)" = $'[0] \n[1] ' ]
	[ "$(awk '{ print length($0) }' "$BATS_TEST_TMPDIR/out" | sort -u)" = 1048579 ]
}

@test "a line longer than 8 MiB is cut in 8 MiB pieces, nothing lost" {
	"$DISTRUN" -n 1 --raw sh -c 'head -c 9437184 /dev/zero | tr "\0" x' >"$BATS_TEST_TMPDIR/out"
	[ "$(awk '{ print length($0) }' "$BATS_TEST_TMPDIR/out" | tr '\n' ' ')" = "8388608 1048576 " ]
}

@test "lines from fast ranks are never torn or lost" {
	# 4 ranks x 8 MB in 100-byte lines, numbered by spew.
	"$DISTRUN" -n 4 "$TESTDATA/spew" 8388600 100 >"$BATS_TEST_TMPDIR/out"
	for r in 0 1 2 3; do
		grep "^\[$r\] " "$BATS_TEST_TMPDIR/out" >"$BATS_TEST_TMPDIR/r$r"
		n=$(wc -l <"$BATS_TEST_TMPDIR/r$r")
		[ "$n" -eq 83886 ]
		# Every line whole (label + 99 bytes) and in order.
		[ "$(awk '{ print length($0) }' "$BATS_TEST_TMPDIR/r$r" | sort -u)" = 103 ]
		awk -v r=$r '{ if ($2 + 0 != NR - 1) { print "rank " r " line " NR ": " $2; exit 1 } }' "$BATS_TEST_TMPDIR/r$r"
	done
	[ "$(wc -l <"$BATS_TEST_TMPDIR/out")" -eq $((4 * 83886)) ]
}

@test "--raw prints the lines without labels" {
	run "$DISTRUN" -n 2 --raw sh -c 'echo "r$RANK"'
	[ "$(sort <<<"$output")" = $'r0\nr1' ]
}

@test "--ranks shows only the listed ranks" {
	run "$DISTRUN" -n 6 --ranks 0,2-3 sh -c 'echo "r$RANK"; echo "e$RANK" >&2'
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = "$(printf '[%d] %s\n' 0 e0 0 r0 2 e2 2 r2 3 e3 3 r3)" ]
	run "$DISTRUN" -n 2 --ranks none sh -c 'echo "r$RANK"'
	[ -z "$output" ]
}

@test "--ranks does not hide a failure or the summary" {
	run "$DISTRUN" -n 3 --ranks 0 --grace 10s "$TESTDATA/exitcode" 4 1
	[ "$status" -eq 4 ]
	grep -q '^distrun: rank 1 exited with status 4' <<<"$output"
}

@test "--output-dir writes each rank's streams to its own files, exactly" {
	d=$BATS_TEST_TMPDIR/logs
	run "$DISTRUN" -n 3 --output-dir "$d" sh -c 'echo "out $RANK"; printf "err $RANK" >&2'
	[ "$status" -eq 0 ]
	for r in 0 1 2; do
		[ "$(cat "$d/rank.$r.stdout")" = "out $r" ]
		[ "$(cat "$d/rank.$r.stderr")" = "err $r" ]
		[ "$(tail -c1 "$d/rank.$r.stderr")" = "$r" ]   # bytes as written
	done
	# The console still shows them, labelled.
	grep -qx '\[2\] out 2' <<<"$output"
	grep -qx '\[2\] err 2' <<<"$output"
}

@test "--output-dir with --ranks none keeps the console quiet" {
	d=$BATS_TEST_TMPDIR/logs
	run "$DISTRUN" -n 2 --ranks none --output-dir "$d" sh -c 'echo "out $RANK"'
	[ -z "$output" ]
	[ "$(cat "$d/rank.1.stdout")" = "out 1" ]
}

@test "--output-dir that cannot be made is a clear error" {
	run "$DISTRUN" -n 1 --output-dir /proc/nonexistent/x true
	[ "$status" -ne 0 ]
	grep -q '^distrun: --output-dir /proc/nonexistent/x: ' <<<"$output"
}

@test "--timestamps prefixes each line with the seconds since the start" {
	run "$DISTRUN" -n 2 --timestamps sh -c 'echo hi'
	[ "$(grep -c '^\[[01]\] +[0-9]*\.[0-9][0-9][0-9] hi$' <<<"$output")" -eq 2 ]
	run "$DISTRUN" -n 1 --raw --timestamps sh -c 'echo hi'
	[[ "$output" =~ ^\+[0-9]+\.[0-9]{3}\ hi$ ]]
}

@test "no colour when piped; colour per rank on a terminal; NO_COLOR and --color" {
	run "$DISTRUN" -n 2 sh -c 'echo x'
	[[ "$output" != *$'\e['* ]]
	# script(1) gives distrun a terminal.
	out=$(script -qec "$DISTRUN -n 2 sh -c 'echo x'" /dev/null </dev/null)
	[[ "$out" == *$'\e[32m[0]\e[0m x'* ]]
	[[ "$out" == *$'\e[33m[1]\e[0m x'* ]]
	out=$(NO_COLOR=1 script -qec "$DISTRUN -n 2 sh -c 'echo x'" /dev/null </dev/null)
	[[ "$out" != *$'\e['* ]]
	out=$(script -qec "$DISTRUN --color never -n 2 sh -c 'echo x'" /dev/null </dev/null)
	[[ "$out" != *$'\e['* ]]
	run "$DISTRUN" --color always -n 1 sh -c 'echo x'
	[ "$output" = $'\e[32m[0]\e[0m x' ]
}

@test "a closed stdout stops the job (exit 141), no rank left behind" {
	f=$BATS_TEST_TMPDIR/r.json
	run bash -c "'$DISTRUN' -n 2 --grace 10s --report '$f' '$TESTDATA/spew' 100000000000 | head -c 1000 >/dev/null; echo \${PIPESTATUS[0]}"
	[ "${lines[-1]}" -eq 141 ]
	[ "$(jq -r .signal "$f")" = SIGPIPE ]
	for pid in $(jq '.ranks[].pid' "$f"); do
		[ "$pid" -gt 0 ]
		! ps -o pid= -p "$pid" || return 1
	done
}

@test "a full disk is told once; the job goes on and keeps its status" {
	run sh -c '"$0" -n 2 sh -c "echo hi; echo there; exit 3" >/dev/full' "$DISTRUN"
	[ "$status" -eq 3 ]
	[ "$(grep -c 'No space left on device; dropping it' <<<"$output")" -eq 1 ]
}

@test "--timeout ends the job even when nobody reads distrun's output" {
	d=$BATS_TEST_TMPDIR
	mkfifo "$d/fifo"
	( st=0
	  "$DISTRUN" -n 2 --timeout 1s --grace 0.2s "$TESTDATA/spew" 100000000000 \
		>"$d/fifo" 2>"$d/err" || st=$?
	  echo $st >"$d/status" ) &
	exec {reader}<"$d/fifo"    # a reader that never reads
	wait_until 60 test -s "$d/status"
	exec {reader}<&-
	wait
	[ "$(cat "$d/status")" -eq 124 ]
	grep -q '^distrun: timeout after 1s' "$d/err"
	grep -q '^distrun: nobody reads fd 1; dropping the output to end the job$' "$d/err"
}

@test "SIGTERM stops the job while its output is stuck" {
	d=$BATS_TEST_TMPDIR
	mkfifo "$d/fifo"
	"$DISTRUN" -n 2 --grace 0.2s "$TESTDATA/spew" 100000000000 >"$d/fifo" 2>"$d/err" &
	pid=$!
	exec {reader}<"$d/fifo"
	# Wait until the fifo is full: distrun holds what it cannot write and
	# has stopped reading, so the ranks wait in their writes.  Then stop it.
	ranks_blocked() {
		local c
		for c in $(ps -o pid= --ppid "$1"); do
			grep -q pipe_write "/proc/$c/wchan" && return 0
		done
		return 1
	}
	wait_until 30 ranks_blocked "$pid"
	kill -TERM "$pid"
	status=0
	wait_until 60 grep -q 'dropping the output' "$d/err"
	exec {reader}<&-
	wait "$pid" || status=$?
	[ "$status" -eq 143 ]
	grep -q '^distrun: got SIGTERM, stopping the job' "$d/err"
}

@test "a full disk under --output-dir fails the job, names the incomplete files, and the report says why" {
	[ "$(id -u)" -eq 0 ] || skip "mounting a small tmpfs needs root"
	d=$BATS_TEST_TMPDIR/small
	mkdir -p "$d"
	mount -t tmpfs -o size=64k tmpfs "$d" || skip "cannot mount a tmpfs here"
	run "$DISTRUN" --report "$BATS_TEST_TMPDIR/r.json" --output-dir "$d" -n 2 \
		"$TESTDATA/spew" 1000000
	umount "$d"
	[ "$status" -eq 1 ]
	[[ "$output" == *"rank 0's stdout file is incomplete: No space left on device"* ]]
	[[ "$output" == *"output file incomplete"* ]]
	[ "$(jq -r .exit_status "$BATS_TEST_TMPDIR/r.json")" = 1 ]
	[ "$(jq -r .reason "$BATS_TEST_TMPDIR/r.json")" = "output files incomplete" ]
	[ "$(jq -r '.ranks[1].stdout_file_error' "$BATS_TEST_TMPDIR/r.json")" = "No space left on device" ]
}
