"""A real dry run: count, plan and project what `compress` would do, at one or more targets.

Tokens are counted once per row; each target gets its own planner pass through the very
`TrajectoryCompressor` that `compress` uses. With the extractive summarizer the analysis
builds the same summaries `compress` would, so its figures are exact; for an LLM
summarizer it projects summaries of ``summary_target_tokens`` tokens (§9). No LLM is
called (unless ``probe`` asks for a few timed requests) and nothing is written. The work
`compress` would also do is timed as it goes, for an estimate of its duration
(`inspect.estimate`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ..core.config import CompressionConfig
from ..core.conversation import Row, Trajectory
from ..core.errors import ConfigError
from ..core.extractive import ExtractiveSummarizer
from ..core.metrics import AggregateMetrics, Distribution, nice_edges
from ..counting.tokens import TokenCounter
from ..dialects import detect
from ..dialects.base import Dialect, row_id
from ..engine.blocking import run_blocking
from ..engine.compressor import RowResult, TrajectoryCompressor
from ..engine.count import RowCounter, gap_counter
from ..engine.options import RunKeywords, RunOptions, run_options
from ..engine.projection import CountedRow, projected, projected_windows
from ..engine.replan import OverRows, WhatWouldFix, find_fixes
from ..engine.stream import RowStream
from ..formats import jsonio
from ..formats.registry import discover_inputs
from ..summarizers import resolve_summarizer
from .distill_preview import DistillPreview
from .estimate import Probe, TimedSummarizer, TimeEstimate, WorkClock, estimate_time
from .probe import ProbeRow, ProbeSample, probe
from .strategies import StrategyComparison

if TYPE_CHECKING:
    from typing_extensions import Unpack

HISTOGRAM_BINS = 10
REJECTS_KEPT = 5  # rejected rows whose location and reason an analysis keeps


@dataclass(frozen=True)
class Prices:
    """USD per million summarizer input and output tokens."""

    input: float = 0.0
    output: float = 0.0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


@dataclass
class TargetAnalysis:
    """What `compress` would do at one target, with extractive and with LLM summaries.

    ``extractive`` is exact (the summaries are built); ``llm`` projects every summary at
    ``summary_target_tokens`` and counts one call per compressed row, with the region
    rendered as the summarizer receives it as input tokens.
    """

    config: CompressionConfig
    extractive: AggregateMetrics = field(default_factory=AggregateMetrics)
    llm: AggregateMetrics = field(default_factory=AggregateMetrics)
    extractive_reasons: Counter[str] = field(default_factory=Counter)
    llm_reasons: Counter[str] = field(default_factory=Counter)
    # The rows the configured summarizer leaves over the limit, and what would fix them.
    over: OverRows = field(default_factory=OverRows)
    fixes: WhatWouldFix | None = None
    # §19: summarize, mask and hybrid side by side on the rows over this target.
    strategies: StrategyComparison | None = None
    fixes_cpu_seconds: float = 0.0  # the remedies' search, over the rows it re-planned

    @property
    def target(self) -> int:
        return self.config.target_max_tokens

    @property
    def exact(self) -> bool:
        """True when the configured summarizer is the (deterministic) extractive one."""
        return self.config.summarizer == "extractive"

    @property
    def metrics(self) -> AggregateMetrics:
        """The figures for the configured summarizer."""
        return self.extractive if self.exact else self.llm

    @property
    def reasons(self) -> Counter[str]:
        """Why rows stay over the limit, for the configured summarizer."""
        return self.extractive_reasons if self.exact else self.llm_reasons

    def add(self, extractive: RowResult, llm: RowResult, row: CountedRow | None = None,
            location: str = "", ident: Any = None) -> None:
        """Fold one row's two outcomes into the totals; keep ``row`` for the remedies
        when the configured summarizer leaves it over the limit."""
        for result, metrics, reasons in ((extractive, self.extractive, self.extractive_reasons),
                                         (llm, self.llm, self.llm_reasons)):
            why = result.why
            metrics.add(result.metrics, why.code if why is not None else None)
            if result.metrics.still_over_limit:  # by code, as in the metrics file
                reasons[why.code if why is not None else result.reason] += 1
        if row is not None:
            self.over.add(extractive if self.exact else llm, row, location, ident)

    def to_dict(self, prices: Prices | None) -> dict[str, Any]:
        """This target's figures for ``--json`` (``cost_usd`` to 4 decimals: 1/100 cent)."""
        llm = self.llm
        return {
            "target_max_tokens": self.target,
            "summary_target_tokens": self.config.summary_target_tokens,
            "summarizer": self.config.summarizer,
            "exact": self.exact,
            "metrics": {k: v for k, v in self.metrics.to_dict().items() if k != "processing"},
            "over_limit_reasons": dict(self.reasons),
            "remedies": None if self.fixes is None else self.fixes.to_dict(),
            "strategies": None if self.strategies is None else self.strategies.to_dict(),
            "remedies_cpu_seconds": round(self.fixes_cpu_seconds, 3),
            "extractive": {
                "trajectories_compressed": self.extractive.trajectories_compressed,
                "trajectories_still_over_limit": self.extractive.trajectories_still_over_limit,
                "total_tokens_after": self.extractive.total_tokens_after,
                "over_limit_reasons": dict(self.extractive_reasons),
                # exact: the extractive summaries are built and measured (§15)
                "fidelity": self.extractive.fidelity_summary()
                if self.extractive.fidelity_ratios.count else None,
            },
            "llm": {
                "summarization_calls": llm.total_summarization_calls,
                "input_tokens": llm.prompt_tokens,
                "output_tokens": llm.completion_tokens,
                "trajectories_still_over_limit": llm.trajectories_still_over_limit,
                "total_tokens_after": llm.total_tokens_after,
                "over_limit_reasons": dict(self.llm_reasons),
                "cost_usd": None if prices is None
                else round(prices.cost(llm.prompt_tokens, llm.completion_tokens), 4),
            },
        }


