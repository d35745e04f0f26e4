"""`quoted`: a value in a message, bounded in size (`core/quote.py`; issue 24, the YAML
aliases that made one error message allocate gigabytes).

Expected values from the module's documented limits and `reprlib`'s documented meaning
of them: a string shown to 80 characters, 4 items per container, 3 levels, the whole
text to 160 characters then ``...``; a number ``str()`` refuses shown by its size.
"""

from __future__ import annotations

from trajectory_compressor.core.quote import MAX_QUOTED_CHARS, quoted


def test_short_values_are_their_repr():
    assert quoted("abc") == "'abc'"
    assert quoted([1, "a", None]) == "[1, 'a', None]"


def test_a_long_string_is_shown_to_80_characters_with_its_ends():
    assert MAX_QUOTED_CHARS == 80
    shown = quoted("a" + "x" * 200 + "z")
    assert len(shown) == 80 and "..." in shown
    assert shown.startswith("'ax") and shown.endswith("xz'")


def test_containers_show_four_items_and_three_levels():
    assert quoted(list(range(10))) == "[0, 1, 2, 3, ...]"
    assert quoted({"k": list(range(5))}) == "{'k': [0, 1, 2, 3, ...]}"
    deep = quoted([[[[[1]]]]])
    assert "1" not in deep and "..." in deep  # the fourth level is not visited


def test_the_whole_text_is_cut_past_160_characters():
    at_limit = ["a" * 76, "b" * 76]  # ['…', '…']: 76 + 76 + 8 = 160 characters
    assert quoted(at_limit) == repr(at_limit) and len(repr(at_limit)) == 160
    over = ["a" * 76, "b" * 77]
    assert quoted(over) == repr(over)[:160] + "..."


def test_a_number_too_long_to_print_is_shown_by_its_size():
    assert quoted(10 ** 5000) == "<a number of 16,610 bits>"
    assert quoted(-(2 ** 20000)) == "<a number of 20,001 bits>"
