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
	( exec env --default-signal=INT,QUIT "$DISTRUN" "$@" ) >"$OUT" 2>"$ERR" &
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
	wait_until 60 dead "$DPID" || {
		echo "distrun still runs after 60 s; killed"
		kill -KILL "$DPID"
		wait "$DPID"
		return 1
	}
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
	# (stopped by itself, not by distrun: the summary says so)
	grep -Eq '^ +0  SIGTERM .* was stopped \(SIGSTOP\?\)$' <<<"$output"
	grep -Eq '^ +1  SIGTERM .* was stopped \(SIGSTOP\?\)$' <<<"$output"
}

# double_fork_job N [ENV...]: N ranks each leave a setsid'd sleeper behind
# a double fork (its pid in $BATS_TEST_TMPDIR/sleeper.RANK), then hang.
double_fork_job() {
	local n=$1; shift
	OUT=$BATS_TEST_TMPDIR/out
	ERR=$BATS_TEST_TMPDIR/err
	( exec env --default-signal=INT,QUIT "$@" "$DISTRUN" -n "$n" --grace 60s sh -c '
		f=$1.$RANK
		( setsid sh -c "echo \$\$ >$f.tmp && mv $f.tmp $f; exec sleep 120" & )
		exec "$0"' "$TESTDATA/hang" "$BATS_TEST_TMPDIR/sleeper" ) \
		>"$OUT" 2>"$ERR" &
	DPID=$!
}
sleepers_ready() {
	[ "$(ls "$BATS_TEST_TMPDIR"/sleeper.? 2>/dev/null | wc -l)" -ge "$1" ]
}

@test "kill -9 of distrun: setsid'd, double-forked descendants die too" {
	double_fork_job 3
	ready 3
	wait_until 30 sleepers_ready 3
	sleepers=$(cat "$BATS_TEST_TMPDIR"/sleeper.?)
	ranks=$(job_pids)
	# Not in any process group of the ranks, not distrun's child.
	for p in $sleepers; do
		[ "$(ps -o sid= -p "$p" | tr -d ' ')" = "$p" ]
	done
	cg=$(grep '^0::' /proc/"$(head -1 <<<"$sleepers")"/cgroup | cut -d: -f3)
	kill -KILL "$DPID"
	wait_until 30 dead $ranks $sleepers
	# The job's cgroup (where one could be made) is gone too.
	case $cg in
	*/distrun.*) mnt=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
		wait_until 30 test ! -d "$mnt$cg" ;;
	esac
}

@test "kill -9 of distrun without a cgroup (DISTRUN_CGROUP=0): descendants die too" {
	double_fork_job 2 DISTRUN_CGROUP=0
	ready 2
	wait_until 30 sleepers_ready 2
	sleepers=$(cat "$BATS_TEST_TMPDIR"/sleeper.?)
	! grep -q distrun /proc/"$(head -1 <<<"$sleepers")"/cgroup
	kill -KILL "$DPID"
	wait_until 30 dead $(job_pids) $sleepers
}

# traced_in_cgroup NAME PROG [STRACE-ARGS...]: 3 ranks of sh -c PROG under
# strace -f (clone3, vfork, write); every rank and its child must say
# they are in the job's cgroup.  Sets $st (the trace) and $pid (distrun's).
traced_in_cgroup() {
	local name=$1 prog=$2; shift 2
	st=$BATS_TEST_TMPDIR/$name
	# ASan's leak checker cannot run under ptrace
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
	run strace -f -qq -e trace=clone3,vfork,write -e signal=none "$@" \
		-o "$st" "$DISTRUN" -q -n 3 sh -c "$prog"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^\[[0-2]\] cg 0::/\(.*/\)\?distrun\.' <<<"$output")" -eq 6 ]
	# (strace pads the pid column: "9638  clone3(...")
	pid=$(grep -m1 'clone3(' "$st" | awk '{ print $1 }')
	[ -n "$pid" ] || { cat "$st"; false; }
}

