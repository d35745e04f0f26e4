"""Containers unit by unit, the behaviours the mutation pass found unpinned (issue 26, item 5).

Atomic outputs (formats/base.py, SPEC §7): a file is complete only once renamed, a flush
makes the bytes so far durable on disk (a gzip member ended there), and an output an
interrupted run completed needs only its rename, or nothing when it was renamed already.
JSON (formats/jsonio.py): one compact UTF-8 line, non-ASCII kept as is, values round-trip
(a number no double holds written back as its text), the Python values of Parquet columns
JSON has no type for written as text. The JSON-array count (formats/json_array.py) is how
many records the reader yields. The registry (formats/registry.py): what a path that is no
file is called, which hidden files are a run's, and globs that descend with ``**``.
"""

from __future__ import annotations

import datetime
import decimal
import errno
import gzip
import json
import os
from pathlib import Path

import pytest

from trajectory_compressor.core.errors import InputError, OutputError
from trajectory_compressor.formats import jsonio
from trajectory_compressor.formats.base import (
    AtomicFile,
    FinishedFile,
    InputFile,
    Location,
    Record,
    replace_file,
    temp_path,
    text_chars,
    write_atomic,
)
from trajectory_compressor.formats.json_array import input_rows, read_json_array
from trajectory_compressor.formats.registry import discover_inputs, tool_sidecar

# -- base: locations and atomic files --------------------------------------------------------


def test_a_location_without_line_or_row_is_its_file():
    assert str(Location("data/a.json")) == "data/a.json"
    assert str(Location("a.jsonl", line=3)) == "a.jsonl:3"
    assert str(Location("a.parquet", row=0)) == "a.parquet row 0"


def test_a_gzip_flush_leaves_a_complete_gzip_file_on_disk(tmp_path):
    final = tmp_path / "o.jsonl.gz"
    out = AtomicFile(final, gzip_level=6)
    out.write(b'{"n": 1}\n')
    offset = out.flush()
    # What is on disk now (another reader, a crash) is the whole offset, a valid gzip.
    on_disk = temp_path(final).read_bytes()
    assert len(on_disk) == offset
    assert gzip.decompress(on_disk) == b'{"n": 1}\n'
    out.write(b'{"n": 2}\n')
    out.commit()
    assert gzip.decompress(final.read_bytes()) == b'{"n": 1}\n{"n": 2}\n'


def test_a_finished_file_is_the_temporary_file_awaiting_its_rename(tmp_path):
    final = tmp_path / "o.jsonl"
    temp_path(final).write_text('{"n": 1}\n')
    done = FinishedFile(final)
    assert done.rows == 0  # it writes no rows: they were written by the interrupted run
    assert done.flush() is None
    done.commit()
    assert final.read_text() == '{"n": 1}\n' and not temp_path(final).exists()


def test_a_finished_file_renamed_already_is_accepted_and_a_missing_one_is_not(tmp_path):
    final = tmp_path / "o.jsonl"
    # The interrupted run died while committing: the rename happened, nothing is left.
    final.write_text('{"n": 1}\n')
    done = FinishedFile(final)
    done.commit()
    done.discard()  # nothing to delete: no error
    assert final.read_text() == '{"n": 1}\n'
    final.unlink()
    with pytest.raises(FileNotFoundError) as caught:
        FinishedFile(final)
    assert caught.value.errno == errno.ENOENT


def test_discarding_a_finished_file_deletes_the_temporary_file_only(tmp_path):
    final = tmp_path / "o.jsonl"
    final.write_text("old\n")
    temp_path(final).write_text("new\n")
    done = FinishedFile(final)
    done.discard()
    assert not temp_path(final).exists()
    assert final.read_text() == "old\n"
    done.discard()  # twice: still no error


def test_a_location_as_a_dict_holds_what_is_known():
    assert Location("a.json").to_dict() == {"file": "a.json"}
    assert Location("a.jsonl", line=3).to_dict() == {"file": "a.jsonl", "line": 3}
    assert Location("a.parquet", row=0).to_dict() == {"file": "a.parquet", "row": 0}


def test_a_records_position_is_how_many_lines_or_rows_end_with_it():
    # Record.position: a JSONL line number as is, a 0-based row + 1, a whole-file error 1.
    assert Record(Location("a.jsonl", line=7)).position == 7
    assert Record(Location("a.parquet", row=0)).position == 1
    assert Record(Location("a.parquet", row=41)).position == 42
    assert Record(Location("a.json"), error="not a JSON array").position == 1


