"""The planner: which turns of a trajectory to replace with a summary (pure, §3).

Region selection follows the reference implementation turn for turn: protect the first
system/human/gpt/tool turns and the last N, split protected indices into head and tail at
``n // 2``, snap the region's start and end off ``tool`` turns (forward first), and take
just enough middle turns to cover the overage plus the summary that replaces them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import reasons
from .config import CompressionConfig
from .distill_row import DistillStats

# ``mask``: tool outputs were masked (`core.mask`) and the row fits without a summary.
Action = Literal["skip", "compress", "over_limit", "mask"]

# Why a row over the target gets no summary, or stays over after one.
HEAD_ALONE = reasons.HEAD_ALONE.text
NO_MIDDLE = reasons.NO_MIDDLE.text
SMALL_REGION = reasons.SMALL_REGION.text
NO_CLEAN_CUT = reasons.NO_CLEAN_CUT.text
PROTECTED_HEAD = reasons.PROTECTED_HEAD.text
PROTECTED_TAIL = reasons.PROTECTED_TAIL.text
MIDDLE_EXHAUSTED = reasons.MIDDLE_EXHAUSTED.text


@dataclass(frozen=True)
class Region:
    """Turns ``[start, end)`` to be replaced by one summary turn."""

    start: int
    end: int

    @property
    def turns(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Plan:
    """The planner's decision for one trajectory."""

    action: Action
    total_tokens: int
    middle: Region  # the compressible middle before snapping
    region: Region | None = None
    region_tokens: int = 0
    reason: str = ""
    # The numbers behind a reason (`core.explain`): tokens before and after the middle
    # (the protected head and tail), and the budgets the plan was made for.
    head_tokens: int = 0
    tail_tokens: int = 0
    target: int = 0
    summary_target: int = 0
    # What distilling did to the row's tool outputs before it was planned (§18).
    distill: DistillStats | None = None
    # `output.mode: windows` (§20): the `core.windows.Window`s the row becomes (None: one
    # row); typed loosely so that this module need not import the one that plans them.
    windows: tuple[Any, ...] | None = None
    # The tool outputs masked before the plan (§19, `core.mask`): the counts above are of
    # the masked row, which every result of this plan is written from.
    # A `core.mask.Masking`, typed loosely: that module plans with `Region` from this one.
    mask: Any = None
    # Tokens of the row's assistant turns, and of those inside ``region`` (§19).
    assistant_tokens: int = 0
    region_assistant_tokens: int = 0

    @property
    def input_tokens(self) -> int:
        """Tokens of the row as planned before masking (``total_tokens`` with what the
        placeholders saved)."""
        return self.total_tokens + (self.mask.saved if self.mask is not None else 0)

    @property
    def assistant_kept(self) -> float:
        """The share of the row's assistant tokens a summary of ``region`` keeps."""
        if self.region is None or not self.assistant_tokens:
            return 1.0
        return (self.assistant_tokens - self.region_assistant_tokens) / self.assistant_tokens

    @property
    def middle_tokens(self) -> int:
        return self.total_tokens - self.head_tokens - self.tail_tokens

    def projected_tokens(self, summary_tokens: int) -> int:
        """Tokens after compression if the summary has ``summary_tokens`` tokens."""
        if self.region is None:
            return self.total_tokens
        return self.total_tokens - self.region_tokens + summary_tokens


def protected_indices(roles: Sequence[str], config: CompressionConfig) -> set[int]:
    """Indices of the protected turns: the first of each enabled role and the last N."""
    n = len(roles)
    first_seen: dict[str, int] = {}
    for i, role in enumerate(roles):
        first_seen.setdefault(role, i)
    enabled = {
        "system": config.protect_first_system,
        "human": config.protect_first_human,
        "gpt": config.protect_first_gpt,
        "tool": config.protect_first_tool,
    }
    protected = {first_seen[role] for role, on in enabled.items() if on and role in first_seen}
    protected.update(range(max(0, n - config.protect_last_n_turns), n))
    return protected


