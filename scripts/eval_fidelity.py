"""Summary fidelity of the summarizers on sample data (issue 17 item 5, SPEC §15).

For each summarizer and `summary_references` setting, every row over the target is
compressed one at a time (no concurrency, so the seconds are per summary) and its
`fidelity` read back: the share of its region's identifiers the summary keeps, and of
those the later turns mention again.

    PYTHONPATH=. .venv/bin/python scripts/eval_fidelity.py \\
        --summarizers extractive-plain,extractive,lossy --references off,tail
    PYTHONPATH=. .venv/bin/python scripts/eval_fidelity.py --summarizers local \\
        --references off,tail --rows 6

Summarizers: ``extractive`` (the shipped one), ``extractive-plain`` (the same without the
tail-referenced identifiers it now lists first: the summarizer before issue 17), ``lossy``
(the fake server's lossy profile: a fixed sentence that keeps nothing), ``local`` (the
bundled SmolLM2-135M through llama.cpp; slow, so ``--rows`` samples the first N rows over
the target). Prints a Markdown table (``--json FILE`` writes the figures too).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_llm_server import FakeLLMServer, lossy_reply  # noqa: E402
from trajectory_compressor.core.config import CompressionConfig  # noqa: E402
from trajectory_compressor.core.extractive import ExtractiveSummarizer  # noqa: E402
from trajectory_compressor.core.summary import (  # noqa: E402
    Summarizer,
    Summary,
    SummaryRequest,
    summary_body,
)
from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402
from trajectory_compressor.engine.compressor import TrajectoryCompressor  # noqa: E402

DEFAULT_INPUT = ROOT / "data_samples" / "trajectories.jsonl"


class PlainExtractive(Summarizer):
    """The extractive summarizer as it was before it listed tail-referenced identifiers."""

    name = "extractive"

    def __init__(self, inner: ExtractiveSummarizer) -> None:
        self.inner = inner

    async def summarize(self, request: SummaryRequest) -> Summary:
        return await self.inner.summarize(dataclasses.replace(request, tail_items=()))


def rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


async def measure(compressor: TrajectoryCompressor, data: list[dict[str, Any]],
                  limit: int | None) -> dict[str, Any]:
    ratios: list[float] = []
    tails: list[float] = []
    tokens: list[int] = []
    seconds: list[float] = []
    sources: dict[str, int] = {}
    async with compressor:
        for row in data:
            if limit is not None and len(ratios) >= limit:
                break
            turns = row["conversations"]
            plan = compressor.plan(turns)
            if plan.action != "compress":
                continue
            start = time.perf_counter()
            result = await compressor.compress_planned(row, turns, plan)
            elapsed = time.perf_counter() - start
            m = result.metrics
            if m.fidelity is None or not m.was_compressed:
                continue
            seconds.append(elapsed)
            ratios.append(m.fidelity.ratio)
            if m.fidelity.tail_items:
                tails.append(m.fidelity.tail_kept / m.fidelity.tail_items)
            summary = result.turns[m.turns_compressed_start_idx]["value"]
            tokens.append(compressor.counter.count(summary_body(summary)))
            sources[str(m.summary_source)] = sources.get(str(m.summary_source), 0) + 1
    ordered = sorted(ratios)
    return {
        "summaries": len(ratios),
        "mean": round(statistics.fmean(ratios), 3) if ratios else None,
        "p10": round(ordered[max(math.ceil(0.1 * len(ordered)) - 1, 0)], 3) if ordered
        else None,
        "tail_mean": round(statistics.fmean(tails), 3) if tails else None,
        "summary_tokens": round(statistics.fmean(tokens)) if tokens else None,
        "seconds": round(statistics.fmean(seconds), 3) if seconds else None,
        "sources": sources,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--summarizers", default="extractive-plain,extractive,lossy")
    parser.add_argument("--references", default="off,tail")
    parser.add_argument("--rows", type=int, default=None,
                        help="at most this many summaries per setting (the first rows)")
    parser.add_argument("--target-max-tokens", type=int, default=None)
    parser.add_argument("--summary-target-tokens", type=int, default=None)
    parser.add_argument("--request-timeout", type=float, default=None,
                        help="seconds per request (a loaded machine needs more for local)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    data = list(rows(args.input))
    counter = TokenCounter.load()
    base = CompressionConfig(cache_enabled=False, max_concurrent_requests=1).replace(
        target_max_tokens=args.target_max_tokens,
        summary_target_tokens=args.summary_target_tokens, request_timeout=args.request_timeout)
    results = []
    with ExitStack() as stack:
        for name in args.summarizers.split(","):
            for references in args.references.split(","):
                config = base.replace(summary_references=references)
                summarizer: Summarizer | None
                if name == "extractive":
                    config = config.replace(summarizer="extractive")
                    summarizer = ExtractiveSummarizer(counter.count)
                elif name == "extractive-plain":
                    config = config.replace(summarizer="extractive")
                    summarizer = PlainExtractive(ExtractiveSummarizer(counter.count))
                elif name == "lossy":
                    server = stack.enter_context(
                        FakeLLMServer(reply=lossy_reply()).in_thread())
                    config = config.replace(summarizer="openai", base_url=server.url,
                                            api_key_env=None)
                    summarizer = None
                elif name == "local":
                    config = config.replace(summarizer="local")
                    summarizer = None
                else:
                    raise SystemExit(f"unknown summarizer {name!r}")
                compressor = TrajectoryCompressor(config, summarizer, counter)
                figures = asyncio.run(measure(compressor, data, args.rows))
                results.append({"summarizer": name, "references": references, **figures})
                print(f"{name} / {references}: {figures}", file=sys.stderr, flush=True)
    print("| summarizer | references | summaries | mean fidelity | p10 | tail items kept "
          "| summary tokens | s / summary |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['summarizer']} | {r['references']} | {r['summaries']} | {r['mean']} | "
              f"{r['p10']} | {r['tail_mean']} | {r['summary_tokens']} | {r['seconds']} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
