#!/usr/bin/env bats
# Options are defined once (cmd/options.c): --help and man/distrun.1 must
# name the same ones.

load common

# Long and short options in a text, one per line, sorted.
long_opts() { grep -o -- '--[a-z][a-z_-]*' | sort -u; }
short_opts() { grep -oE -- '(^|[ ,])-[a-zA-Z]\b' | tr -d ' ,' | sort -u; }

# The OPTIONS section of the man page, as plain text.
man_options() {
	sed -n '/^\.SH OPTIONS/,/^\.SH /p' "$SRCDIR/man/distrun.1" | sed 's/\\-/-/g; s/\\f[BIRP]//g'
}

help_options() {
	"$DISTRUN" --help | sed -n '/^Options:/,/^$/p'
}

@test "--help and the man page list the same long options" {
	diff <(help_options | long_opts) <(man_options | grep '^\.[TB]\|^\.BR\|^\.BI' | long_opts)
}

@test "--help and the man page list the same short options" {
	diff <(help_options | short_opts) <(man_options | grep '^\.BR' | short_opts)
}

@test "every option the man page mentions anywhere exists" {
	for opt in $(sed 's/\\-/-/g' "$SRCDIR/man/distrun.1" | long_opts); do
		{ help_options; "$DISTRUN" test --help | sed -n '/^Test options:/,/^$/p'; } |
			grep -q -- "$opt\b" || { echo "man page names $opt"; false; }
	done
}

@test "every option in --help is accepted" {
	for opt in $(help_options | long_opts); do
		case $opt in
		--help|--version) run "$DISTRUN" "$opt" ;;
		--nproc*) run "$DISTRUN" "$opt" 1 true ;;
		--master-port|--master_port) run "$DISTRUN" "$opt" "$(python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0", 0)); print(s.getsockname()[1])')" true ;;
		--ranks) run "$DISTRUN" "$opt" 0 true ;;
		--stdin) run "$DISTRUN" "$opt" none true ;;
		--output-dir|--log-dir|--log_dir) run "$DISTRUN" "$opt" "$BATS_TEST_TMPDIR/o" true ;;
		--redirects|--tee) run "$DISTRUN" --log-dir "$BATS_TEST_TMPDIR/o" "$opt" 3 true ;;
		--color) run "$DISTRUN" "$opt" never true ;;
		--timeout|--grace|--stall-timeout) run "$DISTRUN" "$opt" 5s true ;;
		--report|--trace|--html) run "$DISTRUN" "$opt" "$BATS_TEST_TMPDIR/r.json" true ;;
		--junit|--tap) run "$DISTRUN" "$opt" "$BATS_TEST_TMPDIR/$opt.out" true ;;
		--max-restarts|--max_restarts) run "$DISTRUN" "$opt" 1 true ;;
		--python) run "$DISTRUN" "$opt" /usr/bin/python3 true ;;
		--preload) run "$DISTRUN" "$opt" json true ;;
		--module) run "$DISTRUN" "$opt" --python /usr/bin/python3 json.tool --help ;;
		--master-addr|--master_addr) run "$DISTRUN" "$opt" 127.0.0.1 true ;;
		--nnodes) run "$DISTRUN" "$opt" 1 true ;;
		--node-rank|--node_rank) run "$DISTRUN" "$opt" 0 true ;;
		--rdzv-backend|--rdzv_backend) run "$DISTRUN" "$opt" static true ;;
		--rdzv-endpoint|--rdzv_endpoint) run "$DISTRUN" "$opt" 127.0.0.1:29500 true ;;
		--rdzv-id|--rdzv_id) run "$DISTRUN" "$opt" job1 true ;;
		--join-timeout) run "$DISTRUN" "$opt" 5s true ;;
		--iface) run "$DISTRUN" "$opt" lo true ;;
		*) run "$DISTRUN" "$opt" true ;;
		esac
		[ "$status" -eq 0 ] || { echo "$opt: $output"; false; }
	done
}

@test "the man page documents every exit status distrun uses" {
	for st in 0 124 126 127 2 1; do
		man_status=$(sed -n '/^\.SH "EXIT STATUS"/,/^\.SH /p' "$SRCDIR/man/distrun.1")
		grep -qx "\.B $st" <<<"$man_status" || { echo "exit status $st"; false; }
	done
}

@test "the man page documents every variable the ranks get" {
	names() { grep -o '^[A-Z_][A-Z0-9_]*=' | tr -d = | sort -u; }
	added=$(comm -13 <(env | names) <("$DISTRUN" -n 1 --raw env | names))
	[ "$(wc -w <<<"$added")" -ge 15 ]
	for v in $added; do
		grep -q "$v" "$SRCDIR/man/distrun.1" || { echo "undocumented: $v"; false; }
	done
}

@test "the bash completion offers exactly the options of --help" {
	comp=$SRCDIR/scripts/distrun.bash-completion
	words() { sed -n "/compgen -W '-n/,/-- \"\$cur\"/p" "$comp" | sed "s/.*compgen -W '//; s/'.*//"; }
	diff <(help_options | long_opts) <(words | long_opts)
	diff <(help_options | short_opts) <(words | tr '\t' ' ' | sed 's/^/ /' | short_opts)
	bash -n "$comp"
}
