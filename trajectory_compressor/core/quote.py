"""A value quoted in a message, bounded: what a config file or a row holds can be huge
(a YAML alias nested ten deep names a billion strings), and a message that spelled it
out in full would allocate gigabytes before it said anything."""

from __future__ import annotations

import reprlib
from typing import Any

from .redact import redact

MAX_QUOTED_CHARS = 80

_REPR = reprlib.Repr()
# Visits at most 4 items per container, 3 levels down: bounded whatever the value.
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = MAX_QUOTED_CHARS


def quoted(value: Any) -> str:
    """``repr(value)`` cut to about `MAX_QUOTED_CHARS` characters (with ``...``), in time
    and memory bounded by those limits, not by the value's size; key-like strings in it
    are ``[REDACTED]``."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = f"<a number of {value.bit_length():,} bits>" if isinstance(value, int) \
            else f"<{type(value).__name__}>"
    text = text if len(text) <= 2 * MAX_QUOTED_CHARS else text[:2 * MAX_QUOTED_CHARS] + "..."
    return redact(text)  # a key pasted into the wrong place is not repeated on the console
