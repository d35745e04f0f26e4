"""Bounded parsing of the JSON found inside turn text (issue 36).

A tool output may hold any text, including ``[`` repeated 100,000 times: the stdlib's
recursive parser raises `RecursionError` on it (and code walking a parsed document
recursively would too). `loads` measures the nesting first, iteratively, and refuses
a text nested deeper than `MAX_DEPTH` with a `json.JSONDecodeError` (a `ValueError`),
so every caller treats it as what it is for them: text that is not a JSON document.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Deeper than any real tool output, shallow enough that the recursive walks over a
# parsed document (distill, elide, fidelity) stay far from Python's recursion limit.
MAX_DEPTH = 128
# A JSON string (escapes included), or one bracket: brackets inside strings are data.
_LEXEMES = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether ``text`` opens more than ``limit`` arrays or objects inside each other
    (outside strings). Iterative; fewer opening brackets than the limit settle it at C
    speed."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _LEXEMES.finditer(text):
        lexeme = match.group()
        if lexeme in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif lexeme in ("]", "}"):
            depth = max(depth - 1, 0)
    return False


def loads(text: str, **kwargs: Any) -> Any:
    """`json.loads` for text from a turn: `json.JSONDecodeError` for a document nested
    deeper than `MAX_DEPTH` (or one the parser cannot finish for its depth)."""
    if too_deep(text):
        raise json.JSONDecodeError(f"nested more than {MAX_DEPTH} levels deep", text, 0)
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep to parse", text, 0) from None
