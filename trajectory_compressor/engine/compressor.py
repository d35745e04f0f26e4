"""`TrajectoryCompressor`: count → plan → summarize → assemble for one trajectory or row."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from dataclasses import dataclass
from types import TracebackType

from ..core import reasons
from ..core.assemble import assemble, base_metrics, compressed_metrics, notice_index
from ..core.config import CompressionConfig
from ..core.conversation import Row, Trajectory, call_view
from ..core.deadline import Deadline
from ..core.distill_refs import resolve_references, tool_text
from ..core.distill_row import DistillStats, distill_turns, verify_turns
from ..core.errors import ConfigError, FatalSummaryError, RowError, one_line_error
from ..core.explain import RowReason, explain
from ..core.extractive import ExtractiveSummarizer
from ..core.fidelity import Fidelity
from ..core.invented import SummaryCheck
from ..core.mask import apply_mask, mask_row
from ..core.metrics import METRICS_KEY, TrajectoryMetrics
from ..core.plan import Boundaries, Plan, plan_trajectory
from ..core.redact import Scrubber
from ..core.summary import (
    Repair,
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
    add_references,
    bound_summary,
    finish_summary_text,
    summary_body,
)
from ..core.windows import windowed_plan
from ..counting.tokens import TokenCounter
from ..dialects.base import Dialect
from ..dialects.sharegpt import SHAREGPT
from .blocking import run_blocking
from .chosen import Chosen as _Chosen
from .chosen import add_fidelity as _add_fidelity
from .chosen import add_usage as _add_usage
from .chosen import total_usage as _total_usage
from .count import RowCounter
from .second_pass import elide_over_limit
from .windowing import WindowMasks, compress_windows, window_limits

SUMMARY_OVERRAN = reasons.SUMMARY_OVERRAN.text
# Reasons a row keeps under `strategy: mask` when masking could not bring it under: the
# row's shape (nothing between the protected turns) says more than masking's shortfall.
_MASK_KEEPS = (reasons.HEAD_ALONE.text, reasons.NO_MIDDLE.text)


@dataclass
class RowResult:
    """One row after compression: what to write, its metrics, and the plan behind it."""

    row: Row
    metrics: TrajectoryMetrics
    plan: Plan
    changed: bool  # False: the row is the input object, untouched
    turns: Trajectory  # the row's turns as written
    # `output.mode: windows` (§20): every row written for this one, in order (``row`` is
    # the first), and each one's metrics; ``metrics`` are then the source row's.
    windows: list[Row] | None = None
    window_metrics: list[TrajectoryMetrics] | None = None
    summarizer_rows: list[Row] | None = None  # `--emit-summarizer-rows` (§20)

    @property
    def reason(self) -> str:
        """Why the row failed or is still over the limit; empty when it is neither."""
        if self.metrics.error is not None:
            return self.metrics.error
        if not self.metrics.still_over_limit:
            return ""
        if (self.metrics.low_fidelity and not self.metrics.was_compressed
                and self.plan.reason != reasons.HEAD_ALONE.text):
            return reasons.LOW_FIDELITY.text
        return self.plan.reason or SUMMARY_OVERRAN

    @property
    def why(self) -> RowReason | None:
        """`reason` as a code with the numbers behind it (`core.explain`); None when the
        row is neither failed nor over the limit."""
        return explain(self.plan, self.metrics)


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
        self._extractive = ExtractiveSummarizer(self.counter.count)
        # Counts in the configured mode (per turn, or through the chat template).
        self.rows = RowCounter(self.config, self.counter)
        # The configured key values: no summary, from whatever backend, carries them.
        self.scrubber = Scrubber(self.config.secret_values())
        # `--emit-summarizer-rows`: windows results carry a training row per summary.
        self.emit_summarizer_rows = False

    def with_config(self, config: CompressionConfig) -> TrajectoryCompressor:
        """A compressor for ``config`` that shares this one's tokenizer, summarizer, row
        counter and scrubber: for settings that plan differently but count, summarize and
        scrub the same (``config`` must keep the counting settings and the endpoints)."""
        other = copy.copy(self)
        other.config = config
        return other

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

    def plan(self, turns: Trajectory, turn_tokens: list[int] | None = None,
             dialect: Dialect | None = None, distilled: DistillStats | None = None) -> Plan:
        """The planner's decision for ``turns`` (counting tokens if not given);
        ``distilled``: what `distill` did to them, carried into the row's metrics."""
        if turn_tokens is None:
            turn_tokens = self.counter.count_many([t["value"] for t in turns])
        boundaries = (dialect or self.dialect).boundaries(turns)
        roles = [t["from"] for t in turns]
        plan = plan_trajectory(roles, turn_tokens, self.config, boundaries)
        if self.config.output_mode == "windows" and plan.action != "skip":
            plan = windowed_plan(plan, roles, turn_tokens, plan.middle.start,
                                 window_limits(self, turns), boundaries,
                                 WindowMasks(self, turns, turn_tokens).tokens)
        elif self.config.strategy != "summarize" and plan.action != "skip":
            plan = self._masked(plan, turns, roles, turn_tokens, boundaries)
        region = plan.region
        in_region = range(region.start, region.end) if region is not None else range(0)
        return dataclasses.replace(
            plan, distill=distilled,
            assistant_tokens=sum(n for r, n in zip(roles, turn_tokens, strict=True)
                                 if r == "gpt"),
            region_assistant_tokens=sum(turn_tokens[i] for i in in_region
                                        if roles[i] == "gpt"))

    def _masked(self, plan: Plan, turns: Trajectory, roles: list[str], turn_tokens: list[int],
                boundaries: Boundaries) -> Plan:
        """``plan`` after masking old tool outputs (§19, `core.mask`): a plan of the masked
        row (action ``mask`` when it fits); with ``strategy: mask``, never a summary."""
        config = self.config
        texts = [str(t["value"]) for t in turns]
        # Template counts attribute the template's own tokens to turns: a turn's saving is
        # what its text loses, counted alone.
        counted = self.counter.count_many(texts) if self.rows.template is not None else None
        masking = mask_row(roles, texts, turn_tokens, plan.middle, config.target_max_tokens,
                           config.mask_keep_last, config.mask_exclude_tools,
                           self.counter.count_many, counted)
        after = plan
        if masking is not None:
            after = plan_trajectory(roles, masking.counts(turn_tokens), config, boundaries)
            if after.action == "skip":
                return dataclasses.replace(after, action="mask", mask=masking)
        if config.strategy == "mask":
            reason = after.reason if after.reason in _MASK_KEEPS else reasons.MASK_EXHAUSTED.text
            after = dataclasses.replace(after, action="over_limit", region=None,
                                        region_tokens=0, reason=reason)
        return dataclasses.replace(after, mask=masking)

    def distill(self, row: Row, turns: Trajectory, dialect: Dialect | None = None,
                ) -> tuple[Row, Trajectory, DistillStats] | None:
        """``(row, turns, what was done)`` with the tool outputs distilled at
        ``compression.distill`` (§18), or None when that changes nothing. Every row gets
        it, under the target or not, so a dataset's tool outputs read one way."""
        level = self.config.distill
        if level == "off":
            return None
        texts = [t["value"] if t["from"] == "tool" and isinstance(t.get("value"), str)
                 else None for t in turns]
        if all(text is None for text in texts):
            return None
        distilled, stats = distill_turns(texts, level, self.counter.count_many,
                                         count_pairs=self.counter.count_pairs)
        if not stats.turns:
            return None
        if self.config.verify_distill and level == "safe":
            failed = verify_turns(texts, distilled)
            if failed is not None:
                # Written as it came, the failure in its metrics (§18).
                return row, turns, DistillStats(level, verify_failed=failed)
        dialect = dialect or self.dialect
        new_turns = [turn if text is None or text == turn["value"] else {**turn, "value": text}
                     for turn, text in zip(turns, distilled, strict=True)]
        new_row = dialect.with_turns(row, new_turns)
        return new_row, dialect.turns(new_row), stats

    async def compress_trajectory_async(
        self, turns: Trajectory, turn_tokens: list[int] | None = None
    ) -> tuple[Trajectory, TrajectoryMetrics]:
        """``(compressed turns, metrics)`` of Hermes ShareGPT ``turns`` (whatever the
        compressor's dialect); the input list is never modified."""
        distilled = self.distill(SHAREGPT.with_turns({}, turns), turns, SHAREGPT)
        stats = None
        if distilled is not None:
            _, turns, stats = distilled
            turn_tokens = None
        plan = self.plan(turns, turn_tokens, SHAREGPT, stats)
        if plan.action != "compress":
            result = self.unchanged({}, turns, plan, SHAREGPT)
        else:
            result = await self.compress_planned({}, turns, plan, SHAREGPT)
        return SHAREGPT.turns(result.row) if result.changed else turns, result.metrics

    def compress_trajectory(self, turns: Trajectory) -> tuple[Trajectory, TrajectoryMetrics]:
        """Sync wrapper of `compress_trajectory_async` for code without an event loop."""

        async def once() -> tuple[Trajectory, TrajectoryMetrics]:
            async with self:
                return await self.compress_trajectory_async(turns)

        return run_blocking(once)

    async def compress_row(self, row: Row, turn_tokens: list[int] | None = None,
                           dialect: Dialect | None = None) -> RowResult:
        """Compress one row's conversation, keeping every other field.

        Raises `RowError` for a malformed row. A failed summary falls back to the
        extractive one; a row past its deadline is returned unchanged with an error.
        """
        dialect = dialect or self.dialect
        turns = dialect.turns(row)
        distilled = self.distill(row, turns, dialect)
        stats = None
        if distilled is not None:
            row, turns, stats = distilled
            turn_tokens = None  # counted for the distilled turns
        if turn_tokens is None:
            counted = self.rows.count([(dialect, row, turns)])[0]
            if isinstance(counted, str):
                raise RowError(counted)
            turn_tokens = counted
        plan = self.plan(turns, turn_tokens, dialect, stats)
        if plan.action != "compress":
            return self.unchanged(row, turns, plan, dialect)
        return await self.compress_planned(row, turns, plan, dialect)

    def unchanged(self, row: Row, turns: Trajectory, plan: Plan,
                  dialect: Dialect | None = None) -> RowResult:
        """The result for a row that gets no summary (under the target, or nothing to cut)."""
        metrics = base_metrics(plan, len(turns))
        if plan.action == "skip" and plan.distill is None:
            return RowResult(row, metrics, plan, changed=False, turns=turns)
        return self._with_metrics(row, apply_mask(turns, plan.mask), metrics, plan, dialect,
                                  source=turns)

    def failed(self, row: Row, turns: Trajectory, plan: Plan, error: str,
               dialect: Dialect | None = None) -> RowResult:
        """The result for a row whose compression failed: written unchanged, with ``error``."""
        metrics = base_metrics(plan, len(turns))
        metrics.error = error
        return self._with_metrics(row, apply_mask(turns, plan.mask), metrics, plan, dialect,
                                  source=turns)

    async def compress_or_fail(self, row: Row, turns: Trajectory, plan: Plan,
                               dialect: Dialect | None = None,
                               origin: str | None = None) -> RowResult:
        """`compress_planned`, with the rule for a row that fails, the same in `compress`
        and `analyze`: an error nobody foresaw (a bug, a value no code expected) costs
        this row's summary, not the run; the row is the `failed` result, unchanged, with
        ``compression failed: ...`` as its error. What every row would hit
        (`FatalSummaryError`, `ConfigError`) still stops the run."""
        try:
            return await self.compress_planned(row, turns, plan, dialect, origin=origin)
        except (FatalSummaryError, ConfigError):
            raise
        except Exception as exc:
            message = f"compression failed: {one_line_error(exc)}"
            return self.failed(row, turns, plan, message, dialect)

    async def compress_planned(self, row: Row, turns: Trajectory, plan: Plan,
                               dialect: Dialect | None = None,
                               origin: str | None = None) -> RowResult:
        """Summarize ``plan.region`` of ``turns`` and assemble the new row.

        A row whose summary and notice would outweigh the turns they replace is returned
        unchanged with an error, as is a row past its deadline (with the requests it
        made). ``origin`` names the row within its run (see `SummaryRequest`).
        """
        if plan.windows is not None:
            made = await compress_windows(self, row, turns, plan, dialect or self.dialect,
                                          origin)
            if made.failed is not None:
                return self._with_metrics(row, turns, made.failed, plan, dialect)
            return RowResult(made.rows[0], made.metrics, plan, changed=True, turns=turns,
                             windows=made.rows, window_metrics=made.window_metrics,
                             summarizer_rows=made.summarizer_rows or None)
        assert plan.region is not None
        region = plan.region
        # Time spent queued for a request slot does not count against the deadline.
        deadline = Deadline(self.config.per_trajectory_timeout)
        # Hybrid (§19): the row is written from its masked turns, but the summary reads
        # the original text of the turns it replaces.
        original = turns
        turns = apply_mask(turns, plan.mask)
        # One extraction per row (bounded: `fidelity.MAX_ITEMS`), measured against every
        # summary the row is offered.
        texts = [str(t.get("value", "")) for t in turns]
        region_texts = [str(t.get("value", "")) for t in original[region.start:region.end]]
        # A summary may state what the turns before its position (head, region) state.
        probe = SummaryCheck(texts[:region.start], region_texts, texts[region.end:])
        request = SummaryRequest(
            call_view(original[region.start:region.end]), region.start,
            self._summary_budget(turns, plan), _region_input_tokens(plan), deadline,
            origin=origin, tail_items=tuple(probe.tail_items),
        )
        requests = [request]
        try:
            chosen = await deadline.run(self._choose(request, probe, requests))
        except asyncio.TimeoutError:
            metrics = base_metrics(plan, len(turns))
            _add_usage(metrics, _total_usage(requests))  # the attempts made before the cut
            metrics.error = reasons.deadline_error(self.config.per_trajectory_timeout)
            return self._with_metrics(row, turns, metrics, plan, dialect,
                                      source=original)
        summary = chosen.summary
        if summary is None:  # on_low_fidelity: uncompressed
            kept = base_metrics(plan, len(turns))
            _add_usage(kept, chosen.usage)
            _add_fidelity(kept, chosen, self.scrubber)
            return self._with_metrics(row, turns, kept, plan, dialect,
                                      source=original)
        summary.usage = chosen.usage
        metrics = self._metrics_after(turns, plan, summary)
        if metrics.compressed_tokens > metrics.original_tokens:
            grown = base_metrics(plan, len(turns))
            _add_usage(grown, summary.usage)
            grown.error = reasons.grew_error(metrics.compressed_tokens, metrics.original_tokens)
            return self._with_metrics(row, turns, grown, plan, dialect,
                                      source=original)
        _add_fidelity(metrics, chosen, self.scrubber)
        new_turns = assemble(turns, region, summary.text, self.config)
        return self._with_metrics(row, new_turns, metrics, plan, dialect, region.start,
                                  source=original)

    async def _choose(self, request: SummaryRequest, probe: SummaryCheck,
                      requests: list[SummaryRequest]) -> _Chosen:
        """The summary for ``request`` and its fidelity, through the bars (§15): below
        ``min_fidelity`` or over ``max_invented``, one repair request naming what the
        summary dropped and what it invented (for a model's summary); still short,
        ``on_low_fidelity`` decides. A backend that defers its cache write gets the
        accepted summary only."""
        first = await self._summarize(request)
        usage = first.usage
        best, fidelity = self._referenced(first, request, probe)
        why = self._shortfall(fidelity)
        if not why:
            if first.commit is not None and first.source == "llm":
                first.commit(first)
            return _Chosen(best, fidelity, usage)
        repaired = first.source in ("llm", "cache")
        if repaired:
            own = probe.measure(summary_body(first.text))
            bar = self.config.min_fidelity
            dropped = own.missing if bar is not None and own.ratio < bar else ()
            invented = own.invented_items if self._over_cap(own) else ()
            repair = dataclasses.replace(
                request, usage=SummaryUsage(),
                repair=Repair(summary_body(first.text), dropped, invented))
            requests.append(repair)
            second = await self._summarize(repair)
            usage = SummaryUsage()
            usage.add(first.usage)
            usage.add(second.usage)
            if second.source != "fallback":  # a failed repair leaves the first summary
                candidate, measured = self._referenced(second, request, probe)
                if self._rank(measured) >= self._rank(fidelity):
                    best, fidelity = candidate, measured
                    why = self._shortfall(fidelity)
                if not why:
                    if first.commit is not None:
                        first.commit(dataclasses.replace(second, usage=usage))
                    return _Chosen(best, fidelity, usage, repaired=True)
        policy = self.config.on_low_fidelity
        if policy == "uncompressed":
            return _Chosen(None, fidelity, usage, repaired, low=True, why=why)
        if policy == "extractive" and best.source not in ("extractive", "fallback"):
            extractive = await self._extractive.summarize(request)
            extractive.text = finish_summary_text(self.scrubber.literal(extractive.text),
                                                  self.scrubber)
            best, fidelity = self._referenced(extractive, request, probe)
        return _Chosen(best, fidelity, usage, repaired, low=True, why=why)

    def _over_cap(self, fidelity: Fidelity) -> bool:
        cap = self.config.max_invented
        return cap is not None and fidelity.invented > cap

    def _shortfall(self, fidelity: Fidelity) -> str:
        """Which bar ``fidelity`` fails (`min_fidelity`, `max_invented`), for a person;
        empty when it fails none."""
        bar = self.config.min_fidelity
        short = []
        if bar is not None and fidelity.ratio < bar:
            short.append(f"kept {fidelity.ratio:.2f} of the region's facts, under "
                         f"min_fidelity {bar:g}")
        if self._over_cap(fidelity):
            named = ", ".join(fidelity.invented_items[:3])
            short.append(f"{fidelity.invented} invented item(s) ({named}), over max_invented "
                         f"{self.config.max_invented}")
        return "; ".join(short)

    def _rank(self, fidelity: Fidelity) -> tuple[bool, int, float]:
        """Better summaries rank higher: through the bars, fewer invented items over the
        cap, more of the region's facts."""
        cap = self.config.max_invented
        excess = max(fidelity.invented - cap, 0) if cap is not None else 0
        return not self._shortfall(fidelity), -excess, fidelity.ratio

    def _referenced(self, summary: Summary, request: SummaryRequest,
                    probe: SummaryCheck) -> tuple[Summary, Fidelity]:
        """``summary`` with its references line (`summary_references`), and its fidelity."""
        own = summary_body(summary.text)
        fidelity = probe.measure(own)
        mode = self.config.summary_references
        items = fidelity.missing
        if mode == "tail":
            items = items[:fidelity.tail_items - fidelity.tail_kept]  # tail ones come first
        if mode == "off" or not items:
            return summary, fidelity
        # Items are the trajectory's own text: no secret goes into the line.
        text, cut = add_references(summary.text, [self.scrubber(i) for i in items],
                                   request.target_tokens, self.counter.count)
        if text == summary.text:
            return summary, fidelity
        summary = dataclasses.replace(summary, text=text, truncated=summary.truncated or cut)
        return summary, probe.measure(summary_body(text), own)

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
        """The backend's summary, scrubbed and bounded whatever the backend; the
        extractive fallback when it fails or its summary cannot be cut to size."""
        try:
            summary = await self.summarizer.summarize(request)
        except SummaryFailed as failure:
            return await self._fall_back(request, failure.usage)
        # Whatever the backend: prefixed once, redacted, no markers or control tokens.
        text = finish_summary_text(self.scrubber.literal(summary.text), self.scrubber)
        bounded = bound_summary(text, request.target_tokens,
                                self.config.summary_tolerance, self.counter.count)
        if bounded is None:
            summary.usage.failed("too_long")
            return await self._fall_back(request, summary.usage)
        summary.text = bounded[0]
        summary.truncated = summary.truncated or bounded[1]
        return summary

    async def _fall_back(self, request: SummaryRequest, usage: SummaryUsage) -> Summary:
        fallback = await self._fallback.summarize(request)
        fallback.text = self.scrubber.literal(fallback.text)
        fallback.usage = usage
        if usage.errors == 0:
            usage.failed("other")  # a backend that failed without saying how
        unnamed = usage.errors - sum(usage.errors_by_kind.values())
        if unnamed > 0:
            usage.errors_by_kind["other"] = usage.errors_by_kind.get("other", 0) + unnamed
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
        metrics.summary_truncated = summary.truncated
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
        self, row: Row, turns: Trajectory, metrics: TrajectoryMetrics, plan: Plan,
        dialect: Dialect | None = None, summary_at: int | None = None,
        source: Trajectory | None = None,
    ) -> RowResult:
        """The result of writing ``turns``; ``source``: the (distilled) turns they were
        made from (None: ``turns`` themselves)."""
        dialect = dialect or self.dialect
        new_row = dialect.with_turns(row, turns, summary_at)
        if summary_at is not None:
            # A dialect may join the summary to the turn before it (alternating LLaMA-Factory
            # rows): the metrics describe the row as written, one turn fewer, and its count
            # is the joined text's. With a template, counted as the trainer sees it.
            written = len(dialect.turns(new_row))
            if written != len(turns) or self.rows.template is not None:
                _recount(metrics, self.rows.total(dialect, new_row), self.config)
                metrics.compressed_turns = written
                metrics.turns_removed = metrics.original_turns - written
        elif plan.mask is not None and self.rows.template is not None:
            # Masked, no summary: the placeholders' counts were their texts' alone.
            _recount(metrics, self.rows.total(dialect, new_row), self.config)
        if (self.config.over_limit_strategy == "elide_tool_outputs"
                and metrics.still_over_limit and not metrics.failed):
            elided = elide_over_limit(row, turns, metrics, plan, dialect, summary_at,
                                      self.config, self.counter, self.rows)
            if elided is not None:
                turns, new_row = elided
        if plan.distill is not None and plan.distill.turns:
            turns, new_row, metrics = self._resolved(row, turns, new_row, metrics, plan,
                                                     dialect, summary_at, source)
        if self.config.metrics_per_trajectory:
            new_row[METRICS_KEY] = metrics.to_dict()
        return RowResult(new_row, metrics, plan, changed=True, turns=turns)

    def _resolved(self, row: Row, turns: Trajectory, new_row: Row,
                  metrics: TrajectoryMetrics, plan: Plan, dialect: Dialect,
                  summary_at: int | None, source: Trajectory | None,
                  ) -> tuple[Trajectory, Row, TrajectoryMetrics]:
        """``(turns, row)`` with every distill reference resolved within the written row
        (`core.distill_refs`), ``metrics`` recounted for the turns that changed. A row
        the expansions would make longer than it came is written as distilled."""
        source = turns if source is None else source
        origin: list[int | None] = list(range(len(turns)))
        if summary_at is not None and plan.region is not None:
            skipped = plan.region.end - plan.region.start - 1
            origin = [i if i < summary_at else None if i == summary_at else i + skipped
                      for i in range(len(turns))]
        texts = [tool_text(t) for t in turns]
        resolved = resolve_references([tool_text(t) for t in source], texts, origin)
        changed = [i for i, (a, b) in enumerate(zip(texts, resolved, strict=True)) if a != b]
        if not changed:
            return turns, new_row, metrics
        new_turns = [{**t, "value": resolved[i]} if i in changed else t
                     for i, t in enumerate(turns)]
        new_row = dialect.with_turns(row, new_turns, summary_at)
        if self.rows.template is not None:
            total = self.rows.total(dialect, new_row)
        else:
            counts = self.counter.count_many([str(resolved[i]) for i in changed]
                                             + [str(texts[i]) for i in changed])
            total = metrics.compressed_tokens + sum(counts[:len(changed)]) - sum(
                counts[len(changed):])
        if total > metrics.original_tokens and source is not turns:
            # Written as distilled (every reference holds there): no summary, no mask,
            # the summary calls made and the growth kept in the metrics.
            kept = base_metrics(dataclasses.replace(plan, mask=None,
                                                    total_tokens=plan.input_tokens),
                                len(source))
            _add_usage(kept, SummaryUsage(metrics.summarization_api_calls,
                                          metrics.summarization_errors, metrics.retries,
                                          metrics.prompt_tokens, metrics.completion_tokens,
                                          dict(metrics.errors_by_kind)))
            kept.error = reasons.grew_error(total, metrics.original_tokens)
            new_row = dialect.with_turns(row, source)
            _recount(kept, self.rows.total(dialect, new_row), self.config)
            return source, new_row, kept
        _recount(metrics, total, self.config)
        return new_turns, new_row, metrics


def _region_input_tokens(plan: Plan) -> int:
    """Tokens of the summarized region's original turns (masked ones as they were read)."""
    assert plan.region is not None
    tokens = plan.region_tokens
    if plan.mask is not None:
        tokens += sum(t.tokens_before - t.tokens_after for t in plan.mask.turns
                      if plan.region.start <= t.turn < plan.region.end)
    return tokens


def _recount(metrics: TrajectoryMetrics, compressed: int, config: CompressionConfig) -> None:
    """Metrics of a compressed row whose exact count is ``compressed``."""
    metrics.compressed_tokens = compressed
    metrics.tokens_saved = metrics.original_tokens - compressed
    metrics.compression_ratio = compressed / max(metrics.original_tokens, 1)
    metrics.still_over_limit = compressed > config.target_max_tokens
