# Shared set-up for the bats suites: where the build is, and helpers.
B=${DISTRUN_BUILD:-$BATS_TEST_DIRNAME/../build}
DISTRUN=$B/bin/distrun
TESTDATA=$B/testdata
EXAMPLES=$B/examples
CTESTS=$B/tests
SRCDIR=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}

# Skips the test unless /usr/bin/python3 can import torch.
require_torch() {
	"$TORCH_PYTHON" -c 'import torch.distributed' 2>/dev/null ||
		skip "python3-torch is not installed"
}

# wait_until SECONDS CMD...: polls CMD every 0.1 s until it succeeds.
wait_until() {
	local deadline=$(( $(date +%s) + $1 )); shift
	until "$@"; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}

# add_user NAME USERADD-ARGS...: a throwaway user for the test, or a skip
# that gives useradd's first line.  Tried again for up to 10 s: one
# useradd in a local CI run failed (the cause not known; another suite's
# useradd or userdel under make -j2 is the suspect), and a skip hides the
# test.
add_user() {
	local name=$1 err i
	shift
	for i in $(seq 100); do
		err=$(useradd "$@" "$name" 2>&1) && return 0
		! id "$name" >/dev/null 2>&1 || break
		sleep 0.1
	done
	skip "useradd $name failed: ${err%%$'\n'*}"
}
