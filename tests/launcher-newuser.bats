#!/usr/bin/env bats
# What a new user tripped on (issue 31): output held back by stdio, the
# torchrun flags --redirects/--tee/--log_dir, the wrong Python, start-up
# cost, prompts without a newline, the README's commands, verdicts that
# name the odd rank, test lists, command-line nits.

load common
bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_TMPDIR"
}

# --- start-up: libcurl only for --rdzv-backend etcd ----------------------

@test "the launcher is not linked with libcurl (it loads it for etcd alone)" {
	run readelf -d "$DISTRUN"
	[ "$status" -eq 0 ]
	[[ "$output" == *"libjansson"* ]]
	[[ "$output" != *"libcurl"* ]]
	# Nor does a plain start load it.
	run env LD_DEBUG=files "$DISTRUN" -n 1 true
	[ "$status" -eq 0 ]
	[[ "$output" != *"libcurl"* ]]
}

@test "--rdzv-backend etcd without libcurl says what is missing" {
	lib=$(ldconfig -p | awk '/libcurl.so.4 .*x86-64/ { print $NF; exit }')
	[ -n "$lib" ] || skip "no libcurl.so.4 here"
	unshare -m true 2>/dev/null || skip "cannot make a mount namespace"
	run unshare -m sh -c "mount --bind /dev/null '$(readlink -f "$lib")' && exec '$DISTRUN' --rdzv-backend etcd --rdzv-endpoint 127.0.0.1:1 --rdzv-id x --nnodes 2 -n 1 true"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--rdzv-backend etcd needs libcurl (libcurl.so.4"* ]]
}
