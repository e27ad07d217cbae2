#!/usr/bin/env bats
# The per-job segment and the shared-memory transport, as a user sees
# them: which transport a rank gets, a rank that dies mid-collective
# failing the others at once, nothing left behind after any kill, pretend
# hosts.  (Every runtime, collectives and CUDA suite also runs under
# DISTRUN_TRANSPORT=tcp and with pretend hosts: scripts/run-tests.)

load common

# Long on purpose: a death must be seen through the segment's abort word
# or the death watch, never through this timeout.  The bats-side
# `timeout` below is far shorter.
export DISTRUN_TIMEOUT=10m

check() {
	run timeout 60 "$DISTRUN" -n "$1" "$CTESTS/shm_check" "${@:2}"
}

# free_port: a TCP port nobody listens on now.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

@test "under distrun every rank maps the job's segment and talks through shared memory" {
	check 4 info
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': transport shm$' <<<"$output")" -eq 4 ]
	for r in 0 1 2 3; do
		grep -q "^\[$r\] rank $r: segment ranks 4 slot $r size [0-9]* launcher distrun$" <<<"$output"
	done
}

@test "DISTRUN_TRANSPORT=tcp keeps the segment but talks TCP" {
	DISTRUN_TRANSPORT=tcp check 2 info
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': transport tcp$' <<<"$output")" -eq 2 ]
	grep -q 'segment ranks 2 slot 1' <<<"$output"
}

@test "a bad DISTRUN_TRANSPORT is refused at init, naming the value" {
	DISTRUN_TRANSPORT=carrier-pigeon check 2 info
	echo "$output"
	[ "$status" -ne 0 ]
	grep -q "DR_EENV: DISTRUN_TRANSPORT='carrier-pigeon': use auto, shm or tcp" <<<"$output"
}

@test "DISTRUN_TRANSPORT=shm without distrun fails and says why; auto falls back to TCP" {
	port=$(free_port)
	DISTRUN_TRANSPORT=shm RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
		MASTER_PORT=$port run timeout 30 "$CTESTS/shm_check" info
	echo "$output"
	[ "$status" -ne 0 ]
	grep -q 'transport shm: this rank has no shared segment (the launcher does not say how many ranks run on this host)' <<<"$output"
	port=$(free_port)
	RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
		run timeout 30 "$CTESTS/shm_check" info
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q 'rank 0: transport tcp' <<<"$output"
	grep -q 'rank 0: no segment' <<<"$output"
}

# refused WHY: the inherited segment was refused (WHY, with
# DISTRUN_TRANSPORT=tcp, where no other is looked for); otherwise the
# ranks make their own through the store (launcher none), as under
# another launcher.
refused() {
	DISTRUN_TRANSPORT=tcp run timeout 60 "$DISTRUN" -n 2 "${cmd[@]}"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q "no segment ($1" <<<"$output"
	run timeout 60 "$DISTRUN" -n 2 "${cmd[@]}"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': transport shm$' <<<"$output")" -eq 2 ]
	[ "$(grep -c 'segment ranks 2 slot [01] size [0-9]* launcher none$' <<<"$output")" -eq 2 ]
}

@test "a segment of another job is refused; the ranks then make their own" {
	cmd=(env DISTRUN_JOB_ID=0123456789abcdef0123456789abcdef "$CTESTS/shm_check" info)
	refused 'segment DISTRUN_SEG_FD=[0-9]* refused: it belongs to another job'
}

@test "an fd that is not the segment is refused" {
	cmd=(env DISTRUN_SEG_FD=0 "$CTESTS/shm_check" info)
	refused "DISTRUN_SEG_FD='0' is not an fd number)"
	cmd=(sh -c 'exec 7</dev/null; DISTRUN_SEG_FD=7 exec "$0" info' "$CTESTS/shm_check")
	refused "DISTRUN_SEG_FD=7 is not the job's sealed memfd"
}

