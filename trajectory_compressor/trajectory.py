"""Trajectories and turns (ShareGPT): the row shape, its roles, and its validation."""

from __future__ import annotations

from typing import Any

from .errors import RowError

Turn = dict[str, Any]
Trajectory = list[Turn]
Row = dict[str, Any]

ROLES = ("system", "human", "gpt", "tool")
SUMMARY_PREFIX = "[CONTEXT SUMMARY]:"


def conversations_of(row: Any) -> Trajectory:
    """The row's validated `conversations`; raises `RowError` saying what is wrong."""
    if not isinstance(row, dict):
        raise RowError(f"row is a JSON {_json_type(row)}, expected an object")
    if "conversations" not in row:
        raise RowError("row has no 'conversations' field")
    turns = row["conversations"]
    if not isinstance(turns, list):
        raise RowError(f"'conversations' is a JSON {_json_type(turns)}, expected a list")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RowError(f"turn {i} is a JSON {_json_type(turn)}, expected an object")
        role = turn.get("from")
        if role not in ROLES:
            raise RowError(f"turn {i} has unknown role {role!r} (expected one of "
                           f"{', '.join(ROLES)})")
        if not isinstance(turn.get("value"), str):
            raise RowError(f"turn {i} has a non-string 'value' "
                           f"({_json_type(turn.get('value'))})")
    return turns


def row_id(row: Any) -> Any:
    """The row's id (``id``, ``uuid``, ``trajectory_id`` or ``sample_id``), if it has one."""
    if isinstance(row, dict):
        for key in ("id", "uuid", "trajectory_id", "sample_id"):
            if key in row and isinstance(row[key], (str, int)):
                return row[key]
    return None


def _json_type(value: Any) -> str:
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
