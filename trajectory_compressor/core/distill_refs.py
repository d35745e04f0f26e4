"""References between tool outputs made to hold in the row as written (§18, §19, §20).

Distilling numbers a row's tool outputs in row order and may write one as a reference
to an earlier one (``⟪same as tool output #k above⟫``, ``⟪lines a-b of tool output
#k⟫``, ``⟪file lines a-b as in tool output #k⟫``). The strategy then writes fewer
turns (a summary, a window) or other text (a mask placeholder, an elision), so a number
k may name another output, or none. `resolve_references` rewrites every reference line
of the written tool outputs by one rule:

- the referent is written unchanged (same text as distilled): the reference stays,
  k renumbered to the referent's place among the written row's tool outputs;
- otherwise (summarized away, in another window, masked, elided): the reference line is
  replaced by the text it stands for. A whole-output reference (``same as``) becomes
  the referent's distilled text, its own references resolved by this same rule (a run
  stays one line); a line range becomes the lines it names, read
  (`distill_notation.expand`) against the row's distilled outputs, each written as a
  notation text line (`literal`). (Also a ``same as`` whose referent is a JSON layout,
  which only a whole output may be, unless it is the whole output.)

So every written output that was kept as distilled reads back (`expand_outputs` of the
written row) as the terminal view of its original. Outputs the strategy changed keep
their text; only their reference lines are resolved the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from .conversation import Turn
from .distill_notation import (
    OPEN,
    NotationError,
    expand_line,
    expand_outputs,
    literal,
    reference_of,
)
from .distill_row import outputs_of, with_outputs

_JSON_HEAD = OPEN + "json indent"
_SAME_HEAD = OPEN + "same as"


def tool_text(turn: Turn) -> str | None:
    """A turn's text when it is a tool turn (what distill reads), else None."""
    value = turn.get("value")
    return value if turn.get("from") == "tool" and isinstance(value, str) else None


def resolve_references(source: Sequence[str | None], written: Sequence[str | None],
                       origin: Sequence[int | None]) -> list[str | None]:
    """The ``written`` tool turns' texts (None: not a tool turn) with their references
    resolved (see the module docstring). ``source``: the row's turns as distilled
    (None: not a tool turn); ``origin``: per written turn, the index of the source turn
    it was written from (None: a new turn, such as a summary), in increasing order."""
    out = list(written)
    if not any(text is not None and OPEN in text for text in written):
        return out
    source_outputs = [outputs_of(t) if t is not None else [] for t in source]
    first: list[int] = []  # per source turn: the number of its first output, from 1
    number = 1
    for outputs in source_outputs:
        first.append(number)
        number += len(outputs)
    try:
        distilled = [o for outputs in source_outputs for o in outputs]
        expanded = expand_outputs(distilled)
    except NotationError:
        return out  # not a distilled row: nothing to resolve against
    # Which source outputs are written as they were, and their written numbers.
    renumber: dict[int, int] = {}
    written_outputs: list[list[str]] = []
    position = 0
    for text, at in zip(written, origin, strict=True):
        outputs = outputs_of(text) if text is not None else []
        written_outputs.append(outputs)
        was = source_outputs[at] if at is not None else []
        for k, output in enumerate(outputs):
            if len(was) == len(outputs) and output == was[k]:
                renumber[first[at] + k] = position + k + 1  # type: ignore[index]
        position += len(outputs)
    for i, (text, outputs) in enumerate(zip(written, written_outputs, strict=True)):
        if text is None or origin[i] is None or OPEN not in text:
            continue
        new = [_resolved(output, renumber, expanded, distilled) for output in outputs]
        if new != outputs:
            out[i] = with_outputs(text, new)
    return out


def _resolved(output: str, renumber: dict[int, int], expanded: Sequence[str],
              distilled: Sequence[str]) -> str:
    if OPEN not in output or output.startswith(_JSON_HEAD):
        return output
    lines: list[str] = []
    whole = "\n" not in output
    for line in output.split("\n"):
        found = reference_of(line) if line.startswith(OPEN) else None
        if found is None:
            lines.append(line)
            continue
        k, start, end = found
        if k in renumber:
            lines.append(line[:start] + str(renumber[k]) + line[end:])
        elif (line.startswith(_SAME_HEAD) and 1 <= k <= len(distilled)
              and (whole or not distilled[k - 1].startswith(_JSON_HEAD))):
            lines.append(_resolved(distilled[k - 1], renumber, expanded, distilled))
        else:
            try:
                lines.extend(literal(text) for text in expand_line(line, expanded[:k]))
            except NotationError:
                lines.append(line)
    return "\n".join(lines)
