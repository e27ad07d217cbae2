#!/usr/bin/env bats
# --stdin: who reads distrun's stdin.  Rank 0 by default (as mpirun), every
# rank (all), one rank, or none; the others read /dev/null.  Real ranks
# (sh, md5sum, Python's pdb) read what is piped into distrun.  Every
# distrun runs under timeout(1): a hang fails the test instead of stalling
# the suite.

load common
bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	for pid in $(jobs -p); do kill -9 "$pid" 2>/dev/null; done
	return 0
}

# Each rank prints its rank, what its fd 0 is, and what it read.
READER='echo "$RANK $(readlink /proc/self/fd/0 | sed "s/:.*//") $(cat | tr "\n" " ")"'

@test "by default rank 0 reads distrun's stdin and the other ranks read /dev/null" {
	run timeout 60 "$DISTRUN" -n 3 --raw sh -c "$READER" <<<$'one\ntwo'
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'0 pipe one two \n1 /dev/null \n2 /dev/null ' ]
}

@test "--stdin all gives every rank the same bytes" {
	run timeout 60 "$DISTRUN" -n 4 --raw --stdin all sh -c "$READER" <<<$'one\ntwo'
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'0 pipe one two \n1 pipe one two \n2 pipe one two \n3 pipe one two ' ]
}

@test "--stdin 2 gives rank 2 alone the stdin; --ranks 2 shows it" {
	run timeout 60 "$DISTRUN" -n 4 --raw --stdin 2 sh -c "$READER" <<<"for two"
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'0 /dev/null \n1 /dev/null \n2 pipe for two \n3 /dev/null ' ]
	run timeout 60 "$DISTRUN" -n 4 --ranks 2 --stdin 2 sh -c "$READER" <<<"for two"
	[ "$status" -eq 0 ]
	[ "$output" = "[2] 2 pipe for two " ]
}

@test "--stdin none: every rank reads /dev/null, and distrun does not read its stdin" {
	printf 'left for the next reader\n' >in
	run timeout 60 sh -c '"$0" -n 2 --raw --stdin none sh -c "$1"; cat' "$DISTRUN" "$READER" <in
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'0 /dev/null \n1 /dev/null \nleft for the next reader' ]
}

@test "8 MiB arrive intact, at rank 0 and at each of 4 ranks with --stdin all" {
	head -c 8388608 /dev/urandom >big
	sum=$(md5sum <big)
	run timeout 120 "$DISTRUN" -n 2 --raw md5sum <big
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = "$(printf '%s\n%s' "$(md5sum </dev/null)" "$sum" | sort)" ]
	# Through a pipe too (a file is always readable; a pipe comes in
	# pieces).
	run timeout 120 sh -c 'cat big | "$0" -n 4 --raw --stdin all md5sum' "$DISTRUN"
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '%s\n%s\n%s\n%s' "$sum" "$sum" "$sum" "$sum")" ]
}

@test "ranks that never read stdin do not hang the job, even when it never ends" {
	# yes(1) writes forever; the job ends when its ranks do.
	run timeout 60 sh -c 'yes | "$0" -n 2 true' "$DISTRUN"
	[ "$status" -eq 0 ]
	# A stdin that is never closed, and never written.
	mkfifo fifo
	exec 7<>fifo
	run timeout 60 "$DISTRUN" -n 2 --stdin all sh -c 'echo $RANK' <&7
	exec 7>&-
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'[0] 0\n[1] 1' ]
}

@test "a rank that closes its stdin or exits does not stall the others, nor SIGPIPE distrun" {
	head -c 4194304 /dev/urandom >big
	sum=$(md5sum <big)
	# Rank 0 closes its stdin at once and lives on until ranks 2 and 3
	# have read everything (a stall on rank 0 would keep them from it);
	# rank 1 exits at once.
	run timeout 120 sh -c 'cat big | "$0" -n 4 --raw --stdin all sh -c '\''
		case $RANK in
		0) exec 0<&-
		   i=0
		   until [ -e done2 ] && [ -e done3 ]; do
			i=$((i + 1)); [ $i -le 900 ] || { echo stalled; exit 1; }
			sleep 0.1
		   done
		   echo closed ;;
		1) echo gone ;;
		*) md5sum; touch done$RANK ;;
		esac'\' "$DISTRUN"
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = "$(printf '%s\n%s\nclosed\ngone' "$sum" "$sum" | sort)" ]
}

@test "a restarted job's rank reads on: at EOF it gets EOF at once" {
	run timeout 60 "$DISTRUN" --max-restarts 1 sh -c 'echo "read: $(cat)"; exit 3' <<<"only once"
	[ "$status" -eq 3 ]
	[ "$(grep -c '^\[0\] read: only once$' <<<"$output")" -eq 1 ]
	[ "$(grep -c '^\[0\] read: $' <<<"$output")" -eq 1 ]
	grep -q "restarting the job (restart 1 of 1)" <<<"$output"
}

