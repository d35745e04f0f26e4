"""Hermes ShareGPT rows: ``conversations`` of ``{"from", "value"}`` turns (§2)."""

from __future__ import annotations

from typing import Any

from ..core.conversation import ROLES, Row, Trajectory, json_type
from ..core.errors import RowError

COLUMN = "conversations"


def conversations_of(row: Any) -> Trajectory:
    """The row's validated `conversations`; raises `RowError` saying what is wrong."""
    if not isinstance(row, dict):
        raise RowError(f"row is a JSON {json_type(row)}, expected an object")
    if COLUMN not in row:
        raise RowError("row has no 'conversations' field")
    turns = row[COLUMN]
    if not isinstance(turns, list):
        raise RowError(f"'conversations' is a JSON {json_type(turns)}, expected a list")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RowError(f"turn {i} is a JSON {json_type(turn)}, expected an object")
        role = turn.get("from")
        if role not in ROLES:
            raise RowError(f"turn {i} has unknown role {role!r} (expected one of "
                           f"{', '.join(ROLES)})")
        if not isinstance(turn.get("value"), str):
            raise RowError(f"turn {i} has a non-string 'value' "
                           f"({json_type(turn.get('value'))})")
    return turns


class ShareGPT:
    """The Hermes ShareGPT dialect: the turns are the row's ``conversations`` as they are."""

    name = "sharegpt"

    def turns(self, row: Any) -> Trajectory:
        return conversations_of(row)

    def with_turns(self, row: Row, turns: Trajectory) -> Row:
        new_row = dict(row)
        new_row[COLUMN] = turns
        return new_row

    def text_chars(self, row: Any) -> int:
        turns = row.get(COLUMN) if isinstance(row, dict) else None
        if not isinstance(turns, list):
            return 0
        return sum(len(t.get("value") or "") for t in turns if isinstance(t, dict)
                   and isinstance(t.get("value"), str))


SHAREGPT = ShareGPT()
