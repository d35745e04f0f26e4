"""The Parquet reader's batches, damaged pages and skipped rows, and the Parquet sink's
row groups, part files, checkpoints and refusals (issue 26, item 5, round 7).

Expected values come from README (Parquet read by record batch of 256 rows, fewer so that
a batch holds at most 4 MiB of uncompressed data, at least one; a damaged page rejects the
rest of the file from its batch's first row, or the resume row, saying how many rows were
lost; a file with no list of turns lists its columns, types cut to 40 characters, the list
to 300; integers from -2**63 to 2**64 - 1, a bigger one quoted cut to 60 characters), from
formats/parquet.py's documentation: `records_from_batches` (rows before ``skip_rows``
passed over), `_check_utf8` and `ParquetSink.write_row` (a lone surrogate is a
`UnicodeEncodeError`), the module docstring (parts closed at a
checkpoint, ``pending-<rows>.parquet`` with the previous one kept, a resumed run making
exactly the row groups an uninterrupted one makes, one part renamed to the file), README
"Parquet outputs" (row groups of at most 1,000 rows or 4 MiB of turn text; a field that
changes type is a located reject; an empty object no row of its row group gives a key is
null), the comment of `_release_memory` (Arrow's freed row groups given back) and
Parquet's own format (a row group's ``total_byte_size`` is its uncompressed size; a PLAIN
byte array value is a 4-byte little-endian length then the bytes; no struct without
fields). Every file is a real Parquet file in tmp_path.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.open_files import open_files_under
from trajectory_compressor.formats.base import InputFile, temp_path
from trajectory_compressor.formats.parquet import (
    METRICS_COLUMN,
    METRICS_TYPE,
    ROW_GROUP_CHARS,
    ParquetSink,
    input_schema,
    parts_dir,
    read_parquet,
    schema_problem,
)

CONV = [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"}]
TURNS = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))

_NEEDS_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                 reason="open files are listed from /proc (Linux)")


def _conv(i: int, size: int = 0) -> list[dict[str, str]]:
    """Two turns whose answer starts with a marker unique to row ``i`` (``a0007``...)."""
    return [{"from": "human", "value": "question"},
            {"from": "gpt", "value": f"a{i:04d}" + "x" * size}]


def _write_pages(path: Path, rows: list[dict], **kwargs) -> None:
    """``rows`` as an uncompressed, PLAIN-encoded Parquet file without statistics, so that
    a value's bytes are found (and damaged) once in the file, in its page."""
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("conversations", TURNS)])),
                   path, compression="none", use_dictionary=False, data_page_size=1,
                   write_statistics=False, **kwargs)


def _damage_value(path: Path, marker: bytes) -> None:
    """Make the PLAIN length prefix of the value starting with ``marker`` claim more bytes
    than the page holds: that page can no longer be decoded."""
    data = bytearray(path.read_bytes())
    at = data.find(marker)
    assert at > 4 and data.find(marker, at + 1) == -1
    data[at - 4:at] = (0x7FFFFFFF).to_bytes(4, "little")
    path.write_bytes(bytes(data))


def _read(path: Path, skip_rows: int = 0) -> tuple[list, list]:
    records = list(read_parquet(InputFile(path, "parquet"), skip_rows=skip_rows))
    good = [(r.location.row, r.row) for r in records if r.error is None]
    bad = [(r.location.row, r.error) for r in records if r.error is not None]
    return good, bad


# -- damaged pages: the error is located at the first row of the batch that failed -------

def test_a_damaged_page_loses_the_rows_from_its_batch_of_256_on(tmp_path):
    path = tmp_path / "in.parquet"
    # Pages of 10 rows (a page is cut every write batch once over 1 byte): rows 260-269
    # share a page, which lies in the second batch of 256 rows (256-299).
    _write_pages(path, [{"conversations": _conv(i)} for i in range(300)],
                 write_batch_size=10)
    _damage_value(path, b"a0263")
    good, bad = _read(path)
    assert [row for row, _ in good] == list(range(256))  # the first batch, whole
    assert good[255][1] == {"conversations": _conv(255)}
    assert len(bad) == 1
    row, error = bad[0]
    assert row == 256
    assert error.startswith("the Parquet file is damaged from this row on (")
    assert error.endswith("; 44 rows could not be read")  # 300 - 256


