#!/usr/bin/env bats
# CUDA in libdistrun, as a user sees it on a machine without a GPU (CI):
# clear errors instead of crashes, host collectives unaffected, and the GPU
# scripts skipping cleanly; and the staging of device buffers run against a
# fake driver.  What needs a real GPU (kernels, streams that really run
# concurrently, the copy engines) is scripts/test-gpu's (`make test-gpu`).

load common

# testdata/fake_libcuda.c, built by make: a strict stand-in for the driver
# (contexts, device memory the host cannot touch, copies that happen only
# when waited for), which lets the staging code run here.  Strict: the
# first misuse it sees aborts the rank with "fake_libcuda: ...".
setup_file() {
	FAKE_CUDA=$B/fake/libcuda.so
	export FAKE_CUDA FAKE_CUDA_STRICT=1
	[ -f "$FAKE_CUDA" ] || { echo "$FAKE_CUDA missing: run make" >&2; return 1; }
}

# True where libdistrun can use CUDA (then these tests skip: they are about
# its absence).
cuda_here() {
	"$CTESTS/cuda_colls" --probe >/dev/null 2>&1
}

# A fake nvidia-smi that lists one GPU (in compute mode Default), first on
# PATH.
fake_nvidia_smi() {
	mkdir -p "$BATS_TEST_TMPDIR/bin"
	cat >"$BATS_TEST_TMPDIR/bin/nvidia-smi" <<-'EOF'
	#!/bin/sh
	case "$*" in
	*compute_mode*) echo Default ;;
	*--query-gpu*) echo "Fake GPU, 999.0, 1024 MiB, 9.0" ;;
	*) echo "GPU 0: Fake GPU (UUID: GPU-0)" ;;
	esac
	EOF
	chmod +x "$BATS_TEST_TMPDIR/bin/nvidia-smi"
}

@test "without CUDA the probe says why CUDA is not available" {
	cuda_here && skip "CUDA is available here"
	run "$CTESTS/cuda_colls" --probe
	[ "$status" -eq 1 ]
	[[ "$output" == "CUDA not available: "?* ]]
}

@test "DISTRUN_CUDA=0 turns CUDA off and the error names the variable" {
	run env DISTRUN_CUDA=0 "$CTESTS/cuda_colls" --probe
	[ "$status" -eq 1 ]
	[ "$output" = "CUDA not available: disabled by DISTRUN_CUDA=0" ]
}

@test "a driver library that cannot be loaded is named in the error" {
	run env DISTRUN_CUDA_LIB=/nonexistent/libcuda.so.1 "$CTESTS/cuda_colls" --probe
	[ "$status" -eq 1 ]
	[[ "$output" == "CUDA not available: cannot load the CUDA driver: /nonexistent/libcuda.so.1: "* ]]
}

@test "without CUDA, device_ids and device memory fail cleanly on every rank and host collectives still work" {
	cuda_here && skip "CUDA is available here"
	run "$DISTRUN" --timeout 60s -n 2 "$CTESTS/cuda_colls"
	[ "$status" -eq 0 ]
	[[ "$output" == *"[0] skip - rank 0: CUDA not available: "*"the no-CUDA paths behave"* ]]
	[[ "$output" == *"[1] skip - rank 1: CUDA not available: "*"the no-CUDA paths behave"* ]]
	[[ "$output" != *"not ok"* ]]
}

@test "scripts/test-gpu skips cleanly where there is no GPU" {
	cuda_here && skip "CUDA is available here: test-gpu runs for real"
	run env DISTRUN_BUILD="$B" "$SRCDIR/scripts/test-gpu"
	[ "$status" -eq 0 ]
	[[ "$output" == *"skip - no GPU here: CUDA not available: "* ]]
	[ "${lines[${#lines[@]} - 1]}" = "0 passed, 0 failed (GPU tests skipped)" ]
}

@test "scripts/test-gpu fails when nvidia-smi sees a GPU that libdistrun cannot use" {
	cuda_here && skip "CUDA is available here"
	fake_nvidia_smi
	run env PATH="$BATS_TEST_TMPDIR/bin:$PATH" DISTRUN_BUILD="$B" \
		"$SRCDIR/scripts/test-gpu"
	[ "$status" -eq 1 ]
	[[ "$output" == *"not ok - nvidia-smi lists 1 GPU(s) but libdistrun cannot use CUDA"* ]]
	[ "${lines[${#lines[@]} - 1]}" = "0 passed, 1 failed" ]
}

