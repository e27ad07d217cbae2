#!/usr/bin/env bats
# The runtime core as a program sees it: init, barrier, all_reduce and
# broadcast results at every world size, point to point, asynchronous
# calls, and the errors a user must get instead of a hang: ranks that call
# different collectives, a rank that dies, bad environments.

load common

# Every wait inside the ranks gives up long before bats would.
export DISTRUN_TIMEOUT=60s

# check N MODE [ARG]: coll_check MODE on N ranks under distrun passes,
# and every rank printed its closing line.
check() {
	local n=$1; shift
	run "$DISTRUN" --timeout 150s -n "$n" "$CTESTS/coll_check" "$@"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(grep -c 'rank [0-9]*: ok$' <<<"$output")" -eq "$n" ] || {
		echo "$output"; return 1; }
}

# every_rank N PATTERN: each of ranks 0..N-1 printed a line matching it.
every_rank() {
	local n=$1 pat=$2
	for ((r = 0; r < n; r++)); do
		grep -q "^\[$r\] .*$pat" <<<"$output" || {
			echo "rank $r did not print /$pat/:"; echo "$output"
			return 1; }
	done
}

@test "all_reduce and broadcast are exact on 1 rank" {
	check 1 all
}

@test "all_reduce and broadcast are exact on 2 ranks" {
	check 2 all
}

@test "all_reduce and broadcast are exact on 3 ranks" {
	check 3 all
}

@test "all_reduce and broadcast are exact on 4 ranks" {
	check 4 all
}

@test "all_reduce and broadcast are exact on 5 ranks" {
	check 5 all
}

@test "all_reduce and broadcast are exact on 8 ranks" {
	check 8 all
}

@test "send, recv, irecv before isend and ANY_SOURCE deliver on 3 ranks" {
	check 3 p2p
}

@test "no rank leaves an async barrier before the slowest arrived" {
	check 3 async-barrier
}

@test "an async all_reduce progresses while its rank does other work" {
	check 2 progress "$BATS_TEST_TMPDIR/rank1-done"
}

# mismatch KIND: rank 1 calls something else; every rank must report it.
# The rank that meets rank 1 first names it: rank 0 in the flat
# algorithms, rank 2 where it shares a host with rank 1 (hierarchical).
mismatch() {
	run "$DISTRUN" --timeout 60s -n 3 "$CTESTS/coll_check" mismatch "$1"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	every_rank 3 "DR_EMISMATCH: rank [02] called $2 but rank 1 called $3"
	# and the group is unusable afterwards
	every_rank 3 "next: DR_E"
}

@test "a different collective on one rank is an error on every rank" {
	mismatch coll barrier 'all_reduce(count=4, float32, sum)'
}

@test "a different count on one rank is an error naming both counts" {
	mismatch count 'all_reduce(count=8, float32, sum)' \
		'all_reduce(count=7, float32, sum)'
}

@test "a different dtype on one rank is an error naming both dtypes" {
	mismatch dtype 'all_reduce(count=8, float32, sum)' \
		'all_reduce(count=8, int32, sum)'
}

@test "a different op on one rank is an error naming both ops" {
	mismatch op 'all_reduce(count=8, float32, sum)' \
		'all_reduce(count=8, float32, max)'
}

@test "a different broadcast root is an error on every rank" {
	run "$DISTRUN" --timeout 60s -n 3 "$CTESTS/coll_check" mismatch root
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# Seen at the broadcast or, where no rank waited on the other root,
	# at the next call on the group: never a hang, never silence.
	every_rank 3 "DR_EMISMATCH: rank [01] called broadcast(count=8, float32, root=[01])"
}

@test "a rank that dies gives the others DR_EPEER, not a timeout" {
	# Short timeout: were the death noticed only by it, this would fail.
	DISTRUN_TIMEOUT=20s run timeout 60 "$SRCDIR/tests/envrun" 4 \
		"$CTESTS/coll_check" die
	[ "$status" -eq 9 ] || { echo "$output"; return 1; }
	every_rank 3 "DR_EPEER: rank [0-9]*: lost the connection to rank 3"
	! grep -q ETIMEDOUT <<<"$output"
}

@test "init without RANK names the variable" {
	MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 WORLD_SIZE=2 RANK= \
		run "$CTESTS/coll_check" init
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_EENV"*"RANK is not set"* ]] || { echo "$output"; false; }
}

