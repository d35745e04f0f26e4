"""Distill (§18): named rules that shrink one tool output, each lossless under `safe`.

A `safe` output reads back exactly (`core.distill_notation.expand`) as what a terminal
showed for the original (`core.terminal_view`); its rules, in order:

- ``control``: colours, titles and other escapes that change nothing on screen removed;
- ``redraws``: carriage returns, erase-in-line, backspace and cursor-to-column applied
  in terminal order (`terminal_view`): a progress bar is its last state;
- ``same_output``: an output identical to an earlier one of the row (64+ characters)
  as a reference to it;
- ``json``: a JSON document laid out the standard way (``json.dumps(indent=N)``,
  ``JSON.stringify(v, null, N)``) written without whitespace under a header that says
  how to lay it out again; any other layout is left as it is;
- ``file_views``: lines of a file view (``12:`` as an agent's file viewer writes them,
  ``cat -n``, ``nl -ba``) that an earlier output of the row showed, numbers and text the
  same, as a reference with the line range;
- ``blocks``: other runs of 3+ lines an earlier output showed (a directory listing or a
  ``git status`` again) as a reference to those lines;
- ``repeats``: runs of consecutive lines identical or differing only in numbers as one
  line with a count, the numbers that differ listed in order (``⟪×5⟫ Exit status
  {0,0,1,0,0}``);
- ``columns``: 4+ consecutive lines of a table with the same text at the same column
  (``ls -l``'s owner and group) written without it under a note that puts it back.

`all` adds rules that drop information on purpose:

- ``json`` for any layout, then ``table``: a JSON array of objects with the same keys as
  ``{"columns":[...],"rows":[[...],...]}`` (nested arrays too);
- ``blobs``: base64/hex runs of 64+ characters replaced by their length and a hash, but
  never a hex digest of a standard hash length (32/40/64/128) standing as an identifier
  (after ``sha256:``, ``@``, ``://``, in a checksum/digest/id field); the run never
  takes the punctuation around it;
- ``long_lines``: lines over 1,000 characters cut in the middle with a marker.

A rule is kept only where it makes the text shorter; the notation's escapes (a text
line that starts with ``⟪``) come with the first rule that rewrites lines.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import distill_notation as notation
from . import json_text
from .terminal_view import strip_inert, terminal_view

LEVELS = ("off", "safe", "all")
SAFE_RULES = ("control", "redraws", "same_output", "json", "file_views", "blocks",
              "repeats", "columns")
LOSSY_RULES = ("table", "blobs", "long_lines")
RULES = (*SAFE_RULES, *LOSSY_RULES)
SAME_OUTPUT = "same_output"
# Every stage name in the order a row adds them up: "escape" is a text whose only change
# is the notation's escape of its lines that start with "⟪".
ORDER = (*SAFE_RULES, "escape", *LOSSY_RULES)

MIN_SAME = 64  # characters of an output worth a reference
MIN_BLOCK = 3  # lines of a block worth a reference
BLOCK_MARGIN = 24  # characters a block reference must save
RUN_SAVING = 16  # characters a folded run must save, and a quarter of the run
ANCHOR = 4  # shortest line a block may start on
CANDIDATES = 8  # places of one line remembered per row
LONG_LINE = 1000
LONG_LINE_KEEP = 400
MIN_BLOB = 64

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BLOB = re.compile(rf"[A-Za-z0-9+/]{{{MIN_BLOB},}}={{0,2}}")
_HASH_LENGTHS = (32, 40, 64, 128)
_HEX = re.compile(r"[0-9a-fA-F]+")
# What stands before a digest used as a name: an algorithm, '@', a URL scheme, a field.
_ID_BEFORE = re.compile(
    r"(?:(?:sha\d*|md5|blake2\w*|sha3-\d+|xxh\d+)[:-]|@|://"
    r"|(?:checksum|digest|hash|sha\w*|md5|id|ID|Id)[\w-]*[\"']?\s*[:=]\s*[\"']?)$",
    re.IGNORECASE)
_JSON_OPEN = ("{", "[")


@dataclass
class RowMemory:
    """The tool outputs of a row so far, as their terminal views, for the references:
    numbered from 1 in row order."""

    views: list[str] = field(default_factory=list)
    lines: list[list[str]] = field(default_factory=list)
    whole: dict[str, int] = field(default_factory=dict)
    index: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def add(self, view: str, lines: list[str] | None, referable: bool = True) -> int:
        """Remember the next output's view; its number. ``referable``: whether later
        outputs may name it (not when its own text would not read back as itself)."""
        self.views.append(view)
        number = len(self.views)
        if lines is None:
            lines = view.split("\n")
        self.lines.append(lines)
        if not referable:
            return number
        if len(view) >= MIN_SAME:
            self.whole.setdefault(view, number)
        if len(lines) >= MIN_BLOCK:
            index = self.index
            for i, line in enumerate(lines):
                if len(line) >= ANCHOR:
                    places = index.get(line)
                    if places is None:
                        index[line] = [(number, i)]
                    else:
                        places.append((number, i))
                        if len(places) > CANDIDATES:
                            del places[0]
        return number


def distill_output(text: str, level: str, memory: RowMemory | None = None,
                   ) -> list[tuple[str, str]]:
    """``(rule, text after it)`` for each rule of ``level`` that changed ``text``, in
    order; the last text is the distilled output (``text`` itself when the list is
    empty). ``memory``: the row's outputs before (references), updated with this one."""
    if level == "off":
        return []
    memory = memory if memory is not None else RowMemory()
    stages: list[tuple[str, str]] = []
    view = text
    if _CONTROL.search(text):
        inert = strip_inert(text)
        if len(inert) < len(text):
            stages.append(("control", inert))
        view = terminal_view(text)
        if view != inert:
            stages.append(("redraws", view))
    lines = view.split("\n")
    escapes = notation.OPEN in view and any(map(notation.needs_escape, lines))
    try:
        return _view_stages(stages, text, view, lines, level, memory, escapes)
    finally:
        memory.add(view, lines, referable=not escapes)


