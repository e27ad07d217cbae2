#!/usr/bin/env bats
# The "distrun" backend of torch.distributed (runtime/torch/distrun_torch)
# with Debian's real torch: every collective and dtype against gloo's
# results at 1 to 4 ranks, DDP against gloo, the source document's Python
# examples with backend "distrun", bad input and a mismatch as Python
# exceptions, under distrun and under torchrun.  Each torch rank costs
# seconds to start: checks are batched into few jobs.

load common

export DISTRUN_TIMEOUT=120s
T=$SRCDIR/testdata/torch
PYEX=$SRCDIR/testdata/examples/py
EXPECTED=$SRCDIR/testdata/examples/expected

setup() {
	require_torch
	# A sanitizer build's libdistrun.so cannot load into Python (its
	# runtime must come first); the plain build runs these.
	case $B in *asan*|*tsan*) skip "libdistrun of a sanitizer build does not load into python3" ;; esac
	cd "$BATS_TEST_TMPDIR"
}

# job N OUT PROG ARGS...: PROG with Python on N ranks under distrun.
job() {
	local n=$1 out=$2; shift 2
	timeout 600 "$DISTRUN" --color never -n "$n" "$TORCH_PYTHON" "$@" >"$out" 2>&1 ||
		{ echo "distrun -n $n $* failed ($?):"; cat "$out"; return 1; }
}

