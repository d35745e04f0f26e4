"""The second pass for rows still over the target: shorten oversized tool outputs (pure).

With ``over_limit_strategy: elide_tool_outputs`` (§16), a row that one summary could not
bring under the target (a few huge tool outputs outside the region: file dumps, search
results) gets its largest tool outputs outside the protected head and tail shortened,
largest first, each just enough, until the row fits:

- plain text keeps its first and last lines, as many lines after the first and before the
  last as the budget allows, and one marker line between them saying how many tokens
  were left out (``[... 1,234 tokens elided ...]``); a text of fewer than three lines, or
  whose first or last line is very long, is cut the same way inside the text;
- JSON (the whole text, or the lines between a first and a last line that are tags such
  as ``<tool_response>``) stays valid JSON: its longest string values are shortened as
  plain text, then items from the middle of its longest arrays give way to one marker
  string, then, when that is still not enough, whole inner arrays and objects (the
  smallest that is enough, else the largest) become the marker string; the outermost
  object or array always stays, written back with its own indentation.

Counting is the caller's (``count``: texts to token counts, one batch per call), so this
module knows no tokenizer; only tool turns are ever touched, so the pairing of tool calls
and results, and every dialect rule, stay as they were.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import json_text
from .plan import Region

Count = Callable[[list[str]], list[int]]

MIN_TOKENS = 64  # tool outputs shorter than this are left alone
LINE_CHARS = 500  # a first or last line longer than this is cut inside
MIN_STRING_CHARS = 80  # JSON strings shorter than this are left alone
_TRIES = 8  # guesses of a plain cut (two counts each) before it keeps nothing
_ROUNDS = 64  # cuts at most in each JSON stage (strings, arrays, whole containers)
_TAG_LINE = re.compile(r"\s*</?[A-Za-z_][\w\-.:]*>\s*")


@dataclass(frozen=True)
class Elision:
    """One shortened tool output: its turn (index in the row's turns as written) and its
    tokens before and after."""

    turn: int
    tokens_before: int
    tokens_after: int

    def to_dict(self) -> dict[str, int]:
        return {"turn": self.turn, "tokens_before": self.tokens_before,
                "tokens_after": self.tokens_after}


def marker(tokens: int) -> str:
    """The text that stands for ``tokens`` elided tokens."""
    return f"[... {tokens:,} tokens elided ...]"


def eligible_turns(roles: Sequence[str], middle: Region, region: Region | None = None,
                   summary_at: int | None = None) -> list[int]:
    """Indices of the ``tool`` turns outside the protected head and tail.

    ``middle`` is the plan's compressible middle in the original turns; when a summary
    replaced ``region`` (and sits at ``summary_at``), the turns after it moved up.
    """
    end = middle.end
    if region is not None and summary_at is not None:
        end -= region.turns - 1
    return [i for i in range(middle.start, min(end, len(roles)))
            if roles[i] == "tool" and i != summary_at]


def elide_tool_outputs(texts: Sequence[str], eligible: Sequence[int], excess: int,
                       count: Count) -> list[tuple[int, str, Elision]]:
    """``(turn, new text, elision)`` for the outputs to shorten so that about ``excess``
    tokens go: the largest of ``eligible`` first, each cut just enough (to its size minus
    what is still missing). Fewer tokens may go when the outputs cannot give more."""
    if excess <= 0 or not eligible:
        return []
    sizes = count([texts[i] for i in eligible])
    order = sorted(((n, i) for i, n in zip(eligible, sizes, strict=True) if n >= MIN_TOKENS),
                   key=lambda pair: (-pair[0], pair[1]))
    out: list[tuple[int, str, Elision]] = []
    for tokens, i in order:
        if excess <= 0:
            break
        text = shorten(texts[i], tokens, max(tokens - excess, 0), count)
        after = count([text])[0]
        if after >= tokens:
            continue
        out.append((i, text, Elision(i, tokens, after)))
        excess -= tokens - after
    return out


def shorten(text: str, tokens: int, budget: int, count: Count) -> str:
    """``text`` (of ``tokens`` tokens) cut to at most ``budget`` tokens where it can be,
    else as short as the rules allow: see the module's docstring."""
    if tokens <= budget:
        return text
    parts = _json_parts(text)
    if parts is not None:
        return _shorten_json(*parts, budget, count)
    return _shorten_plain(text, tokens, budget, count)


# Plain text

def _shorten_plain(text: str, tokens: int, budget: int, count: Count) -> str:
    lines = text.split("\n")
    if len(lines) >= 3 and len(lines[0]) <= LINE_CHARS and len(lines[-1]) <= LINE_CHARS:
        return _cut(_LineCut(lines), tokens, budget, count)
    return _cut(_CharCut(text), tokens, budget, count)


class _LineCut:
    """Keeps the first and last lines, then whole lines from each end of the rest."""

    def __init__(self, lines: list[str]) -> None:
        self.first, self.mid, self.last = lines[0], lines[1:-1], lines[-1]
        self.chars = sum(len(line) + 1 for line in self.mid)

    def make(self, keep: int) -> tuple[str, Callable[[str], str]]:
        """``(the text removed, the kept text around a given marker)``: whole lines from the
        start within two thirds of ``keep``, then from the end within ``keep``; one must go."""
        a = used = 0
        while a < len(self.mid) and used + len(self.mid[a]) + 1 <= keep * 2 // 3:
            used += len(self.mid[a]) + 1
            a += 1
        b = 0
        while (a + b < len(self.mid)
               and used + len(self.mid[-1 - b]) + 1 <= keep):
            used += len(self.mid[-1 - b]) + 1
            b += 1
        if a + b >= len(self.mid):  # something must go
            a, b = (a - 1, b) if a > b else (a, b - 1)
        head, tail = self.mid[:a], self.mid[len(self.mid) - b:]
        removed = "\n".join(self.mid[a:len(self.mid) - b])

        def with_marker(mark: str) -> str:
            return "\n".join([self.first, *head, mark, *tail, self.last])

        return removed, with_marker


class _CharCut:
    """Keeps characters from each end (two thirds from the start), never all of them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.chars = len(text)

    def make(self, keep: int) -> tuple[str, Callable[[str], str]]:
        keep = max(min(keep, self.chars - 1), 0)
        h = keep * 2 // 3
        t = keep - h
        head, tail = self.text[:h], self.text[self.chars - t:] if t else ""
        removed = self.text[h:self.chars - t]
        sep = "\n" if "\n" in self.text else " "

        def with_marker(mark: str) -> str:
            return sep.join(p for p in (head, mark, tail) if p)

        return removed, with_marker


def _cut(cutter: _LineCut | _CharCut, tokens: int, budget: int, count: Count) -> str:
    """The cut that keeps the most (in characters) within ``budget``: a first guess from
    the text's characters per token, corrected a few times, down to keeping nothing."""
    per_token = max(cutter.chars / max(tokens, 1), 0.1)
    keep = int((budget - 12) * per_token)  # 12: about the marker's own tokens
    candidate = ""
    for _ in range(_TRIES):
        keep = max(keep, 0)
        removed, with_marker = cutter.make(keep)
        candidate = with_marker(marker(count([removed])[0] if removed else 0))
        n = count([candidate])[0]
        if n <= budget or keep == 0:
            return candidate
        keep -= int((n - budget) * per_token * 1.25) + 1
    removed, with_marker = cutter.make(0)
    return with_marker(marker(count([removed])[0] if removed else 0))


# JSON

@dataclass(frozen=True)
class _Style:
    indent: int | None
    separators: tuple[str, str]
    ensure_ascii: bool

    def dump(self, value: Any) -> str:
        return json.dumps(value, indent=self.indent, separators=self.separators,
                          ensure_ascii=self.ensure_ascii)


def _json_parts(text: str) -> tuple[str, Any, str, _Style] | None:
    """``(text before, the parsed value, text after, its style)`` when the text is a JSON
    object or array, alone or between two tag lines; None otherwise."""
    candidates = [(text[:len(text) - len(text.lstrip())], text.strip(),
                   text[len(text.rstrip()):])]
    lines = text.split("\n")
    if (len(lines) >= 3 and _TAG_LINE.fullmatch(lines[0])
            and _TAG_LINE.fullmatch(lines[-1])):
        body = "\n".join(lines[1:-1])
        candidates.append((lines[0] + "\n" + body[:len(body) - len(body.lstrip())],
                           body.strip(), body[len(body.rstrip()):] + "\n" + lines[-1]))
    for before, body, after in candidates:
        if body[:1] not in ("{", "[") or body[-1:] not in ("}", "]"):
            continue
        try:
            value = json_text.loads(body)
        except ValueError:
            continue
        if isinstance(value, (dict, list)):
            return before, value, after, _style_of(body)
    return None


def _style_of(body: str) -> _Style:
    indent = None
    lines = body.split("\n")
    if len(lines) > 1:
        indent = (len(lines[1]) - len(lines[1].lstrip(" "))) or None
    if indent is not None:
        separators = (",", ": ")
    elif '": ' in body or ", " in body:
        separators = (", ", ": ")
    else:
        separators = (",", ":")
    ensure_ascii = body.isascii() and "\\u" in body
    return _Style(indent, separators, ensure_ascii)


def _shorten_json(before: str, value: Any, after: str, style: _Style, budget: int,
                  count: Count) -> str:
    holder = [value]  # the value's parent: the value itself may be cut or replaced

    def render() -> str:
        return before + style.dump(holder[0]) + after

    def written(texts: list[str]) -> list[int]:
        # A string is measured as the JSON holds it: its line breaks and quotes are
        # escaped there and count otherwise than in the bare text, so a cut measured on
        # the bare text misjudged what it saves (and gave up on the longest string).
        return count([style.dump(text)[1:-1] for text in texts])

    current = render()
    n = count([current])[0]
    # A string is always cut from its original (one marker for all that went), less each time.
    cuts: dict[tuple[int, Any], tuple[str, int, int]] = {}  # original, its tokens, budget
    done: set[tuple[int, Any]] = set()
    for _ in range(_ROUNDS):  # the longest strings, each cut by what is still missing
        if n <= budget:
            return current
        strings = [s for s in _strings(holder) if (id(s[0]), s[1]) not in done
                   and (len(s[2]) >= MIN_STRING_CHARS or (id(s[0]), s[1]) in cuts)]
        if not strings:
            break
        parent, key, text = max(strings, key=lambda s: len(s[2]))
        where = (id(parent), key)
        if where not in cuts:
            tokens = written([text])[0]
            cuts[where] = (text, tokens, tokens)
        original, tokens, last = cuts[where]
        allowed = max(last - (n - budget), 0)
        shorter = _shorten_plain(original, tokens, allowed, written)
        cuts[where] = (original, tokens, allowed)
        new, old = written([shorter, text])  # tokens, not characters: what the budget counts
        if allowed == 0 or new >= old:
            done.add(where)
        if new >= old:
            continue
        parent[key] = shorter
        current = render()
        n = count([current])[0]
    # Arrays, likewise, lose a longer run of their original items each time.
    arrays_cut: dict[tuple[int, Any], tuple[list[Any], int]] = {}  # original, chars gone
    for _ in range(_ROUNDS):  # then items from the middle of the longest arrays
        if n <= budget:
            return current
        arrays = [c for c in _containers(holder) if isinstance(c[0][c[1]], list)
                  and (id(c[0]), c[1]) not in done
                  and len(arrays_cut.get((id(c[0]), c[1]), (c[0][c[1]], 0))[0]) >= 3]
        if not arrays:
            break
        parent, key, _ = max(arrays, key=lambda c: len(c[2]))
        where = (id(parent), key)
        items: list[Any] = parent[key]
        all_items, gone = arrays_cut.get(where, (items, 0))
        dumped = style.dump(items)
        per_token = len(dumped) / max(count([dumped])[0], 1)
        gone += int((n - budget) * per_token) + 1  # more than the run in place took
        fewer, gone = _cut_items(all_items, gone, count, style.dump)
        arrays_cut[where] = (all_items, gone)
        if (both := count([style.dump(fewer), dumped]))[0] >= both[1]:  # no token saved yet
            if len(fewer) <= 3:  # and no longer run to try: the first, the marker, the last
                done.add(where)
            continue
        parent[key] = fewer
        current = render()
        n = count([current])[0]
    for _ in range(_ROUNDS):  # then inner arrays and objects whole: the smallest enough
        if n <= budget:
            return current
        containers = list(_containers(holder[0]))
        if not containers:
            break
        missing_chars = (n - budget) * len(current) / max(n, 1)
        enough = [c for c in containers if len(c[2]) >= missing_chars]
        parent, key, dumped = (min(enough, key=lambda c: len(c[2])) if enough
                               else max(containers, key=lambda c: len(c[2])))
        parent[key] = marker(count([dumped])[0])
        current = render()
        n = count([current])[0]
    return current


def _cut_items(items: list[Any], chars: int, count: Count,
               dump: Callable[[Any], str]) -> tuple[list[Any], int]:
    """``items`` with a run from the middle (``chars`` characters or more, an item being its
    ``dump`` plus 2; at least one, never the first or last) as one marker, and its chars."""
    sizes = [len(dump(item)) + 2 for item in items]
    mid = lo = hi = len(items) // 2  # the run is items[lo:hi]
    removed = 0
    while removed < chars:
        up, down = hi < len(items) - 1, lo > 1
        if up and (hi - mid <= mid - lo or not down):
            removed += sizes[hi]
            hi += 1
        elif down:
            lo -= 1
            removed += sizes[lo]
        else:
            break
    if hi == lo:
        hi = lo + 1
    gone = dump(items[lo:hi])
    return [*items[:lo], marker(count([gone])[0]), *items[hi:]], sum(sizes[lo:hi])


def _strings(value: Any) -> Iterator[tuple[Any, Any, str]]:
    """``(parent, key, string)`` for every string value (not keys) inside ``value``."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, str):
            yield value, key, item
        elif isinstance(item, (dict, list)):
            yield from _strings(item)


def _containers(value: Any) -> Iterator[tuple[Any, Any, str]]:
    """``(parent, key, its JSON)`` for every non-empty array and object inside ``value``."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, (dict, list)) and item:
            yield value, key, json.dumps(item, ensure_ascii=False)
            yield from _containers(item)
