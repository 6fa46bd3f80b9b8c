package chare

// The trace as a page (--trace FILE.html): one self-contained file — its
// data, script and style inline, nothing fetched — that draws, like
// Projections' Timeline and Usage Profile, a lane per PE (grouped by
// process) with every entry method coloured by its name, the waits and
// the runtime's phases, a usage chart over time above it, a legend and a
// table of time per entry method; the wheel zooms, a drag pans, a hover
// names the entry, the chare, the duration and the message.
//
// Data: the entries as columns (PE, start and duration in ns, entry,
// chare, message kind and size) in little-endian typed arrays, base64 in
// a JSON block: about 40 bytes an entry. Drawing stays fast at 10⁶
// entries because it aggregates below the pixel: per lane, the entries
// that fall in one pixel column are drawn as one rectangle in the colour
// of the one that covers most of it, so a view costs a walk over the
// entries it shows (a binary search finds the first), never a rectangle
// each; the usage chart bins the same walk by pixel column.

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"

	"github.com/charmgo/charmgo/pe"
)

// writeHTML writes the page.
func (t *trace) writeHTML(w io.Writer) error {
	totals := t.entryTotals()
	colour := map[string]int{}
	for _, e := range totals {
		colour[e.Name] = e.Colour
	}
	var n, nIdle int
	for _, spans := range t.Spans {
		for i := range spans {
			switch spans[i].Kind {
			case pe.SpanEntry:
				n++
			case pe.SpanIdle:
				nIdle++
			}
		}
	}
	cols := struct {
		pe, name, kind    []byte
		start, dur        []byte
		chare, size       []byte
		ipe, istart, idur []byte
	}{}
	chareIdx := map[string]uint32{}
	var chares []string
	type phase struct {
		PE    int     `json:"pe"`
		Start float64 `json:"start"`
		Dur   float64 `json:"dur"`
		Label string  `json:"label"`
	}
	phases := []phase{} // a list even when empty: the page iterates it
	var end int64
	// each PE's first and last instant recorded: the span of its lane
	// that is the runtime's own time where it is neither entry nor wait
	peStart, peEnd := make([]float64, len(t.Spans)), make([]float64, len(t.Spans))
	for q, spans := range t.Spans {
		if len(spans) > 0 {
			peStart[q] = float64(spans[0].Start)
		}
		for i := range spans {
			s := &spans[i]
			end = max(end, s.Start+s.Dur)
			peEnd[q] = max(peEnd[q], float64(s.Start+s.Dur))
			switch s.Kind {
			case pe.SpanEntry:
				c := t.chare(s)
				k, ok := chareIdx[c]
				if !ok {
					k = uint32(len(chares))
					chareIdx[c] = k
					chares = append(chares, c)
				}
				cols.pe = binary.LittleEndian.AppendUint16(cols.pe, uint16(q))
				cols.start = binary.LittleEndian.AppendUint64(cols.start, math.Float64bits(float64(s.Start)))
				cols.dur = binary.LittleEndian.AppendUint64(cols.dur, math.Float64bits(float64(s.Dur)))
				cols.name = binary.LittleEndian.AppendUint16(cols.name, uint16(colour[spanName(s)]))
				cols.chare = binary.LittleEndian.AppendUint32(cols.chare, k)
				cols.kind = append(cols.kind, uint8(s.MsgKind))
				cols.size = binary.LittleEndian.AppendUint32(cols.size, s.Size)
			case pe.SpanIdle:
				cols.ipe = binary.LittleEndian.AppendUint16(cols.ipe, uint16(q))
				cols.istart = binary.LittleEndian.AppendUint64(cols.istart, math.Float64bits(float64(s.Start)))
				cols.idur = binary.LittleEndian.AppendUint64(cols.idur, math.Float64bits(float64(s.Dur)))
			case pe.SpanPhase:
				phases = append(phases, phase{PE: q, Start: float64(s.Start), Dur: float64(s.Dur), Label: s.Label})
			}
		}
	}
	names := make([]string, len(totals))
	for _, e := range totals {
		names[e.Colour] = e.Name
	}
	kinds := []string{}
	for k := pe.Kind(0); k <= pe.KindSystem; k++ {
		kinds = append(kinds, kindName(k))
	}
	data := map[string]any{
		"schema": TraceSchema, "program": t.Program, "args": t.Args, "started": t.Started, "end": float64(max(end, t.WallNs)),
		"pes": t.PEs, "processes": t.Processes, "missing": t.Missing, "names": names, "chares": chares, "kinds": kinds,
		"n": n, "nIdle": nIdle, "phases": phases, "peStart": peStart, "peEnd": peEnd,
	}
	// the columns, base64 of little-endian arrays, are streamed into the
	// data's JSON after the rest: most of the page, not copied again
	columns := []struct {
		name string
		b    []byte
	}{{"pe", cols.pe}, {"start", cols.start}, {"dur", cols.dur}, {"name", cols.name}, {"chare", cols.chare}, {"kind", cols.kind},
		{"size", cols.size}, {"ipe", cols.ipe}, {"istart", cols.istart}, {"idur", cols.idur}}
	bw := bufio.NewWriterSize(w, 1<<20)
	fmt.Fprintf(bw, pageHead, html.EscapeString(t.Program), html.EscapeString(t.Program), html.EscapeString(fmt.Sprint(t.Args)),
		t.PEs, len(t.Processes), t.Started.Format("2006-01-02 15:04:05"), float64(t.WallNs)/1e9, n)
	if len(t.Missing) > 0 {
		fmt.Fprintf(bw, "<p class=warn>The parts of processes %v did not come: their PEs' lanes are empty.</p>\n", t.Missing)
	}
	io.WriteString(bw, pageBody)
	// the table of time per entry method
	peTime := float64(max(end, t.WallNs)) * float64(t.PEs)
	for _, e := range totals {
		fmt.Fprintf(bw, "<tr><td><span class=swatch data-colour=%d></span>%s</td><td>%d</td><td>%.3f</td><td>%.1f%%</td><td>%.1f</td><td>%.1f</td></tr>\n",
			e.Colour, html.EscapeString(e.Name), e.Count, float64(e.Total)/1e6, 100*float64(e.Total)/max(peTime, 1), float64(e.Total)/float64(max(e.Count, 1))/1e3, float64(e.Max)/1e3)
	}
	io.WriteString(bw, "</tbody></table>\n<script id=trace-data type=\"application/json\">")
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	// JSON in a script block: "</" cannot occur in base64 or in
	// json.Marshal's escaped strings
	bw.Write(b[:len(b)-1]) // all but its closing brace
	for _, c := range columns {
		fmt.Fprintf(bw, ",%q:\"", c.name)
		enc := base64.NewEncoder(base64.StdEncoding, bw)
		enc.Write(c.b)
		enc.Close()
		bw.WriteByte('"')
	}
	bw.WriteByte('}')
	io.WriteString(bw, "</script>\n<script>\n"+pageScript+"</script>\n</body></html>\n")
	return bw.Flush()
}

