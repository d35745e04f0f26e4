"""The second pass for one row still over the target: `over_limit_strategy:
elide_tool_outputs` (§16), between the compressor and the row's dialect.

The pure part (which outputs, how they are cut) is `core.elide`; this applies it to a
row's turns as written, writes the row back through its dialect (only tool turns change,
so tool-call pairing and the dialect's rules hold), and counts the result in the run's
mode: per turn (exact from the turns' counts) or, with `chat_template` counting, by
rendering the new row (up to `ROUNDS` rounds when its rendered count is still over).
A row this cannot bring under the target is left as the first pass made it.
"""

from __future__ import annotations

from ..core.config import CompressionConfig
from ..core.conversation import Row, Trajectory
from ..core.elide import Elision, elide_tool_outputs, eligible_turns
from ..core.metrics import TrajectoryMetrics
from ..core.plan import Plan
from ..counting.tokens import TokenCounter
from ..dialects.base import Dialect
from .count import RowCounter

ROUNDS = 3


def elide_over_limit(
    row: Row, turns: Trajectory, metrics: TrajectoryMetrics, plan: Plan, dialect: Dialect,
    summary_at: int | None, config: CompressionConfig, counter: TokenCounter,
    rows: RowCounter, *, render: bool = True,
) -> tuple[Trajectory, Row] | None:
    """``(turns, row)`` with tool outputs elided so that the row fits the target, and
    ``metrics`` updated (tokens, ``elisions``); None (``metrics`` untouched) when no
    elision brings it under.

    ``render=False`` counts by the changed turns alone whatever the counting mode: for a
    projection (`analyze` with an LLM backend), whose summary is not written."""
    target = config.target_max_tokens
    eligible = eligible_turns([t["from"] for t in turns], plan.middle,
                              plan.region if summary_at is not None else None, summary_at)
    if not eligible:
        return None
    current = list(turns)
    total = metrics.compressed_tokens
    done: dict[int, Elision] = {}
    new_row: Row | None = None
    rendered = render and rows.template is not None
    for _ in range(ROUNDS if rendered else 1):
        found = elide_tool_outputs([t["value"] for t in current], eligible, total - target,
                                   counter.count_many)
        if not found:
            break
        for i, text, elision in found:
            first = done.get(i, elision)
            done[i] = Elision(i, first.tokens_before, elision.tokens_after)
            current[i] = {**current[i], "value": text}
        new_row = dialect.with_turns(row, current, summary_at)
        if rendered:
            total = rows.total(dialect, new_row)
        else:
            total -= sum(e.tokens_before - e.tokens_after for _, _, e in found)
        if total <= target:
            break
    if new_row is None or total > target:
        return None
    metrics.compressed_tokens = total
    metrics.tokens_saved = metrics.original_tokens - total
    metrics.compression_ratio = total / max(metrics.original_tokens, 1)
    metrics.still_over_limit = False
    metrics.was_compressed = True  # shortened, by a summary or by the elisions alone
    metrics.elisions = [done[i].to_dict() for i in sorted(done)]
    return current, new_row
