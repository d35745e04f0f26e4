"""`ContextCompressor`: the live-chat compressor core, on OpenAI-format message lists (§10).

    trigger → phase 1 prune → phase 2 boundaries → phase 3 handoff summary → phase 4 assemble

`should_compress` is the automatic trigger; `compress` always compresses when there is a
middle between the protected head and tail (manual compression), and never modifies the
messages it is given.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

from ..counting.tokens import TokenCounter
from .assembly import assemble
from .boundaries import is_summary
from .handoff import HandoffRequest, summary_budget
from .markers import (
    COMPACTION_NOTE,
    MERGE_SEPARATOR,
    SUMMARY_PREFIX,
    failure_marker,
    finish_summary,
    split_merged,
    summary_body,
)
from .messages import (
    MESSAGE_OVERHEAD,
    CountTokens,
    Message,
    MessageTokens,
    role_of,
    text_of,
    with_content,
)
from .placement import Placement, settle
from .pruning import PruneStats, prune
from .trigger import Trigger
from .writers import SummarizerArg, make_writer

log = logging.getLogger(__name__)

# Token counts of joined texts differ slightly from the sum of their parts.
_MARGIN = 8

Feedback = dict[str, Any]


class ContextCompressor:
    """Compresses a chat's middle into one handoff summary when the prompt nears the context.

    ``summarizer``: None (the offline extractive handoff), a `Summarizer` backend, or a
    callable ``prompt -> str`` that raises on failure. ``token_counter``: None (a cheap
    estimate, UTF-8 bytes / 4 — the trigger itself uses the provider's reported
    ``prompt_tokens``), a `TokenCounter`, or a callable ``text -> int``.
    """

    def __init__(
        self,
        context_length: int,
        summarizer: SummarizerArg = None,
        threshold: float = 0.5,
        target_ratio: float = 0.2,
        protect_first_n: int = 3,
        protect_last_n: int = 20,
        token_counter: TokenCounter | CountTokens | None = None,
    ) -> None:
        if context_length <= 0:
            raise ValueError(f"context_length must be positive, got {context_length}")
        if not 0 < threshold <= 1 or not 0 < target_ratio <= 1:
            raise ValueError("threshold and target_ratio must be in (0, 1]")
        if protect_first_n < 0 or protect_last_n < 0:
            raise ValueError("protect_first_n and protect_last_n must not be negative")
        self.context_length = context_length
        self.threshold = threshold
        self.target_ratio = target_ratio
        self.protect_first_n = protect_first_n
        self.protect_last_n = protect_last_n
        self.threshold_tokens = int(context_length * threshold)
        self.tail_token_budget = int(self.threshold_tokens * target_ratio)
        self.tokens = MessageTokens(token_counter)
        self._writer = make_writer(summarizer, self.tokens.count)
        self._trigger = Trigger(self.threshold_tokens)
        self.compression_count = 0
        self.last_feedback: Feedback | None = None

    def should_compress(self, prompt_tokens: int) -> bool:
        """Whether a prompt of ``prompt_tokens`` tokens should be compressed now.

        False after two passes in a row that each saved under 10%: compressing again would
        lose detail without freeing space.
        """
        return self._trigger.should_compress(prompt_tokens)

    def compress(
        self,
        messages: Sequence[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
    ) -> list[Message]:
        """A new, compressed message list; ``messages`` is left untouched.

        ``current_tokens`` is the prompt size the provider reported (shown in the
        feedback); ``focus_topic`` asks the summary to keep what concerns it in detail.
        The feedback of the pass is in `last_feedback`.
        """
        return self.compress_with_feedback(messages, current_tokens, focus_topic)[0]

    def compress_with_feedback(
        self,
        messages: Sequence[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
    ) -> tuple[list[Message], Feedback]:
        """`compress`, also returning the feedback dict of the pass."""
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise TypeError(f"message {i} is a {type(message).__name__}, not a dict")
        messages = list(messages)
        tokens = self.tokens.count_messages(messages)
        before = sum(tokens)
        settled = settle(messages, tokens, self.protect_first_n, self.tail_token_budget)
        head, placement = settled if settled else (0, None)
        middle, stats = self._phase1(messages, head, placement.tail_start if placement else head)
        previous, fresh = _split_previous(middle)
        if placement is None or not fresh:
            reason = ("nothing between the protected head and tail to compress"
                      if placement is None else "nothing new since the last summary")
            return self._done(messages, [copy.deepcopy(m) for m in messages], before, before,
                              current_tokens, reason=reason)
        budget = summary_budget(sum(self.tokens.count_messages(fresh)), self.context_length)
        room = sum(tokens[head:placement.tail_start]) - self._fixed_cost(messages, placement)
        request = HandoffRequest(fresh, head, budget, previous, focus_topic, max_tokens=room)
        error = None
        try:
            summary = finish_summary(self._writer.write(request))
        except Exception as exc:  # any failure of the caller's summarizer, by contract
            error = f"{type(exc).__name__}: {exc}"
            log.warning("context summary failed (%s); inserting the static marker", error)
            summary = failure_marker(placement.tail_start - head, previous)
        result = assemble(messages, head, placement, summary)
        after = sum(self.tokens.count_messages(result))
        return self._done(messages, result, before, after, current_tokens, error=error,
                          stats=stats)

    def _fixed_cost(self, messages: list[Message], placement: Placement) -> int:
        """Tokens a compaction adds besides the summary text: prefix, framing, system note.

        The framing is a message's, or the separator of a summary merged into the tail's
        first message (which is there already: it adds no message).
        """
        framing = (self.tokens.count(f"\n\n{MERGE_SEPARATOR}\n\n") if placement.merge
                   else MESSAGE_OVERHEAD)
        cost = self.tokens.count(SUMMARY_PREFIX) + framing + _MARGIN
        system = next((m for m in messages if role_of(m) == "system"), None)
        if system is not None and COMPACTION_NOTE not in text_of(system):
            cost += self.tokens.count(COMPACTION_NOTE)
        return cost

    def _phase1(
        self, messages: list[Message], head: int, tail: int
    ) -> tuple[list[Message], PruneStats]:
        """The middle with old tool traffic shrunk; its last `protect_last_n` stay whole."""
        prune_end = max(head, min(tail, len(messages) - self.protect_last_n))
        pruned, stats = prune(messages, head, prune_end)
        return pruned + messages[prune_end:tail], stats

    def _done(
        self,
        messages: list[Message],
        result: list[Message],
        before: int,
        after: int,
        current_tokens: int | None,
        reason: str = "",
        error: str | None = None,
        stats: PruneStats | None = None,
    ) -> tuple[list[Message], Feedback]:
        self._trigger.record_pass(before, after)
        noop = bool(reason)
        if not noop:
            self.compression_count += 1
        n, m = len(messages), len(result)
        feedback: Feedback = {
            "noop": noop,
            "message": f"No changes: {reason} ({n} messages)" if noop
            else f"Compressed: {n} → {m} messages",
            "messages_before": n,
            "messages_after": m,
            "tokens_before": before,
            "tokens_after": after,
            "tokens_estimate": f"~{before:,} → ~{after:,} tokens",
            "prompt_tokens": current_tokens,
            "summary": None if noop else ("failed" if error else "written"),
            "error": error,
            "pruned": vars(stats).copy() if stats else None,
            "note": ("The token estimate rose: the summary is longer than the messages it "
                     "replaced." if after > before else None),
        }
        self.last_feedback = feedback
        return result, feedback


def _split_previous(middle: list[Message]) -> tuple[str, list[Message]]:
    """The bodies of earlier summaries in the middle, and the middle's other messages.

    A summary merged into a message gives back that message's own text as a message.
    """
    bodies = []
    fresh = []
    for message in middle:
        if not is_summary(message):
            fresh.append(message)
            continue
        text = text_of(message)
        body = summary_body(text)
        if body:
            bodies.append(body)
        _, original = split_merged(text)
        if original is not None:
            fresh.append(with_content(message, original or None))
    return "\n\n".join(bodies), fresh