def test_rows_larger_than_the_batch_bytes_come_one_a_batch(tmp_path):
    path = tmp_path / "in.parquet"
    # Three rows of 2.2 MB each (uncompressed): 4 MiB holds one such row, not two, so each
    # row is a batch of its own (one page per row: write batches of one row).
    size = 2_200_000
    _write_pages(path, [{"conversations": _conv(i, size)} for i in range(3)],
                 write_batch_size=1)
    _damage_value(path, b"a0001")
    good, bad = _read(path)
    assert [row for row, _ in good] == [0]
    assert good[0][1] == {"conversations": _conv(0, size)}
    assert len(bad) == 1
    assert bad[0][0] == 1
    assert bad[0][1].endswith("; 2 rows could not be read")


def test_rows_of_200_kb_come_twenty_a_batch(tmp_path):
    path = tmp_path / "in.parquet"
    # 30 rows of 200 KB: 4 MiB (4,194,304 bytes) holds 20 of them (20.9), so the batches
    # are rows 0-19 and 20-29; a damaged page in row 22 loses rows 20-29. (5 MiB would
    # make batches of 26 rows, 8 MiB one batch: either loses every row.)
    size = 200_000
    _write_pages(path, [{"conversations": _conv(i, size)} for i in range(30)],
                 write_batch_size=1)
    _damage_value(path, b"a0022")
    good, bad = _read(path)
    assert [row for row, _ in good] == list(range(20))
    assert [(row, error.rsplit(";", 1)[1]) for row, error in bad] == [
        (20, " 10 rows could not be read")]


def test_bytes_missing_from_the_last_row_group_keep_the_row_groups_before_it(tmp_path):
    # Two row groups of 10 rows of 400 KB: 4 MiB // 400 KB = 10 rows a batch, so the
    # first batch is the first row group. Bytes cut out of the end of the last column
    # chunk (more than the footer's length: its range now ends past the end of the file)
    # damage the second row group only; the first one's rows are kept.
    path = tmp_path / "in.parquet"
    size = 400_000
    _write_pages(path, [{"conversations": _conv(i, size)} for i in range(20)],
                 row_group_size=10)
    data = path.read_bytes()
    footer = int.from_bytes(data[-8:-4], "little") + 8  # metadata, its length, PAR1
    cut = footer + 100
    path.write_bytes(data[:-footer - cut] + data[-footer:])
    good, bad = _read(path)
    assert good == [(i, {"conversations": _conv(i, size)}) for i in range(10)]
    assert [(row, error.rsplit(";", 1)[1]) for row, error in bad] == [
        (10, " 10 rows could not be read")]


# -- skip_rows: rows before the resume row are passed over ------------------------------

def test_a_damaged_row_group_wholly_before_the_resume_row_is_not_read(tmp_path):
    path = tmp_path / "in.parquet"
    _write_pages(path, [{"conversations": _conv(i)} for i in range(20)], row_group_size=10)
    assert pq.ParquetFile(path).metadata.num_row_groups == 2
    _damage_value(path, b"a0004")  # in the first row group (rows 0-9)
    good, bad = _read(path, skip_rows=10)
    assert bad == []
    assert good == [(i, {"conversations": _conv(i)}) for i in range(10, 20)]
    # Resumed one row earlier, the damaged group is read: the error is at the resume row.
    good, bad = _read(path, skip_rows=9)
    assert good == []
    assert [(row, error.rsplit(";", 1)[1]) for row, error in bad] == [
        (9, " 11 rows could not be read")]


