"""`RunWriter`: where each row's result goes, what a rejects entry holds, and `--strict`.

Driven directly (no pipeline, no tokenizer): each test hands the writer records and
results made by hand and reads back the files it commits, so every expected line is
written out here.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.metrics import TrajectoryMetrics
from trajectory_compressor.core.plan import NO_MIDDLE, Plan, Region
from trajectory_compressor.engine import writer as writer_module
from trajectory_compressor.engine.checkpoint import Checkpoint
from trajectory_compressor.engine.compressor import RowResult
from trajectory_compressor.engine.layout import OutputLayout
from trajectory_compressor.engine.progress import Progress
from trajectory_compressor.engine.writer import RunWriter, StrictStop
from trajectory_compressor.formats.base import InputFile, Location, Record, temp_path
from trajectory_compressor.formats.parquet import parts_dir

TURNS = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]


def make_writer(tmp_path: Path, strict: bool = False, resume: Checkpoint | None = None,
                open_file: bool = True, **knobs: Any) -> RunWriter:
    src = tmp_path / "in.jsonl"
    src.write_text("")
    out = tmp_path / "out.jsonl"
    layout = OutputLayout({src: out, tmp_path / "in2.jsonl": tmp_path / "out2.jsonl"},
                          {src: "jsonl", tmp_path / "in2.jsonl": "jsonl"}, tmp_path / "out")
    config = CompressionConfig(**{"checkpoint_rows": 10_000, "checkpoint_seconds": 3600.0,
                                  **knobs})
    writer = RunWriter(layout, config, Progress(quiet=True), ([], {"sample": None}),
                       strict=strict, resume=resume)
    if open_file:
        writer.open_file(0, InputFile(src, "jsonl"), resume.output if resume else None)
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
    # An error text no reason names: the code `failed`, the text as it was.
    entry = files["out_over_limit.jsonl"][0]
    assert (entry["reason"], entry["reason_text"]) == ("failed", "summary deadline passed")
    assert writer.metrics.reasons == {"failed": 1}


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
    writer.write(record(3, row), result(row, over=True, reason=NO_MIDDLE), 0)
    files = finish(writer, tmp_path)
    assert files["out.jsonl"] == [row]
    [entry] = files["out_over_limit.jsonl"]
    assert list(entry) == ["location", "file", "line", "id", "reason", "reason_text",
                           "reason_numbers", "metrics"]
    assert entry["location"] == "in.jsonl:3" and entry["line"] == 3
    assert entry["id"] == "r7" and entry["reason"] == "nothing_compressible"
    assert entry["reason_text"] == NO_MIDDLE
    assert entry["reason_numbers"]["tokens_before"] == 900
    assert writer.metrics.reasons == {"nothing_compressible": 1}
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
    for i in range(25):
        writer.reject(record(10 + i), f"reason {i}", 0)
    assert len(writer.warnings) == 20  # the first 20; the rejects file has every one
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "warning: more problems; see the rejects file"
    assert len(err) == 21 and err[0] == "warning: in.jsonl:1: same reason"


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


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_a_checkpoint_once_checkpoint_seconds_have_passed(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(writer_module, "time", types.SimpleNamespace(monotonic=clock))
    writer = make_writer(tmp_path, checkpoint_seconds=5.0)
    row = {"id": "a", "conversations": TURNS}
    clock.now += 4.99
    writer.write(record(1, row), result(row), 0)
    assert not writer.layout.checkpoint.exists()
    clock.now += 0.01  # exactly 5 s since the start
    writer.write(record(2, row), result(row), 0)
    assert Checkpoint.load(writer.layout.checkpoint).skip == 2
    clock.now += 4.0
    writer.write(record(3, row), result(row), 0)
    assert Checkpoint.load(writer.layout.checkpoint).skip == 2  # 4 s since the last one
    assert writer.elapsed() == pytest.approx(9.0)


def test_finishing_a_file_moves_the_cut_to_the_next_one(tmp_path):
    writer = make_writer(tmp_path, checkpoint_rows=1)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row), draws=3)
    writer.finish_file(draws=4)
    writer.checkpoint()
    saved = Checkpoint.load(writer.layout.checkpoint)
    assert (saved.file_index, saved.skip, saved.draws, saved.output) == (1, 0, 4, None)
    assert writer.sink is None and writer.file_index == 1
    # The second input, written and committed with the first.
    writer.open_file(1, InputFile(tmp_path / "in2.jsonl", "jsonl"))
    writer.write(Record(Location("in2.jsonl", line=1), row), result(row), draws=5)
    writer.finish_file(draws=5)
    writer.commit()
    assert json.loads((tmp_path / "out.jsonl").read_text()) == row
    assert json.loads((tmp_path / "out2.jsonl").read_text()) == row
    assert not writer.layout.checkpoint.exists()


def test_a_finished_parquet_output_drops_its_parts_at_the_next_checkpoint(tmp_path):
    # A Parquet output is assembled from part files; once it is complete and a checkpoint
    # has recorded that, the parts are not needed for a resume any more (§7).
    src = tmp_path / "in.jsonl"
    src.write_text("")
    out = tmp_path / "out.parquet"
    layout = OutputLayout({src: out}, {src: "parquet"}, tmp_path / "out")
    config = CompressionConfig(checkpoint_rows=10_000, checkpoint_seconds=3600.0)
    writer = RunWriter(layout, config, Progress(quiet=True), ([], {"sample": None}))
    writer.open_file(0, InputFile(src, "jsonl"))
    rows = [{"id": "a", "conversations": TURNS}, {"id": "b", "conversations": TURNS}]
    writer.write(record(1, rows[0]), result(rows[0]), 0)
    writer.write(record(2, rows[1]), result(rows[1]), 0)
    writer.finish_file(draws=0)
    assert parts_dir(out).is_dir() and temp_path(out).is_file()  # complete, not yet recorded
    writer.checkpoint()
    assert not parts_dir(out).exists() and temp_path(out).is_file()
    assert Checkpoint.load(layout.checkpoint).file_index == 1
    writer.checkpoint()  # a later checkpoint: nothing left to drop
    writer.commit()
    # Every Parquet row has the metrics column (null for a row left as it was, §8).
    assert pq.read_table(out).to_pylist() == [{**r, "compression_metrics": None}
                                              for r in rows]
    assert not temp_path(out).exists() and not layout.checkpoint.exists()


def test_an_output_finished_before_a_resume_is_committed_too(tmp_path):
    final = tmp_path / "done.jsonl"
    temp_path(final).write_text('{"a": 1}\n')
    writer = make_writer(tmp_path)
    writer.adopt_finished(final)
    writer.finish_file(0)
    writer.commit()
    assert final.read_text() == '{"a": 1}\n' and not temp_path(final).exists()


def test_the_progress_counts_every_row_by_outcome(tmp_path):
    writer = make_writer(tmp_path)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row, over=True, reason="r"), 0)
    writer.write(record(2, row), result(row, error="boom"), 0)
    writer.reject(record(3), "bad", 0)
    counters = writer.progress.counters
    assert (counters["over_limit"], counters["failed"], counters["rejected"]) == (2, 1, 1)


def test_stop_after_rows_checkpoints_and_keeps_the_files_for_a_resume(tmp_path):
    writer = make_writer(tmp_path)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row), draws=1)
    writer.write(record(2, row), result(row, over=True, reason="r"), draws=2)
    writer.reject(record(3, raw=b"{x"), "bad", draws=3)
    assert writer.stop() is True
    saved = Checkpoint.load(writer.layout.checkpoint)
    assert (saved.file_index, saved.skip, saved.draws) == (0, 3, 3)
    assert saved.metrics["total_trajectories"] == 2 and saved.metrics["rows_rejected"] == 1
    out = temp_path(tmp_path / "out.jsonl")
    assert out.exists() and not (tmp_path / "out.jsonl").exists()
    assert saved.output == out.stat().st_size > 0
    assert saved.over_limit > 0 and saved.rejects > 0

    # The resumed writer starts from the cut: counts, position, sidecars, elapsed time.
    saved.elapsed = 100.0
    (tmp_path / ".out_rejects.jsonl.partial").open("ab").write(b'{"past": "the cut"}\n')
    again = make_writer(tmp_path, resume=saved)
    assert (again.file_index, again.skip, again.draws) == (0, 3, 3)
    assert again.metrics.total_trajectories == 2 and again.metrics.rows_rejected == 1
    assert 100.0 <= again.elapsed() < 200.0
    again.write(record(4, row), result(row), draws=4)
    files = finish(again, tmp_path)
    assert files["out.jsonl"] == [row, row, row]
    assert len(files["out_over_limit.jsonl"]) == 1
    assert [r["line"] for r in files["out_rejects.jsonl"]] == [3]  # past the cut: gone
    assert again.metrics.total_trajectories == 3


def test_stop_before_any_row_leaves_nothing_behind(tmp_path):
    writer = make_writer(tmp_path)
    assert writer.stop() is False
    assert not list(tmp_path.glob(".out*")) and not list(tmp_path.glob("out*"))


class Interrupted(BaseException):
    pass


def checkpointed_writer(tmp_path) -> tuple[Any, Checkpoint]:
    """A writer with one row written and checkpointed, and that checkpoint."""
    writer = make_writer(tmp_path)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row), 0)
    writer.checkpoint()
    return writer, Checkpoint.load(writer.layout.checkpoint)


def torn(_row: Any) -> None:
    raise Interrupted


def test_stop_in_the_middle_of_a_row_does_not_checkpoint_a_torn_cut(tmp_path):
    writer, cut = checkpointed_writer(tmp_path)
    row = {"id": "a", "conversations": TURNS}
    writer.over_limit.write_row = torn  # type: ignore[method-assign]
    with pytest.raises(Interrupted):  # the row went to the output, not yet to the sidecar
        writer.write(record(2, row), result(row, over=True, reason="r"), 0)
    assert writer.stop() is True  # the earlier checkpoint stands, not one past row 2
    assert Checkpoint.load(writer.layout.checkpoint) == cut


def test_stop_in_the_middle_of_a_reject_does_not_checkpoint_either(tmp_path):
    writer, cut = checkpointed_writer(tmp_path)
    writer.rejects.write_row = torn  # type: ignore[method-assign]
    with pytest.raises(Interrupted):
        writer.reject(record(2, raw=b"{"), "bad", 0)
    assert writer.stop() is True
    assert Checkpoint.load(writer.layout.checkpoint) == cut


def test_abandon_deletes_every_temporary_file_and_the_checkpoint(tmp_path):
    writer = make_writer(tmp_path, checkpoint_rows=1)
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row, over=True, reason="r"), 0)
    writer.reject(record(2, raw=b"{"), "bad", 0)
    assert writer.layout.checkpoint.exists()
    writer.abandon()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_file_gets_the_writers_text_measure_unless_it_brings_its_own(tmp_path, monkeypatch):
    seen: list[Any] = []
    real = writer_module.open_sink

    def spy(container, final, source, resume=None, text_chars=None):
        seen.append(text_chars)
        return real(container, final, source, resume, text_chars)

    monkeypatch.setattr(writer_module, "open_sink", spy)
    writer = make_writer(tmp_path, open_file=False)
    writer.open_file(0, InputFile(tmp_path / "in.jsonl", "jsonl"))
    mine = len
    writer.finish_file(0)
    writer.open_file(1, InputFile(tmp_path / "in2.jsonl", "jsonl"), text_chars=mine)
    assert seen == [writer.text_chars, mine]


def test_the_pointer_to_the_rejects_file_comes_with_the_21st_warning(tmp_path, capsys):
    writer = make_writer(tmp_path)
    for i in range(21):
        writer.reject(record(i + 1), f"reason {i}", 0)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 21 and err[-1] == "warning: more problems; see the rejects file"


def test_an_empty_file_is_warned_about(tmp_path):
    writer = make_writer(tmp_path)
    writer.empty_file(InputFile(tmp_path / "e.jsonl", "jsonl"))
    assert writer.warnings == [f"{tmp_path / 'e.jsonl'}: file is empty (no rows)"]


def test_a_writer_is_not_strict_unless_asked(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("")
    layout = OutputLayout({src: tmp_path / "out.jsonl"}, {src: "jsonl"}, tmp_path / "out")
    writer = RunWriter(layout, CompressionConfig(), Progress(quiet=True), ([], {}))
    writer.open_file(0, InputFile(src, "jsonl"))
    row = {"id": "a", "conversations": TURNS}
    writer.write(record(1, row), result(row, error="boom"), 0)  # no StrictStop
    assert writer.metrics.trajectories_failed == 1


def test_stop_right_after_a_finished_file_checkpoints_it(tmp_path):
    writer = make_writer(tmp_path)
    writer.finish_file(draws=0)  # an input without rows, finished
    assert writer.stop() is True
    assert Checkpoint.load(writer.layout.checkpoint).file_index == 1
