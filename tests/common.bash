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
