#!/usr/bin/env bats
# distrun for CI: world-size sweeps, `distrun test` over test lists, the
# JUnit and TAP they write (checked by real consumers: xmllint with
# testdata/junit.xsd, python3-junitparser, TAP::Parser), the report's
# stderr tails, and ctest running an MPI-style test through distrun.

load common
bats_require_minimum_version 1.5.0

XSD=$SRCDIR/testdata/junit.xsd
PY=/usr/bin/python3

# The list of every kind of case, at several world sizes: 12 cases,
# 4 PASS, 6 FAIL, 1 XFAIL, 1 SKIP.
write_mixed_list() {
	cat >"$1" <<EOF
# passes at three sizes, with a check of each rank's output
name=pass n=1,2,4 stdout='^WORLD_SIZE=[124]\$'  $TESTDATA/envdump RANK WORLD_SIZE
name=exit n=2,3                        $TESTDATA/exitcode 3 1
name=crash n=2                         $TESTDATA/killself 11 1
name=hang n=2 timeout=2s opt=--grace=1s $TESTDATA/hang
name=mismatch n=1,2 stdout[0]='^RANK=1\$' $TESTDATA/envdump RANK
name=xfail n=2 xfail="known bug"       $TESTDATA/exitcode 4
skip="needs a GPU" name=gpu n=2        ./no-such-program
name=expected-exit n=2 exit=3          $TESTDATA/exitcode 3 1
EOF
}

# Runs the mixed list once per test file (its results are reused).
mixed() {
	d=$BATS_FILE_TMPDIR/mixed
	if [ ! -e "$d/done" ]; then
		mkdir -p "$d"
		write_mixed_list "$d/mixed.list"
		st=0
		"$DISTRUN" test -j 2 --junit "$d/j.xml" --tap "$d/t.tap" \
			"$d/mixed.list" >"$d/out" 2>"$d/err" || st=$?
		echo $st >"$d/status"
		touch "$d/done"
	fi
}

# verdict CASE: the verdict of a case in the summary table.
verdict() {
	awk -v n="$1" '$4 == n { print $1 }' "$d/err" | tail -1
}

@test "a sweep runs the job once per world size, in order" {
	run "$DISTRUN" -n 1,2,4 "$TESTDATA/envdump" WORLD_SIZE
	[ "$status" -eq 0 ]
	[ "$(grep -c 'WORLD_SIZE=1$' <<<"$output")" -eq 1 ]
	[ "$(grep -c 'WORLD_SIZE=2$' <<<"$output")" -eq 2 ]
	[ "$(grep -c 'WORLD_SIZE=4$' <<<"$output")" -eq 4 ]
	# In order: every size-1 line before the size-2 lines before size 4.
	grep -o 'WORLD_SIZE=[0-9]' <<<"$output" | uniq | tr '\n' ' ' | grep -qx 'WORLD_SIZE=1 WORLD_SIZE=2 WORLD_SIZE=4 '
	[[ "$output" == *"distrun: world sizes 1,2,4: all passed"* ]]
}

@test "a sweep runs every size, says which failed, exits with the first failure's status" {
	run "$DISTRUN" -n 1-4 sh -c '[ "$WORLD_SIZE" -lt 3 ] || exit $((WORLD_SIZE + 4))'
	[ "$status" -eq 7 ]
	[[ "$output" == *"distrun: world sizes 1,2,3,4: failed: n=3 (rank "*" exited with status 7), n=4 (rank "*" exited with status 8)"* ]]
}

@test "a sweep's --report holds every run's report" {
	f=$BATS_TEST_TMPDIR/r.json
	run "$DISTRUN" -n 2,1 --report "$f" sh -c 'exit $((WORLD_SIZE - 1))'
	[ "$status" -eq 1 ]
	[ "$(jq -c '[.world_sizes, .failed_sizes, .exit_status]' "$f")" = '[[2,1],[2],1]' ]
	[ "$(jq -c '[.runs[].world_size]' "$f")" = '[2,1]' ]
	[ "$(jq -r '.runs[0].reason' "$f")" = "rank failed" ]
}

