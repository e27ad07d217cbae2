#!/usr/bin/env bats
# Jobs over several hosts: pretend hosts are network namespaces joined by a
# bridge of veth pairs, made and removed by each test, with addresses only
# inside them (10.231.N.0/24).  One distrun per "host", connected to node
# 0's, as torchrun's static rendezvous.

load common

setup() {
	[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
	command -v ip >/dev/null || skip "iproute2 is not installed"
	NS=drt$$x$BATS_TEST_NUMBER
	NET=10.231.$(( (BATS_TEST_NUMBER + $$) % 200 + 20 ))
	TMP=$(mktemp -d)
	# The secret every node knows (a file only root can read).
	head -c 32 /dev/urandom >"$TMP/secret" && chmod 600 "$TMP/secret"
	export DISTRUN_SECRET_FILE=$TMP/secret
	unset DISTRUN_SECRET
}

teardown() {
	for pid in $(jobs -p); do kill -9 "$pid" 2>/dev/null; done
	for i in 0 1 2; do
		ip netns pids "$NS$i" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$NS$i" 2>/dev/null
	done
	ip link del "${NS}br" 2>/dev/null
	rm -rf "$TMP"
}

# hosts N: N namespaces $NS0.. with addresses $NET.1.., on one bridge.
hosts() {
	ip link add "${NS}br" type bridge
	ip link set "${NS}br" up
	for ((i = 0; i < $1; i++)); do
		ip netns add "$NS$i"
		ip link add "${NS}v$i" type veth peer name eth0 netns "$NS$i"
		ip link set "${NS}v$i" master "${NS}br" up
		ip -n "$NS$i" addr add "$NET.$((i + 1))/24" dev eth0
		ip -n "$NS$i" link set eth0 up
		ip -n "$NS$i" link set lo up
	done
}

# on I CMD...: runs CMD on host I.
on() {
	local i=$1; shift
	ip netns exec "$NS$i" "$@"
}

# ns_pids I NAME: pids of processes called NAME in host I's namespace.
ns_pids() {
	local pid
	for pid in $(ip netns pids "$NS$1"); do
		[ "$(cat /proc/$pid/comm 2>/dev/null)" = "$2" ] && echo "$pid"
	done
	return 0
}

node() { # node I NNODES NPROC ARGS...: distrun of node I, output in $TMP/nI
	local i=$1 nn=$2 np=$3; shift 3
	on "$i" "$DISTRUN" --nnodes "$nn" --node-rank "$i" \
		--master-addr "$NET.1" --master-port 29611 -n "$np" "$@" \
		>"$TMP/n$i" 2>&1
}

@test "two hosts: every collective right with ranks 0-2 on one and 3 on the other" {
	hosts 2
	node 0 2 3 --timeout 120s "$CTESTS/coll_check" all & p0=$!
	node 1 2 1 --timeout 120s "$CTESTS/coll_check" all & p1=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP/n0" "$TMP/n1"
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
	for r in 0 1 2; do grep -q "^\[$r\] rank $r: ok" "$TMP/n0"; done
	grep -q "^\[3\] rank 3: ok" "$TMP/n1"
}

# sizes_123 HIER PROG ARGS...: PROG on three hosts of 1, 2 and 3 ranks
# with DISTRUN_HIER=HIER; every node exits 0 and all 6 ranks print ok.
sizes_123() {
	local hier=$1 i; shift
	for i in 0 1 2; do
		DISTRUN_HIER=$hier node $i 3 $((i + 1)) --timeout 120s "$@" &
		eval "p$i=\$!"
	done
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	s2=0; wait $p2 || s2=$?
	cat "$TMP"/n?
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && [ "$s2" -eq 0 ]
	[ "$(cat "$TMP"/n? | grep -c 'rank [0-5]: ok, [0-9]* checks')" -eq 6 ]
}

@test "three hosts of 1, 2 and 3 ranks: hierarchical collectives bit-identical on every rank, every collective right" {
	hosts 3
	for mode in on auto; do
		sizes_123 $mode "$CTESTS/hier_check" bits
		# shared memory inside the hosts of several ranks, TCP between
		grep -q '^\[0\] rank 0: .*(transport tcp)' "$TMP/n0"
		grep -q '^\[5\] rank 5: .*(transport shm+tcp)' "$TMP/n2"
	done
	sizes_123 on "$CTESTS/coll_more" all
}

@test "ranks get torchrun's global variables on every node" {
	hosts 2
	cat >"$TMP/env.sh" <<-'EOF'
	#!/bin/sh
	echo "R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK GW=$GROUP_WORLD_SIZE M=$MASTER_ADDR"
	EOF
	chmod +x "$TMP/env.sh"
	node 0 2 2 "$TMP/env.sh" & p0=$!
	node 1 2 2 "$TMP/env.sh" & p1=$!
	wait $p0 && wait $p1
	cat "$TMP/n0" "$TMP/n1"
	grep -qx "\[0\] R=0 L=0 W=4 LW=2 G=0 GW=2 M=$NET.1" "$TMP/n0"
	grep -qx "\[1\] R=1 L=1 W=4 LW=2 G=0 GW=2 M=$NET.1" "$TMP/n0"
	grep -qx "\[2\] R=2 L=0 W=4 LW=2 G=1 GW=2 M=$NET.1" "$TMP/n1"
	grep -qx "\[3\] R=3 L=1 W=4 LW=2 G=1 GW=2 M=$NET.1" "$TMP/n1"
}

@test "three hosts of uneven sizes run the barrier example" {
	hosts 3
	node 0 3 1 "$EXAMPLES/02_barrier_all_reduce" & p0=$!
	node 1 3 2 "$EXAMPLES/02_barrier_all_reduce" & p1=$!
	node 2 3 1 "$EXAMPLES/02_barrier_all_reduce" & p2=$!
	wait $p0 && wait $p1 && wait $p2
	cat "$TMP"/n?
	# Four ranks: each adds torch.randn(3) after manual_seed(0).
	[ "$(cat "$TMP"/n? | grep -c 'reduced tensor - tensor(\[ 6.1640, -1.1737, -8.7152\])')" -eq 4 ]
}

@test "a stall report on node 1 names the job's global ranks and the node" {
	hosts 2
	# rank 1 (node 1's first) skips the barrier the others wait in
	node 0 2 1 --timeout 90s "$CTESTS/diag_hang" skip & p0=$!
	node 1 2 2 --timeout 90s --stall-timeout 3s --report "$TMP/r.json" \
		"$CTESTS/diag_hang" skip & p1=$!
	s1=0; wait $p1 || s1=$?
	s0=0; wait $p0 || s0=$?
	cat "$TMP"/n?
	[ "$s1" -ne 0 ]
	grep -q "(node 1: ranks 1-2 of 3)" "$TMP/n1"
	grep -q "^  rank 1 never entered it" "$TMP/n1"
	grep -Eq "^ +2 +[0-9]+ +[A-Za-z] +1 +barrier" "$TMP/n1"
	python3 - "$TMP/r.json" <<-'EOF'
	import json, sys
	d = json.load(open(sys.argv[1]))["diagnosis"]
	assert sorted(r["rank"] for r in d["ranks"]) == [1, 2], d["ranks"]
	EOF
}

@test "a rank failing on one node stops every node with its status" {
	hosts 2
	cat >"$TMP/fail.sh" <<-'EOF'
	#!/bin/sh
	[ "$RANK" = 3 ] && exit 7
	exec sleep 60
	EOF
	chmod +x "$TMP/fail.sh"
	node 0 2 2 "$TMP/fail.sh" & p0=$!
	node 1 2 2 "$TMP/fail.sh" & p1=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP/n0" "$TMP/n1"
	[ "$s0" -eq 7 ] && [ "$s1" -eq 7 ]
	grep -q "rank 3 on node 1 exited with status 7" "$TMP/n0"
	grep -q "rank 3 on node 1 exited with status 7" "$TMP/n1"
	[ -z "$(ns_pids 0 sleep)$(ns_pids 1 sleep)" ]
}

@test "kill -9 of one node's distrun stops the other nodes" {
	hosts 2
	node 0 2 1 sleep 60 & p0=$!
	node 1 2 1 sleep 60 & p1=$!
	sleeping() { [ -n "$(ns_pids 0 sleep)$(ns_pids 1 sleep)" ]; }
	node1_sleeping() { [ -n "$(ns_pids 1 sleep)" ]; }
	wait_until 30 node1_sleeping
	kill -9 $(ns_pids 1 distrun)
	s0=0; wait $p0 || s0=$?
	cat "$TMP/n0"
	[ "$s0" -ne 0 ]
	grep -q "the distrun of node 1 ($NET.2) was lost" "$TMP/n0"
	wait_until 10 eval '! sleeping'
}

@test "a node that never comes is named at the join timeout" {
	hosts 2
	run on 0 "$DISTRUN" --nnodes 2 --node-rank 0 --master-addr "$NET.1" \
		--master-port 29611 --join-timeout 2s -n 1 true
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"1 of 2 nodes joined within 2s; missing node 1"* ]]
}