@dataclass
class Analysis:
    """The dry run of one input: its rows, their token distribution, and each target."""

    input: str
    targets: list[TargetAnalysis]
    rows: int = 0
    rejected: int = 0
    # (location, reason) of the first `REJECTS_KEPT` rejected rows
    first_rejects: list[tuple[str, str]] = field(default_factory=list)
    tokens: Distribution = field(default_factory=Distribution)
    gap: CountingGap | None = None  # per-turn sum vs chat-template count, when it can be had
    # What --distill safe / all would save on the input (§18), at the first target.
    distill: DistillPreview | None = None
    time: TimeEstimate | None = None  # how long compress would take (issue 25)

    @property
    def summarizer(self) -> str:
        return self.targets[0].config.summarizer

    def reject(self, location: str, reason: str) -> None:
        """Count one rejected row (and keep its location and reason if among the first)."""
        self.rejected += 1
        if len(self.first_rejects) < REJECTS_KEPT:
            self.first_rejects.append((location, reason))

    def histogram(self, bins: int = HISTOGRAM_BINS) -> tuple[list[int], list[int]]:
        """``(edges, counts)`` of tokens per row, in round steps, at most ``bins`` of them."""
        if self.tokens.min is None or self.tokens.max is None:
            return [], []
        edges = nice_edges(self.tokens.min, self.tokens.max, bins)
        return edges, self.tokens.histogram(edges)

    def to_dict(self, prices: Prices | None = None) -> dict[str, Any]:
        """The whole analysis as JSON-able data (``--json``)."""
        edges, counts = self.histogram()
        return {
            "input": self.input,
            "summarizer": self.summarizer,
            "rows": self.rows,
            "rows_rejected": self.rejected,
            "first_rejects": [{"location": where, "error": why}
                              for where, why in self.first_rejects],
            "tokens": self.tokens.summary(),
            "histogram": [{"from": edges[i], "to": edges[i + 1], "rows": n}
                          for i, n in enumerate(counts)],
            "prices_usd_per_million": None if prices is None
            else {"input": prices.input, "output": prices.output},
            "targets": [t.to_dict(prices) for t in self.targets],
            "counting_gap": None if self.gap is None else self.gap.to_dict(),
            "distill": None if self.distill is None else self.distill.to_dict(),
            "time_estimate": None if self.time is None else self.time.to_dict(),
        }


@dataclass
class CountingGap:
    """How far the reference's per-turn sum is from the chat-template length, per row, and
    how many rows it puts on the wrong side of each target."""

    targets: list[int]
    rows: int = 0
    difference: Distribution = field(default_factory=Distribution)  # template - turns
    turns_under_template_over: Counter[int] = field(default_factory=Counter)
    turns_over_template_under: Counter[int] = field(default_factory=Counter)

    def add(self, turns_total: int, template_total: int) -> None:
        self.rows += 1
        self.difference.add(template_total - turns_total)
        for target in self.targets:
            if turns_total <= target < template_total:
                self.turns_under_template_over[target] += 1
            elif template_total <= target < turns_total:
                self.turns_over_template_under[target] += 1

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "template_minus_turns": self.difference.summary(),
                "targets": [{"target": t,
                             "under_by_turns_over_by_template":
                                 self.turns_under_template_over[t],
                             "over_by_turns_under_by_template":
                                 self.turns_over_template_under[t]} for t in self.targets]}