@test "scripts/bench-gpu skips cleanly where there is no GPU" {
	cuda_here && skip "CUDA is available here"
	run env DISTRUN_BUILD="$B" "$SRCDIR/scripts/bench-gpu"
	[ "$status" -eq 0 ]
	[[ "$output" == "skip - no GPU here: CUDA not available: "* ]]
}

@test "scripts/device-check runs each step under a limit, logs to OUT and sums up" {
	cuda_here && skip "CUDA is available here"
	out=$BATS_TEST_TMPDIR/out
	run env OUT="$out" DISTRUN_BUILD="$B" DEVICE_CHECK_PYTHONS=true \
		DEVICE_CHECK_STEPS="test-gpu bench-gpu no-such-step" \
		"$SRCDIR/scripts/device-check"
	[ "$status" -eq 0 ]
	[[ "$output" == *"== environment"* ]]
	[[ "$output" == *"libdistrun: CUDA not available: "* ]]
	grep -q "skip - no GPU here" "$out/test-gpu.log"
	grep -q "skip - no GPU here" "$out/bench-gpu.log"
	grep -qx "test-gpu: passed in [0-9]*s; 0 passed, 0 failed (GPU tests skipped)" "$out/summary.log"
	grep -q "^bench-gpu: passed" "$out/summary.log"
	grep -qx "no-such-step: not present, skipped" "$out/summary.log"
}

@test "scripts/device-check reports a failing step" {
	cuda_here && skip "CUDA is available here"
	fake_nvidia_smi
	out=$BATS_TEST_TMPDIR/out
	run env PATH="$BATS_TEST_TMPDIR/bin:$PATH" OUT="$out" DISTRUN_BUILD="$B" \
		DEVICE_CHECK_PYTHONS=true DEVICE_CHECK_STEPS="test-gpu" "$SRCDIR/scripts/device-check"
	[ "$status" -eq 0 ]
	grep -q "^test-gpu: FAILED (status 1) in [0-9]*s; 0 passed, 1 failed" "$out/summary.log"
}

@test "scripts/device-check prints the GPUs' compute mode and keeps to its time budget" {
	cuda_here && skip "CUDA is available here"
	fake_nvidia_smi
	out=$BATS_TEST_TMPDIR/out
	run env PATH="$BATS_TEST_TMPDIR/bin:$PATH" OUT="$out" DISTRUN_BUILD="$B" \
		DEVICE_CHECK_PYTHONS=true DEVICE_CHECK_SECONDS=12 \
		DEVICE_CHECK_STEPS="test-gpu bench-gpu" "$SRCDIR/scripts/device-check"
	[ "$status" -eq 0 ]
	grep -qx "compute mode: Default" "$out/environment.log"
	grep -q "^test-gpu: skipped, [0-9]*s left of 12s" "$out/summary.log"
	grep -q "^bench-gpu: skipped, " "$out/summary.log"
}

@test "on a strict fake driver, with copies that take time, every collective on device buffers matches host buffers, n=2" {
	run env DISTRUN_CUDA_LIB="$FAKE_CUDA" FAKE_CUDA_DELAY_MS=3 \
		"$DISTRUN" --timeout 240s -n 2 "$CTESTS/cuda_colls"
	[ "$status" -eq 0 ]
	[[ "$output" == *"[0] rank 0: 56 passed, 0 failed"* ]]
	[[ "$output" == *"[1] rank 1: 56 passed, 0 failed"* ]]
}

@test "on a strict fake driver, cut in many chunks, n=3 on two devices, they still match" {
	run env DISTRUN_CUDA_LIB="$FAKE_CUDA" DISTRUN_CUDA_CHUNK=65536 \
		FAKE_CUDA_DEVICES=2 \
		"$DISTRUN" --timeout 240s -n 3 "$CTESTS/cuda_colls"
	[ "$status" -eq 0 ]
	for r in 0 1 2; do
		[[ "$output" == *"[$r] rank $r: 56 passed, 0 failed"* ]]
	done
}

@test "example 4 on the fake driver puts the tensor on cuda and prints it as torch does" {
	run env DISTRUN_CUDA_LIB="$FAKE_CUDA" "$DISTRUN" --raw --timeout 60s -n 2 \
		"$EXAMPLES/04_cuda_barrier"
	[ "$status" -eq 0 ]
	[[ "$output" == *"Process 0 on cuda:0: tensor - tensor([0, 1, 2], device='cuda:0')"* ]]
	[[ "$output" == *"Process 1 on cuda:0: tensor - tensor([1, 2, 3], device='cuda:0')"* ]]
	[[ "$output" == *"Process 1: all devices synchronized!"* ]]
}