@test "a node without the job's secret is refused and the job goes on" {
	hosts 3
	node 0 2 1 --join-timeout 30s "$EXAMPLES/01_barrier" & p0=$!
	head -c 32 /dev/urandom >"$TMP/other" && chmod 600 "$TMP/other"
	s2=0
	DISTRUN_SECRET_FILE=$TMP/other on 2 "$DISTRUN" --nnodes 2 \
		--node-rank 1 --master-addr "$NET.1" --master-port 29611 \
		--join-timeout 3s -n 1 true >"$TMP/n2" 2>&1 || s2=$?
	node 1 2 1 "$EXAMPLES/01_barrier" & p1=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP"/n?
	[ "$s2" -ne 0 ]
	grep -q "do not share the job's secret" "$TMP/n2"
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
}

# etcd_up: a real etcd server in host 0, listening on $NET.1:2379 only.
etcd_up() {
	command -v etcd >/dev/null || skip "etcd-server is not installed"
	on 0 etcd --name drt --data-dir "$TMP/etcd" \
		--listen-client-urls "http://$NET.1:2379" \
		--advertise-client-urls "http://$NET.1:2379" \
		--listen-peer-urls "http://127.0.0.1:2380" \
		--initial-advertise-peer-urls "http://127.0.0.1:2380" \
		--initial-cluster "drt=http://127.0.0.1:2380" \
		>"$TMP/etcd.log" 2>&1 &
	etcd_ready() { on 0 curl -sf -X POST "http://$NET.1:2379/v3/kv/range" -d '{"key":"eA=="}' >/dev/null; }
	wait_until 30 etcd_ready
}

