#!/usr/bin/env bats
# The collectives beyond barrier/all_reduce/broadcast, subgroups, point to
# point, asynchronous work and the monitored barrier, as a user sees them:
# programs run under distrun (tests/c/coll_more.c; coll_limits.c for large
# jobs and out of memory) that check every result against a reference and
# print what they got.

load common

# Every wait inside the ranks gives up long before bats would.
export DISTRUN_TIMEOUT=60s

# ranks N MODE [ARG]: runs coll_more on N ranks.
ranks() {
	local n=$1; shift
	run "$DISTRUN" --timeout 150s -n "$n" "$CTESTS/coll_more" "$@"
}

# every_rank_ok N: each of the N ranks printed its closing "ok" line.
every_rank_ok() {
	[ "$(grep -c ': ok, [0-9]* checks' <<<"$output")" -eq "$1" ] || {
		echo "$output"; return 1; }
}

# passes N MODE...: coll_more MODE on N ranks exits 0, every rank ok.
passes() {
	ranks "$@"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	every_rank_ok "$1"
}

@test "every collective matches the reference on 1 rank" {
	passes 1 all
}

@test "every collective matches the reference on 2 ranks" {
	passes 2 all
}

@test "every collective matches the reference on 3 ranks" {
	passes 3 all
}

@test "every collective matches the reference on 4 ranks" {
	passes 4 all
}

@test "every collective matches the reference on 5 ranks, and on group {1,3,4}" {
	passes 5 all
}

@test "every collective matches the reference on 8 ranks and its subgroups" {
	passes 8 all
}

@test "a rank outside a group gets DR_ENOTMEMBER; bad arguments are named" {
	passes 3 nonmember
}

@test "point-to-point keeps order per (source, tag); any source names the sender" {
	passes 4 p2p
}

@test "many asynchronous operations complete whatever the order of waits" {
	passes 3 async
}

# mismatch CALL PATTERN...: the last of 3 ranks calls CALL differently; some
# rank reports DR_EMISMATCH with a message matching every PATTERN, and no
# rank hangs.
mismatch() {
	local call=$1; shift
	ranks 3 mismatch "$call"
	echo "$output"
	[ "$status" -eq 0 ]
	local line
	line=$(grep 'DR_EMISMATCH' <<<"$output" | head -n 1)
	[ -n "$line" ]
	for pat in "$@"; do
		grep -q -- "$pat" <<<"$line"
	done
}

@test "reduce with another count on one rank: DR_EMISMATCH naming both" {
	mismatch reduce 'count=5' 'count=4'
}

@test "reduce with another root on one rank: DR_EMISMATCH" {
	mismatch reduce_root 'reduce'
}

@test "all_gather with another count: DR_EMISMATCH naming both" {
	mismatch all_gather 'count=5' 'count=4'
}

@test "gather with another count: DR_EMISMATCH" {
	mismatch gather 'gather' 'count='
}

@test "scatter with another count: DR_EMISMATCH" {
	mismatch scatter 'scatter' 'count='
}

@test "reduce_scatter with another count: DR_EMISMATCH" {
	mismatch reduce_scatter 'reduce_scatter' 'count='
}

@test "all_to_all with another count: DR_EMISMATCH" {
	mismatch all_to_all 'all_to_all' 'count='
}

@test "all_to_all_v whose splits disagree: DR_EMISMATCH, not corruption" {
	mismatch all_to_all_v 'all_to_all_v' 'count=3' 'count=2'
}

@test "all_gather with another dtype: DR_EMISMATCH naming both" {
	mismatch dtype 'int32' 'float32'
}

@test "all_gather against reduce_scatter: DR_EMISMATCH naming both" {
	mismatch kind 'all_gather' 'reduce_scatter'
}

@test "new_group with other members on one rank: DR_EMISMATCH" {
	mismatch new_group 'new_group'
}

@test "new_group with a bad list on one rank: it gets DR_EINVAL, the others do not wait" {
	ranks 3 mismatch new_group_bad
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[2\] rank 2: DR_EINVAL: new_group: rank 0 appears twice' <<<"$output"
	grep -q '^\[0\] rank 0: DR_EMISMATCH: new_group' <<<"$output"
	grep -q '^\[1\] rank 1: DR_EMISMATCH: new_group' <<<"$output"
}

@test "a receive of another count than was sent: DR_EMISMATCH" {
	mismatch p2p 'count=3' 'count=2'
}

