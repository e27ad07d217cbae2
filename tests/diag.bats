#!/usr/bin/env bats
# Diagnosis of jobs that hang or fail: the stall report (--stall-timeout,
# --timeout, signals), verdicts (a rank missing from a collective, a rank
# stuck in user code, a mismatch, a rank killed inside a call, a p2p
# deadlock), stacks by gdb and by Python's faulthandler, reports without
# gdb, --trace, the summary's time in collectives and barrier skew.  After
# every report nothing of the job is left running.

load common

HANG=$CTESTS/diag_hang
HANG_C=$SRCDIR/tests/c/diag_hang.c
HANG_PY=$SRCDIR/testdata/diag/hang.py


# line FILE MARK: the line number of "HANG-LINE MARK" in FILE.
line() {
	grep -nw "HANG-LINE $2" "$1" | cut -d: -f1
}

# start_job ARGS...: distrun in the background (SIGINT at its default),
# stdout in $OUT, stderr in $ERR, its pid in $DPID.
start_job() {
	OUT=$BATS_TEST_TMPDIR/out
	ERR=$BATS_TEST_TMPDIR/err
	( exec env --default-signal=INT,QUIT "$DISTRUN" "$@" ) >"$OUT" 2>"$ERR" &
	DPID=$!
}

ready_lines() {
	[ "$(grep -c 'ready$' "$OUT")" -ge "$1" ]
}

# ready N: waits until N ranks printed "rank R ready".
ready() {
	wait_until 120 ready_lines "$1" ||
		{ echo "out:"; cat "$OUT"; echo "err:"; cat "$ERR"; false; }
}

# finish: waits for distrun (bounded), sets $DSTATUS.
finish() {
	local i=0
	while kill -0 "$DPID" 2>/dev/null && [ $i -lt 1200 ]; do
		sleep 0.1; i=$((i + 1))
	done
	if kill -0 "$DPID" 2>/dev/null; then
		echo "distrun still runs after 120 s; killed"
		kill -KILL "$DPID"
		wait "$DPID"
		return 1
	fi
	DSTATUS=0
	wait "$DPID" || DSTATUS=$?
}

teardown() {
	[ -z "${DPID:-}" ] || kill -KILL "$DPID" 2>/dev/null || true
	[ -z "${DIAG_USER:-}" ] || userdel "$DIAG_USER" 2>/dev/null || true
}

# nothing_left REPORT: no rank of the report, and no gdb, runs any more.
nothing_left() {
	local p
	for p in $(jq -r '.ranks[].pid' "$1"); do
		! ps -o pid= -p "$p" >/dev/null || { echo "pid $p left"; return 1; }
		! pgrep -f "gdb .*-p $p( |\$)" >/dev/null || { echo "gdb left"; return 1; }
	done
}

@test "a rank that skips a barrier is named, with the seq and its stack" {
	run "$DISTRUN" -n 4 --stall-timeout 3s --report "$BATS_TEST_TMPDIR/r.json" "$HANG" skip
	[ "$status" -eq 124 ]
	grep -q '^distrun: no progress for [0-9.]*s (4 ranks)$' <<<"$output"
	grep -Eq '^  world seq 1 barrier: ranks 0,2-3 waiting [0-9.]+s$' <<<"$output"
	grep -Eq '^  rank 1 never entered it: in user code for [0-9.]+s, last call seq 0$' <<<"$output"
	grep -q "^    rank 1: .*compute_step (diag_hang.c:$(line "$HANG_C" compute_step))" <<<"$output"
	grep -q "^    ranks 0,2-3: .*dr_barrier (coll_api.c:[0-9]*)  #[0-9]* main (diag_hang.c:$(line "$HANG_C" barrier))" <<<"$output"
	grep -q '^  rank 1 is the odd one out$' <<<"$output"
	# The table: who waits on whom.
	grep -Eq '^ +1  [0-9]+ +[A-Z] +0 +\(user code\)' <<<"$output"
	grep -Eq '^ +2  [0-9]+ +[A-Z] +1 +barrier +[0-9.]+s' <<<"$output"
	# The same in --report, for CI.
	r=$BATS_TEST_TMPDIR/r.json
	[ "$(jq -r .reason "$r")" = stall ]
	[ "$(jq -r .diagnosis.verdict "$r")" = missing_rank ]
	[ "$(jq -r '.diagnosis.calls[0].ranks | join(",")' "$r")" = 0,2,3 ]
	[ "$(jq -r '.diagnosis.ranks[1].last_call.seq' "$r")" = 0 ]
	[ "$(jq -r '.diagnosis.ranks[1].stack_method' "$r")" = gdb ]
	# what groups ranks: their frames from the call outwards
	[ "$(jq -r '[.diagnosis.ranks[0,2,3].stack_group] | unique | length' "$r")" = 1 ]
	jq -r '.diagnosis.ranks[0].stack_group' "$r" |
		grep -qx "dr_barrier (coll_api.c:[0-9]*) < main (diag_hang.c:$(line "$HANG_C" barrier))"
	jq -r .diagnosis.text "$r" | grep -q 'rank 1 never entered it'
	nothing_left "$r"
}

