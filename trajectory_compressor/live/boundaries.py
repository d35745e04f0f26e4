"""Phase 2: where the protected head ends and the protected tail starts (§10).

The messages ``[head_end, tail_start)`` are the middle that one summary replaces. Neither
boundary ever separates an assistant message from the tool results answering it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .markers import is_summary_text
from .messages import Message, role_of, text_of

MIN_TAIL_MESSAGES = 3
# The tail may grow to this multiple of its budget rather than cut inside one big message.
TAIL_SOFT_CEILING = 1.5


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a compaction summary (or failure marker) of an earlier pass."""
    return role_of(message) in ("user", "assistant") and is_summary_text(text_of(message))


def head_end(messages: Sequence[Message], protect_first_n: int) -> int:
    """End of the head: the first ``protect_first_n`` messages, pushed past tool results.

    A summary of an earlier pass is never part of the head, so that it is folded into the
    new summary instead of standing beside it.
    """
    end = min(protect_first_n, len(messages))
    while end < len(messages) and role_of(messages[end]) == "tool":
        end += 1
    for i in range(1, end):
        if is_summary(messages[i]):
            return i
    return end


def group_start(messages: Sequence[Message], index: int, low: int) -> int:
    """``index`` moved back off tool results onto the assistant message that made the calls."""
    while index > low and index < len(messages) and role_of(messages[index]) == "tool":
        index -= 1
    return index


def latest_user_index(messages: Sequence[Message]) -> int | None:
    """Index of the latest real user message (summaries of earlier passes do not count)."""
    for i in range(len(messages) - 1, -1, -1):
        if role_of(messages[i]) == "user" and not is_summary(messages[i]):
            return i
    return None


def tail_start(
    messages: Sequence[Message], tokens: Sequence[int], head: int, budget: int
) -> int:
    """Start of the tail: walk back from the end, taking messages until ``budget`` tokens.

    The tail may exceed the budget up to `TAIL_SOFT_CEILING` × budget rather than stop
    short of one big message; it holds at least `MIN_TAIL_MESSAGES` messages, starts on a
    whole tool-call group, and contains the latest user message.

    When everything after the head fits the budget, the tail falls back to its minimum:
    a manual compression of a short conversation still has a middle to compress.
    """
    n = len(messages)
    start = n
    taken = 0
    ceiling = budget * TAIL_SOFT_CEILING
    while start > head:
        count = n - start
        cost = tokens[start - 1]
        if count >= MIN_TAIL_MESSAGES and (taken >= budget or taken + cost > ceiling):
            break
        taken += cost
        start -= 1
    start = group_start(messages, start, head)
    if start <= head:
        start = group_start(messages, max(head, n - MIN_TAIL_MESSAGES), head)
    user = latest_user_index(messages)
    if user is not None and head <= user < start:
        start = user
    return start
