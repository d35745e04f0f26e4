"""Tests written to kill mutants left by the fifteenth coverage-guided pass (issue 40,
item 8) over the modules no run had reached on their current code: the terminal renderer,
distill's references, masking, windows and the others named in each section. In process,
on hand-made input.
"""

from __future__ import annotations

import json

import pytest

from trajectory_compressor.core.distill_refs import _resolved, resolve_references
from trajectory_compressor.core.terminal_view import is_bare_cr_file, strip_inert, terminal_view

# --- core/terminal_view.py ----------------------------------------------------------


def test_crlf_is_a_line_end_before_bare_crs_are_judged() -> None:
    # Read as "line1\nline2\rline3": after the first CR no line feed, so a file.
    assert terminal_view("line1\r\nline2\rline3") == "line1\nline2\nline3"


def test_an_erase_to_the_cursor_leaves_no_trailing_spaces() -> None:
    assert terminal_view("abc\x1b[1K") == ""
    assert terminal_view("abcdef\x1b[1K") == ""
    # Cells 0-2 erased, the cursor stays at 2.
    assert terminal_view("abcdef\r\x1b[2C\x1b[1Kxy") == "  xyef"


def test_cursor_back_stops_at_column_zero() -> None:
    assert terminal_view("ab\x1b[5Dc") == "cb"
    assert terminal_view("ab\x08\x08\x08c") == "cb"


@pytest.mark.parametrize("text", [
    "a\x1bb\rc",          # an escape: never a file
    "abc",                # no CR at all
    "a\rb\nc",            # a line feed after the first CR
    "abc\r",              # one record
    "|\r/\r-\r\\",        # a spinner
    "ab\rcd\ref",         # records of two characters are a spinner too
    "10%\r20%",           # a counter
    " \rabc",             # one record with text
    "foo\rfoo bar\rbaz",  # one grown pair in three records: a redraw
    "abc\rabcd",          # grown
])
def test_not_a_bare_cr_file(text: str) -> None:
    assert is_bare_cr_file(text) is False


@pytest.mark.parametrize("text", [
    "\rabc\rdef",               # a CR first
    "abc\rdef\rghi",            # records of three characters are text
    "one\rone two\rthree\rfour",  # one grown pair in four records: still a file
])
def test_a_bare_cr_file(text: str) -> None:
    assert is_bare_cr_file(text) is True


def test_strip_inert_drops_colours_and_keeps_moves() -> None:
    assert strip_inert("\x1b[31mred\x1b[0m") == "red"
    assert strip_inert("a\x1b[31m\rb\x1b[K\x07") == "a\rb\x1b[K"


# --- core/distill_refs.py -----------------------------------------------------------

RUN2 = "⟪×2⟫ a"  # distilled "a\na": its text is not what it reads as
JSON2 = '⟪json indent 2⟫\n{"a":1}'


def _same(k: int) -> str:
    return f"⟪same as tool output #{k} above⟫"


def _hermes(*contents: str) -> str:
    return "\n".join(f'<tool_response>\n{json.dumps({"name": "t", "content": c})}\n'
                     "</tool_response>" for c in contents)


def test_a_reference_whose_referent_was_summarized_is_its_text() -> None:
    # Every written tool text holds a reference: nothing else makes the row worth reading.
    out = resolve_references(["Y", None, _same(1)], [None, _same(1)], [None, 2])
    assert out == [None, "Y"]


def test_a_reference_to_the_first_output_is_its_distilled_text() -> None:
    out = resolve_references([RUN2, None, _same(1)], [None, _same(1)], [None, 2])
    assert out == [None, RUN2]


def test_a_reference_inside_an_output_is_the_referents_distilled_text() -> None:
    out = resolve_references([RUN2, None, "head\n" + _same(1)], [None, "head\n" + _same(1)],
                             [None, 2])
    assert out == [None, "head\n" + RUN2]
    # The same with a JSON layout last in the row (only the referent's head counts).
    source = [RUN2, None, "head\n" + _same(1), None, JSON2]
    out = resolve_references(source, [None, "head\n" + _same(1), None, JSON2], [None, 2, 3, 4])
    assert out == [None, "head\n" + RUN2, None, JSON2]


def test_a_json_layout_is_written_whole_only_for_a_whole_output() -> None:
    out = resolve_references([JSON2, None, _same(1)], [None, _same(1)], [None, 2])
    assert out == [None, JSON2]
    out = resolve_references([JSON2, None, "head\n" + _same(1)], [None, "head\n" + _same(1)],
                             [None, 2])
    assert out == [None, 'head\n{\n  "a": 1\n}']


def test_a_json_layout_output_is_left_as_it_is() -> None:
    text = "⟪json indent 2⟫\n" + _same(1)
    assert _resolved(text, {1: 7}, ["x"], ["x"]) == text


def test_outputs_after_a_multi_output_turn_are_renumbered() -> None:
    source = ["X", None, _hermes("A", "B"), None, _same(3)]
    written = [None, _hermes("A", "B"), None, _same(3)]
    out = resolve_references(source, written, [None, 2, 3, 4])
    assert out == [None, written[1], None, _same(2)]


def test_a_row_that_does_not_read_back_is_left_as_written() -> None:
    assert resolve_references([_same(3)], [_same(3)], [0]) == [_same(3)]


def test_written_texts_and_origins_must_pair_up() -> None:
    with pytest.raises(ValueError):
        resolve_references(["X", None, _same(1)], [_same(1)], [2, 0])


def test_a_range_that_reads_nothing_is_kept_as_written() -> None:
    line = "⟪lines 5-9 of tool output #1⟫"
    assert resolve_references(["a\nb", None, "c"], [None, line], [None, 2]) == [None, line]


def test_a_new_turn_is_not_resolved() -> None:
    assert resolve_references(["X", None, "Y"], [_same(1), "Y"], [None, 2]) == [_same(1), "Y"]
