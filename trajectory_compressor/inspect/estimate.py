"""How long `compress` would take, estimated by `analyze` (issue 25).

`analyze` does most of what `compress` does on every row (read, distill, count, plan, and
the extractive summaries, which it builds for its exact figures), so it times that work as
it goes (`WorkClock`). What it does not do is wait for an LLM:

- ``extractive``: the estimate is the measured work itself (basis ``measured``);
- ``openai`` / ``local``: the measured work without the extractive summaries, plus the
  summary calls at the run's concurrency, ``calls / concurrency x seconds per call``
  (bounded below by the endpoints' requests-per-minute limits when all set one). The
  seconds per call come from a few real requests when asked (``--probe N``: basis
  ``probed``, `inspect.probe`), else from a stated figure (``--seconds-per-call``, default
  `DEFAULT_SECONDS_PER_CALL`: basis ``assumed``);
- ``batch``: the measured work, plus the provider's batch window (basis ``batch_window``).

On a ``--sample-percent`` sample, the estimate is for `compress` on the same sample, and
also for the whole input: every record is read and parsed to be drawn, so that part is
measured on all of them, and the rest is scaled by the records read over those kept.

The sum is on the safe side: a run overlaps some of its local work with the requests.
Nothing here sends a request: the probe lives in `inspect.probe`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..core.config import CompressionConfig
from ..core.summary import Summarizer, Summary, SummaryFailed, SummaryRequest

T = TypeVar("T")

# The per-call figure assumed without --probe or --seconds-per-call: a hosted model
# writing a 750-token summary at ~75 tokens/s; SmolLM2-135M on this kind of machine
# (about 10 s a summary on two quiet cores, several times more under load: BENCHMARKS.md
# "Summary fidelity").
DEFAULT_SECONDS_PER_CALL = {"openai": 10.0, "local": 15.0}
# OpenAI's Batch API completes within this window (a `vllm run-batch` takes what it takes).
BATCH_WINDOW = "up to 24 h with the OpenAI Batch API"


@dataclass
class WorkClock:
    """Seconds `analyze` spent on the work `compress` also does, and on how many rows.

    ``read_seconds``: reading and parsing every record (drawing the sample, if any) and
    validating the rows kept; ``count_seconds``: distilling and counting them; per target
    (in the analysis's order): planning every row and building the summarized rows
    (summary, fidelity, assembly, serialization), and how much of that the extractive
    summaries themselves took. ``records_read`` / ``records_kept``: every record, and
    those the sample kept (equal without sampling).
    """

    targets: int
    rows: int = 0
    records_read: int = 0
    records_kept: int = 0
    read_seconds: float = 0.0
    count_seconds: float = 0.0
    plan_seconds: list[float] = field(default_factory=list)
    build_seconds: list[float] = field(default_factory=list)
    extractive_seconds: list[float] = field(default_factory=list)
    summarized: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for series in (self.plan_seconds, self.build_seconds, self.extractive_seconds):
            series[:] = [0.0] * self.targets
        self.summarized[:] = [0] * self.targets

    def timed(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, with the time spent producing each added to ``read_seconds``."""
        iterator = iter(items)
        while True:
            start = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                self.read_seconds += time.perf_counter() - start
                return
            self.read_seconds += time.perf_counter() - start
            yield item


class TimedSummarizer(Summarizer):
    """A summarizer that records how long each of its summaries took, and why any failed."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds: list[float] = []
        self.failures: list[str] = []

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds)

    async def summarize(self, request: SummaryRequest) -> Summary:
        start = time.perf_counter()
        try:
            return await self.inner.summarize(request)
        except SummaryFailed as failed:
            self.failures.append(failed.reason)
            raise
        finally:
            self.seconds.append(time.perf_counter() - start)

    def live_counters(self) -> dict[str, int]:
        return self.inner.live_counters()

    async def start(self) -> None:
        await self.inner.start()

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass(frozen=True)
class Probe:
    """What ``--probe N`` measured: real summary requests through the run's summarizer."""

    rows: int  # rows whose region was sent
    seconds: tuple[float, ...]  # each summary call (retries included)
    failures: tuple[str, ...]  # why calls failed (their rows fell back)
    startup_seconds: float  # starting the summarizer (the local servers); once per run

    @property
    def seconds_per_call(self) -> float:
        return sum(self.seconds) / len(self.seconds) if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "calls": len(self.seconds),
                "call_seconds": [round(s, 4) for s in self.seconds],
                "failed": len(self.failures), "first_failure": self.failures[0]
                if self.failures else None,
                "startup_seconds": round(self.startup_seconds, 4)}


def concurrency(config: CompressionConfig) -> int:
    """Summary requests a run keeps in flight: ``max_concurrent_requests``, bounded by the
    rows a run holds at once and by the endpoints' own limits (the local backend: one
    request per llama.cpp server it starts)."""
    limit = min(config.max_concurrent_requests, config.window_rows)
    if config.summarizer == "local":
        from ..summarizers.local import cpu_count, plan_servers

        return max(min(limit, plan_servers(cpu_count()).servers), 1)
    caps = [e.max_concurrency for e in config.summarization_endpoints()]
    if caps and all(c is not None for c in caps):
        limit = min(limit, sum(c for c in caps if c is not None))
    return max(limit, 1)