@test "the runs of a sweep read /dev/null: one stdin cannot feed several runs" {
	run timeout 60 "$DISTRUN" -n 1,2 --raw --stdin all sh -c "$READER" <<<"for nobody"
	[ "$status" -eq 0 ]
	[ "$(grep -v '^distrun: ' <<<"$output" | sort)" = $'0 /dev/null \n0 /dev/null \n1 /dev/null ' ]
}

@test "bad --stdin values: a clear error, exit 2, nothing starts" {
	for v in x -1 "" 1.5 all2 " 1" 4; do
		run "$DISTRUN" -n 4 --stdin "$v" touch started
		[ "$status" -eq 2 ] || { echo "--stdin '$v': status $status"; false; }
		[ "${lines[1]}" = "Try 'distrun --help'." ]
		[ ! -e started ]
	done
	run "$DISTRUN" -n 4 --stdin x true
	[ "${lines[0]}" = "distrun: --stdin 'x': expected a rank (0, 1, ...), all or none" ]
	run "$DISTRUN" -n 4 --stdin 4 true
	[ "${lines[0]}" = "distrun: --stdin 4: no such rank (the job's ranks are 0..3)" ]
}

@test "pdb in rank 0: breakpoint() driven by commands piped into distrun" {
	cat >dbg.py <<-'PY'
	import os
	x = 6
	if os.environ["RANK"] == "0":
	    breakpoint()
	print("rank", os.environ["RANK"], "done")
	PY
	run timeout 60 env -u PYTHONBREAKPOINT "$DISTRUN" -n 2 /usr/bin/python3 dbg.py \
		< <(printf 'p 6*7\np x * 100\nc\n')
	[ "$status" -eq 0 ]
	grep -qx '\[0\] (Pdb) 42' <<<"$output"
	grep -qx '\[0\] (Pdb) 600' <<<"$output"
	grep -qx '\[0\] (Pdb) rank 0 done' <<<"$output"
	grep -qx '\[1\] rank 1 done' <<<"$output"
}

@test "in the background of a terminal distrun leaves it alone; in the foreground rank 0 reads it" {
	cat >term.py <<-'PY'
	# A terminal (pty) with distrun in its foreground process group, or
	# in a background one: there a read of the terminal would stop
	# distrun (SIGTTIN).
	import os, pty, select, sys, time
	distrun, where = sys.argv[1], sys.argv[2]
	pid, fd = pty.fork()
	if pid == 0:
	    argv = [distrun, "-n", "2", "--raw", "sh", "-c",
	            'if [ $RANK = 0 ] && [ "$0" = fg ]; then read a; echo "got $a"; '
	            'else sleep 0.5; echo "rank $RANK"; fi', where]
	    child = os.fork()
	    if child == 0:
	        if where == "bg":
	            os.setpgid(0, 0)
	        os.execv(distrun, argv)
	    _, st = os.waitpid(child, os.WUNTRACED)
	    print("stopped" if os.WIFSTOPPED(st) else "exit %d" % os.waitstatus_to_exitcode(st))
	    if os.WIFSTOPPED(st):
	        os.kill(child, 9)
	    os._exit(0)
	os.write(fd, b"typed\n")
	out, end = b"", time.time() + 30
	while time.time() < end:
	    if select.select([fd], [], [], 1)[0]:
	        try:
	            d = os.read(fd, 4096)
	        except OSError:
	            break
	        if not d:
	            break
	        out += d
	os.waitpid(pid, 0)
	sys.stdout.write(out.decode().replace("\r", ""))
	PY
	run timeout 60 /usr/bin/python3 term.py "$DISTRUN" bg
	[ "$status" -eq 0 ]
	[ "$(grep -v typed <<<"$output" | sort)" = $'exit 0\nrank 0\nrank 1' ]
	run timeout 60 /usr/bin/python3 term.py "$DISTRUN" fg
	[ "$status" -eq 0 ]
	[ "$(grep -v '^typed$' <<<"$output" | sort)" = $'exit 0\ngot typed\nrank 1' ]
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

@test "two nodes: only the node holding --stdin's rank reads its stdin" {
	p=$(free_port)
	export DISTRUN_SECRET=0123456789abcdef0123456789abcdef
	node() { # node K: node K of 2 with 2 ranks, --stdin 3
		timeout 60 "$DISTRUN" --nnodes 2 --node-rank "$1" --master-addr 127.0.0.1 \
			--master-port "$p" -n 2 --raw --stdin 3 sh -c "$READER"
	}
	# Node 0 must not read its stdin: it is left for the cat after it.
	printf 'node 0 input\n' >in0
	{ node 0 >out0 2>&1; echo "rc $?" >>out0; cat >>out0; } <in0 &
	printf 'node 1 input\n' | node 1 >out1 2>&1
	echo "rc $?" >>out1
	wait
	cat out0 out1
	[ "$(sort out0)" = $'0 /dev/null \n1 /dev/null \nnode 0 input\nrc 0' ]
	[ "$(sort out1)" = $'2 /dev/null \n3 pipe node 1 input \nrc 0' ]
}
