#!/usr/bin/env bats
# Stopping a job: first failure, grace and SIGKILL, --timeout, signals to
# distrun, and no process left behind in any case (not even after kill -9).

load common

# start_job ARGS...: runs distrun in the background with SIGINT and SIGQUIT
# at their defaults (a script's background jobs ignore them), output in
# $OUT and $ERR, its pid in $DPID.
start_job() {
	OUT=$BATS_TEST_TMPDIR/out
	ERR=$BATS_TEST_TMPDIR/err
	( trap - INT QUIT; exec "$DISTRUN" "$@" ) >"$OUT" 2>"$ERR" &
	DPID=$!
}

# ready N: waits until N ranks of hang have printed their pid.
printed_pids() {
	[ "$(grep -c '] pid ' "$OUT")" -ge "$1" ]
}
ready() {
	wait_until 30 printed_pids "$1" ||
		{ echo "out:"; cat "$OUT"; echo "err:"; cat "$ERR"; false; }
}

# A failed test must not leave its job running.
teardown() {
	[ -z "${DPID:-}" ] || kill -KILL "$DPID" 2>/dev/null || true
}

# The pids of the ranks and their children, as printed by hang.
job_pids() {
	awk '$2 == "pid" || $2 == "grandchild" { print $3 }' "$OUT"
}

# gone PID...: none of them exists any more, not even as a zombie.
gone() {
	local p
	for p in "$@"; do
		! ps -o pid= -p "$p" >/dev/null || return 1
	done
}

# dead PID...: none of them runs (a zombie left to an init that does not
# reap is dead too: after kill -9 of distrun they are no longer its own).
dead() {
	local p
	for p in "$@"; do
		case "$(ps -o stat= -p "$p")" in
		"" | Z*) ;;
		*) return 1 ;;
		esac
	done
}

# ends_with_nothing_left STATUS NPIDS: distrun ends with STATUS, and of
# the NPIDS processes its ranks printed, none is left, not even a zombie
# (distrun reaped the ranks and, as their subreaper, their children).
ends_with_nothing_left() {
	finish
	[ "$DSTATUS" -eq "$1" ]
	pids=$(job_pids)
	[ "$(wc -w <<<"$pids")" -eq "$2" ]
	gone $pids
}

# fail_when_ready GRACE CODE N [HANG_ARG]...: starts N ranks; all but
# rank 0 run hang with HANG_ARGs, and rank 0 exits with CODE once they have
# all printed their pids (it reads distrun's output file).
fail_when_ready() {
	local grace=$1 code=$2 n=$3
	shift 3
	start_job -n "$n" --grace "$grace" sh -c '
		out=$1 code=$2 others=$3 hang=$0
		shift 3
		[ "$RANK" = 0 ] || exec "$hang" "$@"
		i=0
		while [ "$(grep -c "] pid " "$out")" -lt "$others" ] && [ $i -lt 600 ]; do
			sleep 0.05; i=$((i + 1))
		done
		exit "$code"' "$TESTDATA/hang" "$BATS_TEST_TMPDIR/out" "$code" $((n - 1)) "$@"
}

# finish: waits for distrun (bounded) and sets $DSTATUS.
finish() {
	wait_until 60 dead "$DPID"
	DSTATUS=0
	wait "$DPID" || DSTATUS=$?
}

@test "the first failure stops the other ranks with SIGTERM" {
	run "$DISTRUN" -n 4 --grace 60s "$TESTDATA/exitcode" 7 1
	[ "$status" -eq 7 ]
	grep -q '^distrun: rank 1 exited with status 7 after' <<<"$output"
	# The summary is on by default for failures.
	for r in 0 2 3; do
		grep -Eq "^ +$r  SIGTERM .* stopped$" <<<"$output"
	done
	grep -Eq '^ +1  7 .* first failure$' <<<"$output"
}

@test "ranks that ignore SIGTERM get SIGKILL after --grace" {
	# Rank 0 fails once the others have set SIGTERM aside.
	fail_when_ready 0.3s 5 3 --ignore-term
	finish
	[ "$DSTATUS" -eq 5 ]
	grep -Eq '^ +1  SIGKILL .* stopped$' "$ERR"
	grep -Eq '^ +2  SIGKILL .* stopped$' "$ERR"
}

@test "--timeout stops the job, names the ranks still running, exit 124" {
	run "$DISTRUN" -n 4 --timeout 2s sh -c '[ "$RANK" = 2 ] && exit 0; exec "$0"' "$TESTDATA/hang"
	[ "$status" -eq 124 ]
	grep -qx 'distrun: timeout after 2s; ranks still running: 0-1,3' <<<"$output"
	grep -Eq '^ +0  SIGTERM .* timed out$' <<<"$output"
	grep -Eq '^ +2  0 ' <<<"$output"
}

@test "--timeout takes units: 1.5s, 250ms, 2m, 1h" {
	run "$DISTRUN" --timeout 250ms "$TESTDATA/hang"
	[ "$status" -eq 124 ]
	for t in 1.5s 2m 1h 90 0.5h; do
		run "$DISTRUN" --timeout "$t" true
		[ "$status" -eq 0 ]
	done
}

