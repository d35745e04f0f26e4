"""Error types and the one-line form of an unexpected exception (`core/errors.py`)."""

from __future__ import annotations

import pytest

from trajectory_compressor.core.errors import CompressorError, RowError, one_line_error


def test_a_row_error_is_its_reason():
    error = RowError("turn 3 has no 'value'")
    assert error.reason == "turn 3 has no 'value'"
    assert str(error) == "turn 3 has no 'value'" and isinstance(error, CompressorError)


def test_one_line_error_joins_lines_and_names_the_type():
    assert one_line_error(ValueError("bad\n  value\tthere")) == "ValueError: bad value there"
    assert one_line_error(KeyError()) == "KeyError: (no message)"


@pytest.mark.parametrize("length, shown", [
    (300, "x" * 300),  # at the limit: whole
    (301, "x" * 299 + "…"),  # one over: cut to 300 characters, the last an ellipsis
])
def test_one_line_error_keeps_300_characters(length, shown):
    assert one_line_error(OSError("x" * length)) == f"OSError: {shown}"
    assert one_line_error(OSError("y" * 20), limit=10) == "OSError: " + "y" * 9 + "…"