@test "pretend hosts: shared memory inside a host, TCP between, and results agree" {
	DISTRUN_PRETEND_HOSTS=2 check 4 info
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': transport shm+tcp$' <<<"$output")" -eq 4 ]
	run timeout 120 "$DISTRUN" -n 4 sh -c \
		'DISTRUN_HOST_ID=host$((RANK / 2)) exec "$0" all' "$CTESTS/coll_check"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': ok$' <<<"$output")" -eq 4 ]
}

@test "a bad DISTRUN_HOST_ID is refused, naming it" {
	DISTRUN_HOST_ID='a b' check 2 info
	echo "$output"
	[ "$status" -ne 0 ]
	grep -q "DR_EENV: DISTRUN_HOST_ID='a b'" <<<"$output"
}

# kill_fails_fast N BYTES [COLL]: the last rank SIGKILLs itself in an
# all_reduce (or COLL) of BYTES; every other rank gets DR_EPEER naming it
# (from the segment's abort word), well before DISTRUN_TIMEOUT and bats'
# own 60 s.
kill_fails_fast() {
	check "$1" kill "$2" "${3:-all_reduce}"
	echo "$output"
	local last=$(($1 - 1))
	grep -q "distrun: rank $last was killed by SIGKILL" <<<"$output"
	for ((r = 0; r < last; r++)); do
		grep -q "^\[ *$r\] rank $r: DR_EPEER: .*rank $last" <<<"$output"
	done
	! grep -q 'DR_ETIMEDOUT' <<<"$output"
}

@test "a rank SIGKILLed in a small all_reduce fails the others with DR_EPEER, not the timeout" {
	kill_fails_fast 4 64
}

@test "a rank SIGKILLed in a 64 MiB all_reduce fails the others with DR_EPEER, not the timeout" {
	kill_fails_fast 3 $((64 << 20))
}

@test "the same through pretend hosts (shared memory and TCP mixed)" {
	DISTRUN_PRETEND_HOSTS=2 kill_fails_fast 4 $((1 << 20))
}

@test "a rank SIGKILLed in a 64 MiB broadcast or a small all_gather through the segment's slots fails the others" {
	kill_fails_fast 3 $((64 << 20)) broadcast
	kill_fails_fast 4 4096 all_gather
}

@test "a rank SIGKILLed in a small broadcast or reduce (rooted: the writers do not wait) fails the others with DR_EPEER" {
	# up to 24 bytes in the writers' records of the call, beyond in the
	# small slots
	kill_fails_fast 4 4 broadcast
	kill_fails_fast 3 16 reduce
	kill_fails_fast 3 64 reduce
	kill_fails_fast 3 $((64 << 10)) reduce
}

@test "a rank SIGKILLed in a barrier of 20 ranks (a tree of flags) fails the others with DR_EPEER" {
	kill_fails_fast 20 0 barrier
}

@test "a rank that exits without a word fails its peers' next call with DR_EPEER (death watch)" {
	check 3 exit0
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[0\] rank 0: DR_EPEER: .*rank 2 (its process exited)' <<<"$output"
	grep -q '^\[1\] rank 1: DR_EPEER: .*rank 2' <<<"$output"
}

# bye_fails_fast N HOW BYTES [COLL]: as kill_fails_fast, but the last
# rank leaves on purpose (HOW destroy: it destroys the group and stays;
# return: it returns from main, the atexit goodbye, then exit 0): the
# others fail with DR_EPEER naming it, within the promised 100 ms, not at
# DISTRUN_TIMEOUT (10 min here; bats gives up after 60 s).
bye_fails_fast() {
	run timeout 60 "$DISTRUN" -n "$1" "$CTESTS/shm_check" bye "${@:2}"
	echo "$output"
	local last=$(($1 - 1))
	[ "$status" -eq 0 ]
	for ((r = 0; r < last; r++)); do
		grep -q "^\[ *$r\] rank $r: DR_EPEER: .*rank $last" <<<"$output"
	done
	! grep -q 'DR_ETIMEDOUT' <<<"$output"
}

@test "a rank that destroys the group or returns from main while the others wait fails them with DR_EPEER (quick calls, flags, rooted)" {
	for how in destroy return; do
		bye_fails_fast 2 "$how" 8            # the quick all_reduce
		bye_fails_fast 4 "$how" 4096         # flags and slots
		bye_fails_fast 3 "$how" 0 barrier
		bye_fails_fast 4 "$how" 4 broadcast  # rooted, data in the records
		bye_fails_fast 3 "$how" $((64 << 10)) reduce
	done
}