@test "a job that ends in time is not affected by --timeout" {
	run "$DISTRUN" -n 2 --timeout 5m "$TESTDATA/exitcode" 0
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

# stop_by_signal SIG N STATUS: runs N ranks of hang (each with a child),
# sends SIG to distrun, and checks its exit status and that distrun reaped
# every rank and child itself: no orphan, no zombie.
stop_by_signal() {
	start_job -n "$2" --grace 60s "$TESTDATA/hang" --fork
	ready "$2"
	pids=$(job_pids)
	[ "$(wc -w <<<"$pids")" -eq $((2 * $2)) ]
	kill -"$1" "$DPID"
	finish
	[ "$DSTATUS" -eq "$3" ]
	grep -q "^distrun: got SIG$1, stopping the job" "$ERR"
	gone $pids
}

@test "SIGTERM to distrun is forwarded; nothing is left, exit 143" {
	stop_by_signal TERM 3 143
	grep -Eq '^ +0  SIGTERM .* stopped$' "$ERR"
}

@test "Ctrl-C (SIGINT) to distrun: ranks get SIGINT; nothing is left, exit 130" {
	stop_by_signal INT 3 130
	grep -Eq '^ +2  SIGINT .* stopped$' "$ERR"
}

@test "SIGHUP to distrun stops the job, exit 129" {
	stop_by_signal HUP 2 129
	grep -Eq '^ +1  SIGHUP .* stopped$' "$ERR"
}

@test "SIGQUIT to distrun stops the job, exit 131" {
	stop_by_signal QUIT 2 131
}

@test "a second Ctrl-C kills ranks that ignore the first" {
	start_job -n 2 --grace 60s "$TESTDATA/hang" --ignore-term --fork
	ready 2
	pids=$(job_pids)
	kill -INT "$DPID"
	wait_until 30 grep -q 'got SIGINT, stopping' "$ERR"
	kill -INT "$DPID"
	finish
	[ "$DSTATUS" -eq 130 ]
	grep -q 'got SIGINT again, killing the job' "$ERR"
	grep -Eq '^ +1  SIGKILL ' "$ERR"
	gone $pids
}

@test "kill -9 of distrun: the ranks and their children die with it" {
	start_job -n 3 --grace 60s "$TESTDATA/hang" --fork
	ready 3
	pids=$(job_pids)
	[ "$(wc -w <<<"$pids")" -eq 6 ]
	kill -KILL "$DPID"
	wait_until 30 dead $pids
}

@test "kill -9 of distrun also ends ranks that ignore SIGTERM" {
	start_job -n 2 --grace 60s "$TESTDATA/hang" --ignore-term --fork
	ready 2
	pids=$(job_pids)
	kill -KILL "$DPID"
	wait_until 30 dead $pids
}

@test "a rank's background child is stopped when the job ends" {
	start_job -n 2 --grace 60s "$TESTDATA/hang" --fork --exit
	ready 2
	finish
	[ "$DSTATUS" -eq 0 ]
	gone $(job_pids)
}

@test "a failure stops the other ranks' children too" {
	fail_when_ready 60s 9 3 --fork
	ends_with_nothing_left 9 4
}

@test "no zombie is left after a normal job" {
	start_job -n 4 "$TESTDATA/hang" --fork --exit
	ends_with_nothing_left 0 8
}

@test "a rank's child that left its process group (setsid) is stopped too" {
	# Each rank exits once its child has written its pid to a file.
	start_job -n 2 --grace 60s sh -c '
		f=$1.$RANK
		setsid "$0" >"$f" &
		i=0
		while ! grep -q pid "$f" && [ $i -lt 600 ]; do
			sleep 0.05; i=$((i + 1))
		done' "$TESTDATA/hang" "$BATS_TEST_TMPDIR/setsid"
	finish
	[ "$DSTATUS" -eq 0 ]
	pids=$(cat "$BATS_TEST_TMPDIR"/setsid.* | awk '{ print $2 }')
	[ "$(wc -w <<<"$pids")" -eq 2 ]
	gone $pids
}

# state PID...: their process states (T stopped, S sleeping, ...).
states() {
	ps -o stat= -p "$(echo "$@" | tr ' ' ,)" | cut -c1 | sort -u | tr -d '\n'
}
all_in_state() {
	local want=$1; shift
	[ "$(states "$@")" = "$want" ]
}

@test "Ctrl-Z (SIGTSTP) suspends the ranks with distrun; SIGCONT resumes them" {
	start_job -n 2 --grace 60s "$TESTDATA/hang"
	ready 2
	pids=$(job_pids)
	kill -TSTP "$DPID"
	wait_until 30 all_in_state T $pids "$DPID"
	kill -CONT "$DPID"
	wait_until 30 all_in_state S $pids "$DPID"
	kill -TERM "$DPID"
	finish
	[ "$DSTATUS" -eq 143 ]
	gone $pids
}

@test "a stopped rank is continued so that it gets the SIGTERM" {
	run "$DISTRUN" -n 2 --timeout 1s --grace 60s sh -c 'kill -STOP $$'
	[ "$status" -eq 124 ]
	grep -Eq '^ +0  SIGTERM .* timed out$' <<<"$output"
	grep -Eq '^ +1  SIGTERM .* timed out$' <<<"$output"
}