def _view_stages(stages: list[tuple[str, str]], text: str, view: str, lines: list[str],
                 level: str, memory: RowMemory, escapes: bool) -> list[tuple[str, str]]:
    earlier = memory.whole.get(view)
    if earlier is not None:
        stages.append((SAME_OUTPUT, notation.same_output(earlier)))
        return stages
    if view.startswith(_JSON_OPEN) and ("\n" in view or level == "all"):
        done = _json_stages(view, level)
        if done is not None:
            return stages + done
    stages += _line_stages(lines, memory, escapes)
    if level == "all":
        current = stages[-1][1] if stages else text
        for rule, function in (("blobs", blobs), ("long_lines", long_lines)):
            after = function(current)
            if len(after) < len(current):
                stages.append((rule, after))
                current = after
    return stages


def _json_stages(view: str, level: str) -> list[tuple[str, str]] | None:
    """The stages of a laid-out JSON document, or None when ``view`` is not one."""
    body = view.rstrip()
    compact = notation.compact_json(body)
    if level == "safe":
        if "\n" not in body:
            return None
        second = body.split("\n", 2)[1]
        indent = len(second) - len(second.lstrip(" "))
        if indent and notation.layout_json(compact, indent) == body:
            distilled = notation.json_header(indent) + "\n" + compact + view[len(body):]
            if len(distilled) < len(view):
                return [("json", distilled)]
        return None
    if not _is_json(body):
        return None
    # One line of JSON keeps its spaces: dropping them saves almost nothing.
    stages = [("json", compact)] if "\n" in body and len(compact) < len(view) else []
    current = stages[-1][1] if stages else view
    tabled = table(current)
    if len(tabled) < len(current):
        stages.append(("table", tabled))
    current = stages[-1][1] if stages else view
    after = blobs(current)
    if len(after) < len(current):
        stages.append(("blobs", after))
    return stages