def test_skip_rows_inside_a_batch_keeps_the_rows_locations(tmp_path):
    path = tmp_path / "in.parquet"
    _write_pages(path, [{"conversations": _conv(i)} for i in range(10)])
    good, bad = _read(path, skip_rows=3)
    assert bad == []
    assert good == [(i, {"conversations": _conv(i)}) for i in range(3, 10)]


def test_skip_rows_inside_a_batch_with_an_undecodable_row(tmp_path):
    # A timestamp whose time zone no database knows: the file reads, but the value cannot
    # become a Python value, so the slice is converted row by row to find it.
    table = pa.table({
        "conversations": pa.array([_conv(i) for i in range(10)], TURNS),
        "at": pa.array([None] * 5 + [5] + [None] * 4,
                       pa.timestamp("s", tz="Nowhere/Atlantis")),
    })
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    records = list(read_parquet(InputFile(path, "parquet"), skip_rows=3))
    assert [r.location.row for r in records] == [3, 4, 5, 6, 7, 8, 9]
    assert [r.error is None for r in records] == [True, True, False, True, True, True, True]
    assert records[0].row == {"conversations": _conv(3), "at": None}
    assert records[6].row == {"conversations": _conv(9), "at": None}


def test_an_unreadable_file_says_why(tmp_path):
    missing = tmp_path / "missing.parquet"
    records = list(read_parquet(InputFile(missing, "parquet")))
    assert len(records) == 1 and records[0].row is None
    error = records[0].error
    assert error.startswith("not a readable Parquet file (")
    # The reason is the OS's: the file does not exist.
    assert "No such file" in error or "not found" in error.lower()
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not a parquet file at all")
    [record] = list(read_parquet(InputFile(garbage, "parquet")))
    # Parquet files end with the magic bytes PAR1; pyarrow names what it missed.
    assert record.error.startswith("not a readable Parquet file (")
    assert "magic" in record.error.lower()


# -- schema_problem: the columns listed, types cut to 40 characters, the list to 300 ----

def test_the_schema_problem_cuts_each_type_to_40_characters():
    long_type = pa.struct([(f"field{i}", pa.int64()) for i in range(5)])
    text = str(long_type)
    assert len(text) > 41
    problem = schema_problem(pa.schema([("meta", long_type)]))
    assert problem is not None
    assert f"(columns: meta ({text[:39]}…))" in problem


def test_the_schema_problem_cuts_the_column_list_to_300_characters():
    names = [f"column_{i:03d}" for i in range(40)]  # "column_000 (int64)" is 18 chars
    problem = schema_problem(pa.schema([(n, pa.int64()) for n in names]))
    shown = ", ".join(f"{n} (int64)" for n in names)
    assert len(shown) > 301
    assert problem is not None
    assert problem.endswith(f"(columns: {shown[:299]}…)")


# -- input_schema: a Parquet input's own columns, with compression_metrics ---------------

def test_input_schema_keeps_the_inputs_columns_and_types(tmp_path):
    path = tmp_path / "in.parquet"
    schema = pa.schema([("conversations", TURNS), ("id", pa.int32()),
                        ("tags", pa.list_(pa.string()))])
    pq.write_table(pa.table({"conversations": [CONV], "id": [7], "tags": [["a"]]},
                            schema=schema), path)
    out = input_schema(InputFile(path, "parquet"))
    assert out is not None
    assert out.names == ["conversations", "id", "tags", METRICS_COLUMN]
    assert out.field("id").type == pa.int32()  # not the int64 a JSON reading would give
    assert out.field("tags").type == pa.list_(pa.string())
    assert out.field(METRICS_COLUMN).type == METRICS_TYPE
    assert out.field(METRICS_COLUMN).nullable
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet")
    assert input_schema(InputFile(garbage, "parquet")) is None  # inferred from the rows


# -- _check_utf8: what a Parquet file cannot hold is refused by write_row ----------------

