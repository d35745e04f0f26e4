"""The HTML report's stylesheet and script, inlined into every page (no file beside it).

The script never writes markup: it reads the embedded JSON and builds elements with
``textContent``, so a trajectory's text cannot become HTML, whatever it holds.
"""

CSS = """
:root {
  --bg: #f5f6f8; --card: #ffffff; --ink: #1c2330; --muted: #5f6b7a; --line: #e2e6ec;
  --accent: #2f6fde; --before: #a9b4c4; --after: #2f6fde; --target: #d9480f;
  --warn: #b35c00; --bad: #c92a2a; --ok: #2b8a3e;
  --head: #5470c6; --tail: #3f9e8f; --summary: #e3a008; --region: #ef7d3c;
  --middle: #c3c9d3;
  --sans: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "Noto Sans",
    "DejaVu Sans", Arial, sans-serif;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); font: 14px/1.45 var(--sans);
  -webkit-font-smoothing: antialiased; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 24px 48px; }
header.top h1 { font-size: 22px; font-weight: 650; margin: 0 0 4px; letter-spacing: -0.01em; }
header.top .sub { color: var(--muted); font-size: 13px; }
header.top .sub code { font-family: var(--mono); font-size: 12px; color: var(--ink);
  background: #eaedf2; padding: 1px 5px; border-radius: 4px; word-break: break-all; }
h2 { font-size: 15px; font-weight: 650; margin: 0 0 2px; }
.hint { color: var(--muted); font-size: 12.5px; margin: 0 0 12px; }
section { margin-top: 22px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 16px 18px; }
.num, td.num, th.num { font-variant-numeric: tabular-nums; text-align: right;
  white-space: nowrap; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(168px, 1fr));
  gap: 10px; margin-top: 18px; }
.figure { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 11px 14px 12px; }
.figure .label { color: var(--muted); font-size: 12px; text-transform: uppercase;
  letter-spacing: 0.04em; }
.figure .value { font-size: 22px; font-weight: 650; font-variant-numeric: tabular-nums;
  margin-top: 2px; white-space: nowrap; }
.figure .value .arrow { color: var(--muted); font-weight: 400; padding: 0 3px; }
.figure .detail { color: var(--muted); font-size: 12.5px; font-variant-numeric: tabular-nums;
  margin-top: 1px; }
.figure.warn .value { color: var(--warn); }
.figure.bad .value { color: var(--bad); }
.figure.wide { grid-column: span 2; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 14px; }
.charts .card.full { grid-column: 1 / -1; }
@media (max-width: 820px) { .charts { grid-template-columns: 1fr; }
  .figure.wide { grid-column: auto; } }
svg.chart { width: 100%; height: auto; display: block; font-family: var(--sans); }
svg.chart text { fill: var(--muted); font-size: 11px; font-variant-numeric: tabular-nums; }
svg.chart text.axis-title { fill: var(--ink); font-size: 11.5px; }
svg.chart text.marker { font-weight: 600; }
svg.chart .grid { stroke: var(--line); stroke-width: 1; }
svg.chart .axis { stroke: #9aa3b0; stroke-width: 1; }
svg.chart .before { fill: var(--before); }
svg.chart .after, svg.chart .bar { fill: var(--after); }
svg.chart .fid { fill: var(--ok); }
svg.chart .bar:hover, svg.chart .before:hover, svg.chart .after:hover { opacity: 0.8; }
svg.chart .target { stroke: var(--target); stroke-width: 1.5; stroke-dasharray: 5 3; }
svg.chart text.target-label { fill: var(--target); }
svg.chart .mean { stroke: var(--ink); stroke-width: 1.2; stroke-dasharray: 2 3; }
svg.chart text.mean-label { fill: var(--ink); }
.legend { display: flex; flex-wrap: wrap; gap: 14px; font-size: 12.5px; color: var(--muted);
  margin: 2px 0 6px; }
.legend span::before { content: ""; display: inline-block; width: 10px; height: 10px;
  border-radius: 2px; margin-right: 6px; vertical-align: -1px; background: var(--c); }
.legend .line::before { height: 0; border-top: 2px dashed var(--c); border-radius: 0;
  vertical-align: 3px; width: 14px; }
.stats { font-size: 12.5px; color: var(--muted); margin-top: 6px;
  font-variant-numeric: tabular-nums; }
.stats b { color: var(--ink); font-weight: 600; }
.empty { color: var(--muted); font-style: italic; padding: 18px 0; }
table { border-collapse: collapse; width: 100%; }
table.rows { font-size: 13px; }
table.rows th { text-align: left; font-weight: 600; color: var(--muted); font-size: 12px;
  border-bottom: 1px solid var(--line); padding: 0; white-space: nowrap; }
table.rows th button { all: unset; cursor: pointer; display: block; padding: 7px 10px;
  width: 100%; box-sizing: border-box; }
table.rows th.num button { text-align: right; }
table.rows th button:hover { color: var(--ink); }
table.rows th button:focus-visible { outline: 2px solid var(--accent); outline-offset: -2px; }
table.rows th[aria-sort] button { color: var(--ink); }
/* The arrow is decoration (aria-sort says it): the empty alt text keeps it out of the
   button's name where the browser supports it. */
table.rows th[aria-sort="ascending"] button::after { content: " \\25B2"; content: " \\25B2" / "";
  font-size: 9px; }
table.rows th[aria-sort="descending"] button::after { content: " \\25BC"; content: " \\25BC" / "";
  font-size: 9px; }
table.rows td { padding: 7px 10px; border-bottom: 1px solid #eef0f4; vertical-align: top; }
table.rows tbody tr { cursor: pointer; }
table.rows tbody tr:hover { background: #f3f6fc; }
table.rows tbody tr:focus-visible { outline: 2px solid var(--accent); outline-offset: -2px; }
table.rows tbody tr.selected { background: #e7effd; }
td.mono, .mono { font-family: var(--mono); font-size: 12px; }
td.id { max-width: 260px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
td.loc { white-space: nowrap; color: var(--muted); }
td.over { color: var(--warn); }
.pill { display: inline-block; border-radius: 999px; padding: 0 8px; font-size: 11.5px;
  font-weight: 600; line-height: 19px; white-space: nowrap; }
.pill.failed { background: #fde8e8; color: var(--bad); }
.pill.over { background: #fff1e0; color: var(--warn); }
/* A long table scrolls in place, so the timeline below it stays in reach. */
.table-wrap { overflow: auto; max-height: 520px; border-bottom: 1px solid var(--line); }
table.rows thead th { position: sticky; top: 0; background: var(--card); z-index: 1; }
.more { color: var(--muted); font-size: 12.5px; margin-top: 10px; }
#timeline { margin-top: 14px; }
#timeline h3 { font-size: 15px; margin: 0 0 2px; font-weight: 650; word-break: break-all; }
#timeline h4.window { font-size: 14px; margin: 14px 0 4px; font-weight: 600; }
#timeline .status { color: var(--muted); margin-bottom: 12px; font-size: 13px; }
.strip-wrap { position: relative; padding-top: 18px; margin-bottom: 4px; }
.strip { display: flex; height: 30px; border-radius: 5px; overflow: hidden;
  background: #eef0f4; }
.strip div { height: 100%; min-width: 1px; border-right: 1px solid rgba(255,255,255,0.65); }
.strip-target { position: absolute; top: 0; bottom: -4px; border-left: 2px dashed var(--target); }
.strip-target span { position: absolute; top: -1px; left: 4px; font-size: 11px;
  color: var(--target); white-space: nowrap; font-weight: 600; }
.strip-target.flip span { left: auto; right: 4px; }
.p-head { background: var(--head); --c: var(--head); }
.p-tail { background: var(--tail); --c: var(--tail); }
.p-summary { background: var(--summary); --c: var(--summary); }
.p-region { background: var(--region); --c: var(--region); }
.p-middle { background: var(--middle); --c: var(--middle); }
.legend span.p-head, .legend span.p-tail, .legend span.p-summary, .legend span.p-region,
.legend span.p-middle { background: none; }
.turns-wrap { max-height: 560px; overflow: auto; border: 1px solid var(--line);
  border-radius: 8px; margin-top: 12px; }
table.turns { font-size: 12.5px; }
table.turns th { position: sticky; top: 0; background: #f8f9fb; text-align: left;
  font-weight: 600; color: var(--muted); font-size: 11.5px; padding: 6px 8px;
  border-bottom: 1px solid var(--line); z-index: 1; }
table.turns td { padding: 3px 8px; border-bottom: 1px solid #f1f3f6; white-space: nowrap; }
table.turns tr.group td { background: #fafbfc; font-weight: 600; color: var(--ink);
  padding: 6px 8px; border-bottom: 1px solid var(--line); white-space: normal; }
table.turns tr.group td i { display: inline-block; width: 9px; height: 9px;
  border-radius: 2px; margin-right: 7px; }
table.turns td.text { white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
  max-width: 520px; color: #384252; }
table.turns td.barcell { width: 150px; }
.tbar { height: 8px; border-radius: 2px; min-width: 1px; }
.role { font-family: var(--mono); font-size: 11.5px; }
.note { background: #fff8e6; border: 1px solid #f3dfb0; color: #6b4e00; border-radius: 8px;
  padding: 8px 12px; font-size: 12.5px; margin-top: 10px; }
table.fixes { font-size: 13px; margin-bottom: 10px; }
table.fixes th { text-align: left; font-weight: 600; color: var(--muted); font-size: 12px;
  border-bottom: 1px solid var(--line); padding: 7px 10px; }
table.fixes td { padding: 7px 10px; border-bottom: 1px solid #eef0f4; }
table.fixes .num { text-align: right; font-variant-numeric: tabular-nums;
  white-space: nowrap; }
.best { font-size: 13px; margin: 10px 0 6px; }
.best code { font-family: var(--mono); font-size: 12px; background: #f3f6fc;
  border-radius: 4px; padding: 1px 5px; }
footer { color: var(--muted); font-size: 12px; margin-top: 28px; }
"""