def _is_json(text: str) -> bool:
    try:
        json_text.loads(text)
    except ValueError:
        return False
    return True


# -- lines: references and runs -----------------------------------------------------------


class _Ref:
    """A notation line standing for lines of the output, and the rule that wrote it."""

    __slots__ = ("lines", "rule", "text")

    def __init__(self, rule: str, text: str, lines: list[str]) -> None:
        self.rule, self.text, self.lines = rule, text, lines


def _line_stages(lines: list[str], memory: RowMemory, escapes: bool) -> list[tuple[str, str]]:
    items: list[str | _Ref] = _references(lines, memory) if memory.index else list(lines)
    items = _columns(_runs(items))
    used = {item.rule for item in items if isinstance(item, _Ref)}
    if not used:
        return [("escape", _render(items, set()))] if escapes else []
    stages: list[tuple[str, str]] = []
    active: set[str] = set()
    for rule in ("file_views", "blocks", "repeats", "columns"):
        if rule in used:
            active.add(rule)
            stages.append((rule, _render(items, active)))
    return stages


def _render(items: list[str | _Ref], active: set[str]) -> str:
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(notation.literal(item))
        elif item.rule in active:
            out.append(item.text)
        else:
            out.extend(notation.literal(line) for line in item.lines)
    return "\n".join(out)


def _references(lines: list[str], memory: RowMemory) -> list[str | _Ref]:
    """``lines`` with each run of 3+ lines an earlier output showed as a reference."""
    items: list[str | _Ref] = []
    index, sources = memory.index, memory.lines
    n = len(lines)
    i = 0
    while i < n:
        line = lines[i]
        places = index.get(line) if len(line) >= ANCHOR else None
        best = (0, 0, 0)  # output, start, length
        if places:
            for k, start in places:  # the first showing wins a tie: fewer chains
                source = sources[k - 1]
                m = 1
                while i + m < n and start + m < len(source) and source[start + m] == lines[i + m]:
                    m += 1
                if m > best[2]:
                    best = (k, start, m)
        k, start, m = best
        if m >= MIN_BLOCK:
            numbered = _numbered_part(lines, i, m)
            if numbered is not None:
                # A file view in the block: its header lines as they are, the numbered
                # lines as their own reference (file lines), what follows anew.
                skip, m = numbered
                if skip:
                    items.extend(lines[i:i + skip])
                    i += skip
                    continue
            block = lines[i:i + m]
            ref = _reference(block, k, start, sources[k - 1])
            if len(ref.text) + BLOCK_MARGIN < sum(map(len, block)) + m - 1:
                items.append(ref)
                i += m
                continue
        items.append(line)
        i += 1
    return items


def _numbered_part(lines: list[str], i: int, m: int) -> tuple[int, int] | None:
    """(lines before, numbered lines) of the block ``lines[i:i+m]`` when it holds a run of
    `MIN_BLOCK`+ consecutively numbered lines within its first three, else None."""
    for skip in range(min(3, m)):
        first = notation.line_number(lines[i + skip])
        if first is None:
            continue
        n = 1
        while skip + n < m and notation.line_number(lines[i + skip + n]) == first + n:
            n += 1
        return (skip, n) if n >= MIN_BLOCK else None
    return None


def _reference(block: list[str], k: int, start: int, source: list[str]) -> _Ref:
    first, last = notation.line_number(block[0]), notation.line_number(block[-1])
    if first is not None and last == first + len(block) - 1 \
            and notation.numbered_range(source, first, last) == (start, start + len(block)):
        return _Ref("file_views", notation.file_lines(first, last, k), block)
    return _Ref("blocks", notation.lines_of(start + 1, start + len(block), k), block)


def _runs(items: list[str | _Ref]) -> list[str | _Ref]:
    """Runs of 2+ text lines alike but for numbers as one `notation.run` line each."""
    out: list[str | _Ref] = []
    texts: list[str] = []
    for item in items:
        if isinstance(item, str):
            texts.append(item)
            continue
        out += _fold(texts)
        texts = []
        out.append(item)
    out += _fold(texts)
    return out