@test "a bad list of sizes for -n is a usage error" {
	for bad in 1,0 2,2 3-1 1, 1-4097 x; do
		run "$DISTRUN" -n "$bad" true
		[ "$status" -eq 2 ] || { echo "-n $bad: $status"; false; }
		[[ "${lines[0]}" == "distrun: invalid "*"'$bad'"* ]]
	done
}

@test "--junit on a single run writes one valid testcase" {
	f=$BATS_TEST_TMPDIR/j.xml
	run "$DISTRUN" -n 2 --junit "$f" "$TESTDATA/killself" 11 1
	[ "$status" -eq 139 ]
	xmllint --noout --schema "$XSD" "$f"
	[ "$(xmllint --xpath 'string(//testcase/@name)' "$f")" = "killself[n=2]" ]
	[ "$(xmllint --xpath 'string(//failure/@type)' "$f")" = signal ]
	[ "$(xmllint --xpath 'string(//failure/@message)' "$f")" = "rank 1 was killed by SIGSEGV" ]
	[ "$(xmllint --xpath 'string(//property[@name="np"]/@value)' "$f")" = 2 ]
}

@test "the mixed list: every verdict and the exit status" {
	mixed
	[ "$(cat "$d/status")" -eq 1 ]
	[ "$(verdict 'pass[n=1]')" = PASS ]
	[ "$(verdict 'pass[n=2]')" = PASS ]
	[ "$(verdict 'pass[n=4]')" = PASS ]
	[ "$(verdict 'exit[n=2]')" = FAIL ]
	[ "$(verdict 'exit[n=3]')" = FAIL ]
	[ "$(verdict 'crash[n=2]')" = FAIL ]
	[ "$(verdict 'hang[n=2]')" = FAIL ]
	[ "$(verdict 'mismatch[n=1]')" = FAIL ]
	[ "$(verdict 'mismatch[n=2]')" = FAIL ]
	[ "$(verdict 'xfail[n=2]')" = XFAIL ]
	[ "$(verdict 'gpu[n=2]')" = SKIP ]
	[ "$(verdict 'expected-exit[n=2]')" = PASS ]
	grep -q 'crash\[n=2\]  signal: rank 1 was killed by SIGSEGV' "$d/err"
	grep -q 'exit\[n=3\]  exit: rank 1 exited with status 3' "$d/err"
	grep -q 'hang\[n=2\]  timeout: timed out after' "$d/err"
	grep -q "mismatch\[n=2\]  output: rank 0 stdout does not match /^RANK=1\\$/" "$d/err"
	grep -q '^distrun test: 12 cases, 4 passed, 6 failed, 0 errors, 1 xfail, 0 xpass, 1 skipped, 0 flaky (.*): FAILED$' "$d/err"
}

@test "the mixed list's JUnit validates against the schema" {
	mixed
	xmllint --noout --schema "$XSD" "$d/j.xml"
}

@test "the mixed list's JUnit reads with junitparser, with the right counts" {
	"$PY" -c 'import junitparser' 2>/dev/null || skip "python3-junitparser is not installed"
	mixed
	run "$PY" - "$d/j.xml" <<'EOF'
import sys
from junitparser import JUnitXml, Failure, Skipped, Error
xml = JUnitXml.fromfile(sys.argv[1])
suites = list(xml)
assert len(suites) == 1 and suites[0].name == "mixed", [s.name for s in suites]
s = suites[0]
print(s.tests, s.failures, s.errors, s.skipped)
kinds = {}
for c in s:
    assert c.classname == "mixed"
    r = c.result
    kinds[c.name] = (type(r[0]).__name__, r[0].type, r[0].message) if r else ("ok",)
    # junitparser 2.8 has no testcase properties(): read the element.
    props = {p.get("name"): p.get("value") for p in c._elem.iter("property")}
    assert props["np"] == c.name.split("[n=")[1].rstrip("]"), props
    assert props["distrun_version"] and props["cores"] and props["oversubscribed"] in ("true", "false")
for k in sorted(kinds): print(k, *kinds[k], sep="|")
EOF
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "12 6 0 2" ]
	grep -qx 'crash\[n=2\]|Failure|signal|rank 1 was killed by SIGSEGV' <<<"$output"
	grep -qx 'exit\[n=2\]|Failure|exit|rank 1 exited with status 3' <<<"$output"
	grep -q '^hang\[n=2\]|Failure|timeout|timed out after' <<<"$output"
	grep -q '^mismatch\[n=1\]|Failure|output|rank 0 stdout does not match' <<<"$output"
	grep -q '^xfail\[n=2\]|Skipped|xfail|expected failure (known bug)' <<<"$output"
	grep -qx 'gpu\[n=2\]|Skipped|None|needs a GPU' <<<"$output"
	grep -qx 'pass\[n=4\]|ok' <<<"$output"
	grep -qx 'expected-exit\[n=2\]|ok' <<<"$output"
}

