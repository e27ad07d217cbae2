#!/usr/bin/env bats
# torchrun's habits: scripts run with Python, -m, --no-python, the
# single-node forms of torchrun's options (multi-node: tests/multinode.bats),
# --max-restarts (refused with several nodes), line-buffered Python ranks; and the rough edges a
# new user hit (paths checked before the start, hints, what a job left
# behind).

load common
bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_TMPDIR"
	cat >show.py <<-'PY'
	import os, sys
	print("rank", os.environ["RANK"], "python", sys.executable, "args", sys.argv[1:])
	PY
}

@test "a .py PROGRAM runs with Python, as under torchrun; -v names the interpreter" {
	DISTRUN_PYTHON=/usr/bin/python3 run "$DISTRUN" -v --nproc-per-node 2 show.py a b
	[ "$status" -eq 0 ]
	grep -qx "\[0\] rank 0 python /usr/bin/python3 args \['a', 'b'\]" <<<"$output"
	grep -qx "\[1\] rank 1 python /usr/bin/python3 args \['a', 'b'\]" <<<"$output"
	grep -qx "distrun: running show.py with /usr/bin/python3 (/usr/bin/python3, from DISTRUN_PYTHON)" <<<"$output"
}

@test "--python chooses the interpreter over DISTRUN_PYTHON; without either, python3 from PATH" {
	DISTRUN_PYTHON=/nonexistent run "$DISTRUN" --python /usr/bin/python3 show.py
	[ "$status" -eq 0 ]
	[[ "$output" == *"python /usr/bin/python3 args"* ]]
	mkdir bin && ln -s /usr/bin/python3 bin/python3
	PATH=$PWD/bin:/usr/bin:/bin run env -u DISTRUN_PYTHON "$DISTRUN" show.py
	[ "$status" -eq 0 ]
	[[ "$output" == *"python $PWD/bin/python3 args"* ]]
}

@test "a missing interpreter says where it came from and how to choose another" {
	DISTRUN_PYTHON=nopython run -127 "$DISTRUN" show.py
	[ "$status" -eq 127 ]
	[ "${lines[0]}" = "distrun: nopython: command not found" ]
	[[ "${lines[1]}" == *"show.py is run with Python, nopython from DISTRUN_PYTHON"*"--no-python"* ]]
}

@test "-m runs a module, as python -m" {
	mkdir pkg && printf 'import os\nprint("module rank", os.environ["RANK"])\n' >pkg/hello.py
	touch pkg/__init__.py
	PYTHONPATH=$PWD run "$DISTRUN" -n 2 --python /usr/bin/python3 -m pkg.hello
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'[0] module rank 0\n[1] module rank 1' ]
	run "$DISTRUN" -n 1 --python /usr/bin/python3 --module json.tool --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"usage:"*"json.tool"* ]]
}

@test "--no-python and --no_python run a .py PROGRAM itself" {
	printf '#!/bin/sh\necho "shell $RANK"\n' >direct.py
	chmod +x direct.py
	run "$DISTRUN" -n 2 --no-python ./direct.py
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'[0] shell 0\n[1] shell 1' ]
	run "$DISTRUN" --no_python ./direct.py
	[ "$output" = "[0] shell 0" ]
	# Other programs run as they are, as always.
	run "$DISTRUN" -n 1 "$TESTDATA/envdump" RANK
	[ "$output" = "[0] RANK=0" ]
}

@test "torchrun's single-node options are accepted, in both spellings" {
	for opts in "--standalone" "--nnodes 1" "--nnodes=1:1" "--node-rank 0" \
		"--node_rank=0" "--standalone --nnodes=1 --nproc_per_node=2"; do
		run "$DISTRUN" $opts --python /usr/bin/python3 show.py
		[ "$status" -eq 0 ] || { echo "$opts: $output"; false; }
		grep -q '^\[0\] rank 0 python' <<<"$output"
	done
}

