#!/usr/bin/env bats
# libdistrun programs started by other launchers: torchrun (its agent's
# TCPStore), Open MPI's mpirun, MPICH's mpiexec, Slurm's srun (a real
# single-node cluster, started here by scripts/slurm-local unless .ci/run
# already did), and the file:// init method.

load common

# Every wait inside the ranks gives up long before bats would.
export DISTRUN_TIMEOUT=120s
# mpirun refuses root without these (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EXPECTED=$SRCDIR/testdata/examples/expected

setup_file() {
	# .ci/run starts Slurm itself and says so with DISTRUN_REQUIRE_SLURM=1;
	# otherwise start our own, and skip its tests only if it cannot start.
	export SLURM_SKIP=$BATS_FILE_TMPDIR/slurm.skip
	if [ -n "${SLURM_CONF:-}" ] && sinfo -h >/dev/null 2>&1; then
		return 0
	fi
	# Not under bats' private temporary directory: munged, which runs as
	# the munge user, must reach its socket and files.
	export SLURM_DIR
	SLURM_DIR=$(mktemp -d /tmp/distrun-slurm.XXXXXX)
	if "$SRCDIR/scripts/slurm-local" start "$SLURM_DIR" \
		>"$BATS_FILE_TMPDIR/slurm.out" 2>&1; then
		export SLURM_CONF=$SLURM_DIR/slurm.conf
	else
		{ echo "the Slurm daemons could not start:"
		  tail -n 5 "$BATS_FILE_TMPDIR/slurm.out"; } >"$SLURM_SKIP"
	fi
}

teardown_file() {
	[ -z "${SLURM_DIR:-}" ] || {
		"$SRCDIR/scripts/slurm-local" stop "$SLURM_DIR"
		rm -rf "$SLURM_DIR"
	}
}

setup() {
	# A private rendezvous directory per test, so leftovers are visible.
	export XDG_RUNTIME_DIR=$BATS_TEST_TMPDIR/run
	mkdir -m 700 "$XDG_RUNTIME_DIR"
}