def test_locations_and_inputs_are_frozen_values():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        Location("a").line = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        InputFile(Path("a.jsonl"), "jsonl").rows = 2  # type: ignore[misc]
    assert len({Location("a", row=1), Location("a", row=1)}) == 1


def test_text_chars_counts_every_string_of_a_row():
    row = {"id": "ab", "n": 12, "turns": [{"value": "xyz"}, {"value": None}, ["q", 3.5]],
           "ok": True}
    assert text_chars(row) == 2 + 3 + 1
    assert text_chars("") == 0 and text_chars(None) == 0 and text_chars(7) == 0


def test_an_output_is_never_renamed_onto_what_is_not_a_regular_file(tmp_path):
    temp = tmp_path / "t"
    temp.write_text("done\n")
    with pytest.raises(OutputError, match="is not a regular file, so it was not replaced"):
        replace_file(temp, tmp_path)  # a folder
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match=f"the finished output is {temp}"):
        replace_file(temp, fifo)
    assert temp.read_text() == "done\n"
    # A regular file and a symbolic link are replaced.
    (tmp_path / "f").write_text("old")
    replace_file(temp, tmp_path / "f")
    assert (tmp_path / "f").read_text() == "done\n"
    temp.write_text("again\n")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    replace_file(temp, tmp_path / "link")
    assert (tmp_path / "link").read_text() == "again\n" and not (tmp_path / "link").is_symlink()


def test_an_atomic_file_lives_under_its_temporary_name_until_committed(tmp_path):
    final = tmp_path / "new" / "sub" / "o.jsonl"  # folders made as needed
    out = AtomicFile(final)
    out.write(b"a\n")
    assert out.flush() == 2
    assert temp_path(final).read_bytes() == b"a\n" and not final.exists()
    out.commit()
    out.commit()  # twice: nothing more happens
    out.discard()  # after the commit: the output stays
    assert final.read_bytes() == b"a\n" and not temp_path(final).exists()


def test_closing_an_atomic_file_twice_is_harmless_and_keeps_it(tmp_path):
    final = tmp_path / "o.jsonl.gz"
    out = AtomicFile(final, gzip_level=1)
    out.write(b"a\n")
    out.close_keep()
    out.close_keep()
    assert gzip.decompress(temp_path(final).read_bytes()) == b"a\n"
    out.discard()
    out.discard()  # twice: nothing left to delete, no error
    assert not temp_path(final).exists() and not final.exists()


def test_a_resumed_atomic_file_is_cut_back_to_its_checkpoint(tmp_path):
    final = tmp_path / "o.jsonl"
    first = AtomicFile(final)
    first.write(b"one\n")
    at = first.flush()
    first.write(b"two, after the checkpoint\n")
    first.close_keep()
    again = AtomicFile(final, resume_at=at)
    again.write(b"three\n")
    again.commit()
    assert final.read_bytes() == b"one\nthree\n"


def test_a_temporary_file_shorter_than_its_checkpoint_cannot_be_resumed(tmp_path):
    final = tmp_path / "o.jsonl"
    temp_path(final).write_bytes(b"12345")
    with pytest.raises(FileNotFoundError, match="shorter than the checkpoint says") as caught:
        AtomicFile(final, resume_at=6)
    assert caught.value.errno == errno.ENOENT
    assert temp_path(final).read_bytes() == b"12345"


def test_a_refused_resume_leaves_no_file_open(tmp_path):
    import contextlib
    import gc
    import warnings

    final = tmp_path / "o.jsonl"
    temp_path(final).write_bytes(b"12345")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(FileNotFoundError):
            AtomicFile(final, resume_at=6)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_gzip_output_carries_no_time_stamp(tmp_path):
    # RFC 1952: MTIME 0 is "no time stamp"; the same rows give the same bytes at any time.
    final = tmp_path / "o.jsonl.gz"
    out = AtomicFile(final, gzip_level=6)
    out.write(b"a\n")
    out.flush()  # a second member starts here
    out.write(b"b\n")
    out.commit()
    data = final.read_bytes()
    assert data[:3] == b"\x1f\x8b\x08" and data[4:8] == b"\x00\x00\x00\x00"
    second = data.index(b"\x1f\x8b\x08", 4)
    assert data[second + 4:second + 8] == b"\x00\x00\x00\x00"
    assert gzip.decompress(data) == b"a\nb\n"


