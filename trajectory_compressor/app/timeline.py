"""One trajectory as a timeline of its turns, with the planner's parts marked (`report --show`).

A compressed row is read as written: the turns before the summary are the head side, the
summary stands for the original region, the turns after it keep their original indices
shifted. The protected head and tail are recomputed from the original roles (the region's
roles are gone, but no protected turn is ever inside a region, so they do not matter).
A row left as it was is re-planned, which shows the region a summary would have
replaced, or only the compressible middle when there was none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.config import CompressionConfig
from ..core.conversation import SUMMARY_PREFIX, Trajectory
from ..core.metrics import TrajectoryMetrics
from ..core.plan import Region, compressible_middle, plan_trajectory
from .textfmt import WIDTH, clip, display_width, first_line, num, pad

HEAD, MIDDLE, REGION, SUMMARY, TAIL = "head", "middle", "region", "summary", "tail"
PARTS = (HEAD, REGION, SUMMARY, MIDDLE, TAIL)


@dataclass(frozen=True)
class TimelineTurn:
    """One turn as written, the original turns ``[start, end)`` it stands for, and its part."""

    index: int
    start: int
    end: int
    role: str
    tokens: int
    part: str
    text: str


@dataclass
class Timeline:
    """A trajectory's turns in order, each marked head, middle, region, summary or tail."""

    turns: list[TimelineTurn]
    target: int
    compressed: bool
    middle: Region  # the compressible middle, in original indices

    @property
    def total(self) -> int:
        return sum(t.tokens for t in self.turns)

    def tokens_by_part(self) -> dict[str, int]:
        """Tokens in each part present, in timeline order of the parts."""
        out: dict[str, int] = {}
        for turn in self.turns:
            out[turn.part] = out.get(turn.part, 0) + turn.tokens
        return {p: out[p] for p in PARTS if p in out}

    @property
    def protected_tokens(self) -> int:
        parts = self.tokens_by_part()
        return parts.get(HEAD, 0) + parts.get(TAIL, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_max_tokens": self.target,
            "compressed": self.compressed,
            "total_tokens": self.total,
            "tokens_by_part": self.tokens_by_part(),
            "compressible_middle": {"start_idx": self.middle.start, "end_idx": self.middle.end},
            "turns": [{"index": t.index, "original_start": t.start, "original_end": t.end,
                       "role": t.role, "tokens": t.tokens, "part": t.part,
                       "first_line": _first(t.text)} for t in self.turns],
        }


def build_timeline(
    turns: Trajectory,
    turn_tokens: list[int],
    metrics: TrajectoryMetrics | None,
    config: CompressionConfig,
) -> Timeline:
    """Mark each turn of a row as written, using its metrics when it was compressed."""
    roles = [str(t.get("from", "")) for t in turns]
    if metrics is not None and _written_compressed(turns, metrics):
        start, end = metrics.turns_compressed_start_idx, metrics.turns_compressed_end_idx
        original_roles = [*roles[:start], *["?"] * (end - start), *roles[start + 1:]]
        middle = compressible_middle(original_roles, config)
        marked = []
        for i, (turn, tokens) in enumerate(zip(turns, turn_tokens, strict=True)):
            if i == start:
                span, part = (start, end), SUMMARY
            else:
                orig = i if i < start else i - 1 - start + end
                span, part = (orig, orig + 1), _zone(orig, middle)
            marked.append(TimelineTurn(i, *span, roles[i], tokens, part, turn["value"]))
        return Timeline(marked, config.target_max_tokens, True, middle)
    plan = plan_trajectory(roles, turn_tokens, config)
    region = plan.region
    marked = []
    for i, (turn, tokens) in enumerate(zip(turns, turn_tokens, strict=True)):
        part = _zone(i, plan.middle)
        if region is not None and region.start <= i < region.end:
            part = REGION
        marked.append(TimelineTurn(i, i, i + 1, roles[i], tokens, part, turn["value"]))
    return Timeline(marked, config.target_max_tokens, False, plan.middle)


def _written_compressed(turns: Trajectory, m: TrajectoryMetrics) -> bool:
    """Whether ``turns`` is the compressed form ``m`` describes (else treat it as unchanged)."""
    start, end = m.turns_compressed_start_idx, m.turns_compressed_end_idx
    return (m.was_compressed and 0 <= start < end and start < len(turns)
            and len(turns) == m.original_turns - (end - start) + 1
            and str(turns[start].get("value", "")).startswith(SUMMARY_PREFIX))


def _zone(index: int, middle: Region) -> str:
    if index < middle.start:
        return HEAD
    return TAIL if index >= middle.end else MIDDLE


def _first(text: str) -> str:
    return clip(first_line(text), 200)


_TITLES = {
    HEAD: "protected head",
    REGION: "region chosen for a summary (not summarized)",
    MIDDLE: "compressible middle (kept)",
    TAIL: "protected tail",
}


def format_timeline(timeline: Timeline, title: list[str]) -> list[str]:
    """The timeline as plain text under ``title`` lines, grouped by part, 80 columns."""
    lines = [*title, ""]
    groups: list[list[TimelineTurn]] = []
    for turn in timeline.turns:
        if groups and groups[-1][0].part == turn.part:
            groups[-1].append(turn)
        else:
            groups.append([turn])
    lines.append("     #   orig  role       tokens  first line")
    for group in groups:
        part = group[0].part
        tokens = sum(t.tokens for t in group)
        if part == SUMMARY:
            t = group[0]
            head = (f"summarized region: original turns {t.start}-{t.end - 1} "
                    f"({t.end - t.start} turns) -> summary of {num(tokens)} tokens")
        else:
            n = len(group)
            head = f"{_TITLES[part]}: {n} turn{'s' * (n != 1)}, {num(tokens)} tokens"
        lines.append("  -- " + head)
        for t in group:
            orig = str(t.start) if t.end - t.start == 1 else f"{t.start}-{t.end - 1}"
            prefix = (f"  {t.index:>4} {orig:>6}  {pad(clip(t.role, 7), 7)} "
                      f"{t.tokens:>9,}  ")
            lines.append(prefix + clip(first_line(t.text), WIDTH - display_width(prefix)))
    parts = timeline.tokens_by_part()
    lines += ["", "  " + " + ".join(f"{p} {num(n)}" for p, n in parts.items())
              + f" = {num(timeline.total)} tokens"]
    over = timeline.total - timeline.target
    lines.append(f"  target {num(timeline.target)}: " + (
        f"over by {num(over)}" if over > 0 else f"within, {num(-over)} to spare"))
    protected = timeline.protected_tokens
    lines.append(f"  protected head+tail alone: {num(protected)} tokens, "
                 + ("over the target" if protected > timeline.target else "within the target"))
    return lines