@pytest.mark.parametrize("row", [
    {"conversations": [{"from": "human", "value": "caf\udce9"}]},
    {"conversations": CONV, "notes": ["ok", {"deep": "\ud800 alone"}]},
    {"conversations": CONV, "k\udce9y": 1},  # a key is a string too
], ids=["turn-value", "nested", "key"])
def test_a_lone_surrogate_is_a_unicode_encode_error(tmp_path, row):
    sink = ParquetSink(tmp_path / "out.parquet")
    with pytest.raises(UnicodeEncodeError):
        sink.write_row(row)
    sink.write_row({"conversations": [{"from": "human", "value": "café ✓"}]})  # UTF-8 fine
    sink.commit()
    assert pq.read_table(tmp_path / "out.parquet").column("conversations").to_pylist() == [
        [{"from": "human", "value": "café ✓"}]]


def test_the_least_int64_is_kept_and_one_less_is_refused(tmp_path):
    sink = ParquetSink(tmp_path / "out.parquet")
    sink.write_row({"conversations": CONV, "n": -(2**63)})
    with pytest.raises(ValueError) as info:
        sink.write_row({"conversations": CONV, "n": -(2**63) - 1})
    assert str(info.value).startswith(
        "the integer -9223372036854775809 is out of the range of a Parquet integer")
    with pytest.raises(ValueError) as info:
        sink.write_row({"conversations": CONV, "n": 2**64})
    assert "18446744073709551616 is out of the range" in str(info.value)
    sink.commit()
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("n").to_pylist() == [-(2**63)]


def test_a_huge_integer_is_quoted_cut_to_60_characters(tmp_path):
    sink = ParquetSink(tmp_path / "out.parquet")
    digits = "1234567890" * 10
    with pytest.raises(ValueError) as info:
        sink.write_row({"conversations": CONV, "n": int(digits)})
    assert str(info.value).startswith(f"the integer {digits[:59]}… is out of the range")


# -- the sink's row groups: cut at 4 MiB of turn text, the count reset after each ------

def _almost_a_group(_row: object) -> int:
    """Turn text one character short of a row group: two such rows make one."""
    return ROW_GROUP_CHARS - 1


def _group_sizes(path: Path) -> list[int]:
    md = pq.ParquetFile(path).metadata
    return [md.row_group(g).num_rows for g in range(md.num_row_groups)]


def test_row_groups_are_cut_when_their_text_reaches_the_limit(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_almost_a_group)
    for i in range(5):
        sink.write_row({"conversations": _conv(i)})
    sink.commit()
    assert _group_sizes(final) == [2, 2, 1]
    assert pq.read_table(final).column("conversations").to_pylist() == [
        _conv(i) for i in range(5)]


def test_a_resumed_run_makes_the_row_groups_of_an_uninterrupted_one(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_almost_a_group)
    sink.write_row({"conversations": _conv(0)})
    state = sink.flush()  # one pending row, under the limit
    sink.close_keep()
    assert state == {"parts": 0, "pending": 1, "rows": 1}
    again = ParquetSink(final, resume=state, text_chars=_almost_a_group)
    again.write_row({"conversations": _conv(1)})  # with the pending row: a whole group
    again.write_row({"conversations": _conv(2)})
    again.commit()
    assert _group_sizes(final) == [2, 1]  # as test_row_groups_are_cut... makes them
    assert pq.read_table(final).column("conversations").to_pylist() == [
        _conv(i) for i in range(3)]


