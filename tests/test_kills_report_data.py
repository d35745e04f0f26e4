"""The HTML report's numbers, unit by unit (issue 26, item 5).

From their documentation (app/report_data.py, SPEC §16): a histogram counts values in
``[edges[i], edges[i+1])`` with the last bin closed and values outside going to the
nearest end bin; ratios and fidelity use 20 bins of 0.05 over [0, 1]; a row is "over" when
its tokens exceed the target (a row exactly at the target fits); the detail line of a
flagged row is ``code · head N · middle N · tail N · region N · summary N · target N``.
"""

from __future__ import annotations

import json

from trajectory_compressor.app import report_data
from trajectory_compressor.app.report_data import Histogram, reason_detail, unit_edges


def test_histogram_bins_are_half_open_the_last_closed_and_outliers_clamped():
    h = Histogram.empty([0.0, 10.0, 20.0, 30.0])
    assert h.counts == [0, 0, 0]
    for value in (0, 9.99, 10, 19, 20, 30, -5, 99):
        h.add(value)
    # 0, 9.99, -5 -> bin 0; 10, 19 -> bin 1; 20, 30 (closed end), 99 -> bin 2
    assert h.counts == [3, 2, 3]
    assert h.total == 8
    shifted = Histogram.empty([10.0, 20.0, 30.0])
    for value in (10, 15, 19.9, 20, 25, 30):
        shifted.add(value)
    assert shifted.counts == [3, 3]
    flat = Histogram.empty([5.0, 5.0])
    flat.add(7)
    assert flat.counts == [1]


def test_unit_edges_are_twenty_bins_of_a_twentieth():
    edges = unit_edges()
    assert len(edges) == 21 and edges[0] == 0 and edges[-1] == 1 and edges[1] == 0.05
    h = Histogram.empty(edges)
    for ratio in (0.0, 0.05, 0.5, 0.999, 1.0):
        h.add(ratio)
    expected = [0] * 20
    for i in (0, 1, 10, 19, 19):
        expected[i] += 1
    assert h.counts == expected


def test_rows_over_the_target_are_those_strictly_above_it():
    tokens = report_data._Tokens(high=400, target=100)
    for before, after in ((100, 100), (101, 100), (300, 101), (50, 50)):
        tokens.add(before, after)
    assert tokens.over == [2, 1]
    before, after = tokens.histograms()
    assert before.total == after.total == 4
    assert before.edges[0] == 0 and before.edges[-1] >= 400
    # Without a recorded maximum, the same rows binned at the end.
    free = report_data._Tokens(high=None, target=100)
    for before_tokens, after_tokens in ((100, 100), (101, 100), (300, 101), (50, 50)):
        free.add(before_tokens, after_tokens)
    assert free.over == [2, 1]
    b, a = free.histograms()
    assert b.total == a.total == 4 and b.edges[-1] >= 300
    # Only the "before" values reach 300, the top of the range: the last bin of each.
    assert (b.counts[-1], a.counts[-1]) == (1, 0)
    empty_before, _ = report_data._Tokens(high=None, target=100).histograms()
    assert empty_before.total == 0 and empty_before.edges[-1] >= 100


def test_reason_detail_names_the_numbers_in_order():
    numbers = {"target": 16000, "tail_tokens": 9000, "head_tokens": 1200, "other": 5,
               "summary_target": 750, "region_tokens": "n/a"}
    assert reason_detail("protected_turns_exceed_target", numbers) == (
        "protected_turns_exceed_target \u00b7 head 1,200 \u00b7 tail 9,000 \u00b7 "
        "target 16,000 \u00b7 summary target 750")
    assert reason_detail("failed", {}) == "failed"
    assert reason_detail("", {"target": 1}) == ""


def test_a_row_s_fidelity_is_its_ratio_or_a_bare_number():
    assert report_data._fidelity_ratio({"fidelity": {"ratio": 0.75}}) == 0.75
    assert report_data._fidelity_ratio({"fidelity": 1}) == 1.0
    assert report_data._fidelity_ratio({"fidelity": True}) is None
    assert report_data._fidelity_ratio({"fidelity": {"ratio": "high"}}) is None
    assert report_data._fidelity_ratio({}) is None
    assert report_data._fidelity_ratio(None) is None