def analyze(
    input_spec: str,
    config: CompressionConfig,
    *,
    targets: Sequence[int] | None = None,
    options: RunOptions | None = None,
    counter: TokenCounter | None = None,
    dialect: Dialect | None = None,
    probe_requests: int | None = None,
    seconds_per_call: float | None = None,
    **keywords: Unpack[RunKeywords],
) -> Analysis:
    """Stream ``input_spec`` once and project `compress` at each target (default: the config's),
    over the rows ``options`` (or its fields as keywords) selects, as `compress_dataset`
    would read them.

    The time estimate's seconds per LLM call come from ``probe_requests`` real summary
    requests (regions of rows compress would summarize at the first target, through its
    summarizer), else from ``seconds_per_call``, else from `DEFAULT_SECONDS_PER_CALL`.

    Raises `ConfigError` for a target that is not above ``summary_target_tokens``, and for
    a probe or a per-call figure the summarizer has no use for.
    """
    config = resolve_summarizer(config)  # `auto`: the backend compress would run
    _check_timing(config.summarizer, probe_requests, seconds_per_call)
    configs = [config.replace(target_max_tokens=t) for t in targets or [config.target_max_tokens]]
    options = run_options(options, **keywords)
    inputs = discover_inputs(input_spec, split=options.split, data_files=options.data_files)
    counter = counter or TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    analysis = Analysis(input_spec, [TargetAnalysis(c) for c in configs])
    for target in analysis.targets:
        target.strategies = StrategyComparison(exact=target.exact)
    analysis.distill = DistillPreview(configs[0].target_max_tokens)
    if gap_counter(config, counter) is not None:
        analysis.gap = CountingGap([c.target_max_tokens for c in configs])
    stream = RowStream(dialect or partial(detect, config=config),
                       sample_percent=options.sample_percent, seed=options.seed,
                       batch_rows=config.batch_rows)
    clock = WorkClock(len(configs))
    sample = ProbeSample(probe_requests, options.seed) if probe_requests else None
    run_blocking(lambda: _run(analysis, inputs, stream, counter, clock, sample))
    clock.records_read = stream.draws if options.sample_percent is not None \
        else clock.records_kept
    for target in analysis.targets:
        target.extractive.rows_rejected = target.llm.rows_rejected = analysis.rejected
    probed = None
    if sample is not None:  # no row to summarize: nothing to send
        rows = sample.rows
        probed = run_blocking(lambda: probe(configs[0], counter, rows)) if rows \
            else Probe(0, (), (), 0.0)
    analysis.time = estimate_time(config, clock, [t.target for t in analysis.targets],
                                  [t.llm.total_summarization_calls for t in analysis.targets],
                                  probe=probed, seconds_per_call=seconds_per_call)
    return analysis


def _check_timing(summarizer: str, probe_requests: int | None,
                  seconds_per_call: float | None) -> None:
    """A probe and a per-call figure only mean something for an LLM summarizer."""
    if probe_requests is not None and probe_requests < 1:
        raise ConfigError(f"--probe takes a number of requests, 1 or more, got {probe_requests}")
    if seconds_per_call is not None and not seconds_per_call > 0:
        raise ConfigError(f"--seconds-per-call must be > 0, got {seconds_per_call:g}")
    if probe_requests is not None and seconds_per_call is not None:
        raise ConfigError("--probe measures the seconds per call: give it or "
                          "--seconds-per-call, not both")
    if summarizer not in ("openai", "local") and (probe_requests or seconds_per_call):
        flag = "--probe" if probe_requests else "--seconds-per-call"
        why = ("the batch summarizer's requests wait for the provider's batch window"
               if summarizer == "batch" else f"the {summarizer} summarizer makes no request")
        raise ConfigError(f"{flag} times LLM summary requests (--summarizer openai or "
                          f"local); {why}")


async def _run(analysis: Analysis, inputs: list[Any], stream: RowStream,
               counter: TokenCounter, clock: WorkClock, sample: ProbeSample | None) -> None:
    extractive = ExtractiveSummarizer(counter.count)
    # One timed wrapper per target: the extractive summaries' own share of the work.
    timed = [TimedSummarizer(extractive) for _ in analysis.targets]
    compressors = [TrajectoryCompressor(t.config, summarizer=s, counter=counter)
                   for t, s in zip(analysis.targets, timed, strict=True)]
    await _walk(analysis, inputs, stream, counter, compressors, timed, clock, sample)