@test "JUnit has each rank's labelled output and the failing rank's stderr tail" {
	list=$BATS_TEST_TMPDIR/l
	# Rank 1 fails only once rank 0 has printed (else rank 0 may be
	# stopped first); it waits 30 s at most.
	cat >"$list" <<EOF
name=boom n=2 env=M=$BATS_TEST_TMPDIR/printed sh -c 'echo "out \$RANK"; echo "err \$RANK" >&2; if [ "\$RANK" = 0 ]; then touch "\$M"; exit 0; fi; i=0; while [ ! -e "\$M" ] && [ \$i -lt 3000 ]; do sleep 0.01; i=\$((i + 1)); done; echo "Traceback: rank \$RANK" >&2; exit 5'
EOF
	run "$DISTRUN" test --junit "$BATS_TEST_TMPDIR/j.xml" "$list"
	[ "$status" -eq 1 ]
	f=$BATS_TEST_TMPDIR/j.xml
	xmllint --noout --schema "$XSD" "$f"
	out=$(xmllint --xpath 'string(//system-out)' "$f")
	err=$(xmllint --xpath 'string(//system-err)' "$f")
	text=$(xmllint --xpath 'string(//failure)' "$f")
	grep -qx '\[0\] out 0' <<<"$out"
	grep -qx '\[1\] out 1' <<<"$out"
	grep -qx '\[1\] Traceback: rank 1' <<<"$err"
	grep -qx 'rank 1 stderr (last lines):' <<<"$text"
	grep -qx 'Traceback: rank 1' <<<"$text"
	# Rank 0 did not fail: its stderr is not in the failure text.
	! grep -q 'err 0' <<<"$text"
}

@test "JUnit escapes markup and drops what XML 1.0 forbids" {
	f=$BATS_TEST_TMPDIR/j.xml
	run "$DISTRUN" --junit "$f" sh -c 'printf "a<b>&c\"d\001e\033f\377g]]>\n"; exit 1'
	[ "$status" -eq 1 ]
	xmllint --noout --schema "$XSD" "$f"
	out=$(xmllint --xpath 'string(//system-out)' "$f")
	[ "$out" = "$(printf '[0] a<b>&c"def\xef\xbf\xbdg]]>')" ]
}

@test "JUnit output is cut to a bounded size, and says so" {
	f=$BATS_TEST_TMPDIR/j.xml
	run "$DISTRUN" -n 2 --junit "$f" "$TESTDATA/spew" 1000000
	[ "$status" -eq 0 ]
	xmllint --noout --schema "$XSD" "$f"
	out=$(xmllint --xpath 'string(//system-out)' "$f")
	[ "${#out}" -lt 80000 ]
	grep -q '^\[0\] \[distrun: [0-9]* of 1000000 bytes cut here\]$' <<<"$out"
	grep -q '^\[1\] \[distrun: [0-9]* of 1000000 bytes cut here\]$' <<<"$out"
	# What is kept is the end, in whole labelled lines.
	[ "$(grep -c '^\[1\] ' <<<"$out")" -gt 100 ]
}