@test "a rank stuck in user code, reported at --timeout" {
	run "$DISTRUN" -n 4 --timeout 20s --report "$BATS_TEST_TMPDIR/r.json" "$HANG" user
	[ "$status" -eq 124 ]
	grep -q '^distrun: timeout after 20s (4 ranks)$' <<<"$output"
	grep -Eq '^  world seq 4 all_reduce\(float32 x 4, sum\): ranks 0-1,3 waiting' <<<"$output"
	grep -Eq '^  rank 2 never entered it: in user code for [0-9.]+s, last call seq 3$' <<<"$output"
	grep -q "stuck_in_user_code (diag_hang.c:$(line "$HANG_C" stuck_in_user_code))" <<<"$output"
	[ "$(jq -r .reason "$BATS_TEST_TMPDIR/r.json")" = timeout ]
	nothing_left "$BATS_TEST_TMPDIR/r.json"
}

@test "two ranks calling different collectives: which ranks called what" {
	run "$DISTRUN" -n 4 --report "$BATS_TEST_TMPDIR/r.json" "$HANG" mismatch
	[ "$status" -eq 1 ]
	grep -q '^distrun: mismatch: the ranks made different calls as world seq 1$' <<<"$output"
	grep -Eq '^  ranks? [0-9,-]+ called all_reduce\(float32 x 4, sum\)$' <<<"$output"
	grep -Eq '^  ranks? [0-9,-]+ called broadcast\(float32 x 4, root 0\)$' <<<"$output"
	r=$BATS_TEST_TMPDIR/r.json
	[ "$(jq -r .diagnosis.verdict "$r")" = mismatch ]
	[ "$(jq -r '[.diagnosis.calls[].call] | join(";")' "$r")" = \
	  "all_reduce(float32 x 4, sum);broadcast(float32 x 4, root 0)" ]
	nothing_left "$r"
}

@test "a rank killed inside all_reduce is named, with the call" {
	run "$DISTRUN" -n 4 --report "$BATS_TEST_TMPDIR/r.json" "$HANG" kill
	[ "$status" -ne 0 ]
	grep -Eq '^distrun: rank 1 was killed by SIGKILL inside world seq 1 all_reduce\(float32 x 4, sum\), [0-9.]+s after it entered it$' <<<"$output"
	grep -Eq '^  rank 3 never entered it: in user code for [0-9.]+s, last call seq 0$' <<<"$output"
	r=$BATS_TEST_TMPDIR/r.json
	[ "$(jq -r .diagnosis.verdict "$r")" = killed ]
	[ "$(jq -r .diagnosis.failed_rank "$r")" = 1 ]
	nothing_left "$r"
}