def test_a_resumed_run_keeps_the_checkpoint_it_resumed_from(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    sink.write_row({"conversations": _conv(0)})
    sink.write_row({"conversations": _conv(1)})
    state = sink.flush()
    sink.close_keep()
    again = ParquetSink(final, resume=state)
    again.write_row({"conversations": _conv(2)})
    again.flush()
    # A process dying between this flush and its checkpoint resumes from `state` again:
    # its pending file must still be there.
    pending = sorted(p.name for p in parts_dir(final).glob("pending-*.parquet"))
    assert pending == ["pending-000000000002.parquet", "pending-000000000003.parquet"]
    again.close_keep()
    third = ParquetSink(final, resume=state)
    third.commit()
    assert pq.read_table(final).column("conversations").to_pylist() == [_conv(0), _conv(1)]


# -- a fresh sink: what an earlier run left is cleared; missing folders are made ---------

def test_a_fresh_sink_clears_an_earlier_runs_parts_and_partial_file(tmp_path):
    final = tmp_path / "out.parquet"
    parts = parts_dir(final)
    parts.mkdir()
    (parts / "part-000000.parquet").write_bytes(b"an earlier run's part")
    (parts / "pending-000000000009.parquet").write_bytes(b"an earlier run's rows")
    temp_path(final).write_bytes(b"an earlier run's partial file")
    sink = ParquetSink(final)
    assert list(parts.iterdir()) == []
    assert not temp_path(final).exists()
    sink.write_row({"conversations": CONV})
    sink.commit()
    assert pq.read_table(final).column("conversations").to_pylist() == [CONV]


def test_a_sink_makes_the_missing_folders_of_its_output(tmp_path):
    final = tmp_path / "a" / "b" / "out.parquet"
    sink = ParquetSink(final)
    sink.write_row({"conversations": CONV})
    sink.commit()
    assert pq.read_table(final).num_rows == 1


# -- inferred columns: a row is checked against every row before it ----------------------

def _group_per_row(_row: object) -> int:
    return ROW_GROUP_CHARS


def test_a_field_changing_type_after_a_row_group_without_it_is_refused(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": _conv(0), "score": 1})
    sink.write_row({"conversations": _conv(1)})  # a row group with no score column
    with pytest.raises(ValueError) as info:
        sink.write_row({"conversations": _conv(2), "score": "high"})
    assert "another type than in the rows before it" in str(info.value)
    sink.commit()
    table = pq.read_table(final)
    assert table.column("score").to_pylist() == [1, None]
    assert table.schema.field("score").type == pa.int64()


# -- finish: one part is renamed to the file ---------------------------------------------

def test_one_part_becomes_the_file_by_rename(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    sink.write_row({"conversations": _conv(0)})
    sink.write_row({"conversations": _conv(1)})
    sink.finish()
    assert sink.temp.is_file()
    assert not (parts_dir(final) / "part-000000.parquet").exists()  # moved, not copied
    sink.commit()
    assert pq.read_table(final).column("conversations").to_pylist() == [_conv(0), _conv(1)]


# -- flush: closed parts and pending rows are synced to disk and left closed --------------

@_NEEDS_PROC
def test_flush_syncs_the_part_and_the_pending_rows_and_closes_them(tmp_path, monkeypatch):
    # What reached the disk cannot be seen without a power cut; which files were fsynced
    # can: os.fsync is wrapped (it still syncs) to note the file behind each descriptor.
    synced: list[str] = []
    real_fsync = os.fsync

    def noting_fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_almost_a_group)
    sink.write_row({"conversations": _conv(0)})
    sink.write_row({"conversations": _conv(1)})  # a row group: part-000000 is open
    sink.write_row({"conversations": _conv(2)})  # pending
    monkeypatch.setattr(os, "fsync", noting_fsync)
    state = sink.flush()
    monkeypatch.undo()
    assert state == {"parts": 1, "pending": 1, "rows": 3}
    assert "part-000000.parquet" in synced
    assert ".pending.parquet.tmp" in synced  # synced before its rename to pending-…
    assert (parts_dir(final) / "pending-000000000003.parquet").is_file()
    assert open_files_under(tmp_path) == []  # the part and every descriptor closed
    sink.commit()
    assert pq.read_table(final).column("conversations").to_pylist() == [
        _conv(i) for i in range(3)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE behaviour")
def test_a_checkpoint_fails_when_a_parts_footer_cannot_be_written(tmp_path):
    # A part is readable only once its footer is written (module docstring): a flush whose
    # footer write fails (the disk full: here the file size limit reached) must raise, not
    # return a state that names the footless part as done.
    import resource

    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": _conv(0)})  # its row group written, no footer yet
    part = parts_dir(final) / "part-000000.parquet"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (part.stat().st_size, hard))
    try:
        with pytest.raises(OSError):
            sink.flush()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        with contextlib.suppress(Exception):
            sink.discard()


# -- deep rows and empty outputs ----------------------------------------------------------

def test_a_row_nested_30_levels_deep_is_written(tmp_path):
    # README: only rows nested more than 256 levels deep are refused; 30 levels is far
    # inside Parquet's limits, so the row is written and reads back unchanged.
    deep: object = [1, 2]
    for _ in range(28):
        deep = [deep]
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    sink.write_row({"conversations": CONV, "deep": deep})
    sink.commit()
    assert pq.read_table(final).column("deep").to_pylist() == [deep]


def test_an_output_with_no_rows_keeps_the_input_schema(tmp_path):
    # Every row rejected: the output still has the input's columns (MINIMAL_SCHEMA is for
    # an input that told nothing about them).
    schema = pa.schema([("conversations", TURNS), ("id", pa.int32()),
                        (METRICS_COLUMN, METRICS_TYPE)])
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, schema)
    sink.commit()
    out = pq.read_table(final)
    assert out.num_rows == 0
    assert out.schema.names == ["conversations", "id", METRICS_COLUMN]
    assert out.schema.field("id").type == pa.int32()



# -- memory: Arrow's freed row groups are given back to the system -----------------------
# formats/parquet.py: Arrow's allocator keeps freed row groups for reuse; they are given
# back, so that memory stays one row group whatever the number of row groups written.
# A row group of 1,000 rows of 30 KB is about 30 MB: freed but kept, it stays resident;
# given back, the resident size drops by about that much.

_RESIDENT = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm")
    or pa.default_memory_pool().backend_name not in ("mimalloc", "jemalloc"),
    reason="the resident size (Linux) of an allocator that keeps freed memory")


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _no_chars(_row: object) -> int:
    return 0  # row groups cut at ROW_GROUP_ROWS (1,000) rows only


