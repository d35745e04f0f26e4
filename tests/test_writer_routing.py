"""`RunWriter`: where each row's result goes, what a rejects entry holds, and `--strict`.

Driven directly (no pipeline, no tokenizer): each test hands the writer records and
results made by hand and reads back the files it commits, so every expected line is
written out here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.metrics import TrajectoryMetrics
from trajectory_compressor.core.plan import Plan, Region
from trajectory_compressor.engine.checkpoint import Checkpoint
from trajectory_compressor.engine.compressor import RowResult
from trajectory_compressor.engine.layout import OutputLayout
from trajectory_compressor.engine.progress import Progress
from trajectory_compressor.engine.writer import MAX_WARNINGS, RunWriter, StrictStop
from trajectory_compressor.formats.base import InputFile, Location, Record

TURNS = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]


def make_writer(tmp_path: Path, strict: bool = False, **knobs: Any) -> RunWriter:
    src = tmp_path / "in.jsonl"
    src.write_text("")
    out = tmp_path / "out.jsonl"
    layout = OutputLayout({src: out}, {src: "jsonl"}, tmp_path / "out")
    config = CompressionConfig(**{"checkpoint_rows": 10_000, "checkpoint_seconds": 3600.0,
                                  **knobs})
    writer = RunWriter(layout, config, Progress(quiet=True), ([], {"sample": None}),
                       strict=strict)
    writer.open_file(0, InputFile(src, "jsonl"))
    return writer


def record(line: int, row: Any = None, raw: bytes | None = None,
           error: str | None = None) -> Record:
    return Record(Location("in.jsonl", line=line), row, raw, error)


def result(row: Any, *, changed: bool = False, error: str | None = None,
           over: bool = False, reason: str = "") -> RowResult:
    metrics = TrajectoryMetrics(original_tokens=900, compressed_tokens=900, original_turns=2,
                                compressed_turns=2, still_over_limit=over or error is not None,
                                error=error)
    plan = Plan("over_limit" if over else "skip", 900, Region(0, 2), reason=reason)
    return RowResult(row, metrics, plan, changed, row.get("conversations", []))


def finish(writer: RunWriter, tmp_path: Path) -> dict[str, list[Any]]:
    writer.finish_file(0)
    writer.commit()
    files = {}
    for name in ("out.jsonl", "out_over_limit.jsonl", "out_rejects.jsonl"):
        path = tmp_path / name
        files[name] = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() \
            else []
    return files


# --- --strict --------------------------------------------------------------------------

def test_strict_stops_on_a_failed_row_before_writing_or_counting_it(tmp_path):
    writer = make_writer(tmp_path, strict=True)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row), draws=0)
    failed = {"id": "b", "conversations": TURNS}
    with pytest.raises(StrictStop) as info:
        writer.write(record(2, failed), result(failed, error="summary deadline passed"), 0)
    assert str(info.value) == "in.jsonl:2: summary deadline passed"
    assert writer.metrics.total_trajectories == 1 and writer.metrics.trajectories_failed == 0
    assert writer.skip == 1  # the failed row is not handled: a checkpoint would not cover it
    writer.abandon()
    assert not list(tmp_path.glob("out*"))


def test_strict_keeps_going_past_a_row_that_is_only_over_the_limit(tmp_path):
    writer = make_writer(tmp_path, strict=True)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row, over=True, reason="nothing to cut"), 0)
    files = finish(writer, tmp_path)
    assert files["out.jsonl"] == [row]
    assert writer.metrics.trajectories_still_over_limit == 1


def test_without_strict_a_failed_row_is_written_unchanged_and_counted(tmp_path):
    writer = make_writer(tmp_path)
    row = {"id": 5, "conversations": TURNS}
    writer.write(record(1, row, raw=json.dumps(row).encode()),
                 result(row, error="summary deadline passed"), 0)
    files = finish(writer, tmp_path)
    assert files["out.jsonl"] == [row]
    assert writer.metrics.trajectories_failed == 1
    assert files["out_over_limit.jsonl"][0]["reason"] == "summary deadline passed"


def test_strict_stops_on_an_empty_file_and_otherwise_lists_it(tmp_path):
    writer = make_writer(tmp_path, strict=True)
    with pytest.raises(StrictStop, match="file is empty"):
        writer.empty_file(InputFile(tmp_path / "e.jsonl", "jsonl"))
    writer.abandon()
    writer = make_writer(tmp_path)
    writer.empty_file(InputFile(tmp_path / "e.jsonl", "jsonl"))
    files = finish(writer, tmp_path)
    where = str(tmp_path / "e.jsonl")
    assert files["out_rejects.jsonl"] == [{"location": where, "file": where,
                                           "error": "file is empty (no rows)", "rows": 0}]


# --- over-limit routing ----------------------------------------------------------------

def test_an_over_limit_row_stays_in_the_output_and_is_listed(tmp_path):
    writer = make_writer(tmp_path)
    row = {"id": "r7", "conversations": TURNS}
    writer.write(record(3, row), result(row, over=True, reason="nothing to cut"), 0)
    files = finish(writer, tmp_path)
    assert files["out.jsonl"] == [row]
    [entry] = files["out_over_limit.jsonl"]
    assert list(entry) == ["location", "file", "line", "id", "reason", "metrics"]
    assert entry["location"] == "in.jsonl:3" and entry["line"] == 3
    assert entry["id"] == "r7" and entry["reason"] == "nothing to cut"
    assert entry["metrics"]["original_tokens"] == 900
    assert entry["metrics"]["still_over_limit"] is True


def test_save_over_limit_false_moves_the_row_itself_to_the_over_limit_file(tmp_path):
    writer = make_writer(tmp_path, save_over_limit=False)
    kept = {"id": "k", "conversations": TURNS}
    over = {"id": "o", "conversations": TURNS}
    writer.write(record(1, kept), result(kept), 0)
    writer.write(record(2, over), result(over, over=True, reason="why"), 0)
    files = finish(writer, tmp_path)
    assert files["out.jsonl"] == [kept]
    [entry] = files["out_over_limit.jsonl"]
    assert entry["trajectory"] == over and entry["id"] == "o"
    # Counted once, as still over the limit: nothing lost, nothing twice.
    assert writer.metrics.total_trajectories == 2
    assert writer.metrics.trajectories_still_over_limit == 1


def test_a_row_under_the_limit_makes_no_over_limit_entry(tmp_path):
    writer = make_writer(tmp_path)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row), 0)
    files = finish(writer, tmp_path)
    assert files["out_over_limit.jsonl"] == []


def test_an_unchanged_row_is_copied_byte_for_byte_and_a_changed_one_re_encoded(tmp_path):
    writer = make_writer(tmp_path)
    raw = b'{"id": "a",   "conversations": [], "x": 1.0}'
    row = json.loads(raw)
    writer.write(record(1, row, raw=raw), result(row), 0)
    writer.write(record(2, row, raw=raw), result(row, changed=True), 0)
    writer.finish_file(0)
    writer.commit()
    lines = (tmp_path / "out.jsonl").read_bytes().splitlines()
    assert lines[0] == raw
    assert lines[1] == b'{"id":"a","conversations":[],"x":1.0}'


# --- rejects ---------------------------------------------------------------------------

def test_a_reject_entry_holds_location_error_and_a_200_character_preview(tmp_path):
    writer = make_writer(tmp_path)
    raw = b"{oops " + b"x" * 300
    writer.reject(record(4, raw=raw), "invalid JSON: unexpected character", 0)
    writer.reject(Record(Location("in.jsonl", line=5)), "no raw line", 0)
    assert writer.skip == 5  # both handled: a checkpoint now would cover them
    files = finish(writer, tmp_path)
    first, second = files["out_rejects.jsonl"]
    assert first == {"location": "in.jsonl:4", "file": "in.jsonl", "line": 4,
                     "error": "invalid JSON: unexpected character",
                     "preview": "{oops " + "x" * 194}
    assert second == {"location": "in.jsonl:5", "file": "in.jsonl", "line": 5,
                      "error": "no raw line"}
    assert writer.metrics.rows_rejected == 2 and writer.metrics.total_trajectories == 0


def test_a_preview_of_bytes_that_are_not_utf8_is_still_text(tmp_path):
    writer = make_writer(tmp_path)
    writer.reject(record(1, raw=b"ab\xffcd"), "line is not valid UTF-8", 0)
    files = finish(writer, tmp_path)
    assert files["out_rejects.jsonl"][0]["preview"] == "ab\ufffdcd"


def test_a_row_that_cannot_be_encoded_becomes_a_reject(tmp_path):
    writer = make_writer(tmp_path)
    row = {"id": "a", "conversations": TURNS, "bad": object()}
    writer.write(record(1, row), result(row, changed=True), 0)
    files = finish(writer, tmp_path)
    assert files["out.jsonl"] == []
    [entry] = files["out_rejects.jsonl"]
    assert entry["error"].startswith("cannot write the row: ")
    assert writer.metrics.total_trajectories == 0 and writer.metrics.rows_rejected == 1


def test_one_warning_per_file_and_reason_and_at_most_max_warnings(tmp_path, capsys):
    writer = make_writer(tmp_path)
    writer.reject(record(1), "same reason", 0)
    writer.reject(record(2), "same reason", 0)
    assert writer.warnings == ["in.jsonl:1: same reason"]
    for i in range(MAX_WARNINGS + 5):
        writer.reject(record(10 + i), f"reason {i}", 0)
    assert len(writer.warnings) == MAX_WARNINGS
    err = capsys.readouterr().err.splitlines()
    assert err.count("warning: more problems; see the rejects file") == 1
    assert len(err) == MAX_WARNINGS + 1


# --- checkpoints -----------------------------------------------------------------------

def test_a_checkpoint_every_n_rows_records_the_cut(tmp_path):
    writer = make_writer(tmp_path, checkpoint_rows=2)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row), draws=7)
    assert not writer.layout.checkpoint.exists()
    writer.write(record(3, row), result(row), draws=9)
    saved = Checkpoint.load(writer.layout.checkpoint)
    assert (saved.file_index, saved.skip, saved.draws) == (0, 3, 9)
    assert saved.metrics["total_trajectories"] == 2
    assert saved.output > 0 and saved.over_limit == 0 and saved.rejects == 0
    writer.write(record(4, row), result(row), draws=10)
    assert Checkpoint.load(writer.layout.checkpoint).skip == 3  # 1 row since: not yet
    writer.commit()
    assert not writer.layout.checkpoint.exists()