def requests_per_second(config: CompressionConfig) -> float | None:
    """The endpoints' requests-per-minute limits over a second, when every one sets one."""
    if config.summarizer != "openai":
        return None
    limits = [e.rpm for e in config.summarization_endpoints()]
    if not limits or any(r is None for r in limits):
        return None
    return sum(r for r in limits if r is not None) / 60


@dataclass(frozen=True)
class TargetTime:
    """The estimate at one target."""

    target: int
    summarized: int  # rows whose summary analyze built (and timed) at this target
    local_seconds: float  # the measured work compress does here besides waiting
    calls: int
    wait_seconds: float | None  # waiting for summary calls; None: a batch window
    # Without --sample-percent on the same input (None: not sampled, or a batch window).
    whole_input_seconds: float | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.wait_seconds is None else self.local_seconds + self.wait_seconds

    def to_dict(self) -> dict[str, Any]:
        seconds = self.seconds
        return {"target_max_tokens": self.target, "rows_summarized": self.summarized,
                "local_seconds": round(self.local_seconds, 4), "calls": self.calls,
                "wait_seconds": _rounded(self.wait_seconds), "seconds": _rounded(seconds),
                "whole_input_seconds": _rounded(self.whole_input_seconds)}


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)


@dataclass(frozen=True)
class TimeEstimate:
    """How long `compress` would take at each target, and what the figure rests on."""

    summarizer: str
    basis: str  # measured | probed | assumed | batch_window
    rows: int  # rows analyze read and timed
    read_seconds: float  # reading, parsing, validating, distilling, counting
    targets: list[TargetTime]
    seconds_per_call: float | None = None
    concurrency: int | None = None
    requests_per_second: float | None = None  # the endpoints' rpm limits, when all set
    probe: Probe | None = None
    whole_input_records: int | None = None  # on a sample: the records of the whole input

    def to_dict(self) -> dict[str, Any]:
        return {
            "summarizer": self.summarizer, "basis": self.basis, "rows_timed": self.rows,
            "read_and_count_seconds": round(self.read_seconds, 4),
            "whole_input_records": self.whole_input_records,
            "seconds_per_call": None if self.seconds_per_call is None
            else round(self.seconds_per_call, 4),
            "concurrency": self.concurrency,
            "requests_per_second_limit": self.requests_per_second,
            "batch_window": BATCH_WINDOW if self.basis == "batch_window" else None,
            "probe": None if self.probe is None else self.probe.to_dict(),
            "targets": [t.to_dict() for t in self.targets],
        }


def estimate_time(config: CompressionConfig, clock: WorkClock, targets: list[int],
                  calls: list[int], *, probe: Probe | None = None,
                  seconds_per_call: float | None = None) -> TimeEstimate:
    """The estimate for ``config``'s summarizer from what ``clock`` measured, with
    ``calls`` projected summary calls at each of ``targets``."""
    name = config.summarizer
    llm = name in ("openai", "local")
    per_call = None
    basis = "measured"
    if llm:
        if probe is not None and probe.seconds:
            per_call, basis = probe.seconds_per_call, "probed"
        else:
            per_call = seconds_per_call if seconds_per_call is not None \
                else DEFAULT_SECONDS_PER_CALL[name]
            basis = "assumed"
    elif name == "batch":
        basis = "batch_window"
    at_once = concurrency(config) if llm else None
    rate = requests_per_second(config)
    startup = probe.startup_seconds if probe is not None else 0.0
    # Sampled: every record was read to be drawn; the rest of the work scales.
    scale = (clock.records_read / clock.records_kept
             if clock.records_kept and clock.records_read > clock.records_kept else None)

    def wait_for(n: float) -> float:
        assert per_call is not None and at_once is not None
        wait = n / at_once * per_call + startup
        return max(wait, n / rate) if rate else wait

    rows = []
    for i, target in enumerate(targets):
        per_row = clock.count_seconds + clock.plan_seconds[i] + clock.build_seconds[i]
        if name != "extractive":  # the extractive summaries stand for nothing a model does
            per_row = max(per_row - clock.extractive_seconds[i], 0.0)
        wait: float | None = wait_for(calls[i]) if llm else 0.0
        whole = None
        if scale is not None and name != "batch":
            whole = clock.read_seconds + per_row * scale + (
                wait_for(calls[i] * scale) if llm else 0.0)
        rows.append(TargetTime(target, clock.summarized[i], clock.read_seconds + per_row,
                               calls[i] if name != "extractive" else 0,
                               None if name == "batch" else wait, whole))
    return TimeEstimate(name, basis, clock.rows, clock.read_seconds + clock.count_seconds,
                        rows, per_call, at_once, rate, probe,
                        clock.records_read if scale is not None else None)
