"""`report --html`: a finished run as one self-contained HTML page (§16).

`render_html` is a pure function of `ReportData` to text. The page loads nothing: its
CSS, script and SVG charts are inline and a Content-Security-Policy forbids every fetch.
Every value from the run is escaped where it lands: HTML-escaped in markup, and in the
embedded JSON ``<``, ``>`` and ``&`` are written as ``\\u003c``... so no text can close
the script element; the script reads that JSON and only ever sets ``textContent``.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..core.counted import counted
from ..engine.ours import HTML_MARKER
from .fixes import head_help
from .html_assets import CSS, JS
from .report_data import Histogram, ReportData, ShownRow

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src data:; base-uri 'none'; form-action 'none'")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SOURCE_COLOURS = {"llm": "#2f6fde", "cache": "#3f9e8f", "extractive": "#7c5cc4",
                   "fallback": "#e3a008"}

# Chart geometry (SVG user units; the SVG scales to its card's width).
_W, _H = 560, 250
_LEFT, _RIGHT, _TOP, _BOTTOM = 54, 14, 22, 46


def esc(value: Any) -> str:
    """``value`` as text safe in HTML content and in double-quoted attributes."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(value: Any) -> str:
    """JSON that cannot end a ``<script>`` element or start a comment or a tag in it."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    # These characters only occur inside JSON strings, where the escapes mean the same.
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_html(data: ReportData) -> str:
    """The whole page for ``data``."""
    body = [
        _header(data),
        _figures(data),
        _charts(data),
        _fixes(data),
        _flagged(data),
        '<footer>Written by <span class="mono">trajectory-compressor report --html</span>. '
        "A self-contained page: nothing is loaded from anywhere.</footer>",
    ]
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{HTML_MARKER}
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Compression report: {esc(_tail(data.output, 60))}</title>
<style>{CSS}</style>
</head>
<body>
<main>
{"".join(body)}
</main>
<script type="application/json" id="report-data">{script_json(_page_data(data))}</script>
<script>{JS}</script>
</body>
</html>
"""
    # A lone surrogate (valid in JSON strings, no Unicode character) cannot be written.
    return _SURROGATE.sub("\ufffd", page)


