"""What a dialect is: how a row spells a conversation, translated to and from `Turn`s.

The engine, the compressor and the report never read row keys themselves: they ask the
row's dialect for its turns, for the row with new turns, and for its size.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..core import json_text
from ..core.conversation import Row, Trajectory
from ..core.plan import Boundaries

ID_KEYS = ("id", "uuid", "trajectory_id", "sample_id")
# The key of an internal turn that remembers the row item it was read from, so that the
# dialect writes every item the compressor did not change back as it was.
SOURCE = "_source"
# Per-message loss-weight keys: where a row's messages carry one, the summary gets 0.
WEIGHT_KEYS = ("weight", "loss_weight")


class Dialect(Protocol):
    """Row ↔ conversation for one way of spelling conversations."""

    name: str

    def turns(self, row: Any) -> Trajectory:
        """The row's validated turns; raises `RowError` saying what is wrong."""
        ...

    def boundaries(self, turns: Trajectory) -> Boundaries:
        """Where a summarized region of ``turns`` may start and stop (the dialect's rules)."""
        ...

    def with_turns(self, row: Row, turns: Trajectory, summary_at: int | None = None) -> Row:
        """A new row: ``row`` with its conversation replaced by ``turns`` (other keys kept);
        ``turns[summary_at]`` is the summary, written in the dialect's own spelling."""
        ...

    def text_chars(self, row: Any) -> int:
        """About how many characters of conversation text ``row`` holds (cheap)."""
        ...

    def template_messages(
        self, row: Row, turns: Trajectory
    ) -> tuple[list[dict[str, Any]], list[Any] | None]:
        """The row as chat messages for a tokenizer's chat template, one per turn, and its
        tool schemas (None when it has none)."""
        ...


def row_id(row: Any) -> Any:
    """The row's id (``id``, ``uuid``, ``trajectory_id`` or ``sample_id``), if it has one."""
    if isinstance(row, dict):
        for key in ID_KEYS:
            if key in row and isinstance(row[key], (str, int)):
                return row[key]
    return None


def summary_weights(items: Any) -> dict[str, int]:
    """``{key: 0}`` for each loss-weight key the row's messages carry: a summary is
    context, never a training target."""
    if not isinstance(items, list):
        return {}
    found = {key for item in items if isinstance(item, dict) for key in WEIGHT_KEYS
             if key in item}
    return {key: 0 for key in WEIGHT_KEYS if key in found}


CHAT_ROLES = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}


def plain_messages(turns: Trajectory) -> list[dict[str, Any]]:
    """One ``{"role", "content"}`` message per turn, the turn's text as its content."""
    return [{"role": CHAT_ROLES[t["from"]], "content": t["value"]} for t in turns]


def parse_tools(value: Any) -> list[Any] | None:
    """A row's tool schemas: a list, or the same as a JSON string; None when absent."""

    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json_text.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, list) and value else None
