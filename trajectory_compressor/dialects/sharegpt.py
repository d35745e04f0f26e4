"""ShareGPT rows: a list of ``{"from", "value"}`` turns (§2, §14).

Two dialects share the shape:
- **Hermes** (`SHAREGPT`): roles system/human/gpt/tool; the row's turns are the
  conversation as they are (reference parity: nothing is translated).
- **ShareGPT variants** (`ShareGPTVariant`, LLaMA-Factory's vocabulary): custom column,
  role and content keys; ``user``/``assistant`` aliases; ``function_call`` (an assistant
  tool call) and ``observation`` (a tool response); the system prompt and the tool
  schemas in their own columns. Where user side (human, observation) and assistant side
  (gpt, function_call) alternate, the summarized region is whole assistant/user pairs and
  the summary is appended to the user-side turn before it (``\n\n[CONTEXT SUMMARY]:
  …``), so the row still alternates and no call loses its observation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import json_text
from ..core.conversation import CALL_TURN, ROLES, Row, Trajectory, Turn, json_type
from ..core.errors import RowError
from ..core.plan import ALTERNATING, ANY_BUT_TOOL, Boundaries
from .base import SOURCE, parse_tools, plain_messages, summary_weights

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

    def boundaries(self, turns: Trajectory) -> Boundaries:
        return ANY_BUT_TOOL

    def with_turns(self, row: Row, turns: Trajectory, summary_at: int | None = None) -> Row:
        new_row = dict(row)
        if summary_at is not None:
            turns = list(turns)
            turns[summary_at] = {**turns[summary_at], **summary_weights(row.get(COLUMN))}
        new_row[COLUMN] = turns
        return new_row

    def template_messages(
        self, row: Row, turns: Trajectory
    ) -> tuple[list[dict[str, Any]], list[Any] | None]:
        return plain_messages(turns), None

    def text_chars(self, row: Any) -> int:
        turns = row.get(COLUMN) if isinstance(row, dict) else None
        if not isinstance(turns, list):
            return 0
        return sum(len(t.get("value") or "") for t in turns if isinstance(t, dict)
                   and isinstance(t.get("value"), str))


SHAREGPT = ShareGPT()


@dataclass(frozen=True)
class ShareGPTTags:
    """Column and tag names of a ShareGPT variant (LLaMA-Factory's `dataset_info` names)."""

    messages: str = "conversations"
    role_tag: str = "from"
    content_tag: str = "value"
    user_tag: tuple[str, ...] = ("human", "user")
    assistant_tag: tuple[str, ...] = ("gpt", "assistant")
    observation_tag: tuple[str, ...] = ("observation", "tool")
    function_tag: tuple[str, ...] = ("function_call",)
    system_tag: tuple[str, ...] = ("system",)
    system: str | None = "system"
    tools: str | None = "tools"
    roles: dict[str, str] = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        roles: dict[str, str] = {}
        for tags, role in ((self.system_tag, "system"), (self.user_tag, "human"),
                           (self.assistant_tag, "gpt"), (self.function_tag, "gpt"),
                           (self.observation_tag, "tool")):
            for tag in tags:
                roles.setdefault(tag, role)
        object.__setattr__(self, "roles", roles)


class ShareGPTVariant:
    """A ShareGPT variant: tags translated to roles, system and tools columns honoured."""

    name = "sharegpt-variant"

    def __init__(self, tags: ShareGPTTags | None = None) -> None:
        self.tags = tags or ShareGPTTags()

    def turns(self, row: Any) -> Trajectory:
        t = self.tags
        if not isinstance(row, dict):
            raise RowError(f"row is a JSON {json_type(row)}, expected an object")
        items = row.get(t.messages)
        if not isinstance(items, list):
            raise RowError(f"row has no list in {t.messages!r}" if t.messages not in row else
                           f"{t.messages!r} is a JSON {json_type(items)}, expected a list")
        turns: Trajectory = []
        if t.system and t.system in row and row[t.system] is not None:
            if not isinstance(row[t.system], str):
                raise RowError(f"column {t.system!r} is a JSON {json_type(row[t.system])}, "
                               "expected a string")
            # The system column is the conversation's head: counted, never summarized.
            turns.append({"from": "system", "value": row[t.system], SOURCE: ("column", None)})
        if t.tools and t.tools in row:
            _check_tools(row[t.tools], t.tools)
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise RowError(f"{t.messages}[{i}] is a JSON {json_type(item)}, expected an "
                               "object")
            tag = item.get(t.role_tag)
            role = t.roles.get(tag) if isinstance(tag, str) else None
            if role is None:
                known = ", ".join(t.roles)
                raise RowError(f"{t.messages}[{i}].{t.role_tag} is {tag!r}, not one of {known}")
            value = item.get(t.content_tag)
            if not isinstance(value, str):
                raise RowError(f"{t.messages}[{i}].{t.content_tag} is a JSON "
                               f"{json_type(value)}, expected a string")
            turn: Turn = {"from": role, "value": value, SOURCE: ("item", item)}
            if tag in t.function_tag:
                turn[CALL_TURN] = True
            turns.append(turn)
        return turns

    def boundaries(self, turns: Trajectory) -> Boundaries:
        return ALTERNATING if alternates(turns) else ANY_BUT_TOOL

    def with_turns(self, row: Row, turns: Trajectory, summary_at: int | None = None) -> Row:
        t = self.tags
        new_row = dict(row)
        items: list[Any] = []
        originals = row.get(t.messages) or []
        if summary_at is not None and summary_at > 0 and alternates(turns[:summary_at]) \
                and turns[summary_at - 1]["from"] in ("human", "tool"):
            # Alternating rows: the summary (user side) joins the user-side turn before
            # the region (whole assistant/user pairs), so the turns still alternate.
            joined = {**turns[summary_at - 1],
                      "value": turns[summary_at - 1]["value"] + "\n\n" + turns[summary_at]["value"]}
            turns = [*turns[:summary_at - 1], joined, *turns[summary_at + 1:]]
            summary_at = None
        for i, turn in enumerate(turns):
            kind, original = turn.get(SOURCE, (None, None))
            if kind == "column":
                new_row[t.system or "system"] = turn["value"]
            elif i == summary_at or original is None:
                items.append({t.role_tag: _user_tag(originals, t), t.content_tag: turn["value"],
                              **summary_weights(originals)})
            elif original.get(t.content_tag) != turn["value"]:
                items.append({**original, t.content_tag: turn["value"]})
            else:
                items.append(original)
        new_row[t.messages] = items
        return new_row

    def template_messages(
        self, row: Row, turns: Trajectory
    ) -> tuple[list[dict[str, Any]], list[Any] | None]:
        tools = parse_tools(row.get(self.tags.tools)) if self.tags.tools else None
        return plain_messages(turns), tools

    def text_chars(self, row: Any) -> int:
        t = self.tags
        items = row.get(t.messages) if isinstance(row, dict) else None
        if not isinstance(items, list):
            return 0
        system = row.get(t.system) if t.system else None
        return (len(system) if isinstance(system, str) else 0) + sum(
            len(v) for item in items if isinstance(item, dict)
            and isinstance(v := item.get(t.content_tag), str))


def _check_tools(value: Any, column: str) -> None:

    if isinstance(value, str) and value.strip():
        try:
            value = json_text.loads(value)
        except ValueError as exc:
            raise RowError(f"column {column!r} is not valid JSON ({exc})") from None
    if value not in (None, "") and not isinstance(value, (list, dict)):
        raise RowError(f"column {column!r} is a JSON {json_type(value)}, expected a list of "
                       "tool schemas")


def alternates(turns: Trajectory) -> bool:
    """Whether user-side and assistant-side turns alternate after the system turns."""
    body = [t["from"] for t in turns if t["from"] != "system"]
    return all((role == "gpt") == (i % 2 == 1) for i, role in enumerate(body))


def _user_tag(items: list[Any], tags: ShareGPTTags) -> str:
    """The tag the row's own user turns use (``human`` or ``user``), for the summary."""
    for item in items:
        tag = item.get(tags.role_tag) if isinstance(item, dict) else None
        if tag in tags.user_tag:
            return str(tag)
    return tags.user_tag[0]


def is_hermes(turn: Turn) -> bool:
    """Whether a turn is spelled the Hermes way (a role of `ROLES`, a string value)."""
    return turn.get("from") in ROLES and isinstance(turn.get("value"), str)
