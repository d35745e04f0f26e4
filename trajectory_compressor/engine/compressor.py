"""`TrajectoryCompressor`: count → plan → summarize → assemble for one trajectory or row."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType

from ..core import reasons
from ..core.assemble import assemble, base_metrics, compressed_metrics, notice_index
from ..core.config import CompressionConfig
from ..core.conversation import Row, Trajectory
from ..core.deadline import Deadline
from ..core.extractive import ExtractiveSummarizer
from ..core.metrics import METRICS_KEY, TrajectoryMetrics
from ..core.plan import Plan, plan_trajectory
from ..core.summary import Summarizer, Summary, SummaryFailed, SummaryRequest, SummaryUsage
from ..counting.tokens import TokenCounter
from ..dialects.base import Dialect
from ..dialects.sharegpt import SHAREGPT

SUMMARY_OVERRAN = reasons.SUMMARY_OVERRAN.text


@dataclass
class RowResult:
    """One row after compression: what to write, its metrics, and the plan behind it."""

    row: Row
    metrics: TrajectoryMetrics
    plan: Plan
    changed: bool  # False: the row is the input object, untouched
    turns: Trajectory  # the row's turns as written

    @property
    def reason(self) -> str:
        """Why the row failed or is still over the limit; empty when it is neither."""
        if self.metrics.error is not None:
            return self.metrics.error
        if not self.metrics.still_over_limit:
            return ""
        return self.plan.reason or SUMMARY_OVERRAN


class TrajectoryCompressor:
    """Compresses trajectories into the target budget (§3).

    Use it as ``async with TrajectoryCompressor(config) as c: await c.compress_row(row)``,
    or call the sync `compress_trajectory` from plain code (e.g. inside ``datasets.map``).
    """

    def __init__(
        self,
        config: CompressionConfig | None = None,
        summarizer: Summarizer | None = None,
        counter: TokenCounter | None = None,
        dialect: Dialect = SHAREGPT,
    ) -> None:
        self.config = config or CompressionConfig()
        self.dialect = dialect
        self.counter = counter or TokenCounter.load(
            self.config.tokenizer_name, self.config.trust_remote_code
        )
        if summarizer is None:
            from ..summarizers import make_summarizer

            summarizer = make_summarizer(self.config, self.counter)
        self.summarizer = summarizer
        self._fallback = ExtractiveSummarizer(self.counter.count, source="fallback")

    async def __aenter__(self) -> TrajectoryCompressor:
        await self.summarizer.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.summarizer.aclose()

    def plan(self, turns: Trajectory, turn_tokens: list[int] | None = None) -> Plan:
        """The planner's decision for ``turns`` (counting tokens if not given)."""
        if turn_tokens is None:
            turn_tokens = self.counter.count_many([t["value"] for t in turns])
        return plan_trajectory([t["from"] for t in turns], turn_tokens, self.config)

    async def compress_trajectory_async(
        self, turns: Trajectory, turn_tokens: list[int] | None = None
    ) -> tuple[Trajectory, TrajectoryMetrics]:
        """``(compressed turns, metrics)``; the input list is never modified."""
        plan = self.plan(turns, turn_tokens)
        if plan.action != "compress":
            result = self.unchanged({}, turns, plan)
        else:
            result = await self.compress_planned({}, turns, plan)
        return result.turns, result.metrics

    def compress_trajectory(self, turns: Trajectory) -> tuple[Trajectory, TrajectoryMetrics]:
        """Sync wrapper of `compress_trajectory_async` for code without an event loop."""

        async def once() -> tuple[Trajectory, TrajectoryMetrics]:
            async with self:
                return await self.compress_trajectory_async(turns)

        return asyncio.run(once())

    async def compress_row(self, row: Row, turn_tokens: list[int] | None = None) -> RowResult:
        """Compress one row's conversation, keeping every other field.

        Raises `RowError` for a malformed row. A failed summary falls back to the
        extractive one; a row past its deadline is returned unchanged with an error.
        """
        turns = self.dialect.turns(row)
        plan = self.plan(turns, turn_tokens)
        if plan.action != "compress":
            return self.unchanged(row, turns, plan)
        return await self.compress_planned(row, turns, plan)

    def unchanged(self, row: Row, turns: Trajectory, plan: Plan) -> RowResult:
        """The result for a row that gets no summary (under the target, or nothing to cut)."""
        metrics = base_metrics(plan, len(turns))
        if plan.action == "skip":
            return RowResult(row, metrics, plan, changed=False, turns=turns)
        return self._with_metrics(row, turns, metrics, plan)

    async def compress_planned(self, row: Row, turns: Trajectory, plan: Plan) -> RowResult:
        """Summarize ``plan.region`` of ``turns`` and assemble the new row."""
        assert plan.region is not None
        region = plan.region
        # Time spent queued for a request slot does not count against the deadline.
        deadline = Deadline(self.config.per_trajectory_timeout)
        request = SummaryRequest(
            turns[region.start:region.end], region.start, self._summary_budget(turns, plan),
            plan.region_tokens, deadline,
        )
        try:
            summary = await deadline.run(self._summarize(request))
        except asyncio.TimeoutError:
            metrics = base_metrics(plan, len(turns))
            metrics.error = reasons.deadline_error(self.config.per_trajectory_timeout)
            return self._with_metrics(row, turns, metrics, plan)
        new_turns = assemble(turns, region, summary.text, self.config)
        metrics = self._metrics_after(turns, plan, summary)
        return self._with_metrics(row, new_turns, metrics, plan)

    def _summary_budget(self, turns: Trajectory, plan: Plan) -> int:
        """`summary_target_tokens`, or less when the region is barely larger than that: the
        summary plus the system notice must not outweigh the turns it replaces."""
        assert plan.region is not None
        notice_at = notice_index(turns, plan.region, self.config)
        delta = 0
        if notice_at is not None:
            system = turns[notice_at]["value"]
            with_notice, without = self.counter.count_many(
                [system + self.config.summary_notice_text, system])
            delta = with_notice - without
        return max(1, min(self.config.summary_target_tokens, plan.region_tokens - delta - 1))

    async def _summarize(self, request: SummaryRequest) -> Summary:
        try:
            return await self.summarizer.summarize(request)
        except SummaryFailed as failure:
            fallback = await self._fallback.summarize(request)
            fallback.usage = failure.usage
            fallback.usage.errors = max(fallback.usage.errors, 1)
            return fallback

    def projected_metrics(
        self, turns: Trajectory, plan: Plan, summary_tokens: int
    ) -> TrajectoryMetrics:
        """The metrics `compress_planned` would give with a summary of ``summary_tokens``.

        No summarizer is called; used by the dry run to project LLM summaries.
        """
        return self._metrics_for(turns, plan, None, summary_tokens)

    def _metrics_after(
        self,
        turns: Trajectory,
        plan: Plan,
        summary: Summary,
    ) -> TrajectoryMetrics:
        metrics = self._metrics_for(turns, plan, summary.text, 0)
        _add_usage(metrics, summary.usage)
        metrics.summary_source = summary.source
        return metrics

    def _metrics_for(
        self, turns: Trajectory, plan: Plan, summary_text: str | None, summary_tokens: int
    ) -> TrajectoryMetrics:
        """Metrics after compression, counting the summary (if given) and the notice delta."""
        assert plan.region is not None
        notice_at = notice_index(turns, plan.region, self.config)
        texts = [summary_text or ""]
        if notice_at is not None:
            system = turns[notice_at]["value"]
            texts += [system + self.config.summary_notice_text, system]
        counts = self.counter.count_many(texts)
        if summary_text is not None:
            summary_tokens = counts[0]
        delta = counts[1] - counts[2] if notice_at is not None else 0
        return compressed_metrics(plan, len(turns), summary_tokens, delta, self.config)

    def _with_metrics(
        self, row: Row, turns: Trajectory, metrics: TrajectoryMetrics, plan: Plan
    ) -> RowResult:
        new_row = self.dialect.with_turns(row, turns)
        if self.config.metrics_per_trajectory:
            new_row[METRICS_KEY] = metrics.to_dict()
        return RowResult(new_row, metrics, plan, changed=True, turns=turns)


def _add_usage(metrics: TrajectoryMetrics, usage: SummaryUsage) -> None:
    metrics.summarization_api_calls = usage.api_calls
    metrics.summarization_errors = usage.errors
    metrics.retries = usage.retries
    metrics.prompt_tokens = usage.prompt_tokens
    metrics.completion_tokens = usage.completion_tokens