@test "--standalone is one node: with several nodes it is refused, exit 2" {
	for opts in "--nnodes 2" "--nnodes 1:2" "--node-rank 1" \
		"--rdzv-backend static" "--rdzv_endpoint 127.0.0.1:1"; do
		run timeout 60 "$DISTRUN" --standalone $opts true
		[ "$status" -eq 2 ] || { echo "$opts: $status $output"; false; }
		[[ "${lines[0]}" == "distrun: --standalone is one node"* ]] ||
			{ echo "$opts: $output"; false; }
	done
}

@test "--max-restarts with a static rendezvous of several nodes is refused, exit 2, nothing starts" {
	# (through etcd they restart together: multinode.bats)
	for opts in "--nnodes 2" "--nnodes=1:2" "--node_rank=1" \
		"--rdzv-backend static" "--rdzv-endpoint 127.0.0.1:1"; do
		run timeout 60 "$DISTRUN" --max-restarts 2 $opts sh -c 'echo started'
		[ "$status" -eq 2 ] || { echo "$opts: $status $output"; false; }
		[[ "${lines[0]}" == "distrun: --max-restarts restarts a job on one node only"* ]] ||
			{ echo "$opts: $output"; false; }
		[[ "$output" != *started* ]]
	done
	# --max-restarts 0 and one node stay fine.
	run timeout 60 "$DISTRUN" --max-restarts 0 --nnodes 1 true
	[ "$status" -eq 0 ]
}

@test "a torch script runs unmodified as 'distrun --nproc-per-node 2 train.py'" {
	require_torch
	cat >train.py <<-'PY'
	import torch, torch.distributed as dist
	dist.init_process_group("gloo")
	t = torch.tensor([dist.get_rank() + 1.0])
	dist.all_reduce(t)
	print("sum", t.item())
	dist.destroy_process_group()
	PY
	DISTRUN_PYTHON=$TORCH_PYTHON run "$DISTRUN" --nproc-per-node 2 --timeout 300s train.py
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[ "$(sort <<<"$output")" = $'[0] sum 3.0\n[1] sum 3.0' ]
}

@test "Python ranks are line-buffered: a line shows while the rank still runs" {
	cat >slow.py <<-'PY'
	import os, time
	print("first line")
	for _ in range(600):
	    if os.path.exists("go"):
	        break
	    time.sleep(0.05)
	PY
	"$DISTRUN" -n 1 --python /usr/bin/python3 slow.py >out 2>err &
	pid=$!
	# The line comes before the rank is let go: not in a burst at exit.
	wait_until 30 grep -q '^\[0\] first line$' out
	touch go
	wait "$pid"
}

@test "PYTHONUNBUFFERED is 1 unless the user set it" {
	run env -u PYTHONUNBUFFERED "$DISTRUN" "$TESTDATA/envdump" PYTHONUNBUFFERED
	[ "$output" = "[0] PYTHONUNBUFFERED=1" ]
	PYTHONUNBUFFERED=x run "$DISTRUN" "$TESTDATA/envdump" PYTHONUNBUFFERED
	[ "$output" = "[0] PYTHONUNBUFFERED=x" ]
}

@test "--max-restarts restarts the whole job with TORCHELASTIC_RESTART_COUNT, and says so" {
	# Every rank prints, then waits for the other's mark, so that no
	# line is lost to the stop that a failure starts.
	run "$DISTRUN" -n 2 --max-restarts 3 --report r.json sh -c '
		c=$TORCHELASTIC_RESTART_COUNT
		echo "count $c max $TORCHELASTIC_MAX_RESTARTS"
		touch "m$RANK.$c"; i=0
		while ! [ -e m0.$c ] || ! [ -e m1.$c ]; do
			[ $i -lt 600 ] || break; i=$((i+1)); sleep 0.05
		done
		[ "$RANK" = 1 ] && [ "$c" -lt 2 ] && exit 3
		exit 0'
	[ "$status" -eq 0 ]
	for c in 0 1 2; do
		[ "$(grep -c "^\[[01]\] count $c max 3$" <<<"$output")" -eq 2 ]
	done
	! grep -q "count 3" <<<"$output"
	grep -qx "distrun: rank 1 exited with status 3; restarting the job (restart 1 of 3)" <<<"$output"
	grep -qx "distrun: rank 1 exited with status 3; restarting the job (restart 2 of 3)" <<<"$output"
	[ "$(jq .restarts r.json)" -eq 2 ]
}

