"""Fast JSON (orjson) with a stdlib fallback for what orjson refuses (huge ints, NaN)."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """Parse one JSON document; raises `ValueError` with orjson's or json's message."""
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
        return orjson.dumps(obj, default=_default)
    except TypeError:
        return json.dumps(obj, ensure_ascii=False, default=_default).encode("utf-8")


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
    return json.dumps(obj, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"
