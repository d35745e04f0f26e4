"""What would fix the rows still over the limit (issue 25): each re-planned under the
documented remedies (`core.remedies`) by the `TrajectoryCompressor` that `compress` runs.

With the extractive summarizer a row under a remedy is compressed for real (summary,
notice, second pass), so "it fits" is what `compress --summarizer extractive` with that
flag would do; for an LLM backend the summary is projected at ``summary_target_tokens``
(`projection`). Planning is cheap (the counts are known); what costs is a summary, and
a row gets one per region and summary size, however many questions share them: the
second pass is then applied to that result under each question's target and middle, as
`compress` applies it after the summary. Rows that cannot fit whatever their summary (the
head alone over the target; over even with the region and every tool output the second
pass may cut gone) are known to stay over without one.

The work is bounded: at most `MAX_ROWS` rows are examined (the first ones over the limit,
in input order), and a combination holds at most `core.remedies.MAX_COMBINATION`
families; the result says when either bound was reached.

One home each: `core.remedies` holds the remedies and searches for the fewest that fix
the most; this module re-plans rows under them (for the table `compress` stores at its
end, `stored_fixes`, hence in `engine`; for `analyze`; for `report` through
`inspect.run_fixes`); `app.fixes` prints the result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..core.elide import eligible_turns
from ..core.mask import Masking
from ..core.plan import Plan, Region
from ..core.remedies import (
    Entry,
    Fixes,
    Question,
    Remedy,
    head_alone_over,
    ladders,
    search,
    shrinking_head,
    with_remedies,
)
from .compressor import RowResult, TrajectoryCompressor
from .projection import CountedRow, elision_fits, outcome

MAX_ROWS = 50


@dataclass
class OverRow:
    """One row still over the limit, as the remedies re-plan it."""

    location: str
    id: Any
    code: str  # why it is over (`core.reasons`)
    tokens_after: int  # as the settings leave it
    counted: CountedRow


@dataclass
class OverRows:
    """The rows a pass found still over the limit: counted all, the first `MAX_ROWS`
    kept for the remedies. Failed rows are counted apart: no remedy is about them."""

    limit: int = field(default_factory=lambda: MAX_ROWS)
    over: int = 0
    failed: int = 0
    rows: list[OverRow] = field(default_factory=list)
    # Rows over the limit that could not be re-planned, with why (`report`: an input gone).
    not_examined: list[tuple[str, str]] = field(default_factory=list)

    def add(self, result: RowResult, counted: CountedRow, location: str, row_id: Any) -> None:
        """Keep ``counted`` when ``result`` (its outcome) leaves it over the limit."""
        metrics = result.metrics
        if not metrics.still_over_limit:
            return
        if metrics.failed:
            self.failed += 1
            return
        why = result.why
        self.keep(OverRow(location, row_id, why.code if why is not None else "",
                          metrics.compressed_tokens, counted))

    def keep(self, row: OverRow) -> None:
        self.over += 1
        if len(self.rows) < self.limit:
            self.rows.append(row)

    def cannot_examine(self, location: str, why: str) -> None:
        self.over += 1
        self.not_examined.append((location, why))


@dataclass
class WhatWouldFix:
    """The remedies for the rows still over the limit under one set of settings."""

    over: OverRows
    fixes: Fixes
    exact: bool  # extractive summaries built; else projected at `summary_target`
    summary_target: int
    target: int
    # For each examined row whose protected head alone is over the target (by index):
    # the only remedies that can help it (`core.remedies.shrinking_head`).
    head_help: dict[int, list[Remedy]] = field(default_factory=dict)

    @property
    def examined(self) -> int:
        return len(self.over.rows)

    @property
    def capped_rows(self) -> bool:
        return self.examined < self.over.over - len(self.over.not_examined)

    @property
    def head_alone(self) -> int:
        """Examined rows whose protected head alone is over the target."""
        return len(self.head_help)

    def head_remedies(self) -> list[str]:
        """The flags that can help some row whose head alone is over the target (the
        larger target aside), in the table's order."""
        flags: dict[str, None] = {}
        for remedies in self.head_help.values():
            flags.update((r.command, None) for r in remedies if r.family != "target")
        return list(flags)

    def fixed_by(self, index: int) -> list[Entry]:
        """The remedies that bring examined row ``index`` under on their own."""
        return [e for e in self.fixes.alone if index in e.fixed]

    def to_dict(self) -> dict[str, Any]:
        """The table for ``--json``: each remedy alone, the best combination, the rows."""

        def entry(e: Entry | None) -> dict[str, Any] | None:
            if e is None:
                return None
            return {"flags": e.command, "families": [r.family for r in e.remedies],
                    "rows_under": e.count}

        fixes = self.fixes
        return {
            "rows_over": self.over.over,
            "rows_examined": self.examined,
            "max_rows": self.over.limit,
            "rows_failed": self.over.failed,
            "exact": self.exact,
            "summary_target_tokens": self.summary_target,
            "target_max_tokens": self.target,
            "protected_head_alone_over_target": self.head_alone,
            "alone": [entry(e) for e in fixes.alone],
            "best": entry(fixes.best),
            "max_combination": fixes.searched,
            "together": entry(fixes.together),
            "rows": [{"location": r.location, "id": r.id, "reason": r.code,
                      "tokens_after": r.tokens_after,
                      "fixed_by": [e.command for e in self.fixed_by(i)],
                      **({"only_these_can_help": [h.command for h in self.head_help[i]]}
                         if i in self.head_help else {})}
                     for i, r in enumerate(self.over.rows)],
            "not_examined": [{"location": where, "why": why}
                             for where, why in self.over.not_examined],
        }