@test "--max_restarts: when the restarts are used up, the last failure's status" {
	run "$DISTRUN" -q -n 2 --max_restarts 1 sh -c '
		c=$TORCHELASTIC_RESTART_COUNT
		echo "try $c"
		touch "m$RANK.$c"; i=0
		while ! [ -e m0.$c ] || ! [ -e m1.$c ]; do
			[ $i -lt 600 ] || break; i=$((i+1)); sleep 0.05
		done
		exit 4'
	[ "$status" -eq 4 ]
	[ "$(grep -c 'try 0' <<<"$output")" -eq 2 ]
	[ "$(grep -c 'try 1' <<<"$output")" -eq 2 ]
	[ "$(grep -c 'restarting the job' <<<"$output")" -eq 1 ]
	# Not restarted: a program that cannot run, a stop by a signal.
	run -127 "$DISTRUN" --max-restarts 5 ./no-such-program
	[ "$status" -eq 127 ]
	! grep -q restarting <<<"$output"
}

@test "a rank that exits 0 but leaves a process behind: which rank, which pid and command, what was done" {
	run timeout 120 "$DISTRUN" -n 2 --grace 60s sh -c '
		if [ "$RANK" = 1 ]; then
			sleep 300 & p=$!; echo "left $p"
			# exit once the child is sleep (bounded: 60 s at most)
			i=0
			while [ $i -lt 1200 ] && [ -e /proc/$p ] &&
			      ! grep -q "^sleep" /proc/$p/cmdline; do
				i=$((i+1)); sleep 0.05
			done
		fi
		exit 0'
	[ "$status" -eq 0 ]
	left=$(sed -n 's/^\[1\] left //p' <<<"$output")
	grep -qx "distrun: rank 1 exited but left pid $left (sleep 300) running" <<<"$output"
	grep -qx "distrun: sending it SIGTERM, SIGKILL after 60s (--grace)" <<<"$output"
	! ps -o pid= -p "$left"
}

@test "a left process that ignores SIGTERM is killed after --grace, and that is said too" {
	# Every wait is bounded: the rank waits at most 60 s for its child to
	# be the TERM-ignoring sleep (and stops waiting if the child is gone),
	# and distrun itself runs under timeout.
	run timeout 120 "$DISTRUN" -n 1 --grace 0.5s sh -c '
		sh -c "trap \"\" TERM; echo left \$\$; exec sleep 300" &
		p=$!; i=0
		while [ $i -lt 1200 ] && [ -e /proc/$p ] &&
		      { ! grep -q . /proc/$p/cmdline || grep -q trap /proc/$p/cmdline; }; do
			i=$((i+1)); sleep 0.05
		done'
	left=$(sed -n 's/^\[0\] left //p' <<<"$output")
	alive=0
	if [ -n "$left" ] && kill -0 "$left" 2>/dev/null; then
		alive=1; kill -9 "$left" 2>/dev/null || true
	fi
	[ "$status" -eq 0 ]
	[ "$alive" -eq 0 ]
	grep -qx "distrun: rank 0 exited but left pid $left (sleep 300) running" <<<"$output"
	grep -qx "distrun: left-behind processes still run after 0.5s; sending SIGKILL" <<<"$output"
}