JS = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var table = document.getElementById("flagged");
  var panel = document.getElementById("timeline");
  if (!table || !panel) { return; }
  var tbody = table.tBodies[0];
  var TITLES = {
    head: "protected head", tail: "protected tail", summary: "summary",
    region: "region chosen for a summary (not summarized)",
    middle: "compressible middle (kept)"
  };

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function fmt(n) { return Number(n).toLocaleString("en-US"); }
  function plural(n, word) { return fmt(n) + " " + word + (n === 1 ? "" : "s"); }

  // Sorting: each cell carries its sort value in data-v.
  var heads = table.tHead.rows[0].cells;
  function sortBy(col, dir) {
    var numeric = heads[col].classList.contains("num");
    var rows = Array.prototype.slice.call(tbody.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].getAttribute("data-v"), y = b.cells[col].getAttribute("data-v");
      var c = numeric ? Number(x) - Number(y) : x.localeCompare(y);
      if (c === 0) { c = Number(a.getAttribute("data-i")) - Number(b.getAttribute("data-i")); }
      return dir === "ascending" ? c : -c;
    });
    rows.forEach(function (r) { tbody.appendChild(r); });
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    heads[col].setAttribute("aria-sort", dir);
  }
  Array.prototype.forEach.call(heads, function (th, col) {
    var button = th.querySelector("button");
    if (!button) { return; }
    button.addEventListener("click", function () {
      var now = th.getAttribute("aria-sort");
      var dir = now ? (now === "ascending" ? "descending" : "ascending")
        : (th.classList.contains("num") ? "descending" : "ascending");
      sortBy(col, dir);
    });
  });

  function part(name) { return "p-" + (TITLES[name] ? name : "middle"); }

  function strip(t) {
    var scale = Math.max(t.total, t.target, 1);
    var wrap = el("div", "strip-wrap");
    var bar = el("div", "strip");
    bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", "turns by tokens");
    t.turns.forEach(function (turn) {
      var seg = el("div", part(turn[5]));
      seg.style.width = (100 * turn[4] / scale) + "%";
      seg.title = "#" + turn[0] + " " + turn[3] + " \\u00b7 " + fmt(turn[4]) + " tokens \\u00b7 " +
        (TITLES[turn[5]] || turn[5]);
      bar.appendChild(seg);
    });
    wrap.appendChild(bar);
    var at = 100 * t.target / scale;
    var mark = el("div", "strip-target" + (at > 80 ? " flip" : ""));
    mark.style.left = at + "%";
    mark.appendChild(el("span", null, "target " + fmt(t.target)));
    wrap.appendChild(mark);
    return wrap;
  }

  function legend(t) {
    var box = el("div", "legend");
    Object.keys(t.parts).forEach(function (name) {
      var item = el("span", part(name), (TITLES[name] || name) + " " + fmt(t.parts[name]));
      box.appendChild(item);
    });
    return box;
  }

  function turnsTable(t) {
    var wrap = el("div", "turns-wrap");
    var tab = el("table", "turns");
    var head = tab.createTHead().insertRow();
    ["#", "orig", "role", "tokens", "", "first line"].forEach(function (h, i) {
      var th = el("th", i < 2 || i === 3 ? "num" : null, h);
      head.appendChild(th);
    });
    var body = tab.createTBody();
    var biggest = 1;
    t.turns.forEach(function (turn) { biggest = Math.max(biggest, turn[4]); });
    var i = 0;
    while (i < t.turns.length) {
      var j = i, sum = 0;
      while (j < t.turns.length && t.turns[j][5] === t.turns[i][5]) { sum += t.turns[j][4]; j++; }
      var name = t.turns[i][5], title;
      if (name === "summary") {
        var s = t.turns[i];
        title = "summarized region: original turns " + s[1] + "\\u2013" + (s[2] - 1) + " (" +
          plural(s[2] - s[1], "turn") + ") \\u2192 summary of " + fmt(sum) + " tokens";
      } else {
        title = (TITLES[name] || name) + ": " + plural(j - i, "turn") + ", " + fmt(sum) +
          " tokens";
      }
      var g = body.insertRow();
      g.className = "group";
      var gc = g.insertCell();
      gc.colSpan = 6;
      gc.appendChild(el("i", part(name)));
      gc.appendChild(document.createTextNode(title));
      for (var k = i; k < j; k++) {
        var turn = t.turns[k];
        var r = body.insertRow();
        r.appendChild(el("td", "num", turn[0]));
        r.appendChild(el("td", "num", turn[2] - turn[1] === 1 ? turn[1]
          : turn[1] + "\\u2013" + (turn[2] - 1)));
        var role = el("td");
        role.appendChild(el("span", "role", turn[3]));
        r.appendChild(role);
        r.appendChild(el("td", "num", fmt(turn[4])));
        var cell = el("td", "barcell");
        var tb = el("div", "tbar " + part(turn[5]));
        tb.style.width = (100 * turn[4] / biggest) + "%";
        cell.appendChild(tb);
        r.appendChild(cell);
        var text = el("td", "text", turn[6]);
        text.title = turn[6];
        r.appendChild(text);
      }
      i = j;
    }
    wrap.appendChild(tab);
    return wrap;
  }

  function show(index) {
    var row = data.rows[index];
    if (!row) { return; }
    Array.prototype.forEach.call(tbody.rows, function (r) {
      var on = Number(r.getAttribute("data-i")) === index;
      r.classList.toggle("selected", on);
      r.setAttribute("aria-selected", on ? "true" : "false");
    });
    while (panel.firstChild) { panel.removeChild(panel.firstChild); }
    var title = el("h3");
    title.appendChild(document.createTextNode("Timeline of "));
    title.appendChild(el("span", "mono", row.id === null ? "(no id)" : row.id));
    panel.appendChild(title);
    panel.appendChild(el("div", "status",
      row.location + " \\u00b7 " + (row.failed ? "failed: " : "still over the limit: ") +
      (row.reason || "over the target") + (row.detail ? " (" + row.detail + ")" : "") +
      " \\u00b7 tokens " + fmt(row.before) + " \\u2192 " +
      fmt(row.after) + ", turns " + fmt(row.turns_before) + " \\u2192 " + fmt(row.turns_after)));
    var t = row.timeline;
    if (row.windows && row.windows.length) {
      /* --output-mode windows: the source row's windows, each with its own timeline. */
      row.windows.forEach(function (w) {
        var head = el("h4", "window", "Window " + w.window + " of " + w.windows +
          " \u00b7 " + fmt(w.tokens) + " tokens" + (w.over ? ", over: " + w.over : ""));
        panel.appendChild(head);
        if (w.timeline) {
          panel.appendChild(legend(w.timeline));
          panel.appendChild(strip(w.timeline));
          panel.appendChild(turnsTable(w.timeline));
        }
      });
    } else if (!t) {
      panel.appendChild(el("div", "note", row.note || "no timeline for this row"));
    } else {
      panel.appendChild(legend(t));
      panel.appendChild(strip(t));
      var over = t.total - t.target, prot = (t.parts.head || 0) + (t.parts.tail || 0);
      panel.appendChild(el("div", "stats",
        fmt(t.total) + " tokens as written; target " + fmt(t.target) + ": " +
        (over > 0 ? "over by " + fmt(over) : "within, " + fmt(-over) + " to spare") +
        "; protected head + tail alone " + fmt(prot) + " tokens" +
        (prot > t.target ? ", over the target" : "")));
      panel.appendChild(turnsTable(t));
    }
    panel.hidden = false;
    panel.scrollIntoView({block: "nearest"});
  }

  tbody.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr");
    if (tr) { show(Number(tr.getAttribute("data-i"))); }
  });
  tbody.addEventListener("keydown", function (ev) {
    if (ev.key !== "Enter" && ev.key !== " ") { return; }
    var tr = ev.target.closest("tr");
    if (tr) { ev.preventDefault(); show(Number(tr.getAttribute("data-i"))); }
  });
})();
"""