@test "a rank stopped by SIGSTOP is the rank named, over TCP at n=8, not its neighbours" {
	# Its peers in the ring wait on each other; the timeout's message
	# must say which rank has not come, and why.
	run env DISTRUN_TRANSPORT=tcp DISTRUN_TIMEOUT=3s "$DISTRUN" -n 8 \
		--timeout 60s --grace 5s "$HANG" sigstop
	echo "$output"
	[ "$status" -eq 1 ]
	grep -Eq 'DR_ETIMEDOUT: rank [0-7]: timed out after 3000 ms in all_reduce\(count=1024, float32, sum\) \(seq [0-9]+\) waiting to (receive from|send to) rank [0-7]; not yet in this call: rank 5 \(its process is stopped: SIGSTOP\?\)' <<<"$output"
	# no other rank is said to be behind
	! grep -E 'not yet in this call: .*rank [0-46-7] \(' <<<"$output"
	grep -Eq '^ +5  SIGTERM .* was stopped \(SIGSTOP\?\)$' <<<"$output"
}

@test "a point-to-point deadlock: each rank's peer" {
	run "$DISTRUN" -n 2 --stall-timeout 3s --report "$BATS_TEST_TMPDIR/r.json" "$HANG" p2p
	[ "$status" -eq 124 ]
	grep -q '^  rank 0 in recv from rank 1 (int32 x 1) for' <<<"$output"
	grep -q '^  p2p deadlock: rank 0 waits to receive from rank 1, rank 1 waits to receive from rank 0 (a cycle)$' <<<"$output"
	grep -q 'dr_recv (p2p.c:[0-9]*)' <<<"$output"
	r=$BATS_TEST_TMPDIR/r.json
	[ "$(jq -r .diagnosis.verdict "$r")" = p2p_deadlock ]
	[ "$(jq -r '.diagnosis.ranks[0].call.peer' "$r")" = 1 ]
	[ "$(jq -r '.diagnosis.ranks[1].call.peer_dir' "$r")" = recv ]
	nothing_left "$r"
}

@test "SIGTERM to distrun: the report comes before the ranks are stopped" {
	start_job -n 4 --report "$BATS_TEST_TMPDIR/r.json" "$HANG" skip
	ready 4
	# Every rank past init: the three in the barrier wait for rank 1.
	sleep 0.5
	kill -TERM "$DPID"
	finish
	[ "$DSTATUS" -eq 143 ]
	grep -q '^distrun: got SIGTERM (4 ranks)$' "$ERR"
	grep -q '^  rank 1 never entered it' "$ERR"
	# Report first, then the stop; the ranks died of the signal, not
	# before the report's stacks were taken.
	[ "$(grep -n 'got SIGTERM (4 ranks)' "$ERR" | cut -d: -f1)" -lt \
	  "$(grep -n 'stopping the job' "$ERR" | cut -d: -f1)" ]
	[ "$(jq -r '.diagnosis.ranks[1].stack_method' "$BATS_TEST_TMPDIR/r.json")" = gdb ]
	[ "$(jq -r .diagnosis.reason "$BATS_TEST_TMPDIR/r.json")" = signal ]
	nothing_left "$BATS_TEST_TMPDIR/r.json"
}

@test "without gdb the report still comes and says why there are no stacks" {
	DISTRUN_GDB=/nonexistent run "$DISTRUN" -n 4 --stall-timeout 3s \
		--report "$BATS_TEST_TMPDIR/r.json" "$HANG" skip
	[ "$status" -eq 124 ]
	grep -Eq '^  world seq 1 barrier: ranks 0,2-3 waiting' <<<"$output"
	grep -q '^    ranks 0-3: no stack: DISTRUN_GDB=/nonexistent: No such file or directory$' <<<"$output"
	grep -Eq '^ +1  [0-9]+ +[A-Z] +0 +\(user code\)' <<<"$output"
	[ "$(jq -r '.diagnosis.ranks[0].stack_method' "$BATS_TEST_TMPDIR/r.json")" = null ]
	nothing_left "$BATS_TEST_TMPDIR/r.json"
	# gdb not in PATH (the program by its full path)
	PATH=/nonexistent run "$DISTRUN" -n 2 --stall-timeout 3s "$HANG" p2p
	[ "$status" -eq 124 ]
	grep -q '^    ranks 0-1: no stack: gdb not found in PATH' <<<"$output"
	grep -q '^  p2p deadlock' <<<"$output"
}