@test "the same on the other paths: single copy, a tree of flags, hierarchical, messages through the rings" {
	DISTRUN_SHM_DIRECT=on bye_fails_fast 3 return $((16 << 20))
	bye_fails_fast 20 destroy 0 barrier
	# (small: a rank that fails with a full ring to a peer cannot put
	# its ABORT frame there, and that peer then names it instead)
	DISTRUN_PRETEND_HOSTS=2 bye_fails_fast 4 return 4096
	DISTRUN_SHM_COLL=0 bye_fails_fast 3 destroy 4096
}

@test "without pidfds (a kernel before 5.3) a rank that exits 0 without a word still fails its peers' next call with DR_EPEER" {
	run timeout 60 "$DISTRUN" -n 3 "$CTESTS/no_pidfd" "$CTESTS/shm_check" exit0
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[0\] rank 0: DR_EPEER: .*rank 2' <<<"$output"
	grep -q '^\[1\] rank 1: DR_EPEER: .*rank 2' <<<"$output"
}

# exact N MAX [ENV...]: shm_check exact on N ranks: every collective
# checked bit for bit against the rank-order sum.
exact() {
	local n=$1 max=$2; shift 2
	run env "$@" timeout 240 "$DISTRUN" -n "$n" "$CTESTS/shm_check" exact "$max"
	[ "$status" -eq 0 ] || { echo "$output" | tail; return 1; }
	[ "$(grep -c ': exact ok$' <<<"$output")" -eq "$n" ]
}

@test "collectives through the segment: every rank gets the sum in rank order, bit for bit" {
	exact 2 $((20 << 20))
	exact 3 $((8 << 20))
	# many chunks, pieces cut unevenly
	exact 5 $((2 << 20)) DISTRUN_SHM_CHUNK=4096
}

# pvr_reads FILE: the process_vm_readv calls in strace output FILE that
# read something (strace traced nothing else; a call it held up says so).
pvr_reads() {
	grep -cE '= [1-9][0-9]*( \(DELAYED\))?$' "$1" || true
}

# traced FILE CMD...: CMD under strace, its process_vm_readv calls into
# FILE (LeakSanitizer cannot run under a tracer: off for these).
traced() {
	local f=$1; shift
	run env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
		strace -f -qq -e trace=process_vm_readv -o "$f" "$@"
}

@test "single copy: large data calls read the others' buffers with process_vm_readv, every value right both ways" {
	exact 3 $((8 << 20)) DISTRUN_SHM_DIRECT=on
	# 4 ranks on 2 cores, a 1 MiB piece read in one go or in several
	exact 4 $((2 << 20)) DISTRUN_SHM_DIRECT=on
	exact 3 $((2 << 20)) DISTRUN_SHM_DIRECT=off
	# on: the reads happen, beyond the probe's one per pair of ranks
	traced "$BATS_TEST_TMPDIR/on" env DISTRUN_SHM_DIRECT=on "$DISTRUN" -n 2 "$CTESTS/shm_check" exact $((1 << 20))
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[ "$(pvr_reads "$BATS_TEST_TMPDIR/on")" -gt 2 ]
	# off: none at all
	traced "$BATS_TEST_TMPDIR/off" env DISTRUN_SHM_DIRECT=off "$DISTRUN" -n 2 "$CTESTS/shm_check" exact $((1 << 20))
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	! grep -q process_vm_readv "$BATS_TEST_TMPDIR/off"
}

