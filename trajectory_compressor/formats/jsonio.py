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
from typing import Any

import orjson

# A run of 19 or more digits may be an integer orjson cannot hold (it makes it a float).
_LONG_DIGITS = re.compile(rb"\d{19,}")


def loads(data: bytes | str) -> Any:
    """Parse one JSON document; raises `ValueError` with orjson's or json's message."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _LONG_DIGITS.search(raw):
        try:
            return json.loads(data)
        except ValueError:
            pass  # not JSON at all: orjson's message below says why
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if isinstance(data, bytes):
            data.decode("utf-8")  # raises UnicodeDecodeError for non-UTF-8 input
        try:
            return json.loads(data)
        except ValueError:
            raise ValueError(str(exc)) from None


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
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_default)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate has no UTF-8 form: escaped as \uXXXX it reads back the same.
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":"),
                          default=_default).encode("ascii")


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def _default(value: Any) -> Any:
    """JSON for the Python values of Parquet columns that JSON has no type for."""
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
