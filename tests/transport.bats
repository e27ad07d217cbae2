#!/usr/bin/env bats
# Large messages that arrive before their receive is posted (the transport
# leaves them in the socket until a receive wants them): crossed blocking
# sends, a receive behind a parked message of another tag, collectives
# whose ranks run a call ahead, any-source receives, and a sender that
# dies while its message waits.  See tests/c/transport_flow.c.

load common

export DISTRUN_TIMEOUT=60s

# flow N MODE: transport_flow MODE on N ranks passes on every rank.
flow() {
	local n=$1 mode=$2
	run "$DISTRUN" --timeout 150s -n "$n" "$CTESTS/transport_flow" "$mode"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(grep -c 'rank [0-9]*: ok$' <<<"$output")" -eq "$n" ] || {
		echo "$output"; return 1; }
}

@test "two ranks that both send 8 MiB before receiving get each other's bytes" {
	flow 2 crossed
}

@test "a receive behind a waiting 4 MiB message of another tag gets its own" {
	flow 2 tags
}

@test "broadcast and gather with a rank a call ahead deliver every call exactly" {
	flow 3 ahead
	flow 4 ahead
}

@test "an any-source receive takes a large message that waited for it" {
	flow 2 any
}

@test "a sender that dies while its large message waits: DR_EPEER, not a hang" {
	# envrun: distrun would stop the survivors at the first death.  A
	# short timeout: were the death noticed only by it, this would fail.
	DISTRUN_TIMEOUT=20s run timeout 60 "$SRCDIR/tests/envrun" 3 \
		"$CTESTS/transport_flow" dies "$BATS_TEST_TMPDIR/done"
	[ "$status" -eq 3 ] || { echo "$output"; return 1; }
	grep -q "^\[1\] rank 1: DR_EPEER: .*connection to rank 0" <<<"$output" || {
		echo "$output"; return 1; }
}
