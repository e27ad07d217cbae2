#!/usr/bin/env bats
# The launcher: ranks, their environment, exit status, bad command lines.

load common
bats_require_minimum_version 1.5.0

@test "distrun -n 4 runs four ranks, each with its own RANK" {
	run "$DISTRUN" -n 4 "$TESTDATA/envdump" RANK
	[ "$status" -eq 0 ]
	[ "$(printf '%s\n' "${lines[@]}" | sort)" = "$(printf '[%d] RANK=%d\n' 0 0 1 1 2 2 3 3)" ]
}

@test "every rank gets the torchrun environment" {
	run "$DISTRUN" -n 2 "$TESTDATA/envdump" RANK LOCAL_RANK WORLD_SIZE \
		LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK \
		ROLE_WORLD_SIZE ROLE_NAME MASTER_ADDR TORCHELASTIC_RESTART_COUNT \
		TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_USE_AGENT_STORE
	[ "$status" -eq 0 ]
	for r in 0 1; do
		for kv in RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 \
			GROUP_RANK=0 GROUP_WORLD_SIZE=1 ROLE_RANK=$r \
			ROLE_WORLD_SIZE=2 ROLE_NAME=default MASTER_ADDR=127.0.0.1 \
			TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 \
			TORCHELASTIC_USE_AGENT_STORE=False; do
			grep -qx "\[$r\] $kv" <<<"$output"
		done
	done
}

@test "MASTER_PORT and TORCHELASTIC_RUN_ID are set, the same on every rank" {
	run "$DISTRUN" -n 3 --raw "$TESTDATA/envdump" MASTER_PORT TORCHELASTIC_RUN_ID
	[ "$status" -eq 0 ]
	[ "$(grep -c '^MASTER_PORT=[1-9][0-9]*$' <<<"$output")" -eq 3 ]
	[ "$(grep '^MASTER_PORT=' <<<"$output" | sort -u | wc -l)" -eq 1 ]
	[ "$(grep -c '^TORCHELASTIC_RUN_ID=[0-9a-f]\{32\}$' <<<"$output")" -eq 3 ]
	[ "$(grep '^TORCHELASTIC_RUN_ID=' <<<"$output" | sort -u | wc -l)" -eq 1 ]
}

@test "two jobs get different run ids" {
	a=$("$DISTRUN" --raw "$TESTDATA/envdump" TORCHELASTIC_RUN_ID)
	b=$("$DISTRUN" --raw "$TESTDATA/envdump" TORCHELASTIC_RUN_ID)
	[ -n "$a" ] && [ "$a" != "$b" ]
}

@test "OMP_NUM_THREADS is 1 unless set; an inherited RANK is replaced" {
	run env -u OMP_NUM_THREADS RANK=99 "$DISTRUN" -n 1 "$TESTDATA/envdump" OMP_NUM_THREADS RANK
	[ "$output" = $'[0] OMP_NUM_THREADS=1\n[0] RANK=0' ]
	run env OMP_NUM_THREADS=3 "$DISTRUN" -n 1 "$TESTDATA/envdump" OMP_NUM_THREADS
	[ "$output" = "[0] OMP_NUM_THREADS=3" ]
}

@test "other variables pass through to the ranks" {
	run env DISTRUN_TEST_VAR=hello "$DISTRUN" -n 1 "$TESTDATA/envdump" DISTRUN_TEST_VAR
	[ "$output" = "[0] DISTRUN_TEST_VAR=hello" ]
}

