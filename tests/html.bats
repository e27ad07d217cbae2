#!/usr/bin/env bats
# --html FILE: the page of a job, a sweep and a `distrun test` run, opened
# in a real browser (Debian's chromium, headless, in a network namespace of
# its own: it reaches nothing).  What the page shows is read from the DOM
# after its script ran (--dump-dom); --screenshot shows it renders; the
# browser's net log shows the page asks for nothing; what a rank prints
# stays text.

load common
bats_require_minimum_version 1.5.0

HANG=$CTESTS/diag_hang

setup() {
	P=$BATS_TEST_TMPDIR
}

# browser ARGS... URL: chromium headless without a network (root: a network
# namespace; others: a user and network namespace).
browser() {
	command -v chromium >/dev/null || skip "chromium is not installed"
	local ns=(unshare -n)
	[ "$(id -u)" -eq 0 ] || ns=(unshare -rn)
	timeout 120 "${ns[@]}" chromium --headless --no-sandbox --disable-gpu \
		--no-first-run --disable-background-networking \
		--disable-component-update --disable-sync \
		--user-data-dir="$(mktemp -d -p "$BATS_TEST_TMPDIR")" "$@" \
		2>>"$BATS_TEST_TMPDIR/chromium.err"
}

# dom PAGE: the page's DOM after its script ran, in $P/dom.html; fails
# unless the script finished drawing it.
dom() {
	browser --dump-dom "file://$1" >"$P/dom.html"
	grep -q 'data-rendered="yes"' "$P/dom.html"
}

# has TEXT: the DOM holds TEXT (as the page writes it: & < > escaped).
has() {
	grep -qF -- "$1" "$P/dom.html" || { echo "not on the page: $1"; false; }
}