@test "a stack that is not UTF-8: the report keeps it, U+FFFD for the bad bytes" {
	# gdb names the source file as its bytes are; jansson takes valid
	# UTF-8 only, and a refused string must not cost the diagnosis.
	command -v cc >/dev/null && command -v gdb >/dev/null ||
		skip "needs cc and gdb"
	local src=$BATS_TEST_TMPDIR/$'spin\xff.c' r=$BATS_TEST_TMPDIR/r.json
	printf '%s\n' 'static volatile int x;' \
		'static void spin(void) { for (;;) x++; }' \
		'int main(void) { spin(); return 0; }' >"$src"
	cc -g -O0 -o "$BATS_TEST_TMPDIR/spin" "$src"
	run "$DISTRUN" -n 1 --timeout 2s --report "$r" "$BATS_TEST_TMPDIR/spin"
	[ "$status" -eq 124 ]
	[ "$(jq -r .diagnosis.verdict "$r")" = no_control_block ]
	jq -r '.diagnosis.ranks[0].stack_summary' "$r" |
		grep -q "spin (spin"$'\xef\xbf\xbd'".c:2)"
	jq -r .diagnosis.text "$r" | grep -q "spin (spin"$'\xef\xbf\xbd'".c:2)"
}

@test "Python ranks: stacks of every rank by faulthandler, the odd one named" {
	require_torch
	start_job -n 4 --report "$BATS_TEST_TMPDIR/r.json" "$TORCH_PYTHON" "$HANG_PY"
	ready 4
	sleep 1
	kill -INT "$DPID"
	finish
	[ "$DSTATUS" -eq 130 ]
	grep -q '^distrun: got SIGINT (4 ranks)$' "$ERR"
	grep -q "^    ranks 0,2-3: dist.barrier() hang.py:$(line "$HANG_PY" barrier) (in barrier, distributed_c10d.py:[0-9]*)$" "$ERR"
	grep -q "^    rank 1: time.sleep(600) hang.py:$(line "$HANG_PY" sleep)$" "$ERR"
	grep -q '^  rank 1 is the odd one out$' "$ERR"
	r=$BATS_TEST_TMPDIR/r.json
	[ "$(jq -r '.diagnosis.ranks[1].stack_method' "$r")" = python ]
	[ "$(jq -r .diagnosis.verdict "$r")" = no_control_block ]
	# The rank kept running after its dump: SIGINT's stop ended it.
	[ "$(jq -r '.ranks[1].signal' "$r")" = SIGINT ]
	nothing_left "$r"
}