@test "the mixed list's TAP parses with TAP::Parser, with the right counts" {
	mixed
	run perl "$SRCDIR/tests/tapcheck.pl" "$d/t.tap"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[-1]}" = "version=13 planned=12 tests=12 passed=6 failed=6 skip=1 todo=1 yaml=11" ]
	grep -qx 'not ok: mixed: crash\[n=2\] type=signal' <<<"$output"
	# A hang's TAP line carries its message (the diagnosis's verdict when
	# there is one; this hang is a plain sleep).
	grep -qxE 'not ok: mixed: hang\[n=2\] - timed out after [0-9.]+s; ranks still running: 0,1 type=timeout' <<<"$output"
	grep -qx 'not ok: mixed: mismatch\[n=2\] type=output' <<<"$output"
	run prove -e cat "$d/t.tap"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Failed: 6"* ]]
}

@test "an xfail test that passes fails the run (strict), in TAP too" {
	list=$BATS_TEST_TMPDIR/l
	echo 'xfail="was broken" true' >"$list"
	run "$DISTRUN" test --tap "$BATS_TEST_TMPDIR/t.tap" "$list"
	[ "$status" -eq 1 ]
	[[ "$output" == *"XPASS "*"true[n=1]"*"passed, but is marked xfail"* ]]
	grep -qx 'not ok 1 - l: true\[n=1\]' "$BATS_TEST_TMPDIR/t.tap"
}

@test "a list of passes and expected failures passes; --tap - writes to stdout" {
	list=$BATS_TEST_TMPDIR/l
	printf '%s\n' 'n=1,2 true' 'xfail=known n=2 false' 'skip=later false' >"$list"
	run --separate-stderr "$DISTRUN" test --tap - "$list"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "TAP version 13" ]
	[ "${lines[1]}" = "1..4" ]
	run prove -e cat <(printf '%s\n' "${lines[@]}")
	[ "$status" -eq 0 ]
}

@test "the quick form runs one command at each size" {
	run "$DISTRUN" test -n 1,3 -- "$TESTDATA/envdump" RANK
	[ "$status" -eq 0 ]
	[[ "$output" == *"PASS "*"envdump[n=1]"* ]]
	[[ "$output" == *"PASS "*"envdump[n=3]"* ]]
	[[ "$output" == *"distrun test: 2 cases, 2 passed, 0 failed"* ]]
	run "$DISTRUN" test -n 2 -- "$TESTDATA/exitcode" 9 0
	[ "$status" -eq 1 ]
	[[ "$output" == *"rank 0 exited with status 9"* ]]
}

@test "bad lists give FILE:LINE errors, all of them, before anything runs" {
	list=$BATS_TEST_TMPDIR/bad.list
	cat >"$list" <<EOF
# line 1 is a comment
n=1 touch $BATS_TEST_TMPDIR/ran
n=0,2 true
colour=red true
n=2 timeout=soon true
n=1 ./no-such-program
n=2 exit=SIGNOPE true
n=1 stdout='(' true
n=1 stdout-file=missing.txt true
n=1 stdout[x]=a true
n=2
n=1 env=NOEQUALS true
EOF
	run "$DISTRUN" test "$list"
	[ "$status" -eq 2 ]
	[ ! -e "$BATS_TEST_TMPDIR/ran" ]
	[[ "${lines[0]}" == "distrun: $list:3: bad world sizes 'n=0,2'"* ]]
	[[ "${lines[1]}" == "distrun: $list:4: unknown key 'colour'"* ]]
	[[ "${lines[2]}" == "distrun: $list:5: bad 'timeout=soon'"* ]]
	[ "${lines[3]}" = "distrun: $list:6: program './no-such-program' not found" ]
	[[ "${lines[4]}" == "distrun: $list:7: bad 'exit=SIGNOPE'"* ]]
	[[ "${lines[5]}" == "distrun: $list:8: bad regex in stdout=("* ]]
	[[ "${lines[6]}" == "distrun: $list:9: stdout-file=missing.txt: No such file"* ]]
	[[ "${lines[7]}" == "distrun: $list:10: bad ranks '[x]'"* ]]
	[ "${lines[8]}" = "distrun: $list:11: missing the program to run" ]
	[[ "${lines[9]}" == "distrun: $list:12: bad 'env=NOEQUALS'"* ]]
	[ "${#lines[@]}" -eq 10 ]
}

