"""The distilled notation (§18) and `expand`, which reads it back.

A distilled tool output is its terminal view (`core.terminal_view`) written line by
line; a line that starts with ``⟪`` is notation, every other line is itself:

- ``⟪×N⟫ template``: N consecutive lines. Where they differ (in numbers only), the
  template holds ``{v1,v2,…,vN}``, one value per line; ``\\``, ``{`` and ``}`` of
  the text are written ``\\\\``, ``\\{``, ``\\}``. ``⟪×5⟫ Exit status {0,0,1,0,0}``
  is five lines; ``⟪×4⟫ Waiting for rollout`` four identical ones.
- ``⟪same as tool output #k above⟫``: the whole text of the row's k-th tool output.
- ``⟪lines a-b of tool output #k⟫``: lines a to b (1-based) of that output.
- ``⟪file lines a-b as in tool output #k⟫``: the lines numbered a to b (``a:``,
  ``cat -n``/``nl -ba`` tab) of the file view in that output, numbers included.
- ``⟪next N lines have "text" at column c⟫``: each of the N text lines after it is
  read with ``text`` put back at column c (0-based), as a table's constant column;
- a first line ``⟪json indent N⟫``: the rest is a JSON document written without
  whitespace, to be laid out with N-space indents as ``json.dumps(indent=N)`` and
  ``JSON.stringify(v, null, N)`` do (then any whitespace after it).

A text line that itself starts with ``⟪`` (after any backslashes) is written with one
more backslash in front. Outputs are numbered in row order, every tool output of every
tool turn counted, so a reference is read back within its row (`expand_outputs`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

OPEN, CLOSE = "⟪", "⟫"
# Numbers a template may vary in: digit runs joined by '.' or ':' (versions, clocks).
NUMBER = re.compile(r"\d+(?:[.:]\d+)*")
_NEEDS_ESCAPE = re.compile(r"\\*⟪")
_RUN = re.compile(r"⟪×(\d+)⟫ (.*)", re.DOTALL)
_SAME = re.compile(r"⟪same as tool output #(\d+) above⟫")
_LINES = re.compile(r"⟪lines (\d+)-(\d+) of tool output #(\d+)⟫")
_FILE_LINES = re.compile(r"⟪file lines (\d+)-(\d+) as in tool output #(\d+)⟫")
_JSON = re.compile(r"⟪json indent (\d+)⟫")
_COLUMN = re.compile(r"⟪next (\d+) lines have \"(.*)\" at column (\d+)⟫", re.DOTALL)
_TEMPLATE = re.compile(r"\\(.)|\{([^{}]*)\}|([^\\{}]+)", re.DOTALL)
_NUMBERED = re.compile(r" *(\d+)(?::|\t)")
_JSON_LEXEME = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:,]|[^"{}\[\]:,\s]+|\s+',
                          re.DOTALL)


class NotationError(ValueError):
    """A distilled text that does not read back (a reference to nothing, a bad count)."""


# -- writing -------------------------------------------------------------------------------


def literal(line: str) -> str:
    """``line`` as a text line of the notation."""
    return "\\" + line if _NEEDS_ESCAPE.match(line) else line


def needs_escape(line: str) -> bool:
    """Whether ``line`` is written other than as itself."""
    return _NEEDS_ESCAPE.match(line) is not None


def run(lines: Sequence[str]) -> str:
    """One notation line for ``lines``, which differ only in `NUMBER`s (or not at all)."""
    parts = [NUMBER.split(line) for line in lines]
    values = [NUMBER.findall(line) for line in lines]
    text = parts[0]
    out = [_escape(text[0])]
    for slot in range(len(values[0])):
        column = [v[slot] for v in values]
        if all(v == column[0] for v in column):
            out.append(column[0])
        else:
            out.append("{" + ",".join(column) + "}")
        out.append(_escape(text[slot + 1]))
    return f"{OPEN}×{len(lines)}{CLOSE} " + "".join(out)


def _escape(text: str) -> str:
    if "\\" in text or "{" in text or "}" in text:
        return text.replace("\\", "\\\\").replace("{", "\\{").replace("}", "\\}")
    return text


def same_output(k: int) -> str:
    return f"{OPEN}same as tool output #{k} above{CLOSE}"


def lines_of(first: int, last: int, k: int) -> str:
    """Lines ``first``..``last`` (1-based) of output ``k``."""
    return f"{OPEN}lines {first}-{last} of tool output #{k}{CLOSE}"


def file_lines(first: int, last: int, k: int) -> str:
    """The file view lines numbered ``first``..``last`` in output ``k``."""
    return f"{OPEN}file lines {first}-{last} as in tool output #{k}{CLOSE}"


def column_note(count: int, text: str, column: int) -> str:
    """The next ``count`` lines hold ``text`` at ``column`` (0-based), taken out."""
    return f'{OPEN}next {count} lines have "{text}" at column {column}{CLOSE}'


def json_header(indent: int) -> str:
    return f"{OPEN}json indent {indent}{CLOSE}"


def line_number(line: str) -> int | None:
    """The number a file view writes at the start of ``line`` (``12:``, ``    12\\t``)."""
    match = _NUMBERED.match(line)
    return int(match.group(1)) if match else None


def numbered_range(lines: Sequence[str], first: int, last: int) -> tuple[int, int] | None:
    """Where (start, end) the lines numbered ``first``..``last`` are in ``lines``: the
    first line numbered ``first`` followed by the rest in order, else None."""
    for i, line in enumerate(lines):
        if line_number(line) == first:
            end = i + last - first + 1
            if end <= len(lines) and all(line_number(lines[i + j]) == first + j
                                         for j in range(1, last - first + 1)):
                return i, end
            return None
    return None


def layout_json(compact: str, indent: int) -> str:
    """``compact`` (JSON without whitespace) laid out as ``json.dumps(indent=indent)``."""
    out: list[str] = []
    depth = 0
    pad = " " * indent
    lexemes = [x for x in _JSON_LEXEME.findall(compact) if not x.isspace()]
    for i, lexeme in enumerate(lexemes):
        if lexeme in "{[":
            if i + 1 < len(lexemes) and lexemes[i + 1] in "}]":
                out.append(lexeme)
                continue
            depth += 1
            out.append(lexeme + "\n" + pad * depth)
        elif lexeme in "}]":
            if i > 0 and lexemes[i - 1] in "{[":
                out.append(lexeme)
                continue
            depth -= 1
            out.append("\n" + pad * depth + lexeme)
        elif lexeme == ",":
            out.append(",\n" + pad * depth)
        elif lexeme == ":":
            out.append(": ")
        else:
            out.append(lexeme)
    return "".join(out)


def compact_json(text: str) -> str:
    """``text`` (a JSON document) without whitespace between lexemes, strings as written."""
    return "".join(x for x in _JSON_LEXEME.findall(text) if not x.isspace())


# -- reading -------------------------------------------------------------------------------


def expand(distilled: str, earlier: Sequence[str] = ()) -> str:
    """The terminal view a distilled output stands for; ``earlier``: the row's tool
    outputs before it, expanded (references name them by number, from 1). A text no
    rule rewrote reads as its own terminal view."""
    from .terminal_view import terminal_view

    text = terminal_view(distilled)
    if OPEN not in text:
        return text
    if text.startswith(OPEN + "json indent"):
        head, _, rest = text.partition("\n")
        match = _JSON.fullmatch(head)
        if match:
            body = rest.rstrip()
            return layout_json(body, int(match.group(1))) + rest[len(body):]
    out: list[str] = []
    column: tuple[int, str, int] | None = None  # lines left, text, where
    for line in text.split("\n"):
        if not line.startswith(OPEN):
            if line.startswith("\\") and _NEEDS_ESCAPE.match(line):
                line = line[1:]
            if column is not None:
                left, put, at = column
                line = line[:at] + put + line[at:]
                column = (left - 1, put, at) if left > 1 else None
            out.append(line)
            continue
        if column is not None:
            raise NotationError("a column note over a notation line")
        match = _COLUMN.fullmatch(line)
        if match:
            column = (int(match.group(1)), match.group(2), int(match.group(3)))
            continue
        out.extend(_expand_line(line, earlier))
    if column is not None:
        raise NotationError(f"a column note for {column[0]} more lines than there are")
    return "\n".join(out)


def reference_of(line: str) -> tuple[int, int, int] | None:
    """``(k, start, end)`` when ``line`` is a reference to tool output #k (``same as``,
    ``lines of``, ``file lines``), k's digits at ``line[start:end]``; else None."""
    for pattern in (_SAME, _LINES, _FILE_LINES):
        match = pattern.fullmatch(line)
        if match:
            last = match.lastindex or 1
            return int(match.group(last)), match.start(last), match.end(last)
    return None