enode() { # enode I NNODES ARGS...: distrun on host I joining through etcd
	local i=$1 nn=$2; shift 2
	on "$i" "$DISTRUN" --rdzv-backend etcd --rdzv-endpoint "$NET.1:2379" \
		--rdzv-id "job$BATS_TEST_NUMBER" --nnodes "$nn" "$@" \
		>"$TMP/n$i" 2>&1
}

@test "etcd: three nodes of 2:3 meet, get distinct node ranks and run every collective" {
	hosts 3
	etcd_up
	enode 0 2:3 -n 2 --timeout 120s "$CTESTS/coll_check" all & p0=$!
	enode 1 2:3 -n 1 --timeout 120s "$CTESTS/coll_check" all & p1=$!
	enode 2 2:3 -n 1 --timeout 120s "$CTESTS/coll_check" all & p2=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	s2=0; wait $p2 || s2=$?
	cat "$TMP"/n?
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && [ "$s2" -eq 0 ]
	[ "$(cat "$TMP"/n? | grep -c 'rank [0-3]: ok$')" -eq 4 ]
}

@test "etcd: a node after the last call is told it came too late; the others run" {
	hosts 3
	etcd_up
	cat >"$TMP/env.sh" <<-'EOF2'
	#!/bin/sh
	echo "G=$GROUP_RANK W=$WORLD_SIZE"
	sleep 12
	EOF2
	chmod +x "$TMP/env.sh"
	enode 0 2:3 -n 1 "$TMP/env.sh" & p0=$!
	enode 1 2:3 -n 1 "$TMP/env.sh" & p1=$!
	in_job() { grep -q "G=" "$TMP/n0" && grep -q "G=" "$TMP/n1"; }
	wait_until 60 in_job
	s2=0; enode 2 2:3 -n 1 "$TMP/env.sh" || s2=$?
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP"/n?
	[ "$s2" -eq 1 ]
	grep -q "is closed: its job started with 2 nodes; this node came too late" "$TMP/n2"
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
	cat "$TMP/n0" "$TMP/n1" | grep -q "G=0 W=2"
	cat "$TMP/n0" "$TMP/n1" | grep -q "G=1 W=2"
}

