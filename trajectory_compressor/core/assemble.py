"""The assembler: head + one summary turn + the rest, and the metrics of the result (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from .config import CompressionConfig
from .conversation import Trajectory, Turn
from .metrics import TrajectoryMetrics
from .plan import Plan, Region


def notice_index(turns: Sequence[Turn], region: Region, config: CompressionConfig) -> int | None:
    """Index of the head's first `system` turn, which gets the summary notice (if enabled)."""
    if not config.add_summary_notice:
        return None
    for i in range(region.start):
        if turns[i].get("from") == "system":
            return i
    return None


def assemble(
    turns: Sequence[Turn], region: Region, summary_text: str, config: CompressionConfig
) -> Trajectory:
    """A new trajectory: turns before the region, the summary as a `human` turn, the rest."""
    notice_at = notice_index(turns, region, config)
    head = [dict(turn) for turn in turns[: region.start]]
    if notice_at is not None:
        head[notice_at]["value"] = head[notice_at]["value"] + config.summary_notice_text
    return [*head, {"from": "human", "value": summary_text},
            *(dict(turn) for turn in turns[region.end:])]


def base_metrics(plan: Plan, turn_count: int) -> TrajectoryMetrics:
    """Metrics of a trajectory left as it is (skipped, over the limit, or failed)."""
    return TrajectoryMetrics(
        original_tokens=plan.total_tokens,
        compressed_tokens=plan.total_tokens,
        original_turns=turn_count,
        compressed_turns=turn_count,
        skipped_under_target=plan.action == "skip",
        still_over_limit=plan.action != "skip",
        distill=plan.distill,
    )


def compressed_metrics(
    plan: Plan,
    turn_count: int,
    summary_tokens: int,
    notice_delta: int,
    config: CompressionConfig,
) -> TrajectoryMetrics:
    """Metrics after compression, from the known per-turn counts plus the two changed turns.

    ``notice_delta`` is the token count of the system turn with the notice minus without.
    """
    assert plan.region is not None
    region = plan.region
    compressed_tokens = plan.total_tokens - plan.region_tokens + summary_tokens + notice_delta
    compressed_turns = turn_count - region.turns + 1
    return TrajectoryMetrics(
        original_tokens=plan.total_tokens,
        compressed_tokens=compressed_tokens,
        tokens_saved=plan.total_tokens - compressed_tokens,
        compression_ratio=compressed_tokens / max(plan.total_tokens, 1),
        original_turns=turn_count,
        compressed_turns=compressed_turns,
        turns_removed=turn_count - compressed_turns,
        turns_compressed_start_idx=region.start,
        turns_compressed_end_idx=region.end,
        turns_in_compressed_region=region.turns,
        was_compressed=True,
        still_over_limit=compressed_tokens > config.target_max_tokens,
        distill=plan.distill,
    )
