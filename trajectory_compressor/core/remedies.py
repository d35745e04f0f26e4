"""What would fix the rows still over the limit: the documented remedies, and the smallest
combination of them that brings the most rows under (pure; issue 25).

A `Remedy` is one documented change of settings with the flag a person passes for it:
protect fewer of the last turns, leave one role's first turn unprotected, the second pass
(`elide_tool_outputs`), a smaller summary, a larger target. Each family of remedies is a
ladder from the mildest change to the strongest (``--protect-last-n-turns 3``, then 2, 1,
0). The search knows nothing of rows or summaries: it asks ``fits(remedies)`` which of the
examined rows the settings with those remedies bring under the target (the caller
re-plans each row, as `compress` would), and keeps what it was told.

- Alone: for each family, the mildest rung that brings as many rows under as any rung of
  it does.
- Together: the fewest families (at most `MAX_COMBINATION`, the larger target left out:
  a context window is seldom the user's to choose) that bring the most rows under, each
  family's rung then relaxed to the mildest that keeps that count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from .config import CompressionConfig
from .plan import compressible_middle

# Families in the order the table lists them (docs/inspect.md, "What would fix it").
PROTECT_LAST = "protect_last"
# The roles whose first turn a config protects (``protect_first_<role>``), in its order.
FIRST_ROLES = tuple(f.name.removeprefix("protect_first_")
                    for f in dataclasses.fields(CompressionConfig)
                    if f.name.startswith("protect_first_"))
ELIDE = "elide"
SUMMARY = "summary"
TARGET = "target"
# §19: a summary for what masking leaves over (mask → hybrid), and fewer tool outputs
# kept from masking (for a config that masks).
STRATEGY = "strategy"
MASK_KEEP = "mask_keep_last"
FAMILIES = (PROTECT_LAST, *(f"first_{r}" for r in FIRST_ROLES), ELIDE, SUMMARY, STRATEGY,
            MASK_KEEP, TARGET)
# Which families a combination tries first, when two of the same size bring as many rows
# under: the ones that lose the least (the second pass cuts tool outputs the summary
# could not take; the first human turn, the task, last).
PREFERENCE = (MASK_KEEP, STRATEGY, ELIDE, SUMMARY, PROTECT_LAST, "first_tool", "first_gpt",
              "first_system", "first_human")
MAX_COMBINATION = 3
# A ladder this long is searched by halves (a target's rungs: one or two per row).
_LINEAR = 8


@dataclass(frozen=True)
class Remedy:
    """One change of settings: its family, the flags that make it, the config fields it
    sets."""

    family: str
    flags: tuple[str, ...]
    changes: tuple[tuple[str, Any], ...]

    @property
    def command(self) -> str:
        """The flags as typed: ``--protect-last-n-turns 2``."""
        return " ".join(self.flags)

    def apply(self, config: CompressionConfig) -> CompressionConfig:
        return dataclasses.replace(config, **dict(self.changes))


def with_remedies(config: CompressionConfig, remedies: Sequence[Remedy]) -> CompressionConfig:
    """``config`` with each of ``remedies`` applied."""
    for remedy in remedies:
        config = remedy.apply(config)
    return config


def ladders(config: CompressionConfig, rows_after: Sequence[int] = (),
            rows_before: Sequence[int] = ()) -> dict[str, list[Remedy]]:
    """Each family's rungs that change ``config``, mildest first; families ``config``
    already has at their strongest are left out. The target's rungs are the examined rows'
    token counts (``rows_after``: as the run leaves them; ``rows_before``: as read) above
    the target: at the largest, every row is under it."""
    out: dict[str, list[Remedy]] = {}
    # Windows (§20) keep no protected tail and take no second pass: those remedies change
    # nothing there.
    windows = config.output_mode == "windows"
    last = config.protect_last_n_turns
    if last > 0 and not windows:
        values = sorted({v for v in (last - 1, last - 2, last // 2, last // 4, 1, 0)
                         if 0 <= v < last}, reverse=True)
        out[PROTECT_LAST] = [Remedy(PROTECT_LAST, ("--protect-last-n-turns", str(v)),
                                    (("protect_last_n_turns", v),)) for v in values]
    for role in FIRST_ROLES:
        if getattr(config, f"protect_first_{role}"):
            out[f"first_{role}"] = [Remedy(f"first_{role}", (f"--no-protect-first-{role}",),
                                           ((f"protect_first_{role}", False),))]
    if config.over_limit_strategy != "elide_tool_outputs" and not windows:
        out[ELIDE] = [Remedy(ELIDE, ("--over-limit-strategy", "elide_tool_outputs"),
                             (("over_limit_strategy", "elide_tool_outputs"),))]
    summary = config.summary_target_tokens
    smaller = sorted({v for v in (summary // 2, summary // 4, summary // 8) if 0 < v < summary},
                     reverse=True)
    if smaller:
        out[SUMMARY] = [Remedy(SUMMARY, ("--summary-target-tokens", str(v)),
                               (("summary_target_tokens", v),)) for v in smaller]
    if config.strategy == "mask":  # summarize → hybrid seldom helps: not offered
        out[STRATEGY] = [Remedy(STRATEGY, ("--strategy", "hybrid"), (("strategy", "hybrid"),))]
    keep = config.mask_keep_last
    if config.strategy != "summarize" and keep > 0:
        values = sorted({v for v in (keep - 1, keep // 2, 1, 0) if 0 <= v < keep}, reverse=True)
        out[MASK_KEEP] = [Remedy(MASK_KEEP, ("--mask-keep-last", str(v)),
                                 (("mask_keep_last", v),)) for v in values]
    larger = sorted({v for v in (*rows_after, *rows_before) if v > config.target_max_tokens})
    if larger:
        out[TARGET] = [Remedy(TARGET, ("--target-max-tokens", str(v)),
                              (("target_max_tokens", v),)) for v in larger]
    return out


def head_alone_over(roles: Sequence[str], turn_tokens: Sequence[int],
                    config: CompressionConfig) -> bool:
    """Whether the turns before the compressible middle (the protected head) hold more
    tokens than the target on their own: then nothing but a smaller head or a larger
    target can bring the row under."""
    middle = compressible_middle(roles, config)
    return sum(turn_tokens[:middle.start]) > config.target_max_tokens


def shrinking_head(roles: Sequence[str], turn_tokens: Sequence[int], config: CompressionConfig,
                   rungs: dict[str, list[Remedy]]) -> list[Remedy]:
    """For a row whose protected head alone is over the target: of each family, the
    mildest rung under which it no longer is (a first turn left unprotected, fewer last
    turns when they reach into the head, a larger target). Only these can help the row;
    a smaller summary or the second pass never can."""
    found = []
    for family in FAMILIES:
        for rung in rungs.get(family, ()):
            if not head_alone_over(roles, turn_tokens, rung.apply(config)):
                found.append(rung)
                break
    return found


@dataclass(frozen=True)
class Entry:
    """Remedies taken together and the examined rows (by index) they bring under."""

    remedies: tuple[Remedy, ...]
    fixed: frozenset[int]

    @property
    def count(self) -> int:
        return len(self.fixed)

    @property
    def command(self) -> str:
        return " ".join(r.command for r in self.remedies)


@dataclass
class Fixes:
    """What would fix the examined rows: each family alone, and the best combination."""

    rows: int  # rows examined
    alone: list[Entry] = field(default_factory=list)  # one per family, in `FAMILIES` order
    best: Entry | None = None  # the fewest families that bring the most rows under
    # Every family together (at its strongest, the target left out); None when there
    # are fewer than two families.
    together: Entry | None = None
    searched: int = 0  # the most families a combination was allowed (`MAX_COMBINATION`)

    @property
    def helping(self) -> list[Entry]:
        """The families that bring at least one row under on their own."""
        return [e for e in self.alone if e.count]

    @property
    def useless(self) -> list[Entry]:
        """The families that bring none under on their own."""
        return [e for e in self.alone if not e.count]

    @property
    def capped(self) -> bool:
        """True when every family together brings more rows under than the best
        combination within `searched` families."""
        return (self.together is not None and self.best is not None
                and self.together.count > self.best.count)


Question = tuple[Remedy, ...]
# A search asks which rows settings with some remedies bring under (it yields the
# remedies, is sent the rows' indices) and returns what it found. Driven by the engine,
# whose re-planning awaits summaries; `what_would_fix` drives it with a plain function.
Search = Generator[Question, frozenset[int], Fixes]


def what_would_fix(rows: int, rungs: dict[str, list[Remedy]],
                   fits: Callable[[Question], frozenset[int]],
                   max_combination: int = MAX_COMBINATION) -> Fixes:
    """`search` answered by ``fits``."""
    running = search(rows, rungs, max_combination)
    try:
        question = next(running)
        while True:
            question = running.send(fits(question))
    except StopIteration as done:
        return done.value


def search(rows: int, rungs: dict[str, list[Remedy]],
           max_combination: int = MAX_COMBINATION) -> Search:
    """Search ``rungs`` (from `ladders`) for the remedies that bring the ``rows`` examined
    rows under (see the module's docstring); each question is asked once."""
    seen: dict[frozenset[Remedy], frozenset[int]] = {}

    def ask(remedies: Question) -> Generator[Question, frozenset[int], frozenset[int]]:
        key = frozenset(remedies)
        if key not in seen:
            seen[key] = (yield remedies) if remedies else frozenset()
        return seen[key]

    fixes = Fixes(rows, searched=max_combination)
    for family in FAMILIES:
        if family in rungs:
            fixes.alone.append((yield from _mildest(rungs[family], ask)))
    families = [f for f in PREFERENCE if f in rungs]
    strongest = {f: rungs[f][-1] for f in families}
    if len(families) > 1:
        every = tuple(strongest[f] for f in families)
        fixes.together = Entry(every, (yield from ask(every)))
    best: Entry | None = None
    for size in range(1, min(max_combination, len(families)) + 1):
        for combo in combinations(families, size):
            remedies = tuple(strongest[f] for f in combo)
            found = yield from ask(remedies)
            if best is None or len(found) > best.count:
                best = Entry(remedies, found)
            if best.count == rows:
                break
        if best is not None and best.count == rows:
            break
    if best is not None and best.count:
        fixes.best = yield from _relaxed(best, rungs, ask)
    return fixes


Ask = Callable[[Question], Generator[Question, frozenset[int], frozenset[int]]]


def _mildest(ladder: list[Remedy], ask: Ask) -> Generator[Question, frozenset[int], Entry]:
    """The mildest rung of ``ladder`` that brings as many rows under as any rung asked."""
    results = {len(ladder) - 1: (yield from ask((ladder[-1],)))}
    if len(ladder) <= _LINEAR:
        for i in range(len(ladder) - 1):
            results[i] = yield from ask((ladder[i],))
    else:  # by halves, for as many rows as the strongest rung brings under
        low, high = 0, len(ladder) - 1
        goal = len(results[high])
        while low < high:
            mid = (low + high) // 2
            results[mid] = yield from ask((ladder[mid],))
            if len(results[mid]) >= goal:
                high = mid
            else:
                low = mid + 1
    most = max(len(found) for found in results.values())
    # None helps: the strongest rung says so best ("even --protect-last-n-turns 0").
    i = (min(i for i, found in results.items() if len(found) == most) if most
         else len(ladder) - 1)
    return Entry((ladder[i],), results[i])


def _relaxed(best: Entry, rungs: dict[str, list[Remedy]],
             ask: Ask) -> Generator[Question, frozenset[int], Entry]:
    """``best`` with each family's rung moved to the mildest that brings no fewer rows
    under, one family at a time in the order of ``best``."""
    remedies = list(best.remedies)
    fixed = best.fixed
    for k, remedy in enumerate(remedies):
        others = tuple(r for j, r in enumerate(remedies) if j != k)
        for rung in rungs[remedy.family]:
            if rung == remedy:
                break
            found = yield from ask((*others, rung))
            if len(found) >= len(fixed):
                remedies[k], fixed = rung, found
                break
    ordered = tuple(sorted(remedies, key=lambda r: FAMILIES.index(r.family)))
    return Entry(ordered, fixed)
