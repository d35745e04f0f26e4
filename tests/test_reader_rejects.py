"""The JSONL reader: which lines are rows, which are rejects, and what each reject says.

Every expected record is written out by hand from the bytes of a small file.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

from trajectory_compressor.formats.base import InputFile, Location
from trajectory_compressor.formats.jsonl import read_jsonl


def read(path: Path, fmt: str = "jsonl", skip: int = 0) -> list:
    return list(read_jsonl(InputFile(path, fmt), skip))


def test_nan_and_infinity_lines_are_rows_not_rejects(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    lines = [b'{"a": NaN}', b'{"b": [Infinity, -Infinity]}', b'{"c": 1e400}']
    src.write_bytes(b"\n".join(lines) + b"\n")
    records = read(src)
    assert [r.error for r in records] == [None, None, None]
    assert math.isnan(records[0].row["a"])
    assert records[1].row == {"b": [math.inf, -math.inf]}
    assert records[2].row == {"c": math.inf}
    assert [r.raw for r in records] == lines
    assert [r.location for r in records] == [Location(str(src), line=n) for n in (1, 2, 3)]


def test_integers_beyond_64_bits_and_lone_surrogates_read_exactly(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"n": 123456789012345678901234567890}\n{"s": "x\\ud800y"}\n')
    big, surrogate = read(src)
    assert big.row == {"n": 123456789012345678901234567890}
    assert surrogate.row == {"s": "x\ud800y"}


def test_bad_lines_are_records_with_their_line_error_and_raw_bytes(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    # line 1 fine, 2 blank, 3 broken JSON, 4 whitespace, 5 not UTF-8, 6 CRLF row
    src.write_bytes(b'{"a": 1}\n\n{oops\n   \n{"b": "\xff"}\r\n{"c": 2}\r\n')
    records = read(src)
    assert [r.location.line for r in records] == [1, 3, 5, 6]
    ok, broken, latin, crlf = records
    assert ok.row == {"a": 1} and ok.error is None
    assert broken.row is None and broken.raw == b"{oops"
    assert broken.error is not None and broken.error.startswith("invalid JSON: ")
    assert latin.row is None and latin.raw == b'{"b": "\xff"}'
    assert latin.error == "line is not valid UTF-8 (byte 0xff at offset 7)"
    assert crlf.row == {"c": 2} and crlf.raw == b'{"c": 2}'


def test_skip_lines_passes_over_physical_lines(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"a": 1}\n\n{"a": 3}\n{"a": 4}\n')
    assert [r.location.line for r in read(src, skip=2)] == [3, 4]
    assert [r.row for r in read(src, skip=3)] == [{"a": 4}]
    assert read(src, skip=4) == []


def test_a_truncated_gzip_keeps_its_lines_and_ends_with_one_error(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl.gz"
    body = b"".join(b'{"i": %d, "pad": "%s"}\n' % (i, b"x" * 50) for i in range(200))
    whole = gzip.compress(body)
    src.write_bytes(whole[: len(whole) // 2])
    records = read(src, "jsonl.gz")
    rows, last = records[:-1], records[-1]
    assert rows and all(r.error is None for r in rows)
    assert [r.row["i"] for r in rows] == list(range(len(rows)))
    n = len(rows)
    assert last.location == Location(str(src), line=n + 1)
    assert last.error == (f"the gzip stream is truncated; the file breaks off after line {n}")
    # Resumed past the break: the error is not reported twice.
    assert read(src, "jsonl.gz", skip=n + 1) == []
    assert read(src, "jsonl.gz", skip=n)[-1].error == last.error


def test_a_file_that_is_not_gzip_is_one_error_without_a_line(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl.gz"
    src.write_bytes(b'{"a": 1}\n')
    [only] = read(src, "jsonl.gz")
    assert only.location == Location(str(src)) and only.row is None
    assert only.error == "not a gzip file (named .gz)"


def test_an_unreadable_file_is_one_error(tmp_path: Path) -> None:
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    [only] = read(folder)
    assert only.location == Location(str(folder))
    assert only.error == "cannot read the file (Is a directory)"


def test_reading_starts_at_the_first_line_by_default(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"a": 1}\n{"a": 2}\n')
    assert [r.row for r in read_jsonl(InputFile(src, "jsonl"))] == [{"a": 1}, {"a": 2}]


def test_a_corrupt_gzip_stream_is_one_error(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl.gz"
    whole = bytearray(gzip.compress(b'{"a": 1}\n' * 50))
    whole[10] = 0x07  # the first deflate block: an invalid block type
    src.write_bytes(bytes(whole))
    records = read(src, "jsonl.gz")
    assert records[-1].error is not None
    assert records[-1].error == ("the gzip stream is corrupt (Error -3 while decompressing "
                                 "data: invalid block type)")


def test_input_rows_counts_lines_with_or_without_a_final_newline(tmp_path: Path) -> None:
    from trajectory_compressor.formats.jsonl import input_rows

    src = tmp_path / "in.jsonl"
    src.write_bytes(b"{}\n{}\n{}\n")
    assert input_rows(InputFile(src, "jsonl")) == 3
    src.write_bytes(b"{}\n{}\n{}")
    assert input_rows(InputFile(src, "jsonl")) == 3
    src.write_bytes(b"")
    assert input_rows(InputFile(src, "jsonl")) == 0
    src.write_bytes(b"{}\n" * 2_000_000)  # past one 4 MiB read
    assert input_rows(InputFile(src, "jsonl")) == 2_000_000
    gz = tmp_path / "in.jsonl.gz"
    gz.write_bytes(gzip.compress(b"{}\n" * 3))
    assert input_rows(InputFile(gz, "jsonl.gz")) is None  # not decompressed twice
    assert input_rows(InputFile(tmp_path / "missing.jsonl", "jsonl")) is None


def test_the_sink_counts_rows_and_keeps_or_drops_its_file(tmp_path: Path) -> None:
    from trajectory_compressor.formats.base import temp_path
    from trajectory_compressor.formats.jsonl import JsonlSink, open_sink

    final = tmp_path / "out.jsonl"
    sink = open_sink(final, None, None, len)
    sink.write_row({"a": 1})
    sink.write_raw(b'{"b":  2}')
    assert sink.rows == 2
    assert sink.flush() == len(b'{"a":1}\n{"b":  2}\n')
    sink.write_row([3])
    sink.finish()  # complete under the temporary name
    assert temp_path(final).read_bytes() == b'{"a":1}\n{"b":  2}\n[3]\n'
    assert sink.rows == 3 and not final.exists()
    sink.commit()
    assert final.read_bytes() == b'{"a":1}\n{"b":  2}\n[3]\n'

    other = JsonlSink(tmp_path / "other.jsonl")
    other.write_row({"x": 1})
    other.close_keep()
    assert temp_path(tmp_path / "other.jsonl").read_bytes() == b'{"x":1}\n'
    again = JsonlSink(tmp_path / "other.jsonl", resume_at=0)
    again.write_row({"y": 2})
    again.discard()
    assert not temp_path(tmp_path / "other.jsonl").exists()