require_slurm() {
	[ -e "$SLURM_SKIP" ] || return 0
	if [ -n "${DISTRUN_REQUIRE_SLURM:-}" ]; then
		cat "$SLURM_SKIP"
		return 1
	fi
	skip "$(tr '\n' ' ' <"$SLURM_SKIP")"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# torchrun ARG...: Debian's torchrun (torch 1.13) on 4 ranks, lines tagged
# [defaultR]: (Python 3.11 needs --redirects with --tee).
torchrun() {
	require_torch
	"$TORCH_PYTHON" -m torch.distributed.run --nproc_per_node 4 \
		--master_port "$(free_port)" --redirects 1 --tee 1 \
		--log_dir "$BATS_TEST_TMPDIR/torchrun" --no_python "$@"
}

# per_rank_is_example2 OUT [TAG]: rank R's lines of OUT are torch's
# recorded output of example 2 for rank R.  With TAG (torchrun's
# "[defaultR]:", @ for R) a rank's lines are those tagged, tag removed;
# without, those that start "Process R:" as the example prints them.
per_rank_is_example2() {
	local out=$1 tag=${2:-} r
	for r in 0 1 2 3; do
		if [ -n "$tag" ]; then
			grep -a "^${tag//@/$r}" "$out" | sed "s/^${tag//@/$r}//"
		else
			grep -a "^Process $r: " "$out"
		fi >"$out.$r"
		diff "$out.$r" "$EXPECTED/02.rank$r.txt" || { cat "$out"; return 1; }
	done
}

# all_ok OUT N LAUNCHER: "rank R of N: ok (launcher LAUNCHER)" from every rank.
all_ok() {
	local r
	for r in $(seq 0 $(($2 - 1))); do
		grep -q "rank $r of $2: ok (launcher $3)" "$1" ||
			{ echo "rank $r not ok:"; cat "$1"; return 1; }
	done
}

# no_leftover: the private rendezvous directory holds no published file.
no_leftover() {
	! ls "$XDG_RUNTIME_DIR/distrun" | grep . || {
		echo "left in $XDG_RUNTIME_DIR/distrun:"; ls -la "$XDG_RUNTIME_DIR/distrun"
		return 1; }
}

# ------------------------------------------------------------- torchrun

@test "torchrun: example 2 prints torch's output on every rank (agent's TCPStore, torch 1.13 dialect)" {
	torchrun "$EXAMPLES/02_barrier_all_reduce" >"$BATS_TEST_TMPDIR/out" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/out"; return 1; }
	per_rank_is_example2 "$BATS_TEST_TMPDIR/out" '\[default@\]:'
}

@test "torchrun: the collectives check passes on every rank" {
	torchrun "$CTESTS/coll_check" all >"$BATS_TEST_TMPDIR/out" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/out"; return 1; }
	for r in 0 1 2 3; do
		grep -q "^\[default$r\]:rank $r: ok" "$BATS_TEST_TMPDIR/out" ||
			{ cat "$BATS_TEST_TMPDIR/out"; return 1; }
	done
}

@test "torchrun: a program that destroys and inits again, its ranks out of step, joins anew each time (the agent's store keeps the old keys)" {
	torchrun "$CTESTS/reinit" 4 300 >"$BATS_TEST_TMPDIR/out" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/out"; return 1; }
	for r in 0 1 2 3; do
		grep -q "^\[default$r\]:rank $r: reinit ok (4 rounds)" "$BATS_TEST_TMPDIR/out" ||
			{ cat "$BATS_TEST_TMPDIR/out"; return 1; }
	done
}

@test "torchrun --standalone (no agent store: rank 0 serves ours at MASTER_PORT)" {
	require_torch
	"$TORCH_PYTHON" -m torch.distributed.run --standalone --nproc_per_node 3 \
		--redirects 1 --tee 1 --log_dir "$BATS_TEST_TMPDIR/torchrun" \
		--no_python "$CTESTS/rdzv_check" >"$BATS_TEST_TMPDIR/out" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/out"; return 1; }
	for r in 0 1 2; do
		grep -q "^\[default$r\]:rank $r of 3: ok (launcher torchrun or distrun)" \
			"$BATS_TEST_TMPDIR/out" || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	done
}

@test "torch 1.13's TCPStore: our keys go under our prefix, torch's own are untouched" {
	require_torch
	port=$(free_port)
	"$TORCH_PYTHON" -c 'import datetime, os, sys, time
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", int(sys.argv[1]), None, True,
             datetime.timedelta(seconds=120), wait_for_workers=False)
s.set("worker/attempt_0/mine", "torch")
open(sys.argv[2] + ".ready", "w").close()
s.wait(["distrun/t/attempt_0/addrs"])
print("torch key:", s.get("worker/attempt_0/mine").decode())
print("rank 1 joined:", s.get("distrun/t/attempt_0/rank/1").decode())
for _ in range(1200):
    if os.path.exists(sys.argv[2]):
        break
    time.sleep(0.1)' "$port" "$BATS_TEST_TMPDIR/done" >"$BATS_TEST_TMPDIR/py" 2>&1 &
	py=$!
	wait_until 60 test -e "$BATS_TEST_TMPDIR/done.ready"
	pids=()
	for r in 0 1; do
		MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 \
			TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=t \
			TORCHELASTIC_RESTART_COUNT=0 timeout 120 "$CTESTS/rdzv_check" \
			>"$BATS_TEST_TMPDIR/rank$r" 2>&1 &
		pids+=($!)
	done
	wait "${pids[0]}" && wait "${pids[1]}" || { touch "$BATS_TEST_TMPDIR/done"; cat "$BATS_TEST_TMPDIR"/rank*; return 1; }
	touch "$BATS_TEST_TMPDIR/done"
	wait "$py" || { cat "$BATS_TEST_TMPDIR/py"; return 1; }
	grep -q "rank 0 of 2: ok" "$BATS_TEST_TMPDIR/rank0"
	grep -q "rank 1 of 2: ok" "$BATS_TEST_TMPDIR/rank1"
	grep -qx "torch key: torch" "$BATS_TEST_TMPDIR/py" || { cat "$BATS_TEST_TMPDIR/py"; false; }
	grep -qx "rank 1 joined: 1" "$BATS_TEST_TMPDIR/py" || { cat "$BATS_TEST_TMPDIR/py"; false; }
}

