"""Text from data made inert before it reaches a terminal.

A row id, a file name or a reason quoted from a row can hold escape sequences: OSC 52
writes the clipboard, CSI moves the cursor or rewrites what was printed, a bidi override
reorders what the eye reads. `inert` is the one function every print point passes such
text through: it keeps line breaks and tabs and writes every other control character
(C0, DEL, C1, which hold ESC and CSI), every bidi control and every lone surrogate as a
visible ``\\uXXXX``.
That spelling is also a valid JSON escape of the same character, so JSON output passed
through it still parses to the same values.
"""

from __future__ import annotations

_KEEP = {"\n", "\t"}
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0)]
# Lone surrogates: how Python spells the bytes of a file name that is not UTF-8; a UTF-8
# terminal cannot be sent them at all (printing one raises).
_SURROGATES = range(0xD800, 0xE000)
_TABLE = {code: f"\\u{code:04x}" for code in [*_CONTROLS, *_BIDI, *_SURROGATES]
          if chr(code) not in _KEEP}


def inert(text: str) -> str:
    """``text`` with every terminal control, bidi control and lone surrogate spelled out
    (``\\u001b``)."""
    return text.translate(_TABLE)
