"""What `--distill safe` and `--distill all` would do to an input (§18), for `analyze`.

Measured on the rows as read (before any distill the run itself is configured with):
the tool outputs' tokens, what each level's rules would save, and how many rows over the
target would then fit without a summary (row total minus what the level saves, per
turn counts).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

from ..core.conversation import Trajectory
from ..core.distill_row import CountMany, DistillStats, distill_turns

LEVELS = ("safe", "all")


@dataclass
class LevelPreview:
    """One level's figures over the input."""

    level: str
    saved: DistillStats = field(init=False)
    rows_no_longer_over: int = 0

    def __post_init__(self) -> None:
        self.saved = DistillStats(self.level)


@dataclass
class DistillPreview:
    """`LevelPreview` of each level, the input's tool tokens and rows over the target."""

    target: int
    tool_tokens: int = 0
    rows_over: int = 0
    levels: dict[str, LevelPreview] = field(
        default_factory=lambda: {level: LevelPreview(level) for level in LEVELS})

    def add(self, turns: Trajectory, total: int, count_many: CountMany) -> None:
        """Fold one row (its turns as read, and its total tokens as read) in."""
        texts = [t["value"] if t["from"] == "tool" and isinstance(t.get("value"), str)
                 else None for t in turns]
        tool = [t for t in texts if t is not None]
        if tool:
            self.tool_tokens += sum(count_many(tool))
        over = total > self.target
        self.rows_over += over
        for level, preview in self.levels.items():
            if not tool:
                continue
            _, stats = distill_turns(texts, level, count_many)
            preview.saved.add(stats)
            if over and total - stats.saved <= self.target:
                preview.rows_no_longer_over += 1

    def to_dict(self) -> dict[str, Any]:
        return {"target_max_tokens": self.target, "tool_tokens": self.tool_tokens,
                "rows_over": self.rows_over,
                **{level: {"tokens_saved": p.saved.saved,
                           "share_of_tool_tokens": round(p.saved.saved
                                                         / max(self.tool_tokens, 1), 4),
                           "turns": p.saved.turns,
                           "rows_no_longer_over": p.rows_no_longer_over,
                           "saved_by_rule": {rule: s.tokens_before - s.tokens_after
                                             for rule, s in sorted(p.saved.rules.items())}}
                   for level, p in self.levels.items()}}

    def lines(self) -> list[str]:
        """The text block `analyze` prints (80 columns)."""
        out = [f"Distill: tool outputs hold {self.tool_tokens:,} tokens; {self.rows_over:,} "
               f"rows are over {self.target:,}",
               f"  {'level':<14}{'saves':>12}{'of tool':>9}   rows that would need no summary"]
        for level, p in self.levels.items():
            share = p.saved.saved / max(self.tool_tokens, 1)
            out.append(f"  --distill {level:<4}{p.saved.saved:>12,}{share:>9.1%}   "
                       f"{p.rows_no_longer_over:,}")
        for level, p in self.levels.items():
            rules = ", ".join(f"{rule} {s.tokens_before - s.tokens_after:,}"
                              for rule, s in sorted(p.saved.rules.items()))
            if rules:
                out += textwrap.wrap(f"{level} by rule: {rules}", 78, initial_indent="  ",
                                     subsequent_indent="    ")
        return out