# port.c hands rank 0 the listening sockets (DISTRUN_STORE_FDS) when its
# program holds libdistrun: it looks for the marks in the dynamic strings
# and read-only data of an ELF file, and in the whole file when the
# section headers are missing.
@test "the store's sockets go to a program with libdistrun's marks, found where they can be" {
	command -v objcopy >/dev/null || skip "no objcopy"
	cd "$BATS_TEST_TMPDIR"
	printf 'DISTRUN_STORE_FDS\0' >mark
	run "$DISTRUN" -n 1 --raw "$TESTDATA/envdump" DISTRUN_STORE_FDS
	[ "$output" = "DISTRUN_STORE_FDS=" ]
	objcopy --add-section .rodata.mark=mark "$TESTDATA/envdump" ro
	run "$DISTRUN" -n 1 --raw ./ro DISTRUN_STORE_FDS
	[[ $output = DISTRUN_STORE_FDS=[0-9]* ]]
	# in a section that is neither: code or notes are not looked through
	objcopy --add-section .note.mark=mark "$TESTDATA/envdump" note
	run "$DISTRUN" -n 1 --raw ./note DISTRUN_STORE_FDS
	[ "$output" = "DISTRUN_STORE_FDS=" ]
	# no section headers (e_shoff, e_shnum, e_shstrndx zeroed): all of it
	cat "$TESTDATA/envdump" mark >bare
	printf '\0\0\0\0\0\0\0\0' | dd of=bare bs=1 seek=40 conv=notrunc status=none
	printf '\0\0\0\0' | dd of=bare bs=1 seek=60 conv=notrunc status=none
	chmod +x bare
	run "$DISTRUN" -n 1 --raw ./bare DISTRUN_STORE_FDS
	[[ $output = DISTRUN_STORE_FDS=[0-9]* ]]
}

# A port nothing is bound to now.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0", 0)); print(s.getsockname()[1])'
}

@test "--master-addr and --master-port override the defaults" {
	p=$(free_port)
	run "$DISTRUN" -n 1 --master-addr 10.1.2.3 --master-port "$p" "$TESTDATA/envdump" MASTER_ADDR MASTER_PORT
	[ "$output" = $'[0] MASTER_ADDR=10.1.2.3\n[0] MASTER_PORT='"$p" ]
	p=$(free_port)
	run "$DISTRUN" -n 1 --master_addr h --master_port="$p" "$TESTDATA/envdump" MASTER_ADDR MASTER_PORT
	[ "$output" = $'[0] MASTER_ADDR=h\n[0] MASTER_PORT='"$p" ]
}

@test "two jobs given the same --master-port: the second fails alone, at once, and the first completes" {
	p=$(free_port)
	go=$BATS_TEST_TMPDIR/go
	# The first job waits for the second to have failed, then runs a
	# real rendezvous on the port.
	"$DISTRUN" -n 2 --master-port "$p" sh -c '
		i=0; while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
		exec "$0" init' "$CTESTS/coll_check" "$go" >"$BATS_TEST_TMPDIR/first" 2>&1 &
	first=$!
	# Its lock is taken before it starts any rank.
	wait_until 30 grep -q "@distrun/port/$p\b" /proc/net/unix
	run "$DISTRUN" -n 2 --master-port "$p" "$CTESTS/coll_check" init
	touch "$go"
	[ "$status" -eq 1 ]
	[ "$output" = "distrun: --master-port $p is in use by another distrun job" ]
	wait "$first" || { cat "$BATS_TEST_TMPDIR/first"; false; }
}

@test "a --master-port that another program listens on is refused before anything starts" {
	python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$BATS_TEST_TMPDIR/port" &
	listener=$!
	wait_until 30 test -s "$BATS_TEST_TMPDIR/port"
	p=$(cat "$BATS_TEST_TMPDIR/port")
	run "$DISTRUN" -n 2 --master-port "$p" sh -c 'echo started'
	kill "$listener"
	[ "$status" -eq 1 ]
	[[ "$output" == "distrun: --master-port $p: Address already in use (another program listens on it)" ]]
}

@test "with stdout and stderr closed (>&- 2>&-), a passing job exits 0" {
	run sh -c '"$0" -n 2 "$1" RANK >&- 2>&-' "$DISTRUN" "$TESTDATA/envdump"
	[ "$status" -eq 0 ]
	run sh -c '"$0" -n 2 "$1" RANK <&- >&- 2>&-' "$DISTRUN" "$TESTDATA/envdump"
	[ "$status" -eq 0 ]
	# and a failing one still says so by its status
	run sh -c '"$0" -n 2 sh -c "exit 3" >&- 2>&-' "$DISTRUN"
	[ "$status" -eq 3 ]
}

