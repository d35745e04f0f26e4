"""Where the summary goes: its role, and whether it must merge into a tail message (§10).

Chat templates and providers expect roles to alternate, so the summary message takes a
role that neither neighbour has. With user/assistant as the only choices, that fails when
the head ends on one and the tail starts on the other. Then the tail boundary first moves
back by one message group (the tail only grows, and the latest user message is not
rewritten), as long as at least two messages stay in the middle — replacing a single
message with a summary would not shorten anything; otherwise the summary is merged into
the first tail message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .boundaries import candidates, group_start, latest_user_index
from .messages import Message, role_of

MIN_MIDDLE_AFTER_SHIFT = 2


@dataclass(frozen=True)
class Placement:
    """The settled tail boundary, the summary's role, and whether it merges into the tail."""

    tail_start: int
    role: str
    merge: bool = False


def _role_between(before: str | None, after: str | None) -> str | None:
    """A summary role differing from both neighbours, or None when both choices collide."""
    # After an assistant turn (or its tool results) the natural next speaker is the user.
    first = "user" if before in ("assistant", "tool") else "assistant"
    second = "assistant" if first == "user" else "user"
    for role in (first, second):
        if role != before and role != after:
            return role
    return None


def place_summary(messages: Sequence[Message], head_end: int, tail_start: int) -> Placement:
    """The placement of a summary replacing ``messages[head_end:tail_start]``."""
    before = role_of(messages[head_end - 1]) if head_end > 0 else None
    start = tail_start
    while True:
        after = role_of(messages[start]) if start < len(messages) else None
        role = _role_between(before, after)
        if role is not None:
            return Placement(start, role)
        earlier = group_start(messages, start - 1, head_end)
        if earlier - head_end < MIN_MIDDLE_AFTER_SHIFT:
            break
        start = earlier
    # Merged into the tail's first message, which exists: with no tail (``tail_start`` at
    # the end) nothing follows the summary, and the first pass above has returned.
    return Placement(tail_start, role_of(messages[tail_start]), merge=True)


def settle(
    messages: Sequence[Message], tokens: Sequence[int], protect_first_n: int, budget: int
) -> tuple[int, Placement] | None:
    """The head end and summary placement of this compaction; None when nothing to compress.

    The preferred layout wins unless its summary would be merged into the latest user
    message, which must stay as the user wrote it, and another layout avoids that.
    """
    user = latest_user_index(messages)
    chosen: tuple[int, Placement] | None = None
    for head, tail in candidates(messages, tokens, protect_first_n, budget):
        placement = place_summary(messages, head, tail)
        if not (placement.merge and placement.tail_start == user):
            return head, placement
        chosen = chosen or (head, placement)
    return chosen
