"""Distill (§18): named rules that shrink one tool output's text, pure functions of it.

`safe` rules keep every identifier and number a reader of the output ever saw:

- ``control``: ANSI/OSC escape sequences and other control characters removed
  (backspace overstrikes resolved as a terminal shows them);
- ``redraws``: carriage-return redraws (progress bars, spinners) collapsed to the state
  the terminal shows last; CRLF read as a line end;
- ``json``: a JSON output laid out over lines (indented) re-serialized without
  insignificant whitespace, every key, order, string and number kept as written (a
  lexical rewrite, never a parse and dump); JSON on one line, or JSON lines, is left as
  it is: dropping the space after ``:`` and ``,`` saves almost no tokens (0.3% of the
  tool-output tokens of `scripts/bench.py`'s rows) and would rewrite the turn for it;
- ``repeats``: runs of three or more identical lines, or of lines that differ only in
  counters (digits), folded to the first and the last with a count; a near-identical
  run folds only when every item (`core.fidelity`) of the lines dropped is still there.

`all` adds rules that drop information on purpose:

- ``table``: a JSON array of objects with the same keys as ``{"columns":[...],
  "rows":[[...],...]}`` (nested arrays too);
- ``blobs``: base64/hex runs of 64+ characters replaced by their length and a hash;
- ``long_lines``: lines over 1,000 characters cut in the middle with a marker.

Rules run in the order of `RULES`; each is applied only where it makes the text shorter.
The row-level rule (an output identical to an earlier one by reference) and the token
accounting live in `core.distill_row`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

from . import json_text
from .fidelity import measure_fidelity

LEVELS = ("off", "safe", "all")
SAFE_RULES = ("control", "redraws", "json", "repeats")
LOSSY_RULES = ("table", "blobs", "long_lines")
# Run by the row stage after the per-text rules (`core.distill_row`).
SAME_OUTPUT = "same_output"
RULES = (*SAFE_RULES, *LOSSY_RULES, SAME_OUTPUT)

MIN_RUN = 3
LONG_LINE = 1000
LONG_LINE_KEEP = 400
MIN_BLOB = 64

_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (titles, hyperlinks)
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI (colours, cursor moves)
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS/SOS/PM/APC strings
    r"|\x1b[ -/]*[0-~]"  # two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_OVERSTRIKE = re.compile(r"[^\n\x08]\x08")
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
# A string lexeme as `"[^"\\]*(?:\\.[^"\\]*)*"`, not `"(?:[^"\\]|\\.)*"`: the regex engine
# keeps a backtracking state per repetition, one per character there (gigabytes for the
# string of a 60 MB tool output) and one per escape here.
_JSON_LEXEME = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[ \t\n\r]+|[^" \t\n\r]+', re.DOTALL)
_DIGITS = re.compile(r"\d+")
_BLOB = re.compile(rf"(?<![A-Za-z0-9+/=])(?:[A-Za-z0-9+/]{{{MIN_BLOB},}}={{0,2}}"
                   rf"|[0-9a-fA-F]{{{MIN_BLOB},}})(?![A-Za-z0-9+/=])")
_FOLD = "[… {n} {kind} lines …]"


def control(text: str) -> str:
    """Escape sequences and control characters removed (tab, newline and CR kept)."""
    if "\x1b" not in text and not _CONTROLS.search(text):
        return text
    text = _ESCAPES.sub("", text)
    while "\x08" in text:
        resolved = _OVERSTRIKE.sub("", text)
        if resolved == text:
            break
        text = resolved
    return _CONTROLS.sub("", text)


def redraws(text: str) -> str:
    """Each line as a terminal leaves it after its carriage returns."""
    if "\r" not in text:
        return text
    text = text.replace("\r\n", "\n")
    return "\n".join(_final_state(line) if "\r" in line else line
                     for line in text.split("\n"))


def _final_state(line: str) -> str:
    shown = ""
    for segment in line.split("\r"):
        shown = segment + shown[len(segment):]
    return shown


def compact_json(text: str) -> str:
    """A JSON document laid out over lines, without insignificant whitespace; else
    ``text`` (one line of JSON, JSON lines, or not JSON)."""
    stripped = text.strip()
    # A line break inside a JSON document is always between lexemes (a string cannot
    # hold one raw), so its presence is what tells a laid-out document.
    if stripped.startswith(("{", "[")) and "\n" in stripped and _is_json(stripped):
        return _minify(stripped)
    return text


def _is_json(text: str) -> bool:
    try:
        json_text.loads(text)
    except ValueError:
        return False
    return True


def _minify(text: str) -> str:
    # Strings are kept byte for byte (escapes as written); only whitespace between
    # lexemes goes, so every number and key stays exactly as it was.
    return "".join(itertools.filterfalse(str.isspace, _JSON_LEXEME.findall(text)))


def repeats(text: str) -> str:
    """Runs of identical or counter-only-different lines folded to first, count, last."""
    lines = text.split("\n")
    if len(lines) < MIN_RUN:
        return text
    # Each line with its counters as 0 (one pass over the text: no digit is a line break).
    keys = _DIGITS.sub("0", text).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        key = keys[i]
        j = i + 1
        while j < len(lines) and keys[j] == key:
            j += 1
        if j - i >= MIN_RUN and key.strip():
            out.extend(_fold(lines[i:j]))
        else:
            out.extend(lines[i:j])
        i = j
    return "\n".join(out)


def _fold(run: list[str]) -> list[str]:
    if len(run) < MIN_RUN:
        return run
    identical = all(line == run[0] for line in run)
    marker = _FOLD.format(n=len(run) - 2, kind="identical" if identical else "similar")
    folded = [run[0], marker, run[-1]]
    if len(marker) >= sum(len(line) + 1 for line in run[1:-1]):
        return run
    if not identical and not keeps_items("\n".join(run[1:-1]), "\n".join(folded)):
        return run
    return folded


def table(text: str) -> str:
    """JSON arrays of same-keyed objects as ``{"columns": [...], "rows": [...]}``."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
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
    """Base64/hex runs of `MIN_BLOB`+ characters as ``[blob N chars sha256:xxxxxxxx]``."""
    return _BLOB.sub(_blob_marker, text)