@test "a missing list, a bad option and an empty list are errors" {
	run "$DISTRUN" test "$BATS_TEST_TMPDIR/nope"
	[ "$status" -eq 2 ]
	[[ "$output" == *"test list $BATS_TEST_TMPDIR/nope: No such file or directory"* ]]
	run "$DISTRUN" test -j 0 x
	[ "$status" -eq 2 ]
	[[ "$output" == *"bad -j '0'"* ]]
	echo '# nothing' >"$BATS_TEST_TMPDIR/empty"
	run "$DISTRUN" test "$BATS_TEST_TMPDIR/empty"
	[ "$status" -eq 2 ]
	[[ "$output" == *"no tests"* ]]
	run "$DISTRUN" test
	[ "$status" -eq 2 ]
}

@test "list lines: quotes, continuations, comments, --, env and name" {
	list=$BATS_TEST_TMPDIR/l
	cat >"$list" <<EOF
name="with spaces" env=GREETING='hello world' stdout='^hello world x=1 # not a comment\$' \\
    -- sh -c 'echo "\$GREETING" "\$1" "# not a comment"' sh x=1   # a comment
EOF
	run "$DISTRUN" test "$list"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"PASS "*"with spaces[n=1]"* ]]
}

@test "programs and expected-output files are found from the list's directory" {
	mkdir -p "$BATS_TEST_TMPDIR/suite"
	cp "$TESTDATA/envdump" "$BATS_TEST_TMPDIR/suite/prog"
	printf 'RANK=1\n' >"$BATS_TEST_TMPDIR/suite/want1.txt"
	echo 'n=2 stdout-file[1]=want1.txt ./prog RANK' >"$BATS_TEST_TMPDIR/suite/t.list"
	cd /
	run "$DISTRUN" test "$BATS_TEST_TMPDIR/suite/t.list"
	[ "$status" -eq 0 ]
	echo 'n=2 stdout-file=want1.txt ./prog RANK' >"$BATS_TEST_TMPDIR/suite/t.list"
	run "$DISTRUN" test "$BATS_TEST_TMPDIR/suite/t.list"
	[ "$status" -eq 1 ]
	[[ "$output" == *"rank 0 stdout differs from $BATS_TEST_TMPDIR/suite/want1.txt"* ]]
}

@test "--retries: a case that fails then passes is FLAKY and the run passes" {
	list=$BATS_TEST_TMPDIR/l
	mark=$BATS_TEST_TMPDIR/mark
	echo "sh -c '[ -e $mark ] || { touch $mark; exit 1; }'" >"$list"
	run "$DISTRUN" test --retries 2 --junit "$BATS_TEST_TMPDIR/j.xml" "$list"
	[ "$status" -eq 0 ]
	[[ "$output" == *"retry "* ]]
	[[ "$output" == *"1 flaky"* ]]
	f=$BATS_TEST_TMPDIR/j.xml
	[ "$(xmllint --xpath 'string(//property[@name="attempts"]/@value)' "$f")" = 2 ]
	[ "$(xmllint --xpath 'string(//property[@name="flaky"]/@value)' "$f")" = true ]
	rm "$mark"
	run "$DISTRUN" test "$list"
	[ "$status" -eq 1 ]
	[[ "$output" == *"1 failed"* ]]
}

@test "-j never runs more ranks at once than the CPUs allow" {
	command -v taskset >/dev/null || skip "taskset is not installed"
	log=$BATS_TEST_TMPDIR/log
	list=$BATS_TEST_TMPDIR/l
	for i in 1 2 3 4 5 6; do
		echo "name=c$i sh -c 'echo start >>$log; sleep 0.05; echo end >>$log'"
	done >"$list"
	run taskset -c 0 "$DISTRUN" test -j 4 --junit "$BATS_TEST_TMPDIR/j.xml" "$list"
	[ "$status" -eq 0 ]
	# With one CPU, every case ran alone: starts and ends alternate.
	[ "$(tr '\n' ' ' <"$log")" = "$(printf 'start end %.0s' 1 2 3 4 5 6)" ]
	[ "$(xmllint --xpath 'string(//testcase[1]//property[@name="cores"]/@value)' "$BATS_TEST_TMPDIR/j.xml")" = 1 ]
}