@test "monitored barrier names every rank that did not arrive" {
	ranks 5 monitored all
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[0\] rank 0: DR_ETIMEDOUT: Ranks 1, 3 failed to pass monitoredBarrier' <<<"$output"
	# the ranks that did arrive fail with the same words
	grep -q '^\[2\] rank 2: DR_ETIMEDOUT: Ranks 1, 3 failed to pass monitoredBarrier' <<<"$output"
	grep -q '^\[4\] rank 4: DR_ETIMEDOUT: Ranks 1, 3 failed' <<<"$output"
}

@test "monitored barrier without wait_all_ranks names the first missing rank" {
	ranks 4 monitored first
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[0\] rank 0: DR_ETIMEDOUT: Rank 1 failed to pass monitoredBarrier' <<<"$output"
	! grep -q 'Ranks 1, 3' <<<"$output"
}

@test "monitored barrier whose rank 0 does not come: the others name it" {
	ranks 3 monitored root
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[1\] rank 1: DR_ETIMEDOUT: Rank 0 failed to pass monitoredBarrier' <<<"$output"
	grep -q '^\[2\] rank 2: DR_ETIMEDOUT: Rank 0 failed to pass monitoredBarrier' <<<"$output"
}

# limits N MODE...: coll_limits MODE on N ranks exits 0, every rank ok.
limits() {
	local n=$1; shift
	run "$DISTRUN" --timeout 150s -n "$n" "$CTESTS/coll_limits" "$@"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	every_rank_ok "$n"
}

@test "64 ranks: barrier, all_reduce, all_gather, all_to_all and all sending to rank 0" {
	limits 64 smoke
}

# About 5 s here (2 cores): connections are made as the algorithms need
# them, so no rank holds anything near 255 sockets.
@test "256 ranks: barrier, all_reduce and all_gather, few sockets per rank" {
	limits 256 smoke
	fds=$(sed -n 's/.*rank 255: \([0-9]*\) file descriptors open.*/\1/p' <<<"$output")
	[ -n "$fds" ] && [ "$fds" -lt 64 ]
}

# From DISTRUN_TREE_FROM ranks (256 unless set) the small barrier,
# all_reduce and all_gather over messages go up and down binomial trees.
# With 2 every group of the tests takes them: over TCP, and through the
# rings with the segment's collectives off.
@test "DISTRUN_TREE_FROM: small calls on trees are exact, subgroups too; mismatches named; fewer peers; a bad or differing value refused" {
	local n
	for n in 3 8; do
		DISTRUN_TREE_FROM=2 DISTRUN_TRANSPORT=tcp passes $n all
	done
	# 5 ranks take the trees, the subgroup {1,3,4} too, pairs do not
	DISTRUN_TREE_FROM=3 DISTRUN_SHM_COLL=0 passes 5 all
	DISTRUN_TREE_FROM=2 DISTRUN_TRANSPORT=tcp ranks 3 mismatch all_gather
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q 'DR_EMISMATCH: .*all_gather(count=5, float32) but .*all_gather(count=4, float32)' <<<"$output"
	for seed in 1 2 3 5 6 7; do
		local np=$((2 + seed % 3)) d=$((seed * 7 % 30)) how=$((seed % 3))
		DISTRUN_TREE_FROM=2 DISTRUN_TRANSPORT=tcp \
			run timeout 120 "$DISTRUN" -n $np "$CTESTS/call_seq" $seed 30 $d $how
		[ "$status" -eq 0 ] || { echo "seed $seed: $output"; return 1; }
		local done mm
		done=$(grep -c ': DONE$' <<<"$output" || true)
		mm=$(grep -cE ': error at .*: DR_EMISMATCH: ' <<<"$output" || true)
		[ "$done" -eq $np ] || [ "$mm" -eq $np ] || { echo "seed $seed: $output"; return 1; }
	done
	# the tree's last rank talks to its parent (and rank 0), not to lg p
	# peers each way as dissemination, Bruck and recursive doubling do
	local fds=()
	for tf in 2 ""; do
		DISTRUN_TREE_FROM=$tf DISTRUN_TRANSPORT=tcp limits 72 smoke
		fds+=("$(sed -n 's/.*rank 71: after all_gather, \([0-9]*\) file descriptors open$/\1/p' <<<"$output")")
	done
	echo "descriptors of rank 71: trees ${fds[0]}, default ${fds[1]}"
	[ -n "${fds[0]}" ] && [ -n "${fds[1]}" ] && [ $((fds[0] + 8)) -le "${fds[1]}" ]
	for bad in 1 0 -4 x 3x; do
		DISTRUN_TREE_FROM=$bad run "$DISTRUN" --timeout 30s -n 2 "$CTESTS/coll_check" init
		[ "$status" -ne 0 ]
		grep -q "DR_EENV.*DISTRUN_TREE_FROM='$bad': use a number of ranks, 2 or more" <<<"$output" ||
			{ echo "$bad: $output"; return 1; }
	done
	cat >"$BATS_TEST_TMPDIR/tree1" <<-'EOF2'
	#!/bin/sh
	[ "$RANK" = 1 ] && export DISTRUN_TREE_FROM=2
	exec "$@"
	EOF2
	chmod +x "$BATS_TEST_TMPDIR/tree1"
	run "$DISTRUN" --timeout 30s -n 3 "$BATS_TEST_TMPDIR/tree1" "$CTESTS/coll_check" init
	[ "$status" -ne 0 ]
	[[ "$output" == *"[1] "*"DISTRUN_TREE_FROM is '2' on rank 1 but unset on rank 0: it must be the same on every rank"* ]] ||
		{ echo "$output"; return 1; }
}

