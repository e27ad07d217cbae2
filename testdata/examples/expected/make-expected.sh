#!/bin/bash
# make-expected.sh - runs each Python original (testdata/examples/py/) under
# real PyTorch (/usr/bin/python3, gloo) with 4 ranks, without distrun, and
# stores what each rank printed as NN.rankR.txt beside this script.  These
# files are what tests/examples.bats compares the C examples with where
# torch is not installed.
#   testdata/examples/expected/make-expected.sh
set -e
cd "$(dirname "$0")"
n=4
for py in ../py/0*.py; do
	num=$(basename "$py" | cut -c1-2)
	port=$(( 29600 + RANDOM % 2000 ))
	pids=()
	for ((r = 0; r < n; r++)); do
		MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$n RANK=$r \
		LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n OMP_NUM_THREADS=1 \
			timeout 120 /usr/bin/python3 "$py" >"$num.rank$r.txt" 2>/dev/null &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done
done
