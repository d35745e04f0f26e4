"""The summarizer interface, the summary request, and the rules every summary follows (§4)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .conversation import SUMMARY_PREFIX, Turn
from .redact import Scrubber, redact

if TYPE_CHECKING:
    from .deadline import Deadline

LONG_TURN_CHARS = 3000
KEEP_HEAD_CHARS = 1500
KEEP_TAIL_CHARS = 500
# A token of the tokenizers this package counts with rarely spans more characters than
# this; used only to look at a bounded prefix of a runaway reply instead of all of it.
MAX_CHARS_PER_TOKEN = 16
DEFAULT_SUMMARY_TOLERANCE = 2.0


@dataclass
class SummaryUsage:
    """What obtaining one summary cost, filled in as the attempts go (so that a row cut
    by its deadline still reports the requests it made)."""

    api_calls: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)

    def failed(self, kind: str) -> None:
        """Count one failed attempt of ``kind``."""
        self.errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1

    def add(self, other: SummaryUsage) -> None:
        """Add ``other``'s counts to these."""
        self.api_calls += other.api_calls
        self.errors += other.errors
        self.retries += other.retries
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        for kind, n in other.errors_by_kind.items():
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {"api_calls": self.api_calls, "errors": self.errors, "retries": self.retries,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "errors_by_kind": dict(self.errors_by_kind)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SummaryUsage:
        """Inverse of `to_dict`; missing or malformed counts read as 0."""
        def count(value: Any) -> int:
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        kinds = data.get("errors_by_kind")
        return cls(count(data.get("api_calls")), count(data.get("errors")),
                   count(data.get("retries")), count(data.get("prompt_tokens")),
                   count(data.get("completion_tokens")),
                   {str(k): count(v) for k, v in kinds.items()} if isinstance(kinds, dict)
                   else {})


@dataclass(frozen=True)
class Repair:
    """A second request for a summary that dropped facts (§15) or invented some (issue
    23): the first summary's text (without its prefix), the items it lacks, those the
    later turns need first, and the claims it made that the transcript does not."""

    previous: str
    missing: tuple[str, ...]
    invented: tuple[str, ...] = ()


@dataclass(frozen=True)
class SummaryRequest:
    """The region to summarize: its turns, the index of its first turn, the summary size.

    ``region_tokens`` (the turns' token count, when the caller knows it) lets an LLM
    backend bound its input in tokens without tokenizing the region again. A backend
    that queues requests pauses ``deadline`` while this one waits for its turn, and adds
    what each attempt costs to ``usage`` as it goes. ``origin`` names the row within its
    run (a resumed run keeps it): a cached summary that this very row obtained before an
    interruption is reported as it was obtained, not as a cache hit. ``tail_items`` are
    the region's identifiers that the turns after it mention again (a backend may make
    sure to keep them); ``repair``, when set, asks again for a summary that dropped facts.
    """

    turns: Sequence[Turn]
    first_index: int
    target_tokens: int
    region_tokens: int = 0
    deadline: Deadline | None = field(default=None, compare=False)
    usage: SummaryUsage = field(default_factory=SummaryUsage, compare=False)
    origin: str | None = field(default=None, compare=False)
    tail_items: tuple[str, ...] = ()
    repair: Repair | None = None


@dataclass
class Summary:
    """A finished summary turn text (prefixed, redacted) and where it came from;
    ``truncated``: it was cut at a sentence boundary to fit its budget.

    ``commit``, when a backend sets it, stores the summary a row finally keeps for this
    request (its text, and what obtaining it cost) in the backend's cache: under a fidelity bar
    the cache holds accepted summaries only, so a backend defers its write to it.
    """

    text: str
    source: str  # llm, cache, extractive, fallback
    usage: SummaryUsage = field(default_factory=SummaryUsage)
    truncated: bool = False
    commit: Callable[[Summary], None] | None = field(default=None, compare=False, repr=False)


class SummaryFailed(Exception):
    """Every attempt failed; the caller falls back to the extractive summary."""

    def __init__(self, reason: str, usage: SummaryUsage) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage


class Summarizer:
    """A summarizer backend. Use as ``async with``; `summarize` is the one operation."""

    name = "summarizer"
    # Where a backend says what a person should see at once (an endpoint's first failure
    # of each kind); None: the backend's own default (stderr).
    notify: Callable[[str], None] | None = None

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


def finish_summary_text(text: str, scrubber: Scrubber | None = None) -> str:
    """Trim, redact and prefix model or extractive text: ``[CONTEXT SUMMARY]:`` exactly once.

    With ``scrubber``, the run's configured secret values go first (literally), then the
    key-like patterns.
    """
    body = drop_controls(text).strip()
    while body.upper().startswith(SUMMARY_PREFIX.upper()):
        body = body[len(SUMMARY_PREFIX):].lstrip()
    body = neutralize(scrubber(body) if scrubber is not None else redact(body))
    return f"{SUMMARY_PREFIX} {body}" if body else SUMMARY_PREFIX


# Control characters in a summary (issue 36): a terminal escape sequence (ANSI colours,
# cursor moves, OSC titles) goes whole; CR LF becomes LF and a lone CR a line break; every
# other C0 or C1 control and DEL is dropped; line breaks and tabs stay. Bidi marks are
# text (right-to-left scripts need them) and stay; `report --show` spells them out.
_ESCAPE_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
                              r"|\x1b\][^\x07\x1b\n]{0,200}(?:\x07|\x1b\\)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def drop_controls(text: str) -> str:
    """``text`` without control characters, by the rule above (idempotent)."""
    if not _CONTROL.search(text) and "\r" not in text:
        return text
    text = _ESCAPE_SEQUENCE.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


# What a summary must not carry into a training row (§15), whatever a model returned or a
# trajectory contained: the turn markers of the summarizer's own transcript, chat-template
# control tokens (`<|im_start|>`, DeepSeek's `<｜User｜>`, Gemma's `<start_of_turn>`,
# Mistral's `[INST]`), tool-call blocks and the summary prefix. Each is rewritten to read
# the same to a person but no longer parse as the marker: brackets become parentheses.
_TURN_MARKER = re.compile(r"\[\s*turn\s+(\d+)\s*[-–—:]\s*([^\]\n]{1,40}?)\s*\]\s*:?",
                          re.IGNORECASE)
_CONTROL_TOKEN = re.compile(r"<\s*[|｜]([^<>\n]{0,80}?)[|｜]\s*>")
_MARKUP_TAG = re.compile(
    r"<\s*(/?)\s*(tool_call|tool_calls|tool_response|tool_result|tools|think|function|"
    r"parameter|start_of_turn|end_of_turn|start_of_image|bos|eos|pad|unk|s)\b([^<>\n]{0,80})>",
    re.IGNORECASE)
_BRACKET_TOKEN = re.compile(
    r"\[\s*(/?)\s*(INST|SYS|SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS|"
    r"TOOL_CONTENT|THINK)\s*\]", re.IGNORECASE)
_INNER_PREFIX = re.compile(r"\[\s*context\s+summary\s*\]\s*:?", re.IGNORECASE)


def neutralize(body: str) -> str:
    """``body`` with turn markers, control tokens, tool-call tags and summary prefixes
    defused (idempotent; the words stay readable)."""
    body = _TURN_MARKER.sub(lambda m: f"turn {m[1]} ({m[2]}):", body)
    body = _CONTROL_TOKEN.sub(lambda m: f"({m[1]})", body)
    body = _MARKUP_TAG.sub(lambda m: f"({m[1]}{m[2]}{m[3]})", body)
    body = _BRACKET_TOKEN.sub(lambda m: f"({m[1]}{m[2]})", body)
    return _INNER_PREFIX.sub("(context summary):", body)


def summary_body(text: str) -> str:
    """A finished summary's text without its ``[CONTEXT SUMMARY]:`` prefix."""
    body = text.strip()
    if body.upper().startswith(SUMMARY_PREFIX.upper()):
        body = body[len(SUMMARY_PREFIX):]
    return body.strip()


REFERENCES_LABEL = "References:"
# The most of a full summary budget that a references line may take by cutting the text.
REFERENCES_SHARE = 0.25


def add_references(text: str, items: Sequence[str], budget: int,
                   count_tokens: Callable[[str], int]) -> tuple[str, bool]:
    """``(text, cut)``: a finished summary with a last line ``References: a; b; ...`` naming
    as many of ``items`` (in order) as fit, the whole within ``budget`` tokens.

    The line takes the room the summary leaves; a summary within the budget that leaves
    too little is cut at a sentence end to leave a quarter of it (``cut`` is then True),
    unless that names no more items than without cutting. A summary already over the
    budget (within its tolerance) is left as it is. Items are neutralized like any
    summary text (they come from the trajectory).
    """
    items = [neutralize(" ".join(i.split())) for i in items if i.strip()]
    if not items:
        return text, False

    def joined(base: str, k: int) -> str:
        return f"{base}\n{REFERENCES_LABEL} {'; '.join(items[:k])}"

    def most(base: str) -> int:
        lo, hi = 0, len(items)  # token counts grow with the prefix of items
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count_tokens(joined(base, mid)) <= budget:
                lo = mid
            else:
                hi = mid - 1
        return lo

    whole = most(text)
    room = budget - max(int(budget * REFERENCES_SHARE), 1)
    if whole < len(items) and room < count_tokens(text) <= budget:
        cut = bound_summary(text, room, 1.0, count_tokens)
        if cut is not None and not cut[0].upper().endswith(SUMMARY_PREFIX.upper()):
            more = most(cut[0])
            if more > whole:
                return joined(cut[0], more), True
    return (joined(text, whole), False) if whole else (text, False)


# Where a sentence ends: . ! ? … (or their CJK forms), closing quotes or brackets
# allowed, then whitespace or the end; or a line break (lists, paragraphs).
_SENTENCE_END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*(?=\s|$)|\n")
# A cut must keep at least this share of the budget to count as a summary.
MIN_CUT_SHARE = 0.5


def summary_limit(target_tokens: int, tolerance: float) -> int:
    """The most tokens a summary for ``target_tokens`` may have before it is cut."""
    return max(target_tokens, math.floor(target_tokens * tolerance))


def bound_summary(
    text: str, target_tokens: int, tolerance: float, count_tokens: Callable[[str], int]
) -> tuple[str, bool] | None:
    """``(text, False)`` when ``text`` is within ``target_tokens`` x ``tolerance``; else
    ``(cut, True)``, cut at the last sentence boundary that fits ``target_tokens`` (the
    budget the planner counted on), or None when no such cut keeps at least half of the
    budget (one endless sentence, a blob): the caller rejects it.

    Only a bounded prefix of a runaway text is ever tokenized.
    """
    limit = summary_limit(target_tokens, tolerance)
    window = limit * MAX_CHARS_PER_TOKEN
    if len(text) <= window:
        if count_tokens(text) <= limit:
            return text, False
    elif count_tokens(text[:window]) <= limit and count_tokens(text) <= limit:
        return text, False
    head = text[:target_tokens * MAX_CHARS_PER_TOKEN]
    cuts = sorted({m.end() if m.group() != "\n" else m.start()
                   for m in _SENTENCE_END.finditer(head)})
    best: str | None = None
    lo, hi = 0, len(cuts) - 1
    while lo <= hi:  # the longest cut that fits: token counts grow with the prefix
        mid = (lo + hi) // 2
        candidate = head[:cuts[mid]].rstrip()
        if count_tokens(candidate) <= target_tokens:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    if best is None or count_tokens(best) < target_tokens * MIN_CUT_SHARE:
        return None
    return best, True