@test "asynchronous calls on two groups issued in opposite orders on different ranks all complete" {
	passes 2 order
	passes 3 order
}

@test "destroying the process group frees subgroups left alive; their handles stay safe" {
	passes 3 destroy
	passes 1 destroy
}

@test "destroy with subgroups and work left out: no leak, no double free under ASAN" {
	# The build under test when it is the ASAN one (.ci/run's ASAN run
	# always gets here), else an ASAN build beside it if there is one.
	asan="$CTESTS/coll_more"
	[[ $B == *build-asan* ]] || asan="$SRCDIR/build-asan/tests/coll_more"
	[ -x "$asan" ] || skip "no ASAN build (make ASAN=1)"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
		run "$DISTRUN" --timeout 150s -n 3 "$asan" destroy
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	every_rank_ok 3
	! grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' <<<"$output"
}

@test "every call before init fails with DR_ENOINIT and leaves *work NULL" {
	run "$CTESTS/coll_more" noinit
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "rank 0: ok, "*" checks" ]]
}

@test "a rank out of memory inside a collective: its peer fails at once with that reason, not at the timeout" {
	# Messages: the shared-memory all_reduce (coll_shm.c) needs no
	# scratch memory to run out of.
	DISTRUN_SHM_COLL=0 run "$DISTRUN" --timeout 150s -n 2 \
		"$CTESTS/coll_limits" oom "$BATS_TEST_TMPDIR/done"
	echo "$output"
	grep -q 'skip: the sanitizer' <<<"$output" && skip "not under ASAN"
	grep -q '^\[0\] rank 0: failed: DR_ENOMEM: rank 0: out of memory' <<<"$output"
	grep -q '^\[1\] rank 1: failed: DR_ENOMEM: rank 0: out of memory.*(reported by rank 0)' <<<"$output"
	! grep -q 'timed out' <<<"$output"
}