@test "single copy, auto: a probe that finds it slower keeps it for pieces of 1 MiB and more" {
	# Every process_vm_readv held up 20 ms: the probe's single copy of
	# 256 KiB loses to the two copies through the slots.  Pieces of up
	# to 256 KiB then go through the slots (only the probe reads, once
	# per rank), pieces of 1.2 MB are still read with process_vm_readv.
	# (LeakSanitizer cannot run under a tracer: off, as in traced)
	local slow=(env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
		strace -f -qq -e trace=process_vm_readv
		-e inject=process_vm_readv:delay_exit=20000)
	run env DISTRUN_SHM_DIRECT=auto "${slow[@]}" -o "$BATS_TEST_TMPDIR/small" \
		"$DISTRUN" -n 2 "$CTESTS/shm_check" exact $((1 << 20))
	[ "$status" -eq 0 ] || { echo "$output" | tail; false; }
	[ "$(grep -c ': exact ok$' <<<"$output")" -eq 2 ]
	[ "$(pvr_reads "$BATS_TEST_TMPDIR/small")" -eq 2 ]
	run env DISTRUN_SHM_DIRECT=auto "${slow[@]}" -o "$BATS_TEST_TMPDIR/large" \
		"$DISTRUN" -n 2 "$CTESTS/shm_check" exact $((2 << 20))
	[ "$status" -eq 0 ] || { echo "$output" | tail; false; }
	[ "$(grep -c ': exact ok$' <<<"$output")" -eq 2 ]
	[ "$(pvr_reads "$BATS_TEST_TMPDIR/large")" -gt 2 ]
}

@test "single copy: ranks whose memory the others may not read: the probe finds out, the calls go through the slots" {
	# Without CAP_SYS_PTRACE, a non-dumpable process's memory is closed
	# to its peers even under the same uid.
	traced "$BATS_TEST_TMPDIR/trace" env SHM_CHECK_NODUMP=1 DISTRUN_SHM_DIRECT=on \
		setpriv --bounding-set -sys_ptrace --inh-caps -sys_ptrace \
		"$DISTRUN" -n 3 "$CTESTS/shm_check" exact $((1 << 20))
	echo "$output" | tail -5
	[ "$status" -eq 0 ]
	[ "$(grep -c ': exact ok$' <<<"$output")" -eq 3 ]
	# every rank's probe was refused, and nothing was read after it
	[ "$(grep -c 'EPERM' "$BATS_TEST_TMPDIR/trace")" -ge 3 ]
	[ "$(pvr_reads "$BATS_TEST_TMPDIR/trace")" -eq 0 ]
}

@test "single copy: a call that differs fails with DR_EMISMATCH before anything is read; a killed rank fails the others" {
	DISTRUN_SHM_DIRECT=on check 3 differ big
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'DR_EMISMATCH: rank 0 called all_gather(count=16384, float32) but rank 1 called all_gather(count=16385, float32)' <<<"$output")" -eq 3 ]
	DISTRUN_SHM_DIRECT=on kill_fails_fast 3 $((4 << 20)) all_gather
	DISTRUN_SHM_DIRECT=on kill_fails_fast 4 $((1 << 20)) broadcast
}

@test "all_to_all_v through the segment: uneven pieces right through the slots and the single copy; splits that disagree fail every rank naming the same pair" {
	# (exact runs an all_to_all_v of pieces of 0, n/2 and n elements at
	# every size: small ones through the slots, large ones read)
	exact 4 $((2 << 20)) DISTRUN_SHM_DIRECT=on
	exact 3 $((2 << 20)) DISTRUN_SHM_DIRECT=off
	# off, many rounds through the slots
	exact 3 $((1 << 20)) DISTRUN_SHM_DIRECT=off DISTRUN_SHM_CHUNK=4096
	# pieces of 32 KiB and more read with process_vm_readv, beyond the
	# probe's one per pair; with off, nothing is
	traced "$BATS_TEST_TMPDIR/on" env DISTRUN_SHM_DIRECT=on "$DISTRUN" -n 2 \
		"$CTESTS/shm_check" a2av $((2 << 20))
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[ "$(grep -c ': a2av ok$' <<<"$output")" -eq 2 ]
	[ "$(pvr_reads "$BATS_TEST_TMPDIR/on")" -gt 2 ]
	traced "$BATS_TEST_TMPDIR/off" env DISTRUN_SHM_DIRECT=off "$DISTRUN" -n 2 \
		"$CTESTS/shm_check" a2av $((2 << 20))
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[ "$(grep -c ': a2av ok$' <<<"$output")" -eq 2 ]
	! grep -q process_vm_readv "$BATS_TEST_TMPDIR/off"
	for k in a2av a2av_big; do
		check 3 differ $k
		echo "$output"
		[ "$status" -eq 0 ]
		[ "$(grep -cE 'DR_EMISMATCH: rank 1 called all_to_all_v\(count=(5|16385), float32\) but rank 0 called all_to_all_v\(count=(4|16384), float32\) \(seq 2\)' <<<"$output")" -eq 3 ]
	done
	kill_fails_fast 3 $((4 << 20)) all_to_all_v
	kill_fails_fast 4 4096 all_to_all_v
}