const pageHead = `<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8><title>%s: charmgo trace</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 12px; color: #222; }
h1 { font-size: 17px; margin: 0 0 4px; }
.meta { color: #555; margin-bottom: 8px; }
.warn { color: #a00; }
#view { position: relative; user-select: none; }
#usage, #lanes { display: block; border: 1px solid #ccc; }
#usage { border-bottom: none; }
#tip { position: absolute; display: none; background: #fffff0; border: 1px solid #999; padding: 4px 6px; pointer-events: none; white-space: nowrap; font-size: 12px; box-shadow: 1px 1px 3px #0003; }
#bar { margin: 6px 0; }
#bar button { margin-right: 4px; }
#legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 8px 0; max-height: 140px; overflow: auto; }
.legend-item { white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 4px; vertical-align: -1px; border: 1px solid #0003; }
table { border-collapse: collapse; margin-top: 10px; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
</style></head>
<body>
<h1>%s</h1>
<div class=meta>arguments %s · %d PEs in %d processes · started %s · %.3f s · %d entry methods run</div>
`

const pageBody = `<div id=bar><button id=reset>whole run</button><button id=zin>zoom in</button><button id=zout>zoom out</button>
<span id=range></span> — wheel: zoom at the pointer; drag: pan; hover: what ran</div>
<div id=view><canvas id=usage></canvas><canvas id=lanes></canvas><div id=tip></div></div>
<div id=legend></div>
<table id=entries><thead><tr><th>entry method</th><th>count</th><th>total ms</th><th>of PE time</th><th>mean µs</th><th>longest µs</th></tr></thead><tbody>
`