def test_write_atomic_writes_the_whole_file_under_its_final_name(tmp_path):
    final = tmp_path / "d" / "small.json"
    write_atomic(final, b"{}\n")
    assert final.read_bytes() == b"{}\n"
    assert sorted(p.name for p in final.parent.iterdir()) == ["small.json"]


def test_a_finished_file_takes_no_more_rows(tmp_path):
    final = tmp_path / "o.jsonl"
    temp_path(final).write_text("x\n")
    done = FinishedFile(final)
    with pytest.raises(RuntimeError, match="is already complete"):
        done.write_row({"n": 1})


# -- jsonio -----------------------------------------------------------------------------------


def test_parquet_values_json_has_no_type_for_are_written_as_text():
    # Decimal and timedelta as their str(), dates and times in ISO 8601 (worked out by hand).
    row = {"price": decimal.Decimal("1.10"), "took": datetime.timedelta(seconds=90),
           "day": datetime.date(2024, 1, 2), "at": datetime.time(7, 5, 3)}
    assert json.loads(jsonio.dumps(row)) == {"price": "1.10", "took": "0:01:30",
                                             "day": "2024-01-02", "at": "07:05:03"}


def test_the_stdlib_fallback_writes_the_same_json_as_orjson():
    # A 2**70 integer sends the row through the stdlib writer: still one compact line,
    # non-ASCII kept as is (the docstring), dates in ISO 8601.
    row = {"n": 2**70, "s": "é ✓", "day": datetime.date(2024, 1, 2)}
    assert jsonio.dumps(row) == (
        '{"n":1180591620717411303424,"s":"é ✓","day":"2024-01-02"}'.encode())


def test_a_number_no_double_holds_is_written_back_as_its_text():
    row = jsonio.loads(b'{"big": 1e400, "tiny": -2.5e-400, "n": 1}')
    assert jsonio.dumps(row) == b'{"big":1e400,"tiny":-2.5e-400,"n":1}'


def test_a_row_nested_past_what_python_can_follow_is_a_value_error():
    deep = b"[" * 50_000 + b"]" * 50_000
    with pytest.raises(ValueError, match=f"nested more than {jsonio.MAX_NESTING} levels"):
        jsonio.loads(deep)


def test_pretty_json_with_a_lone_surrogate_is_indented_as_any_other():
    plain = jsonio.dumps_pretty({"file": "a", "rows": [1]})
    odd = jsonio.dumps_pretty({"file": "a\udcff", "rows": [1]})
    assert plain == b'{\n  "file": "a",\n  "rows": [\n    1\n  ]\n}\n'
    assert odd == b'{\n  "file": "a\\udcff",\n  "rows": [\n    1\n  ]\n}\n'
    assert json.loads(odd) == {"file": "a\udcff", "rows": [1]}


# -- json_array: the count is the reader's -------------------------------------------------


def test_the_count_follows_the_reader_past_a_long_string_after_a_stray_backslash(tmp_path):
    # Not JSON: a backslash outside any string starts the first element, then a string
    # longer than the count's first window (64 KiB). The reader rejects that element and
    # reads 2 and 3: three records, which the count must find (the window is cut at the
    # string's opening quote, which a backslash before it does not escape there).
    path = tmp_path / "a.json"
    path.write_bytes(b'[ \\\\"' + b"x" * 70_000 + b'", 2, 3]')
    records = list(read_json_array(InputFile(path, "json")))
    assert [(r.location.row, r.row, r.error is None) for r in records] == [
        (0, None, False), (1, 2, True), (2, 3, True)]
    assert input_rows(InputFile(path, "json")) == 3


# -- registry --------------------------------------------------------------------------------


def test_a_fifo_given_as_input_is_named_for_what_it_is(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"pipe\.jsonl is a FIFO \(named pipe\), not a file"):
        discover_inputs(str(fifo))
    with pytest.raises(InputError, match=r"is a FIFO \(named pipe\), not a regular file"):
        discover_inputs(str(tmp_path))


def test_a_device_given_as_input_is_named_for_what_it_is():
    with pytest.raises(InputError, match="/dev/null is a device, not a file or folder"):
        discover_inputs("/dev/null")


def test_a_missing_relative_file_name_is_not_taken_for_a_dataset(tmp_path, monkeypatch):
    # "data.jsonl" is also a valid hub id; a name with a container suffix is a file that is
    # not there (offline hub: a wrong turn to `datasets` would fail fast, not hang).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match=r"^input not found: data\.jsonl$"):
        discover_inputs("data.jsonl")


