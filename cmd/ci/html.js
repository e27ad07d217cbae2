/*
 * distrun --html: draws the page from the JSON blocks cmd/ci/html.c embeds
 * (the page's sections, each run's --report and --trace JSON).  Whatever
 * came from the ranks goes into the page as text (textContent, or esc()
 * in the SVG markup), never as markup.  Nothing is fetched.
 */
(function () {
'use strict';

var SVG = 'http://www.w3.org/2000/svg';
var MAX_RECTS = 40000;      /* SVG elements a timeline or grid may draw */
var LAST_LINES = 6;         /* output lines shown on a card */

function $(id) { return document.getElementById(id); }
function esc(s) {
	return String(s).replace(/[&<>"']/g, function (c) {
		return '&#' + c.charCodeAt(0) + ';';
	});
}
/* An element with attributes and children (strings become text). */
function h(tag, attrs, kids) {
	var e = document.createElement(tag);
	for (var k in attrs || {})
		if (attrs[k] !== null && attrs[k] !== undefined)
			e.setAttribute(k, attrs[k]);
	(kids || []).forEach(function (c) {
		if (c === null || c === undefined) return;
		e.appendChild(typeof c === 'object' ? c :
			      document.createTextNode(String(c)));
	});
	return e;
}
function readJSON(id) {
	var n = $(id);
	if (!n) return null;
	try { return JSON.parse(n.textContent); } catch (e) { return null; }
}
function fmtUs(us) {
	var a = Math.abs(us);
	if (a >= 1e6) return (us / 1e6).toFixed(a >= 1e7 ? 1 : 3) + ' s';
	if (a >= 1e3) return (us / 1e3).toFixed(a >= 1e4 ? 1 : 2) + ' ms';
	return us.toFixed(a >= 10 ? 0 : 1) + ' µs';
}
function fmtS(s) { return s === null || s === undefined ? '-' : fmtUs(s * 1e6); }
function fmtKiB(k) {
	return k >= 1048576 ? (k / 1048576).toFixed(2) + ' GiB' :
	       k >= 1024 ? (k / 1024).toFixed(1) + ' MiB' : k + ' KiB';
}
/* [0,2,3,5] -> "ranks 0,2-3,5" */
function rankList(rs, bare) {
	rs = rs.slice().sort(function (a, b) { return a - b; });
	var out = [], i = 0;
	while (i < rs.length) {
		var j = i;
		while (j + 1 < rs.length && rs[j + 1] === rs[j] + 1) j++;
		out.push(j > i ? rs[i] + '-' + rs[j] : String(rs[i]));
		i = j + 1;
	}
	return (bare ? '' : rs.length === 1 ? 'rank ' : 'ranks ') + out.join(',');
}

/* ------------------------------------------------------------ model */

/* The trace's events per rank: calls (with the wait split), output. */
function buildModel(trace, report) {
	var m = { ranks: [], calls: {}, t0: Infinity, t1: 0, other:
		  (trace && trace.otherData) || {} };
	var n = report && report.ranks ? report.ranks.length :
		(m.other.world_size || 0);
	var waits = {};
	function rk(t) {
		while (m.ranks.length <= t)
			m.ranks.push({ name: 'rank ' + m.ranks.length, slices: [],
				       lines: [], span: null });
		return m.ranks[t];
	}
	for (var i = 0; i < n; i++) rk(i);
	((trace && trace.traceEvents) || []).forEach(function (e) {
		var r = rk(e.tid || 0);
		if (e.ph === 'M' && e.name === 'thread_name' && e.args)
			r.name = String(e.args.name);
		else if (e.ph === 'X' && e.cat === 'rank')
			r.span = [e.ts, e.ts + e.dur, e.args && e.args.status];
		else if (e.ph === 'X' && e.cat === 'wait')
			waits[(e.tid || 0) + ':' + e.ts] = e;
		else if (e.ph === 'X')
			r.slices.push({ t: e.ts, d: e.dur, name: e.name,
					a: e.args || {}, p2p: e.cat === 'p2p',
					r: e.tid || 0, we: e.ts });
		else if (e.ph === 'i')
			r.lines.push({ t: e.ts, err: e.cat === 'stderr',
				       text: String(e.name) });
		if (e.ph === 'X') {
			m.t0 = Math.min(m.t0, e.ts);
			m.t1 = Math.max(m.t1, e.ts + e.dur);
		}
	});
	if (m.t0 === Infinity) m.t0 = m.t1 = 0;
	m.ranks.forEach(function (r, ri) {
		r.slices.sort(function (a, b) { return a.t - b.t; });
		r.slices.forEach(function (s, si) {
			var w = waits[ri + ':' + s.t];
			if (w) { s.we = s.t + w.dur; s.waitFor = w.name; }
			if (s.p2p) return;
			var k = s.a.group + ':' + s.a.seq;
			(m.calls[k] = m.calls[k] || []).push([ri, si]);
		});
	});
	/* A call some rank never entered: the ones in it waited throughout. */
	Object.keys(m.calls).forEach(function (k) {
		var l = m.calls[k];
		if (k.split(':')[0] !== '0' || l.length >= m.ranks.length) return;
		l.forEach(function (p) {
			var s = m.ranks[p[0]].slices[p[1]];
			if (s.a.status === 'unfinished') {
				s.we = s.t + s.d;
				s.waitFor = 'ranks that never came';
			}
		});
	});
	return m;
}

/* ------------------------------------------------------------ banner */

function diagCallLine(d) {
	if (!d || !d.calls || !d.calls.length) return null;
	var c = d.calls[0];
	return c.call + ' (' + (c.group ? 'group ' + c.group : 'world') +
	       ' seq ' + c.seq + ')';
}

function banner(rep, sec) {
	var cls = 'banner', verdict = 'passed', detail = [];
	var d = rep && typeof rep.diagnosis === 'object' ? rep.diagnosis : null;
	if (!rep) {
		cls += ' failed';
		verdict = sec.verdict ? sec.verdict + ': ' + (sec.message || '') :
			  'no report';
	} else if (rep.complete === false) {
		cls += ' failed';
		verdict = 'incomplete: distrun did not finish';
	} else if (rep.reason === 'rank failed') {
		var f = rep.first_failed_rank, fr = (rep.ranks || []).filter(
			function (x) { return x.rank === f; })[0] || {};
		cls += ' failed';
		verdict = 'failed: rank ' + f + (fr.signal ? ' was killed by ' +
			fr.signal : ' exited with status ' + fr.exit_code);
		if (fr.signal === 'SIGKILL')
			detail.push('SIGKILL that distrun did not send: often the ' +
				    'kernel\'s out-of-memory killer (see dmesg); max RSS ' +
				    fmtKiB(fr.maxrss_kib || 0));
		if (d && diagCallLine(d))
			detail.push('in ' + diagCallLine(d));
	} else if (rep.reason === 'stall' || rep.reason === 'timeout') {
		cls += ' hung';
		verdict = (rep.reason === 'stall' ? 'hung' : 'timed out');
		if (d) {
			var odd = oddRanks(rep, d);
			var line = diagCallLine(d);
			if (odd.length && line)
				verdict += ': ' + rankList(odd) + ' never entered ' + line;
			else if (line)
				verdict += ': in ' + line;
			if (d.calls && d.calls[0])
				detail.push(rankList(d.calls[0].ranks) + ' waited ' +
					    fmtS(d.calls[0].waiting_s) + ' in it');
			if (d.verdict && d.verdict !== 'unknown')
				detail.push('diagnosis: ' + d.verdict.replace(/_/g, ' '));
		}
	} else if (rep.reason === 'signal') {
		cls += ' failed';
		verdict = 'stopped by ' + rep.signal;
	} else if (rep.reason !== 'ok') {
		cls += ' failed';
		verdict = 'failed: ' + rep.reason;
	}
	var dl = h('dl');
	function row(k, v) { dl.appendChild(h('dt', {}, [k])); dl.appendChild(h('dd', {}, [v])); }
	if (rep) {
		row('exit status', rep.exit_status === null ? 'none' : rep.exit_status);
		row('command', (rep.command || []).join(' '));
		row('world size', rep.world_size);
		row('wall time', fmtS(rep.wall_s));
		row('started', rep.start || '-');
		row('run id', rep.run_id || '-');
	}
	var b = h('div', { 'class': cls, id: sec.id + '-verdict' }, [
		h('div', { 'class': 'verdict' }, [verdict])]);
	detail.forEach(function (t) { b.appendChild(h('div', {}, [t])); });
	b.appendChild(dl);
	if (d && d.text)
		b.appendChild(h('details', {}, [h('summary', {}, ['the diagnosis as distrun printed it']),
			h('pre', {}, [d.text])]));
	return b;
}

/* Ranks of the world not in the call the others wait in. */
function oddRanks(rep, d) {
	if (!d.calls || !d.calls.length || d.calls[0].group !== 0) return [];
	var inCall = {};
	d.calls.forEach(function (c) {
		if (c.group === 0 && c.seq === d.calls[0].seq)
			c.ranks.forEach(function (r) { inCall[r] = 1; });
	});
	return (rep.ranks || []).map(function (r) { return r.rank; })
		.filter(function (r) { return !inCall[r]; });
}

/* ------------------------------------------------------------ timeline */

function timeline(m, sec, tip) {
	var wrap = h('div'), n = m.ranks.length;
	if (!n || m.t1 <= m.t0) {
		wrap.appendChild(h('p', { 'class': 'note' }, ['no timeline recorded']));
		return wrap;
	}
	var LW = 90, W = Math.max(600, Math.min(1360, (document.body.clientWidth || 1200) - 40));
	var laneH = Math.max(3, Math.min(24, Math.floor(720 / n))), AX = 22;
	var H = AX + n * laneH + 2, view = [m.t0, m.t1];
	var svg = document.createElementNS(SVG, 'svg');
	svg.setAttribute('class', 'lanes');
	svg.setAttribute('id', sec.id + '-lanes');
	svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
	svg.setAttribute('height', H);
	var note = h('span', { 'class': 'note', id: sec.id + '-lanes-note' });
	var tools = h('div', { 'class': 'tools' }, [
		h('button', { type: 'button', 'data-z': '0.5' }, ['zoom in']),
		h('button', { type: 'button', 'data-z': '2' }, ['zoom out']),
		h('button', { type: 'button', 'data-z': '0' }, ['whole run']),
		h('span', { 'class': 'legend' }, [
			h('i', { style: 'background:#f4b400' }), 'waiting for others',
			h('i', { style: 'background:#3367d6' }), 'transfer',
			h('i', { style: 'background:#7e57c2' }), 'point-to-point',
			h('i', { style: 'background:#8a94a6' }), 'several calls (zoom in)',
			h('i', { style: 'background:#eef0f3' }), 'user code',
			' · ticks: output (red: stderr) · wheel: zoom · drag: pan']),
		note]);
	wrap.appendChild(tools);
	wrap.appendChild(svg);
	var minW = Math.max(1, Math.ceil(n * (W - LW) / MAX_RECTS));

	function x(t) { return LW + (t - view[0]) / (view[1] - view[0]) * (W - LW); }
	function lower(sl, t) {   /* first slice ending after t */
		var lo = 0, hi = sl.length;
		while (lo < hi) {
			var mid = (lo + hi) >> 1;
			if (sl[mid].t + sl[mid].d < t) lo = mid + 1; else hi = mid;
		}
		return lo;
	}
	function draw() {
		var out = [], drawn = 0;
		var step = (view[1] - view[0]) / 8, p10 = Math.pow(10, Math.floor(Math.log10(step)));
		step = [1, 2, 5, 10].map(function (k) { return k * p10; })
			.filter(function (s) { return s >= step; })[0];
		for (var t = Math.ceil(view[0] / step) * step; t <= view[1]; t += step) {
			out.push('<line class="axis" x1="' + x(t) + '" x2="' + x(t) +
				 '" y1="14" y2="' + H + '"/><text x="' + (x(t) + 2) +
				 '" y="11">' + esc(fmtUs(t)) + '</text>');
		}
		m.ranks.forEach(function (r, ri) {
			var y = AX + ri * laneH, hh = Math.max(2, laneH - 2);
			if (laneH >= 9 || ri % Math.ceil(9 / laneH) === 0)
				out.push('<text x="2" y="' + (y + Math.min(laneH, 12) - 1) + '">' +
					 esc(r.name) + '</text>');
			if (r.span) {
				var a = Math.max(LW, x(r.span[0])), b = Math.min(W, x(r.span[1]));
				if (b > a)
					out.push('<rect class="' + (/killed|status [1-9]|wait status/.test(r.span[2] || '') ?
						'dead' : 'span') +
						'" x="' + a + '" y="' + y + '" width="' + (b - a) +
						'" height="' + hh + '"/>');
			}
			var sl = r.slices, i = lower(sl, view[0]), agg = null;
			function flush() {
				if (!agg) return;
				out.push('<rect class="agg" data-r="' + ri + '" data-a="' + agg.i +
					 '-' + agg.j + '" x="' + agg.x0 + '" y="' + y + '" width="' +
					 Math.max(1, agg.x1 - agg.x0) + '" height="' + hh + '"/>');
				drawn++;
				agg = null;
			}
			for (; i < sl.length && sl[i].t <= view[1]; i++) {
				var s = sl[i], x0 = Math.max(LW, x(s.t)), x1 = Math.min(W, x(s.t + s.d));
				if (x1 - x0 < minW) {
					if (agg && x0 - agg.x1 < minW) { agg.x1 = Math.max(agg.x1, x1); agg.j = i; continue; }
					flush();
					agg = { x0: x0, x1: x1, i: i, j: i };
					continue;
				}
				flush();
				var xw = Math.min(x1, Math.max(x0, x(s.we)));
				var unf = s.a.status === 'unfinished' ? ' unf' : '';
				var at = '" data-r="' + ri + '" data-i="' + i + '" y="' + y + '" height="' + hh + '"/>';
				if (s.p2p) {
					out.push('<rect class="p' + unf + '" x="' + x0 + '" width="' + (x1 - x0) + at);
				} else {
					if (xw > x0)
						out.push('<rect class="w' + unf + '" x="' + x0 + '" width="' + (xw - x0) + at);
					if (x1 > xw)
						out.push('<rect class="x' + unf + '" x="' + xw + '" width="' + (x1 - xw) + at);
				}
				drawn++;
			}
			flush();
			/* output: one tick per pixel column and stream */
			var seen = {};
			r.lines.forEach(function (l) {
				if (l.t < view[0] || l.t > view[1]) return;
				var px = Math.round(x(l.t)), k = px + (l.err ? 'e' : 'o');
				if (seen[k]) return;
				seen[k] = 1;
				out.push('<line class="' + (l.err ? 'err' : 'out') + '" x1="' + px +
					 '" x2="' + px + '" y1="' + y + '" y2="' + (y + Math.max(2, hh / 3)) + '"/>');
			});
		});
		out.push('<g class="overlay"></g>');
		svg.innerHTML = out.join('');
		note.textContent = 'showing ' + fmtUs(view[1] - view[0]) +
			' from ' + fmtUs(view[0]) + '; ' + drawn + ' blocks';
	}
	function zoom(f, at) {
		if (!f) { view = [m.t0, m.t1]; draw(); return; }
		var span = view[1] - view[0], c = at === undefined ? view[0] + span / 2 : at;
		var ns = Math.max(1, Math.min(m.t1 - m.t0, span * f));
		var a = c - (c - view[0]) / span * ns;
		a = Math.max(m.t0, Math.min(a, m.t1 - ns));
		view = [a, a + ns];
		draw();
	}
	function tAt(ev) {
		var rc = svg.getBoundingClientRect(), px = (ev.clientX - rc.left) * W / rc.width;
		return view[0] + (px - LW) / (W - LW) * (view[1] - view[0]);
	}
	tools.addEventListener('click', function (ev) {
		var z = ev.target.getAttribute && ev.target.getAttribute('data-z');
		if (z !== null && z !== undefined) zoom(parseFloat(z));
	});
	svg.addEventListener('wheel', function (ev) {
		ev.preventDefault();
		zoom(ev.deltaY < 0 ? 0.8 : 1.25, tAt(ev));
	}, { passive: false });
	var drag = null;
	svg.addEventListener('mousedown', function (ev) { drag = { x: ev.clientX, v: view.slice() }; });
	window.addEventListener('mouseup', function () { drag = null; });
	svg.addEventListener('dblclick', function () { zoom(0); });
	svg.addEventListener('mousemove', function (ev) {
		if (drag) {
			var rc = svg.getBoundingClientRect();
			var dt = (ev.clientX - drag.x) * W / rc.width / (W - LW) * (drag.v[1] - drag.v[0]);
			var a = Math.max(m.t0, Math.min(drag.v[0] - dt, m.t1 - (drag.v[1] - drag.v[0])));
			view = [a, a + drag.v[1] - drag.v[0]];
			draw();
			return;
		}
		hover(ev);
	});
	svg.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
	function hover(ev) {
		var tg = ev.target, ri = tg.getAttribute('data-r'), ov = svg.querySelector('.overlay');
		ov.innerHTML = '';
		if (ri === null) { tip.style.display = 'none'; return; }
		var r = m.ranks[+ri], txt;
		if (tg.getAttribute('data-a')) {
			var ij = tg.getAttribute('data-a').split('-');
			txt = r.name + ': ' + (ij[1] - ij[0] + 1) + ' calls, ' +
			      fmtUs(r.slices[ij[0]].t) + ' to ' +
			      fmtUs(r.slices[ij[1]].t + r.slices[ij[1]].d) + '\nzoom in to see them';
		} else {
			var s = r.slices[+tg.getAttribute('data-i')], a = s.a;
			txt = r.name + ': ' + (a.call || s.name) + '\nop ' + s.name +
			      (a.op ? ' (' + a.op + ')' : '') + '  dtype ' + (a.dtype || '-') +
			      '  count ' + a.count + '  bytes ' + a.bytes +
			      '\n' + (s.p2p ? 'point-to-point' : (a.group ? 'group ' + a.group : 'world') +
			      ' seq ' + a.seq) + '  status ' + a.status +
			      '\nentered ' + fmtUs(s.t) + '  took ' + fmtUs(s.d) +
			      (s.we > s.t ? '\nwaited ' + fmtUs(s.we - s.t) + ' (' + (s.waitFor || '') + ')' +
			       ', transfer ' + fmtUs(s.t + s.d - s.we) : '');
			if (!s.p2p) link(ov, a.group + ':' + a.seq);
		}
		tip.textContent = txt;
		tip.style.display = 'block';
		tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 420) + 'px';
		tip.style.top = (ev.clientY + 14) + 'px';
	}
	/* The same call on every rank: outlined and joined by a line. */
	function link(ov, key) {
		var pts = [], parts = [];
		(m.calls[key] || []).forEach(function (p) {
			var s = m.ranks[p[0]].slices[p[1]], y = AX + p[0] * laneH;
			var x0 = x(s.t), x1 = x(s.t + s.d);
			if (x1 < LW || x0 > W) return;
			x0 = Math.max(LW, x0);
			parts.push('<rect class="hl" x="' + x0 + '" y="' + y + '" width="' +
				   Math.max(2, Math.min(W, x1) - x0) + '" height="' + Math.max(2, laneH - 2) + '"/>');
			pts.push([p[0], x0 + ',' + (y + laneH / 2)]);
		});
		pts.sort(function (a, b) { return a[0] - b[0]; });
		if (pts.length > 1)
			parts.push('<polyline class="link" points="' + pts.map(function (p) { return p[1]; }).join(' ') + '"/>');
		ov.innerHTML = parts.join('');
	}
	wrap.zoomTo = function (t0, t1) { view = [Math.max(m.t0, t0), Math.min(m.t1, Math.max(t1, t0 + 1))]; draw(); };
	draw();
	return wrap;
}

/* ------------------------------------------------------------ grid */

var SKEW = [100, 1e3, 1e4, 1e5, 1e6];   /* µs: bucket edges */
function skewClass(us) {
	for (var i = 0; i < SKEW.length; i++) if (us < SKEW[i]) return 's' + i;
	return 's5';
}

function grid(m, sec, lanes) {
	var wrap = h('div'), n = m.ranks.length, groups = {};
	Object.keys(m.calls).forEach(function (k) {
		var g = +k.split(':')[0];
		(groups[g] = groups[g] || []).push(+k.split(':')[1]);
	});
	var gl = Object.keys(groups).map(Number).sort(function (a, b) { return a - b; });
	if (!gl.length) {
		wrap.appendChild(h('p', { 'class': 'note' }, ['no collective calls recorded']));
		return wrap;
	}
	wrap.appendChild(h('div', { 'class': 'legend' }, [
		'arrival after the first rank: ',
		h('i', { style: 'background:#2e7d32' }), '< 100 µs',
		h('i', { style: 'background:#7cb342' }), '< 1 ms',
		h('i', { style: 'background:#fdd835' }), '< 10 ms',
		h('i', { style: 'background:#fb8c00' }), '< 100 ms',
		h('i', { style: 'background:#e53935' }), '< 1 s',
		h('i', { style: 'background:#8e0000' }), '≥ 1 s',
		h('i', { style: 'background:#fff;border:1px dashed #333' }), 'entered, never left',
		h('i', { style: 'background:#fff;border:1px solid #c62828' }), 'never entered']));
	gl.slice(0, 8).forEach(function (g) {
		var seqs = groups[g].sort(function (a, b) { return a - b; });
		var members = {}, firstSeq = {};
		seqs.forEach(function (q) {
			m.calls[g + ':' + q].forEach(function (p) {
				members[p[0]] = 1;
				if (firstSeq[p[0]] === undefined || q < firstSeq[p[0]]) firstSeq[p[0]] = q;
			});
		});
		if (g === 0) for (var r = 0; r < n; r++) members[r] = 1;
		/* With each rank's last calls only, a rank's record starts later
		 * than another's: show the calls every rank still has. */
		var from = seqs[0];
		if (m.other.capped_calls)
			Object.keys(firstSeq).forEach(function (r) { from = Math.max(from, firstSeq[r]); });
		seqs = seqs.filter(function (q) { return q >= from; });
		var rows = Object.keys(members).map(Number).sort(function (a, b) { return a - b; });
		var cols = Math.min(seqs.length, Math.max(40, Math.floor(MAX_RECTS / Math.max(1, rows.length))), 600);
		var per = Math.ceil(seqs.length / cols);
		cols = Math.ceil(seqs.length / per);
		/* cell[row][col]: worst skew class, or miss / unf */
		var cells = rows.map(function () { return new Array(cols).fill(null); });
		var missing = {}, rank2row = {};
		rows.forEach(function (r, i) { rank2row[r] = i; });
		var ORDER = { s0: 0, s1: 1, s2: 2, s3: 3, s4: 4, s5: 5, unf: 6, miss: 7 };
		seqs.forEach(function (q, qi) {
			var l = m.calls[g + ':' + q], first = Infinity, seen = {}, c = Math.floor(qi / per);
			l.forEach(function (p) { first = Math.min(first, m.ranks[p[0]].slices[p[1]].t); });
			l.forEach(function (p) {
				var s = m.ranks[p[0]].slices[p[1]], cl = s.a.status === 'unfinished' ? 'unf' : skewClass(s.t - first);
				var row = cells[rank2row[p[0]]], old = row[c];
				seen[p[0]] = 1;
				if (old === null || ORDER[cl] > ORDER[old]) row[c] = cl;
			});
			rows.forEach(function (r, i) {
				if (seen[r]) return;
				cells[i][c] = 'miss';
				(missing[r] = missing[r] || []).push(q);
			});
		});
		var cw = Math.max(2, Math.min(14, Math.floor(1100 / cols))), ch = Math.max(2, Math.min(14, Math.floor(500 / rows.length)));
		var LW = 70, W = Math.max(LW + cols * cw + 4, 460), H = 16 + rows.length * ch + 2, out = [];
		var gap = ch >= 6 && cw >= 4 ? 1 : 0;
		out.push('<text x="' + LW + '" y="11">' + esc((g ? 'group ' + g : 'world') + ' seq ' + seqs[0] +
			 ' to ' + seqs[seqs.length - 1] + (per > 1 ? ' (' + per + ' calls a column: the worst shown)' : '')) + '</text>');
		rows.forEach(function (r, i) {
			var y = 16 + i * ch;
			if (ch >= 9 || i % Math.ceil(9 / ch) === 0)
				out.push('<text x="2" y="' + (y + Math.min(ch, 11) - 1) + '">' + esc(m.ranks[r] ? m.ranks[r].name : 'rank ' + r) + '</text>');
			out.push('<rect class="bg" x="' + LW + '" y="' + y + '" width="' + cols * cw + '" height="' + ch + '"/>');
			var c = 0;
			while (c < cols) {   /* runs of one class: one rect */
				var k = cells[i][c], e = c;
				while (e + 1 < cols && cells[i][e + 1] === k) e++;
				if (k !== null) {
					var q0 = seqs[c * per], q1 = seqs[Math.min(seqs.length - 1, (e + 1) * per - 1)];
					out.push('<rect class="' + k + '" data-q="' + q0 + '" x="' + (LW + c * cw) + '" y="' + y +
						 '" width="' + ((e - c + 1) * cw - gap) + '" height="' + (ch - gap) + '"><title>' +
						 esc((m.ranks[r] ? m.ranks[r].name : 'rank ' + r) + ', seq ' + q0 + (q1 !== q0 ? '-' + q1 : '') + ': ' +
						 (k === 'miss' ? 'never entered' : k === 'unf' ? 'entered, never left' : 'arrived ' +
						  ['< 100 µs', '< 1 ms', '< 10 ms', '< 100 ms', '< 1 s', '≥ 1 s'][+k[1]] + ' after the first')) +
						 '</title></rect>');
				}
				c = e + 1;
			}
		});
		var svg = document.createElementNS(SVG, 'svg');
		svg.setAttribute('class', 'grid');
		svg.setAttribute('id', sec.id + '-grid-' + g);
		svg.setAttribute('width', W);
		svg.setAttribute('height', H);
		svg.innerHTML = out.join('');
		svg.addEventListener('click', function (ev) {
			var q = ev.target.getAttribute && ev.target.getAttribute('data-q');
			var l = q !== null && m.calls[g + ':' + q];
			if (!l || !lanes.zoomTo) return;
			var t0 = Infinity, t1 = 0;
			l.forEach(function (p) { var s = m.ranks[p[0]].slices[p[1]]; t0 = Math.min(t0, s.t); t1 = Math.max(t1, s.t + s.d); });
			var pad = (t1 - t0) * 0.2 + 10;
			lanes.zoomTo(t0 - pad, t1 + pad);
			lanes.scrollIntoView();
		});
		wrap.appendChild(h('div', { style: 'overflow-x:auto' }, [svg]));
		var miss = Object.keys(missing);
		wrap.appendChild(h('p', { 'class': 'note', id: sec.id + '-missing-' + g }, [miss.length ?
			miss.slice(0, 20).map(function (r) {
				var q = missing[r];
				return 'rank ' + r + ' never entered ' + q.length + ' call' + (q.length > 1 ? 's' : '') +
				       ' (' + (g ? 'group ' + g : 'world') + ' seq ' + q.slice(0, 5).join(', ') + (q.length > 5 ? ', ...' : '') + ')';
			}).join('; ') + (miss.length > 20 ? '; and ' + (miss.length - 20) + ' more ranks' : '') :
			'every rank entered every call shown' + (m.other.dropped_calls ? '' : '')]));
	});
	if (m.other.dropped_calls)
		wrap.appendChild(h('p', { 'class': 'note' }, [m.other.dropped_calls + ' calls were overwritten in the ranks\' ' +
			'flight records before distrun read them: a blank cell may be a lost record']));
	if (gl.length > 8)
		wrap.appendChild(h('p', { 'class': 'note' }, ['and ' + (gl.length - 8) + ' more groups (in the trace)']));
	return wrap;
}

/* ------------------------------------------------------------ late arrivals */

function lateArrivals(m, sec) {
	var rows = [], lastCount = {};
	Object.keys(m.calls).forEach(function (k) {
		var l = m.calls[k], s0 = m.ranks[l[0][0]].slices[l[0][1]];
		if (!/barrier/.test(s0.name) || l.length < 2) return;
		if (k.split(':')[0] === '0' && l.length < m.ranks.length) return;
		var arr = l.map(function (p) { return [m.ranks[p[0]].slices[p[1]].t, p[0]]; })
			.sort(function (a, b) { return a[0] - b[0]; });
		var last = arr[arr.length - 1], second = arr[arr.length - 2];
		lastCount[last[1]] = (lastCount[last[1]] || 0) + 1;
		rows.push({ k: k, name: s0.name, rank: last[1], late: last[0] - second[0], spread: last[0] - arr[0][0] });
	});
	var wrap = h('div', { id: sec.id + '-late' });
	if (!rows.length) {
		wrap.appendChild(h('p', { 'class': 'note' }, ['no barrier that every rank entered in the recorded calls']));
		return wrap;
	}
	rows.sort(function (a, b) { return b.late - a.late; });
	var t = h('table', {}, [h('tr', {}, [h('th', {}, ['barrier']), h('th', {}, ['last to arrive']),
		h('th', {}, ['after the one before it']), h('th', {}, ['after the first'])])]);
	rows.slice(0, 20).forEach(function (r) {
		var gs = r.k.split(':');
		t.appendChild(h('tr', {}, [h('td', {}, [r.name + ' ' + (gs[0] === '0' ? 'world' : 'group ' + gs[0]) + ' seq ' + gs[1]]),
			h('td', {}, ['rank ' + r.rank]), h('td', { 'class': 'num' }, [fmtUs(r.late)]),
			h('td', { 'class': 'num' }, [fmtUs(r.spread)])]));
	});
	wrap.appendChild(t);
	var who = Object.keys(lastCount).sort(function (a, b) { return lastCount[b] - lastCount[a]; });
	wrap.appendChild(h('p', { 'class': 'note' }, [rows.length + ' barriers' + (rows.length > 20 ? ' (the 20 latest arrivals shown)' : '') +
		'; last to arrive most often: ' + who.slice(0, 5).map(function (r) { return 'rank ' + r + ' (' + lastCount[r] + ')'; }).join(', ')]));
	return wrap;
}

/* ------------------------------------------------------------ cards, stacks */

function cards(m, rep, sec) {
	var wrap = h('div'), dr = {}, d = rep && typeof rep.diagnosis === 'object' ? rep.diagnosis : null;
	((d && d.ranks) || []).forEach(function (x) { dr[x.rank] = x; });
	var ranks = (rep && rep.ranks) || m.ranks.map(function (r, i) { return { rank: i }; });
	var quiet = [], box = h('div', { 'class': 'cards' });
	ranks.forEach(function (x, i) {
		var mr = m.ranks[i] || { lines: [], name: 'rank ' + x.rank };
		var bad = x.status > 0 && x.note !== 'stopped' && x.note !== 'timed out';
		var stopped = x.note === 'stopped' || x.note === 'timed out';
		var c = h('div', { 'class': 'card' + (bad ? ' failed' : stopped ? ' stopped' : ''), id: sec.id + '-rank-' + x.rank });
		var st = x.state === 'signaled' ? 'killed by ' + x.signal : x.state === 'exited' ? 'exit status ' + x.exit_code : (x.state || '?');
		c.appendChild(h('h3', {}, ['rank ' + x.rank + ': ' + st + (x.note ? ' (' + x.note + ')' : '')]));
		c.appendChild(h('div', { 'class': 'kv' }, ['wall ' + fmtS(x.wall_s) + ' · user ' + fmtS(x.user_s) + ' · sys ' +
			fmtS(x.sys_s) + ' · max RSS ' + fmtKiB(x.maxrss_kib || 0) + ' · pid ' + x.pid]));
		var dx = dr[x.rank];
		if (dx) {
			var where = dx.call ? 'in ' + dx.call.call + ' seq ' + dx.call.seq + ' for ' + fmtS(dx.call.for_s) :
				    dx.user_code_s !== null && dx.user_code_s !== undefined ? 'in user code for ' + fmtS(dx.user_code_s) +
				    (dx.last_call ? ', last call seq ' + dx.last_call.seq : '') : dx.status;
			c.appendChild(h('div', { 'class': 'kv' }, ['at the stop: ' + where + (dx.proc_state ? ' · state ' + dx.proc_state : '') +
				(dx.wchan ? ' · wchan ' + dx.wchan : '') + ' · cpu ' + dx.cpu_pct + '%']));
			if (dx.stack_summary) c.appendChild(h('div', { 'class': 'kv mono' }, ['stack: ' + dx.stack_summary]));
		}
		[false, true].forEach(function (err) {
			var ls = mr.lines.filter(function (l) { return l.err === err; });
			if (!ls.length) return;
			c.appendChild(h('div', { 'class': 'kv' }, [(err ? 'stderr' : 'stdout') + ', last lines:']));
			c.appendChild(h('pre', { 'class': err ? 'stderr' : 'stdout' }, [ls.slice(-LAST_LINES).map(function (l) { return l.text; }).join('\n')]));
			if (ls.length > LAST_LINES)
				c.appendChild(h('details', {}, [h('summary', {}, ['all ' + ls.length + ' ' + (err ? 'stderr' : 'stdout') + ' lines kept']),
					h('pre', {}, [ls.map(function (l) { return '[' + fmtUs(l.t) + '] ' + l.text; }).join('\n')])]));
		});
		if (x.stderr_tail && !mr.lines.some(function (l) { return l.err; }))
			c.appendChild(h('details', { open: '' }, [h('summary', {}, ['stderr, last lines']), h('pre', {}, [x.stderr_tail])]));
		(bad || stopped || ranks.length <= 32 || dx && dx.call === null ? box : (quiet.push(c), null)) && box.appendChild(c);
	});
	wrap.appendChild(box);
	if (quiet.length) {
		var q = h('div', { 'class': 'cards' });
		quiet.forEach(function (c) { q.appendChild(c); });
		wrap.appendChild(h('details', {}, [h('summary', {}, [quiet.length + ' more ranks that passed']), q]));
	}
	var o = m.other;
	if (o.line_max || o.capped_lines || o.dropped_lines)
		wrap.appendChild(h('p', { 'class': 'note' }, ['Output lines are cut at ' + (o.line_max || 200) + ' bytes' +
			(o.capped_lines ? '; ' + o.capped_lines + ' earlier lines are left out (each rank\'s last ' + sec.per_rank_cap + ' are kept)' : '') +
			(o.dropped_lines ? '; ' + o.dropped_lines + ' lines past the job\'s 100000 were not kept' : '') +
			'; the whole output is in --output-dir files.']));
	return wrap;
}

/* A group's line, as distrun's report shows it: the first rank's summary,
 * less its innermost frame where the group's differ there. */
function frame0(s) {
	var i = s.indexOf('  #');
	return i < 0 ? s : s.slice(0, i);
}
function groupLine(xs, k) {
	var s = xs[0].stack_summary;
	if (!xs[0].stack_group || !s) return k;
	if (xs.every(function (x) { return frame0(x.stack_summary || '') === frame0(s); })) return s;
	return s.indexOf('  #') < 0 ? s : s.slice(s.indexOf('  #') + 2);
}

function stacks(rep, sec) {
	var d = rep && typeof rep.diagnosis === 'object' ? rep.diagnosis : null;
	if (!d || !d.ranks) return null;
	var by = {}, order = [];
	/* grouped as distrun groups them: by the frames of the program and
	 * of libdistrun's API (stack_group), else by the summary line */
	d.ranks.forEach(function (x) {
		var k = x.stack_group || x.stack_summary || (x.stack_error ? 'no stack: ' + x.stack_error : 'no stack');
		if (!by[k]) { by[k] = []; order.push(k); }
		by[k].push(x);
	});
	var wrap = h('div', { id: sec.id + '-stacks' });
	var big = order.filter(function (k) { return by[k].length > 1; }).length;
	order.forEach(function (k) {
		var rs = by[k].map(function (x) { return x.rank; });
		var odd = order.length === 2 && big === 1 && rs.length === 1;
		wrap.appendChild(h('h3', { 'class': 'stack-group' }, [rankList(rs) + (odd ? ' (the odd one out)' : '') +
			(by[k][0].stack_method ? ', by ' + by[k][0].stack_method : '')]));
		wrap.appendChild(h('pre', {}, [groupLine(by[k], k)]));
		if (by[k][0].stack && by[k][0].stack.length)
			wrap.appendChild(h('details', {}, [h('summary', {}, ['the whole stack of rank ' + rs[0]]),
				h('pre', {}, [by[k][0].stack.join('\n')])]));
	});
	return wrap;
}

/* ------------------------------------------------------------ raw data */

function saveLink(id, name, label) {
	var n = $(id);
	if (!n) return null;
	var a = h('a', { 'class': 'button', download: name, href: '#' }, [label]);
	a.addEventListener('click', function () {
		a.href = URL.createObjectURL(new Blob([n.textContent], { type: 'application/json' }));
	});
	return a;
}

/* ------------------------------------------------------------ page */

function section(sec, tip) {
	var rep = sec.report ? readJSON(sec.id + '-report') : null;
	var trace = sec.trace ? readJSON(sec.id + '-trace') : null;
	var m = buildModel(trace, rep), s = h('section', { id: sec.id });
	if (sec.heading) s.appendChild(h('h2', {}, [sec.heading]));
	s.appendChild(banner(rep, sec));
	var o = m.other, notes = [];
	if (o.capped_calls)
		notes.push('each rank\'s last ' + sec.per_rank_cap + ' calls are shown (' + o.capped_calls + ' earlier calls left out' +
			   (sec.trace_file ? '; the whole timeline is in ' + sec.trace_file : '; --trace FILE keeps all of them') + ')');
	if (!trace && sec.trace_note)
		notes.push('the timeline is ' + sec.trace_note + (sec.trace_file ? ': see ' + sec.trace_file : ''));
	if (notes.length) s.appendChild(h('p', { 'class': 'note limits' }, ['Limits: ' + notes.join('; ') + '.']));
	s.appendChild(h('h3', {}, ['Timeline']));
	var lanes = timeline(m, sec, tip);
	s.appendChild(lanes);
	s.appendChild(h('h3', {}, ['Calls by rank: arrival skew']));
	s.appendChild(grid(m, sec, lanes));
	s.appendChild(h('h3', {}, ['Late arrivals at barriers']));
	s.appendChild(lateArrivals(m, sec));
	var st = stacks(rep, sec);
	if (st) {
		s.appendChild(h('h3', {}, ['Stacks at the stop, grouped']));
		s.appendChild(st);
	}
	s.appendChild(h('h3', {}, ['Ranks']));
	s.appendChild(cards(m, rep, sec));
	s.appendChild(h('div', { 'class': 'tools' }, ['Raw data: ',
		saveLink(sec.id + '-report', 'report.json', 'save the report (JSON)'),
		saveLink(sec.id + '-trace', 'trace.json', 'save the trace (JSON, opens in Perfetto)')]));
	return s;
}

function matrix(page) {
	var secs = page.sections;
	if (page.kind === 'sweep') {
		var t = h('table', { id: 'matrix' }, [h('tr', {}, ['world size', 'verdict', 'exit status', 'wall', 'message']
			.map(function (x) { return h('th', {}, [x]); }))]);
		secs.forEach(function (s) {
			t.appendChild(h('tr', {}, [h('td', { 'class': 'cell' }, [h('a', { href: '#' + s.id }, ['n=' + s.n])]),
				h('td', { 'class': 'v-' + s.verdict }, [s.verdict]), h('td', { 'class': 'num' }, [s.exit_status]),
				h('td', { 'class': 'num' }, [fmtS(s.wall_s)]), h('td', {}, [s.message || ''])]));
		});
		return t;
	}
	var sizes = [], tests = [], at = {};
	secs.forEach(function (s) {
		var k = s.suite === s.test ? s.test : s.suite + ': ' + s.test;
		if (sizes.indexOf(s.n) < 0) sizes.push(s.n);
		if (tests.indexOf(k) < 0) tests.push(k);
		at[k + '\n' + s.n] = s;
	});
	sizes.sort(function (a, b) { return a - b; });
	var tb = h('table', { id: 'matrix' }, [h('tr', {}, [h('th', {}, ['test'])].concat(sizes.map(function (n) { return h('th', {}, ['n=' + n]); })))]);
	tests.forEach(function (k) {
		tb.appendChild(h('tr', {}, [h('td', {}, [k])].concat(sizes.map(function (n) {
			var s = at[k + '\n' + n];
			return h('td', { 'class': 'cell' + (s ? ' v-' + s.verdict : '') }, s ? [h('a', { href: '#' + s.id, title: s.message || '' }, [s.verdict])] : ['']);
		}))));
	});
	return tb;
}

function main() {
	var t0 = Date.now(), page = readJSON('distrun-page'), app = $('app');
	if (!page || !app) return;
	var tip = h('div', { id: 'tip' });
	document.body.appendChild(tip);
	$('static').style.display = 'none';
	app.appendChild(h('h1', {}, [page.kind === 'test' ? 'distrun test' : 'distrun ' +
		(page.kind === 'sweep' ? 'sweep: ' : '') + page.title]));
	if (page.kind !== 'job') {
		var bad = page.sections.filter(function (s) { return !s.ok; });
		app.appendChild(h('div', { 'class': 'banner' + (bad.length ? ' failed' : ''), id: 'verdict' }, [
			h('div', { 'class': 'verdict' }, [bad.length ? 'failed: ' + bad.map(function (s) { return s.name; }).join(', ') :
				'passed: all ' + page.sections.length + ' runs'])]));
		app.appendChild(matrix(page));
	}
	page.sections.forEach(function (s) {
		if (page.kind !== 'job')
			s.heading = s.name + ': ' + s.verdict + (s.message && !s.ok ? ' (' + s.message + ')' : '');
		try {
			app.appendChild(section(s, tip));
		} catch (e) {
			app.appendChild(h('p', { 'class': 'note' }, ['could not draw ' + s.id + ': ' + e]));
		}
	});
	document.body.setAttribute('data-rendered', 'yes');
	document.body.setAttribute('data-render-ms', Date.now() - t0);
	/* since the browser started loading the page */
	document.body.setAttribute('data-ready-ms', Math.round(performance.now()));
}
main();
})();
