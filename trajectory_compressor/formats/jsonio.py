"""Fast JSON (orjson) with a stdlib fallback wherever orjson would change a value.

Values round-trip exactly: integers beyond 64 bits (orjson reads them as floats), NaN and
Infinity (orjson writes them as null) and lone surrogate escapes (orjson refuses them)
go through the stdlib `json` module instead.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import re
import secrets
from typing import Any

import orjson

# How deep a row's values may nest (objects and arrays). Real trajectories nest a dozen
# levels; a row deeper than this is a located reject (docs/guarantees.md), so that no
# reader, counter or writer meets a value deeper than Python's recursion can follow.
MAX_NESTING = 256

# A run of 19 or more digits may be an integer orjson cannot hold (it makes it a float);
# a three-digit exponent may be a number no double holds (1e400, 1e-400).
_LONG_DIGITS = re.compile(rb"\d{19,}|[eE][-+]?\d{3,}")
_NONZERO = re.compile(r"[1-9]")


class JsonNumber(float):
    """A JSON number no double holds (``1e400``, ``1e-400``): its float value is what
    the nearest double would be (inf, 0.0), and it is written back as its own text, so
    the output stays valid JSON and says what the input said."""

    text: str

    def __new__(cls, text: str) -> JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _number(text: str) -> float:
    """A JSON number as a float, or a `JsonNumber` when a double cannot hold it."""
    value = float(text)
    if not math.isfinite(value) or (value == 0.0 and _NONZERO.search(text.partition("e")[0]
                                                                     .partition("E")[0])):
        return JsonNumber(text)
    return value


def loads(data: bytes | str) -> Any:
    """Parse one JSON document; raises `ValueError` with orjson's or json's message.

    Bytes are UTF-8 (RFC 8259): the stdlib's guess of UTF-16 or a BOM is not taken, so
    what parses here is also valid JSON when written back byte for byte.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _LONG_DIGITS.search(raw):
        try:
            return _stdlib_loads(data)
        except ValueError:
            pass  # not JSON at all: orjson's message below says why
        except RecursionError:
            raise ValueError(_TOO_DEEP) from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if isinstance(data, bytes):
            data.decode("utf-8")  # raises UnicodeDecodeError for non-UTF-8 input
        try:
            return _stdlib_loads(data)
        except ValueError:
            raise ValueError(str(exc)) from None
        except RecursionError:
            raise ValueError(_TOO_DEEP) from None


def _stdlib_loads(data: bytes | str) -> Any:
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return json.loads(text, parse_float=_number)


_TOO_DEEP = f"nested more than {MAX_NESTING} levels deep (objects and arrays)"


def too_deep(value: Any, raw: bytes | None = None) -> bool:
    """Whether ``value`` nests objects and arrays more than `MAX_NESTING` levels deep.

    Iterative, so any depth is measured; ``raw`` (its JSON text, when known) settles the
    usual case at C speed: fewer opening brackets than the limit cannot nest deeper.
    """
    if raw is not None and raw.count(b"[") + raw.count(b"{") <= MAX_NESTING:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, (list, tuple)):
            continue
        if depth > MAX_NESTING:
            return True
        stack.extend((child, depth + 1) for child in item
                     if isinstance(child, (dict, list, tuple)))
    return False


def dumps(obj: Any) -> bytes:
    """One line of UTF-8 JSON (non-ASCII kept as is), without the newline."""
    try:
        out = orjson.dumps(obj, default=_default)
    except TypeError:  # huge ints, lone surrogates, ...
        return _stdlib_dumps(obj)
    if b"null" in out and _has_non_finite(obj):
        return _stdlib_dumps(obj)
    return out


def _stdlib_dumps(obj: Any) -> bytes:
    numbers: list[JsonNumber] = []
    # A random token in the markers: a string of the row spells one by a 2**-64 chance only.
    token = secrets.token_hex(8)
    obj = _mark_numbers(obj, numbers, token)
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_default)
    try:
        out = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate has no UTF-8 form: escaped as \uXXXX it reads back the same.
        out = json.dumps(obj, ensure_ascii=True, separators=(",", ":"),
                         default=_default).encode("ascii")
    for i, number in enumerate(numbers):
        marker = b'"\\u0000jsonio-number-%s-%d\\u0000"' % (token.encode("ascii"), i)
        out = out.replace(marker, number.text.encode("ascii"), 1)
    return out


def _mark_numbers(value: Any, numbers: list[JsonNumber], token: str) -> Any:
    """``value`` with each `JsonNumber` replaced by a marker string (json writes its
    float value, ``Infinity``, which is not JSON); `_stdlib_dumps` puts the text back."""
    if isinstance(value, JsonNumber):
        numbers.append(value)
        return f"\x00jsonio-number-{token}-{len(numbers) - 1}\x00"
    if isinstance(value, dict):
        if any(isinstance(v, (JsonNumber, dict, list)) for v in value.values()):
            return {k: _mark_numbers(v, numbers, token) for k, v in value.items()}
        return value
    if isinstance(value, list):
        if any(isinstance(v, (JsonNumber, dict, list)) for v in value):
            return [_mark_numbers(v, numbers, token) for v in value]
        return value
    return value


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value) and not isinstance(value, JsonNumber)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def _default(value: Any) -> Any:
    """JSON for the Python values of Parquet columns that JSON has no type for."""
    if isinstance(value, JsonNumber):
        return orjson.Fragment(value.text)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (decimal.Decimal, datetime.timedelta)):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps_pretty(obj: Any) -> bytes:
    """Indented JSON for small human-facing files (metrics)."""
    try:
        return json.dumps(obj, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate (a file name that is not UTF-8, as Python decodes it) has no
        # UTF-8 form: escaped as \uXXXX it reads back as the same string.
        return json.dumps(obj, ensure_ascii=True, indent=2).encode("ascii") + b"\n"