async def _walk(analysis: Analysis, inputs: list[Any], stream: RowStream,
                counter: TokenCounter, compressors: list[TrajectoryCompressor],
                timed: list[TimedSummarizer], clock: WorkClock,
                sample: ProbeSample | None) -> None:
    async with AsyncExitStack() as stack:
        for compressor in compressors:
            await stack.enter_async_context(compressor)
        for source in inputs:
            dialect = stream.detect(source)
            for batch in clock.timed(stream.batches(source)):
                start = time.perf_counter()
                as_read = [e.turns for e in batch]
                for entry in batch:
                    entry.distill_with(compressors[0])  # as compress would (§18)
                entries = [e for e in batch if e.turns is not None]
                read_turns = {id(e): t for e, t in zip(batch, as_read, strict=True)}
                for entry in batch:
                    if entry.turns is None:
                        analysis.reject(str(entry.record.location), entry.reject or "rejected")
                valid = [(e.record.row, e.turns) for e in entries if e.turns is not None]
                counted = compressors[0].rows.count([(dialect, r, t) for r, t in valid])
                clock.count_seconds += time.perf_counter() - start
                clock.records_kept += len(batch)
                kept = []
                distilled = []
                kept_entries = []
                for entry, v, c in zip(entries, valid, counted, strict=True):
                    if isinstance(c, str):
                        analysis.reject(str(entry.record.location), c)
                    else:
                        kept.append((v, c))
                        distilled.append(entry.distill)
                        kept_entries.append(entry)
                        if analysis.distill is not None:
                            saved = entry.distill.saved if entry.distill is not None else 0
                            analysis.distill.add(read_turns[id(entry)] or [], sum(c) + saved,
                                                 counter.count_many)
                if analysis.gap is not None:
                    _add_gap(analysis.gap, compressors[0].rows, counter, dialect,
                             [v for v, _ in kept], [c for _, c in kept])
                for ((row, turns), turn_tokens), stats, entry in zip(kept, distilled, kept_entries,
                                                                     strict=True):
                    one = CountedRow(row, turns, turn_tokens, dialect, stats)
                    analysis.rows += 1
                    clock.rows += 1
                    analysis.tokens.add(one.total)
                    for i, (target, compressor) in enumerate(zip(analysis.targets,
                                                                 compressors, strict=True)):
                        exact, llm = await _outcomes(compressor, one, clock, i)
                        target.add(exact, llm, one, str(entry.record.location), row_id(row))
                        if target.strategies is not None:  # untimed: not compress's work
                            await target.strategies.add(compressor, one)
                        if i == 0 and sample is not None and exact.plan.action == "compress":
                            sample.offer(ProbeRow(row, turns, exact.plan, dialect))
        # What compress would do ends here: the remedies' summaries are analyze's own.
        clock.extractive_seconds[:] = [s.total_seconds for s in timed]
        for target, compressor in zip(analysis.targets, compressors, strict=True):
            if target.over.over:
                # Only the rows left over the limit (the first `MAX_ROWS`) are re-planned.
                started = time.process_time()
                target.fixes = await find_fixes(compressor, target.over, exact=target.exact)
                target.fixes_cpu_seconds = time.process_time() - started


def _add_gap(gap: CountingGap, rows: RowCounter, counter: TokenCounter, dialect: Dialect,
             valid: list[tuple[Row, Trajectory]], counted: list[Any]) -> None:
    """Both counts of each row: the one the run uses and the other one."""
    if rows.template is not None:  # counting with the template: the sums are the other
        template_totals = [sum(c) for c in counted]
        turns_totals = [sum(c) for c in counter.count_trajectories([t for _, t in valid])]
    else:
        turns_totals = [sum(c) for c in counted]
        try:
            template_totals = rows.template_totals(
                [dialect.template_messages(r, t) for r, t in valid])
        except Exception:  # a row the template refuses: no gap for this batch
            return
    for turns_total, template_total in zip(turns_totals, template_totals, strict=True):
        gap.add(turns_total, template_total)


async def _outcomes(compressor: TrajectoryCompressor, one: CountedRow, clock: WorkClock,
                    index: int) -> tuple[RowResult, RowResult]:
    """The row's result with the extractive summarizer (exact; ``compressor`` must hold
    it) and with an LLM (`projection.projected`, `projection.projected_windows`), with
    what compress would do of the row timed on ``clock`` (target ``index``): planning, and
    for a summarized row building and serializing it; the LLM projection, which compress
    does not make, is left out of the clock."""
    start = time.perf_counter()
    plan = compressor.plan(one.turns, one.turn_tokens, one.dialect, one.distilled)
    if plan.action != "compress":
        unchanged = compressor.unchanged(one.row, one.turns, plan, one.dialect)
        clock.plan_seconds[index] += time.perf_counter() - start
        return unchanged, unchanged
    planned = time.perf_counter()
    # A row that fails is counted failed, as compress writes it (`compress_or_fail`).
    exact = await compressor.compress_or_fail(one.row, one.turns, plan, one.dialect)
    jsonio.dumps(exact.row)  # compress writes it
    clock.plan_seconds[index] += planned - start
    clock.build_seconds[index] += time.perf_counter() - planned
    clock.summarized[index] += 1
    if exact.metrics.failed:
        return exact, exact  # the LLM's summary would not change a failure nobody foresaw
    if plan.windows is not None:
        return exact, projected_windows(compressor, one, exact)
    return exact, projected(compressor, one, plan, exact.turns)