@test "--trace: one track per rank, a slice per call, waits and output" {
	run "$DISTRUN" -n 4 --trace "$BATS_TEST_TMPDIR/t.json" "$HANG" ok
	[ "$status" -eq 0 ]
	t=$BATS_TEST_TMPDIR/t.json
	python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$t"
	[ "$(jq '[.traceEvents[] | select(.name == "thread_name")] | length' "$t")" = 4 ]
	[ "$(jq -r '[.traceEvents[] | select(.name == "thread_name") | .args.name] | join(",")' "$t")" = \
	  "rank 0,rank 1,rank 2,rank 3" ]
	for r in 0 1 2 3; do
		# init's barrier (seq 0), three more, one all_reduce
		[ "$(jq "[.traceEvents[] | select(.tid == $r and .cat == \"collective\" and .name == \"barrier\")] | length" "$t")" = 4 ]
		[ "$(jq -r "[.traceEvents[] | select(.tid == $r and .name == \"all_reduce\") | .args | \"\(.seq) \(.bytes) \(.op) \(.group)\"] | join(\",\")" "$t")" = "4 16 sum 0" ]
		[ "$(jq -r "[.traceEvents[] | select(.tid == $r and .ph == \"i\") | .name] | join(\",\")" "$t")" = "rank $r ready" ]
	done
	# Ranks 1-3 waited for rank 0 at barrier seq 1.
	for r in 1 2 3; do
		[ "$(jq "[.traceEvents[] | select(.tid == $r and .cat == \"wait\" and .args.seq == 1) | .name] | .[0]" "$t")" = '"wait for rank 0"' ]
	done
	[ "$(jq .otherData.dropped_calls "$t")" = 0 ]
}

@test "the summary: time in collectives and who arrived late at a barrier" {
	run "$DISTRUN" -v -n 4 --report "$BATS_TEST_TMPDIR/r.json" "$EXAMPLES/03_async_barrier"
	[ "$status" -eq 0 ]
	grep -Eq '^ +time in collectives \(calls\): rank 0 [0-9.]+s \([0-9]+\), rank 1 ' <<<"$output"
	grep -Eq '^ +rank 0 arrived [0-9.]+ s after the others at barrier seq 1$' <<<"$output"
	r=$BATS_TEST_TMPDIR/r.json
	[ "$(jq '.barrier_skew[0] | "\(.rank) \(.seq)"' "$r")" = '"0 1"' ]
	[ "$(jq '.collectives | length' "$r")" = 4 ]
	[ "$(jq .diagnosis "$r")" = null ]
}

@test "--stall-timeout and --trace: bad values are refused" {
	run "$DISTRUN" --stall-timeout soon true
	[ "$status" -eq 2 ]
	grep -q "invalid --stall-timeout 'soon'" <<<"$output"
	run "$DISTRUN" --stall-timeout 0 true
	[ "$status" -eq 2 ]
	run "$DISTRUN" --trace "" true
	[ "$status" -eq 2 ]
	run "$DISTRUN" --trace /nonexistent/dir/t.json true
	[ "$status" -eq 2 ]   # refused before the start (outfile.c)
	grep -q '^distrun: --trace /nonexistent/dir/t.json: No such file or directory$' <<<"$output"
}

@test "a job that makes progress is not stopped by --stall-timeout" {
	run "$DISTRUN" -n 2 --stall-timeout 1m "$HANG" ok
	[ "$status" -eq 0 ]
	! grep -q 'no progress' <<<"$output"
}

@test "stacks for a user who is not root (ranks let distrun's gdb trace them)" {
	[ "$(id -u)" -eq 0 ] || skip "creating a test user needs root"
	command -v useradd >/dev/null && command -v setpriv >/dev/null ||
		skip "useradd or setpriv is missing"
	DIAG_USER=drdiag$$
	add_user "$DIAG_USER" -M -d /nonexistent -s /usr/sbin/nologin
	run setpriv --reuid "$DIAG_USER" --regid "$DIAG_USER" --init-groups -- \
		"$DISTRUN" -n 4 --stall-timeout 3s "$HANG" skip
	userdel "$DIAG_USER" || true
	DIAG_USER=
	[ "$status" -eq 124 ]
	grep -q "^    rank 1: .*compute_step (diag_hang.c:$(line "$HANG_C" compute_step))" <<<"$output"
	! grep -q 'no stack' <<<"$output"
}

@test "ranks that refuse tracing: the report says so and gives the rest" {
	[ "$(id -u)" -eq 0 ] || skip "creating a test user needs root"
	command -v useradd >/dev/null && command -v setpriv >/dev/null ||
		skip "useradd or setpriv is missing"
	DIAG_USER=drdiag$$
	add_user "$DIAG_USER" -M -d /nonexistent -s /usr/sbin/nologin
	# Not dumpable: only CAP_SYS_PTRACE may trace them.
	run setpriv --reuid "$DIAG_USER" --regid "$DIAG_USER" --init-groups -- \
		"$DISTRUN" -n 4 --stall-timeout 3s "$HANG" nodump
	userdel "$DIAG_USER" || true
	DIAG_USER=
	[ "$status" -eq 124 ]
	grep -q '^    ranks 0-3: no stack: tracing refused (ptrace: Operation not permitted)$' <<<"$output"
	grep -Eq '^  rank 1 never entered it: in user code for [0-9.]+s, last call seq 0$' <<<"$output"
	grep -Eq '^ +1  [0-9]+ +[A-Z] +0 +\(user code\)' <<<"$output"
}