@test "a 1 MiB all_reduce over a 63-rank ring reserves little address space per rank" {
	# before the fix each of the 62 steps reserved 512 KiB (31 MiB a rank)
	run "$DISTRUN" --timeout 300s -n 63 "$CTESTS/ring_mem" 1048576
	echo "$output" | tail -n 5
	[ "$status" -eq 0 ]
	[ "$(grep -c 'vmpeak grew' <<<"$output")" -eq 63 ]
	max=$(grep -o 'grew [0-9-]*' <<<"$output" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')
	echo "largest growth: $max KiB"
	[ "$max" -lt 12288 ]
}

@test "different calls of one seq whose ranks wait for messages the other never sends: DR_EMISMATCH on every rank, not the timeout" {
	# rank 1 makes the first call, ranks 0 and 2 the second: e.g. rank 1
	# waits in an all_reduce for rank 0, which waits in its reduce for
	# rank 1.  Each tells the other its call once a wait lasts 50 ms.
	# DISTRUN_SHM_COLL=0: through messages on one host too.  A rank
	# still in init when the others abort gets the error there.
	local pairs="all_reduce,reduce all_reduce,all_gather all_reduce,gather
		     barrier,monitored_barrier all_reduce,broadcast1
		     reduce1,reduce gather1,reduce"
	for shm in 1 0; do
		for c in 1 5000; do
			for pair in $pairs; do
				local a=${pair%,*} b=${pair#*,}
				run env DISTRUN_SHM_COLL=$shm DISTRUN_TIMEOUT=40s \
					timeout 120 "$DISTRUN" -n 3 "$CTESTS/call_pairs" "$a" "$b" "$c"
				echo "# SHM_COLL=$shm count=$c: rank 1 $a, the others $b"
				echo "$output"
				[ "$status" -eq 0 ]
				! grep -q 'timed out' <<<"$output"
				# every rank names two calls, rank 1's among them
				# (a rank that returned at once from the other
				# call may be named in its next one: seq 2 vs 1)
				[ "$(grep -cE "DR_EMISMATCH: (dr_init_process_group: )?rank ([0-9]) called .* but rank ([0-9]) called " <<<"$output")" -eq 3 ]
				[ "$(grep -cE "rank 1 called ${a%1}" <<<"$output")" -eq 3 ]
			done
		done
	done
}

@test "a monitored barrier against a monitor that made another call and went on: DR_EMISMATCH on the member, never a give-up" {
	# Rank 1 waits in a monitored barrier for rank 0's verdict; ranks 0,
	# 2 and 3 made a reduce (a gather) to rank 1, in which rank 0 sends
	# rank 1 nothing, and went on to a barrier.  Rank 0's barrier message
	# used to be taken for the monitor giving up on rank 1 (DR_ETIMEDOUT,
	# "failed to pass", in about 1 run of 6 over TCP); only the monitor's
	# own word (dri_give_up) says that now.
	for k in $(seq 1 8); do
		for b in reduce1 gather1; do
			run env DISTRUN_TIMEOUT=40s timeout 120 "$DISTRUN" -n 4 \
				"$CTESTS/call_pairs" monitored_barrier "$b" 5000
			echo "# run $k: rank 1 monitored_barrier, the others $b"
			echo "$output"
			grep -q '^\[1\] rank 1: DR_EMISMATCH: ' <<<"$output"
			! grep -qE 'DR_ETIMEDOUT|failed to pass|timed out' <<<"$output"
		done
	done
}

@test "long random sequences of the small calls: exact on every rank, each all_reduce's data on the lean lines read before it is written again" {
	# call_seq small: barrier, all_reduce, broadcast and reduce of 1, 2
	# or 6 floats in a random order, rooted anywhere, the data checked
	# after each: a rooted call's writers run ahead of its readers, and a
	# tiny all_reduce after them writes its data over the one of four
	# phases before only once every rank is past it (seg.h, dri_cs_tiny)
	for seed in 1 2 3 4 5 6; do
		local n=$((2 + seed % 3))
		run timeout 120 "$DISTRUN" -n $n "$CTESTS/call_seq" $seed 4000 -1 0 small
		echo "# seed $seed: $n ranks"
		echo "$output" | grep -v '^\[[0-9]*\] \[' || true
		[ "$status" -eq 0 ]
		! grep -qE 'timed out|WRONG|error' <<<"$output"
		[ "$(grep -c ': DONE$' <<<"$output")" -eq $n ]
	done
	# one rank's call differs far into such a sequence: DR_EMISMATCH on
	# every rank, naming the count that differs, not a wrong sum or a
	# hang (a rank still in an earlier call, e.g. a root reading its
	# writers, gets it there)
	run timeout 120 "$DISTRUN" -n 3 "$CTESTS/call_seq" 7 4000 3001 0 small
	echo "$output" | grep -v '^\[[0-9]*\] \[' || true
	[ "$status" -eq 0 ]
	! grep -qE 'timed out|WRONG' <<<"$output"
	[ "$(grep -cE ': error at call (29[0-9][0-9]|300[01]): DR_EMISMATCH: .* called all_reduce\(count=3, ' <<<"$output")" -eq 3 ]
}

@test "random sequences of calls: exact on every rank when all agree; DR_EMISMATCH on every rank when one differs at a random call" {
	# call_seq: 30 calls of every kind and size, the data checked after
	# each; rank size/2 changes call d (its count, root or collective)
	for seed in $(seq 1 12); do
		local n=$((2 + seed % 3)) d=$((seed * 7 % 30)) how=$((seed % 3))
		[ $((seed % 4)) -ne 0 ] || d=-1
		run timeout 120 "$DISTRUN" -n $n "$CTESTS/call_seq" $seed 30 $d $how
		echo "# seed $seed: $n ranks, rank $((n / 2)) differs at call $d (how $how)"
		echo "$output" | grep -v '^\[[0-9]*\] \[' || true
		[ "$status" -eq 0 ]
		! grep -qE 'timed out|WRONG' <<<"$output"
		local done mm
		done=$(grep -c ': DONE$' <<<"$output" || true)
		mm=$(grep -cE ': error at .*: DR_EMISMATCH: ' <<<"$output" || true)
		if [ $d -lt 0 ]; then
			[ "$done" -eq $n ]
		else
			# a root given to a call that has none changes nothing
			[ "$done" -eq $n ] || [ "$mm" -eq $n ]
		fi
	done
}
