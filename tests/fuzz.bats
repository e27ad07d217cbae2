#!/usr/bin/env bats
# The fuzz corpora as regression tests: every harness of tests/fuzz/ is
# built (with the normal compiler, and the sanitizers under ASAN=1) into
# NAME-replay, which feeds it each kept input of testdata/fuzz/NAME/ once.
# An input that once crashed a parser, or broke a property the harness
# checks, fails here until the fix is in.  `make fuzz` runs the harnesses
# under libFuzzer to find new ones.

load common

FUZZDIR=$B/fuzz
CORPUS=$SRCDIR/testdata/fuzz

# replays NAME: the harness takes every input of its corpus, and says so.
replays() {
	local n
	n=$(find "$CORPUS/$1" -maxdepth 1 -type f ! -name '.*' | wc -l)
	[ "$n" -gt 0 ]
	run "$FUZZDIR/$1-replay" "$CORPUS/$1"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "${lines[${#lines[@]} - 1]}" = "$1-replay: replayed $n inputs" ]
}

@test "every harness in tests/fuzz has a kept corpus, and every corpus a harness" {
	for h in "$SRCDIR"/tests/fuzz/*.c; do
		n=$(basename "$h" .c)
		[ "$n" = replay ] && continue
		[ -d "$CORPUS/$n" ] || { echo "no corpus for $n"; return 1; }
		[ -x "$FUZZDIR/$n-replay" ] || { echo "no $n-replay"; return 1; }
	done
	for d in "$CORPUS"/*/; do
		n=$(basename "$d")
		[ -f "$SRCDIR/tests/fuzz/$n.c" ] || { echo "no harness for $n"; return 1; }
	done
}

@test "the wire header corpus replays: decode, re-encode, match against a receive, describe" {
	replays wire
}

@test "the store corpus replays: the server's frames and requests against a model" {
	replays store
}

@test "the handshake corpus replays: any bit changed in flight, or another key, fails it" {
	replays handshake
}

@test "the duration corpus replays through the launcher's and the runtime's parsers" {
	replays duration
}

@test "the --ranks corpus replays (' -1' once wrote before the flags array)" {
	replays ranks
}

@test "the command-line corpus replays through opts_parse" {
	replays options
}

@test "the rendezvous corpus replays: init_method, env:// variables, the published file" {
	replays rendezvous
}

@test "the Slurm host list corpus replays: SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE, expanded" {
	replays hostlist
}

@test "the torch TCPStore corpus replays: the agent's answers to the client, 1.x and 2.x" {
	replays tcpstore
}

@test "the etcd corpus replays: the v3 gateway's replies and the rendezvous document" {
	replays etcd
}

@test "the node frames corpus replays: join, start, fail, end, stop, bye between launchers" {
	replays nodes
}

@test "a replay driver fails on a corpus that is missing, naming it" {
	# An error, never "replayed 0 inputs".
	run "$FUZZDIR/wire-replay" "$BATS_TEST_TMPDIR/nothing-here"
	[ "$status" -ne 0 ]
	[[ "$output" == *"nothing-here"* ]]
}

@test "distrun refuses --ranks with a space before a sign, naming the list" {
	run "$DISTRUN" -n 4 --ranks ' -1' true
	[ "$status" -eq 2 ]
	[[ "$output" == *"--ranks ' -1': expected a list like 0,2-3 or none"* ]]
}