@test "ranks are made inside the job's cgroup by clone3, and move themselves in where clone3 is refused" {
	# what each rank and a child of it see as their cgroup
	prog='echo "cg $(grep "^0::" /proc/self/cgroup)"; sh -c "echo \"cg \$(grep ^0:: /proc/self/cgroup)\""'
	run "$DISTRUN" -q -n 1 sh -c "$prog"
	[ "$status" -eq 0 ]
	case $output in
	*"cg 0::"*/distrun.*) ;;
	*) skip "no cgroup v2 here that distrun may make one in ($output)" ;;
	esac
	# clone3 with CLONE_INTO_CGROUP, no write to cgroup.procs
	traced_in_cgroup st "$prog"
	[ "$(grep -c 'clone3(.*CLONE_INTO_CGROUP' "$st")" -eq 3 ]
	! grep -Eq "^$pid +vfork\(" "$st"
	! grep -Eq 'write\([0-9]+, "0", 1\)' "$st"
	# a kernel or seccomp filter without clone3: vfork, and each rank
	# writes itself into cgroup.procs; clone3 asked once, not per rank
	traced_in_cgroup st2 "$prog" -e inject=clone3:error=ENOSYS
	[ "$(grep -c 'clone3(.*CLONE_INTO_CGROUP.*ENOSYS' "$st")" -eq 1 ]
	# the launcher vforks instead, and each rank writes itself in
	grep -Eq "^$pid +vfork\(" "$st" || { cat "$st"; false; }
	[ "$(grep -Ec 'write\([0-9]+, "0", 1\) += 1' "$st")" -eq 3 ] ||
		{ cat "$st"; false; }
}

@test "a setsid'd, double-forked descendant is stopped at the end of a normal job" {
	run "$DISTRUN" -n 2 --grace 60s sh -c '
		( setsid sh -c "echo \$\$ >$0.$RANK.tmp && mv $0.$RANK.tmp $0.$RANK; exec sleep 120" & )
		i=0; while [ ! -e $0.$RANK ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done' \
		"$BATS_TEST_TMPDIR/sleeper"
	[ "$status" -eq 0 ]
	gone $(cat "$BATS_TEST_TMPDIR"/sleeper.?)
}

# spawn_with_pid PID CMD...: starts CMD in the background as pid PID
# (through ns_last_pid); false if another process took the pid first.
spawn_with_pid() {
	local want=$1; shift
	echo $((want - 1)) >/proc/sys/kernel/ns_last_pid 2>/dev/null || return 2
	"$@" &
	if [ "$!" -ne "$want" ]; then
		kill "$!" 2>/dev/null || true
		return 1
	fi
}

@test "the guard forgets a reaped rank: a stranger that reuses its pid survives kill -9 of distrun" {
	[ -w /proc/sys/kernel/ns_last_pid ] || skip "needs ns_last_pid (root)"
	# Rank 0 exits at once; rank 1 hangs.
	start_job -n 2 --grace 60s sh -c '[ "$RANK" = 0 ] && { echo "pid $$"; exit 0; }; exec "$0"' "$TESTDATA/hang"
	ready 2
	r0=$(grep '^\[0\] pid' "$OUT" | awk '{ print $3 }')
	wait_until 30 gone "$r0"
	# A stranger with the reaped rank's pid, leading its own group.
	got=
	for i in $(seq 20); do
		if spawn_with_pid "$r0" setsid sleep 120; then got=$!; break; fi
	done
	[ -n "$got" ] || skip "could not get pid $r0 back (a busy machine)"
	[ "$(ps -o pgid= -p "$got" | tr -d ' ')" = "$r0" ]
	r1=$(grep '^\[1\] pid' "$OUT" | awk '{ print $3 }')
	guard=$(ps -o pid= --ppid "$DPID" | tr -d ' ' | grep -vx "$r1" | head -1)
	kill -KILL "$DPID"
	wait_until 30 dead "$r1"
	[ -z "$guard" ] || wait_until 30 dead "$guard"
	ps -o pid= -p "$got" >/dev/null
	kill "$got"
}