@test "DISTRUN_SHM_DIRECT other than auto, on or off: init fails naming it" {
	run env DISTRUN_SHM_DIRECT=sometimes timeout 60 "$DISTRUN" -n 2 "$CTESTS/shm_check" info
	echo "$output"
	[ "$status" -ne 0 ]
	# Both ranks fail in init; the launcher stops the later one at the
	# first's failure, so either may be the one that says it.
	grep -q "^\[[01]\] rank 0: .*DR_EENV: DISTRUN_SHM_DIRECT='sometimes': use auto, on or off" <<<"$output"
}

@test "the same check can fail: messages sum in another order" {
	# The check is not vacuous: the message algorithms (the collectives
	# through the rings) round some of these sums differently.
	run env DISTRUN_SHM_COLL=0 timeout 120 "$DISTRUN" -n 3 "$CTESTS/shm_check" exact $((1 << 20))
	echo "$output"
	[ "$status" -ne 0 ]
	grep -q 'element .* want' <<<"$output"
}

# rooted N ITERS [ENV...]: shm_check rooted on N ranks.
rooted() {
	local n=$1 iters=$2; shift 2
	run env "$@" timeout 240 "$DISTRUN" -n "$n" "$CTESTS/shm_check" rooted "$iters"
	[ "$status" -eq 0 ] || { echo "$output" | tail; return 1; }
	[ "$(grep -c ': rooted ok$' <<<"$output")" -eq "$n" ]
}

@test "rooted calls back to back, the root going round the ranks: every value right" {
	rooted 2 200
	rooted 3 200
	# 4 ranks on 2 cores; many chunks a call, the halves reused within it
	rooted 4 100 DISTRUN_SHM_CHUNK=4096
	# a tree of flags: every phase waits for all
	rooted 20 20
}

# coll_ok MODE: coll_check MODE on 2, 3 and 5 ranks, then on 3 with every
# rank sleeping at once (no spin: every wait in the transport); every
# rank says ok.
coll_ok() {
	local n
	for n in 2 3 5 spin0; do
		if [ $n = spin0 ]; then
			n=3
			DISTRUN_SPIN_US=0 run timeout 120 "$DISTRUN" -n $n "$CTESTS/coll_check" "$1"
		else
			run timeout 120 "$DISTRUN" -n $n "$CTESTS/coll_check" "$1"
		fi
		echo "$output"
		[ "$status" -eq 0 ]
		[ "$(grep -c '^\[[0-9]*\] rank [0-9]*: ok$' <<<"$output")" -eq $n ]
	done
}

@test "small blocking calls take the quick way and hand late ranks to the general wait: 3000 calls and runs of 200 rooted ones past the root's lead, checked, 2 to 5 ranks" {
	coll_ok quick
}

@test "the writers of a rooted call may leave at once: the readers still get the data" {
	for k in bcast reduce; do
		check 3 leave $k
		echo "$output"
		[ "$status" -eq 0 ]
		[ "$(grep -c ': leave ok$' <<<"$output")" -eq $([ $k = bcast ] && echo 2 || echo 1) ]
		[ "$(grep -c ': left$' <<<"$output")" -eq $([ $k = bcast ] && echo 1 || echo 2) ]
		! grep -q DR_ <<<"$output"
	done
}

@test "beyond 16 ranks the collectives go through a tree of flags: 20 and 256 ranks" {
	exact 20 $((256 << 10))
	exact 256 4096
}

