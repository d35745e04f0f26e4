"""The plain-text helpers: widths, clipping, tables, histogram bins."""

from __future__ import annotations

from trajectory_compressor.app.textfmt import (
    Column,
    clip,
    display_width,
    first_line,
    histogram_lines,
    one_line,
    short_reason,
    table,
)
from trajectory_compressor.core.metrics import Distribution, bin_of, nice_edges


def test_widths_count_wide_characters_and_clip_keeps_within_them():
    assert display_width("数据ab") == 6
    assert clip("数据数据", 5) == "数据…"
    assert display_width(clip("数据数据", 5)) == 5
    assert clip("/a/very/long/path/file.jsonl:12", 12, left=True) == "…le.jsonl:12"
    assert clip("short", 10) == "short"


def test_one_line_drops_escape_codes_and_control_characters():
    assert one_line("\x1b[31mred\x1b[0m\tand\r\nmore") == "red and more"
    assert first_line("<think>\n\n  I will read it.\nthen") == "I will read it."
    assert first_line("<tool_response>") == "<tool_response>"


def test_table_shrinks_flexible_columns_by_priority_and_fits():
    cols = [Column("where", flex=True, clip_left=True), Column("n", right=True),
            Column("why", flex=True, priority=1)]
    rows = [["/x" * 30 + "/in.jsonl:7", "12", "a reason that is rather long " * 2]]
    lines = table(cols, rows)
    assert all(display_width(line) <= 80 for line in lines)
    assert lines[1].split()[0].endswith("in.jsonl:7")
    assert "a reason that is rather long a reason" in lines[1]
    assert lines[0].split() == ["where", "n", "why"]


def test_nice_edges_and_bins():
    assert nice_edges(35, 265) == list(range(25, 276, 25))
    assert nice_edges(1412, 51627) == list(range(0, 60001, 10000))
    assert nice_edges(7, 7) == [7, 8]
    edges = [0, 10, 20]
    assert [bin_of(edges, v) for v in (0, 9, 10, 20, 21)] == [0, 0, 1, 1, None]


def test_histogram_lines_scale_bars_and_mark_bins():
    lines = histogram_lines([0, 10, 20], [4, 2], {1: "<- target 15"}, bar_width=8)
    assert lines == ["   0 - 10 |######## 4", "  10 - 20 |####     2  <- target 15"]


class SmallCapDistribution(Distribution):
    EXACT_CAP = 10


def test_distribution_histogram_is_exact_then_bucketed():
    d = SmallCapDistribution()
    values = [5, 15, 25, 100, 150, 200, 250, 300, 400, 500, 1000, 1000]
    for v in values[:10]:
        d.add(v)
    edges = [0, 100, 1000]
    assert d.histogram(edges) == [3, 7]
    for v in values[10:]:
        d.add(v)  # past the cap: buckets of ±1%
    assert d.histogram(edges) == [3, 9]


def test_short_reasons():
    assert short_reason("summarization exceeded the per-trajectory deadline of 1s; row "
                        "left unchanged") == "failed: deadline exceeded"
    assert short_reason("") == "over the target"
    assert display_width(short_reason("x" * 100)) <= 32
