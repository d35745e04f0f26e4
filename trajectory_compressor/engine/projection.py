"""What `compress` would make of one row, without an LLM (the dry run's and the remedies'
one answer).

With the extractive summarizer the row goes through `TrajectoryCompressor` exactly as
`compress` sends it: the summary is built, the notice counted, the second pass
(`over_limit_strategy`) applied, so the result is the row `compress --summarizer
extractive` writes. For an LLM backend the summary is projected at
``summary_target_tokens`` tokens, one call per compressed row, and the second pass is
applied to the projection (counted by the changed turns: no summary text exists); a row
in windows is the extractive one's windows, with one call per window summary.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from ..core.assemble import assemble
from ..core.conversation import Row, Trajectory, call_view
from ..core.distill_row import DistillStats
from ..core.mask import apply_mask
from ..core.plan import Plan
from ..core.summary import SummaryRequest, render_turns
from ..dialects.base import Dialect
from .compressor import RowResult, TrajectoryCompressor
from .second_pass import elide_over_limit


@dataclass(frozen=True)
class CountedRow:
    """One row as `compress` plans it: the row (distilled when the config says so), its
    turns, their counts in the run's counting mode, its file's dialect, and what
    distilling did."""

    row: Row
    turns: Trajectory
    turn_tokens: list[int]
    dialect: Dialect
    distilled: DistillStats | None = None

    @property
    def total(self) -> int:
        return sum(self.turn_tokens)


async def outcome(compressor: TrajectoryCompressor, counted: CountedRow, *,
                  exact: bool, plan: Plan | None = None) -> RowResult:
    """The one result the configured summarizer stands for: ``exact`` (extractive, built
    by ``compressor``'s summarizer) or projected; ``plan``: the row's plan, if made."""
    if plan is None:
        plan = compressor.plan(counted.turns, counted.turn_tokens, counted.dialect,
                               counted.distilled)
    if plan.action != "compress":
        return compressor.unchanged(counted.row, counted.turns, plan, counted.dialect)
    if exact or plan.windows is not None:  # windows: see `inspect.analyze._outcomes`
        return await compressor.compress_planned(counted.row, counted.turns, plan,
                                                 counted.dialect)
    return projected(compressor, counted, plan, counted.turns)


def projected(compressor: TrajectoryCompressor, counted: CountedRow, plan: Plan,
              shown: Trajectory) -> RowResult:
    """The result of ``plan`` with an LLM summary of ``summary_target_tokens`` tokens (one
    call, the region's text as input), then the second pass if configured; ``shown``: the
    turns the result carries (nothing reads them for the figures)."""
    assert plan.region is not None
    config = compressor.config
    turns = counted.turns
    metrics = compressor.projected_metrics(turns, plan, config.summary_target_tokens)
    metrics.summarization_api_calls = 1
    metrics.summary_source = "llm"
    request = SummaryRequest(call_view(turns[plan.region.start:plan.region.end]),
                             plan.region.start,
                             config.summary_target_tokens)
    metrics.prompt_tokens = min(compressor.counter.count(render_turns(request)),
                                config.max_input_tokens)
    metrics.completion_tokens = config.summary_target_tokens
    if config.over_limit_strategy == "elide_tool_outputs" and metrics.still_over_limit:
        # The summary's text does not matter here: the pass counts the outputs it cuts.
        assembled = assemble(apply_mask(turns, plan.mask), plan.region, "", config)
        elide_over_limit(counted.row, assembled, metrics, plan, counted.dialect,
                         plan.region.start, config, compressor.counter, compressor.rows,
                         render=False)
    return RowResult(counted.row, metrics, plan, changed=True, turns=shown)


def projected_windows(compressor: TrajectoryCompressor, counted: CountedRow,
                      exact: RowResult) -> RowResult:
    """``exact``, the windows of a row built with the extractive summarizer, as an LLM
    makes them: the same windows (they are planned with every summary at its budget,
    whatever the summarizer), and one request per window that has a summary, the text of
    the turns it summarizes as its input, its budget as its output."""
    config = compressor.config
    metrics = copy.deepcopy(exact.metrics)
    calls = prompt = completion = 0
    for window in exact.plan.windows or ():
        region = window.summarized
        if region is None:
            continue
        request = SummaryRequest(call_view(counted.turns[region.start:region.end]),
                                 region.start, window.requested_tokens)
        calls += 1
        prompt += min(compressor.counter.count(render_turns(request)),
                      config.max_input_tokens)
        completion += window.requested_tokens
    metrics.summarization_api_calls = calls
    metrics.prompt_tokens, metrics.completion_tokens = prompt, completion
    if calls:
        metrics.summary_source = "llm"
        if metrics.windowed is not None:
            metrics.windowed = {**metrics.windowed, "summaries_by_source": {"llm": calls}}
    return dataclasses.replace(exact, metrics=metrics)


def elision_fits(compressor: TrajectoryCompressor, counted: CountedRow, plan: Plan,
                 first: RowResult, *, exact: bool) -> bool:
    """Whether the second pass (`over_limit_strategy: elide_tool_outputs`, under
    ``compressor``'s target) brings under the target a row that ``first``, its result
    without the second pass under ``plan``, leaves over it; as `compress` would apply it
    (``exact``), or to the projection."""
    metrics = copy.deepcopy(first.metrics)
    summarized = metrics.turns_compressed_start_idx >= 0
    summary_at = plan.region.start if summarized and plan.region is not None else None
    turns = first.turns
    if summary_at is not None and not exact:  # the projection keeps the turns as read
        assert plan.region is not None
        turns = assemble(apply_mask(counted.turns, plan.mask), plan.region, "",
                         compressor.config)
    return elide_over_limit(counted.row, turns, metrics, plan, counted.dialect, summary_at,
                            compressor.config, compressor.counter, compressor.rows,
                            render=exact) is not None
