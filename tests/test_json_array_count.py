"""Counting a `.json` array's rows without parsing it (the progress bar's total).

Hand-made files whose record count is known by construction or worked out by hand, then
a property: on any document the reader can meet, the count equals the records the reader
yields (its own scanner, written apart from the counter), with windows small enough that
every string, escape and bracket meets a window edge somewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property_budget import examples
from trajectory_compressor.formats import json_array
from trajectory_compressor.formats.base import InputFile
from trajectory_compressor.formats.json_array import count_records, input_rows
from trajectory_compressor.formats.registry import count_rows


def rows_of(tmp_path: Path, content: bytes | str, name: str = "a.json") -> int | None:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return input_rows(InputFile(path, "json"))


@pytest.mark.parametrize(("content", "records"), [
    ("", 0),
    ("  \n ", 0),
    ("[]", 0),
    ("[ \n ]\n", 0),
    ("[1]", 1),
    ('[{"a": 1}, {"a": 2}, {"a": 3}]', 3),
    # Strings holding every structural character, escaped quotes and backslashes.
    (r'[{"v": "a, [b] {c}, \"d\", e\\"}, {"v": "]"}, "x,y", "\\\"]\\\\"]', 4),
    (r'["\\", "\"", "\\\\\",[", "{\\\\"]', 4),
    # Nested arrays and objects: one record per element of the outer array.
    ('[[1, [2, 3]], [], {"a": [1, {"b": [2]}]}, [[[]]]]', 4),
    # Concatenated arrays, with or without space between them.
    ('[{"a": 1}, {"a": 2}]\n[{"a": 3}]\n', 3),
    ("[1][2,3][]", 3),
    # JSON lines after the array: each object is a row.
    ('[{"a": 1}]\n{"a": 2}\n{"a": "}, ["}\n', 3),
    # Other lines after the array: one reject each.
    ("[1]\nnot json, [\n\nmore junk\n", 3),
    # Empty elements are rejects, still records.
    ("[1,,2]", 3),
    ("[1,2,]", 3),
    ("[,]", 2),
    # Truncated: the rows before it and one error record, then nothing.
    ('[{"a": 1}, {"a": "unterminated', 2),
    ('[{"a": 1}, {"a": [2', 2),
    ("[", 1),
    ('[{"a": 1}]\n{"b": [1, 2', 2),
    # Byte order marks: at the start, and where a second file starts (`cat a.json b.json`).
    ("\ufeff[1, 2, 3]", 3),
    ("\ufeff[1]\n\ufeff[2, 3]\n", 3),
    ('\ufeff[1]\n\ufeff{"a": 2}\n', 2),
    # An object after the array that never closes: its line is one reject, then reading
    # goes on at the next line.
    ('[1]\n{"a": [1,\n{"b": 2}\n', 3),
    ('[1]\n{broken\n{"b": 2}\n', 3),
    # Its braces balance only over the lines after it (a quote on a later line closes a
    # string it opened): not one object either, so the same line rule.
    ('[]{"row": [1,\n[]junk "[, {\n[{"x": null}]', 3),
    # A brace closing the array: malformed, the reader stops at its error record.
    ("[1, 2}, 3]", 2),
])
def test_hand_made_files(tmp_path, content, records):
    assert rows_of(tmp_path, content) == records


def test_a_file_that_is_not_there_has_no_count(tmp_path):
    assert input_rows(InputFile(tmp_path / "missing.json", "json")) is None


def test_long_strings_and_escapes_across_window_edges(tmp_path, monkeypatch):
    """Rows whose strings are longer than a window, and runs of backslashes and escaped
    quotes at every offset of a small window: the count is the rows written."""
    monkeypatch.setattr(json_array, "_WINDOW", 64)
    monkeypatch.setattr(json_array, "_MAX_WINDOW", 256)
    rows = []
    for i in range(300):
        text = ("\\" * (i % 7)) + '"' + "[{,}]" * (i % 5) + '\\"' * (i % 3) + "x" * (i % 61)
        rows.append({"id": i, "conversations": [{"from": "human", "value": text}],
                     "long": "],[" * (1000 if i % 50 == 0 else 1)})
    written = json.dumps(rows)  # one line, as json.dump writes it
    assert rows_of(tmp_path, written) == 300
    assert rows_of(tmp_path, json.dumps(rows, indent=2), "b.json") == 300
    monkeypatch.undo()
    assert rows_of(tmp_path, written + "\n" + json.dumps(rows[:7]), "c.json") == 307


def test_count_rows_takes_json_arrays(tmp_path):
    (tmp_path / "a.json").write_text('[{"x": 1}, {"x": "]"}]')
    (tmp_path / "b.jsonl").write_text('{"x": 1}\n')
    inputs = [InputFile(tmp_path / "a.json", "json"), InputFile(tmp_path / "b.jsonl", "jsonl")]
    assert count_rows(inputs) == 3


_TRICKY = st.text(st.sampled_from(['a', '[', ']', '{', '}', ',', '"', '\\', ' ', '\n', 'é',
                                   ':', '\u2028', '\x00']), max_size=12)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | _TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY, inner, max_size=4),
    max_leaves=12)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """Arrays (one line or indented), what may follow them, and damage."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        array = draw(st.lists(_VALUES, max_size=6))
        parts.append(json.dumps(array, ensure_ascii=draw(st.booleans()),
                                indent=draw(st.sampled_from([None, 1]))))
        tail = draw(st.sampled_from(["", "object", "junk", "open object", "bom"]))
        if tail == "object":
            parts.append(json.dumps({"row": draw(_VALUES)}))
        elif tail == "junk":
            parts.append('junk "[, {\n')
        elif tail == "open object":  # never closes: a one-line reject
            parts.append('{"row": [1,\n')
        elif tail == "bom":  # a second file starts
            parts.append("\ufeff")
    data = draw(st.sampled_from(["", "\n", " "])).join(parts).encode()
    if draw(st.booleans()):
        data = "\ufeff".encode() + data
    damage = draw(st.sampled_from(["none", "none", "cut", "comma", "brace"]))
    if damage == "cut" and len(data) > 1:
        data = data[:draw(st.integers(1, len(data) - 1))]
    elif damage == "comma":
        data = data.replace(b",", b",,", 1)
    elif damage == "brace":
        data = data.replace(b"]", b"}", 1)
    return data


