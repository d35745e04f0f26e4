"""The container table and the JSON-array container, unit by unit (issue 26, item 5).

From formats/registry.py and formats/json_array.py's documentation and SPEC §7/§14: a
file's container is named by its suffix, longest first and in any case (``.jsonl.gz``
before ``.jsonl``); a ``.json`` file that does not start with ``[`` holds JSON lines; an
output keeps its input's container (``same``), JSONL from gzip stays gzip, and a Hugging
Face dataset is written as Parquet; a folder or glob never picks up a run's side files.
A JSON array is read one element at a time (strings skipped whole), each bad element a
located error; it is written as ``[`` + one compact row per line + ``]``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajectory_compressor.core.errors import ConfigError, InputError
from trajectory_compressor.formats.base import InputFile
from trajectory_compressor.formats.json_array import JsonArraySink, read_json_array
from trajectory_compressor.formats.registry import (
    count_rows,
    discover_inputs,
    extension,
    file_format,
    file_stem,
    file_suffix,
    open_sink,
    output_container,
    output_extension,
)


def test_containers_by_suffix_longest_first_in_any_case(tmp_path):
    cases = {"a.jsonl": "jsonl", "a.JSONL.GZ": "jsonl.gz", "a.jsonl.gz": "jsonl.gz",
             "b.Parquet": "parquet", "c.json": "json", "d.txt": None, "e.gz": None}
    for name, container in cases.items():
        assert file_format(tmp_path / name) == container, name
    lines = tmp_path / "lines.json"
    lines.write_text('\n  {"conversations": []}\n')
    array = tmp_path / "array.json"
    array.write_text('  \n[{"conversations": []}]')
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    assert (file_format(lines), file_format(array), file_format(empty)) == (
        "jsonl", "json", "json")


def test_stems_and_suffixes_as_written():
    assert file_stem(Path("x/run.v2.JSONL.gz")) == "run.v2"
    assert file_stem(Path("x/data.json")) == "data"
    assert file_stem(Path("x/notes.txt")) == "notes"
    assert file_suffix(Path("x/data.JSON")) == ".JSON"
    assert file_suffix(Path("x/data.jsonl.gz")) == ".jsonl.gz"
    assert file_suffix(Path("x/data.txt")) is None


def test_extensions_and_output_containers():
    assert [extension(c) for c in ("jsonl", "jsonl.gz", "json", "parquet")] == [
        ".jsonl", ".jsonl.gz", ".json", ".parquet"]
    with pytest.raises(ConfigError, match="hf outputs cannot be written"):
        extension("hf")
    gz = InputFile(Path("a.jsonl.gz"), "jsonl.gz")
    assert output_container(gz, "same") == "jsonl.gz"
    assert output_container(gz, "jsonl") == "jsonl.gz"
    assert output_container(gz, "parquet") == "parquet"
    assert output_container(InputFile(Path("a.jsonl"), "jsonl"), "json") == "json"
    assert output_container(InputFile(Path("s"), "arrow"), "same") == "parquet"
    assert output_container(InputFile(Path("s"), "hf", stream=object()), "same") == "parquet"
    own = InputFile(Path("d/data.JSON"), "json")
    assert output_extension(own, "json") == ".JSON"
    assert output_extension(own, "jsonl") == ".jsonl"
    assert output_extension(InputFile(Path("s"), "hf", stream=object()), "parquet") == \
        ".parquet"


def test_count_rows_only_when_every_input_knows_it(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text('{"x": 1}\n{"x": 2}\n{"x": 3}')  # the last line has no newline
    b = tmp_path / "b.jsonl"
    b.write_text('{"x": 1}\n')
    inputs = [InputFile(a, "jsonl"), InputFile(b, "jsonl")]
    assert count_rows(inputs) == 4
    assert count_rows([]) == 0
    assert count_rows([*inputs, InputFile(tmp_path / "c.jsonl.gz", "jsonl.gz")]) is None
    assert count_rows([InputFile(tmp_path / "s", "arrow", rows=7)]) == 7


def test_discover_inputs_in_a_folder_and_a_glob_skips_side_files(tmp_path):
    for name in ("b.jsonl", "a.json", "c.parquet", "d.jsonl.gz", "notes.txt",
                 "out_over_limit.jsonl", "out_rejects.jsonl"):
        (tmp_path / name).write_text("[]" if name.endswith(".json") else "")
    # Side files are passed over only when their run's metrics file says this tool wrote
    # them (issue 24): a metrics file recording the run.
    (tmp_path / "out_metrics.json").write_text('{"run": {"settings_fingerprint": "f"}}')
    (tmp_path / "sub.jsonl").mkdir()
    found = discover_inputs(str(tmp_path))
    assert [(f.path.name, f.format, f.stem) for f in found] == [
        ("a.json", "json", "a"), ("b.jsonl", "jsonl", "b"), ("c.parquet", "parquet", "c"),
        ("d.jsonl.gz", "jsonl.gz", "d")]
    globbed = discover_inputs(str(tmp_path / "*.jsonl*"))
    assert [f.path.name for f in globbed] == ["b.jsonl", "d.jsonl.gz"]
    single = discover_inputs(str(tmp_path / "b.jsonl"))
    assert [(f.path.name, f.format) for f in single] == [("b.jsonl", "jsonl")]


def test_discover_inputs_says_what_is_wrong(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="unsupported file type"):
        discover_inputs(str(tmp_path / "notes.txt"))
    with pytest.raises(InputError, match=r"no .*files found"):
        discover_inputs(str(tmp_path))
    with pytest.raises(InputError, match="input not found"):
        discover_inputs(str(tmp_path / "missing.jsonl"))
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(InputError, match="--split and --data-files apply"):
        discover_inputs(str(tmp_path / "a.jsonl"), split="train")


def test_open_sink_refuses_a_container_it_cannot_write(tmp_path):
    with pytest.raises(ConfigError, match="arrow outputs cannot be written"):
        open_sink("arrow", tmp_path / "o", InputFile(tmp_path / "a.jsonl", "jsonl"))


# -- JSON arrays --------------------------------------------------------------------------

def _read(path: Path, skip: int = 0) -> list[tuple[object, object, str | None]]:
    return [(r.location.row, r.row, r.error)
            for r in read_json_array(InputFile(path, "json"), skip)]


def test_each_element_is_a_row_whatever_its_strings_hold(tmp_path):
    rows = [{"a": "x, ] } [ {", "b": [1, [2, {"c": "\"]"}]]}, [], "s", 3, None,
            {"e": "\\"}]
    path = tmp_path / "a.json"
    path.write_text(" \n[ " + " ,\n".join(json.dumps(r) for r in rows) + " ]\n")
    assert _read(path) == [(i, r, None) for i, r in enumerate(rows)]
    assert _read(path, skip=4) == [(4, None, None), (5, {"e": "\\"}, None)]


def test_empty_arrays_and_files(tmp_path):
    for text in ("[]", " [ \n ] ", "", "   "):
        path = tmp_path / "e.json"
        path.write_text(text)
        assert _read(path) == [], repr(text)


def test_bad_elements_are_located_errors_and_the_others_are_read(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[{"a": 1}, {"a": }, , {"b": 2}]')
    got = _read(path)
    assert [(row, value) for row, value, _ in got] == [(0, {"a": 1}), (1, None), (2, None),
                                                       (3, {"b": 2})]
    assert got[1][2].startswith("invalid JSON")
    assert got[2][2] == "empty element in the JSON array"
    assert got[0][2] is None and got[3][2] is None


def test_a_truncated_array_and_a_non_array(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"a": 1}, {"b": "unterminated')
    got = _read(path)
    assert got[0] == (0, {"a": 1}, None)
    assert got[1][0] == 1 and "truncated" in got[1][2]
    assert len(got) == 2
    assert _read(path, skip=2) == []
    path.write_text('{"a": 1}')
    assert [(r, e is not None) for r, _, e in _read(path)] == [(None, True)]


def test_the_writer_writes_one_compact_row_per_line(tmp_path):
    final = tmp_path / "o.json"
    sink = JsonArraySink(final)
    sink.write_row({"a": 1, "b": [1, 2]})
    sink.write_row("x")
    sink.finish()
    sink.commit()
    assert final.read_text() == '[\n{"a":1,"b":[1,2]},\n"x"\n]\n'
    assert json.loads(final.read_text()) == [{"a": 1, "b": [1, 2]}, "x"]
    assert sink.rows == 2
    empty = tmp_path / "e.json"
    sink = JsonArraySink(empty)
    sink.finish()
    sink.commit()
    assert empty.read_text() == "[]\n"


def test_a_resumed_writer_continues_the_same_array(tmp_path):
    final = tmp_path / "o.json"
    first = JsonArraySink(final)
    first.write_row({"n": 1})
    state = first.flush()
    assert state["rows"] == 1
    first.close_keep()
    second = JsonArraySink(final, resume=state)
    second.write_row({"n": 2})
    second.finish()
    second.commit()
    assert json.loads(final.read_text()) == [{"n": 1}, {"n": 2}]
    assert second.rows == 1


def test_records_are_read_from_the_first_line_and_sinks_open_in_their_container(tmp_path):
    from trajectory_compressor.formats.registry import read_records

    source = tmp_path / "in.jsonl"
    source.write_text('{"n": 1}\n{"n": 2}\n')
    rows = [r.row for r in read_records(InputFile(source, "jsonl"))]
    assert rows == [{"n": 1}, {"n": 2}]
    assert [r.row for r in read_records(InputFile(source, "jsonl"), 1)] == [{"n": 2}]
    final = tmp_path / "out.json"
    sink = open_sink("json", final, InputFile(source, "jsonl"))
    sink.write_row({"n": 1})
    sink.finish()
    sink.commit()
    assert json.loads(final.read_text()) == [{"n": 1}]


def test_data_files_do_not_apply_to_a_save_to_disk_folder(tmp_path):
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "dataset_dict.json").write_text('{"splits": ["train"]}')
    with pytest.raises(InputError, match="save_to_disk folder; --data-files does not apply"):
        discover_inputs(str(saved), data_files="train-*.parquet")


def test_a_json_array_is_read_from_its_first_element_by_default(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[{"n": 1}, {"n": 2}]')
    assert [r.row for r in read_json_array(InputFile(path, "json"))] == [{"n": 1}, {"n": 2}]


def test_containers_are_frozen_values():
    import dataclasses

    from trajectory_compressor.formats.registry import CONTAINERS

    with pytest.raises(dataclasses.FrozenInstanceError):
        CONTAINERS["jsonl"].extension = ".txt"  # type: ignore[misc]


def test_a_discarded_json_array_output_leaves_no_file(tmp_path):
    final = tmp_path / "o.json"
    sink = JsonArraySink(final)
    sink.write_row({"n": 1})
    sink.flush()
    sink.discard()
    assert list(tmp_path.iterdir()) == []