@test "--report and --output-dir are checked before anything starts, with the reason" {
	run "$DISTRUN" --report nodir/r.json sh -c 'touch ran'
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: --report nodir/r.json: No such file or directory" ]
	[ ! -e ran ]
	mkdir ro && chmod 555 ro
	if ! touch ro/x 2>/dev/null; then   # (root writes anywhere)
		run "$DISTRUN" --report ro/r.json sh -c 'touch ran'
		[[ "${lines[0]}" == *"Permission denied" ]]
	fi
	run "$DISTRUN" --output-dir nodir/logs sh -c 'touch ran'
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: --output-dir nodir/logs: No such file or directory" ]
	touch afile
	run "$DISTRUN" --output-dir afile sh -c 'touch ran'
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: --output-dir afile: Not a directory" ]
	run "$DISTRUN" --report afile/r.json sh -c 'touch ran'
	[ "${lines[0]}" = "distrun: --report afile/r.json: Not a directory" ]
	[ ! -e ran ]
}

@test "--ranks 2-1 says the range is reversed" {
	run "$DISTRUN" -n 4 --ranks 2-1 true
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: --ranks '2-1': the range 2-1 is reversed (write 1-2)" ]
}

@test "a script without a #! line: the error says what to do" {
	printf 'echo hi\n' >noshebang
	chmod +x noshebang
	run "$DISTRUN" ./noshebang
	[ "$status" -eq 126 ]
	grep -qx "distrun: rank 0: cannot run ./noshebang: Exec format error (a script needs a first line such as #!/bin/sh; or name its interpreter: distrun ... sh SCRIPT)" <<<"$output"
}

@test "a program in the current directory but not on PATH: the hint says ./prog" {
	cp "$TESTDATA/envdump" myprog
	run -127 "$DISTRUN" myprog RANK
	[ "$output" = "distrun: myprog: command not found (there is ./myprog here: did you mean ./myprog?)" ]
	run "$DISTRUN" ./myprog RANK
	[ "$output" = "[0] RANK=0" ]
}

@test "a rank that exits 1 by itself while the job stops shows its status, not 'stopped'" {
	# Rank 1 takes the SIGTERM (the stop rank 0's failure starts) and
	# exits 1 once it has it and rank 0 is gone.  Rank 0 fails only once
	# rank 1 is ready for the TERM.  Every wait is bounded (60 s).
	run timeout 200 "$DISTRUN" -n 2 --grace 60s sh -c '
		if [ "$RANK" = 0 ]; then
			i=0
			while [ ! -e r1ready ] && [ $i -lt 1200 ]; do
				i=$((i+1)); sleep 0.05
			done
			echo $$ >r0.tmp; mv r0.tmp r0; exit 2
		fi
		t=0; trap "t=1" TERM; touch r1ready
		i=0
		while { [ $t = 0 ] || [ ! -s r0 ] || kill -0 "$(cat r0)" 2>/dev/null; } &&
		      [ $i -lt 1200 ]; do
			i=$((i+1)); sleep 0.05
		done
		exit 1'
	[ "$status" -eq 2 ]
	grep -Eq '^ +0  2 .*first failure$' <<<"$output"
	grep -Eq '^ +1  1 .*failed too$' <<<"$output"
	! grep -Eq '^ +1 .*stopped$' <<<"$output"
}

@test "the EXAMPLES of distrun(3) render with the code in place" {
	ex=$(MANWIDTH=80 man -l "$SRCDIR/man/distrun.3" 2>/dev/null | sed -n '/^EXAMPLES/,/^SEE ALSO/p')
	grep -q 'fprintf(stderr, "init: %s\\n", dr_last_error());' <<<"$ex"
	# No line pushed right: the deepest code is three levels in.
	[ -z "$(awk 'length > 80 || /^ {20,}[a-z]/' <<<"$ex")" ]
}

