"""Distill one row's tool outputs (§18): the rules of `core.distill` turn by turn, the
row-level ``same_output`` rule, and what each rule saved in tokens.

A tool turn's outputs are its ``<tool_response>`` bodies (Hermes): of a body that is a
JSON object with a string ``content``, that string is the output and the wrapper is kept
byte for byte around it; other bodies are the output themselves, their whitespace kept.
A turn without those tags is one output. Outputs are numbered in row order (every
output of every tool turn); the references of `core.distill_notation` name them so, and
`verify_turns` reads a distilled row back to check it.

A turn whose distilled text counts more tokens than the original keeps the original, so
distilling never grows a turn. A turn's tokens before and after are counted; each rule's
share of the saving is apportioned by the characters it removed.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import json_text
from .distill import ORDER, RowMemory, distill_output
from .distill_notation import OPEN, NotationError, expand
from .terminal_view import terminal_view

_OPEN, _CLOSE = "<tool_response>", "</tool_response>"
CountMany = Callable[[list[str]], list[int]]
CountPairs = Callable[[list[tuple[str, str]]], list[tuple[int, int]]]


@dataclass
class RuleSaving:
    """Tokens of the turns a rule changed, before and after it, and how many turns."""

    tokens_before: int = 0
    tokens_after: int = 0
    turns: int = 0

    def add(self, other: RuleSaving) -> None:
        self.tokens_before += other.tokens_before
        self.tokens_after += other.tokens_after
        self.turns += other.turns


@dataclass
class DistillStats:
    """What distilling did to one row (or, added up, to a run): ``compression_metrics.distill``."""

    level: str
    tokens_before: int = 0  # of the tool turns it changed
    tokens_after: int = 0
    turns: int = 0  # tool turns changed
    rules: dict[str, RuleSaving] = field(default_factory=dict)
    # Why the distilled row did not read back (`verify_turns`): it was written undistilled.
    verify_failed: str | None = None

    @property
    def saved(self) -> int:
        return self.tokens_before - self.tokens_after

    def add(self, other: DistillStats) -> None:
        self.tokens_before += other.tokens_before
        self.tokens_after += other.tokens_after
        self.turns += other.turns
        for name, saving in other.rules.items():
            self.rules.setdefault(name, RuleSaving()).add(saving)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "tokens_before": self.tokens_before,
                "tokens_after": self.tokens_after, "turns": self.turns,
                "rules": {name: {"tokens_before": s.tokens_before,
                                 "tokens_after": s.tokens_after, "turns": s.turns}
                          for name, s in self.rules.items()},
                **({"verify_failed": self.verify_failed} if self.verify_failed else {})}

    @classmethod
    def from_dict(cls, data: Any) -> DistillStats | None:
        if not isinstance(data, dict) or not isinstance(data.get("level"), str):
            return None
        rules = data.get("rules")
        if not isinstance(rules, dict):
            rules = {}
        failed = data.get("verify_failed")
        return cls(data["level"], int(data.get("tokens_before", 0)),
                   int(data.get("tokens_after", 0)), int(data.get("turns", 0)),
                   {str(k): RuleSaving(int(v.get("tokens_before", 0)),
                                       int(v.get("tokens_after", 0)), int(v.get("turns", 0)))
                    for k, v in rules.items() if isinstance(v, dict)},
                   failed if isinstance(failed, str) else None)


class _Output:
    """One tool output inside a turn: its text and how it is written back."""

    def __init__(self, text: str, encode: Callable[[str], str]) -> None:
        self.text = text
        self.encode = encode


def _pieces(text: str) -> list[str | _Output]:
    """``text`` as literal pieces and outputs (see the module docstring)."""
    if _OPEN not in text:
        return [_Output(text, _same)]
    pieces: list[str | _Output] = []
    pos = search = 0
    # Each opening tag with the first closing one after it (str.find: a lazy `.*?`
    # regex tests for the closing tag at every character of a long output).
    while (start := text.find(_OPEN, search)) >= 0:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            break
        pieces.append(text[pos:start + len(_OPEN)])
        pieces.extend(_body_pieces(text[start + len(_OPEN):end]))
        pos = end
        search = end + len(_CLOSE)
    pieces.append(text[pos:])
    return pieces


def _same(text: str) -> str:
    return text


def _body_pieces(body: str) -> list[str | _Output]:
    stripped = body.strip()
    lead = body[:len(body) - len(body.lstrip())]
    trail = body[len(body.rstrip()):]
    span = _content_span(stripped)
    if span is None:
        return [lead, _Output(stripped, _same), trail]
    start, end, content = span
    lexeme = stripped[start:end]
    ascii_only = lexeme.isascii()
    return [lead + stripped[:start],
            _Output(content, lambda t: _encode(t, lexeme, content, ascii_only)),
            stripped[end:] + trail]


def _encode(text: str, lexeme: str, original: str, ascii_only: bool) -> str:
    if text == original:
        return lexeme  # unchanged: as written
    # The notation's marks are written as themselves: "\\u27ea\\u00d75\\u27eb" would cost
    # a reader (and the count) several tokens per mark.
    return json.dumps(text, ensure_ascii=ascii_only and OPEN not in text)


_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace
# json's C scanners: a string from after its opening quote, and any value.
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_scan_value: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _content_span(body: str) -> tuple[int, int, str] | None:
    """Where the string value of the first top-level ``"content"`` key of the JSON
    object ``body`` is, and that string, or None (also when the value ``json.loads``
    keeps, the last, is not a string)."""
    if not body.startswith("{"):
        return None
    try:
        parsed = json_text.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("content"), str):
        return None
    # A valid object: its top-level pairs are walked with json's scanners, each value
    # skipped in one call (a walk character by character cost more than the parse).
    pos = _skip_space(body, 1)
    while body[pos] == '"':
        key, pos = _scan_string(body, pos + 1)
        pos = _skip_space(body, _skip_space(body, pos) + 1)  # past the colon
        start = pos
        if body[pos] == '"':
            value, pos = _scan_string(body, pos + 1)
            if key == "content":
                return start, pos, value
        else:
            pos = _scan_value(body, pos)[1]
        pos = _skip_space(body, pos)
        if body[pos] == ",":
            pos = _skip_space(body, pos + 1)
    return None


def _skip_space(body: str, pos: int) -> int:
    match = _WS.match(body, pos)
    return pos if match is None else match.end()


def _join(pieces: list[str | _Output]) -> str:
    return "".join(p if isinstance(p, str) else p.encode(p.text) for p in pieces)


def outputs_of(text: str) -> list[str]:
    """The outputs of one tool turn's text, in order (see the module's docstring): the
    ``content`` string of each Hermes ``<tool_response>`` JSON body, a body that is not
    such JSON, or the whole text when it has no such tags."""
    return [p.text for p in _pieces(text) if isinstance(p, _Output)]


def with_outputs(text: str, outputs: Sequence[str | None]) -> str:
    """``text`` with its `outputs_of` replaced in order (None: kept as it is), every
    wrapper around them kept byte for byte and a JSON ``content`` string re-encoded."""
    pieces = _pieces(text)
    found = [p for p in pieces if isinstance(p, _Output)]
    for output, new in zip(found, outputs, strict=True):
        if new is not None:
            output.text = new
    return _join(pieces)


def distill_turns(texts: Sequence[str | None], level: str, count_many: CountMany,
                  count_pairs: CountPairs | None = None,
                  ) -> tuple[list[str | None], DistillStats]:
    """``texts`` (None: not a tool turn, left alone) distilled at ``level``, and what
    each rule saved in tokens (counted with ``count_many``; a changed turn's counts
    before and after with ``count_pairs`` when given, e.g. `TokenCounter.count_pairs`,
    which counts the original from the distilled text's count and their differences)."""
    stats = DistillStats(level)
    out: list[str | None] = list(texts)
    if level == "off":
        return out, stats
    # Per turn: its stages, (rule, turn text after the rule), in order.
    stages: dict[int, list[tuple[str, str]]] = {}
    memory = RowMemory()
    for i, text in enumerate(texts):
        if text is None:
            continue
        pieces = _pieces(text)
        outputs = [p for p in pieces if isinstance(p, _Output)]
        per_output = [dict(distill_output(o.text, level, memory)) for o in outputs]
        if not any(per_output):
            continue
        turn_stages: list[tuple[str, str]] = []
        for rule in ORDER:
            changed = False
            for output, done in zip(outputs, per_output, strict=True):
                if rule in done:
                    output.text, changed = done[rule], True
            if changed:
                turn_stages.append((rule, _join(pieces)))
        stages[i] = turn_stages
    if not stages:
        return out, stats
    order = sorted(stages)
    # Two counts per changed turn (before, after): counting every intermediate stage cost
    # more than counting the row itself. Each rule gets a share of the turn's saving in
    # proportion to the characters it removed (`_shares`).
    pairs = [(texts[i] or "", stages[i][-1][1]) for i in order]
    if count_pairs is None:
        flat = count_many([text for pair in pairs for text in pair])
        counted = list(zip(flat[::2], flat[1::2], strict=True))
    else:
        counted = count_pairs(pairs)
    for i, (before, after) in zip(order, counted, strict=True):
        if after > before and _reads_as_itself(texts[i] or ""):
            continue  # it would grow: the turn stays as it was
        out[i] = stages[i][-1][1]
        stats.turns += 1
        stats.tokens_before += before
        stats.tokens_after += after
        lengths = [len(texts[i] or ""), *(len(text) for _, text in stages[i])]
        removed = [max(a - b, 0) for a, b in itertools.pairwise(lengths)]
        previous = before
        for (rule, _), share in zip(stages[i], _shares(before - after, removed), strict=True):
            stats.rules.setdefault(rule, RuleSaving()).add(
                RuleSaving(previous, previous - share, 1))
            previous -= share
    return out, stats


def _reads_as_itself(text: str) -> bool:
    """Whether a turn left as it was reads back as its terminal view: not when a line of
    it looks like notation (its distilled form escapes that line, so it is kept)."""
    if OPEN not in text:
        return True
    for output in tool_outputs([text]):
        try:
            if expand(output) != terminal_view(output):
                return False
        except NotationError:
            return False
    return True


def tool_outputs(texts: Sequence[str | None]) -> list[str]:
    """The tool outputs of a row's turns (None: not a tool turn), in row order: the
    numbering references use."""
    return [p.text for text in texts if text is not None
            for p in _pieces(text) if isinstance(p, _Output)]


def verify_turns(originals: Sequence[str | None],
                 distilled: Sequence[str | None]) -> str | None:
    """Why the distilled turns do not read back (`expand`) as what a terminal showed for
    the originals (`terminal_view`), or None when every output does."""
    before, after = tool_outputs(originals), tool_outputs(distilled)
    if len(before) != len(after):
        return f"{len(after)} tool outputs where there were {len(before)}"
    expanded: list[str] = []
    for number, (original, text) in enumerate(zip(before, after, strict=True), 1):
        try:
            shown = expand(text, expanded)
        except NotationError as exc:
            return f"tool output #{number} does not read back: {exc}"
        expanded.append(shown)
        if shown != terminal_view(original):
            return f"tool output #{number} reads back other than the terminal showed it"
    return None


def _shares(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders), summing to it."""
    weight = sum(weights)
    if weight <= 0:
        return [total] + [0] * (len(weights) - 1)
    shares = [total * w // weight for w in weights]
    rest = total - sum(shares)
    by_remainder = sorted(range(len(weights)), key=lambda k: -(total * weights[k] % weight))
    for k in by_remainder[:rest]:
        shares[k] += 1
    return shares
