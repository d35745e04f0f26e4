"""`report`: a real run's figures, its over-limit and failed rows, and one row's timeline."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, compress_run, row, words, write_jsonl
from trajectory_compressor.app.report import find_row, format_found, found_to_dict, load_report
from trajectory_compressor.app.textfmt import display_width
from trajectory_compressor.app.timeline import build_timeline
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import InputError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import Summarizer, Summary, SummaryRequest
from trajectory_compressor.dialects.sharegpt import conversations_of

SLOW = row("slow", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])
SLOW["conversations"][5]["value"] = "SLOW " + words(39)


class SlowOnMarker(Summarizer):
    """Extractive summaries, except that a region holding "SLOW" takes far too long."""

    def __init__(self, counter) -> None:
        self.inner = ExtractiveSummarizer(counter.count)

    async def summarize(self, request: SummaryRequest) -> Summary:
        if any("SLOW" in t["value"] for t in request.turns):
            await asyncio.sleep(30)
        return await self.inner.summarize(request)


def hand_config(**extra) -> CompressionConfig:
    # The SLOW row waits its deadline out; every other row must finish within it, which
    # took up to 55 ms of 0.3 s in a process's first run at a load of 5: 1 s leaves room.
    return CompressionConfig(summarizer="extractive", per_trajectory_timeout=1.0,
                             **HAND_CONFIG, **extra)


@pytest.fixture
def finished_run(tmp_path, counter):
    """A run with one compressed row still over, two never compressed, one failed."""
    src = write_jsonl(tmp_path / "in.jsonl", [*HAND_ROWS, SLOW])
    out = tmp_path / "out.jsonl"
    result = compress_run(src, out, hand_config(), counter, SlowOnMarker(counter))
    assert result.metrics.trajectories_failed == 1
    return out


def assert_fits_80_columns(text: str) -> None:
    assert "\x1b" not in text
    assert all(display_width(line) <= 80 for line in text.splitlines()), text


def table_rows(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Still over")) + 2
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split(None, 4))
    return rows


def test_report_lists_over_limit_and_failed_rows_worst_first(finished_run, counter):
    slow_total = sum(counter.count_many([t["value"] for t in SLOW["conversations"]]))
    over = {e["id"]: e for e in read_jsonl(finished_run.with_name("out_over_limit.jsonl"))}
    big_tail_after = over["big-tail"]["metrics"]["compressed_tokens"]
    assert 145 < big_tail_after <= 165
    proc = invoke_cli("report", str(finished_run))
    assert proc.returncode == 0, proc.stderr
    assert_fits_80_columns(proc.stdout)
    assert "Still over the limit or failed: 4 rows (1 failed), worst first" in proc.stdout
    assert [line.split() for line in proc.stdout.splitlines() if line.startswith("  failed ")] \
        == [["failed", "1"]]
    assert table_rows(proc.stdout) == [
        ["in.jsonl:6", "slow", f"{slow_total}", f"{slow_total}", "failed: deadline exceeded"],
        ["in.jsonl:5", "small-middle", "195", "195", "middle too small to help"],
        ["in.jsonl:3", "big-tail", "265", f"{big_tail_after}", "head+tail > target (tail)"],
        ["in.jsonl:4", "no-middle", "120", "120", "no compressible middle"],
    ]
    machine = invoke_cli("report", str(finished_run), "--json")
    assert machine.returncode == 0, machine.stderr
    data = json.loads(machine.stdout)
    assert data["metrics"] == json.loads(finished_run.with_name("out_metrics.json").read_text())
    assert [(r["id"], r["failed"]) for r in data["rows"]] == [
        ("slow", True), ("small-middle", False), ("big-tail", False), ("no-middle", False)]
    assert data["rows"][0]["metrics"] == over["slow"]["metrics"]


def test_show_marks_head_summary_and_tail_with_their_tokens(finished_run):
    proc = invoke_cli("report", str(finished_run), "--show", "big-tail",
                   "--target-max-tokens", "100", "--summary-target-tokens", "20")
    assert proc.returncode == 0, proc.stderr
    assert_fits_80_columns(proc.stdout)
    metrics = read_jsonl(finished_run)[2]["compression_metrics"]
    summary = metrics["compressed_tokens"] - 145  # head 25 + tail 120 are kept as they were
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Trajectory big-tail at ") and lines[0].endswith("in.jsonl:3")
    assert "still over the limit: the protected head and tail with a summary exceed" \
        in lines[1]
    groups = [line for line in lines if line.startswith("  -- ")]
    assert groups == [
        "  -- protected head: 4 turns, 25 tokens",
        f"  -- summarized region: original turns 4-7 (4 turns) -> summary of {summary} tokens",
        "  -- protected tail: 4 turns, 120 tokens",
    ]
    turns = [line.split(None, 4) for line in lines if line[:6].strip().isdigit()]
    assert [t[:4] for t in turns] == [
        ["0", "0", "system", "10"], ["1", "1", "human", "5"], ["2", "2", "gpt", "5"],
        ["3", "3", "tool", "5"], ["4", "4-7", "human", f"{summary}"],
        ["5", "8", "gpt", "30"], ["6", "9", "tool", "30"], ["7", "10", "gpt", "30"],
        ["8", "11", "tool", "30"],
    ]
    assert turns[4][4].startswith("[CONTEXT SUMMARY]:")
    assert f"  head 25 + summary {summary} + tail 120 = {145 + summary} tokens" in lines
    assert f"  target 100: over by {45 + summary}" in lines
    assert "  protected head+tail alone: 145 tokens, over the target" in lines


def test_show_a_failed_row_marks_the_region_it_would_have_replaced(finished_run, counter):
    report = load_report(finished_run)
    found = find_row(report, "slow")
    assert found.metrics is not None and found.metrics.failed
    turns = conversations_of(found.row)
    timeline = build_timeline(turns, counter.count_many([t["value"] for t in turns]),
                              found.metrics, hand_config())
    assert [t.part for t in timeline.turns] == ["head"] * 4 + ["region"] * 4 + ["tail"] * 4
    text = format_found(found, timeline)
    assert_fits_80_columns(text)
    assert "  failed: summarization exceeded the per-trajectory deadline" in text
    assert "  -- region chosen for a summary (not summarized): 4 turns, 161 tokens" in text
    assert found_to_dict(found, timeline)["timeline"]["tokens_by_part"] == \
        {"head": 25, "region": 161, "tail": 20}
    # Read with another target than the run's, a row the run found over is flagged.
    over = find_row(report, "big-tail")
    turns = conversations_of(over.row)
    timeline = build_timeline(turns, counter.count_many([t["value"] for t in turns]),
                              over.metrics, CompressionConfig())
    assert "note: the run judged this row against another target than 15,250" in \
        format_found(over, timeline)


def test_show_finds_rows_by_location_and_index_and_from_the_over_limit_file(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", [*HAND_ROWS, {"conversations": HAND_ROWS[3]
                                                          ["conversations"]}])
    out = tmp_path / "kept.jsonl"
    compress_run(src, out, hand_config(save_over_limit=False), counter)
    report = load_report(out)
    # Over-limit rows are only in the over-limit file; the one without an id is found by
    # its location.
    assert [r["id"] for r in read_jsonl(out)] == ["short", "fits"]
    found = find_row(report, "no-middle")
    assert found.row["conversations"] == HAND_ROWS[3]["conversations"]
    assert found.metrics is not None and found.metrics.original_tokens == 120
    assert find_row(report, "in.jsonl:6").row["conversations"] == \
        HAND_ROWS[3]["conversations"]
    assert find_row(report, "1").row["id"] == "fits"
    with pytest.raises(InputError, match="no row with id"):
        find_row(report, "7")


def test_folder_output_and_failures_missing_from_the_over_limit_file(tmp_path, counter):
    src = tmp_path / "runs"
    src.mkdir()
    write_jsonl(src / "a.jsonl", HAND_ROWS[:2])
    write_jsonl(src / "b.jsonl", HAND_ROWS[2:])
    compress_run(src, tmp_path / "runs_compressed", hand_config(), counter)
    report = load_report(tmp_path / "runs_compressed")
    assert report.metrics is not None
    assert [r.id for r in report.rows] == ["small-middle", "big-tail", "no-middle"]
    assert find_row(report, "3").row["id"] == "no-middle"  # rows 0-1 in a, 2-4 in b
    # A failure the over-limit file does not hold is found in the output itself.
    out = tmp_path / "hand_made.jsonl"
    failed = dict(HAND_ROWS[0], compression_metrics={"original_tokens": 35,
                                                     "compressed_tokens": 35,
                                                     "error": "endpoint refused"})
    write_jsonl(out, [HAND_ROWS[1], failed])
    (tmp_path / "hand_made_metrics.json").write_text(
        json.dumps({"summary": {"trajectories_failed": 1}}))
    (tmp_path / "hand_made_over_limit.jsonl").write_text("")
    rows = load_report(out).rows
    assert [(r.short_location, r.id, r.reason) for r in rows] == \
        [("hand_made.jsonl:2", "short", "endpoint refused")]


def test_usage_errors_exit_2(tmp_path, sample_jsonl):
    proc = invoke_cli("report", str(tmp_path / "nothing.jsonl"))
    assert proc.returncode == 2 and proc.stderr == \
        f"error: output not found: {tmp_path / 'nothing.jsonl'}\n"
    proc = invoke_cli("report", str(sample_jsonl))
    assert proc.returncode == 2 and "trajectories_metrics.json" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_show_a_row_of_a_parquet_run(tmp_path, sample_jsonl):
    """Parquet locations carry a row index: it must not be taken for the row itself."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.cli_helpers import read_jsonl

    rows = read_jsonl(sample_jsonl)[17:20]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    out = tmp_path / "out.parquet"
    proc = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive", "-q",
                   "--target-max-tokens", "16000")
    assert proc.returncode == 0, proc.stderr
    over = read_jsonl(tmp_path / "out_over_limit.jsonl")
    assert [e["row"] for e in over] == [2] and over[0]["id"] == rows[2]["id"]
    # No flags: the run's recorded settings (target 16,000) drive the timeline.
    proc = invoke_cli("report", str(out), "--show", rows[2]["id"])
    assert proc.returncode == 0, proc.stderr
    assert rows[2]["id"] in proc.stdout and "tail" in proc.stdout
    assert "16,000" in proc.stdout and "15,250" not in proc.stdout