const pageScript = `
"use strict";
const T = JSON.parse(document.getElementById("trace-data").textContent);
function col(s, Type) {
  const bin = atob(s), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}
const E = { pe: col(T.pe, Uint16Array), start: col(T.start, Float64Array), dur: col(T.dur, Float64Array),
  name: col(T.name, Uint16Array), chare: col(T.chare, Uint32Array), kind: col(T.kind, Uint8Array), size: col(T.size, Uint32Array) };
const I = { pe: col(T.ipe, Uint16Array), start: col(T.istart, Float64Array), dur: col(T.idur, Float64Array) };
const colour = i => "hsl(" + ((i * 137.508) % 360).toFixed(1) + ",62%," + (i % 2 ? "58%" : "46%") + ")";
const OTHER = 12; // the usage chart stacks the 12 entries with the most time, the rest together
// each PE's entries and waits are a run of the columns, by start
function ranges(pe, n) {
  const first = new Int32Array(T.pes).fill(0), last = new Int32Array(T.pes).fill(0);
  for (let i = n - 1; i >= 0; i--) first[pe[i]] = i;
  for (let i = 0; i < n; i++) last[pe[i]] = i + 1;
  for (let p = 0; p < T.pes; p++) if (last[p] === 0) first[p] = 0;
  return { first, last };
}
const ER = ranges(E.pe, T.n), IR = ranges(I.pe, T.nIdle);
// the longest entry, so that a search by start can look back far enough
let longest = 0; for (let i = 0; i < T.n; i++) longest = Math.max(longest, E.dur[i]);
let longestIdle = 0; for (let i = 0; i < T.nIdle; i++) longestIdle = Math.max(longestIdle, I.dur[i]);
function firstEnding(cols, r, p, t, maxDur) { // first index of PE p whose span may end after t
  let lo = r.first[p], hi = r.last[p];
  const from = t - maxDur;
  while (lo < hi) { const m = (lo + hi) >> 1; if (cols.start[m] < from) lo = m + 1; else hi = m; }
  return lo;
}
// layout
const LEFT = 96, LANE = 15, HEAD = 17, USAGE = 118, AXIS = 18, EVENTS = 15;
const rows = []; // {y, pe} or {y, header}
let y = AXIS + EVENTS; // a row for the names of instants (a failure, a rollback)
for (const pr of T.processes) {
  rows.push({ y, header: "process " + pr.rank + (pr.host ? " (" + pr.host + ")" : "") }); y += HEAD;
  for (let p = pr.first_pe; p < pr.first_pe + pr.pes; p++) { rows.push({ y, pe: p }); y += LANE; }
}
const lanesH = y + 4;
const usage = document.getElementById("usage"), lanes = document.getElementById("lanes"), tip = document.getElementById("tip");
let W = 800;
let t0 = 0, t1 = Math.max(T.end, 1);
function resize() {
  W = Math.max(400, document.documentElement.clientWidth - 30);
  usage.width = W; usage.height = USAGE; lanes.width = W; lanes.height = lanesH;
  draw();
}
const X = t => LEFT + (t - t0) / (t1 - t0) * (W - LEFT);
const Tm = x => t0 + (x - LEFT) / (W - LEFT) * (t1 - t0);
function fmt(ns) {
  if (Math.abs(ns) >= 1e9) return (ns / 1e9).toFixed(3) + " s";
  if (Math.abs(ns) >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
  if (Math.abs(ns) >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
  return ns.toFixed(0) + " ns";
}
// a tick's label: as few digits as the tick step needs
function fmtTick(ns, step) {
  const [div, unit] = Math.abs(ns) >= 1e9 || step >= 1e9 ? [1e9, " s"] : step >= 1e6 ? [1e6, " ms"] : step >= 1e3 ? [1e3, " µs"] : [1, " ns"];
  const digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / div) + 1e-9)));
  return (ns / div).toFixed(digits) + unit;
}
let drawn = 0;
function draw() {
  const began = performance.now();
  const g = lanes.getContext("2d"), u = usage.getContext("2d");
  g.clearRect(0, 0, W, lanesH); u.clearRect(0, 0, W, USAGE);
  const plotW = W - LEFT, binNs = (t1 - t0) / plotW;
  const busy = new Float64Array((OTHER + 1) * plotW), idle = new Float64Array(plotW);
  const addBin = (arr, stride, k, s, e) => { // ns of [s, e) into the bins they cover
    let b = Math.max(0, Math.floor((s - t0) / binNs)); const last = Math.min(plotW - 1, Math.floor((e - t0) / binNs));
    for (; b <= last; b++) {
      const lo = t0 + b * binNs, hi = lo + binNs, c = Math.min(e, hi) - Math.max(s, lo);
      if (c > 0) arr[b * stride + k] += c;
    }
  };
  // axis
  g.fillStyle = "#555"; g.font = "11px system-ui";
  // ticks at 1, 2 or 5 times a power of ten, about 120 px apart
  const want = (t1 - t0) / Math.max(1, plotW / 120), mag = Math.pow(10, Math.floor(Math.log10(want || 1)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(v => v >= want) || 10 * mag;
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const x = X(t); g.fillRect(x, AXIS - 5, 1, 5); g.fillText(fmtTick(t, step), x + 2, AXIS - 6);
  }
  drawn = 0;
  for (const row of rows) {
    if (row.header !== undefined) { g.fillStyle = "#333"; g.font = "bold 11px system-ui"; g.fillText(row.header, 4, row.y + 12); continue; }
    const p = row.pe;
    g.fillStyle = "#444"; g.font = "11px system-ui"; g.fillText("PE " + p, 8, row.y + 11);
    // the lane's ground is the runtime's own time (Projections draws it
    // black): what is neither an entry nor a wait; waits are drawn white
    // over it, the entries over both
    g.fillStyle = "#f4f4f4"; g.fillRect(LEFT, row.y + 1, plotW, LANE - 2);
    const pStart = Math.max(LEFT, X(T.peStart[p])), pEnd = Math.min(W, X(T.peEnd[p]));
    g.fillStyle = "#b8b8b8"; if (pEnd > pStart) g.fillRect(pStart, row.y + 6, pEnd - pStart, LANE - 12);
    for (let i = firstEnding(I, IR, p, t0, longestIdle); i < IR.last[p] && I.start[i] < t1; i++) {
      const s = I.start[i], e = s + I.dur[i]; if (e < t0) continue;
      addBin(idle, 1, 0, s, e);
      const x0 = Math.max(LEFT, X(s)), x1 = Math.min(W, X(e));
      g.fillStyle = "#fff"; g.fillRect(x0, row.y + 5, Math.max(x1 - x0, 0.5), LANE - 10);
    }
    // entries, aggregated below the pixel: one rectangle per pixel column
    // for the entries that fall in it, in the colour of the one that
    // covers most of it
    let colX = -1, colBest = -1, colCover = 0;
    const flush = () => { if (colX >= 0) { g.fillStyle = colour(E.name[colBest]); g.fillRect(colX, row.y + 2, 1, LANE - 4); } colX = -1; };
    for (let i = firstEnding(E, ER, p, t0, longest); i < ER.last[p] && E.start[i] < t1; i++) {
      const s = E.start[i], e = s + E.dur[i]; if (e < t0) continue;
      drawn++;
      const k = E.name[i] < OTHER ? E.name[i] : OTHER;
      addBin(busy, OTHER + 1, k, s, e);
      const x0 = X(s), x1 = X(e);
      if (x1 - x0 >= 1) { flush(); g.fillStyle = colour(E.name[i]); g.fillRect(Math.max(LEFT, x0), row.y + 2, Math.min(W, x1) - Math.max(LEFT, x0), LANE - 4); continue; }
      const px = Math.floor(x0);
      if (px !== colX) { flush(); colX = px; colBest = i; colCover = 0; }
      if (E.dur[i] > colCover) { colCover = E.dur[i]; colBest = i; }
    }
    flush();
  }
  // the runtime's phases: bands across their PE's lane, instants as lines
  // named in the row above the lanes, a name only where it does not
  // overwrite the one before
  let labelEnd = -1;
  g.font = "11px system-ui";
  for (const ph of T.phases) {
    const row = rows.find(r => r.pe === ph.pe); if (!row) continue;
    const x0 = X(ph.start), x1 = X(ph.start + ph.dur);
    if (x1 < LEFT || x0 > W) continue;
    if (ph.dur === 0) {
      g.fillStyle = "#d00"; g.fillRect(x0, AXIS, 2, lanesH - AXIS);
      if (x0 + 3 > labelEnd) { g.fillText(ph.label, x0 + 4, AXIS + 11); labelEnd = x0 + 4 + g.measureText(ph.label).width + 6; }
      continue;
    }
    g.fillStyle = ph.label.startsWith("recovery") || ph.label === "rollback" ? "#ff000030" : "#0000ff20";
    g.fillRect(Math.max(LEFT, x0), row.y, Math.max(1, Math.min(W, x1) - Math.max(LEFT, x0)), LANE);
  }
  // usage over time: the entries (stacked by name), the runtime's own
  // time (neither an entry nor a wait), the waits
  const pes = T.pes;
  u.fillStyle = "#333"; u.font = "11px system-ui"; u.fillText("usage", 8, 14); u.fillText("100%", 8, 28); u.fillText("0%", 8, USAGE - 4);
  u.fillStyle = "#666"; u.fillText("entries in colour, the runtime's own time grey, waits blank", LEFT + 4, 12);
  let usageColumns = 0; // columns with an entry in them, for a test to see the chart drawn
  for (let b = 0; b < plotW; b++) {
    const total = binNs * pes; let yb = USAGE, used = 0;
    for (let k = 0; k <= OTHER; k++) {
      const v = busy[b * (OTHER + 1) + k]; if (v <= 0) continue;
      const h = v / total * (USAGE - 24); used += v;
      u.fillStyle = k < OTHER ? colour(k) : "#888"; u.fillRect(LEFT + b, yb - h, 1, h); yb -= h;
    }
    const over = Math.max(0, total - used - idle[b]) / total * (USAGE - 24);
    u.fillStyle = "#b8b8b8"; u.fillRect(LEFT + b, yb - over, 1, over);
    if (used > 0) usageColumns++;
  }
  document.body.dataset.usageColumns = usageColumns;
  document.getElementById("range").textContent = fmt(t0) + " to " + fmt(t1) + " (" + fmt(t1 - t0) + ")";
  document.body.dataset.drawn = drawn;
  document.body.dataset.drawMs = (performance.now() - began).toFixed(1);
}
// legend
const legend = document.getElementById("legend");
T.names.forEach((name, i) => {
  const d = document.createElement("span"); d.className = "legend-item";
  d.innerHTML = '<span class=swatch style="background:' + colour(i) + '"></span>'; d.appendChild(document.createTextNode(name));
  legend.appendChild(d);
});
for (const s of document.querySelectorAll("#entries .swatch")) s.style.background = colour(+s.dataset.colour);
// zoom and pan
function zoom(f, at) {
  const span = Math.max((t1 - t0) * f, 100);
  t0 = Math.max(0, at - (at - t0) * span / (t1 - t0)); t1 = Math.min(Math.max(T.end, 1), t0 + span); draw();
}
lanes.addEventListener("wheel", ev => { ev.preventDefault(); zoom(ev.deltaY > 0 ? 1.25 : 0.8, Tm(ev.offsetX)); }, { passive: false });
usage.addEventListener("wheel", ev => { ev.preventDefault(); zoom(ev.deltaY > 0 ? 1.25 : 0.8, Tm(ev.offsetX)); }, { passive: false });
let dragX = null;
lanes.addEventListener("mousedown", ev => { dragX = ev.offsetX; });
window.addEventListener("mouseup", () => { dragX = null; });
lanes.addEventListener("mousemove", ev => {
  if (dragX !== null) {
    const dt = (ev.offsetX - dragX) / (W - LEFT) * (t1 - t0), span = t1 - t0;
    t0 = Math.max(0, t0 - dt); t1 = t0 + span; dragX = ev.offsetX; draw(); return;
  }
  hover(ev);
});
lanes.addEventListener("mouseleave", () => { tip.style.display = "none"; });
document.getElementById("reset").onclick = () => { t0 = 0; t1 = Math.max(T.end, 1); draw(); };
document.getElementById("zin").onclick = () => zoom(0.5, (t0 + t1) / 2);
document.getElementById("zout").onclick = () => zoom(2, (t0 + t1) / 2);
function hover(ev) {
  const row = rows.find(r => r.pe !== undefined && ev.offsetY >= r.y && ev.offsetY < r.y + LANE);
  if (!row || ev.offsetX < LEFT) { tip.style.display = "none"; return; }
  const p = row.pe, t = Tm(ev.offsetX), slack = (t1 - t0) / (W - LEFT);
  let best = -1;
  for (let i = firstEnding(E, ER, p, t - slack, longest); i < ER.last[p] && E.start[i] <= t + slack; i++) {
    if (E.start[i] + E.dur[i] >= t - slack && (best < 0 || E.dur[i] > E.dur[best])) best = i;
  }
  let text;
  if (best >= 0) {
    text = "<b>" + T.names[E.name[best]] + "</b><br>" + T.chares[E.chare[best]] + " on PE " + p + "<br>" + fmt(E.dur[best]) +
      " from " + fmt(E.start[best]) + "<br>" + T.kinds[E.kind[best]] + " message" + (E.size[best] ? ", " + E.size[best] + " bytes" : "");
  } else {
    const ph = T.phases.find(h => h.pe === p && t >= h.start - slack && t <= h.start + h.dur + slack);
    let wait = -1;
    for (let i = firstEnding(I, IR, p, t, longestIdle); i < IR.last[p] && I.start[i] <= t; i++) if (I.start[i] + I.dur[i] >= t) wait = i;
    text = ph ? "<b>" + ph.label + "</b><br>PE " + p + ", " + fmt(ph.dur) + " from " + fmt(ph.start)
      : wait >= 0 ? "<b>waiting</b><br>PE " + p + ", " + fmt(I.dur[wait]) + " from " + fmt(I.start[wait])
      : "PE " + p + " at " + fmt(t) + ": the runtime's own time";
  }
  tip.innerHTML = text; tip.style.display = "block";
  tip.style.left = Math.min(ev.offsetX + 14, W - 260) + "px"; tip.style.top = (USAGE + ev.offsetY + 14) + "px";
}
window.addEventListener("resize", resize);
resize();
document.body.dataset.lanes = rows.filter(r => r.pe !== undefined).length;
document.body.dataset.lanePes = rows.filter(r => r.pe !== undefined).map(r => r.pe).join(" ");
document.body.dataset.entries = T.n;
document.body.dataset.loadMs = performance.now().toFixed(0); // from the start of the page's load
if (location.hash === "#bench") { // how long a zoom or a pan takes to redraw, at the worst of 20
  let worst = 0;
  for (let i = 0; i < 10; i++) { zoom(0.6, (t0 + t1) / 2); worst = Math.max(worst, +document.body.dataset.drawMs); }
  for (let i = 0; i < 10; i++) { zoom(1 / 0.6, t0 + (t1 - t0) / 3); worst = Math.max(worst, +document.body.dataset.drawMs); }
  document.body.dataset.worstDrawMs = worst.toFixed(1);
}
document.body.dataset.ready = "1";
`
