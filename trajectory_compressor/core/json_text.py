"""Bounded parsing of the JSON found inside turn text (issue 36).

A tool output may hold any text, including ``[`` repeated 100,000 times: the stdlib's
recursive parser raises `RecursionError` on it (and code walking a parsed document
recursively would too). `loads` refuses a text nested deeper than `MAX_DEPTH` with a
`json.JSONDecodeError` (a `ValueError`), so every caller treats it as what it is for
them: text that is not a JSON document.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

# Deeper than any real tool output, shallow enough that the recursive walks over a
# parsed document (distill, elide, fidelity) stay far from Python's recursion limit.
MAX_DEPTH = 128
TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep"
# What changes the nesting or whether a bracket is data: brackets, quotes, backslashes.
_SPECIAL = re.compile(r'[\[\]{}"\\]')


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether ``text`` opens more than ``limit`` arrays or objects inside each other
    (outside strings). One pass over its brackets, quotes and backslashes (linear, even
    on unbalanced quotes); fewer opening brackets than the limit settle it at C speed."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_string = False
    escaped_at = -1  # the position a backslash in a string escapes
    for match in _SPECIAL.finditer(text):
        at = match.start()
        if at == escaped_at:
            continue
        char = match.group()
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth = max(depth - 1, 0)
    return False


def loads(text: str, **kwargs: Any) -> Any:
    """`json.loads` for text from a turn: `json.JSONDecodeError` for a document nested
    deeper than `MAX_DEPTH`.

    Parsed first (the stdlib's parser stops a much deeper document with `RecursionError`,
    caught here); then, when the text has more opening brackets than the limit, the
    depth of the now valid text is measured at C speed (`_depth_of_valid`)."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None
    if (text.count("[") + text.count("{") > MAX_DEPTH and _rough_depth(text) > MAX_DEPTH
            and _depth_of_valid(text) > MAX_DEPTH):
        raise json.JSONDecodeError(TOO_DEEP, text, 0)
    return value


# A JSON string of a valid document (they all close, so this is linear).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _rough_depth(text: str) -> int:
    """The depth of ``text`` counting the brackets inside its strings too: a quick filter
    before `_depth_of_valid`. It can be wrong both ways only through strings holding
    brackets; a document it underrates by hundreds of levels is still one the parser
    took (under Python's recursion limit), and a walk that then runs out of stack costs
    that row only (`compress_or_fail`)."""
    return max(accumulate(map(_STEP.__getitem__, _NOT_BRACKETS.sub("", text))), default=0)


def _depth_of_valid(text: str) -> int:
    """How deep the valid JSON ``text`` nests: its strings dropped, its brackets as
    steps up and down, the highest point; at C speed (regex, map, accumulate)."""
    brackets = _NOT_BRACKETS.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)