MIN_TABLE = 4  # lines of a table worth a column note
MIN_COLUMN = 8  # characters of a constant column worth one
_FIELD = re.compile(r"\S+")


def _columns(items: list[str | _Ref]) -> list[str | _Ref]:
    """Runs of `MIN_TABLE`+ text lines that hold the same text at the same column (space
    before it, space or the end after it) written without it under a
    `notation.column_note`."""
    out: list[str | _Ref] = []
    i, n = 0, len(items)
    while i < n:
        item = items[i]
        if isinstance(item, str) and i + MIN_TABLE <= n and len(item) > MIN_COLUMN:
            span = _shared_span(item, items[i + 1])
            if span is not None:
                a, b = span
                text = item[a:b]
                j = i + 1
                while j < n and isinstance(line := items[j], str) and line[a:b] == text \
                        and (len(line) == b or line[b] == " "):
                    j += 1
                count = j - i
                lines = [str(x) for x in items[i:j]]
                note = notation.column_note(count, text, a)
                if count >= MIN_TABLE and len(note) + 16 < (count - 1) * len(text):
                    body = [notation.literal(line[:a] + line[b:]) for line in lines]
                    out.append(_Ref("columns", "\n".join([note, *body]), lines))
                    i = j
                    continue
        out.append(item)
        i += 1
    return out


def _shared_span(first: str, second: str | _Ref) -> tuple[int, int] | None:
    """The longest run of whole fields (and the spaces between them) ``first`` and
    ``second`` have at the same column, `MIN_COLUMN`+ characters and not at the start."""
    if not isinstance(second, str) or len(second) <= MIN_COLUMN:
        return None
    best: tuple[int, int] | None = None
    start = end = -1
    for match in _FIELD.finditer(first):
        a, b = match.span()
        shared = a > 0 and second[a - 1:b] == first[a - 1:b] and \
            (len(second) == b or second[b:b + 1] == " ")
        if shared and start >= 0 and second[end:a] == first[end:a]:
            end = b  # the run goes on
        elif shared:
            start, end = a - 1, b
        else:
            start = end = -1
            continue
        if end - start >= MIN_COLUMN and (best is None or end - start > best[1] - best[0]):
            best = (start, end)
    if best is None or notation.OPEN in first[best[0]:best[1]] \
            or notation.CLOSE in first[best[0]:best[1]]:
        return None
    return best


def _fold(lines: list[str]) -> list[str | _Ref]:
    if len(lines) < 2:
        return list(lines)
    keys = notation.NUMBER.sub("0", "\n".join(lines)).split("\n")
    if len(set(keys)) == len(keys):
        return list(lines)  # no two lines alike: nothing to fold
    out: list[str | _Ref] = []
    i = 0
    while i < len(lines):
        j = i + 1
        while j < len(lines) and keys[j] == keys[i]:
            j += 1
        if j - i >= 2:
            block = lines[i:j]
            groups = [list(g) for _, g in itertools.groupby(block)]
            # Mostly identical lines in a few groups ("1 of 3" three times, then "2 of
            # 3"): a count per group reads better than one list of every number.
            if len(groups) > 1 and 2 * len(groups) <= len(block):
                for group in groups:
                    out.extend(_folded(group))
            else:
                out.extend(_folded(block))
            i = j
            continue
        out.extend(lines[i:j])
        i = j
    return out