@test "etcd: a node that comes after the round's lease would have run out (15 s) is still told it came too late" {
	hosts 3
	etcd_up
	cat >"$TMP/wait.sh" <<-EOF2
	#!/bin/sh
	echo "G=\$GROUP_RANK in"
	while [ ! -e "$TMP/go" ]; do sleep 0.2; done
	EOF2
	chmod +x "$TMP/wait.sh"
	enode 0 2 -n 1 --timeout 200s "$TMP/wait.sh" & p0=$!
	enode 1 2 -n 1 --timeout 200s "$TMP/wait.sh" & p1=$!
	in_job() { grep -q "G=0 in" "$TMP/n0" "$TMP/n1" && grep -q "G=1 in" "$TMP/n0" "$TMP/n1"; }
	wait_until 60 in_job
	# past the TTL of the lease the nodes renewed while they waited:
	# node 0 renews it while the job runs
	sleep 20
	s2=0; enode 2 2 -n 1 --join-timeout 60s "$TMP/wait.sh" || s2=$?
	touch "$TMP/go"
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP"/n?
	[ "$s2" -eq 1 ]
	grep -q "is closed: its job started with 2 nodes; this node came too late" "$TMP/n2"
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
}

# restart_job: $TMP/job.sh, which prints its round and place, then (in
# round 0, or in every round with ROUNDS=all) sleeps until stopped.
restart_job() {
	cat >"$TMP/job.sh" <<-'EOF'
	#!/bin/sh
	echo "round=$TORCHELASTIC_RESTART_COUNT max=$TORCHELASTIC_MAX_RESTARTS G=$GROUP_RANK GW=$GROUP_WORLD_SIZE W=$WORLD_SIZE R=$RANK"
	[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || [ "$ROUNDS" = all ] && exec sleep 200
	exit 0
	EOF
	chmod +x "$TMP/job.sh"
}

# in_round ROUND N: N ranks have printed that they run in round ROUND.
in_round() { [ "$(cat "$TMP"/n? | grep -c "round=$1 ")" -eq "$2" ]; }

# restart_nodes MAX: three etcd nodes of 2:3 run restart_job's script with
# --max-restarts MAX (pids in p0..p2); returns once all are in round 0.
restart_nodes() {
	restart_job
	for i in 0 1 2; do
		enode $i 2:3 -n 1 --max-restarts "$1" --timeout 200s "$TMP/job.sh" &
		eval "p$i=\$!"
	done
	wait_until 60 in_round 0 3
}

# hub_of ROUND FILES...: the host (0-2) whose output says it is node 0 of
# that round, from the files given.
hub_of() {
	local round=$1 f; shift
	for f in "$@"; do
		grep -q "round=$round .*G=0 " "$f" && { echo "${f##*/n}"; return; }
	done
	return 1
}

# lose_hub: kills the distrun of round 0's node 0; its host in $h.
lose_hub() {
	h=$(hub_of 0 "$TMP"/n?)
	kill -9 $(ns_pids "$h" distrun)
}

@test "etcd: a lost node restarts the rendezvous within --max-restarts; the others meet again with new node ranks" {
	hosts 3
	etcd_up
	restart_nodes 2
	# node 0 of the round (the hub) goes; the other two meet again
	lose_hub
	rc=(0 0 0)
	for i in 0 1 2; do eval "wait \$p$i" || rc[$i]=$?; done
	cat "$TMP"/n?
	for i in 0 1 2; do
		if [ "$i" = "$h" ]; then continue; fi
		[ "${rc[$i]}" -eq 0 ]
		grep -q "distrun: the distrun of node 0 ($NET.$((h + 1))) was lost; node [12] restarts the rendezvous (restart 1 of 2)" "$TMP/n$i"
	done
	[ "${rc[$h]}" -ne 0 ]
	# round 1: two nodes, numbered afresh, the restart count in the ranks
	[ "$(cat "$TMP"/n? | grep -c 'round=1 max=2 G=[01] GW=2 W=2 R=[01]$')" -eq 2 ]
	cat "$TMP"/n? | grep -q 'round=1 .* G=0 '
	cat "$TMP"/n? | grep -q 'round=1 .* G=1 '
}

@test "etcd: after a restart, the ranks start with nothing blocked, as in the first round" {
	# A C or Python rank, not sh: a shell clears its own signal mask.
	cat >"$TMP/job.py" <<-'EOF'
	#!/usr/bin/python3
	import os
	blk = [l.split()[1] for l in open("/proc/self/status")
	       if l.startswith("SigBlk:")][0]
	r = os.environ["TORCHELASTIC_RESTART_COUNT"]
	print("round=%s G=%s blk=%s" % (r, os.environ["GROUP_RANK"], blk),
	      flush=True)
	if r == "0":
	    os.execv("/bin/sleep", ["sleep", "200"])
	EOF
	chmod +x "$TMP/job.py"
	hosts 3
	etcd_up
	for i in 0 1 2; do
		enode $i 2:3 -n 1 --max-restarts 1 --timeout 200s "$TMP/job.py" &
		eval "p$i=\$!"
	done
	wait_until 60 in_round 0 3
	lose_hub
	for i in 0 1 2; do eval "wait \$p$i" || true; done
	cat "$TMP"/n?
	[ "$(cat "$TMP"/n? | grep -c '] round=0 G=[012] blk=0000000000000000$')" -eq 3 ]
	[ "$(cat "$TMP"/n? | grep -c '] round=1 G=[01] blk=0000000000000000$')" -eq 2 ]
}

@test "etcd: a lost node with no restarts left stops the job, naming the node" {
	hosts 3
	etcd_up
	ROUNDS=all restart_nodes 1
	lose_hub
	wait_until 60 in_round 1 2
	left=()
	for i in 0 1 2; do [ "$i" = "$h" ] || left+=("$TMP/n$i"); done
	h1=$(hub_of 1 "${left[@]}")
	kill -9 $(ns_pids "$h1" distrun)
	rc=(0 0 0)
	for i in 0 1 2; do eval "wait \$p$i" || rc[$i]=$?; done
	cat "$TMP"/n?
	last=$(( 3 - h - h1 ))
	[ "${rc[$last]}" -ne 0 ]
	grep -q "distrun: the distrun of node 0 ($NET.$((h1 + 1))) was lost; no restarts left (--max-restarts 1)" "$TMP/n$last"
}

# round_has ROUND N: etcd holds the state of that restart's round with N
# nodes in it.
round_has() {
	local key
	key=$(printf '/distrun/rdzv/job%s/round%s/state' "$BATS_TEST_NUMBER" "$1" | base64 -w0)
	[ "$(on 0 curl -sf -X POST "http://$NET.1:2379/v3/kv/range" -d "{\"key\":\"$key\"}" |
		sed -n 's/.*"value":"\([^"]*\)".*/\1/p' | base64 -d |
		grep -o '"token"' | wc -l)" -eq "$2" ]
}

@test "etcd: after a restart, a node started afresh joins the round the job is in" {
	hosts 3
	etcd_up
	restart_job
	for i in 0 1 2; do
		enode $i 3 -n 1 --max-restarts 2 --timeout 200s --join-timeout 100s "$TMP/job.sh" &
		eval "p$i=\$!"
	done
	wait_until 60 in_round 0 3
	lose_hub
	# the two others wait in round 1 for a third node
	wait_until 60 round_has 1 2
	# a distrun started anew on the lost node's host (not a restart)
	s=0; enode "$h" 3 -n 1 --max-restarts 2 --join-timeout 100s "$TMP/job.sh" || s=$?
	rc=(0 0 0)
	for i in 0 1 2; do [ "$i" = "$h" ] || eval "wait \$p$i" || rc[$i]=$?; done
	cat "$TMP"/n?
	[ "$s" -eq 0 ] && [ "${rc[0]}" -eq 0 ] && [ "${rc[1]}" -eq 0 ] && [ "${rc[2]}" -eq 0 ]
	# its rank is in round 1 with the others, and counts that restart
	grep -q 'round=1 max=2 G=[012] GW=3 W=3 R=[012]$' "$TMP/n$h"
	[ "$(cat "$TMP"/n? | grep -c 'round=1 max=2 G=[012] GW=3 W=3 R=[012]$')" -eq 3 ]
	[ "$(cat "$TMP"/n? | grep 'round=1 ' | sed 's/.* G=\([012]\) .*/\1/' | sort -u | wc -l)" -eq 3 ]
}

@test "etcd: after a restart, a node that comes once that round has closed is told so; the job goes on" {
	hosts 3
	etcd_up
	ROUNDS=all restart_nodes 2
	lose_hub
	wait_until 60 in_round 1 2
	s=0; enode "$h" 2:3 -n 1 --max-restarts 2 --join-timeout 100s "$TMP/job.sh" || s=$?
	cat "$TMP"/n?
	[ "$s" -eq 1 ]
	grep -q "rendezvous job$BATS_TEST_NUMBER is closed: its job (restart 1) started with 2 nodes; this node came too late" "$TMP/n$h"
	for i in 0 1 2; do [ "$i" = "$h" ] || eval "kill -0 \$p$i"; done
}

@test "DISTRUN_RESTART_COUNT beyond --max-restarts is refused, naming it" {
	run env DISTRUN_RESTART_COUNT=3 "$DISTRUN" --max-restarts 2 -n 1 true
	[ "$status" -ne 0 ]
	[[ "$output" == *"DISTRUN_RESTART_COUNT='3': not a restart within --max-restarts 2"* ]]
}

@test "etcd: fewer than MIN nodes fail at the join timeout, saying so" {
	hosts 1
	etcd_up
	s0=0; enode 0 2:3 -n 1 --join-timeout 3s true || s0=$?
	cat "$TMP/n0"
	[ "$s0" -eq 1 ]
	grep -q "not enough nodes (at least 2) within 3s" "$TMP/n0"
}

@test "srun distrun inside a one-node Slurm step runs the job on that node alone" {
	if [ -z "${SLURM_CONF:-}" ] || ! command -v srun >/dev/null; then
		[ -z "${DISTRUN_REQUIRE_SLURM:-}" ] || { echo "no Slurm"; false; }
		skip "no Slurm running (.ci/run starts one with scripts/slurm-local)"
	fi
	run timeout 300 srun -N 1 -n 1 "$DISTRUN" -n 3 --timeout 120s \
		"$CTESTS/coll_check" all
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'rank [0-2]: ok$' <<<"$output")" -eq 3 ]
}

