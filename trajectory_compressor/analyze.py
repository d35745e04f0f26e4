"""A real dry run: count and plan every row, project what compression would do (§9)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from itertools import islice

from .config import CompressionConfig
from .errors import RowError
from .metrics import Distribution
from .sources import discover_inputs, read_records
from .tokens import TokenCounter
from .trajectory import conversations_of


@dataclass
class Analysis:
    """What `compress` would do with an input under one config."""

    target_max_tokens: int
    rows: int = 0
    rejected: int = 0
    skipped: int = 0
    compressed: int = 0
    over_limit: int = 0
    over_limit_reasons: dict[str, int] = field(default_factory=dict)
    summarization_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    tokens: Distribution = field(default_factory=Distribution)


def analyze(
    input_spec: str,
    config: CompressionConfig,
    *,
    sample_percent: float | None = None,
    seed: int = 42,
    counter: TokenCounter | None = None,
) -> Analysis:
    """Stream ``input_spec`` and plan each row without calling any summarizer."""
    from .plan import plan_trajectory

    counter = counter or TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    sampler = random.Random(seed)
    result = Analysis(config.target_max_tokens)
    for source in discover_inputs(input_spec):
        records = iter(read_records(source))
        while batch := list(islice(records, config.batch_rows)):
            trajectories = []
            for record in batch:
                if sample_percent is not None and sampler.random() >= sample_percent / 100:
                    continue
                try:
                    if record.error is not None:
                        raise RowError(record.error)
                    trajectories.append(conversations_of(record.row))
                except RowError:
                    result.rejected += 1
            for turns, counts in zip(
                trajectories, counter.count_trajectories(trajectories), strict=True
            ):
                plan = plan_trajectory([t["from"] for t in turns], counts, config)
                result.rows += 1
                result.tokens.add(plan.total_tokens)
                if plan.action == "skip":
                    result.skipped += 1
                    continue
                if plan.region is not None:
                    result.compressed += 1
                    result.summarization_calls += 1
                    result.summarizer_input_tokens += plan.region_tokens
                    result.summarizer_output_tokens += config.summary_target_tokens
                if plan.reason:
                    result.over_limit += 1
                    reason = plan.reason or "over the target"
                    result.over_limit_reasons[reason] = result.over_limit_reasons.get(reason, 0) + 1
    return result


def format_analysis(a: Analysis) -> str:
    """A plain-text report that fits 80 columns."""
    dist = a.tokens.summary()
    lines = [
        f"Dry run (target_max_tokens = {a.target_max_tokens:,}): no LLM call, nothing written",
        f"  rows                 {a.rows:>10,}   rejected {a.rejected:,}",
        "  tokens per row       " + "  ".join(f"{k} {v:,}" for k, v in dist.items()
                                              if v is not None),
        f"  would skip           {a.skipped:>10,}",
        f"  would compress       {a.compressed:>10,}",
        f"  would stay over      {a.over_limit:>10,}",
    ]
    lines += [f"    {n:>6,} × {reason}" for reason, n in a.over_limit_reasons.items()]
    lines += [
        f"  summarization calls  {a.summarization_calls:>10,}",
        f"  summarizer input     {a.summarizer_input_tokens:>10,} tokens (region text)",
        f"  summarizer output    {a.summarizer_output_tokens:>10,} tokens (at the target)",
    ]
    return "\n".join(lines)
