"""The `.json` array container's reader, counter and sink, unit by unit (issue 26, item 5).

From formats/json_array.py's documentation: a file whose first character is not ``[`` is
one record ("not a JSON array"); an array's elements, then further arrays and JSON
objects after it (``cat a.json b.json``, JSON lines appended) are rows, numbered on, and
anything else after it is a located reject, one per line; ``skip_rows`` rows are passed
over, whichever kind they are; a reject keeps its first 200 bytes as ``raw``. The count
equals the records the reader yields, scanning an array in windows of 64 KiB first,
doubled up to 4 MiB (BENCHMARKS.md, "Counting a .json array": "windows of up to 4 MiB"),
a string longer than the window doubling it until it fits. The sink writes ``[`` + one
row per line + ``]`` and counts the rows it wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trajectory_compressor.formats.base import InputFile, temp_path
from trajectory_compressor.formats.json_array import (
    JsonArraySink,
    count_records,
    input_rows,
    read_json_array,
)


def _records(tmp_path: Path, content: bytes, skip_rows: int = 0) -> list[Any]:
    path = tmp_path / "a.json"
    path.write_bytes(content)
    return list(read_json_array(InputFile(path, "json"), skip_rows))


def _count(tmp_path: Path, content: bytes) -> int | None:
    path = tmp_path / "c.json"
    path.write_bytes(content)
    return input_rows(InputFile(path, "json"))


# -- what is not an array, and what follows an array -----------------------------------------

def test_data_that_does_not_start_with_a_bracket_is_one_record():
    lines = b'{"a": 1}\n{"a": 2}\n{"a": 3}\n'
    # The reader yields one "not a JSON array" record for it, whatever follows.
    assert count_records(lines) == 1


def test_an_object_after_the_array_holding_an_array_is_a_row(tmp_path):
    records = _records(tmp_path, b'[1]\n{"a": [2, {"b": 3}]}\n')
    assert [(r.row, r.error) for r in records] == [(1, None), ({"a": [2, {"b": 3}]}, None)]
    assert records[1].location.row == 1


def test_an_object_after_the_array_is_read_past_brackets_inside_its_strings(tmp_path):
    records = _records(tmp_path, b'[1]\n{"a": "}", "b": "{[\\"]"}\n')
    assert [(r.row, r.error) for r in records] == [(1, None), ({"a": "}", "b": '{["]'}, None)]


def test_objects_and_arrays_after_the_array_need_no_space_between_them(tmp_path):
    content = b'[1]{"a": 1}[2, 3]'
    records = _records(tmp_path, content)
    assert [(r.row, r.error) for r in records] == [
        (1, None), ({"a": 1}, None), (2, None), (3, None)]
    assert records[1].raw == b'{"a": 1}'  # the object's text, nothing after it
    assert _count(tmp_path, content) == 4


def test_skipped_rows_count_an_object_after_the_array(tmp_path):
    records = _records(tmp_path, b'[1]\n{"a": 2}\n{"a": 3}\n', skip_rows=1)
    assert [(r.row, r.location.row) for r in records] == [({"a": 2}, 1), ({"a": 3}, 2)]


def test_skipped_rows_count_a_reject_after_the_array(tmp_path):
    records = _records(tmp_path, b'[1]\njunk here\n{"a": 3}\n', skip_rows=1)
    assert [r.location.row for r in records] == [1, 2]
    assert records[0].error is not None and "unexpected content" in records[0].error
    assert records[0].raw == b"junk here"
    assert (records[1].row, records[1].error) == ({"a": 3}, None)


def test_an_array_cut_after_a_comma_ends_with_its_error_record(tmp_path):
    content = b"[1, 2"  # the file ends inside the last element, no bracket or quote after it
    records = _records(tmp_path, content)
    assert [(r.row, r.location.row) for r in records] == [(1, 0), (None, 1)]
    assert records[1].error is not None and "truncated or malformed" in records[1].error
    assert _count(tmp_path, content) == 2


# -- a reject keeps its first 200 bytes ------------------------------------------------------

def test_an_element_that_does_not_parse_keeps_its_first_200_bytes(tmp_path):
    element = b'{"a": ' + b"x" * 300 + b"}"
    records = _records(tmp_path, b"[" + element + b", 2]")
    assert records[0].error is not None and records[0].error.startswith("invalid JSON")
    assert records[0].raw == element[:200]
    assert (records[1].row, records[1].error) == (2, None)


def test_an_element_that_is_not_utf8_keeps_its_first_200_bytes(tmp_path):
    element = b'"' + b"\xff" * 300 + b'"'
    records = _records(tmp_path, b"[" + element + b"]")
    assert records[0].error is not None and "not valid UTF-8" in records[0].error
    assert records[0].raw == element[:200]


def test_an_object_after_the_array_that_does_not_parse_keeps_its_first_200_bytes(tmp_path):
    line = b'{"a": ' + b"x" * 300 + b"}"
    records = _records(tmp_path, b"[1]\n" + line + b'\n{"b": 2}\n')
    assert records[1].error is not None and "does not parse" in records[1].error
    assert records[1].raw == line[:200]
    assert (records[2].row, records[2].error) == ({"b": 2}, None)


def test_other_content_after_the_array_keeps_its_first_200_bytes(tmp_path):
    line = b"junk " * 100
    records = _records(tmp_path, b"[1]\n" + line + b"\n")
    assert records[1].error is not None and "unexpected content" in records[1].error
    assert records[1].raw == line[:200]


# -- the count's windows ---------------------------------------------------------------------

class _Traced(bytes):
    """A buffer that notes the width of every window `count_records` slices out of it
    (its one- and three-byte looks at a single position left out)."""

    widths: list[int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice) and key.stop - key.start > 3:
            self.widths.append(key.stop - key.start)
        return bytes.__getitem__(self, key)


def _traced(content: bytes) -> _Traced:
    data = _Traced(content)
    data.widths = []
    return data


def test_windows_start_at_64_kib_and_double_up_to_4_mib():
    # Strings of 1,000 bytes, 14 MB: 64 KiB + ... + 4 MiB (8.3 MB), then 4 MiB again.
    elements = 14_000
    data = _traced(b"[" + b",".join([b'"' + b"x" * 998 + b'"'] * elements) + b"]")
    assert count_records(data) == elements
    doubling = [(1 << 16) << k for k in range(7)]  # 64 KiB ... 4 MiB
    assert data.widths[:8] == [*doubling, 1 << 22]
    assert max(data.widths) == 1 << 22


def test_a_string_longer_than_the_window_doubles_it():
    data = _traced(b'["' + b"x" * 150_000 + b'"]')
    assert count_records(data) == 1
    # 64 KiB and 128 KiB both end inside the string; the next reaches the file's end.
    assert data.widths == [1 << 16, 1 << 17, len(data) - 1]


# -- the sink --------------------------------------------------------------------------------

def test_raw_rows_are_counted_and_finish_leaves_the_whole_array(tmp_path):
    final = tmp_path / "out.json"
    sink = JsonArraySink(final)
    sink.write_raw(b'{"a": 1.50}')
    sink.write_raw(b'{"b": 2}')
    assert sink.rows == 2
    assert sink.flush()["rows"] == 2
    sink.finish()
    # Closed, the temporary file complete (SPEC: kept for the rename or a resume).
    assert sink.file.closed
    assert temp_path(final).read_bytes() == b'[\n{"a": 1.50},\n{"b": 2}\n]\n'
    sink.commit()
    assert final.read_bytes() == b'[\n{"a": 1.50},\n{"b": 2}\n]\n'


def test_a_resumed_sink_counts_only_its_own_rows(tmp_path):
    final = tmp_path / "out.json"
    first = JsonArraySink(final)
    first.write_raw(b"1")
    state = first.flush()
    first.close_keep()
    second = JsonArraySink(final, resume=state)
    second.write_raw(b"2")
    second.write_raw(b"3")
    assert second.rows == 2
    assert second.flush()["rows"] == 3
    second.finish()
    second.commit()
    assert final.read_bytes() == b"[\n1,\n2,\n3\n]\n"


def test_close_keep_leaves_what_was_written_on_disk(tmp_path):
    final = tmp_path / "out.json"
    sink = JsonArraySink(final)
    sink.write_row({"a": 1})
    sink.close_keep()  # no flush first: closing writes the buffered bytes
    assert sink.file.closed
    assert temp_path(final).read_bytes() == b'[\n{"a":1}'
    assert not final.exists()