@test "--iface picks the interface ranks listen on; a wrong one is named" {
	hosts 2
	ip -n "${NS}1" link add extra type veth peer name extra2
	ip -n "${NS}1" addr add 10.232.0.9/24 dev extra
	ip -n "${NS}1" link set extra up
	node 0 2 1 --iface eth0 "$EXAMPLES/01_barrier" & p0=$!
	node 1 2 1 --iface eth0 "$EXAMPLES/01_barrier" & p1=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP"/n?
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
	node 0 2 1 --iface eth0 "$CTESTS/coll_check" init & p0=$!
	node 1 2 1 --iface nosuch0 "$CTESTS/coll_check" init & p1=$!
	s1=0; wait $p1 || s1=$?
	s0=0; wait $p0 || s0=$?
	cat "$TMP"/n?
	[ "$s1" -ne 0 ]
	grep -q "DISTRUN_IFACE=nosuch0: no such network interface" "$TMP/n1"
}

@test "a process on another host without the secret is refused by the store and by a rank; the job goes on" {
	hosts 3
	export DISTRUN_TIMEOUT=120s
	node 0 2 2 --timeout 200s "$CTESTS/sec_victim" wait "$TMP" & p0=$!
	node 1 2 1 --timeout 200s "$CTESTS/sec_victim" wait "$TMP" & p1=$!
	have_addrs() { test -s "$TMP/addrs"; }
	wait_until 60 have_addrs
	sh=$(awk '$1 == "store" { print $2 }' "$TMP/addrs")
	sp=$(awk '$1 == "store" { print $3 }' "$TMP/addrs")
	# ranks 0 and 1 (host 0) wait in dr_recv from rank 2 (host 1)
	# (the part after '|' says which peers share its memory)
	r1=$(awk '$1 == "rank" && $2 == 1 { print $3 }' "$TMP/addrs")
	r2=$(awk '$1 == "rank" && $2 == 2 { print $3 }' "$TMP/addrs")
	r1=${r1%%|*} r2=${r2%%|*}
	[[ "$sh" == "$NET.1" ]] && [[ "$r1" == "$NET.1:"* ]] &&
		[[ "$r2" == "$NET.2:"* ]]
	unset DISTRUN_SECRET_FILE
	run on 2 env HOME="$TMP/h" "$CTESTS/attacker" store "$sh" "$sp"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^refused:' <<<"$output")" -eq 7 ]
	ATTACK_WORLD=3 run on 2 env HOME="$TMP/h" "$CTESTS/attacker" transport "$r1"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^refused:' <<<"$output")" -eq 3 ]
	touch "$TMP/go"
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP"/n?
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
	[ "$(cat "$TMP"/n? | grep -c 'rank [0-2]: ok$')" -eq 3 ]
}

