"""``analyze --probe N``: a few real summary requests, timed, for the time estimate.

The regions sent are those of rows `compress` would summarize, drawn evenly over the
input (a seeded reservoir, so a file whose first rows are unusual does not decide), and
they go through the very summarizer and pool `compress` would build (`make_summarizer`)
and `TrajectoryCompressor.compress_planned`, so the prompt, retries and bounds are the
run's. The summary cache is neither read nor written: a probe measures requests and
writes nothing. Each request costs what a run's request costs.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

from ..core.config import CompressionConfig
from ..core.conversation import Row, Trajectory
from ..core.plan import Plan
from ..counting.tokens import TokenCounter
from ..dialects.base import Dialect
from ..engine.compressor import TrajectoryCompressor
from .estimate import Probe, TimedSummarizer, concurrency


@dataclass(frozen=True)
class ProbeRow:
    """A row `compress` would summarize, with its plan."""

    row: Row
    turns: Trajectory
    plan: Plan
    dialect: Dialect


class ProbeSample:
    """At most ``size`` of the rows offered, each row equally likely to be kept."""

    def __init__(self, size: int, seed: int = 42) -> None:
        self.size = size
        self.rows: list[ProbeRow] = []
        self.offered = 0
        self._rng = random.Random(seed)

    def offer(self, row: ProbeRow) -> None:
        self.offered += 1
        if len(self.rows) < self.size:
            self.rows.append(row)
            return
        slot = self._rng.randrange(self.offered)
        if slot < self.size:
            self.rows[slot] = row


async def probe(config: CompressionConfig, counter: TokenCounter,
                rows: list[ProbeRow]) -> Probe:
    """Summarize ``rows``' regions with ``config``'s summarizer, at most the run's
    concurrency at a time; time each call and the summarizer's start."""
    from ..summarizers import make_summarizer

    config = config.replace(cache_enabled=False)
    summarizer = TimedSummarizer(make_summarizer(config, counter))
    compressor = TrajectoryCompressor(config, summarizer=summarizer, counter=counter)
    gate = asyncio.Semaphore(concurrency(config))

    async def one(sample: ProbeRow) -> Any:
        async with gate:
            return await compressor.compress_planned(sample.row, sample.turns, sample.plan,
                                                     sample.dialect)

    start = time.perf_counter()
    async with compressor:
        started = time.perf_counter() - start
        tasks = [asyncio.ensure_future(one(sample)) for sample in rows]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # a rejected key: the others stop before the session closes
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    return Probe(len(rows), tuple(summarizer.seconds), tuple(summarizer.failures), started)