@test "--timeout and DISTRUN_TIMEOUT read durations alike (one parser)" {
	for d in 1d 1.5h 90 90s 250ms 2m .5d; do
		run "$DISTRUN" --timeout "$d" true
		[ "$status" -eq 0 ] || { echo "--timeout $d: $output"; false; }
		DISTRUN_TIMEOUT=$d run "$DISTRUN" -n 2 "$CTESTS/coll_check" init
		[ "$status" -eq 0 ] || { echo "DISTRUN_TIMEOUT=$d: $output"; false; }
	done
	for d in 1w soon -5s 5x 0 1e3 " 5"; do
		run "$DISTRUN" --timeout "$d" true
		[ "$status" -eq 2 ] || { echo "--timeout $d: $output"; false; }
		DISTRUN_TIMEOUT=$d run "$DISTRUN" -n 1 "$CTESTS/coll_check" init
		[ "$status" -ne 0 ] || { echo "DISTRUN_TIMEOUT=$d accepted"; false; }
		[[ "$output" == *DISTRUN_TIMEOUT* ]]
	done
}

@test "20 concurrent jobs get 20 different master ports" {
	dir=$BATS_TEST_TMPDIR
	for i in $(seq 20); do
		# Rank 0 of each job prints its port, then waits until all 20
		# jobs have printed theirs, so that the 20 surely overlap.
		"$DISTRUN" -n 2 --raw sh -c '
			[ "$RANK" = 0 ] || exit 0
			echo "$MASTER_PORT"
			i=0
			while [ "$(cat "$0"/port.* | wc -l)" -lt 20 ] && [ $i -lt 600 ]; do
				sleep 0.05; i=$((i + 1))
			done' "$dir" >"$dir/port.$i" &
	done
	wait
	[ "$(cat "$dir"/port.* | grep -c '^[0-9][0-9]*$')" -eq 20 ]
	[ "$(cat "$dir"/port.* | sort -u | wc -l)" -eq 20 ]
}

@test "rank 0 can listen on the chosen MASTER_PORT" {
	run "$DISTRUN" -n 1 python3 -c '
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(os.environ["MASTER_PORT"])))
s.listen()
c = socket.create_connection(("127.0.0.1", int(os.environ["MASTER_PORT"])))
print("listening")'
	[ "$status" -eq 0 ]
	[ "$output" = "[0] listening" ]
}

@test "the torchrun spellings of -n are accepted" {
	for opt in "--nproc-per-node 3" "--nproc_per_node 3" "--nproc-per-node=3" "--nproc_per_node=3" "-n3"; do
		run "$DISTRUN" $opt --raw "$TESTDATA/envdump" WORLD_SIZE
		[ "$status" -eq 0 ]
		[ "${#lines[@]}" -eq 3 ]
	done
}

@test "without -n there is one rank, as with torchrun" {
	run "$DISTRUN" "$TESTDATA/envdump" WORLD_SIZE
	[ "$output" = "[0] WORLD_SIZE=1" ]
}

@test "options after the program belong to the program" {
	run "$DISTRUN" -n 1 --raw "$TESTDATA/envdump" -n 5
	[ "$output" = $'-n is unset\n5 is unset' ]
	run "$DISTRUN" -n 1 --raw -- "$TESTDATA/envdump" --raw
	[ "$output" = "--raw is unset" ]
}

@test "the program is found in PATH" {
	run env PATH="$TESTDATA:$PATH" "$DISTRUN" -n 2 --raw envdump WORLD_SIZE
	[ "$status" -eq 0 ]
	[ "$output" = $'WORLD_SIZE=2\nWORLD_SIZE=2' ]
}

