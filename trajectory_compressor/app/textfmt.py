"""Plain-text rendering helpers: 80-column tables, bars, clipped one-line previews.

Everything here returns plain strings (no colour codes), measured in terminal columns
so that wide characters (CJK) and control characters from tool outputs cannot break a
line past the width.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ..core import reasons

WIDTH = 80
ELLIPSIS = "…"

_TAG_ONLY = re.compile(r"</?[A-Za-z_][\w\-]*>")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def short_reason(reason: str) -> str:
    """A short label for a still-over-limit reason or a failure (at most 32 columns)."""
    known = reasons.reason_of(reason)
    if known is not None:
        return known.label
    return clip("failed: " + one_line(reason), 32) if reason else "over the target"


def reason_order(reason: str) -> tuple[int, str]:
    """Sort key: the planner's reasons in a fixed order, then failures alphabetically."""
    known = reasons.reason_of(reason)
    if known in reasons.OVER_LIMIT:
        return reasons.OVER_LIMIT.index(known), ""
    return len(reasons.OVER_LIMIT), reason


def num(n: int | float | None) -> str:
    """``1,234`` for numbers, ``-`` for a missing value."""
    if n is None:
        return "-"
    return f"{n:,}" if isinstance(n, int) else f"{n:,.2f}"


def char_width(ch: str) -> int:
    """Terminal columns taken by one character."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Terminal columns taken by ``text`` (one line)."""
    return sum(char_width(ch) for ch in text)


def one_line(text: str) -> str:
    """``text`` without escape sequences or control characters, whitespace collapsed."""
    text = _ANSI.sub("", text)
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    return " ".join(text.split())


def clip(text: str, width: int, left: bool = False) -> str:
    """``text`` cut to ``width`` columns with an ellipsis (at the start when ``left``)."""
    if display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    kept: list[str] = []
    used = 0
    for ch in reversed(text) if left else text:
        w = char_width(ch)
        if used + w > width - 1:
            break
        kept.append(ch)
        used += w
    return ELLIPSIS + "".join(reversed(kept)) if left else "".join(kept) + ELLIPSIS


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` columns (aligned right when ``right``)."""
    space = " " * max(0, width - display_width(text))
    return space + text if right else text + space


def first_line(text: str) -> str:
    """The first line of ``text`` that says something, as one clean line.

    Lines holding only a markup tag (``<think>``, ``<tool_response>``) are passed over:
    the line after them is the one that tells turns apart.
    """
    fallback = ""
    for line in text.splitlines():
        clean = one_line(line)
        if clean and _TAG_ONLY.fullmatch(clean):
            fallback = fallback or clean
        elif clean:
            return clean
    return fallback


@dataclass(frozen=True)
class Column:
    """One table column: right-aligned numbers, or text that may shrink to fit."""

    header: str
    right: bool = False
    flex: bool = False  # shrinks (clipping its cells) when the table is too wide
    priority: int = 0  # flexible columns with a lower priority shrink first
    clip_left: bool = False
    max_width: int | None = None


def table(columns: Sequence[Column], rows: Sequence[Sequence[str]], indent: int = 2,
          width: int = WIDTH) -> list[str]:
    """Lines of a table with a header row, at most ``width`` columns wide."""
    widths = []
    for i, col in enumerate(columns):
        w = max([display_width(col.header), *(display_width(one_line(r[i])) for r in rows)])
        widths.append(min(w, col.max_width) if col.max_width else w)
    gap = 2
    excess = indent + sum(widths) + gap * (len(columns) - 1) - width
    while excess > 0:
        flexible = [i for i, c in enumerate(columns) if c.flex
                    and widths[i] > max(display_width(c.header), 8)]
        if not flexible:
            break
        first = min(flexible, key=lambda i: (columns[i].priority, -widths[i]))
        widths[first] -= 1
        excess -= 1

    def line(cells: Sequence[str]) -> str:
        parts = []
        for col, w, cell in zip(columns, widths, cells, strict=True):
            text = clip(one_line(cell), w, left=col.clip_left)
            parts.append(pad(text, w, right=col.right))
        return clip((" " * indent + (" " * gap).join(parts)).rstrip(), width)

    return [line([c.header for c in columns]), *(line(r) for r in rows)]


def histogram_lines(edges: Sequence[int], counts: Sequence[int],
                    marks: dict[int, str] | None = None, indent: int = 2,
                    bar_width: int = 30) -> list[str]:
    """One line per bin: its range, a ``#`` bar scaled to the largest bin, the count."""
    labels = [f"{num(edges[i])} - {num(edges[i + 1])}" for i in range(len(counts))]
    label_w = max(display_width(label) for label in labels)
    count_w = max(len(num(c)) for c in counts)
    top = max(counts) or 1
    lines = []
    for i, (label, count) in enumerate(zip(labels, counts, strict=True)):
        bar = "#" * (math.ceil(bar_width * count / top) if count else 0)
        text = f"{' ' * indent}{pad(label, label_w, right=True)} |{pad(bar, bar_width)} " \
               f"{pad(num(count), count_w, right=True)}"
        if marks and i in marks:
            text += "  " + marks[i]
        lines.append(clip(text, WIDTH))
    return lines


def reject_lines(first: Sequence[tuple[str, str]], total: int, rejects_file: str | None,
                 width: int = 80) -> list[str]:
    """Rejected rows for a person, within ``width`` columns: a count, the first ones as
    ``location: reason``, then ``… and N more; see REJECTS_FILE`` (without a file: where
    `compress` lists them). Empty when nothing was rejected.

    Long locations and paths lose their start (the file name and line stay), then long
    reasons their end.
    """
    if total <= 0:
        return []
    lines = [f"Rejected rows: {num(total)}"]
    for where, why in first:
        head = "  " + clip(one_line(where), width // 2, left=True) + ": "
        lines.append(head + clip(one_line(why), width - display_width(head)))
    if total > len(first):
        more = f"  {ELLIPSIS} and {num(total - len(first))} more; "
        if rejects_file is None:
            lines.append(more + "compress lists every one in <output stem>_rejects.jsonl")
        else:
            lines.append(more + "see " + clip(rejects_file, width - display_width(more) - 4,
                                              left=True))
    return lines
