"""Kill tests for `app/report_data.py` (issue 40 item 8): the data `report --html` shows,
from hand-made output rows and metrics and from real in-process compress runs, asserted
value for value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli_helpers import invoke_cli
from trajectory_compressor.app.report import FlaggedRow, RunReport
from trajectory_compressor.app.report_data import (
    DEFAULT_MAX_ROWS,
    Histogram,
    _Tokens,
    collect_report_data,
)
from trajectory_compressor.core import reasons
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.metrics import TrajectoryMetrics, nice_edges
from trajectory_compressor.formats.base import Location


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _report(out: Path, rows: list[FlaggedRow] | None = None,
            metrics: dict[str, Any] | None = None) -> RunReport:
    return RunReport(output=out, layout=None, metrics=metrics,  # type: ignore[arg-type]
                     rows=rows or [])


def _hermes(row_id: str, *texts: str, **extra: Any) -> dict[str, Any]:
    roles = ("human", "gpt")
    return {"id": row_id, **extra, "conversations": [
        {"from": roles[i % 2], "value": t} for i, t in enumerate(texts)]}


def _flagged(out: Path, row_id: Any, line: int = 1, reason: str = "still over",
             code: str = "", row: dict[str, Any] | None = None,
             metrics: dict[str, Any] | None = None) -> FlaggedRow:
    m = metrics or {"original_tokens": 500, "compressed_tokens": 400, "still_over_limit": True}
    return FlaggedRow(Location(str(out), line=line), row_id, reason,
                      TrajectoryMetrics.from_dict(m), m, row=row, code=code)


# --- a bug found here: the token bins of a tiny target ----------------------------------

def test_a_target_of_two_tokens_gets_bins_of_one_token(tmp_path):
    """`report --html` on a run with target 2 stopped with "internal error
    (StopIteration)": 30 bins over [0, 2] want a step under 1, and no whole-number step
    was a candidate. A step of 1 is the finest there is."""
    assert nice_edges(0, 2, 30) == [0, 1, 2]
    assert nice_edges(0, 1, 30) == [0, 1]
    assert nice_edges(5, 7, 30) == [5, 6, 7]
    src = _write(tmp_path / "in.jsonl", [
        {"id": "a", "conversations": [{"from": "human", "value": "hi"},
                                      {"from": "gpt", "value": "yo"}]}])
    out, page = tmp_path / "out.jsonl", tmp_path / "r.html"
    proc = invoke_cli("compress", str(src), "-o", str(out), "--target-max-tokens", "2",
                      "--summary-target-tokens", "1", "--summarizer", "extractive", "-q")
    assert proc.returncode == 0, proc.stderr
    proc = invoke_cli("report", str(out), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"wrote {page}: 1 rows, 0 of 0 over-limit or failed rows listed "
                           "with their timelines\n")


# --- the token bins ----------------------------------------------------------------------

def test_token_bins_are_thirty_round_steps_from_zero():
    # 31 tokens in at most 30 steps: steps of 2 (in 31 steps they would be of 1).
    assert _Tokens(high=31, target=1).edges == [float(e) for e in range(0, 33, 2)]
    # From 0, whatever the values: steps of 1 up to 20.
    assert _Tokens(high=20, target=5).edges == [float(e) for e in range(21)]
    # The top is the recorded maximum, the target or 1, whichever is largest.
    assert _Tokens(high=1, target=1).edges == [0.0, 1.0]
    assert _Tokens(high=0, target=7).edges == [float(e) for e in range(8)]


def test_token_bins_without_a_recorded_maximum():
    # No value: bins from 0 to the target (or 1), every count 0.
    before, after = _Tokens(high=None, target=1).histograms()
    assert (before.edges, before.counts, after.counts) == ([0.0, 1.0], [0], [0])
    before, after = _Tokens(high=None, target=20).histograms()
    assert before.edges == [float(e) for e in range(21)] and before.counts == [0] * 20
    tokens = _Tokens(high=None, target=3)
    tokens.add(2, 1)
    before, after = tokens.histograms()
    assert before.edges == [0.0, 1.0, 2.0, 3.0]
    assert (before.counts, after.counts) == ([0, 0, 1], [0, 1, 0])


def test_a_histogram_without_width_puts_every_value_in_its_first_bin():
    h = Histogram.empty([5.0, 5.0, 5.0])
    for value in (4, 5, 6):
        h.add(value)
    assert h.counts == [3, 0]


# --- counting rows from their metrics (no metrics file) ----------------------------------

def _region(start: int) -> dict[str, int]:
    return {"start_idx": start, "end_idx": start + 2, "turns_count": 2}


def test_each_row_is_counted_by_what_its_metrics_say(tmp_path, counter):
    out = _write(tmp_path / "out.jsonl", [
        _hermes("failed", "a", "b", compression_metrics={
            "original_tokens": 500, "compressed_tokens": 500, "still_over_limit": True,
            "error": "boom"}),
        _hermes("over", "a", "b", compression_metrics={
            "original_tokens": 400, "compressed_tokens": 300, "still_over_limit": True}),
        _hermes("skipped", "a", "b", compression_metrics={
            "original_tokens": 50, "compressed_tokens": 50, "skipped_under_target": True}),
        # A summary written, without a fidelity record.
        _hermes("llm", "a", "b", compression_metrics={
            "original_tokens": 300, "compressed_tokens": 90, "compression_ratio": 0.3,
            "was_compressed": True, "summary_source": "llm",
            "compression_region": _region(1)}),
        # A summary refused (no region written), its fidelity record kept.
        _hermes("refused", "a", "b", compression_metrics={
            "original_tokens": 300, "compressed_tokens": 150, "compression_ratio": 0.5,
            "was_compressed": True, "fidelity": {"ratio": 0.2}}),
        # A summary written at the first turn.
        _hermes("first", "a", "b", compression_metrics={
            "original_tokens": 200, "compressed_tokens": 180, "compression_ratio": 0.9,
            "was_compressed": True, "summary_source": "extractive",
            "compression_region": _region(0), "fidelity": {"ratio": 0.9}}),
    ])
    data = collect_report_data(_report(out, metrics={"summary": {}}),
                               CompressionConfig(target_max_tokens=100), counter)
    assert (data.rows, data.compressed, data.skipped, data.over_limit, data.failed) == (
        6, 3, 1, 1, 1)
    assert data.sources == {"llm": 1, "extractive": 1}
    ratios = [0] * 20
    ratios[6] += 1  # 0.3
    ratios[10] += 1  # 0.5
    ratios[18] += 1  # 0.9
    assert data.ratios.counts == ratios
    # Only the summary written at turn 0 has a fidelity in the chart.
    assert data.fidelity is not None and data.fidelity.counts == [0] * 18 + [1, 0]
    assert (data.over_before, data.over_after) == (5, 4)  # after: 500, 300, 150, 180


def test_a_row_over_the_limit_counts_as_over_and_a_failed_one_as_failed(tmp_path, counter):
    out = _write(tmp_path / "out.jsonl", [
        _hermes("failed", "a", compression_metrics={
            "original_tokens": 50, "compressed_tokens": 50, "error": "boom"}),
        _hermes("over", "a", compression_metrics={
            "original_tokens": 400, "compressed_tokens": 300, "still_over_limit": True})])
    data = collect_report_data(_report(out), CompressionConfig(target_max_tokens=100),
                               counter)
    assert (data.rows, data.compressed, data.skipped, data.over_limit, data.failed) == (
        2, 0, 0, 1, 1)


def test_the_fidelity_chart_is_there_when_a_row_or_the_metrics_file_has_fidelity(
        tmp_path, counter):
    out = _write(tmp_path / "out.jsonl", [_hermes("a", "hello", "hi")])
    config = CompressionConfig()
    assert collect_report_data(_report(out, metrics={"summary": {}}), config,
                               counter).fidelity is None
    data = collect_report_data(_report(out, metrics={"fidelity": {"count": 0}}), config,
                               counter)
    assert data.fidelity is not None and data.fidelity.counts == [0] * 20


def test_rows_without_metrics_are_counted_once_past_a_batch(tmp_path, counter):
    # 4,096 turns without metrics fill a counting batch; each row still counts once.
    out = _write(tmp_path / "out.jsonl", [_hermes("long", *["hi"] * 4096),
                                          _hermes("short", "hello")])
    data = collect_report_data(_report(out), CompressionConfig(target_max_tokens=100),
                               counter)
    assert data.tokens_before.total == data.tokens_after.total == 2
    assert (data.rows, data.skipped, data.over_before, data.over_after) == (2, 2, 1, 1)


# --- the rows the page lists -------------------------------------------------------------

def test_the_page_lists_at_most_two_hundred_rows(tmp_path, counter):
    out = _write(tmp_path / "out.jsonl", [_hermes("a", "hello")])
    flagged = [_flagged(out, f"gone-{i}", line=i) for i in range(DEFAULT_MAX_ROWS + 1)]
    data = collect_report_data(_report(out, flagged), CompressionConfig(), counter)
    assert DEFAULT_MAX_ROWS == 200
    assert (len(data.shown), data.flagged_total) == (200, 201)
    assert data.shown[-1].id == "gone-199"
    assert {s.note for s in data.shown} == {
        "this row was not found in the output; no timeline"}


def test_a_flagged_row_kept_aside_shows_its_own_turns(tmp_path, counter):
    """A row the over-limit file holds (``row``): its timeline from those turns, each
    turn's first line cut to 100 columns; a held row without turns says why."""
    out = _write(tmp_path / "out.jsonl", [_hermes("other", "hello")])
    long_line = "x" * 120
    held = _hermes("held", long_line + "\nsecond line", "short answer")
    odd = {"id": "odd", "text": "no conversation"}
    sentence = reasons.OVER_LIMIT[0]
    flagged = [_flagged(out, "held", row=held, reason=sentence.text),
               _flagged(out, "odd", row=odd, reason="boom", metrics={
                   "original_tokens": 10, "compressed_tokens": 10, "error": "boom"})]
    data = collect_report_data(_report(out, flagged),
                               CompressionConfig(target_max_tokens=100), counter)
    shown, failed = data.shown
    assert (shown.code, shown.label) == ("protected_head_alone_over_target",
                                         "protected head alone > target")
    assert shown.note == "" and shown.timeline is not None
    turns = shown.timeline["turns"]
    assert [t[6] for t in turns] == ["x" * 99 + "\u2026", "short answer"]
    assert [t[:4] for t in turns] == [[0, 0, 1, "human"], [1, 1, 2, "gpt"]]
    assert shown.timeline["total"] == sum(t[4] for t in turns) > 0
    assert failed.code == "failed" and failed.timeline is None
    assert failed.note == "its turns cannot be read: row has no 'conversations' field"