async def find_fixes(compressor: TrajectoryCompressor, over: OverRows, *,
                         exact: bool) -> WhatWouldFix:
    """Search the remedies for ``over``'s rows under ``compressor``'s settings;
    ``compressor`` holds the extractive summarizer (used when ``exact``)."""
    config = compressor.config
    rows = over.rows
    rungs = ladders(config, [r.tokens_after for r in rows], [r.counted.total for r in rows])
    replan = _Replan(compressor, rows, exact)
    running = search(len(rows), rungs)
    try:
        question = next(running)
        while True:
            question = running.send(await replan.fits(question))
    except StopIteration as done:
        fixes = done.value
    head_help = {i: shrinking_head([t["from"] for t in r.counted.turns],
                                   r.counted.turn_tokens, config, rungs)
                 for i, r in enumerate(rows)
                 if head_alone_over([t["from"] for t in r.counted.turns],
                                    r.counted.turn_tokens, config)}
    return WhatWouldFix(over, fixes, exact, config.summary_target_tokens,
                        config.target_max_tokens, head_help)


# What decides whether the second pass brings a row under: its plan's middle and region,
# the summary size (the row as the summary left it) and the target.
_Key = tuple[Region, Region | None, int, int, Masking | None]


class _Replan:
    """Answers the search: which rows settings with some remedies bring under."""

    def __init__(self, compressor: TrajectoryCompressor, rows: list[OverRow],
                 exact: bool) -> None:
        self.base = compressor
        self.rows = rows
        self.exact = exact
        self.first: list[dict[tuple[Region | None, int, Masking | None], RowResult]] = [
            {} for _ in rows]
        self.elided: list[dict[_Key, bool]] = [{} for _ in rows]

    async def fits(self, remedies: Question) -> frozenset[int]:
        compressor = self.base.with_config(with_remedies(self.base.config, remedies))
        fixed = set()
        for i, row in enumerate(self.rows):
            if await self._fits(compressor, i, row.counted):
                fixed.add(i)
        return frozenset(fixed)

    async def _fits(self, compressor: TrajectoryCompressor, i: int, row: CountedRow) -> bool:
        config = compressor.config
        target = config.target_max_tokens
        if row.total <= target:
            return True  # skipped, as it is
        if head_alone_over([t["from"] for t in row.turns], row.turn_tokens, config):
            return False  # whatever happens to the rest, the head alone is over
        plan = compressor.plan(row.turns, row.turn_tokens, row.dialect, row.distilled)
        elide = config.over_limit_strategy == "elide_tool_outputs"
        if plan.windows is None and _cannot_fit(row, plan, target, elide):  # rows mode
            return False
        first = await self._first_pass(compressor, i, row, plan)
        if first.metrics.failed:
            return False  # written as it was: a failure, not a fix
        if first.metrics.compressed_tokens <= target:
            return True
        if not elide:
            return False
        key = (plan.middle, plan.region, config.summary_target_tokens, target, plan.mask)
        known = self.elided[i]
        if key not in known:
            known[key] = elision_fits(compressor, row, plan, first, exact=self.exact)
        return known[key]

    async def _first_pass(self, compressor: TrajectoryCompressor, i: int, row: CountedRow,
                          plan: Plan) -> RowResult:
        """The row under ``plan`` before any second pass: its summary (built, with the
        extractive summarizer) depends on the region and the summary size only, not on
        the target or the middle around the region, so it is made once for them."""
        config = compressor.config
        key = (plan.region, config.summary_target_tokens, plan.mask)
        known = self.first[i]
        if key not in known:
            keep = compressor.with_config(dataclasses.replace(config,
                                                              over_limit_strategy="keep"))
            known[key] = await outcome(keep, row, exact=self.exact, plan=plan)
        return known[key]


def _cannot_fit(row: CountedRow, plan: Plan, target: int, elide: bool) -> bool:
    """True when the row stays over ``target`` under ``plan`` whatever its summary: even
    with the region gone and nothing in its place (and, with the second pass, every tool
    output it may cut gone too). Counted with the row's own per-turn counts, which in
    either counting mode is what removing those turns takes off."""
    # The plan's own total: a masked row's (§19) is less than the row as read.
    total = plan.total_tokens
    left = total - plan.region_tokens if plan.region is not None else total
    if elide:
        roles = [t["from"] for t in row.turns]
        region = plan.region or Region(0, 0)
        left -= sum(row.turn_tokens[i] for i in eligible_turns(roles, plan.middle)
                    if not region.start <= i < region.end)
    return left > target