@test "torchrun: a program that is not a TCPStore at MASTER_PORT is named, not hung on" {
	# A listener that accepts and says nothing: the probe times out.
	port=$(free_port)
	python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8); c=[]
while True: c.append(s.accept()[0])' "$port" &
	pid=$!
	wait_until 10 python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])))' "$port"
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=2 \
		TORCHELASTIC_USE_AGENT_STORE=True DISTRUN_TIMEOUT=2s \
		run timeout 60 "$CTESTS/rdzv_check"
	kill "$pid"
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_ETIMEDOUT"*"127.0.0.1:$port"*"TORCHELASTIC_USE_AGENT_STORE=True"*"did not answer a TCPStore request"* ]] ||
		{ echo "$output"; false; }
}

# ------------------------------------------------------------- Open MPI

@test "mpirun: example 2 prints torch's output on every rank, no MASTER_* needed" {
	command -v mpirun >/dev/null || skip "Open MPI is not installed"
	timeout 300 mpirun --oversubscribe -n 4 "$EXAMPLES/02_barrier_all_reduce" \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	per_rank_is_example2 "$BATS_TEST_TMPDIR/out"
	no_leftover
}

@test "mpirun: the collectives check passes; the launcher is named" {
	command -v mpirun >/dev/null || skip "Open MPI is not installed"
	timeout 300 mpirun --oversubscribe -n 4 "$CTESTS/coll_check" all \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	for r in 0 1 2 3; do
		grep -q "^rank $r: ok" "$BATS_TEST_TMPDIR/out" || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	done
	timeout 300 mpirun --oversubscribe -n 3 "$CTESTS/rdzv_check" \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	all_ok "$BATS_TEST_TMPDIR/out" 3 "Open MPI"
	no_leftover
}

@test "mpirun with a fresh home: the ranks make one per-user secret and agree on it" {
	command -v mpirun >/dev/null || skip "Open MPI is not installed"
	home=$BATS_TEST_TMPDIR/home
	mkdir "$home"
	HOME=$home XDG_CONFIG_HOME= DISTRUN_SECRET= DISTRUN_SECRET_FILE= \
		timeout 300 mpirun --oversubscribe -n 4 "$CTESTS/rdzv_check" \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	all_ok "$BATS_TEST_TMPDIR/out" 4 "Open MPI"
	[ "$(stat -c %a "$home/.config/distrun/secret")" = 600 ]
}

@test "mpirun with file:// meets through the named file, then removes it" {
	command -v mpirun >/dev/null || skip "Open MPI is not installed"
	f=$BATS_TEST_TMPDIR/rdzv
	timeout 300 mpirun --oversubscribe -n 4 "$CTESTS/rdzv_check" "file://$f" \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	all_ok "$BATS_TEST_TMPDIR/out" 4 "Open MPI"
	[ ! -e "$f" ]
}

# ---------------------------------------------------------------- MPICH

@test "mpiexec.mpich: example 2 prints torch's output on every rank" {
	command -v mpiexec.mpich >/dev/null || skip "MPICH is not installed"
	timeout 300 mpiexec.mpich -n 4 "$EXAMPLES/02_barrier_all_reduce" \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	per_rank_is_example2 "$BATS_TEST_TMPDIR/out"
	no_leftover
}

@test "mpiexec.mpich: the collectives check passes, ranks behind a shell too" {
	command -v mpiexec.mpich >/dev/null || skip "MPICH is not installed"
	timeout 300 mpiexec.mpich -n 4 "$CTESTS/coll_check" all \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	for r in 0 1 2 3; do
		grep -q "^rank $r: ok" "$BATS_TEST_TMPDIR/out" || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	done
	# Not exec'd: each rank's parent is its own shell, not hydra's proxy.
	timeout 300 mpiexec.mpich -n 3 sh -c "\"$CTESTS/rdzv_check\"; exit \$?" \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	all_ok "$BATS_TEST_TMPDIR/out" 3 "MPICH (hydra)"
	no_leftover
}

# ---------------------------------------------------------------- Slurm

@test "srun -n 4: example 2 prints torch's output on every rank" {
	require_slurm
	timeout 300 srun -n 4 "$EXAMPLES/02_barrier_all_reduce" \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	per_rank_is_example2 "$BATS_TEST_TMPDIR/out"
	no_leftover
}