free_port() {
	"$TORCH_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Lines the ranks printed (the [rank] labels kept), sorted.
rank_out() {
	grep '^\[[0-9]*\] ' "$1" | sort
}

@test "ranks import distrun_torch with no install step; it finds the build's libdistrun" {
	run "$DISTRUN" -n 1 "$TORCH_PYTHON" -c 'import distrun_torch as d; print(d.library_path, d.BACKEND)'
	[ "$status" -eq 0 ]
	[ "$output" = "[0] $(cd "$B/lib" && pwd)/libdistrun.so.0 distrun" ]
	# without it, a clear error naming what was tried and how to fix it
	run env DISTRUN_LIB=/nonexistent/lib "$DISTRUN" -n 1 "$TORCH_PYTHON" -c 'import distrun_torch'
	[ "$status" -ne 0 ]
	[[ "$output" == *"ImportError: distrun_torch: cannot load libdistrun; tried: /nonexistent/lib (absent)"*"DISTRUN_LIB"* ]]
}

@test "every collective, dtype and ReduceOp gives gloo's results at 1, 2, 3 and 4 ranks" {
	for n in 1 2 3 4; do
		job $n gloo.$n "$T/collectives.py" gloo
		job $n distrun.$n "$T/collectives.py" distrun
		# every rank ran the checks gloo cannot do, and finished
		[ "$(grep -c '^\[[0-9]*\] selfcheck ok$' distrun.$n)" -eq $n ]
		[ "$(grep -c '^\[[0-9]*\] done$' distrun.$n)" -eq $n ]
		diff <(rank_out gloo.$n) <(rank_out distrun.$n | grep -v 'selfcheck ok')
		[ "$(rank_out gloo.$n | wc -l)" -gt $((100 * n)) ]
	done
}

@test "DDP trains to gloo's parameters (3 ranks, several buckets in flight)" {
	job 3 gloo "$T/ddp.py" gloo 6
	job 3 distrun "$T/ddp.py" distrun 6
	[ "$(grep -c '^\[[0-9]\] params 676 ' distrun)" -eq 3 ]
	diff <(rank_out gloo) <(rank_out distrun)
	# every rank ends with rank 0's (broadcast) model trained alike
	[ "$(rank_out distrun | sed 's/^\[[0-9]\] //' | sort -u | wc -l)" -eq 1 ]
}

@test "the source document's four Python examples print with backend distrun what they print with gloo" {
	for ex in 01_barrier 02_barrier_all_reduce 03_async_barrier 04_cuda_barrier; do
		sed "s/backend='gloo'/backend='distrun'/" "$PYEX/$ex.py" >"$ex.py"
		grep -q "backend='distrun'" "$ex.py"
		sed -i '1i import distrun_torch' "$ex.py"
		job 4 out "$ex.py"
		for r in 0 1 2 3; do
			diff <(sed -n "s/^\[$r\] //p" out) "$EXPECTED/${ex%%_*}.rank$r.txt"
		done
	done
}

@test "bad input, a call after destroy and a mismatch raise Python exceptions with libdistrun's message" {
	job 3 out "$T/errors.py"
	for r in 0 1 2; do
		grep -qx "\[$r\] done" out
		for what in "int16 all_reduce" "meta device" sparse premul_sum "bool avg" \
			"all_gather sizes" "all_gather count" "all_to_all_single splits" \
			"root outside the group" "after destroy"; do
			grep -q "^\[$r\] $what: DistrunError distrun: " out || { echo "rank $r: $what"; cat out; false; }
		done
		grep -qx "\[$r\] after bad input: all_reduce \[3.0, 3.0\]" out
		grep -qx "\[$r\] second init: all_reduce \[3.0\]" out
		# the mismatch on every rank, naming both calls
		grep -q "^\[$r\] mismatch: DistrunError distrun: .*rank 0 called all_reduce(count=3, float32, sum) but rank 1 called broadcast(count=3, float32, root=0).*\[DR_EMISMATCH\]$" out
		grep -q "^\[$r\] after the mismatch: DistrunError .*\[DR_EABORTED\]$" out
	done
	run grep -c "MISSING\|NO ERROR" out
	[ "$output" -eq 0 ]
}

@test "under torchrun: the collectives match gloo's and DDP trains alike" {
	command -v torchrun >/dev/null || skip "torchrun is not installed"
	job 2 gloo "$T/collectives.py" gloo
	export PYTHONPATH=$B/share/distrun/python
	for prog in "collectives.py distrun" "ddp.py distrun 3" "ddp.py gloo 3"; do
		set -- $prog
		timeout 600 torchrun --nproc_per_node 2 --master_port "$(free_port)" \
			--redirects 1 --tee 1 \
			--log_dir "$BATS_TEST_TMPDIR/logs-$1-$2" "$T/$1" "${@:2}" \
			>"torchrun-$1-$2" 2>&1 || { cat "torchrun-$1-$2"; false; }
	done
	# torchrun labels lines "[default0]:"
	tr_out() { sed -n 's/^\[default\([0-9]\)\]:/[\1] /p' "$1" | grep -v '^\[[0-9]\] $' | sort; }
	[ "$(tr_out torchrun-collectives.py-distrun | grep -c 'selfcheck ok')" -eq 2 ]
	diff <(rank_out gloo) <(tr_out torchrun-collectives.py-distrun | grep -v 'selfcheck ok')
	diff <(tr_out torchrun-ddp.py-gloo) <(tr_out torchrun-ddp.py-distrun)
}

@test "destroy_process_group ends the backend's future threads before it returns (none left inside torch at exit)" {
	# A future completed by the backend's thread runs its callbacks (DDP's)
	# in C++; a thread still there when the interpreter exits is stopped at
	# its next GIL take, and the process died of std::terminate (SIGABRT)
	# about once in 100 runs of DDP under torchrun.
	cat >threads.py <<-'PY'
	import threading, time, torch, torch.distributed as dist, distrun_torch
	from torch.nn.parallel import DistributedDataParallel as DDP
	dist.init_process_group("distrun")
	r = dist.get_rank()
	ddp = DDP(torch.nn.Linear(4, 2), bucket_cap_mb=0.001)
	for _ in range(3):
	    ddp(torch.randn(3, 4)).sum().backward()
	t = torch.full((2,), float(r))
	w = dist.isend(t, 1) if r == 0 else dist.irecv(t, 0)
	w.get_future().wait()
	print("p2p", t.tolist())
	# the future's waiters are told before its callbacks run: this one
	# is still running on the backend's thread when wait() returns
	done = []
	def slow(fut):
	    time.sleep(1)
	    done.append(fut.value()[0].tolist())
	    return fut.value()
	if r == 1:
	    time.sleep(0.3)  # rank 0's callback is in place before the sum
	w = dist.all_reduce(torch.ones(3), async_op=True)
	f = w.get_future()
	f.then(slow)
	print("sum", f.wait()[0].tolist())
	ours = lambda: sorted(t.name for t in threading.enumerate()
	                      if t.name.startswith("distrun-"))
	print("before", "distrun-futures-world" in ours())
	dist.destroy_process_group()
	print("after", ours(), done)
	PY
	job 2 out threads.py
	grep -q '^\[1\] p2p \[0.0, 0.0\]$' out
	for r in 0 1; do
		grep -q "^\[$r\] sum \[2.0, 2.0, 2.0\]$" out
		grep -q "^\[$r\] before True$" out
	done
	# rank 0 called then() before the sum could complete: its callback
	# ran on our thread, and destroy waited for it
	grep -q '^\[0\] after \[\] \[\[2.0, 2.0, 2.0\]\]$' out
	grep -q '^\[1\] after \[\] ' out
}

@test "--trace names torch's calls on the distrun backend (call, seq, dtype, count)" {
	cat >prog.py <<-'PY'
	import torch, torch.distributed as dist, distrun_torch
	dist.init_process_group("distrun")
	t = torch.ones(5, dtype=torch.float64)
	dist.all_reduce(t, op=dist.ReduceOp.MAX)
	dist.broadcast(torch.zeros(3, dtype=torch.int32), src=1)
	dist.destroy_process_group()
	PY
	run "$DISTRUN" --trace trace.json -n 2 "$TORCH_PYTHON" prog.py
	[ "$status" -eq 0 ]
	run "$TORCH_PYTHON" -c '
import json
d = json.load(open("trace.json"))
ev = d["traceEvents"] if isinstance(d, dict) else d
for e in ev:
    a = e.get("args") or {}
    if a.get("call") and a.get("status") == "DR_OK":
        print(e.get("pid"), a["seq"], a["call"])' 
	[ "$status" -eq 0 ]
	[[ "$output" == *"1 all_reduce(float64 x 5, max)"* ]]
	[[ "$output" == *"2 broadcast(int32 x 3, root 1)"* ]]
}

@test "a hang on the distrun backend: the stall report names the call, its seq, the odd rank and the user's lines" {
	cat >hang.py <<-'PY'
	import time, torch, torch.distributed as dist, distrun_torch
	dist.init_process_group("distrun")
	dist.all_reduce(torch.ones(4))
	if dist.get_rank() == 1:
	    time.sleep(600)
	dist.barrier()
	PY
	run timeout 300 "$DISTRUN" --stall-timeout 4s -n 3 "$TORCH_PYTHON" hang.py
	echo "$output"
	[ "$status" -eq 124 ]
	[[ "$output" == *"world seq 2 barrier: ranks 0,2 waiting"* ]]
	[[ "$output" == *"rank 1 never entered world seq 2 barrier"* ]]
	[[ "$output" == *"ranks 0,2: dist.barrier() hang.py:6"* ]]
	[[ "$output" == *"rank 1: time.sleep(600) hang.py:5"* ]]
}