def expand_line(line: str, earlier: Sequence[str]) -> list[str]:
    """The text lines one notation line (not a column note) stands for; ``earlier`` as
    for `expand`."""
    return _expand_line(line, earlier)


def _expand_line(line: str, earlier: Sequence[str]) -> list[str]:
    match = _RUN.fullmatch(line)
    if match:
        return _expand_run(int(match.group(1)), match.group(2))
    match = _SAME.fullmatch(line)
    if match:
        return _output(earlier, int(match.group(1))).split("\n")
    match = _LINES.fullmatch(line)
    if match:
        first, last, k = (int(g) for g in match.groups())
        lines = _output(earlier, k).split("\n")
        if not 1 <= first <= last <= len(lines):
            raise NotationError(f"tool output #{k} has no lines {first}-{last}")
        return lines[first - 1:last]
    match = _FILE_LINES.fullmatch(line)
    if match:
        first, last, k = (int(g) for g in match.groups())
        lines = _output(earlier, k).split("\n")
        span = numbered_range(lines, first, last)
        if span is None:
            raise NotationError(f"tool output #{k} has no file lines {first}-{last}")
        return lines[span[0]:span[1]]
    raise NotationError(f"not a notation line: {line[:80]!r}")


def _output(earlier: Sequence[str], k: int) -> str:
    if not 1 <= k <= len(earlier):
        raise NotationError(f"no tool output #{k} before this one")
    return earlier[k - 1]


def _expand_run(count: int, template: str) -> list[str]:
    pieces: list[str | list[str]] = []
    for match in _TEMPLATE.finditer(template):
        escaped, slot, text = match.groups()
        if slot is not None:
            values = slot.split(",")
            if len(values) != count:
                raise NotationError(f"{len(values)} values for {count} lines")
            pieces.append(values)
        else:
            pieces.append(escaped if escaped is not None else text)
    return ["".join(p if isinstance(p, str) else p[i] for p in pieces) for i in range(count)]


def expand_outputs(distilled: Sequence[str]) -> list[str]:
    """Every output of a row read back, in order (each may name the ones before)."""
    done: list[str] = []
    for text in distilled:
        done.append(expand(text, done))
    return done
