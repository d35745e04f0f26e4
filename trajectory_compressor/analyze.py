"""A real dry run: count, plan and project what `compress` would do, at one or more targets.

Tokens are counted once per row; each target gets its own planner pass through the very
`TrajectoryCompressor` that `compress` uses. With the extractive summarizer the analysis
builds the same summaries `compress` would, so its figures are exact; for an LLM
summarizer it projects summaries of ``summary_target_tokens`` tokens (§9). No LLM is
called and nothing is written.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from .compressor import RowResult, TrajectoryCompressor
from .config import CompressionConfig
from .errors import RowError
from .extractive import ExtractiveSummarizer
from .metrics import AggregateMetrics, Distribution
from .sources import Record, discover_inputs, read_records
from .summary import SummaryRequest, render_turns
from .textfmt import (
    Column,
    bin_of,
    clip,
    histogram_lines,
    nice_edges,
    num,
    pad,
    reason_order,
    short_reason,
    table,
)
from .tokens import TokenCounter
from .trajectory import Row, Trajectory, conversations_of

HISTOGRAM_BINS = 10


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

    def add(self, extractive: RowResult, llm: RowResult) -> None:
        """Fold one row's two outcomes into the totals."""
        for result, metrics, reasons in ((extractive, self.extractive, self.extractive_reasons),
                                         (llm, self.llm, self.llm_reasons)):
            metrics.add(result.metrics)
            if result.metrics.still_over_limit:
                reasons[result.reason] += 1

    def to_dict(self, prices: Prices | None) -> dict[str, Any]:
        """This target's figures for ``--json``."""
        llm = self.llm
        return {
            "target_max_tokens": self.target,
            "summary_target_tokens": self.config.summary_target_tokens,
            "summarizer": self.config.summarizer,
            "exact": self.exact,
            "metrics": {k: v for k, v in self.metrics.to_dict().items() if k != "processing"},
            "over_limit_reasons": dict(self.reasons),
            "extractive": {
                "trajectories_compressed": self.extractive.trajectories_compressed,
                "trajectories_still_over_limit": self.extractive.trajectories_still_over_limit,
                "total_tokens_after": self.extractive.total_tokens_after,
                "over_limit_reasons": dict(self.extractive_reasons),
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
    tokens: Distribution = field(default_factory=Distribution)

    @property
    def summarizer(self) -> str:
        return self.targets[0].config.summarizer

    def histogram(self, bins: int = HISTOGRAM_BINS) -> tuple[list[int], list[int]]:
        """``(edges, counts)`` of tokens per row, in round steps."""
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
            "tokens": self.tokens.summary(),
            "histogram": [{"from": edges[i], "to": edges[i + 1], "rows": n}
                          for i, n in enumerate(counts)],
            "prices_usd_per_million": None if prices is None
            else {"input": prices.input, "output": prices.output},
            "targets": [t.to_dict(prices) for t in self.targets],
        }


def analyze(
    input_spec: str,
    config: CompressionConfig,
    *,
    targets: Sequence[int] | None = None,
    sample_percent: float | None = None,
    seed: int = 42,
    counter: TokenCounter | None = None,
    split: str | None = None,
    data_files: str | list[str] | dict[str, Any] | None = None,
) -> Analysis:
    """Stream ``input_spec`` once and project `compress` at each target (default: the config's).

    Raises `ConfigError` for a target that is not above ``summary_target_tokens``.
    """
    configs = [config.replace(target_max_tokens=t) for t in targets or [config.target_max_tokens]]
    inputs = discover_inputs(input_spec, split=split, data_files=data_files)
    counter = counter or TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    analysis = Analysis(input_spec, [TargetAnalysis(c) for c in configs])
    asyncio.run(_run(analysis, inputs, config.batch_rows, counter,
                     sample_percent, random.Random(seed)))
    for target in analysis.targets:
        target.extractive.rows_rejected = target.llm.rows_rejected = analysis.rejected
    return analysis


async def _run(analysis: Analysis, inputs: list[Any], batch_rows: int, counter: TokenCounter,
               sample_percent: float | None, sampler: random.Random) -> None:
    extractive = ExtractiveSummarizer(counter.count)
    compressors = [TrajectoryCompressor(t.config, summarizer=extractive, counter=counter)
                   for t in analysis.targets]
    async with AsyncExitStack() as stack:
        for compressor in compressors:
            await stack.enter_async_context(compressor)
        for source in inputs:
            records = _sampled(read_records(source), sample_percent, sampler)
            while batch := list(islice(records, batch_rows)):
                valid: list[tuple[Row, Trajectory]] = []
                for record in batch:
                    try:
                        if record.error is not None:
                            raise RowError(record.error)
                        valid.append((record.row, conversations_of(record.row)))
                    except RowError:
                        analysis.rejected += 1
                counts = counter.count_trajectories([turns for _, turns in valid])
                for (row, turns), turn_tokens in zip(valid, counts, strict=True):
                    analysis.rows += 1
                    analysis.tokens.add(sum(turn_tokens))
                    for target, compressor in zip(analysis.targets, compressors, strict=True):
                        target.add(*await _outcomes(compressor, row, turns, turn_tokens))


def _sampled(records: Iterator[Record], sample_percent: float | None,
             sampler: random.Random) -> Iterator[Record]:
    # The same draws as the pipeline's sampler: one per record, in input order.
    for record in records:
        if sample_percent is None or sampler.random() < sample_percent / 100:
            yield record


async def _outcomes(compressor: TrajectoryCompressor, row: Row, turns: Trajectory,
                    turn_tokens: list[int]) -> tuple[RowResult, RowResult]:
    """The row's result with the extractive summarizer (exact) and with an LLM (projected)."""
    plan = compressor.plan(turns, turn_tokens)
    if plan.action != "compress":
        unchanged = compressor.unchanged(row, turns, plan)
        return unchanged, unchanged
    assert plan.region is not None
    exact = await compressor.compress_planned(row, turns, plan)
    config = compressor.config
    metrics = compressor.projected_metrics(turns, plan, config.summary_target_tokens)
    metrics.summarization_api_calls = 1
    metrics.summary_source = "llm"
    request = SummaryRequest(turns[plan.region.start:plan.region.end], plan.region.start,
                             config.summary_target_tokens)
    metrics.prompt_tokens = min(compressor.counter.count(render_turns(request)),
                                config.max_input_tokens)
    metrics.completion_tokens = config.summary_target_tokens
    return exact, RowResult(row, metrics, plan, changed=True)


_LABEL_W = 36
_VALUE_W = 13
_COLUMNS = 3  # targets side by side: 2 + 36 + 3 * 13 = 77 columns


def format_analysis(a: Analysis, prices: Prices | None = None) -> str:
    """The dry run as plain text, at most 80 columns wide."""
    lines = ["Dry run: no LLM call, nothing written",
             "  input   " + clip(a.input, 70, left=True),
             f"  rows    {num(a.rows)}, rejected {num(a.rejected)}"]
    if a.rows == 0:
        lines.append("  no rows to analyze")
        return "\n".join(lines)
    dist = a.tokens.summary()
    lines += ["", "Tokens per row"]
    lines += table([Column(k, right=True) for k in ("min", "p50", "p90", "p99", "max")],
                   [[num(v) for v in dist.values()]])
    edges, counts = a.histogram()
    marks: dict[int, list[str]] = {}
    for t in a.targets:
        i = bin_of(edges, t.target)
        if i is not None:
            marks.setdefault(i, []).append(num(t.target))
    lines.append("")
    lines += histogram_lines(edges, counts, {i: "<- target " + ", ".join(m)
                                             for i, m in marks.items()})
    for start in range(0, len(a.targets), _COLUMNS):
        lines += ["", *_target_block(a.targets[start:start + _COLUMNS], prices)]
    return "\n".join(lines)


def _target_block(targets: list[TargetAnalysis], prices: Prices | None) -> list[str]:
    def line(label: str, values: list[str]) -> str:
        return "  " + pad(label, _LABEL_W) + "".join(pad(v, _VALUE_W, right=True)
                                                    for v in values)

    first = targets[0]
    summary_tokens = num(first.config.summary_target_tokens)
    if first.exact:
        title = "What compress would do (extractive summaries: exact)"
    else:
        title = (f"What compress would do ({first.config.summarizer}: projected, "
                 f"{summary_tokens}-token summaries)")
    out = [title, line("target_max_tokens", [num(t.target) for t in targets])]
    out.append(line("would skip (under the target)",
                    [num(t.metrics.trajectories_skipped_under_target) for t in targets]))
    out.append(line("would compress", [num(t.metrics.trajectories_compressed) for t in targets]))
    out.append(line("would stay over the limit",
                    [num(t.metrics.trajectories_still_over_limit) for t in targets]))
    reasons = sorted({r for t in targets for r in t.reasons}, key=reason_order)
    for reason in reasons:
        out.append(line("  " + short_reason(reason), [num(t.reasons[reason]) for t in targets]))
    if not first.exact:
        out.append(line("would stay over (extractive, exact)",
                        [num(t.extractive.trajectories_still_over_limit) for t in targets]))
    out.append(line("tokens after",
                    [num(t.metrics.total_tokens_after) for t in targets]))
    out.append(line("compression ratio",
                    [f"{t.metrics.to_dict()['tokens']['overall_compression_ratio']:.4f}"
                     for t in targets]))
    out += ["", (f"LLM summarization (projected: 1 call per compressed row, "
                 f"{summary_tokens}-token summaries)")]
    if first.exact:
        out.append("  (--summarizer extractive makes no call; this is what an LLM would use)")
    out.append(line("calls", [num(t.llm.total_summarization_calls) for t in targets]))
    out.append(line("input tokens (region text only)",
                    [num(t.llm.prompt_tokens) for t in targets]))
    out.append(line("output tokens", [num(t.llm.completion_tokens) for t in targets]))
    if prices is not None:
        label = f"cost, USD (${prices.input:g}/M in, ${prices.output:g}/M out)"
        out.append(line(label if len(label) <= _LABEL_W else "cost, USD",
                        [f"{prices.cost(t.llm.prompt_tokens, t.llm.completion_tokens):,.2f}"
                         for t in targets]))
    return out
