"""What a dialect is: how a row spells a conversation, translated to and from `Turn`s.

The engine, the compressor and the report never read row keys themselves: they ask the
row's dialect for its turns, for the row with new turns, and for its size.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..core.conversation import Row, Trajectory

ID_KEYS = ("id", "uuid", "trajectory_id", "sample_id")


class Dialect(Protocol):
    """Row ↔ conversation for one way of spelling conversations."""

    name: str

    def turns(self, row: Any) -> Trajectory:
        """The row's validated turns; raises `RowError` saying what is wrong."""
        ...

    def with_turns(self, row: Row, turns: Trajectory) -> Row:
        """A new row: ``row`` with its conversation replaced by ``turns`` (other keys kept)."""
        ...

    def text_chars(self, row: Any) -> int:
        """About how many characters of conversation text ``row`` holds (cheap)."""
        ...


def row_id(row: Any) -> Any:
    """The row's id (``id``, ``uuid``, ``trajectory_id`` or ``sample_id``), if it has one."""
    if isinstance(row, dict):
        for key in ID_KEYS:
            if key in row and isinstance(row[key], (str, int)):
                return row[key]
    return None
