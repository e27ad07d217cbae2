#!/usr/bin/env bats
# The timing summary and the JSON report.

load common
bats_require_minimum_version 1.5.0

@test "no summary when every rank succeeds, unless -v or --summary" {
	run "$DISTRUN" -n 2 true
	[ -z "$output" ]
	for opt in -v --summary; do
		run "$DISTRUN" -n 2 $opt true
		[ "$status" -eq 0 ]
		[[ "${lines[0]}" =~ ^distrun:\ 2\ ranks,\ [0-9.]+s,\ exit\ status\ 0$ ]]
		[[ "${lines[1]}" =~ ^\ +rank\ +status\ +wall\ +user\ +sys\ +maxrss ]]
		[[ "${lines[2]}" =~ ^\ +0\ +0\ +[0-9.]+s\ +[0-9.]+s\ +[0-9.]+s\ +[0-9.]+\ MiB$ ]]
		[[ "${lines[3]}" =~ ^\ +1\ +0\ + ]]
	done
}

@test "the summary ends with distrun's own CPU time and memory" {
	run "$DISTRUN" -n 2 -v true
	[[ "${lines[-1]}" =~ ^\ *distrun\ +[0-9.]+s\ +[0-9.]+s\ +[0-9.]+\ MiB$ ]]
	f=$BATS_TEST_TMPDIR/r.json
	"$DISTRUN" --report "$f" true
	[ "$(jq '.launcher | (.user_s >= 0 and .sys_s >= 0 and .maxrss_kib > 0)' "$f")" = true ]
}

@test "the summary goes to stderr" {
	"$DISTRUN" -n 1 -v true >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err"
	[ ! -s "$BATS_TEST_TMPDIR/out" ]
	grep -q 'exit status 0' "$BATS_TEST_TMPDIR/err"
}

@test "the summary shows CPU time and memory from wait4" {
	# Rank 1 touches 64 MiB and burns CPU; rank 0 does nothing.
	run "$DISTRUN" -n 2 -v python3 -c '
import os
if os.environ["RANK"] == "1":
    b = bytearray(64 << 20)
    for i in range(0, len(b), 4096): b[i] = 1
    n = 0
    for i in range(3000000): n += i'
	[ "$status" -eq 0 ]
	rss1=$(awk '$1 == 1 { print $6 }' <<<"$output")
	rss0=$(awk '$1 == 0 { print $6 }' <<<"$output")
	user1=$(awk '$1 == 1 { print $4 }' <<<"$output" | tr -d s)
	awk -v a="$rss1" -v b="$rss0" 'BEGIN { exit !(a >= 64 && a > b + 50) }'
	awk -v u="$user1" 'BEGIN { exit !(u > 0.05) }'
}

@test "-q prints no summary, even on failure, but still the failure line" {
	run "$DISTRUN" -n 2 -q "$TESTDATA/exitcode" 3
	[ "$status" -eq 3 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "distrun: rank "[01]" exited with status 3 after "* ]]
}

@test "--report writes the job as JSON" {
	f=$BATS_TEST_TMPDIR/report.json
	run "$DISTRUN" -n 3 --grace 30s --report "$f" "$TESTDATA/exitcode" 4 2
	[ "$status" -eq 4 ]
	[ "$(jq -r '.command | join(" ")' "$f")" = "$TESTDATA/exitcode 4 2" ]
	[ "$(jq .world_size "$f")" -eq 3 ]
	[ "$(jq .exit_status "$f")" -eq 4 ]
	[ "$(jq -r .reason "$f")" = "rank failed" ]
	[ "$(jq .first_failed_rank "$f")" -eq 2 ]
	[[ "$(jq -r .start "$f")" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z$ ]]
	[[ "$(jq -r .end "$f")" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z$ ]]
	[ "$(jq -r '.end >= .start' "$f")" = true ]
	[ "$(jq '.ranks | length' "$f")" -eq 3 ]
	[ "$(jq -r '.ranks[2] | "\(.rank) \(.state) \(.exit_code) \(.status) \(.note)"' "$f")" = "2 exited 4 4 first failure" ]
	[ "$(jq -r '.ranks[0] | "\(.state) \(.signal) \(.status) \(.note)"' "$f")" = "signaled SIGTERM 143 stopped" ]
	[ "$(jq -r '.ranks[] | (.wall_s >= 0 and .user_s >= 0 and .sys_s >= 0 and .maxrss_kib > 0)' "$f" | sort -u)" = true ]
}