def _blob_marker(match: re.Match[str]) -> str:
    blob = match.group(0)
    if not (re.search(r"\d", blob) and re.search(r"[A-Za-z]", blob)):
        return blob  # a row of dashes or a long word: not a blob
    digest = hashlib.sha256(blob.encode()).hexdigest()[:8]
    return f"[blob {len(blob)} chars sha256:{digest}]"


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


RULE_FUNCTIONS: dict[str, Callable[[str], str]] = {
    "control": control, "redraws": redraws, "json": compact_json, "repeats": repeats,
    "table": table, "blobs": blobs, "long_lines": long_lines,
}


def rules_for(level: str) -> tuple[str, ...]:
    """The per-text rules ``level`` runs, in order (`SAME_OUTPUT` is the row stage's)."""
    if level == "safe":
        return SAFE_RULES
    if level == "all":
        return (*SAFE_RULES, *LOSSY_RULES)
    return ()


def distill_text(text: str, level: str) -> list[tuple[str, str]]:
    """``(rule, text after it)`` for each rule of ``level`` that shortened ``text``, in
    order; the last text is the distilled one (``text`` itself when the list is empty)."""
    stages: list[tuple[str, str]] = []
    current = text
    document: bool | None = None  # whether ``current`` is one JSON document, once known
    for rule in rules_for(level):
        if rule == "json":
            # Parsed once here: compacting a document leaves a document, so `repeats`
            # needs no second parse (JSON lines compacted are still not one document).
            document = _looks_json(current)
            after = _minify(current.strip()) if document and "\n" in current.strip() \
                else current
            if len(after) < len(current):
                stages.append((rule, after))
                current = after
            continue
        if rule == "repeats" and (_looks_json(current) if document is None else document):
            continue  # JSON lines are data: folding them would break the document
        if rule == "long_lines" and _looks_json(current):
            continue
        after = RULE_FUNCTIONS[rule](current)
        if len(after) < len(current):
            stages.append((rule, after))
            current = after
    return stages


def _looks_json(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith(("{", "[")) and _is_json(text.strip())


def rendered(text: str) -> str:
    """``text`` as a terminal shows it: what the retention check holds a turn to."""
    return redraws(control(text))


def keeps_items(original: str, distilled: str, chunk_lines: int = 20) -> bool:
    """Whether every item (`core.fidelity`) of ``original`` occurs in ``distilled``
    (the answer of `missing_items`, found with less work when it is no)."""
    lines = original.split("\n")
    first = lines[0]
    # The first line's items lead its chunk's list (items never span a line break, and
    # without a tool tag nothing joins the line to the next): one of them missing says
    # no at a fraction of the chunk's cost. Most runs of similar lines fail here.
    if len(lines) > 1 and "<tool_call>" not in first and "<tool_response>" not in first \
            and measure_fidelity([first], [], distilled).missing:
        return False
    for start in range(0, len(lines), chunk_lines):
        chunk = "\n".join(lines[start:start + chunk_lines])
        if measure_fidelity([chunk], [], distilled).missing:
            return False
    return True


def missing_items(original: str, distilled: str, chunk_lines: int = 20) -> list[str]:
    """The items of ``original`` that ``distilled`` lacks (checked a few lines at a time:
    the extractor keeps at most `fidelity.MAX_ITEMS` items per call)."""
    lines = original.split("\n")
    missing: list[str] = []
    for start in range(0, len(lines), chunk_lines):
        chunk = "\n".join(lines[start:start + chunk_lines])
        missing.extend(measure_fidelity([chunk], [], distilled).missing)
    return missing