@test "init with a bad MASTER_PORT names the variable and its value" {
	MASTER_ADDR=127.0.0.1 MASTER_PORT=http RANK=0 WORLD_SIZE=1 \
		run "$CTESTS/coll_check" init
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_EENV"*"MASTER_PORT='http'"* ]] || { echo "$output"; false; }
}

@test "init with RANK not below WORLD_SIZE is refused" {
	MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 RANK=2 WORLD_SIZE=2 \
		run "$CTESTS/coll_check" init
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_EENV"*"RANK=2 is not below WORLD_SIZE=2"* ]] || {
		echo "$output"; false; }
}

@test "init with an unreachable master times out with a clear message" {
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=2 \
		DISTRUN_TIMEOUT=1s run timeout 30 "$CTESTS/coll_check" init
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_ETIMEDOUT"*"cannot reach the store at 127.0.0.1:$port"* ]] || {
		echo "$output"; false; }
}

@test "a malformed DISTRUN_TIMEOUT is refused at init" {
	MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 RANK=0 WORLD_SIZE=1 \
		DISTRUN_TIMEOUT=soon run "$CTESTS/coll_check" init
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_EENV"*"DISTRUN_TIMEOUT"*"soon"* ]] || { echo "$output"; false; }
}

@test "a stranger's connections to a rank are dropped, the job goes on" {
	check 2 stranger
}

@test "every entry point refuses out-of-range arguments on the calling rank alone: one at a time, then 20000 random calls; the group stays sound" {
	# tests/c/api_fuzz.c: negative and INT_MIN ops, dtypes, roots, peers
	# and tags, counts whose size wraps, NULL buffers and count arrays,
	# a group without the rank, device lists, NULL work, bad init options
	run "$DISTRUN" --timeout 120s -n 3 "$CTESTS/api_fuzz" 20000 "$RANDOM"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[0\] rank 0: api_fuzz ok ([0-9]\{5,\} calls refused)$' <<<"$output"
	every_rank 3 'api_fuzz ok'
	# on 4 ranks through TCP
	run env DISTRUN_TRANSPORT=tcp "$DISTRUN" --timeout 120s -n 4 "$CTESTS/api_fuzz" 2000
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	every_rank 4 'api_fuzz ok'
}

@test "destroy and init again with the ranks out of step: one rank (rank 0, whose store the others use, every other round) destroys 300 ms after the others init again" {
	# tests/c/reinit.c: six rounds, each checks its collectives and a ring
	run "$DISTRUN" --timeout 120s -n 3 "$CTESTS/reinit" 6 300
	echo "$output"
	[ "$status" -eq 0 ]
	every_rank 3 'reinit ok (6 rounds)'
	run env DISTRUN_TRANSPORT=tcp "$DISTRUN" --timeout 120s -n 4 "$CTESTS/reinit" 4 300
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	every_rank 4 'reinit ok (4 rounds)'
	run env DISTRUN_PRETEND_HOSTS=2 "$DISTRUN" --timeout 120s -n 4 "$CTESTS/reinit" 4 300
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	every_rank 4 'reinit ok (4 rounds)'
}

@test "destroy with point-to-point work still out: a receive fails with DR_EABORTED at once, a send after its drain, a send that can complete does" {
	# tests/c/p2p_destroy.c: each mode checks its own bounds
	for tr in "" tcp; do
		for m in recv send late; do
			run env DISTRUN_TRANSPORT=$tr "$DISTRUN" --timeout 60s -n 2 \
				"$CTESTS/p2p_destroy" $m
			[ "$status" -eq 0 ] || { echo "$tr $m: $output"; return 1; }
			every_rank 2 "$m ok"
		done
	done
}

@test "the library's threads block every asynchronous signal: a process-directed SIGUSR1 runs the program's handler on its own thread" {
	run "$DISTRUN" --timeout 60s -n 3 "$CTESTS/threads_check" sigmask
	echo "$output"
	[ "$status" -eq 0 ]
	every_rank 3 'sigmask ok ([1-9] library threads)'
}

@test "a program's threads that make blocking calls and exit leave no scratch memory behind" {
	# over TCP, where a blocking 1 MiB all_reduce keeps ~0.5 MiB of
	# scratch in its calling thread
	run env DISTRUN_TRANSPORT=tcp "$DISTRUN" --timeout 120s -n 2 \
		"$CTESTS/threads_check" scratch 100
	echo "$output"
	[ "$status" -eq 0 ]
	every_rank 2 'scratch ok'
}