def _small_rows_alone(row: dict) -> int:
    """Big rows cut row groups at 1,000 rows; a small row is a row group of its own."""
    return 0 if len(row["conversations"][0]["value"]) > 1000 else ROW_GROUP_CHARS


def _write_big_group(sink: ParquetSink) -> None:
    big = "y" * 30_000
    for i in range(1000):
        sink.write_row({"conversations": [{"from": "human", "value": big},
                                          {"from": "gpt", "value": str(i)}]})


@_RESIDENT
def test_the_next_row_group_gives_a_written_ones_memory_back(tmp_path):
    sink = ParquetSink(tmp_path / "out.parquet", text_chars=_small_rows_alone)
    _write_big_group(sink)  # written; its table freed as _write_group returned
    with_big = _resident_mib()
    sink.write_row({"conversations": CONV})  # a row group: the big one's memory given back
    assert with_big - _resident_mib() > 15
    sink.discard()


@_RESIDENT
def test_assembling_parts_gives_each_row_groups_memory_back(tmp_path):
    # Parts (each checkpoint closes one) are copied row group by row group into the
    # file; each one's memory is given back once it is copied.
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_no_chars)
    sink.write_row({"conversations": CONV})
    sink.flush()  # part 0: one row
    _write_big_group(sink)  # part 1: the big row group
    sink.write_row({"conversations": CONV})
    sink.flush()  # part 1 closed; one row pending, a third part at finish
    with_big = _resident_mib()
    sink.finish()
    assert with_big - _resident_mib() > 15
    assert pq.ParquetFile(sink.temp).metadata.num_rows == 1002
    sink.discard()