@test "--log-dir, --redirects, --tee as torchrun: LOGDIR/ID_X/attempt_0/RANK/std{out,err}.log; tee shows and writes" {
	prog='echo "out $RANK"; echo "err $RANK" >&2'
	# --log-dir alone: everything on the console, no output files.
	run "$DISTRUN" -n 2 --log-dir logs sh -c "$prog"
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output")" = $'[0] err 0\n[0] out 0\n[1] err 1\n[1] out 1' ]
	[ -d logs/*_*/attempt_0/1 ]
	[ -z "$(find logs -name '*.log')" ]
	run "$DISTRUN" -n 2 --log_dir logs2 --rdzv-id myjob --redirects 1 sh -c "$prog"
	[ "$(sort <<<"$output")" = $'[0] err 0\n[1] err 1' ]
	[ "$(cat logs2/myjob_*/attempt_0/0/stdout.log)" = "out 0" ]
	[ ! -e logs2/myjob_*/attempt_0/0/stderr.log ]
	run "$DISTRUN" -n 2 --log-dir logs3 --redirects 3 sh -c "$prog"
	[ -z "$output" ]
	[ "$(cat logs3/*/attempt_0/1/stderr.log)" = "err 1" ]
	# The issue's case: --redirects 3 --tee 3 shows the output and writes
	# the files (tee wins, as torchrun's).
	run "$DISTRUN" -n 2 --log-dir logs4 --redirects 3 --tee 3 sh -c "$prog"
	[ "$(sort <<<"$output")" = $'[0] err 0\n[0] out 0\n[1] err 1\n[1] out 1' ]
	[ "$(cat logs4/*/attempt_0/0/stdout.log)" = "out 0" ]
	[ "$(cat logs4/*/attempt_0/1/stderr.log)" = "err 1" ]
	# Per local rank, as torchrun's 0:3,1:2.
	run "$DISTRUN" -n 2 --log-dir logs5 --redirects 0:3,1:2 sh -c "$prog"
	[ "$output" = "[1] out 1" ]
	[ "$(cat logs5/*/attempt_0/0/stdout.log)" = "out 0" ]
	[ "$(cat logs5/*/attempt_0/1/stderr.log)" = "err 1" ]
	[ ! -e logs5/*/attempt_0/1/stdout.log ]
}

@test "--log-dir a/b makes its parents; --redirects without --log-dir writes under a temporary torchelastic_ directory and says where" {
	run "$DISTRUN" -n 1 --log-dir a/b --tee 1 echo hi
	[ "$status" -eq 0 ]
	[ "$output" = "[0] hi" ]
	[ "$(cat a/b/*/attempt_0/0/stdout.log)" = "hi" ]
	TMPDIR=$PWD run "$DISTRUN" -n 1 --redirects 1 echo hi
	[ "$status" -eq 0 ]
	dir=$(sed -n 's/^distrun: log files in //p' <<<"$output")
	[[ "$dir" == "$PWD"/torchelastic_*/* ]]
	[ "$(cat "$dir"/attempt_0/0/stdout.log)" = "hi" ]
}

@test "--max-restarts with --log-dir: a directory per attempt, as torchrun's attempt_K" {
	run "$DISTRUN" -n 1 --max-restarts 1 --log-dir l --redirects 1 sh -c 'echo "try $TORCHELASTIC_RESTART_COUNT"; exit 3'
	[ "$status" -eq 3 ]
	[ "$(cat l/*/attempt_0/0/stdout.log)" = "try 0" ]
	[ "$(cat l/*/attempt_1/0/stdout.log)" = "try 1" ]
}

@test "--redirects and --tee: bad values are named; --log-dir and --output-dir do not go together" {
	run "$DISTRUN" --log-dir l --redirects 4 true
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "distrun: --redirects '4': expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), for every rank or per local rank as in 0:3,1:2" ]
	run "$DISTRUN" --tee 0:1,1 true
	[ "$status" -eq 2 ]
	run "$DISTRUN" --log-dir l --output-dir o true
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == *"give one"* ]]
}