@test "a case larger than the machine still runs, alone, marked oversubscribed" {
	n=$(( $(nproc) + 1 ))
	run "$DISTRUN" test -j 2 -n $n --junit "$BATS_TEST_TMPDIR/j.xml" -- true
	[ "$status" -eq 0 ]
	[ "$(xmllint --xpath 'string(//property[@name="oversubscribed"]/@value)' "$BATS_TEST_TMPDIR/j.xml")" = true ]
}

@test "--output-dir keeps each case's report and output" {
	run "$DISTRUN" test -n 1,2 --output-dir "$BATS_TEST_TMPDIR/o" -- "$TESTDATA/envdump" RANK
	[ "$status" -eq 0 ]
	[ "$(jq .world_size "$BATS_TEST_TMPDIR/o/002-envdump-n2/report.json")" = 2 ]
	[ "$(cat "$BATS_TEST_TMPDIR/o/002-envdump-n2/rank.1.stdout")" = RANK=1 ]
	[ -e "$BATS_TEST_TMPDIR/o/001-envdump-n1/rank.0.stdout" ]
}

@test "the JSON report has the tail of each failing rank's stderr" {
	f=$BATS_TEST_TMPDIR/r.json
	run "$DISTRUN" -n 3 --report "$f" sh -c 'echo "noise $RANK" >&2; if [ "$RANK" = 2 ]; then seq 2000 >&2; echo "fatal: rank 2" >&2; exit 3; fi; sleep 30'
	[ "$status" -eq 3 ]
	tail=$(jq -r '.ranks[2].stderr_tail' "$f")
	[ "$(tail -1 <<<"$tail")" = "fatal: rank 2" ]
	[ "${#tail}" -le 4096 ]
	# It starts at a whole line.
	[[ "$(head -1 <<<"$tail")" =~ ^[0-9]+$ ]]
	# Ranks stopped by distrun are not the failure.
	[ "$(jq '.ranks[0] | has("stderr_tail")' "$f")" = false ]
}

@test "when distrun is stopped from outside, every rank's stderr tail is in the report" {
	f=$BATS_TEST_TMPDIR/r.json
	o=$BATS_TEST_TMPDIR/o
	"$DISTRUN" -n 2 --grace 1s --output-dir "$o" --report "$f" \
		sh -c 'echo "stuck $RANK" >&2; exec sleep 60' 2>/dev/null &
	pid=$!
	wait_until 30 grep -q stuck "$o/rank.0.stderr"
	wait_until 30 grep -q stuck "$o/rank.1.stderr"
	kill -TERM $pid
	st=0; wait $pid || st=$?
	[ "$st" -eq 143 ]
	[ "$(jq -r '.ranks[0].stderr_tail' "$f")" = "stuck 0" ]
	[ "$(jq -r '.ranks[1].stderr_tail' "$f")" = "stuck 1" ]
}

@test "SIGTERM stops distrun test and its cases; nothing is left running" {
	list=$BATS_TEST_TMPDIR/l
	printf '%s\n' "n=2 $TESTDATA/hang" "name=later true" >"$list"
	"$DISTRUN" test --junit "$BATS_TEST_TMPDIR/j.xml" --output-dir "$BATS_TEST_TMPDIR/o" \
		"$list" 2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	out=$BATS_TEST_TMPDIR/o/001-hang-n2/rank.1.stdout
	wait_until 30 grep -q pid "$out"
	rank=$(awk '{ print $2 }' "$out")
	kill -TERM $pid
	st=0; wait $pid || st=$?
	[ "$st" -eq 143 ]
	! kill -0 "$rank" 2>/dev/null
	grep -q 'got SIGTERM, stopping the tests' "$BATS_TEST_TMPDIR/err"
	# The case never started is no pass.
	f=$BATS_TEST_TMPDIR/j.xml
	xmllint --noout --schema "$XSD" "$f"
	[ "$(xmllint --xpath 'string(//testcase[@name="later[n=1]"]/error/@message)' "$f")" = "not run: stopped by a signal" ]
	[ "$(xmllint --xpath 'string(//testcase[@name="hang[n=2]"]/failure/@type)' "$f")" = signal ]
}