def test_a_double_star_glob_descends_into_folders(tmp_path):
    for rel in ("a.jsonl", "x/b.jsonl", "x/y/c.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text('{"n": 1}\n')
    found = discover_inputs(str(tmp_path / "**" / "*.jsonl"))
    assert sorted(f.path.relative_to(tmp_path).as_posix() for f in found) == [
        "a.jsonl", "x/b.jsonl", "x/y/c.jsonl"]


def test_a_hidden_checkpoint_with_the_checkpoint_keys_is_a_runs_file(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"n": 1}\n')
    checkpoint = tmp_path / ".a_compressed.checkpoint.json"
    checkpoint.write_text(json.dumps({"version": 1, "settings": {}, "skip": 0, "inputs": []}))
    skipped: list[Path] = []
    found = discover_inputs(str(tmp_path), skipped=skipped)
    assert [f.path.name for f in found] == ["a.jsonl"]
    assert skipped == [checkpoint]
    # One key short: data named like a checkpoint, read as JSON lines.
    checkpoint.write_text(json.dumps({"version": 1, "settings": {}, "skip": 0}))
    assert tool_sidecar(checkpoint) is False
    assert [f.path.name for f in discover_inputs(str(tmp_path))] == [
        ".a_compressed.checkpoint.json", "a.jsonl"]


def test_a_sidecar_without_its_runs_metrics_is_not_the_tools(tmp_path):
    rejects = tmp_path / "out_rejects.jsonl"
    rejects.write_text('{"n": 1}\n')
    assert tool_sidecar(rejects) is False  # no out_metrics.json to read


def test_a_metrics_file_too_large_for_a_runs_record_is_data(tmp_path):
    # A run's metrics file is small; one past 64 MiB is data, whatever it says.
    metrics = tmp_path / "out_metrics.json"
    head = b'{"run": {"settings_fingerprint": "f"}}'
    with open(metrics, "wb") as f:
        f.write(head + b" " * ((64 << 20) + 1 - len(head)))
    assert metrics.stat().st_size == (64 << 20) + 1
    assert tool_sidecar(metrics) is False


@pytest.mark.parametrize("spaces", [0, 4093, 4094, 4095, 4096, 9000])
def test_a_byte_order_mark_after_leading_spaces_is_skipped_wherever_it_falls(tmp_path, spaces):
    # The array's reader skips spaces, a byte order mark and spaces where the file starts;
    # telling a .json array from JSON lines takes the same steps, wherever the mark falls
    # among the blocks the file is read in (4094 spaces put it across the first block's end).
    from trajectory_compressor.formats.registry import file_format, read_records

    path = tmp_path / "a.json"
    path.write_bytes(b" " * spaces + b"\xef\xbb\xbf" + b" " * spaces + b'[{"a": 1}, {"a": 2}]')
    assert file_format(path) == "json"
    assert [r.row for r in read_records(InputFile(path, "json"))] == [{"a": 1}, {"a": 2}]
    lines = tmp_path / "b.json"  # and JSON lines after a mark are still JSON lines
    lines.write_bytes(b" " * spaces + b"\xef\xbb\xbf" + b'{"a": 1}\n')
    assert file_format(lines) == "jsonl"


def test_the_first_byte_is_the_one_the_array_reader_stops_at(tmp_path):
    from trajectory_compressor.formats.json_array import first_char
    from trajectory_compressor.formats.registry import file_format

    cases = {b"": b"", b" \n ": b"", b"\xef\xbb\xbf": b"", b"\xef\xbb\xbf \n": b"",
             b" \xef\xbb": b"\xef",  # a cut mark is no mark
             b"\xef\xbb\xbf\xef\xbb\xbf[1]": b"\xef",  # one mark is skipped, as the reader does
             b"\xef\xbb\xbf\n[1]": b"[", b"  {}": b"{",
             # The same across the 4 KiB read blocks: spaces after the mark fill the first.
             b"\xef\xbb\xbf" + b" " * 4093 + b"{}": b"{",
             b"\xef\xbb\xbf" + b" " * 4093 + b"\xef\xbb\xbf[1]": b"\xef"}
    for i, (data, first) in enumerate(cases.items()):
        path = tmp_path / f"{i}.json"
        path.write_bytes(data)
        assert first_char(path) == first, data
        assert file_format(path) == ("json" if first in (b"", b"[") else "jsonl"), data


def _open_on(path: Path) -> list[str]:
    """This process's file descriptors open on ``path`` (deleted or not), from /proc."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.removesuffix(" (deleted)") == str(path):
            held.append(target)
    return held


@pytest.mark.parametrize("gzip_level", [None, 6])
def test_a_discarded_atomic_file_is_closed_and_deleted(tmp_path, gzip_level):
    final = tmp_path / "o.jsonl"
    out = AtomicFile(final, gzip_level=gzip_level)
    out.write(b"a\n")
    assert _open_on(temp_path(final)) != []
    out.discard()
    assert _open_on(temp_path(final)) == []
    assert not temp_path(final).exists() and not final.exists()


# -- jsonio, whole ----------------------------------------------------------------------------


def _nested(levels: int, kind: str = "list") -> object:
    value: object = 1
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value} if kind == "dict" else (value,)
    return value


def test_too_deep_means_more_than_max_nesting_levels_of_objects_and_arrays():
    limit = jsonio.MAX_NESTING
    assert limit == 256  # README: rows nested deeper than 256 levels are rejects
    for kind in ("list", "dict", "tuple"):
        assert jsonio.too_deep(_nested(limit, kind)) is False, kind
        assert jsonio.too_deep(_nested(limit + 1, kind)) is True, kind
    for kind in ("list", "dict"):
        at = _nested(limit, kind)
        over = _nested(limit + 1, kind)
        assert jsonio.too_deep(at, jsonio.dumps(at)) is False
        assert jsonio.too_deep(over, jsonio.dumps(over)) is True
    wide = {"a": [[1], {"b": _nested(limit - 1)}], "c": "x"}  # 1 + 1 + 255 levels
    assert jsonio.too_deep(wide) is True
    assert jsonio.too_deep({"a": [[1], {"b": _nested(limit - 3)}]}) is False
    for scalar in (5, "text", None, 1.5):
        assert jsonio.too_deep(scalar) is False
        assert jsonio.too_deep(scalar, b"5") is False


def test_numbers_read_through_the_stdlib_keep_their_types():
    # A 23-digit integer sends the document through the stdlib parser.
    got = jsonio.loads(b'[12345678901234567890123, 1.5, 0.0, 0e5, 1e400, 1e-400, -2.5]')
    assert got == [12345678901234567890123, 1.5, 0.0, 0.0, float("inf"), 0.0, -2.5]
    assert [type(v).__name__ for v in got] == [
        "int", "float", "float", "float", "JsonNumber", "JsonNumber", "float"]


def test_values_orjson_can_hold_are_written_as_orjson_writes_them():
    import orjson

    row = {"a": None, "f": 1e-7, "s": "x", "l": [None, 2.5e-8], "d": {"n": None}}
    assert jsonio.dumps(row) == orjson.dumps(row)
    big = jsonio.loads(b"1e400")
    assert jsonio.dumps({"big": big, "f": 1e-7}) == b'{"big":1e400,"f":' + orjson.dumps(
        1e-7) + b"}"


def test_nan_and_infinity_are_kept_not_made_null():
    # orjson would write null; the stdlib's NaN/Infinity read back as the same values.
    row = {"a": [{"b": float("nan")}], "c": float("inf"), "d": [float("-inf")], "e": None}
    out = jsonio.dumps(row)
    assert out == b'{"a":[{"b":NaN}],"c":Infinity,"d":[-Infinity],"e":null}'
    back = jsonio.loads(out)
    assert back["c"] == float("inf") and back["d"] == [float("-inf")] and back["e"] is None


def test_numbers_no_double_holds_are_written_back_anywhere_in_a_stdlib_row():
    # 2**70 sends the row through the stdlib writer; each JsonNumber keeps its own text,
    # however deep, and the other values are written as they are.
    row = jsonio.loads(b'{"n": 1180591620717411303424, "a": [{"x": 1e400, "y": 1}], '
                       b'"d": {"z": "w"}, "t": [-1e-400, 2], "s": "s"}')
    assert jsonio.dumps(row) == (b'{"n":1180591620717411303424,"a":[{"x":1e400,"y":1}],'
                                 b'"d":{"z":"w"},"t":[-1e-400,2],"s":"s"}')


def test_a_lone_surrogate_is_written_as_its_escape():
    out = jsonio.dumps({"s": "a\udcff", "t": "é"})
    assert out == b'{"s":"a\\udcff","t":"\\u00e9"}'
    assert jsonio.loads(out) == {"s": "a\udcff", "t": "é"}


def test_bytes_are_base64_and_unknown_values_are_refused():
    assert jsonio.dumps({"b": b"\x00\xff", "m": memoryview(b"hi")}) == (
        b'{"b":"AP8=","m":"aGk="}')
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        jsonio.dumps({"x": object()})


def test_non_finite_floats_inside_lists_only_are_kept_too():
    assert jsonio.dumps({"l": [1.0, float("nan")], "e": None}) == b'{"l":[1.0,NaN],"e":null}'
    assert jsonio.dumps([[float("inf")], None]) == b"[[Infinity],null]"


@pytest.mark.parametrize("depth", [1000, 1024])
def test_a_big_integer_deep_in_a_row_is_exact_or_the_row_is_refused(depth):
    # Deeper than the stdlib parser follows, shallower than orjson's limit: orjson would
    # read the 23-digit integer as a float. Values round-trip exactly, or the row is a
    # ValueError (a reject), never a changed value.
    doc = b"[" * depth + b"12345678901234567890123" + b"]" * depth
    try:
        value = jsonio.loads(doc)
    except ValueError as exc:
        assert "nested more than" in str(exc)
        return
    for _ in range(depth):
        value = value[0]
    assert value == 12345678901234567890123 and isinstance(value, int)


# -- registry, whole --------------------------------------------------------------------------


def test_a_socket_and_a_dangling_link_given_as_input_are_named_for_what_they_are(tmp_path):
    import socket

    sock_path = tmp_path / "s.jsonl"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(sock_path))
        with pytest.raises(InputError, match=r"s\.jsonl is a socket, not a file or folder"):
            discover_inputs(str(sock_path))
    finally:
        server.close()
    link = tmp_path / "gone.jsonl"
    link.symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(InputError, match=r"gone\.jsonl is a symbolic link to nothing, not a"):
        discover_inputs(str(link))


def test_only_a_hidden_file_can_be_a_runs_checkpoint(tmp_path):
    keys = {"version": 1, "settings": {}, "skip": 0, "inputs": [], "file_index": 0}
    visible = tmp_path / "run.checkpoint.json"
    visible.write_text(json.dumps(keys) + "\n")
    assert tool_sidecar(visible) is False
    assert [f.path.name for f in discover_inputs(str(tmp_path))] == ["run.checkpoint.json"]
    data = tmp_path / "rows.jsonl"
    data.write_text('{"n": 1}\n')
    assert tool_sidecar(data) is False


def test_a_metrics_file_without_a_settings_fingerprint_is_not_a_runs(tmp_path):
    (tmp_path / "out.jsonl").write_text('{"n": 1}\n')
    rejects = tmp_path / "out_rejects.jsonl"
    rejects.write_text('{"n": 2}\n')
    metrics = tmp_path / "out_metrics.json"
    for record, ours in (({"run": {"settings_fingerprint": "f"}}, True),
                         ({"run": {"other": "f"}}, False),
                         ({"run": {"settings_fingerprint": 3}}, False),
                         ({"run": "f"}, False), ([1], False)):
        metrics.write_text(json.dumps(record))
        assert tool_sidecar(rejects) is ours, record
        assert tool_sidecar(metrics) is ours, record


def test_pretty_json_keeps_non_ascii_text_readable():
    assert jsonio.dumps_pretty({"file": "données.jsonl"}) == (
        '{\n  "file": "données.jsonl"\n}\n'.encode())


def test_a_string_that_looks_like_the_writers_number_marker_is_kept():
    # A row through the stdlib writer (2**70) with a number no double holds: every value
    # round-trips, whatever text a string holds (NULs included).
    row = {"s": "\x00jsonio-number-0\x00", "n": 2**70, "big": jsonio.loads(b"1e400")}
    out = jsonio.dumps(row)
    back = jsonio.loads(out)
    assert back["s"] == "\x00jsonio-number-0\x00"
    assert back["n"] == 2**70
    assert back["big"].text == "1e400"
    assert out == b'{"s":"\\u0000jsonio-number-0\\u0000","n":1180591620717411303424,"big":1e400}'


def test_bytes_that_are_not_utf8_are_a_unicode_error_naming_the_byte(tmp_path):
    # RFC 8259: JSON text is UTF-8; the reject says which byte, not just "invalid JSON".
    with pytest.raises(UnicodeDecodeError):
        jsonio.loads(b'{"a": "\xff"}')
    path = tmp_path / "a.json"
    path.write_bytes(b'[{"a": 1}, {"a": "\xff"}]')
    got = [(r.location.row, r.error) for r in read_json_array(InputFile(path, "json"))]
    assert got == [(0, None), (1, "element is not valid UTF-8 (byte 0xff at offset 7)")]
