"""What a terminal shows for a stream of output bytes (§18): `terminal_view`.

A small VT100-style line renderer, applied in terminal order, one line at a time:

- printable characters are written at the cursor, over what is there (a tab is one
  character: its width is the viewer's business);
- ``\\r`` moves the cursor to column 0; ``\\b`` one column left (not past 0);
- erase in line: ``ESC[K``/``ESC[0K`` clears from the cursor to the end, ``ESC[1K`` from
  the start to the cursor, ``ESC[2K`` the whole line (the cursor stays where it is);
- cursor to column ``ESC[nG`` (1-based), forward ``ESC[nC``, back ``ESC[nD``;
- every other escape sequence (colours and other SGR, OSC titles and links, DCS
  strings, two-character escapes) and every other control character is dropped;
- ``\\n`` ends the line (as a terminal with ``onlcr`` does: the next starts at column 0);
  ``\\r\\n`` is a line end too.

Cells that were erased and never written again show as spaces inside the line and are
dropped at its end, as a screen shows them. Cursor movement between lines (``ESC[A``)
is not followed: such a sequence is dropped like a colour.

Bare carriage-return line ends (old Mac files) are told from redraws per output: an
output whose every CR is bare, with no line feed after the first (bar one at the very
end), no escape sequence, and segments that do not look like a redraw (a spinner, a
percentage, a line repeated with new counters or grown) is a file, its CRs line ends.
"""

from __future__ import annotations

import itertools
import re

# Every character `terminal_view` may change: C0 controls but tab and line feed, DEL, C1.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PIECE = re.compile(
    r"(?P<text>[^\x00-\x08\x0b-\x1f\x7f-\x9f]+)"
    r"|\x1b\[(?P<params>[0-?]*)[ -/]*(?P<final>[@-~])"  # CSI
    r"|\x9b(?P<params8>[0-?]*)[ -/]*(?P<final8>[@-~])"  # 8-bit CSI
    r"|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC (titles, hyperlinks)
    r"|\x1b[PX^_][^\x1b\n]*(?:\x1b\\)?"  # DCS/SOS/PM/APC strings
    r"|\x1b[ -/]*[0-~]"  # two-character escapes
    r"|(?P<control>[\s\S])"  # any other control character (CR and BS among them)
)
# A line that needs the cell renderer: it moves the cursor back or erases.
_MOVES = re.compile(r"[\r\x08]|(?:\x1b\[|\x9b)[0-9;]*[KGCD]")
_INERT = re.compile(  # what a line without cursor moves loses
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b\n]*(?:\x1b\\)?|\x1b[ -/]*[0-~]|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The controls that neither move the cursor nor end a line, escapes aside.
_SILENT = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9a\x9c-\x9f]")
_DIGITS = re.compile(r"\d+")
_REDRAW_HINT = re.compile(r"%|[█▏▎▍▌▋▊▉░▒▓━─#=>]{3}|\d+/\d+")


def terminal_view(text: str) -> str:
    """``text`` as a VT100-style terminal shows it (see the module docstring)."""
    if not _CONTROL.search(text):
        return text
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if "\r" in text and is_bare_cr_file(text):
        text = text.replace("\r", "\n")
    return "\n".join(_line(line) if _CONTROL.search(line) else line
                     for line in text.split("\n"))


def is_bare_cr_file(text: str) -> bool:
    """Whether ``text`` (CRLF already read as LF) uses bare CRs as line ends: no line
    feed after its first CR but at the very end, no escape sequence, at least two records,
    and no redraw pattern among them."""
    if "\x1b" in text or "\x9b" in text:
        return False
    text = _SILENT.sub("", text)  # a NUL or a bell changes nothing the records show
    first = text.find("\r")
    if first < 0 or "\n" in text[first:].rstrip("\n"):
        return False
    records = [r for r in text[:len(text.rstrip("\n\r"))].split("\r")]
    if len(records) < 2:
        return False
    filled = [r for r in records if r.strip()]
    if not filled or sum(len(r.strip()) <= 2 for r in filled) * 2 > len(filled):
        return False  # a spinner
    if any(_REDRAW_HINT.search(r) for r in filled):
        return False  # a progress bar or a counter
    if len(filled) < 2:
        return False
    # A redraw repeats its line with new counters, or grows it ("Loading..").
    alike = sum(1 for a, b in itertools.pairwise(filled)
                if _DIGITS.sub("0", a) == _DIGITS.sub("0", b) or b.startswith(a))
    return alike * 2 < len(filled) - 1


def _line(line: str) -> str:
    if not _MOVES.search(line):
        return _INERT.sub("", line)
    cells: list[str | None] = []
    col = 0
    for match in _PIECE.finditer(line):
        text = match.group("text")
        if text is not None:
            if col > len(cells):
                cells.extend([None] * (col - len(cells)))
            cells[col:col + len(text)] = text
            col += len(text)
            continue
        final = match.group("final") or match.group("final8")
        if final is not None:
            params = match.group("params") if match.group("final") else match.group("params8")
            col = _csi(cells, col, params, final)
            continue
        control = match.group("control")
        if control == "\r":
            col = 0
        elif control == "\x08":
            col = max(col - 1, 0)
    while cells and cells[-1] is None:
        cells.pop()
    return "".join(" " if c is None else c for c in cells)


def _csi(cells: list[str | None], col: int, params: str, final: str) -> int:
    """The cursor column after the CSI sequence ``params final`` (cells changed in place)."""
    if final not in "KGCD" or not re.fullmatch(r"\d*", params):
        return col  # a colour, a mode, a move between lines: nothing this view shows
    n = int(params) if params else 0
    if final == "K":
        if n == 0:
            del cells[col:]
        elif n == 1:
            for i in range(min(col + 1, len(cells))):
                cells[i] = None
        elif n == 2:
            cells.clear()
        return col
    step = max(n, 1)
    if final == "G":
        return step - 1
    if final == "C":
        return col + step
    return max(col - step, 0)


def strip_inert(text: str) -> str:
    """``text`` without the escapes and controls that change nothing but looks (colours,
    titles, bells): what is left moves the cursor or erases, so `terminal_view` of it is
    `terminal_view` of ``text`` (read with the same tokens), but for an output whose
    escapes marked its bare CRs as redraws (`is_bare_cr_file`)."""
    if not _CONTROL.search(text):
        return text
    return _PIECE.sub(_kept, text)


def _kept(match: re.Match[str]) -> str:
    if match.group("text") is not None or match.group("control") in ("\r", "\x08", "\n"):
        return match.group(0)
    final = match.group("final") or match.group("final8")
    if final is not None and final in "KGCD":
        return match.group(0)
    return ""