@test "srun -n 4: the collectives check passes; the launcher is named" {
	require_slurm
	timeout 300 srun -n 4 "$CTESTS/coll_check" all \
		>"$BATS_TEST_TMPDIR/out" 2>&1 || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	for r in 0 1 2 3; do
		grep -q "^rank $r: ok" "$BATS_TEST_TMPDIR/out" || { cat "$BATS_TEST_TMPDIR/out"; return 1; }
	done
	timeout 300 srun -n 4 "$CTESTS/rdzv_check" >"$BATS_TEST_TMPDIR/out" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/out"; return 1; }
	all_ok "$BATS_TEST_TMPDIR/out" 4 "Slurm"
	no_leftover
}

# ------------------------------------------------- without any launcher

@test "file:// under distrun: every rank meets through the file, which is then gone" {
	f=$BATS_TEST_TMPDIR/rdzv
	run "$DISTRUN" --timeout 120s -n 4 "$CTESTS/rdzv_check" "file://$f"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	for r in 0 1 2 3; do
		[[ "$output" == *"rank $r of 4: ok (launcher torchrun or distrun)"* ]] ||
			{ echo "$output"; return 1; }
	done
	[ ! -e "$f" ]
}

@test "file:// reused after a crash: the dead job's address is not taken" {
	f=$BATS_TEST_TMPDIR/rdzv
	sh -c 'echo $$ >"$1"' sh "$BATS_TEST_TMPDIR/pid"
	echo "127.0.0.1:1 $(cat "$BATS_TEST_TMPDIR/pid") $(hostname)" >"$f"
	run "$DISTRUN" --timeout 120s -n 3 "$CTESTS/rdzv_check" "file://$f"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(grep -c ': ok (launcher' <<<"$output")" -eq 3 ] || { echo "$output"; false; }
	[ ! -e "$f" ]
}

@test "Open MPI's variables on more than one host: the error names what was found and what is missing" {
	OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=8 OMPI_COMM_WORLD_LOCAL_SIZE=4 \
		MASTER_ADDR= MASTER_PORT= RANK= WORLD_SIZE= \
		run "$CTESTS/rdzv_check"
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_EENV"*"Open MPI"*"OMPI_COMM_WORLD_RANK=1"*"OMPI_COMM_WORLD_SIZE=8"*"more than one host"*"MASTER_ADDR and MASTER_PORT"* ]] ||
		{ echo "$output"; false; }
}

@test "PMIx without a size: the error says WORLD_SIZE is missing and names PMIX_RANK" {
	PMIX_RANK=0 PMIX_NAMESPACE=ns MASTER_ADDR= RANK= WORLD_SIZE= \
		run "$CTESTS/rdzv_check"
	[ "$status" -eq 1 ]
	[[ "$output" == *"DR_EENV"*"WORLD_SIZE is not set"*"PMIX_RANK=0"*"[launcher: PMIx]"* ]] ||
		{ echo "$output"; false; }
}

@test "a rendezvous directory others can enter is refused, with its mode" {
	mkdir -m 755 "$XDG_RUNTIME_DIR/distrun"
	SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_NODES=1 SLURM_JOB_ID=7 \
		SLURM_STEP_ID=0 MASTER_ADDR= RANK= WORLD_SIZE= \
		run "$CTESTS/rdzv_check"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$XDG_RUNTIME_DIR/distrun has mode 0755"*"[launcher: Slurm]"* ]] ||
		{ echo "$output"; false; }
}

@test "a file left by a killed rank 0 is removed by the next job" {
	sh -c 'echo $$ >"$1"' sh "$BATS_TEST_TMPDIR/pid"
	mkdir -m 700 "$XDG_RUNTIME_DIR/distrun"
	echo "127.0.0.1:1 $(cat "$BATS_TEST_TMPDIR/pid")" \
		>"$XDG_RUNTIME_DIR/distrun/job-0123456789abcdef.addr"
	SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_NODES=1 SLURM_JOB_ID=8 \
		SLURM_STEP_ID=0 MASTER_ADDR= RANK= WORLD_SIZE= \
		run "$CTESTS/rdzv_check"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "rank 0 of 1: ok (launcher Slurm)" ]] || { echo "$output"; false; }
	no_leftover
}