def test_an_output_row_of_the_same_id_with_other_metrics_is_not_the_flagged_row(
        tmp_path, counter):
    out = _write(tmp_path / "out.jsonl", [_hermes("a", "hello", "hi", compression_metrics={
        "original_tokens": 20, "compressed_tokens": 20, "skipped_under_target": True})])
    data = collect_report_data(_report(out, [_flagged(out, "a")]), CompressionConfig(),
                               counter)
    assert data.shown[0].timeline is None
    assert data.shown[0].note == "this row was not found in the output; no timeline"


# --- windows (`--output-mode windows`) ---------------------------------------------------

def _window(number: Any, tokens: int, over: str | None = None, readable: bool = True
            ) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "original_tokens": 300, "compressed_tokens": tokens,
        "still_over_limit": over is not None, "window": number, "windows": 3,
        "source_id": "src", "trained_turns": {"start_idx": 1, "end_idx": 2}}
    if over is not None:
        metrics["window_over"] = over
    if not readable:
        return {"id": f"src#w{number}", "text": "none", "compression_metrics": metrics}
    return _hermes(f"src#w{number}", f"window {number}", "answer",
                   compression_metrics=metrics)


def test_a_source_row_s_windows_are_listed_in_window_order(tmp_path, counter):
    out = _write(tmp_path / "out.jsonl", [
        _window(2, 120, over="the head alone is over"), _window(1, 80),
        _window(None, 10), _window(3, 30, readable=False)])
    data = collect_report_data(_report(out, [_flagged(out, "src")]),
                               CompressionConfig(target_max_tokens=100), counter)
    [shown] = data.shown
    assert shown.note == "" and shown.timeline is None
    listed = [{k: v for k, v in w.items() if k != "timeline"} for w in shown.windows]
    trained = {"start_idx": 1, "end_idx": 2}
    assert listed == [
        {"window": None, "windows": 3, "tokens": 10, "over": "", "trained_turns": trained},
        {"window": 1, "windows": 3, "tokens": 80, "over": "", "trained_turns": trained},
        {"window": 2, "windows": 3, "tokens": 120, "over": "the head alone is over",
         "trained_turns": trained},
        {"window": 3, "windows": 3, "tokens": 30, "over": "", "trained_turns": trained}]
    timelines = [w["timeline"] for w in shown.windows]
    assert timelines[-1] is None
    assert [[t[6] for t in tl["turns"]] for tl in timelines[:3]] == [
        ["window None", "answer"], ["window 1", "answer"], ["window 2", "answer"]]