@test "DISTRUN_SHM_COLL=0: the collectives go as messages through the rings, and agree" {
	run env DISTRUN_SHM_COLL=0 timeout 240 "$DISTRUN" -n 3 "$CTESTS/coll_check" all
	[ "$status" -eq 0 ] || { echo "$output" | tail; false; }
	[ "$(grep -c ': ok$' <<<"$output")" -eq 3 ]
}

@test "a call that differs from the others' through the flags: DR_EMISMATCH on every rank, naming both" {
	check 3 differ count
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'DR_EMISMATCH: rank 0 called all_reduce(count=8, float32, sum) but rank 1 called all_reduce(count=9, float32, sum)' <<<"$output")" -eq 3 ]
	# in a tree, the parent of the odd one sees it and tells everyone
	check 20 differ count
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'DR_EMISMATCH: rank 1 called all_reduce(count=8, float32, sum) but rank 10 called all_reduce(count=9, float32, sum)' <<<"$output")" -eq 20 ]
	# calls of at most 8 bytes, whose data rides on the flag's line
	check 3 differ tiny
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'DR_EMISMATCH: rank 0 called all_reduce(count=2, float32, sum) but rank 1 called all_reduce(count=1, float32, sum)' <<<"$output")" -eq 3 ]
}

# rooted_differ N KIND PAIR [allreduce]: shm_check differ KIND on N ranks;
# every rank reports DR_EMISMATCH with the words PAIR (the two calls,
# lower rank first), at the odd call or at one of the barriers (4 B
# all_reduces) after it.
rooted_differ() {
	check "$1" differ "$2" $4
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -cF "DR_EMISMATCH: $3" <<<"$output")" -eq "$1" ]
}

@test "rooted calls that differ (roots, counts, broadcast against reduce, two roots that wait): DR_EMISMATCH on every rank, naming both" {
	# 8 floats through the small slots; "small-": 4 floats (16 bytes),
	# in the writers' records of the call
	for c in 8 4; do
		local p= b="broadcast(count=$c, float32, root=0)"
		[ $c -eq 8 ] || p=small-
		for n in 2 3; do
			# both take themselves for the root: nobody waits,
			# the check two calls later finds it
			rooted_differ $n ${p}root "rank 0 called $b but rank 1 called broadcast(count=$c, float32, root=1)"
			# a reader sees its root's call at once
			rooted_differ $n ${p}bcount "rank 0 called $b but rank 1 called broadcast(count=$((c + 1)), float32, root=0)"
			# a broadcast's root and a reduce's writer: neither
			# waits
			rooted_differ $n ${p}reduce "rank 0 called $b but rank 1 called reduce(count=$c, float32, sum, root=0)"
			# a reduce's root sees a writer's call at once
			rooted_differ $n ${p}rop "rank 0 called reduce(count=$c, float32, sum, root=0) but rank 1 called reduce(count=$c, float32, max, root=0)"
			# two roots (reduces, gathers) each wait for every
			# rank, the other root too: they see its record
			rooted_differ $n ${p}rroots "rank 0 called reduce(count=$c, float32, sum, root=0) but rank 1 called reduce(count=$c, float32, sum, root=1)"
			rooted_differ $n ${p}groots "rank 0 called gather(count=$c, float32, root=0) but rank 1 called gather(count=$c, float32, root=1)"
			rooted_differ $n ${p}rgroots "rank 0 called gather(count=$c, float32, root=0) but rank 1 called reduce(count=$c, float32, sum, root=1)"
		done
		# every rank takes another for the root: all wait, none for
		# ever
		rooted_differ 2 ${p}swap "rank 0 called broadcast(count=$c, float32, root=1) but rank 1 called broadcast(count=$c, float32, root=0)"
		check 3 differ ${p}swap
		echo "$output"
		[ "$status" -eq 0 ]
		[ "$(grep -cE "DR_EMISMATCH: rank [0-9] called broadcast\(count=$c, float32, root=[0-9]\) but rank [0-9] called broadcast\(count=$c, float32, root=[0-9]\)" <<<"$output")" -eq 3 ]
	done
}

