"""`RowStream` and `Entry` unit by unit (issue 26, item 5: survivors of the whole-module
mutation run of engine/stream.py).

Expected values from the module's contracts: records are validated by their file's
dialect (picked from the first rows that parse and are not too deep), a row with a read
error, one nested past `MAX_NESTING` or one the dialect's row check refuses is rejected
with that reason, any other failure as "cannot read the row: ..."; an entry's size is its
raw bytes, 0 for a row that failed to read, else its conversation text; one seeded draw
per record when sampling (none without); batches end at ``batch_rows`` rows or when
their characters reach ``batch_chars``; distilling replaces the record's row.
"""

from __future__ import annotations

import json
import os
import random
from functools import partial
from pathlib import Path

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, write_jsonl
from tests.test_kills_engine_runs_compressor import COLOURED, PLAIN
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.dialects import detect
from trajectory_compressor.dialects.sharegpt import SHAREGPT, ShareGPT
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.stream import RowStream
from trajectory_compressor.formats.base import Location, Record
from trajectory_compressor.formats.jsonio import MAX_NESTING
from trajectory_compressor.formats.registry import discover_inputs

OPENAI_ROW = {"messages": [{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": "hello"}]}


def source_of(path):
    return discover_inputs(str(path))[0]


def entries(stream, source, skip=0):
    return [e for b in stream.batches(source, skip) for e in b]


def test_detection_reads_the_first_rows_that_parse(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("not json\n" + "\n".join(json.dumps(OPENAI_ROW) for _ in range(3)) + "\n")
    stream = RowStream(partial(detect, config=CompressionConfig()))
    assert stream.dialect is SHAREGPT  # until a file is detected
    picked = stream.detect(source_of(src))
    assert picked is stream.dialect and picked.name == "openai"
    got = entries(stream, source_of(src))
    assert [e.turns is not None for e in got] == [False, True, True, True]
    assert got[0].size == len(b"not json") and got[0].reject is not None


def test_a_deep_row_neither_votes_nor_is_read(tmp_path):
    deep: object = "x"
    for _ in range(MAX_NESTING + 5):
        deep = [deep]
    row = {"messages": OPENAI_ROW["messages"], "extra": deep}
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(row) + "\n" + json.dumps(HAND_ROWS[0]) + "\n")
    stream = RowStream(partial(detect, config=CompressionConfig()))
    assert stream.detect(source_of(src)).name == "sharegpt"
    first, second = entries(stream, source_of(src))
    assert first.reject == (f"nested more than {MAX_NESTING} levels deep (objects and "
                            "arrays); rows this deep are not processed")
    assert first.turns is None and second.turns is not None


def test_a_named_dialect_is_kept_and_rows_are_checked_only_when_detected(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [*HAND_ROWS[:2], OPENAI_ROW])
    named = RowStream(SHAREGPT)
    assert named.detect(source_of(src)) is SHAREGPT
    got = entries(named, source_of(src))
    assert [e.turns is not None for e in got] == [True, True, False]
    detected = RowStream(partial(detect, config=CompressionConfig()))
    detected.detect(source_of(src))
    odd = entries(detected, source_of(src))[2]
    assert odd.reject is not None and odd.reject.startswith(
        "this row is OpenAI messages (a 'messages' list of role objects), but its file was "
        "detected as Hermes ShareGPT")


def test_entry_sizes_and_reasons():
    stream = RowStream(SHAREGPT)
    raw = json.dumps(HAND_ROWS[0]).encode()
    assert stream.entry(Record(Location("f", line=1), HAND_ROWS[0], raw)).size == len(raw)
    # Without its bytes, the characters of its turns' texts: 10 + 5 * 5 words.
    text = sum(len(t["value"]) for t in HAND_ROWS[0]["conversations"])
    parsed = stream.entry(Record(Location("f", row=0), HAND_ROWS[0]))
    assert parsed.size == text and parsed.turns is not None and parsed.reject is None
    failed = stream.entry(Record(Location("f", line=2), None, None, "invalid JSON"))
    assert (failed.size, failed.turns, failed.reject) == (0, None, "invalid JSON")
    array = stream.entry(Record(Location("f", line=3), [1, 2], b"[1, 2]"))
    assert array.reject == "row is a JSON array, expected an object"


class Fragile(ShareGPT):
    """A dialect with a bug: a row without an id breaks it."""

    def turns(self, row):
        row["id"]
        return super().turns(row)


def test_a_failure_no_check_foresaw_rejects_the_row_not_the_run():
    stream = RowStream(Fragile())
    entry = stream.entry(Record(Location("f", line=1), {"conversations": []}))
    assert entry.turns is None and entry.reject == "cannot read the row: KeyError: 'id'"


def test_without_sampling_no_draw_is_made(tmp_path):
    source = source_of(write_jsonl(tmp_path / "in.jsonl", HAND_ROWS))
    stream = RowStream(SHAREGPT)
    got = entries(stream, source)
    assert [e.draws for e in got] == [0] * 5 and stream.draws == 0


def test_read_any_says_whether_the_file_gave_a_record(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    stream = RowStream(SHAREGPT)
    assert entries(stream, source_of(empty)) == [] and stream.read_any is False
    full = source_of(write_jsonl(tmp_path / "in.jsonl", HAND_ROWS[:1]))
    entries(stream, full)
    assert stream.read_any is True
    # A resumed file past its first line has given records before.
    resumed = RowStream(SHAREGPT)
    assert entries(resumed, full, skip=1) == [] and resumed.read_any is True
    # Sampled out, a record was still read.
    none_kept = RowStream(SHAREGPT, sample_percent=1e-12)
    assert entries(none_kept, full) == [] and none_kept.read_any is True


def test_batches_of_batch_rows(tmp_path):
    source = source_of(write_jsonl(tmp_path / "in.jsonl", [HAND_ROWS[0]] * 5))
    stream = RowStream(SHAREGPT, batch_rows=2)
    assert [len(b) for b in stream.batches(source)] == [2, 2, 1]
    assert [e.record.position for b in stream.batches(source) for e in b] == [1, 2, 3, 4, 5]


def test_a_batch_ends_when_its_characters_reach_batch_chars_exactly(tmp_path):
    source = source_of(write_jsonl(tmp_path / "in.jsonl", [HAND_ROWS[0]] * 5))
    size = next(RowStream(SHAREGPT).batches(source))[0].size
    stream = RowStream(SHAREGPT, batch_chars=2 * size)
    assert [len(b) for b in stream.batches(source)] == [2, 2, 1]


def test_distilling_an_entry_replaces_its_row_and_drops_its_bytes(counter):
    c = TrajectoryCompressor(CompressionConfig(**HAND_CONFIG, summarizer="extractive",
                                               distill="safe"), counter=counter)
    data = {"id": "r", "conversations": [{"from": "human", "value": "run it"},
                                         {"from": "tool", "value": COLOURED}]}
    stream = RowStream(SHAREGPT)
    entry = stream.entry(Record(Location("f", line=1), data, json.dumps(data).encode()))
    assert entry.distill_with(c) is None
    assert entry.record.raw is None and entry.distill is not None
    assert entry.turns is not None and entry.turns[1]["value"] == PLAIN
    assert entry.record.row["conversations"][1]["value"] == PLAIN
    # Nothing to distill: the row and its bytes stay.
    plain = {"id": "p", "conversations": [{"from": "tool", "value": PLAIN}]}
    raw = json.dumps(plain).encode()
    same = stream.entry(Record(Location("f", line=2), plain, raw))
    assert same.distill_with(c) is None
    assert same.record.raw == raw and same.distill is None and same.record.row is plain
    # A rejected row is not distilled.
    bad = stream.entry(Record(Location("f", line=3), None, b"x", "invalid JSON"))
    assert bad.distill_with(c) is None and bad.record.raw == b"x"


class BrokenRules:
    """Distilling with a bug in a rule."""

    def distill(self, row, turns, dialect):
        raise ValueError("rule bug")


def test_a_distill_bug_costs_the_row_its_distilling_only():
    data = {"id": "r", "conversations": [{"from": "tool", "value": COLOURED}]}
    entry = RowStream(SHAREGPT).entry(Record(Location("f", line=1), data, b"{}"))
    why = entry.distill_with(BrokenRules())  # type: ignore[arg-type]
    assert why == "distill failed, the row goes on undistilled: ValueError: rule bug"
    assert entry.record.row is data and entry.record.raw == b"{}"


def test_a_batch_holds_about_4_mib_of_input_by_default(tmp_path):
    """BENCHMARKS (peak memory): a batch is at most about 4 MB of input besides its row
    count. Rows of exactly 1 MiB each: a batch closes once it holds 4 of them."""
    probe = tmp_path / "probe.jsonl"
    write_jsonl(probe, [HAND_ROWS[0]])
    line = probe.read_bytes().rstrip(b"\n")
    extra = next(RowStream(SHAREGPT).batches(source_of(probe)))[0].size - len(line)
    pad = (1 << 20) - extra - len(json.dumps({**HAND_ROWS[0], "pad": ""}))
    src = write_jsonl(tmp_path / "in.jsonl", [{**HAND_ROWS[0], "pad": "p" * pad}] * 10)
    stream = RowStream(SHAREGPT)
    batches = list(stream.batches(source_of(src)))
    assert {e.size for b in batches for e in b} == {1 << 20}
    assert [len(b) for b in batches] == [4, 4, 2]


def test_the_streams_defaults_are_a_runs_defaults(tmp_path):
    """README (library): ``seed`` defaults to 42; a stream built without one samples as
    a run does, and batches as ``processing.batch_rows`` does by default."""
    source = source_of(write_jsonl(tmp_path / "in.jsonl", [HAND_ROWS[0]] * 300))
    plain = RowStream(SHAREGPT, sample_percent=50)
    seeded = RowStream(SHAREGPT, sample_percent=50, seed=42)
    kept = [e.record.position for e in entries(plain, source)]
    assert kept == [e.record.position for e in entries(seeded, source)]
    draws = random.Random(42)
    assert kept == [n for n in range(1, 301) if draws.random() < 0.5]
    rows = RowStream(SHAREGPT)
    assert rows.read_any is False  # no file read yet
    assert [len(b) for b in rows.batches(source)] == [CompressionConfig().batch_rows,
                                                      300 - CompressionConfig().batch_rows]
    assert RowStream(SHAREGPT).entry(Record(Location("f", line=1), HAND_ROWS[0])).draws == 0


def test_p_is_a_percentage(tmp_path):
    """P% of rows: a first draw just under P/100 keeps the first row (and just over it,
    not)."""
    source = source_of(write_jsonl(tmp_path / "in.jsonl", [HAND_ROWS[0]]))
    first = random.Random(3).random()
    under = RowStream(SHAREGPT, sample_percent=first * 100 * 1.005, seed=3)
    assert [e.record.position for e in entries(under, source)] == [1]
    over = RowStream(SHAREGPT, sample_percent=first * 100 * 0.995, seed=3)
    assert entries(over, source) == []


def test_detection_closes_the_file_even_when_the_vote_fails(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)

    def refuse(rows):
        next(iter(rows))
        raise ValueError("no vote")

    stream = RowStream(refuse)
    with pytest.raises(ValueError, match="no vote") as caught:
        stream.detect(source_of(src))
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            held.append(os.readlink(fd))
        except OSError:
            continue
    assert str(src) not in held, caught


def test_detection_reads_from_the_files_first_line_whatever_the_resume_point(tmp_path):
    """A file of one OpenAI-messages row is detected as such (the vote starts at the
    file's start: a resumed run decides as the interrupted one did)."""
    src = write_jsonl(tmp_path / "in.jsonl", [OPENAI_ROW])
    stream = RowStream(partial(detect, config=CompressionConfig()))
    assert stream.detect(source_of(src)).name == "openai"
    assert entries(stream, source_of(src), skip=1) == []
