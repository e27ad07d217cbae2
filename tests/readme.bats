#!/usr/bin/env bats
# The README's commands run as written (issue 31): every code block that
# README.md marks with <!-- test: sh --> or <!-- test: ci -->
# (scripts/readme-commands has the convention) runs in a scratch directory
# laid out as a checkout after `make install`: build/ (this build), tests/
# (its committed files, such as tests/smoke.list) and distrun in PATH.

load common
bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_TMPDIR"
	mkdir -p work/tests
	cp "$SRCDIR"/tests/*.list work/tests/
	ln -s "$B" work/build
	ln -s "$SRCDIR/testdata" work/testdata
}

# run_commands FILE: each command readme-commands finds in FILE, in
# order, in work/ with distrun in PATH; the first that fails is named.
run_commands() {
	local cmds cmd
	cmds=$("$SRCDIR/scripts/readme-commands" "$1")
	[ -n "$cmds" ] || return 3
	while IFS= read -r cmd; do
		echo "\$ $cmd"
		(cd work && PATH=$B/bin:$PATH timeout 300 bash -c "$cmd") >out 2>&1 ||
			{ cat out; echo "README command failed: $cmd"; return 1; }
	done <<<"$cmds"
}

@test "every command the README marks for testing runs as written" {
	grep -q '^<!-- test: \(sh\|ci\) -->' "$SRCDIR/README.md" ||
		skip "README.md marks no code block with <!-- test: sh --> or <!-- test: ci --> yet"
	run run_commands "$SRCDIR/README.md"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "the README's CI example runs as written: tests/smoke.list is committed, the JUnit file is written" {
	run run_commands "$SRCDIR/testdata/readme/ci-example.md"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^\$ distrun' <<<"$output")" -eq 4 ]
	[ "$(xmllint --xpath 'count(//testcase)' work/results.xml)" = 8 ]
	[ "$(xmllint --xpath 'count(//failure)' work/results.xml)" = 0 ]
}

@test "tests/smoke.list is the list the README shows" {
	grep -q '^# tests/smoke.list' "$SRCDIR/README.md" || skip "the README shows no smoke.list"
	diff <(sed -n '/^# tests\/smoke.list/,/^```/p' "$SRCDIR/README.md" | sed '$d') \
		"$SRCDIR/tests/smoke.list"
}

@test "readme-commands refuses a marker without a block or a command" {
	printf '<!-- test: sh -->\ntext\n' >a.md
	run "$SRCDIR/scripts/readme-commands" a.md
	[ "$status" -eq 1 ]
	[ "$output" = "readme-commands: a.md:1: no code block after the marker" ]
	printf '<!-- test: ci -->\n```\n- run: make\n```\n' >b.md
	run "$SRCDIR/scripts/readme-commands" b.md
	[ "$status" -eq 1 ]
	[ "$output" = 'readme-commands: b.md:1: the block marked "test: ci" has no command' ]
	printf '<!-- test: sh -->\n```\n# a comment\n$ echo one\none\n```\n' >c.md
	run "$SRCDIR/scripts/readme-commands" c.md
	[ "$status" -eq 0 ]
	[ "$output" = "echo one" ]
}