@test "300 idle connections to node 0 keep no node out: the oldest is dropped, the node joins" {
	hosts 3
	node 0 2 1 --join-timeout 60s "$EXAMPLES/01_barrier" & p0=$!
	listening() { on 0 ss -Hltn | grep -q ':29611 '; }
	wait_until 30 listening
	# from a third host, never a byte of handshake: node 0 held 64 and
	# closed every newer one for 5 s, the joining node's included
	on 2 "$CTESTS/attacker" flood "$NET.1" 29611 300 0 >"$TMP/flood" 2>&1 &
	wait_until 60 grep -q "connections open" "$TMP/flood"
	node 1 2 1 --join-timeout 60s "$EXAMPLES/01_barrier" & p1=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP/flood" "$TMP"/n?
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
}

# etcd_kv HOST KEY [VALUE | +ENTRY]: as a stranger with write access to
# etcd (no secret): prints KEY's value, sets it to VALUE, or appends the
# JSON ENTRY to the "nodes" of the document there (keeping the rest).
etcd_kv() {
	on "$1" python3 - "$NET.1" "$2" "${3-}" <<-'EOF2'
	import base64, json, sys, urllib.request
	host, key, arg = sys.argv[1:4]
	def call(path, body):
	    r = urllib.request.urlopen(urllib.request.Request(
	        f"http://{host}:2379/v3/{path}", json.dumps(body).encode()))
	    return json.load(r)
	b = lambda s: base64.b64encode(s.encode()).decode()
	kvs = call("kv/range", {"key": b(key)}).get("kvs", [])
	cur = base64.b64decode(kvs[0]["value"]).decode() if kvs else None
	if not arg:
	    print(cur); sys.exit(0)
	if arg.startswith("+"):
	    doc = json.loads(cur); doc["nodes"].append(json.loads(arg[1:]))
	    arg = json.dumps(doc)
	call("kv/put", {"key": b(key), "value": b(arg)})
	EOF2
}

