"""The summarizer interface, the summary request, and the rules every summary follows (§4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from .conversation import SUMMARY_PREFIX, Turn
from .redact import redact

if TYPE_CHECKING:
    from .deadline import Deadline

LONG_TURN_CHARS = 3000
KEEP_HEAD_CHARS = 1500
KEEP_TAIL_CHARS = 500


@dataclass(frozen=True)
class SummaryRequest:
    """The region to summarize: its turns, the index of its first turn, the summary size.

    ``region_tokens`` (the turns' token count, when the caller knows it) lets an LLM
    backend bound its input in tokens without tokenizing the region again. A backend
    that queues requests pauses ``deadline`` while this one waits for its turn.
    """

    turns: Sequence[Turn]
    first_index: int
    target_tokens: int
    region_tokens: int = 0
    deadline: Deadline | None = field(default=None, compare=False)


@dataclass
class SummaryUsage:
    """What obtaining one summary cost."""

    api_calls: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Summary:
    """A finished summary turn text (prefixed, redacted) and where it came from."""

    text: str
    source: str  # llm, cache, extractive, fallback
    usage: SummaryUsage = field(default_factory=SummaryUsage)


class SummaryFailed(Exception):
    """Every attempt failed; the caller falls back to the extractive summary."""

    def __init__(self, reason: str, usage: SummaryUsage) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage


class Summarizer:
    """A summarizer backend. Use as ``async with``; `summarize` is the one operation."""

    name = "summarizer"

    async def summarize(self, request: SummaryRequest) -> Summary:
        """A summary of ``request``'s turns; raises `SummaryFailed` when none could be had."""
        raise NotImplementedError

    def live_counters(self) -> dict[str, int]:
        """Counters a progress display may show while a run goes on (e.g. ``api_calls``)."""
        return {}

    async def start(self) -> None:
        """Acquire resources (sessions, servers) for a run."""

    async def aclose(self) -> None:
        """Release what `start` acquired."""

    async def __aenter__(self) -> Summarizer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def elide_middle(text: str, head: int = KEEP_HEAD_CHARS, tail: int = KEEP_TAIL_CHARS) -> str:
    """Keep ``head`` and ``tail`` characters of ``text`` with a marker counting what was cut."""
    if len(text) <= head + tail:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n...[{cut} characters omitted]...\n{text[len(text) - tail:]}"


def render_turns(
    request: SummaryRequest,
    max_chars: int | None = None,
    *,
    long_turn: int = LONG_TURN_CHARS,
    keep_head: int = KEEP_HEAD_CHARS,
    keep_tail: int = KEEP_TAIL_CHARS,
) -> str:
    """The region as ``[Turn i - ROLE]:\\nTEXT`` blocks; long turns and the whole are bounded.

    A turn over ``long_turn`` characters keeps ``keep_head`` and ``keep_tail`` of them.
    """
    parts = []
    for offset, turn in enumerate(request.turns):
        value = turn.get("value", "")
        if len(value) > long_turn:
            value = elide_middle(value, keep_head, keep_tail)
        role = str(turn.get("from", "unknown")).upper()
        parts.append(f"[Turn {request.first_index + offset} - {role}]:\n{value}")
    text = "\n\n".join(parts)
    if max_chars is not None and len(text) > max_chars:
        text = elide_middle(text, max_chars * 3 // 4, max_chars // 4)
    return text


def finish_summary_text(text: str) -> str:
    """Trim, redact and prefix model or extractive text: ``[CONTEXT SUMMARY]:`` exactly once."""
    body = text.strip()
    while body.upper().startswith(SUMMARY_PREFIX.upper()):
        body = body[len(SUMMARY_PREFIX):].lstrip()
    body = redact(body)
    return f"{SUMMARY_PREFIX} {body}" if body else SUMMARY_PREFIX