@test "distrun test --help lists the options the man page documents" {
	run "$DISTRUN" test --help
	[ "$status" -eq 0 ]
	opts() { grep -o -- '--[a-z][a-z-]*' | sort -u; }
	man_test=$(sed -n '/^\.SS "Test options"/,/^\.SS /p' "$SRCDIR/man/distrun.1" | sed 's/\\-/-/g' | grep '^\.B')
	diff <(sed -n '/^Test options:/,/^$/p' <<<"$output" | opts) <(opts <<<"$man_test")
}

@test "ctest runs an MPI-style test through distrun: passes and fails as it should" {
	command -v cmake >/dev/null || skip "cmake is not installed"
	src=$BATS_TEST_TMPDIR/proj
	mkdir -p "$src"
	cp "$SRCDIR/testdata/ctest/CMakeLists.txt" "$SRCDIR/testdata/ctest/allreduce_check.c" "$src/"
	flags=
	case $B in *asan*) flags=-fsanitize=address,undefined ;; esac
	cmake -S "$src" -B "$src/build" -DMPIEXEC_EXECUTABLE="$DISTRUN" \
		-DMPIEXEC_NUMPROC_FLAG=-n -DMPIEXEC_PREFLAGS="--timeout;120s" \
		-DDISTRUN_INCLUDE="$SRCDIR/runtime" -DDISTRUN_LIB="$B/lib/libdistrun.a" \
		-DCMAKE_C_FLAGS="$flags" >/dev/null
	cmake --build "$src/build" >/dev/null
	cd "$src/build"
	run ctest --output-on-failure -R '^allreduce_'
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"100% tests passed, 0 tests failed out of 3"* ]]
	run ctest --output-on-failure -R '^broken_'
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"0% tests passed, 1 tests failed out of 1"* ]]
	[[ "$output" == *"distrun: rank 1 exited with status 1"* ]]
}

@test "the example list of docs/ci.md runs as it says" {
	mkdir -p "$BATS_TEST_TMPDIR/tests"
	sed -n '/^# tests\/smoke.list/,/^```/p' "$SRCDIR/docs/ci.md" | sed '$d' |
		sed "s|\.\./build/|$B/|g" >"$BATS_TEST_TMPDIR/tests/smoke.list"
	[ "$(grep -vc '^#' "$BATS_TEST_TMPDIR/tests/smoke.list")" -eq 5 ]
	run "$DISTRUN" test "$BATS_TEST_TMPDIR/tests/smoke.list"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"distrun test: 8 cases, 6 passed, 0 failed, 0 errors, 1 xfail, 0 xpass, 1 skipped"* ]]
}

@test "with --stall-timeout, a hang is a 'hang' failure whose text is the diagnosis" {
	"$DISTRUN" --help | grep -q -- --stall-timeout || skip "this build has no --stall-timeout"
	list=$BATS_TEST_TMPDIR/l
	echo "name=stuck n=2 timeout=60s opt=--stall-timeout=2s opt=--grace=1s $TESTDATA/hang" >"$list"
	run "$DISTRUN" test --junit "$BATS_TEST_TMPDIR/j.xml" "$list"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"FAIL "*"stuck[n=2]"*"hang: no progress after"* ]]
	f=$BATS_TEST_TMPDIR/j.xml
	xmllint --noout --schema "$XSD" "$f"
	[ "$(xmllint --xpath 'string(//failure/@type)' "$f")" = hang ]
	xmllint --xpath 'string(//failure)' "$f" | grep -q 'no progress for'
}

@test "a case distrun cannot run (a bad opt=) is an ERROR with distrun's words" {
	list=$BATS_TEST_TMPDIR/l
	echo 'opt=--no-such-option true' >"$list"
	run "$DISTRUN" test --junit "$BATS_TEST_TMPDIR/j.xml" "$list"
	[ "$status" -eq 1 ]
	[[ "$output" == *"ERROR "*"true[n=1]"*"distrun exited with status 2 and wrote no report"* ]]
	f=$BATS_TEST_TMPDIR/j.xml
	xmllint --noout --schema "$XSD" "$f"
	xmllint --xpath 'string(//error)' "$f" | grep -q "unknown option '--no-such-option'"
	[ "$(xmllint --xpath 'string(/testsuites/@errors)' "$f")" = 1 ]
}