@test "etcd: a stranger who writes etcd takes no slot; the job goes on without it" {
	hosts 3
	etcd_up
	enode 0 2:2 -n 1 --join-timeout 60s "$EXAMPLES/01_barrier" & p0=$!
	key=/distrun/rdzv/job$BATS_TEST_NUMBER/state
	has_doc() { etcd_kv 2 "$key" | grep -q '"nodes"'; }
	wait_until 30 has_doc
	# a node entry of its own after node 0's, as the next node would
	etcd_kv 2 "$key" '+{"addr": "'"$NET.3"'", "port": 29999, "nproc": 1, "token": "0123456789abcdef"}'
	enode 1 2:2 -n 1 --join-timeout 60s "$EXAMPLES/01_barrier" & p1=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP"/n?
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
	grep -q "dropped 1 entry of etcd key $key not written with the job's secret" "$TMP/n0" "$TMP/n1"
}

@test "etcd: a pre-written closed state or round 999999 is not believed" {
	hosts 2
	etcd_up
	local id=job$BATS_TEST_NUMBER
	etcd_kv 1 "/distrun/rdzv/$id/state" '{"state": "closed", "nodes": [{"addr": "10.9.9.9", "port": 1, "nproc": 1, "token": "x"}], "last_call_until": 1, "lease": 0}'
	etcd_kv 1 "/distrun/rdzv/$id/current" '{"round": 999999}'
	enode 0 2:2 -n 1 --join-timeout 60s "$EXAMPLES/01_barrier" & p0=$!
	enode 1 2:2 -n 1 --join-timeout 60s "$EXAMPLES/01_barrier" & p1=$!
	s0=0; wait $p0 || s0=$?
	s1=0; wait $p1 || s1=$?
	cat "$TMP"/n?
	[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ]
	grep -q "holds a rendezvous not written with the job's secret; replacing it" "$TMP/n0" "$TMP/n1"
	grep -q "restart" "$TMP/n0" "$TMP/n1" && return 1
	return 0
}

@test "etcd: two different programs given one --rdzv-id do not merge into one world" {
	hosts 2
	etcd_up
	enode 0 2:2 -n 1 --join-timeout 20s "$EXAMPLES/01_barrier" & p0=$!
	key=/distrun/rdzv/job$BATS_TEST_NUMBER/state
	has_doc() { etcd_kv 1 "$key" | grep -q '"nodes"'; }
	wait_until 30 has_doc
	s1=0; enode 1 2:2 -n 1 --join-timeout 20s true || s1=$?
	kill $p0 2>/dev/null || true
	wait $p0 || true
	cat "$TMP"/n?
	[ "$s1" -eq 1 ]
	grep -q "rendezvous job$BATS_TEST_NUMBER is held by nodes that run another program, or with another --nnodes: two jobs given one --rdzv-id?" "$TMP/n1"
}