@test "--report of a successful job, and of a timeout" {
	f=$BATS_TEST_TMPDIR/ok.json
	run "$DISTRUN" -n 2 --report "$f" true
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	[ "$(jq -r '"\(.exit_status) \(.reason) \(.first_failed_rank)"' "$f")" = "0 ok null" ]
	f=$BATS_TEST_TMPDIR/timeout.json
	run "$DISTRUN" -n 2 --timeout 0.5s --report "$f" "$TESTDATA/hang"
	[ "$status" -eq 124 ]
	[ "$(jq -r '"\(.exit_status) \(.reason)"' "$f")" = "124 timeout" ]
	[ "$(jq -r '[.ranks[].note] | unique | join(",")' "$f")" = "timed out" ]
}

@test "--report to a file that cannot be written is refused before the start" {
	m=$BATS_TEST_TMPDIR/started
	run "$DISTRUN" -n 1 --report /proc/nonexistent/r.json touch "$m"
	[ "$status" -eq 2 ]
	grep -q '^distrun: --report /proc/nonexistent/r.json: No such file or directory$' <<<"$output"
	[ ! -e "$m" ]
}

@test "--report is written even when the program cannot run" {
	f=$BATS_TEST_TMPDIR/r.json
	run -127 "$DISTRUN" -n 2 --report "$f" ./no/such/program
	[ "$(jq -r '"\(.exit_status) \(.reason) \(.world_size)"' "$f")" = "127 cannot run 2" ]
	[ "$(jq -r '[.ranks[].state] | unique | join(",")' "$f")" = "not started" ]
}

# Issue 30.5: the report says "incomplete" from the start, so a distrun
# killed by SIGKILL leaves no earlier run's verdict behind.
@test "a distrun killed by SIGKILL leaves no previous verdict in --report or --trace" {
	f=$BATS_TEST_TMPDIR/r.json t=$BATS_TEST_TMPDIR/t.json
	"$DISTRUN" -n 2 --report "$f" --trace "$t" true
	[ "$(jq -r '"\(.complete) \(.exit_status) \(.reason)"' "$f")" = "true 0 ok" ]
	"$DISTRUN" -n 2 --report "$f" --trace "$t" sleep 60 &
	pid=$!
	# the marks are written in turn (report, then trace): wait for both
	wait_until 10 grep -q '"complete": false' "$f"
	wait_until 10 grep -q '"complete":false' "$t"
	kill -9 "$pid"
	wait "$pid" || true
	[ "$(jq -r '"\(.complete) \(.exit_status) \(.reason)"' "$f")" = "false null incomplete" ]
	[ "$(jq -r '.otherData.complete' "$t")" = false ]
	[ "$(jq '.traceEvents | length' "$t")" = 0 ]
	# nothing half-written left beside them
	[ "$(ls -A "$BATS_TEST_TMPDIR" | grep -c '^\.')" -eq 0 ]
}

@test "--report is replaced whole: a reader never sees a torn file" {
	f=$BATS_TEST_TMPDIR/r.json
	"$DISTRUN" -n 1 --report "$f" true
	ln "$f" "$BATS_TEST_TMPDIR/old"
	"$DISTRUN" -n 3 --report "$f" true
	# a new file took the name; the old one is intact
	[ "$(jq .world_size "$BATS_TEST_TMPDIR/old")" = 1 ]
	[ "$(jq .world_size "$f")" = 3 ]
	# a symlink stays one, to the new report
	ln -s r.json "$BATS_TEST_TMPDIR/link.json"
	"$DISTRUN" -n 2 --report "$BATS_TEST_TMPDIR/link.json" true
	[ -L "$BATS_TEST_TMPDIR/link.json" ]
	[ "$(jq .world_size "$f")" = 2 ]
}
