"""The conversation model every stage works on: turns of system/human/gpt/tool text.

Dialects (`dialects/`) translate rows to and from it; nothing here knows row keys.
"""

from __future__ import annotations

from typing import Any

Turn = dict[str, Any]
Trajectory = list[Turn]
Row = dict[str, Any]

ROLES = ("system", "human", "gpt", "tool")
SUMMARY_PREFIX = "[CONTEXT SUMMARY]:"


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type, for messages about rows."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