def _folded(block: list[str]) -> list[str | _Ref]:
    if len(block) >= 2:
        folded = notation.run(block)
        size = sum(map(len, block)) + len(block) - 1
        if size - len(folded) >= max(RUN_SAVING, size // 4):
            return [_Ref("repeats", folded, block)]
    return list(block)


# -- the lossy rules of `all` -----------------------------------------------------------


def table(text: str) -> str:
    """JSON arrays of same-keyed objects as ``{"columns": [...], "rows": [...]}``."""
    stripped = text.strip()
    if not stripped.startswith(_JSON_OPEN):
        return text
    try:
        value = json_text.loads(stripped, parse_float=_Raw, parse_int=_Raw,
                           parse_constant=_Raw, object_pairs_hook=_Pairs)
    except ValueError:
        return text
    tabled = _tabled(value)
    return _dump(tabled) if tabled is not value else text


class _Raw(str):
    """A JSON number as written."""


class _Pairs(list[Any]):
    """A JSON object as its (key, value) pairs, duplicates and order kept."""


def _tabled(value: Any) -> Any:
    if isinstance(value, _Pairs):
        items = [(k, _tabled(v)) for k, v in value]
        same = all(a[1] is b[1] for a, b in zip(items, value, strict=True))
        return value if same else _Pairs(items)
    if not isinstance(value, list):
        return value
    items = [_tabled(v) for v in value]
    keys = [tuple(k for k, _ in v) for v in items if isinstance(v, _Pairs)]
    if len(items) >= 2 and len(keys) == len(items) and keys[0] and len(set(keys)) == 1:
        return _Pairs([("columns", list(keys[0])),
                       ("rows", [[v for _, v in row] for row in items])])
    return value if all(a is b for a, b in zip(items, value, strict=True)) else items


def _dump(value: Any) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, _Pairs):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _dump(v)
                              for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def blobs(text: str) -> str:
    """Base64/hex runs of `MIN_BLOB`+ characters as ``[blob N chars sha256:xxxxxxxx]``,
    but for hex digests standing as identifiers; '/' and '+' at a run's ends stay."""
    if len(text) < MIN_BLOB:
        return text
    return _BLOB.sub(lambda m: _blob_marker(m, text), text)


def _blob_marker(match: re.Match[str], text: str) -> str:
    run = match.group(0)
    start, end = match.start(), match.end()
    if end < len(text) and text[end].isalnum():
        return run  # part of a longer word
    lead = len(run) - len(run.lstrip("/+"))
    body = run[lead:]
    tail = len(body) - len(body.rstrip("/+"))
    body = body[:len(body) - tail] if tail else body
    if len(body) < MIN_BLOB or not (re.search(r"\d", body) and re.search(r"[A-Za-z]", body)):
        return run  # a row of dashes or a long word: not a blob
    if len(body) in _HASH_LENGTHS and _HEX.fullmatch(body) \
            and _ID_BEFORE.search(text, max(0, start + lead - 40), start + lead):
        return run  # a digest used as a name (an image id, a checksum)
    digest = hashlib.sha256(body.encode()).hexdigest()[:8]
    after = run[len(run) - tail:] if tail else ""
    return f"{run[:lead]}[blob {len(body)} chars sha256:{digest}]{after}"


def long_lines(text: str) -> str:
    """Lines over `LONG_LINE` characters cut in the middle with a marker."""
    if len(text) <= LONG_LINE:
        return text
    return "\n".join(_cut(line) for line in text.split("\n"))


def _cut(line: str) -> str:
    if len(line) <= LONG_LINE:
        return line
    cut = len(line) - 2 * LONG_LINE_KEEP
    return f"{line[:LONG_LINE_KEEP]}[… {cut} chars cut …]{line[-LONG_LINE_KEEP:]}"


def distill_text(text: str, level: str) -> list[tuple[str, str]]:
    """`distill_output` of ``text`` alone (no earlier outputs to refer to)."""
    return distill_output(text, level)


def distill(text: str, level: str = "safe") -> str:
    """``text`` distilled alone at ``level``."""
    stages = distill_output(text, level)
    return stages[-1][1] if stages else text


RULE_FUNCTIONS: dict[str, Callable[[str], str]] = {
    "table": table, "blobs": blobs, "long_lines": long_lines}


def rules_for(level: str) -> tuple[str, ...]:
    """The rules ``level`` runs, in order."""
    if level == "safe":
        return SAFE_RULES
    if level == "all":
        return RULES
    return ()
