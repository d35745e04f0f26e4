"""OpenAI chat messages as the live compressor reads them, and their token estimates.

A message is a plain dict ``{role, content, tool_calls, tool_call_id, ...}``; ``content``
may be a string, ``None`` (an assistant message that only calls tools) or a list of
parts. Extra keys are carried along untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..counting.tokens import TokenCounter

Message = dict[str, Any]
CountTokens = Callable[[str], int]

# Each message costs a few tokens of chat-template framing beyond its text.
MESSAGE_OVERHEAD = 4


def role_of(message: Message) -> str:
    return str(message.get("role", ""))


def text_of(message: Message) -> str:
    """The message's content as text (``None`` is empty; list parts are joined)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def tool_calls_of(message: Message) -> list[dict[str, Any]]:
    """The tool calls of an assistant message (an empty list for any other message)."""
    calls = message.get("tool_calls") if role_of(message) == "assistant" else None
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def call_name(call: dict[str, Any]) -> str:
    function = call.get("function")
    return str(function.get("name", "tool")) if isinstance(function, dict) else "tool"


def call_arguments(call: dict[str, Any]) -> str:
    function = call.get("function")
    args = function.get("arguments", "") if isinstance(function, dict) else ""
    return args if isinstance(args, str) else str(args)


def with_content(message: Message, content: Any) -> Message:
    """A copy of ``message`` with new content."""
    copy = dict(message)
    copy["content"] = content
    return copy


def countable_text(message: Message) -> str:
    """What a message puts in the prompt: its text plus its tool calls' names and arguments."""
    parts = [text_of(message)]
    for call in tool_calls_of(message):
        parts.append(call_name(call))
        parts.append(call_arguments(call))
    return "\n".join(part for part in parts if part)


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: UTF-8 bytes / 4.

    Four bytes per token is the usual rough figure for English; counting bytes rather than
    characters keeps CJK text (3 bytes a character, about one token each) from being
    undercounted fourfold.
    """
    return (len(text.encode("utf-8")) + 3) // 4


class MessageTokens:
    """Token counts of texts and messages from a `TokenCounter`, a callable, or the estimate."""

    def __init__(self, token_counter: TokenCounter | CountTokens | None = None) -> None:
        self._counter = token_counter if isinstance(token_counter, TokenCounter) else None
        self._count: CountTokens = (
            token_counter.count if isinstance(token_counter, TokenCounter)
            else token_counter or estimate_tokens
        )

    def count(self, text: str) -> int:
        return self._count(text)

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        if self._counter is not None:
            return self._counter.count_many(texts)
        return [self._count(text) if text else 0 for text in texts]

    def count_messages(self, messages: Sequence[Message]) -> list[int]:
        """Per-message tokens, framing included, in one batch."""
        counts = self.count_texts([countable_text(m) for m in messages])
        return [n + MESSAGE_OVERHEAD for n in counts]