def compressible_middle(roles: Sequence[str], config: CompressionConfig) -> Region:
    """``[max(head) + 1, min(tail))``, with head = protected indices below ``n // 2``."""
    n = len(roles)
    protected = protected_indices(roles, config)
    head = [i for i in protected if i < n // 2]
    tail = [i for i in protected if i >= n // 2]
    return Region(max(head) + 1 if head else 0, min(tail) if tail else n)


@dataclass(frozen=True)
class Boundaries:
    """Which turns a summarized region may start at and stop before (a dialect's rules).

    ``None`` means any turn but a ``tool`` turn: a boundary on a ``tool`` turn would split
    it from the ``gpt`` turn it answers (the reference's rule, and the default). A dialect
    whose turns must alternate (user side: human, tool; assistant side: gpt) narrows both
    to ``gpt`` turns: the region is then whole assistant/user pairs (agent rows seldom
    have a human turn after the first), and the dialect joins the summary to the
    user-side turn before it. The end of the trajectory is always a clean place to stop.
    """

    start_roles: frozenset[str] | None = None
    end_roles: frozenset[str] | None = None


ANY_BUT_TOOL = Boundaries()
ALTERNATING = Boundaries(frozenset({"gpt"}), frozenset({"gpt"}))


def snap_boundary(roles: Sequence[str], idx: int, low: int, high: int,
                  allowed: frozenset[str] | None = None) -> int:
    """Move ``idx`` to a clean boundary: forward up to ``high``, else backward down to ``low``.

    A clean boundary is the end of the trajectory or a turn whose role is in ``allowed``
    (``None``: any role but ``tool``).
    """
    n = len(roles)

    def clean(i: int) -> bool:
        if i >= n:
            return True
        return roles[i] != "tool" if allowed is None else roles[i] in allowed

    forward = idx
    while forward < high and not clean(forward):
        forward += 1
    if clean(forward):
        return forward
    backward = idx
    while backward > low and not clean(backward):
        backward -= 1
    return backward


def plan_trajectory(
    roles: Sequence[str], turn_tokens: Sequence[int], config: CompressionConfig,
    boundaries: Boundaries = ANY_BUT_TOOL,
) -> Plan:
    """Decide whether and where to compress one trajectory, from its roles and token counts."""
    total = sum(turn_tokens)
    middle = compressible_middle(roles, config)
    head = sum(turn_tokens[:middle.start])
    tail = sum(turn_tokens[middle.end:])

    def made(action: Action, region: Region | None = None, region_tokens: int = 0,
             reason: str = "") -> Plan:
        # A head over the target on its own outweighs whatever else keeps the row over
        # (every plan of such a row has a reason: even its whole middle summarized, head +
        # summary > target), and it is the one a person can act on.
        if reason and head > config.target_max_tokens:
            reason = HEAD_ALONE
        return Plan(action, total, middle, region, region_tokens, reason, head, tail,
                    config.target_max_tokens, config.summary_target_tokens)

    if total <= config.target_max_tokens:
        return made("skip")
    start = snap_boundary(roles, middle.start, middle.start, middle.end, boundaries.start_roles)
    end = middle.end
    if (boundaries.start_roles is not None and start < end
            and roles[start] not in boundaries.start_roles):
        return made("over_limit", reason=NO_CLEAN_CUT)
    if start >= end:
        return made("over_limit", reason=NO_MIDDLE)
    needed = total - config.target_max_tokens + config.summary_target_tokens
    accumulated = 0
    until = start
    for i in range(start, end):
        accumulated += turn_tokens[i]
        until = i + 1
        if accumulated >= needed:
            break
    until = snap_boundary(roles, until, start, end, boundaries.end_roles)
    region_tokens = sum(turn_tokens[start:until])
    if until <= start or region_tokens <= config.summary_target_tokens:
        reason = NO_CLEAN_CUT if until <= start else SMALL_REGION
        return made("over_limit", region_tokens=region_tokens, reason=reason)
    region = Region(start, until)
    plan = made("compress", region, region_tokens)
    if plan.projected_tokens(config.summary_target_tokens) > config.target_max_tokens:
        if head + tail + config.summary_target_tokens > config.target_max_tokens:
            reason = PROTECTED_HEAD if head >= tail else PROTECTED_TAIL
        else:
            reason = MIDDLE_EXHAUSTED
        return made("compress", region, region_tokens, reason)
    return plan
