"""An oracle for the planner written from SPEC §3 alone, not from ``core/plan.py``.

It is deliberately shaped unlike a loop over turns: the protected turns are a set built
by comprehension, the region's end is found by bisecting prefix sums, and snapping is a
search for the nearest clean boundary. Where the prose leaves room, the reading chosen
is stated next to the code.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

ROLES = ("system", "human", "gpt", "tool")

SKIP = "under target"
EMPTY = "empty region"
NO_SAVING = "region not larger than the summary"


@dataclass(frozen=True)
class Verdict:
    """The oracle's decision: a region ``[start, end)`` to summarize, or why not."""

    total: int
    start: int | None = None
    end: int | None = None
    region_tokens: int = 0
    reason: str | None = None

    @property
    def compress(self) -> bool:
        return self.reason is None


def protected_indices(
    roles: Sequence[str],
    *,
    first: dict[str, bool],
    last_n: int,
) -> set[int]:
    """§3.3: the first turn of each role whose flag is on, and the last ``last_n`` turns."""
    n = len(roles)
    firsts = {role: roles.index(role) for role in set(roles) if role in ROLES}
    return ({at for role, at in firsts.items() if first.get(role, False)}
            | set(range(max(0, n - last_n), n)))


def middle(roles: Sequence[str], protected: set[int]) -> tuple[int, int]:
    """§3.3: ``[max(head) + 1, min(tail))`` with head = protected below ``n // 2``."""
    n = len(roles)
    head = {i for i in protected if i < n // 2}
    tail = protected - head
    return (max(head, default=-1) + 1, min(tail, default=n))


def clean(roles: Sequence[str], boundary: int) -> bool:
    """A boundary (index of the first turn after the cut) may sit on a non-tool turn or at
    the very end of the trajectory; anywhere else it would separate a tool answer from
    what precedes it."""
    return boundary == len(roles) or roles[boundary] != "tool"


def nearest_clean_ahead(roles: Sequence[str], at: int, limit: int) -> int | None:
    """The first clean boundary in ``[at, limit]`` (``limit`` is the middle's end: taking
    the whole middle is allowed when the turn after it is clean)."""
    return next((b for b in range(at, limit + 1) if clean(roles, b)), None)


def nearest_clean_behind(roles: Sequence[str], at: int, floor: int) -> int | None:
    """The last clean boundary in ``[floor, at)``; the search never leaves the middle."""
    return next((b for b in reversed(range(floor, at)) if clean(roles, b)), None)


def snap(roles: Sequence[str], at: int, floor: int, limit: int) -> int:
    """§3.4: forward to a clean boundary within the middle, else backward (never below
    ``floor``). With no clean boundary either way the region collapses to ``floor``."""
    ahead = nearest_clean_ahead(roles, at, limit)
    if ahead is not None:
        return ahead
    behind = nearest_clean_behind(roles, at, floor)
    return floor if behind is None else behind


def spec_plan(
    roles: Sequence[str],
    tokens: Sequence[int],
    *,
    target_max_tokens: int,
    summary_target_tokens: int,
    protect_first_system: bool = True,
    protect_first_human: bool = True,
    protect_first_gpt: bool = True,
    protect_first_tool: bool = True,
    protect_last_n_turns: int = 4,
) -> Verdict:
    """The region SPEC §3 selects for a trajectory with these roles and per-turn counts."""
    assert len(roles) == len(tokens)
    prefix = [0, *accumulate(tokens)]
    total = prefix[-1]
    if total <= target_max_tokens:  # §3.2
        return Verdict(total, reason=SKIP)

    flags = {"system": protect_first_system, "human": protect_first_human,
             "gpt": protect_first_gpt, "tool": protect_first_tool}
    lo, hi = middle(roles, protected_indices(roles, first=flags, last_n=protect_last_n_turns))
    if lo >= hi:
        return Verdict(total, reason=EMPTY)

    # §3.4: the start moves forward off tool turns. Going backward from the middle's
    # first index would enter the protected head, so "backward" can only mean the floor
    # itself, which leaves nothing to summarize.
    start = nearest_clean_ahead(roles, lo, hi)
    if start is None or start >= hi:
        return Verdict(total, reason=EMPTY)

    # §3.5: the first end whose sum reaches `needed`, else the whole middle; then snapped.
    needed = total - target_max_tokens + summary_target_tokens
    reach = bisect_left(prefix, prefix[start] + needed, lo=start + 1, hi=hi + 1)
    end = snap(roles, min(reach, hi), start, hi)
    region_tokens = prefix[end] - prefix[start]

    # §3.6: empty, or not larger than the summary that would replace it.
    if end <= start:
        return Verdict(total, start, end, region_tokens, EMPTY)
    if region_tokens <= summary_target_tokens:
        return Verdict(total, start, end, region_tokens, NO_SAVING)
    return Verdict(total, start, end, region_tokens)