# page_requests PAGE: the URLs the page asked for while it was open (the
# browser's own requests have no origin; the page's have the file's "null").
page_requests() {
	browser --log-net-log="$P/net.json" --dump-dom "file://$1" >/dev/null
	jq -r '.constants.logEventTypes.URL_REQUEST_START_JOB as $t |
		.events[] | select(.type == $t) |
		select((.params.initiator // "") | (. == "null" or startswith("file"))) |
		.params.url' "$P/net.json"
}

@test "a passing job's page: passed, a lane per rank, the late barrier" {
	run "$DISTRUN" -n 2 --html "$P/p.html" "$HANG" ok
	[ "$status" -eq 0 ]
	dom "$P/p.html"
	has '<div class="verdict">passed</div>'
	has '<dt>world size</dt><dd>2</dd>'
	# both lanes have calls (short ones merged at this zoom); rank 1's
	# wait for rank 0 at the barrier is split from its transfer
	grep -q '<rect class="agg" data-r="0"' "$P/dom.html"
	grep -q '<rect class="agg" data-r="1"' "$P/dom.html"
	grep -q '<rect class="w" [^>]*data-r="1" data-i="1"' "$P/dom.html"
	grep -q '<rect class="x" [^>]*data-r="1" data-i="1"' "$P/dom.html"
	# rank 0 came 2 s late at the first barrier after the one of init
	grep -qE '<td>barrier world seq [0-9]+</td><td>rank 0</td><td class="num">(1\.9|2\.[0-9])[0-9]* s</td>' "$P/dom.html"
	has 'every rank entered every call shown'
	has 'rank 0 ready'
}

@test "a failing rank's page names it, its status and its stderr" {
	run -3 "$DISTRUN" -n 3 --html "$P/f.html" sh -c \
		'[ "$RANK" = 1 ] && { echo "bad input on rank 1" >&2; exit 3; }; sleep 30'
	dom "$P/f.html"
	has '<div class="verdict">failed: rank 1 exited with status 3</div>'
	has '<dt>exit status</dt><dd>3</dd>'
	grep -q '<div class="card failed" id="s0-rank-1"><h3>rank 1: exit status 3 (first failure)</h3>' "$P/dom.html"
	grep -q 'id="s0-rank-0"><h3>rank 0: killed by SIGTERM (stopped)</h3>' "$P/dom.html"
	has 'bad input on rank 1'
}

@test "a hang's page: the rank that never came, the blank cell, stacks grouped" {
	run -124 "$DISTRUN" -n 4 --stall-timeout 2s --html "$P/h.html" "$HANG" skip
	dom "$P/h.html"
	has '<div class="verdict">hung: rank 1 never entered barrier (world seq 1)</div>'
	has 'ranks 0,2-3 waited'
	# the grid: a blank (never entered) cell for rank 1 at seq 1 only
	grep -q '<rect class="miss" data-q="1"' "$P/dom.html"
	[ "$(grep -o '<rect class="miss"' "$P/dom.html" | wc -l)" -eq 1 ]
	has 'rank 1 never entered 1 call (world seq 1)'
	# the others' call never ended
	grep -q '<rect class="unf" data-q="1"' "$P/dom.html"
	# stacks as distrun groups them
	grep -q '<h3 class="stack-group">ranks 0,2-3' "$P/dom.html"
	grep -q '<h3 class="stack-group">rank 1 (the odd one out)' "$P/dom.html"
	has 'compute_step'
	grep -Eq '<pre>#0 syscall \(syscall.S:38\)  #[0-9]+ dr_barrier' "$P/dom.html"
	# it renders: a screenshot that is not blank
	browser --screenshot="$P/h.png" --window-size=1200,1400 "file://$P/h.html"
	[ "$(stat -c %s "$P/h.png")" -gt 20000 ]
	# rank 3 caught between two of its futex's timeouts: still grouped,
	# the line without the innermost frames that differ
	perl -pe 's/(stack_summary": ")#0 syscall \(syscall.S:38\)/++$n == 3 ?
		"$1#0 dri_transport_flag_wait (wait.c:190)" : $&/ge' \
		"$P/h.html" >"$P/h2.html"
	[ "$(grep -c 'dri_transport_flag_wait (wait.c:190)' "$P/h2.html")" -eq 1 ]
	dom "$P/h2.html"
	grep -q '<h3 class="stack-group">ranks 0,2-3' "$P/dom.html"
	grep -Eq "<pre>#[0-9]+ dr_barrier \(coll_api.c:[0-9]+\)  #[0-9]+ main \(diag_hang.c:[0-9]+\)</pre>" "$P/dom.html"
}

@test "a sweep's page: a section per size, traces one file per size" {
	mkdir "$P/out"
	run "$DISTRUN" -n 1,2 --html "$P/s.html" --trace "$P/t.json" \
		--output-dir "$P/out" "$HANG" ok
	[ "$status" -eq 0 ]
	dom "$P/s.html"
	has '<div class="verdict">passed: all 2 runs</div>'
	grep -q '<a href="#s0">n=1</a>' "$P/dom.html"
	grep -q '<a href="#s1">n=2</a>' "$P/dom.html"
	grep -q '<section id="s1"><h2>diag_hang\[n=2\]: PASS</h2>' "$P/dom.html"
	grep -q '<rect class="w" [^>]*data-r="1"' "$P/dom.html"
	# one trace per world size, nothing of the children's in --output-dir
	[ "$(jq '.otherData.world_size' "$P/t.n1.json")" = 1 ]
	[ "$(jq '.otherData.world_size' "$P/t.n2.json")" = 2 ]
	[ ! -e "$P/t.json" ]
	[ "$(ls "$P/out")" = "$(printf '001-diag_hang-n1\n002-diag_hang-n2')" ]
	[ -z "$(find "$P/out" -name '*.json')" ]
}

@test "a distrun test page: the matrix of cases and sizes links to each case" {
	cat >"$P/list" <<-EOF
	name=ok n=1,2 $HANG ok
	name=three n=2 $TESTDATA/exitcode 3 1
	EOF
	run -1 "$DISTRUN" test --html "$P/t.html" "$P/list"
	dom "$P/t.html"
	has '<div class="verdict">failed: three[n=2]</div>'
	grep -q '<tr><th>test</th><th>n=1</th><th>n=2</th></tr>' "$P/dom.html"
	grep -q '<td>list: ok</td><td class="cell v-PASS"><a href="#s0"[^>]*>PASS</a></td><td class="cell v-PASS"><a href="#s1"' "$P/dom.html"
	grep -q '<td>list: three</td><td class="cell"></td><td class="cell v-FAIL"><a href="#s2" title="rank 1 exited with status 3">FAIL</a>' "$P/dom.html"
	grep -q '<section id="s2"><h2>three\[n=2\]: FAIL' "$P/dom.html"
}

@test "what a rank prints stays text on the page" {
	cat >"$P/evil.sh" <<-'EOF'
	echo '</script><script>document.title="pwned"</script>'
	echo '<img src=x onerror="document.title=1"><b>bold</b> & "q"' >&2
	printf 'cut \377\376 bytes\n'
	EOF
	run -1 "$DISTRUN" -n 2 --html "$P/e.html" sh -c '. "$0"; exit 1' "$P/evil.sh"
	# in the file: no tag from the ranks, in the JSON or anywhere
	! grep -q '<script>document' "$P/e.html"
	! grep -q '<img' "$P/e.html"
	dom "$P/e.html"
	! grep -q '<img' "$P/dom.html"
	! grep -q '<b>bold' "$P/dom.html"
	! grep -q 'pwned</title>' "$P/dom.html"
	has '&lt;/script&gt;&lt;script&gt;document.title="pwned"&lt;/script&gt;'
	has '&lt;img src=x onerror="document.title=1"&gt;&lt;b&gt;bold&lt;/b&gt; &amp; "q"'
	has 'cut �� bytes'
}

@test "the page asks for nothing: no network, no file outside it" {
	run -124 "$DISTRUN" -n 2 --stall-timeout 1s --html "$P/h.html" "$HANG" skip
	# every src and href of the file and of the drawn page stays on it
	! grep -oE '(src|href|xlink:href)="[^"#][^"]*"' "$P/h.html"
	dom "$P/h.html"
	! grep -oE '(src|href|xlink:href)="[^"#][^"]*"' "$P/dom.html"
	grep -q "Content-Security-Policy\" content=\"default-src 'none'" "$P/h.html"
	run page_requests "$P/h.html"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	# the check sees a page that does fetch
	printf '<img src="http://192.0.2.1/x.png">\n' >"$P/fetch.html"
	run page_requests "$P/fetch.html"
	[ "$output" = "http://192.0.2.1/x.png" ]
}

@test "--html to a file that cannot be written is refused before the start" {
	run -2 "$DISTRUN" --html /proc/nonexistent/p.html touch "$P/started"
	grep -q '^distrun: --html /proc/nonexistent/p.html: No such file or directory$' <<<"$output"
	[ ! -e "$P/started" ]
	# and "" means none, as for --junit
	run "$DISTRUN" --html= true
	[ "$status" -eq 0 ]
}

@test "--trace slices nest: a call a rank died in ends with the rank" {
	run -137 "$DISTRUN" -n 3 --trace "$P/t.json" "$HANG" kill
	# every call of a rank lies inside that rank's slice
	jq -e '[[.traceEvents[] | select(.ph == "X")] | group_by(.tid)[] |
		(map(select(.cat == "rank"))[0]) as $r |
		map(select(.cat != "rank")) | length > 0 and
		all(.ts >= $r.ts and .ts + .dur <= $r.ts + $r.dur + 1e-6)] |
		length == 3 and all' "$P/t.json"
	# the call rank 1 died in is there, unfinished, and ends exactly
	# where the rank does (times are whole ns: no rounding past it)
	jq -e '[.traceEvents[] | select(.tid == 1 and .ph == "X")] |
		(map(select(.cat == "rank"))[0]) as $r |
		map(select(.args.status == "unfinished")) | length >= 1 and
		all((.ts + .dur) - ($r.ts + $r.dur) | fabs < 1e-6)' "$P/t.json"
}

@test "hover names the call and joins it across ranks; the wheel zooms" {
	run -124 "$DISTRUN" -n 4 --stall-timeout 2s --html "$P/h.html" "$HANG" skip
	# what a person does, done by a script added to a copy of the page
	cp "$P/h.html" "$P/act.html"
	cat >>"$P/act.html" <<-'EOF'
	<script>
	var svg = document.getElementById('s0-lanes');
	// rank 2's unfinished barrier (world seq 1): not the first rect of
	// the lane, which is init's barrier (seq 0) when that one took long
	// enough to get a rect of its own (under ASan)
	var r = svg.querySelector('rect.w.unf[data-r="2"]');
	r.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: 500, clientY: 100 }));
	document.body.setAttribute('data-tip', document.getElementById('tip').textContent.replace(/\n/g, ' | '));
	document.body.setAttribute('data-link', svg.querySelector('polyline.link').getAttribute('points').split(' ').length);
	var before = document.getElementById('s0-lanes-note').textContent;
	svg.dispatchEvent(new WheelEvent('wheel', { bubbles: true, cancelable: true, deltaY: -100, clientX: 500, clientY: 50 }));
	document.body.setAttribute('data-zoomed', before !== document.getElementById('s0-lanes-note').textContent);
	</script>
	EOF
	dom "$P/act.html"
	tip=$(grep -o 'data-tip="[^"]*"' "$P/dom.html")
	[[ $tip == *"rank 2: barrier"* ]]
	[[ $tip == *"world seq 1  status unfinished"* ]]
	[[ $tip == *"(ranks that never came)"* ]]
	# the same call on ranks 0, 2 and 3, joined
	grep -q 'data-link="3"' "$P/dom.html"
	grep -q 'data-zoomed="true"' "$P/dom.html"
}

@test "every ending writes the page: SIGKILL (the OOM hint), timeout, cannot run" {
	run -137 "$DISTRUN" -n 2 --html "$P/k.html" "$TESTDATA/killself" 9 1
	dom "$P/k.html"
	has '<div class="verdict">failed: rank 1 was killed by SIGKILL</div>'
	has "often the kernel's out-of-memory killer"
	run -124 "$DISTRUN" -n 2 --timeout 1s --html "$P/t.html" "$TESTDATA/hang"
	dom "$P/t.html"
	has '<div class="verdict">timed out</div>'
	run -127 "$DISTRUN" -n 2 --html "$P/n.html" ./no/such/program
	dom "$P/n.html"
	has '<div class="verdict">failed: cannot run</div>'
	has '<h3>rank 1: not started</h3>'
}