@test "lists of random bytes and broken quoting are refused or run, never crash" {
	dir=$BATS_TEST_TMPDIR/rand
	mkdir -p "$dir"
	"$PY" - "$dir" <<'PYEOF'
import os, random, sys
random.seed(11)
words = ["n=", "n=1,2", "n=0", "timeout=", "env=", "env=A=1", "exit=SIGSEGV",
         "stdout[", "stdout[0]=", "stderr[1-]=x", "'", '"', "\\", "#", "--",
         "xfail=", "skip=", "opt=-", "true", "=", "[", "]", "\n", " ", "\t"]
valid = ["n=1 true", "n=1,2 stdout[1]=. sh -c 'echo $RANK'", "exit=1 false",
         "xfail=known false", "skip=later nothing", "# comment", "",
         "name='q x' env=A=1 true", "true \\\n  arg", 'n=2 -- "true" a=b']
for i in range(60):
    with open(os.path.join(sys.argv[1], "l%02d" % i), "wb") as f:
        if i % 3 == 0:
            f.write(os.urandom(random.randint(0, 400)))
        elif i % 3 == 1:
            f.write("\n".join(random.choice(valid)
                              for _ in range(random.randint(1, 4))).encode())
        else:
            f.write("".join(random.choice(words) + random.choice(" \n")
                            for _ in range(random.randint(1, 40))).encode())
PYEOF
	for f in "$dir"/l*; do
		st=0
		# A list that parses runs `true` or fails: always with a timeout.
		"$DISTRUN" test -q --timeout 20s "$f" >/dev/null 2>"$dir/err" || st=$?
		[ "$st" -le 2 ] || { echo "$f: exit status $st"; cat "$dir/err"; false; }
		if [ "$st" -eq 2 ]; then
			grep -q "^distrun: $f:[0-9]*: \|^distrun: test list $f: no tests$" "$dir/err" ||
				{ echo "$f: no FILE:LINE error"; cat "$dir/err"; false; }
		fi
	done
}

# Issue 30.5: --junit, --tap and --report say "incomplete" from the start,
# so a sweep killed by SIGKILL leaves no earlier run's verdict behind.
@test "a sweep killed by SIGKILL leaves no previous verdict in --junit, --tap, --report" {
	d=$BATS_TEST_TMPDIR
	"$DISTRUN" -n 1,2 --junit "$d/j.xml" --tap "$d/t.tap" --report "$d/r.json" true
	grep -q 'failures="0" errors="0"' "$d/j.xml"
	[ "$(jq .exit_status "$d/r.json")" = 0 ]
	"$DISTRUN" -n 1,2 --junit "$d/j.xml" --tap "$d/t.tap" --report "$d/r.json" \
		"$TESTDATA/hang" &
	pid=$!
	wait_until 10 grep -q 'Bail out!' "$d/t.tap"
	kill -9 "$pid"
	wait "$pid" || true
	xmllint --noout --schema "$XSD" "$d/j.xml"
	grep -q '<error type="incomplete"' "$d/j.xml"
	! grep -q 'errors="0"' "$d/j.xml"
	run prove --exec cat "$d/t.tap"
	[ "$status" -ne 0 ]
	grep -q 'distrun has not finished' <<<"$output"
	[ "$(jq -r '"\(.complete) \(.exit_status)"' "$d/r.json")" = "false null" ]
}

@test "a sweep's runs write nothing of theirs into the user's --output-dir" {
	o=$BATS_TEST_TMPDIR/o
	run "$DISTRUN" --junit "$BATS_TEST_TMPDIR/j.xml" --report "$BATS_TEST_TMPDIR/r.json" \
		--output-dir "$o" "$TESTDATA/envdump" RANK
	[ "$status" -eq 0 ]
	[ "$(ls "$o")" = "$(printf 'rank.0.stderr\nrank.0.stdout')" ]
	[ "$(jq .world_size "$BATS_TEST_TMPDIR/r.json")" = 1 ]
}
