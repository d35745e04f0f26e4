""""What would fix it": the remedies for rows still over the limit, as plain text (issue 25).

`analyze` and `report` print the same block from `engine.replan.WhatWouldFix`: each
documented remedy with the flags to pass and how many rows it brings under alone, then the
fewest flags that bring the most under together. Within 80 columns.
"""

from __future__ import annotations

import textwrap

from ..core.counted import counted
from ..engine.replan import WhatWouldFix
from .textfmt import Column, num, table


def fix_lines(w: WhatWouldFix, target_label: bool = False) -> list[str]:
    """The block for ``w``; empty when no row is over the limit. ``target_label``: name
    the target in the title (several targets side by side)."""
    over = w.over
    if not over.over:
        return []
    at = f" at target {num(w.target)}" if target_label else ""
    rows = w.examined
    how = ("extractive summaries: exact" if w.exact
           else f"summaries projected at {num(w.summary_target)} tokens")
    lines = [f"What would fix it{at}: {counted(over.over, 'row')} still over the limit",
             f"  (each re-planned as compress would; {how})"]
    if w.capped_rows:
        lines.append(f"  (the first {num(rows)} of them examined)")
    if over.failed:
        lines.append(f"  ({counted(over.failed, 'failed row')} not among them: no remedy "
                     "is about a failure)")
    for where, why in over.not_examined[:3]:
        lines += _wrapped(f"not examined: {where}: {why}", "  ", "    ")
    if len(over.not_examined) > 3:
        lines.append(f"  ... {num(len(over.not_examined) - 3)} more not examined")
    if not rows:
        return lines
    fixes = w.fixes
    helping = fixes.helping
    if helping:
        lines += table([Column("flags", flex=True), Column("rows brought under", right=True)],
                       [[e.command + (" (if your context allows)"
                                      if e.remedies[0].family == "target" else ""),
                         f"{num(e.count)} of {num(rows)}"] for e in helping])
    useless = fixes.useless
    if useless:
        lines += _units(["no effect alone:", *(e.command + "," for e in useless[:-1]),
                         useless[-1].command], "  ", "    ")
    best = fixes.best
    if best is not None:
        lines.append(f"  together, the fewest flags that bring the most under "
                     f"({num(best.count)} of {num(rows)}):")
        lines += _units([r.command for r in best.remedies], "    ", "      ")
        if fixes.capped and fixes.together is not None:
            lines += _wrapped(f"(no {fixes.searched} of them together bring more; all "
                              f"{len(fixes.together.remedies)} bring "
                              f"{num(fixes.together.count)} under)", "  ", "   ")
    else:
        lines.append("  no change within the target brings any of them under")
    if w.head_alone:
        lines += _wrapped(f"{num(w.head_alone)} of them: the protected head alone is over "
                          f"the target; only {head_help(w)} can help", "  ", "    ")
    return lines


def _units(units: list[str], first: str, rest: str) -> list[str]:
    """``units`` joined by spaces into lines of 80 columns, never splitting one (a flag
    stays with its value, so a line can be copied as it is)."""
    lines: list[str] = []
    line = first
    for unit in units:
        if line.strip() and len(line) + 1 + len(unit) > 80:
            lines.append(line)
            line = rest
        line += ("" if not line.strip() else " ") + unit
    lines.append(line)
    return lines


def _wrapped(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, 80, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=False)


def head_help(w: WhatWouldFix) -> str:
    """``--no-protect-first-tool or a larger target``: what can help the rows whose head
    alone is over the target."""
    return " or ".join([*w.head_remedies(), "a larger target"])