def test_a_run_without_metrics_is_counted_from_its_output_and_a_lost_row_is_noted(
        tmp_path, counter):
    from pathlib import Path

    from trajectory_compressor.app.report import FlaggedRow, RunReport
    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.core.metrics import TrajectoryMetrics
    from trajectory_compressor.formats.base import Location

    out = tmp_path / "out.jsonl"
    rows = [{"id": "a", "conversations": [{"from": "human", "value": "hello there"}]},
            {"id": "b", "conversations": [{"from": "gpt", "value": "hi"}]},
            {"id": "c", "conversations": [{"from": "human", "value": "s"}],
             "compression_metrics": {"original_tokens": 300, "compressed_tokens": 90,
                                     "compression_ratio": 0.3, "was_compressed": True,
                                     "summary_source": "extractive",
                                     # a summary written in place of turns 1-2 of the original row
                                     "compression_region": {"start_idx": 1, "end_idx": 3,
                                                            "turns_count": 2},
                                     "fidelity": {"ratio": 0.5}}}]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    over = TrajectoryMetrics(original_tokens=500, compressed_tokens=400, still_over_limit=True)
    ghost = FlaggedRow(Location(str(out), line=9), "ghost", "still over", over, {})
    report = RunReport(output=Path(out), layout=None, metrics=None,  # type: ignore[arg-type]
                       rows=[ghost])
    data = report_data.collect_report_data(report, CompressionConfig(target_max_tokens=100),
                                           counter)
    # Without a metrics file every figure is counted in the pass: two rows left as they
    # were (no metrics: under the target), one compressed, none over or failed.
    assert (data.rows, data.compressed, data.skipped, data.over_limit, data.failed) == (
        3, 1, 2, 0, 0)
    assert data.tokens_before.total == data.tokens_after.total == 3
    assert (data.over_before, data.over_after) == (1, 0)  # 300 > 100, 90 <= 100
    assert data.sources == {"extractive": 1}
    assert data.ratios.counts[6] == 1 and data.ratios.total == 1  # 0.3 in [0.30, 0.35)
    assert data.fidelity is not None and data.fidelity.counts[10] == 1  # 0.5
    assert data.flagged_total == 1
    assert data.shown[0].note == "this row was not found in the output; no timeline"
    assert data.shown[0].timeline is None


def test_output_rows_without_a_conversation_are_left_out_of_the_charts_and_said(
        tmp_path, counter):
    from pathlib import Path

    from trajectory_compressor.app.report import RunReport
    from trajectory_compressor.core.config import CompressionConfig

    out = tmp_path / "out.jsonl"
    rows = [{"id": "a", "conversations": [{"from": "human", "value": "hello"}]},
            {"id": "z", "text": "no conversation in any dialect"}]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = RunReport(output=Path(out), layout=None, metrics=None)  # type: ignore[arg-type]
    data = report_data.collect_report_data(report, CompressionConfig(), counter)
    assert data.rows == 2 and data.tokens_before.total == 1
    assert len(data.notes) == 1 and data.notes[0].startswith("1 output rows without")


def test_a_flagged_row_written_unchanged_is_found_by_its_id(tmp_path, counter):
    from pathlib import Path

    from trajectory_compressor.app.report import FlaggedRow, RunReport
    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.core.metrics import TrajectoryMetrics
    from trajectory_compressor.formats.base import Location

    out = tmp_path / "out.jsonl"
    row = {"id": "a", "conversations": [{"from": "human", "value": "hello"},
                                        {"from": "gpt", "value": "hi"}]}
    out.write_text(json.dumps(row) + "\n")
    failed = TrajectoryMetrics(original_tokens=500, compressed_tokens=500, error="boom")
    flagged = FlaggedRow(Location(str(out), line=1), "a", "failed", failed, {"error": "boom"})
    report = RunReport(output=Path(out), layout=None, metrics=None,  # type: ignore[arg-type]
                       rows=[flagged])
    data = report_data.collect_report_data(report, CompressionConfig(), counter)
    assert data.shown[0].note == ""
    assert data.shown[0].timeline is not None