def _tail(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _page_data(data: ReportData) -> dict[str, Any]:
    return {"target": data.target, "rows": [_row_data(r) for r in data.shown]}


def _row_data(r: ShownRow) -> dict[str, Any]:
    return {"id": None if r.id is None else str(r.id), "location": r.location,
            "reason": r.reason, "code": r.code, "failed": r.failed, "before": r.before,
            "after": r.after, "turns_before": r.turns_before, "turns_after": r.turns_after,
            "timeline": r.timeline, "note": r.note, "detail": r.detail,
            "windows": r.windows}


# Header and figures

def _header(data: ReportData) -> str:
    m = data.metrics or {}
    when = (m.get("processing") or {}).get("end_time")
    settings = m.get("settings") or {}
    tokenizer = (settings.get("tokenizer") or {}).get("name")
    bits = [f"output <code>{esc(data.output)}</code>",
            f"target <b>{data.target:,}</b> tokens per row"]
    if tokenizer:
        bits.append(f"tokenizer {esc(tokenizer)}")
    if when:
        bits.append(f"finished {esc(str(when).replace('T', ' ')[:19])}")
    notes = "".join(f'<div class="note">{esc(n)}</div>' for n in data.notes)
    if data.metrics is None:
        notes += ('<div class="note">This run wrote no metrics file (metrics were off): the '
                  "figures below are counted from its output.</div>")
    return (f'<header class="top"><h1>Trajectory compression report</h1>'
            f'<div class="sub">{" · ".join(bits)}</div>{notes}</header>')


def _figure(label: str, value: str, detail: str = "", kind: str = "") -> str:
    cls = f"figure {kind}".strip()
    extra = f'<div class="detail">{detail}</div>' if detail else ""
    return (f'<div class="{cls}"><div class="label">{esc(label)}</div>'
            f'<div class="value">{value}</div>{extra}</div>')


def _share(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else ""


def _figures(data: ReportData) -> str:
    m = data.metrics or {}
    s, tok = m.get("summary") or {}, m.get("tokens") or {}
    summ, proc = m.get("summarization") or {}, m.get("processing") or {}
    rows = data.rows
    rejected = s.get("rows_rejected")
    out = [
        _figure("Rows", f"{rows:,}"),
        _figure("Compressed", f"{data.compressed:,}", _share(data.compressed, rows)),
        _figure("Skipped", f"{data.skipped:,}",
                " · ".join(filter(None, [_share(data.skipped, rows), "under target"]))),
        _figure("Still over limit", f"{data.over_limit:,}", _share(data.over_limit, rows),
                "warn" if data.over_limit else ""),
        _figure("Failed", f"{data.failed:,}", _share(data.failed, rows),
                "bad" if data.failed else ""),
        _figure("Rejected", "–" if rejected is None else f"{rejected:,}",
                "unreadable input rows", "bad" if rejected else ""),
    ]
    if tok:
        before, after = tok.get("total_before", 0), tok.get("total_after", 0)
        out.append(_figure(
            "Tokens before → after",
            f'{_compact(before)}<span class="arrow">→</span>{_compact(after)}',
            f"{before:,} → {after:,}; saved {tok.get('total_saved', before - after):,}",
            "wide"))
        out.append(_figure("Overall ratio", f"{tok.get('overall_compression_ratio', 1.0):.4f}",
                           "tokens after ÷ before"))
    sources = {k: v for k, v in data.sources.items() if v}
    out.append(_figure("Summaries", f"{sum(sources.values()):,}",
                       esc(", ".join(f"{k} {v:,}" for k, v in sources.items()) or "none")))
    if summ:
        out.append(_figure("API calls", f"{summ.get('total_api_calls', 0):,}",
                           f"errors {summ.get('total_errors', 0):,}, retries "
                           f"{summ.get('retries', 0):,}"))
    usage = m.get("usage") or {}
    if usage.get("total_tokens"):
        out.append(_figure("Summarizer usage", _compact(usage["total_tokens"]),
                           f"{usage.get('prompt_tokens', 0):,} prompt + "
                           f"{usage.get('completion_tokens', 0):,} completion"))
    distill = m.get("distill") or {}
    if distill.get("turns"):
        rules = distill.get("saved_by_rule") or {}
        out.append(_figure("Distilled", _compact(distill.get("tokens_saved", 0)),
                           esc(f"tokens saved in {distill['turns']:,} tool turns; "
                               + ", ".join(f"{k} {v:,}" for k, v in rules.items())), "wide"))
    windows = m.get("windows") or {}
    if windows.get("windowed_rows"):  # --output-mode windows (§20), per source row
        rows = windows["windowed_rows"]
        out.append(_figure("Windows", f"{windows.get('windows', 0):,}",
                           esc(f"from {rows:,} source rows "
                               f"({windows.get('windows', 0) / rows:.1f} per row); "
                               f"{windows.get('summaries', 0):,} summaries; assistant "
                               f"tokens trained {windows.get('trained_share', 0):.0%}"
                               + (f"; {windows['windows_over']:,} windows over the target, "
                                  f"the others train "
                                  f"{windows.get('trained_within_target_share', 0):.0%}"
                                  if windows.get("windows_over") else "")),
                           "wide"))
    strategy = m.get("strategy") or {}
    if strategy.get("rows_by_strategy"):  # §19: what the strategy did to the rows over
        rows = strategy["rows_by_strategy"]
        kept = strategy.get("assistant_tokens_kept", 1.0)
        out.append(_figure("Assistant tokens kept", f"{kept:.1%}",
                           esc("rows over the target: " + ", ".join(
                               f"{k} {v:,}" for k, v in rows.items())
                               + (f"; {strategy.get('masked_turns', 0):,} tool outputs masked"
                                  f" ({strategy.get('masked_tokens', 0):,} tokens)"
                                  if strategy.get("masked_turns") else "")), "wide"))
    if proc.get("duration_seconds") is not None:
        out.append(_figure("Time", _duration(proc["duration_seconds"])))
    return f'<section class="figures">{"".join(out)}</section>'


def _compact(n: float) -> str:
    """``1.12M``, ``686k``, ``950``."""
    n = float(n)
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            v = n / size
            return f"{v:.3g}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{n:.0f}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


# Charts

def _charts(data: ReportData) -> str:
    cards = [_tokens_card(data), _ratio_card(data), _sources_card(data)]
    if data.fidelity is not None:
        cards.append(_fidelity_card(data))
    return f'<section class="charts">{"".join(cards)}</section>'


def _card(title: str, hint: str, inner: str, full: bool = False) -> str:
    cls = "card full" if full else "card"
    return f'<div class="{cls}"><h2>{esc(title)}</h2><p class="hint">{hint}</p>{inner}</div>'


def _legend(items: Sequence[tuple[str, str, bool]]) -> str:
    spans = "".join(f'<span class="{"line" if line else ""}" style="--c:{colour}">'
                    f"{esc(label)}</span>" for label, colour, line in items)
    return f'<div class="legend">{spans}</div>'


def _tokens_card(data: ReportData) -> str:
    before, after = data.tokens_before, data.tokens_after
    rows = before.total
    legend = _legend([("before", "var(--before)", False), ("after", "var(--after)", False),
                      (f"target {data.target:,}", "var(--target)", True)])
    svg = _histogram_svg([("before", before), ("after", after)], x_title="tokens per row",
                         x_label=_compact, tip=lambda lo, hi: f"{lo:,.0f}–{hi:,.0f} tokens",
                         markers=[(data.target, f"target {data.target:,}", "target")],
                         label="tokens per row before and after, against the target",
                         wide=True)
    hint = (f"{rows:,} rows; bins of {before.edges[1] - before.edges[0]:,.0f} tokens. "
            f"Over the target: {data.over_before:,} rows before, {data.over_after:,} after.")
    return _card("Tokens per row, before and after", hint, legend + svg, full=True)


def _ratio_card(data: ReportData) -> str:
    h = data.ratios
    avg = ((data.metrics or {}).get("averages") or {}).get("avg_compression_ratio")
    if not h.total:
        return _card("Compression ratio", "tokens after ÷ before, compressed rows",
                     '<div class="empty">No row was compressed.</div>')
    markers = [(avg, f"mean {avg:.2f}", "mean")] if isinstance(avg, (int, float)) else []
    svg = _histogram_svg([("rows", h)], x_title="tokens after ÷ tokens before",
                         x_label=lambda v: f"{v:g}", tip=lambda lo, hi: f"{lo:.2f}–{hi:.2f}",
                         markers=markers, label="distribution of compression ratios")
    return _card("Compression ratio", f"{h.total:,} compressed rows; lower is smaller", svg)


def _sources_card(data: ReportData) -> str:
    items = [(k, v) for k, v in data.sources.items()]
    total = sum(v for _, v in items)
    if not total:
        return _card("Summary sources", "where each summary came from",
                     '<div class="empty">No summaries in this run.</div>')
    row_h, label_w, count_w = 34, 86, 92
    height = row_h * len(items) + 8
    width = _W
    bar_w = width - label_w - count_w
    biggest = max(v for _, v in items) or 1
    parts = []
    for i, (name, n) in enumerate(items):
        y = 4 + i * row_h
        w = bar_w * n / biggest
        colour = _SOURCE_COLOURS.get(name, "#7a8597")
        parts.append(
            f'<text x="{label_w - 10}" y="{y + 20}" text-anchor="end" class="axis-title">'
            f"{esc(name)}</text>"
            f'<rect x="{label_w}" y="{y + 6}" width="{bar_w:.1f}" height="20" rx="3" '
            f'fill="#eef0f4"/>'
            f'<rect class="bar" x="{label_w}" y="{y + 6}" width="{max(w, 0.0):.1f}" '
            f'height="20" rx="3" style="fill:{colour}"><title>{esc(name)}: {n:,} summaries'
            f"</title></rect>"
            f'<text x="{label_w + bar_w + 8}" y="{y + 20}">{n:,} · '
            f"{100 * n / total:.0f}%</text>")
    svg = (f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="summaries by source">{"".join(parts)}</svg>')
    return _card("Summary sources", f"{total:,} summaries: llm, cache hit, extractive, or the "
                 "extractive fallback after a failed request", svg)


def _fidelity_card(data: ReportData) -> str:
    h = data.fidelity
    assert h is not None
    agg = (data.metrics or {}).get("fidelity")
    stats = ""
    if isinstance(agg, dict):
        names = (("mean", "mean_ratio"), ("median", "median_ratio"), ("p10", "p10_ratio"),
                 ("min", "min_ratio"), ("tail items kept", "mean_tail_ratio"),
                 ("summarizer's own text", "mean_model_ratio"),
                 ("rows with invented facts", "invented_share"))
        shown = [f"{label} <b>{agg[key]:.3f}</b>" for label, key in names
                 if isinstance(agg.get(key), (int, float))]
        stats = f'<div class="stats">{" · ".join(shown)}</div>' if shown else ""
    if not h.total:
        return _card("Summary fidelity", "share of the region's facts its summary keeps",
                     '<div class="empty">No row carries a fidelity measure.</div>' + stats)
    markers = []
    if isinstance(agg, dict) and isinstance(agg.get("mean_ratio"), (int, float)):
        markers.append((agg["mean_ratio"], f"mean {agg['mean_ratio']:.2f}", "mean"))
    svg = _histogram_svg([("rows", h)], x_title="facts of the region kept in the summary",
                         x_label=lambda v: f"{v:g}", tip=lambda lo, hi: f"{lo:.2f}–{hi:.2f}",
                         markers=markers, label="distribution of summary fidelity",
                         bar_class="fid")
    return _card("Summary fidelity", f"{h.total:,} summarized rows; higher keeps more of the "
                 "paths, names, IDs and errors of the region", svg + stats)


def _nice_step(high: float, ticks: int = 5) -> float:
    if high <= 0:
        return 1
    raw = high / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def _histogram_svg(
    series: Sequence[tuple[str, Histogram]],
    *,
    x_title: str,
    x_label: Callable[[float], str],
    tip: Callable[[float, float], str],
    markers: Sequence[tuple[float, str, str]],
    label: str,
    wide: bool = False,
    bar_class: str = "",
) -> str:
    """Bars per bin (side by side when there are two series), y gridlines, axis titles,
    and dashed vertical markers (the target, a mean)."""
    width = _W * 2 if wide else _W
    edges = series[0][1].edges
    lo, hi = edges[0], edges[-1]
    bins = len(edges) - 1
    plot_w, plot_h = width - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    peak = max((max(h.counts) for _, h in series), default=0)
    step = _nice_step(max(peak, 1))
    if step < 1:
        step = 1
    top = max(step, math.ceil(peak / step) * step)

    def x_of(v: float) -> float:
        return _LEFT + (v - lo) / (hi - lo) * plot_w if hi > lo else _LEFT

    def y_of(n: float) -> float:
        return _TOP + plot_h - n / top * plot_h

    out = []
    n = 0.0
    while n <= top + 1e-9:
        y = y_of(n)
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y:.1f}" '
                   f'y2="{y:.1f}"/><text x="{_LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{_compact(n) if n >= 1000 else f'{n:g}'}</text>")
        n += step
    slot = plot_w / bins
    gap = slot * 0.12
    each = (slot - 2 * gap) / len(series)
    for j, (name, h) in enumerate(series):
        cls = bar_class or ("bar" if len(series) == 1 else name)
        for i, count in enumerate(h.counts):
            if not count:
                continue
            x = _LEFT + i * slot + gap + j * each
            y = y_of(count)
            out.append(f'<rect class="{esc(cls)}" x="{x:.1f}" y="{y:.1f}" '
                       f'width="{max(each - 0.5, 0.5):.1f}" height="{_TOP + plot_h - y:.1f}">'
                       f"<title>{esc(name)}: {count:,} rows, {esc(tip(h.edges[i], h.edges[i + 1]))}"
                       f"</title></rect>")
    base = _TOP + plot_h
    out.append(f'<line class="axis" x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{base}" '
               f'y2="{base}"/>')
    every = max(1, math.ceil(bins / (12 if wide else 6)))
    for i in range(0, bins + 1, every):
        x = x_of(edges[i])
        out.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" '
                   f'y2="{base + 4}"/><text x="{x:.1f}" y="{base + 16}" text-anchor="middle">'
                   f"{esc(x_label(edges[i]))}</text>")
    for value, text, kind in markers:
        x = min(max(x_of(value), _LEFT), _LEFT + plot_w)
        anchor, dx = ("end", -5) if x > _LEFT + plot_w * 0.8 else ("start", 5)
        out.append(f'<line class="{kind}" x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP - 6}" '
                   f'y2="{base}"/><text class="marker {kind}-label" x="{x + dx:.1f}" '
                   f'y="{_TOP - 8 + 10}" text-anchor="{anchor}">{esc(text)}</text>')
    out.append(f'<text class="axis-title" x="{_LEFT + plot_w / 2:.1f}" y="{_H - 8}" '
               f'text-anchor="middle">{esc(x_title)}</text>'
               f'<text class="axis-title" transform="translate(14 {_TOP + plot_h / 2:.1f}) '
               f'rotate(-90)" text-anchor="middle">rows</text>')
    return (f'<svg class="chart" viewBox="0 0 {width} {_H}" role="img" '
            f'aria-label="{esc(label)}">{"".join(out)}</svg>')


# What would fix the rows still over the limit

def _fixes(data: ReportData) -> str:
    """The remedies table (`app.fixes` says the same in text); nothing when no row is
    over the limit."""
    w = data.fixes
    if w is None or not w.over.over:
        return ""
    rows = w.examined
    how = ("extractive summaries: exact" if w.exact
           else f"summaries projected at {w.summary_target:,} tokens")
    hint = (f"{counted(w.over.over, 'row')} still over the limit, each re-planned as "
            f"compress would ({how}); the flags to give compress, and how many rows each "
            "brings under.")
    if w.capped_rows:
        hint += f" The first {rows:,} of them were examined."
    parts = [f'<section class="card" id="fixes"><h2>What would fix it</h2>'
             f'<p class="hint">{esc(hint)}</p>']
    helping = w.fixes.helping
    if helping:
        body = "".join(
            f'<tr><td class="mono">{esc(e.command)}</td>'
            f'<td class="num">{e.count:,} of {rows:,}</td></tr>' for e in helping)
        parts.append('<table class="fixes"><thead><tr><th>flags</th>'
                     '<th class="num">rows brought under</th></tr></thead>'
                     f"<tbody>{body}</tbody></table>")
    best = w.fixes.best
    if best is not None:
        parts.append(f'<p class="best">Together, the fewest flags that bring the most under '
                     f"({best.count:,} of {rows:,}): <code>{esc(best.command)}</code></p>")
    elif rows:
        parts.append('<p class="best">No change within the target brings any of them '
                     "under.</p>")
    useless = w.fixes.useless
    if useless:
        parts.append(f'<p class="hint">No effect alone: '
                     f'{esc(", ".join(e.command for e in useless))}</p>')
    notes = [] if data.fixes_source in ("", "stored") else [data.fixes_source]
    if w.head_alone:
        notes.append(f"{w.head_alone:,} of them: the protected head alone is over the "
                     f"target; only {head_help(w)} can help.")
    notes += [f"not examined: {where}: {why}" for where, why in w.over.not_examined[:5]]
    parts += [f'<div class="note">{esc(n)}</div>' for n in notes]
    parts.append("</section>")
    return "".join(parts)


# The flagged rows

_COLUMNS = (("#", "num"), ("location", ""), ("id", ""), ("before", "num"), ("after", "num"),
            ("over target by", "num"), ("reason", ""), ("status", ""))


def _flagged(data: ReportData) -> str:
    title = "Rows still over the limit, and failed rows"
    if not data.flagged_total:
        return (f'<section class="card"><h2>{title}</h2>'
                '<div class="empty">No row is still over the limit, and none failed.</div>'
                "</section>")
    shown = len(data.shown)
    hint = (f"{data.flagged_total:,} rows, worst (most tokens after) first. Click a column to "
            "sort, a row to see its turns.")
    sorted_by = ' aria-sort="descending"'
    heads = "".join(
        f'<th class="{cls}"{sorted_by if name == "after" else ""}>'
        f'<button type="button">{esc(name)}</button></th>' for name, cls in _COLUMNS)
    body = "".join(_table_row(i, r, data.target) for i, r in enumerate(data.shown))
    more = ""
    if shown < data.flagged_total:
        more = (f'<div class="more">Showing the {shown:,} worst of {data.flagged_total:,} rows; '
                f"{data.flagged_total - shown:,} more are in the over-limit file "
                "(<span class=\"mono\">--max-rows</span> shows more).</div>")
    return (f'<section class="card"><h2>{title}</h2><p class="hint">{hint}</p>'
            f'<div class="table-wrap"><table class="rows" id="flagged"><thead><tr>{heads}'
            f"</tr></thead><tbody>{body}</tbody></table></div>{more}"
            '<div id="timeline" hidden></div></section>')


def _titled(r: ShownRow) -> str:
    """A reason cell's tooltip: the sentence, then its code and numbers."""
    return f"{r.reason}\n{r.detail}" if r.detail else r.reason


def _table_row(i: int, r: ShownRow, target: int) -> str:
    ident = "" if r.id is None else str(r.id)
    over = max(r.after - target, 0)
    status = ('<span class="pill failed">failed</span>' if r.failed
              else '<span class="pill over">over limit</span>')
    cells = [
        f'<td class="num" data-v="{i}">{i + 1}</td>',
        f'<td class="loc mono" data-v="{esc(r.location)}">{esc(r.location)}</td>',
        f'<td class="id mono" data-v="{esc(ident)}" title="{esc(ident)}">{esc(ident)}</td>',
        f'<td class="num" data-v="{r.before}">{r.before:,}</td>',
        f'<td class="num" data-v="{r.after}">{r.after:,}</td>',
        f'<td class="num over" data-v="{over}">{over:,}</td>',
        f'<td data-v="{esc(r.label)}" title="{esc(_titled(r))}">{esc(r.label)}</td>',
        f'<td data-v="{"failed" if r.failed else "over"}">{status}</td>',
    ]
    return (f'<tr data-i="{i}" tabindex="0" aria-selected="false">'
            f'{"".join(cells)}</tr>')