@test "small rooted calls that differ, then tiny all_reduces (the lean way, the call still open): DR_EMISMATCH on every rank, naming both" {
	local b="broadcast(count=4, float32, root=0)"
	for n in 2 3; do
		rooted_differ $n small-root "rank 0 called $b but rank 1 called broadcast(count=4, float32, root=1)" allreduce
		rooted_differ $n small-bcount "rank 0 called $b but rank 1 called broadcast(count=5, float32, root=0)" allreduce
		rooted_differ $n small-reduce "rank 0 called $b but rank 1 called reduce(count=4, float32, sum, root=0)" allreduce
		rooted_differ $n small-rop "rank 0 called reduce(count=4, float32, sum, root=0) but rank 1 called reduce(count=4, float32, max, root=0)" allreduce
	done
}

@test "small rooted calls and tiny all_reduces in turn (a training step's loop), and runs of 400 rooted calls from one root before a barrier: every value right, 2 to 5 ranks, spinning or not" {
	coll_ok mixed
}

@test "flags against messages (all_reduce against monitored_barrier): DR_EMISMATCH on every rank" {
	check 3 differ msgs
	echo "$output"
	[ "$status" -eq 0 ]
	# rank 1's messages reach rank 0 or rank 2 first: either pair is the
	# right diagnosis, but every rank must report the same one
	local pair='DR_EMISMATCH: (rank 0 called all_reduce\(count=8, float32, sum\) but rank 1 called monitored_barrier|rank 1 called monitored_barrier but rank 2 called all_reduce\(count=8, float32, sum\))'
	[ "$(grep -cE "$pair" <<<"$output")" -eq 3 ]
	[ "$(grep -oE "$pair" <<<"$output" | sort -u | wc -l)" -eq 1 ]
}

@test "a rank that does not come: the others fail at the call's deadline, naming the rank they wait for" {
	DISTRUN_TIMEOUT=2s check 3 late 5
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^\[0\] rank 0: DR_ETIMEDOUT: rank [01]: timed out after 2000 ms in all_reduce(count=16777216, float32, sum) (seq 2) waiting for rank 2' <<<"$output"
	grep -q '^\[1\] rank 1: DR_ETIMEDOUT: .*waiting for rank 2' <<<"$output"
	# through the tree: the rank named is the late one, not its parent
	DISTRUN_TIMEOUT=2s check 20 late 5
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'DR_ETIMEDOUT: .*waiting for rank 19' <<<"$output")" -eq 19 ]
}

holding() {
	[ "$(grep -c holding "$out")" -eq "$1" ]
}

# start_hold N: starts distrun -n N shm_check hold in the background; sets
# JOB (distrun's pid), PIDS (the ranks') and INODE (the segment's).
start_hold() {
	out=$BATS_TEST_TMPDIR/hold.out
	"$DISTRUN" -n "$1" "$CTESTS/shm_check" hold >"$out" 2>&1 &
	JOB=$!
	wait_until 30 holding "$1" || {
		cat "$out"; kill -9 $JOB; return 1; }
	PIDS=$(sed -n 's/.*holding pid \([0-9]*\).*/\1/p' "$out")
	INODE=$(sed -n 's/.*segment inode \([0-9]*\)$/\1/p' "$out" | sort -u)
	[ "$(wc -w <<<"$INODE")" -eq 1 ]
}

gone() {
	for p in "$@"; do
		! kill -0 "$p" 2>/dev/null || return 1
	done
}

# Nothing maps the segment any more, and nothing was made in /dev/shm.
nothing_left() {
	wait_until 30 gone $JOB $PIDS
	! grep -l "memfd:distrun-segment (deleted)" /proc/[0-9]*/maps 2>/dev/null |
		xargs -r grep -l " $INODE  *" 2>/dev/null | grep -q .
	[ -z "$(find /dev/shm -newer "$BATS_TEST_TMPDIR/marker" -name '*distrun*' 2>/dev/null)" ]
}

@test "nothing is left after SIGKILL of a rank" {
	touch "$BATS_TEST_TMPDIR/marker"
	start_hold 3
	kill -9 $(sed -n 2p <<<"$PIDS")
	wait $JOB || true
	nothing_left
}

