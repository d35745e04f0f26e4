"""Phase 2: where the protected head ends and the protected tail starts (§10).

The messages ``[head_end, tail_start)`` are the middle that one summary replaces. Neither
boundary ever separates an assistant message from the tool results answering it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .markers import is_summary_text
from .messages import Message, role_of, text_of

MIN_TAIL_MESSAGES = 3
# A middle of one message is replaced by one summary: nothing gets shorter.
MIN_MIDDLE = 2
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
    short of one big message; it holds at least `MIN_TAIL_MESSAGES` messages and starts on
    a whole tool-call group. When everything after the head fits the budget, the tail
    falls back to its minimum: a manual compression of a short conversation still has a
    middle to compress.
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
    return start


def candidates(
    messages: Sequence[Message], tokens: Sequence[int], protect_first_n: int, budget: int
) -> list[tuple[int, int]]:
    """``(head_end, tail_start)`` layouts with something to compress, best first.

    The middle to summarize is ``messages[head_end:tail_start]``. The latest user message
    is never summarized: the tail reaches back to contain it. When that leaves fewer
    than `MIN_MIDDLE` messages to compress (the user followed up right after the head,
    and the agent has worked since), the head extending through that message comes
    first instead, and the work after it is compressed. A middle of one message is
    widened into the tail when the tail can spare a group.
    """
    head = head_end(messages, protect_first_n)
    tail = tail_start(messages, tokens, head, budget)
    user = latest_user_index(messages)
    layouts: list[tuple[int, int] | None]
    if user is None or not head <= user < tail:
        layouts = [(head, _widen_middle(messages, head, tail, user))]
    else:
        reaching = (head, _widen_middle(messages, head, user, user))
        anchored = _anchored(messages, tokens, head, user, budget)
        layouts = [reaching, anchored] if user - head >= MIN_MIDDLE else [anchored, reaching]
    return [(h, t) for h, t in filter(None, layouts) if t > h]


def _anchored(
    messages: Sequence[Message], tokens: Sequence[int], head: int, user: int, budget: int
) -> tuple[int, int] | None:
    """The layout whose head extends through the latest user message, if it may."""
    if any(is_summary(m) for m in messages[head:user]):
        return None  # an earlier summary must stay in the middle, never in the head
    start = user + 1
    return start, _widen_middle(messages, start, tail_start(messages, tokens, start, budget),
                                user)


def boundaries(
    messages: Sequence[Message], tokens: Sequence[int], protect_first_n: int, budget: int
) -> tuple[int, int]:
    """The preferred layout of `candidates`; an empty middle when there is none."""
    layouts = candidates(messages, tokens, protect_first_n, budget)
    if layouts:
        return layouts[0]
    head = head_end(messages, protect_first_n)
    return head, head


def _widen_middle(messages: Sequence[Message], head: int, tail: int, user: int | None) -> int:
    """``tail`` moved forward by whole groups until the middle holds `MIN_MIDDLE` messages.

    The budget is a soft target; the tail's minimum size and the latest user message are
    not. When the budget leaves a single message to compress, the tail gives up groups
    while it keeps both, so that the summary replaces at least two messages.
    """
    n = len(messages)
    start = tail
    while 0 < start - head < MIN_MIDDLE:
        following = start + 1
        while following < n and role_of(messages[following]) == "tool":
            following += 1
        if n - following < MIN_TAIL_MESSAGES or (user is not None and head <= user < following):
            return tail
        start = following
    return start
