#!/usr/bin/env bats
# The runtime and the launcher are built in layers (runtime/README.md):
# scripts/layers finds every call and include between files that goes up a
# layer, and every cycle.  The tree as built has none; a doctored object
# or header that reaches up is caught, so the check itself can fail.

load common

setup() {
	T=$(mktemp -d)
}

teardown() {
	rm -rf "$T"
}

# splice OBJ: a copy of the build's objects under $T/obj, where runtime's
# OBJ.o also holds the C code read from stdin.
splice() {
	mkdir -p "$T/obj"
	cp -r "$B/obj/runtime" "$B/obj/cmd" "$T/obj/"
	cat > "$T/splice.c"
	cc -c -o "$T/splice.o" "$T/splice.c"
	ld -r -o "$T/obj/runtime/$1.o" "$B/obj/runtime/$1.o" "$T/splice.o"
}

@test "layers: no file of runtime/ or cmd/ calls or includes up, no cycle" {
	run "$BATS_TEST_DIRNAME/../scripts/layers" "$B"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[[ "$output" == *"runtime: "*" files in 7 layers"* ]]
	[[ "$output" == *"cmd: "*" files in 6 layers"* ]]
}

@test "layers: a base file that calls into the groups is reported" {
	# error.o now also calls dri_submit (group.c): base -> groups.
	splice error <<'C'
struct dri_op;
int dri_submit(const struct dri_op *op, void **work);
int dri_layers_probe(void) { return dri_submit(0, 0); }
C
	run "$BATS_TEST_DIRNAME/../scripts/layers" "$T"
	[ "$status" -eq 1 ]
	[[ "$output" == *"error (base) calls up into group (groups): dri_submit"* ]]
}

@test "layers: a room of the transport that calls a higher room is reported" {
	# match.o (matching) now also takes the loop's lock (transport.c): the
	# rooms below the loop return what they find instead (links.h).
	splice match <<'C'
void dri_loop_lock(void);
void dri_layers_probe(void) { dri_loop_lock(); }
C
	run "$BATS_TEST_DIRNAME/../scripts/layers" "$T"
	[ "$status" -eq 1 ]
	[[ "$output" == *"match calls up into transport, a higher room of the transport layer: dri_loop_lock"* ]]
}

@test "layers: a cycle inside one layer is reported" {
	# clock.o calls timeout.c, which calls clock.c already.
	splice clock <<'C'
long dri_timeout_ms(void);
long dri_layers_probe(void) { return dri_timeout_ms(); }
C
	run "$BATS_TEST_DIRNAME/../scripts/layers" "$T"
	[ "$status" -eq 1 ]
	[[ "$output" == *"runtime: cycle of 2 files: clock timeout"* ]]
}

@test "layers: a header that includes one of a higher layer is reported" {
	cp -r "$BATS_TEST_DIRNAME/../runtime" "$BATS_TEST_DIRNAME/../cmd" "$T/"
	sed -i 's|#include "distrun.h"|#include "distrun.h"\n#include "group.h"|' \
		"$T/runtime/error.h"
	LAYERS_SRC=$T run "$BATS_TEST_DIRNAME/../scripts/layers" "$B"
	[ "$status" -eq 1 ]
	[[ "$output" == *"error.h:"*" (base) includes group.h (groups)"* ]]
}

@test "layers: a new runtime file no layer names is reported" {
	cp -r "$BATS_TEST_DIRNAME/../runtime" "$BATS_TEST_DIRNAME/../cmd" "$T/"
	mkdir -p "$T/obj"
	cp -r "$B/obj/runtime" "$B/obj/cmd" "$T/obj/"
	printf 'int dri_layers_new(void) { return 1; }\n' > "$T/runtime/newpart.c"
	cc -c -o "$T/obj/runtime/newpart.o" "$T/runtime/newpart.c"
	LAYERS_SRC=$T run "$BATS_TEST_DIRNAME/../scripts/layers" "$T"
	[ "$status" -eq 1 ]
	[[ "$output" == *"newpart.c is in no layer"* ]]
}

# runtime_includes DIR: "file:header" for each runtime header (other than
# distrun.h and contract.h) that a file under DIR includes.
runtime_includes() {
	local f h
	for f in $(find "$1" -name '*.[ch]'); do
		for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
			case $h in distrun.h|contract.h) continue ;; esac
			[ ! -e "$SRCDIR/runtime/$h" ] || echo "${f#"$1"/}:$h"
		done
	done
}

@test "layers: the launcher reaches into the runtime through distrun.h and contract.h only" {
	run runtime_includes "$SRCDIR/cmd"
	[ -z "$output" ] || { echo "runtime headers included from cmd/: $output"; false; }
	# the check can fail: a copy of cmd/ where segment.c includes seg.h
	cp -r "$SRCDIR/cmd" "$T/cmd"
	sed -i 's/^#include "contract.h"$/#include "seg.h"/' "$T/cmd/job/segment.c"
	run runtime_includes "$T/cmd"
	[ "$output" = "job/segment.c:seg.h" ]
}