@test "nothing is left after SIGKILL of distrun" {
	touch "$BATS_TEST_TMPDIR/marker"
	start_hold 3
	kill -9 $JOB
	nothing_left
}

@test "nothing is left after SIGKILL of every process of the job" {
	touch "$BATS_TEST_TMPDIR/marker"
	start_hold 3
	kill -9 $JOB $PIDS
	nothing_left
}

@test "256 ranks on 2 cores all talk through shared memory" {
	run timeout 300 "$DISTRUN" -n 256 "$CTESTS/shm_check" info
	[ "$status" -eq 0 ] || { echo "$output" | tail; false; }
	[ "$(grep -c ': transport shm$' <<<"$output")" -eq 256 ]
}

@test "two ranks queued on one CPU while another is free move apart within 300 barriers" {
	# Each rank moves onto rank 0's CPU, then gets its CPUs back: the
	# kernel's balancer would leave them together for 10 ms and more
	# (measured: 20 of 20 runs failed this with the move taken out).
	[ "$(nproc)" -ge 2 ] || skip "needs 2 CPUs"
	for i in 1 2 3; do
		check 2 stacked 300
		echo "$output"
		[ "$status" -eq 0 ]
		grep -q '^\[0\] rank 0: cpus [0-9]* [0-9]*$' <<<"$output"
	done
}

@test "ranks that outnumber the CPUs, all queued on one, spread out to their share within 3000 barriers" {
	# Oversubscribed, a waiting rank spins without yielding while the
	# ranks it waits for run elsewhere: 3 on one CPU and 1 on the other
	# would cost a switch more a call, so the crowded CPU's ranks move.
	# 3000: beside a busy process the kernel moves ranks too (300 failed
	# 9 of 20 runs there, 3000 none; on a quiet machine 0 of 40 either).
	local n=$(($(nproc) * 2))
	[ "$(nproc)" -ge 2 ] || skip "needs 2 CPUs"
	[ "$n" -le 16 ] || skip "flat calls only: $n ranks take the tree"
	for i in 1 2 3; do
		check "$n" stacked 3000
		echo "$output"
		[ "$status" -eq 0 ]
		grep -q '^\[0\] rank 0: cpus\( [0-9]*\)\{'"$n"'\}$' <<<"$output"
	done
}

# ------------------------------------------------ under other launchers

@test "torchrun: the local ranks share a segment made by local rank 0 and use shared memory" {
	require_torch
	run timeout 120 "$TORCH_PYTHON" -m torch.distributed.run --nproc_per_node 3 \
		--master_port "$(free_port)" --redirects 1 --tee 1 \
		--log_dir "$BATS_TEST_TMPDIR/torchrun" --no_python "$CTESTS/shm_check" info
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': transport shm$' <<<"$output")" -eq 3 ]
	grep -q 'rank 2: segment ranks 3 slot 2 size [0-9]* launcher none' <<<"$output"
}

@test "mpirun and mpiexec.mpich: the same, and the collectives check passes over it" {
	command -v mpirun >/dev/null || skip "Open MPI is not installed"
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		run timeout 120 mpirun --oversubscribe -n 3 "$CTESTS/shm_check" info
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': transport shm$' <<<"$output")" -eq 3 ]
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		run timeout 300 mpirun --oversubscribe -n 4 "$CTESTS/coll_check" all
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': ok$' <<<"$output")" -eq 4 ]
	command -v mpiexec.mpich >/dev/null || skip "MPICH is not installed"
	run timeout 120 mpiexec.mpich -n 2 "$CTESTS/shm_check" info
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ': transport shm$' <<<"$output")" -eq 2 ]
}

@test "mpirun: a rank SIGKILLed mid-collective fails the others with DR_EPEER (death watch, no distrun)" {
	command -v mpirun >/dev/null || skip "Open MPI is not installed"
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		run timeout 60 mpirun --oversubscribe -n 3 "$CTESTS/shm_check" kill 64
	echo "$output"
	grep -q 'rank 0: DR_EPEER: .*rank 2' <<<"$output"
	grep -q 'rank 1: DR_EPEER: .*rank 2' <<<"$output"
}