@test "device memory from a program that loaded the driver itself is found without any dr_cuda_* call" {
	run env DISTRUN_CUDA_LIB="$FAKE_CUDA" "$DISTRUN" --timeout 60s -n 3 "$CTESTS/cuda_detect"
	[ "$status" -eq 0 ]
	for r in 0 1 2; do
		[[ "$output" == *"[$r] ok - rank $r: device memory found and reduced"* ]]
	done
}

# review_case CASE N: build/tests/cuda_review CASE at n = N on the fake, every
# rank "ok".
review_case() {
	run env DISTRUN_CUDA_LIB="$FAKE_CUDA" "$DISTRUN" --timeout 60s -n "$2" \
		"$CTESTS/cuda_review" "$1"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	for ((r = 0; r < $2; r++)); do
		grep -qxF "[$r] ok - rank $r: $1" <<<"$output" || { echo "$output"; return 1; }
	done
}

@test "the driver loaded as libcuda.so (not .so.1) by the program itself is found" {
	run env -u DISTRUN_CUDA_LIB "$DISTRUN" --timeout 60s -n 2 \
		"$CTESTS/cuda_detect" "$B/fake/libcuda.so"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	for r in 0 1; do
		[[ "$output" == *"[$r] ok - rank $r: device memory found and reduced"* ]]
	done
	run env -u DISTRUN_CUDA_LIB "$DISTRUN" --timeout 60s -n 2 \
		"$CTESTS/cuda_detect" "$B/fake/libcuda.so.1"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

@test "managed memory, which the driver may report as host memory, is staged after the user's stream" {
	run env DISTRUN_CUDA_LIB="$FAKE_CUDA" "$DISTRUN" --timeout 60s -n 2 \
		"$CTESTS/cuda_detect" --managed
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	for r in 0 1; do
		[[ "$output" == *"[$r] ok - rank $r: managed memory found and reduced"* ]]
	done
}

@test "an asynchronous call follows the stream selected when it was made, not when it runs" {
	review_case capture 2
}

@test "cudaStreamPerThread: blocking calls and asynchronous barriers follow the caller's stream, asynchronous collectives are refused" {
	review_case per-thread 2
}

@test "dr_cuda_memcpy has finished when it returns, also device to device and from pageable memory" {
	review_case memcpy 2
}

@test "a rank on cuda:1 never retains cuda:0's context, even where the pointer query needs a context" {
	FAKE_CUDA_DEVICES=2 FAKE_CUDA_PTR_NEEDS_CTX=1 review_case no-retain 3
}

@test "after cudaDeviceReset, collectives on new device memory work" {
	review_case reset 2
}

@test "dr_cuda_barrier_device waits for work on every stream of the device" {
	review_case barrier-device 2
}

@test "cuda_review names its cases and skips where the driver is not the fake" {
	run "$CTESTS/cuda_review" no-such-case
	[ "$status" -eq 2 ]
	[[ "$output" == *"usage: cuda_review CASE"* ]]
	run env -u DISTRUN_CUDA_LIB "$CTESTS/cuda_review" memcpy
	[ "$status" -eq 0 ]
	[ "$output" = "skip - the driver is not the fake (DISTRUN_CUDA_LIB)" ]
}

@test "dr_barrier with device_ids where CUDA is off says why, and the group goes on" {
	run env DISTRUN_CUDA=0 "$DISTRUN" --timeout 60s -n 2 "$CTESTS/coll_more" nocuda
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	for r in 0 1; do
		grep -q "^\[$r\] rank $r: DR_ENOCUDA: dr_barrier: device_ids given but CUDA not available: disabled by DISTRUN_CUDA=0$" <<<"$output" || {
			echo "$output"; return 1; }
		grep -q "^\[$r\] rank $r: ok, " <<<"$output" || { echo "$output"; return 1; }
	done
}

@test "on a fake driver, p2p on device memory and a root mixing host and device buffers are refused alone, at once" {
	run env DISTRUN_CUDA_LIB="$FAKE_CUDA" "$DISTRUN" --timeout 60s -n 3 \
		"$CTESTS/coll_more" device
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == *"gather: DR_EINVAL: gather: recvbuf is on the host but the other buffer is on cuda:0"* ]]
	[[ "$output" == *"scatter: DR_EINVAL: scatter: sendbuf is on the host but the other buffer is on cuda:0"* ]]
	[ "$(grep -c ': ok, [0-9]* checks' <<<"$output")" -eq 3 ] || { echo "$output"; return 1; }
}