def _kept_rows(final: Path, rows: list[dict]) -> int:
    """Write ``rows`` (a refused row is a reject) and commit: the rows written."""
    sink = ParquetSink(final)
    kept = 0
    for row in rows:
        try:
            sink.write_row(row)
            kept += 1
        except ValueError:  # refused: a located reject, the run goes on
            pass
    sink.commit()
    return kept


def test_a_row_nested_past_the_checked_depth_that_parquet_cannot_write(tmp_path):
    # Parquet cannot write an empty struct (an empty JSON object). Nested 25 levels deep,
    # past the depth the sink writes and reads back to check (formats/parquet.py:
    # nesting below 24 is far inside Parquet's limit), such a row must be refused by
    # write_row or written: never stop the output (README: one bad row never stops a run).
    deep: object = {}
    for _ in range(24):
        deep = [deep]
    final = tmp_path / "out.parquet"
    kept = _kept_rows(final, [{"conversations": CONV, "deep": deep},
                              {"conversations": CONV}])
    assert kept >= 1
    assert pq.read_table(final).num_rows == kept

# -- empty objects: Parquet has no struct without fields; they are written as null ------

def test_an_empty_object_in_every_row_of_a_group_never_stops_the_output(tmp_path):
    # README: one row no Parquet output can hold is that row's reject; the run goes on.
    # (Before the fix the row was accepted and the row group's write stopped the run.)
    final = tmp_path / "out.parquet"
    kept = _kept_rows(final, [{"conversations": CONV, "meta": {}}, {"conversations": CONV}])
    assert kept >= 1
    assert pq.read_table(final).num_rows == kept


def test_empty_objects_are_written_as_nulls_and_other_rows_keep_their_keys(tmp_path):
    # README "Parquet outputs": an object no row of its row group gives a key (an empty
    # struct, which Parquet cannot write) is null; in a row group where another row gives
    # the object keys it is that struct with null fields, as for any missing key.
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)  # a row group per row
    sink.write_row({"conversations": _conv(0), "meta": {}, "tools": [{}],
                    "m": {"inner": {}, "k": 1}})
    state = sink.flush()  # the pending rows hold no empty struct either
    sink.close_keep()
    sink = ParquetSink(final, resume=state, text_chars=_almost_a_group)
    sink.write_row({"conversations": _conv(1), "meta": {"a": 1}})
    sink.write_row({"conversations": _conv(2), "meta": {}})  # same group as meta {"a": 1}
    sink.commit()
    table = pq.read_table(final)
    assert table.schema.field("meta").type == pa.struct([("a", pa.int64())])
    rows = table.drop_columns(["conversations", METRICS_COLUMN]).to_pylist()
    assert rows == [
        {"meta": None, "tools": [None], "m": {"inner": None, "k": 1}},
        {"meta": {"a": 1}, "tools": None, "m": None},
        {"meta": {"a": None}, "tools": None, "m": None},
    ]


def test_a_field_that_was_an_empty_object_cannot_become_a_string(tmp_path):
    # The rows' own types still check them: an object in one row and a string in a
    # later one is the later row's reject (README), whether or not the object was empty.
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": _conv(0), "meta": {}})
    with pytest.raises(ValueError) as info:
        sink.write_row({"conversations": _conv(1), "meta": "x"})
    assert "another type than in the rows before it" in str(info.value)
    sink.commit()
    assert pq.read_table(final).column("meta").to_pylist() == [None]


def test_compress_jsonl_with_empty_objects_to_parquet(tmp_path):
    from tests.cli_helpers import invoke_cli

    rows = [{"id": i, "conversations": _conv(i), "metadata": {}} for i in range(3)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                       encoding="utf-8")
    run = invoke_cli("compress", "in.jsonl", "-o", "out.parquet", "--summarizer",
                     "extractive", "--quiet", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("id").to_pylist() == [0, 1, 2]
    assert table.column("metadata").to_pylist() == [None, None, None]
    assert table.column("conversations").to_pylist() == [_conv(i) for i in range(3)]
    assert (tmp_path / "out_rejects.jsonl").read_text(encoding="utf-8") == ""