@test "exit status is 0 when every rank exits 0" {
	run "$DISTRUN" -n 4 "$TESTDATA/exitcode" 0
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "a failing rank's status is the job's, with a line naming it" {
	run "$DISTRUN" -n 4 --grace 10s "$TESTDATA/exitcode" 3 2
	[ "$status" -eq 3 ]
	grep -q '^distrun: rank 2 exited with status 3 after [0-9.]*s$' <<<"$output"
}

@test "a rank killed by a signal gives 128+signal and the signal's name" {
	run "$DISTRUN" -n 3 --grace 10s "$TESTDATA/killself" 11 1
	[ "$status" -eq 139 ]
	grep -q '^distrun: rank 1 was killed by SIGSEGV after [0-9.]*s$' <<<"$output"
	run "$DISTRUN" -n 1 "$TESTDATA/killself" 6
	[ "$status" -eq 134 ]
	grep -q 'rank 0 was killed by SIGABRT' <<<"$output"
}

@test "a program that does not exist: 127, with its name" {
	run -127 "$DISTRUN" -n 2 no-such-program-xyz
	[ "$output" = "distrun: no-such-program-xyz: command not found" ]
	run -127 "$DISTRUN" -n 2 ./no/such/file
	[ "$output" = "distrun: ./no/such/file: No such file or directory" ]
}

@test "a program that is not executable: 126, with its name" {
	f=$BATS_TEST_TMPDIR/notexec
	echo 'echo hi' >"$f"
	chmod 644 "$f"
	run "$DISTRUN" -n 2 "$f"
	[ "$status" -eq 126 ]
	[ "$output" = "distrun: $f: Permission denied" ]
	run "$DISTRUN" -n 1 "$BATS_TEST_TMPDIR"
	[ "$status" -eq 126 ]
	grep -q 'Is a directory' <<<"$output"
}

@test "an executable file that exec refuses: 126, naming the rank and program" {
	f=$BATS_TEST_TMPDIR/badformat
	printf '\177ELF garbage' >"$f"
	chmod 755 "$f"
	run "$DISTRUN" -n 2 "$f"
	[ "$status" -eq 126 ]
	grep -q "^distrun: rank [01]: cannot run $f: Exec format error (a binary for another machine or system?)$" <<<"$output"
}

@test "bad command lines: one line, the hint, exit 2" {
	for args in "-n 0 true" "-n x true" "-n 4097 true" "-n -1 true" \
		"--bogus true" "-z true" "-n 2" "" "-n" "--timeout 5x true" \
		"--timeout 0 true" "--grace soon true" "--ranks 7 -n 2 true" \
		"--ranks a-b true" "--master-port 70000 true" "--color sometimes true"; do
		run "$DISTRUN" $args
		[ "$status" -eq 2 ] || { echo "args: $args: status $status"; false; }
		[ "${#lines[@]}" -eq 2 ] || { echo "args: $args: $output"; false; }
		[[ "${lines[0]}" == "distrun: "* ]]
		[ "${lines[1]}" = "Try 'distrun --help'." ]
	done
}

@test "the errors name what was wrong" {
	run "$DISTRUN" -n 0 true
	[ "${lines[0]}" = "distrun: invalid number of ranks '0' (expected 1 to 4096)" ]
	run "$DISTRUN" --bogus true
	[ "${lines[0]}" = "distrun: unknown option '--bogus'" ]
	run "$DISTRUN" -n 2
	[ "${lines[0]}" = "distrun: missing the program to run" ]
	run "$DISTRUN" --timeout 5x true
	[[ "${lines[0]}" == *"'5x'"* ]]
}

@test "--help and --version exit 0" {
	run "$DISTRUN" --help
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "Usage: distrun "* ]]
	run "$DISTRUN" --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^distrun\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "256 ranks run and all report" {
	run "$DISTRUN" -n 256 --raw "$TESTDATA/envdump" RANK
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 256 ]
	[ "$(printf '%s\n' "${lines[@]}" | sort -u | wc -l)" -eq 256 ]
}

@test "too few file descriptors for the ranks: the launcher says how many it needs and which limit" {
	run bash -c "ulimit -n 40; exec '$DISTRUN' -n 30 true"
	[ "$status" -ne 0 ]
	grep -q "^distrun: cannot start rank [0-9]*: Too many open files (the launcher's open files; 30 ranks need about 106, the limit is 40: raise it with ulimit -n)" <<<"$output"
	# the ranks it did start were stopped and reported
	grep -q '^distrun: 30 ranks, .*exit status 1' <<<"$output"
}

@test "rank 0 reads distrun's stdin, the other ranks /dev/null (more: launcher-stdin.bats)" {
	run "$DISTRUN" -n 2 --raw sh -c 'cat; echo "done $RANK"' <<<"for rank 0"
	[ "$(sort <<<"$output")" = $'done 0\ndone 1\nfor rank 0' ]
}

@test "an unmodified torch program runs under distrun (gloo, env://)" {
	require_torch
	run "$DISTRUN" -n 2 --timeout 5m "$TORCH_PYTHON" -c '
import torch, torch.distributed as dist
dist.init_process_group(backend="gloo", init_method="env://")
t = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(t)
dist.barrier()
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {t.item()}")
dist.destroy_process_group()'
	echo "$output"
	[ "$status" -eq 0 ]
	grep -qx '\[0\] rank 0 of 2: 3' <<<"$output"
	grep -qx '\[1\] rank 1 of 2: 3' <<<"$output"
}