@settings(max_examples=examples(600), deadline=None)
@given(data=documents(), window=st.sampled_from([1, 5, 16, 1 << 16]))
def test_the_count_is_what_the_reader_yields(data, window):
    saved = json_array._WINDOW, json_array._MAX_WINDOW
    json_array._WINDOW, json_array._MAX_WINDOW = window, window * 4
    try:
        counted = count_records(data)
    finally:
        json_array._WINDOW, json_array._MAX_WINDOW = saved
    read = sum(1 for _ in json_array._elements(data, "doc.json", 0))
    assert counted == read


def test_no_count_when_no_bar_is_shown():
    """Quiet, or not a terminal (pytest captures stderr): the rows are not counted."""
    from trajectory_compressor.engine.progress import Progress

    def count() -> int:
        raise AssertionError("counted for a bar nobody sees")

    Progress(quiet=True, total=count).close()
    Progress(quiet=False, total=count).close()


def test_an_escaped_quote_at_a_window_edge_is_not_taken_for_a_string_start(monkeypatch):
    # A window that ends inside a string stops before the string's opening quote, never
    # before an escaped quote inside it: the next window must start outside any string.
    # Three elements, each a string holding escaped quotes, commas and brackets; every
    # window size from 4 to 40 puts an edge at each place in them.
    document = rb'[{"v": "a\"b, [c\\\"d] {e\", f"}, {"v": "\"g,h\""}, {"v": "i"}]'
    assert len(json.loads(document)) == 3  # valid JSON: three rows by construction
    for window in range(4, 41):
        monkeypatch.setattr(json_array, "_WINDOW", window)
        monkeypatch.setattr(json_array, "_MAX_WINDOW", window)
        assert count_records(document) == 3, window


def test_where_a_compact_array_closes_decides_what_follows_it():
    # No space after the commas; the second string holds a closing bracket. The array
    # holds 2 rows and one JSON line follows it: 3 records, as the reader yields them.
    document = b'["a,b","c]d"]\n{"x": 1}\n'
    assert count_records(document) == 3
