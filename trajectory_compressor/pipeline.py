"""The streaming pipeline: read → count → plan → summarize → assemble → write, in order (§7).

Rows are read lazily and counted in batches; rows that need a summary run concurrently,
and a window of at most ``window_rows`` rows is held so that results are written strictly
in input order with memory bounded by the window, never by the dataset.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from typing import Any

from . import jsonio
from .compressor import RowResult, TrajectoryCompressor
from .errors import CompressorError, RowError
from .layout import OutputLayout
from .metrics import AggregateMetrics
from .plan import Plan
from .progress import Progress
from .sinks import JsonlSink, write_atomic
from .sources import InputFile, Record, read_records
from .trajectory import conversations_of, row_id

MAX_WARNINGS = 20


class StrictStop(CompressorError):
    """`--strict` met a bad row or a failed one: the run stops, nothing is committed."""


@dataclass
class RunOptions:
    """How to run, beyond the compression config."""

    sample_percent: float | None = None
    seed: int = 42
    strict: bool = False
    quiet: bool = False


@dataclass
class RunResult:
    """What a finished run did."""

    metrics: AggregateMetrics
    layout: OutputLayout
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        m = self.metrics
        return 1 if (m.rows_rejected or m.trajectories_failed) else 0


@dataclass
class _Slot:
    """A row waiting for its turn to be written: a result, or the task producing it."""

    record: Record
    result: RowResult | None = None
    task: asyncio.Task[RowResult] | None = None


class Pipeline:
    """One run over a list of input files into an `OutputLayout`."""

    def __init__(
        self,
        compressor: TrajectoryCompressor,
        inputs: list[InputFile],
        layout: OutputLayout,
        options: RunOptions | None = None,
    ) -> None:
        self.compressor = compressor
        self.config = compressor.config
        self.inputs = inputs
        self.layout = layout
        self.options = options or RunOptions()
        self.metrics = AggregateMetrics()
        self.progress = Progress(quiet=self.options.quiet)
        self._sampler = random.Random(self.options.seed)
        self._warnings: list[str] = []
        self._over_limit: JsonlSink | None = None
        self._rejects: JsonlSink | None = None
        self._in_flight = 0
        self._tasks: set[asyncio.Task[RowResult]] = set()
        # Set to the first exception a row task raises (a rejected API key): the run
        # stops at once instead of when that row reaches the head of the window.
        self._stop: asyncio.Future[BaseException] | None = None

    async def run(self) -> RunResult:
        """Process every input; commit all outputs only when everything went through."""
        started = time.time()
        self.metrics.processing_start_time = datetime.now().isoformat()
        self._over_limit = JsonlSink(self.layout.over_limit)
        self._rejects = JsonlSink(self.layout.rejects)
        sinks: list[Any] = [self._over_limit, self._rejects]
        self._stop = asyncio.get_running_loop().create_future()
        try:
            async with self.compressor:
                try:
                    for source in self.inputs:
                        sink = self._open_sink(source)
                        sinks.append(sink)
                        await self._run_file(source, sink)
                finally:
                    await self._cancel_tasks()  # before the summarizer closes its session
        except BaseException:
            for sink in sinks:
                sink.discard()
            raise
        finally:
            self.progress.close()
        for sink in sinks:
            sink.commit()
        self.metrics.processing_end_time = datetime.now().isoformat()
        self.metrics.processing_duration_seconds = time.time() - started
        if self.config.metrics_enabled:
            write_atomic(self.layout.metrics, jsonio.dumps_pretty(self.metrics.to_dict()))
        return RunResult(self.metrics, self.layout, self._warnings)

    def _open_sink(self, source: InputFile) -> Any:
        out = self.layout.outputs[source.path]
        if self.layout.formats[source.path] == "parquet":
            from .parquet import ParquetSink

            return ParquetSink(out)
        return JsonlSink(out)

    def _sampled(self, records: Iterator[Record]) -> Iterator[Record]:
        if self.options.sample_percent is None:
            yield from records
            return
        keep = self.options.sample_percent / 100
        for record in records:
            if self._sampler.random() < keep:
                yield record

    async def _run_file(self, source: InputFile, sink: Any) -> None:
        window: deque[_Slot] = deque()
        records = self._sampled(read_records(source))
        empty = True
        while batch := list(islice(records, self.config.batch_rows)):
            empty = False
            self._check_stop()
            valid: list[tuple[Record, list[dict[str, Any]]]] = []
            for record in batch:
                try:
                    if record.error is not None:
                        raise RowError(record.error)
                    valid.append((record, conversations_of(record.row)))
                except RowError as exc:
                    self._flush_ready(window, sink)
                    self._reject(record, exc.reason)
            counts = await self._count([turns for _, turns in valid])
            for (record, turns), turn_tokens in zip(valid, counts, strict=True):
                plan = self.compressor.plan(turns, turn_tokens)
                slot = _Slot(record)
                if plan.action == "compress":
                    slot.task = self._spawn(self._compress(record, turns, plan))
                else:
                    slot.result = self.compressor.unchanged(record.row, turns, plan)
                window.append(slot)
                self._flush_ready(window, sink)
                while len(window) >= self.config.window_rows:
                    await self._await_head(window, sink)
        while window:
            await self._await_head(window, sink)
        if empty:
            self._warn(f"{source.path}: file is empty (no rows)")

    async def _count(self, trajectories: list[list[dict[str, Any]]]) -> list[list[int]]:
        counter = self.compressor.counter
        if self._in_flight:
            # Keep serving in-flight summaries while a batch is tokenized.
            return await asyncio.to_thread(counter.count_trajectories, trajectories)
        return counter.count_trajectories(trajectories)

    async def _compress(self, record: Record, turns: list[dict[str, Any]], plan: Plan) -> RowResult:
        self._in_flight += 1
        self.progress.in_flight(self._in_flight)
        try:
            return await self.compressor.compress_planned(record.row, turns, plan)
        finally:
            self._in_flight -= 1
            self.progress.in_flight(self._in_flight)
            self.progress.live(self.compressor.summarizer.live_counters())

    def _spawn(self, coro: Coroutine[Any, Any, RowResult]) -> asyncio.Task[RowResult]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[RowResult]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # also marks it retrieved: a run may stop before its turn
        if exc is not None and self._stop is not None and not self._stop.done():
            self._stop.set_result(exc)

    def _check_stop(self) -> None:
        if self._stop is not None and self._stop.done():
            raise self._stop.result()

    async def _cancel_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _await_head(self, window: deque[_Slot], sink: Any) -> None:
        head = window[0]
        if head.task is not None and not head.task.done():
            assert self._stop is not None
            either: list[asyncio.Future[Any]] = [head.task, self._stop]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            self._check_stop()
        self._flush_ready(window, sink)

    def _flush_ready(self, window: deque[_Slot], sink: Any) -> None:
        while window:
            head = window[0]
            if head.task is not None:
                if not head.task.done():
                    return
                head.result = head.task.result()  # re-raises a fatal summarizer error
            window.popleft()
            assert head.result is not None
            self._write(head.record, head.result, sink)

    def _write(self, record: Record, result: RowResult, sink: Any) -> None:
        metrics = result.metrics
        if metrics.failed and self.options.strict:
            raise StrictStop(f"{record.location}: {metrics.error}")
        self.metrics.add(metrics)
        self.progress.row(metrics)
        if metrics.still_over_limit:
            entry: dict[str, Any] = {
                "location": str(record.location),
                **record.location.to_dict(),
                "id": row_id(result.row),
                "reason": result.reason,
                "metrics": metrics.to_dict(),
            }
            if not self.config.save_over_limit:
                entry["row"] = result.row
            assert self._over_limit is not None
            self._over_limit.write_row(entry)
            if not self.config.save_over_limit:
                return
        if not result.changed and record.raw is not None and isinstance(sink, JsonlSink):
            sink.write_raw(record.raw)
        else:
            sink.write_row(result.row)

    def _reject(self, record: Record, reason: str) -> None:
        message = f"{record.location}: {reason}"
        if self.options.strict:
            raise StrictStop(message)
        self.metrics.rows_rejected += 1
        self.progress.rejected()
        entry: dict[str, Any] = {"location": str(record.location), **record.location.to_dict(),
                                 "error": reason}
        if record.raw is not None:
            entry["preview"] = record.raw[:200].decode("utf-8", errors="replace")
        assert self._rejects is not None
        self._rejects.write_row(entry)
        self._warn(message)

    def _warn(self, message: str) -> None:
        self._warnings.append(message)
        if len(self._warnings) <= MAX_WARNINGS:
            self.progress.write(f"warning: {message}")
        elif len(self._warnings) == MAX_WARNINGS + 1:
            self.progress.write("warning: more problems; see the rejects file")


def run_pipeline(
    compressor: TrajectoryCompressor,
    inputs: list[InputFile],
    layout: OutputLayout,
    options: RunOptions | None = None,
) -> RunResult:
    """Run a `Pipeline` to completion from sync code."""
    return asyncio.run(Pipeline(compressor, inputs, layout, options).run())
