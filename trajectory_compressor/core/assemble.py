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
    """Metrics of a trajectory that gets no summary (skipped, over the limit, or failed),
    its tool outputs masked when the plan masked them (§19)."""
    metrics = TrajectoryMetrics(
        original_tokens=plan.input_tokens,
        compressed_tokens=plan.total_tokens,
        original_turns=turn_count,
        compressed_turns=turn_count,
        skipped_under_target=plan.action == "skip",
        still_over_limit=plan.action not in ("skip", "mask"),
        distill=plan.distill,
        assistant_tokens=plan.assistant_tokens,
    )
    if plan.mask is not None:
        _add_mask(metrics, plan)
        metrics.strategy_used = "mask"
        metrics.was_compressed = True  # the row changed: its old tool outputs masked
    return metrics


def _add_mask(metrics: TrajectoryMetrics, plan: Plan) -> None:
    assert plan.mask is not None
    metrics.masked_turns = len(plan.mask.turns)
    metrics.masked_tokens = plan.mask.saved
    metrics.tokens_saved = metrics.original_tokens - metrics.compressed_tokens
    metrics.compression_ratio = metrics.compressed_tokens / max(metrics.original_tokens, 1)


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
    original = plan.input_tokens
    metrics = TrajectoryMetrics(
        original_tokens=original,
        compressed_tokens=compressed_tokens,
        tokens_saved=original - compressed_tokens,
        compression_ratio=compressed_tokens / max(original, 1),
        original_turns=turn_count,
        compressed_turns=compressed_turns,
        turns_removed=turn_count - compressed_turns,
        turns_compressed_start_idx=region.start,
        turns_compressed_end_idx=region.end,
        turns_in_compressed_region=region.turns,
        was_compressed=True,
        still_over_limit=compressed_tokens > config.target_max_tokens,
        distill=plan.distill,
        strategy_used="summarize",
        assistant_tokens=plan.assistant_tokens,
        assistant_tokens_kept=plan.assistant_kept,
    )
    if plan.mask is not None:
        _add_mask(metrics, plan)
        metrics.strategy_used = "mask+summarize"
    return metrics
