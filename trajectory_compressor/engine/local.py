"""The streaming pipeline: read → count → plan → summarize → assemble → write, in order (§7).

Rows are read lazily and counted in batches; rows that need a summary run concurrently,
and a window of at most ``window_rows`` rows is held so that results are written strictly
in input order with memory bounded by the window, never by the dataset. Writing, and the
checkpoints a `--resume` continues from, belong to `RunWriter`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from ..core.conversation import Trajectory
from ..core.distill_row import DistillStats
from ..core.errors import OutputError, ResumeError, one_line_error
from ..core.metrics import AggregateMetrics
from ..core.plan import Plan
from ..counting.identity import tokenizer_identity
from ..dialects.base import Dialect, row_id
from ..formats import jsonio
from ..formats.base import InputFile, Record, write_atomic
from ..formats.hf_card import card_path, dataset_card
from ..formats.registry import count_rows
from .blocking import run_blocking
from .checkpoint import Checkpoint, check_resumable, input_fingerprint, settings_fingerprint
from .committed import committed_record
from .compressor import RowResult, TrajectoryCompressor
from .count import Item
from .layout import OutputLayout
from .options import RunOptions
from .paths import run_record
from .progress import Progress
from .projection import CountedRow
from .replan import OverRows
from .resume_guard import ConsumedDigest, check_checkpoint
from .stored_fixes import STORED_ROWS, compute_fixes
from .stream import Entry, RowStream
from .writer import RunWriter, StrictStop

__all__ = ["Pipeline", "RunOptions", "RunResult", "StrictStop", "run_pipeline"]

T = TypeVar("T")


@dataclass
class RunResult:
    """What a finished run did."""

    metrics: AggregateMetrics
    layout: OutputLayout
    warnings: list[str] = field(default_factory=list)
    resumed: bool = False

    @property
    def exit_code(self) -> int:
        m = self.metrics
        return 1 if (m.rows_rejected or m.trajectories_failed) else 0


@dataclass
class _Slot:
    """A row waiting for its turn to be written: a result, the task producing it, or the
    reason it is rejected. ``draws`` counts the sampler draws up to and including it."""

    record: Record
    draws: int
    dialect: Dialect
    size: int = 0
    turns: Trajectory | None = None
    result: RowResult | None = None
    task: asyncio.Task[RowResult] | None = None
    reject: str | None = None
    distill: DistillStats | None = None
    counted: CountedRow | None = None  # the row as planned, until it is written


# A batch off the counting thread: why each row's distilling failed (or None), and the
# counts of its rows with turns (or why one cannot be counted).
_Counted = tuple[list[str | None], list[list[int] | str]]


class Pipeline:
    """One run over a list of input files into an `OutputLayout`."""

    def __init__(
        self,
        compressor: TrajectoryCompressor,
        inputs: list[InputFile],
        layout: OutputLayout,
        options: RunOptions | None = None,
        dialect: Dialect | Callable[[Iterable[Any]], Dialect] | None = None,
    ) -> None:
        self.compressor = compressor
        self.config = compressor.config
        # One dialect for every file, or a function that picks each file's (detection).
        self.dialect = dialect or compressor.dialect
        self.inputs = inputs
        self.layout = layout
        self.options = options or RunOptions()
        self.metrics = AggregateMetrics()
        self.progress = Progress(quiet=True)
        self.stream = RowStream(self.dialect, sample_percent=self.options.sample_percent,
                                seed=self.options.seed, batch_rows=self.config.batch_rows)
        self._in_flight = 0
        self._counting: ThreadPoolExecutor | None = None
        self._window_chars = 0
        # The first rows left over the limit, as planned: "what would fix it" is searched
        # for them once at the end of the run and stored with it (`stored_fixes`).
        self._over = OverRows(limit=STORED_ROWS)
        self._tasks: set[asyncio.Task[RowResult]] = set()
        # Set to the first exception a row task raises (a rejected API key): the run
        # stops at once instead of when that row reaches the head of the window.
        self._stop: asyncio.Future[BaseException] | None = None

    # Checkpoints hold a digest of the input bytes consumed (`resume_guard`); a pipeline
    # whose runs are never resumed from a checkpoint turns it off.
    digest_inputs = True

    async def run(self) -> RunResult:
        """Process every input; commit all outputs only when everything went through.

        Interrupted (Ctrl-C, a fatal error), the temporary outputs and a checkpoint are
        kept for `--resume`; a `--strict` stop deletes them.
        """
        settings = settings_fingerprint(self.config, self.layout.outputs,
                                        self.options.sample_percent, self.options.seed)
        # A resume must count with the same tokenizer files, mode and template.
        settings["tokenizer"] = tokenizer_identity(self.config)
        fingerprints = (input_fingerprint(self.inputs), settings)
        self._consumed = ConsumedDigest(self.inputs if self.digest_inputs else [])
        try:
            return await self._run(fingerprints)
        finally:
            self._consumed.close()

    async def _run(self, fingerprints: tuple[list[dict[str, Any]], dict[str, Any]]
                   ) -> RunResult:
        resume = self._resume_point(*fingerprints)
        inputs = self.inputs
        self.progress = Progress(quiet=self.options.quiet,
                                 total=None if self.options.sample_percent is not None
                                 else lambda: count_rows(inputs))
        self.compressor.summarizer.notify = lambda text: self.progress.write(f"warning: {text}")
        writer = _reopen(RunWriter, self.layout, self.config, self.progress, fingerprints,
                         self.options.strict, resume,
                         resuming=resume is not None)
        self.writer = writer
        writer.consumed = self._consumed
        if self.options.summarizer_rows is not None:
            _reopen(writer.open_summarizer_rows, Path(self.options.summarizer_rows), resume,
                    resuming=resume is not None)
            self.compressor.emit_summarizer_rows = True
        self.metrics = writer.metrics
        if resume is None:
            self.metrics.processing_start_time = datetime.now().isoformat()
        else:
            self.progress.restore(self.metrics)
            self.stream.replay(resume.draws)
        self._stop = asyncio.get_running_loop().create_future()
        try:
            async with self.compressor:
                try:
                    await self._run_files(writer, resume)
                finally:
                    await self._cancel_tasks()  # before the summarizer closes its session
        except StrictStop:
            writer.abandon()
            raise
        except BaseException:
            writer.stop()
            raise
        finally:
            self.progress.close()
            if self._counting is not None:
                self._counting.shutdown(wait=False)
        writer.commit()
        card = card_path(self.layout.outputs.values())
        if card is not None:  # every split by its name for datasets.load_dataset(OUTPUT)
            write_atomic(card, dataset_card(self.layout.outputs.values()))
        self.metrics.processing_end_time = datetime.now().isoformat()
        self.metrics.processing_duration_seconds = writer.elapsed()
        # Searched once the outputs are committed (the run's lock is still held; its time
        # is the section's own, not the run's), from the rows this run planned; a resumed
        # run did not plan the rows before its checkpoint and stores none (`report`
        # re-plans then).
        remedies = (await compute_fixes(self.compressor, self._over)
                    if self._over.over and resume is None and self.config.metrics_enabled
                    else None)
        if self.config.metrics_enabled:
            report = {**self.metrics.to_dict(), "settings": self.config.run_settings(),
                      "tokenizer": tokenizer_identity(self.config),
                      "run": run_record(self.inputs, self.layout, self.config,
                                        self.options.sample_percent, self.options.seed),
                      **({"gates": dict(self.options.gates)} if self.options.gates
                         else {}),
                      "committed": committed_record(self.layout.outputs.values(),
                                                    self.metrics.rows_out),
                      **({"remedies": remedies} if remedies is not None else {})}
            write_atomic(self.layout.metrics, jsonio.dumps_pretty(report))
        return RunResult(self.metrics, self.layout, writer.warnings, resumed=resume is not None)

    async def _run_files(self, writer: RunWriter, resume: Checkpoint | None) -> None:
        for index, source in enumerate(self.inputs):
            skip, sink_state = 0, None
            if resume is not None and index <= resume.file_index:
                if index < resume.file_index:
                    _reopen(writer.adopt_finished, self.layout.outputs[source.path])
                    continue
                skip, sink_state = resume.skip, resume.output
            dialect = self.stream.detect(source)
            _reopen(writer.open_file, index, source, sink_state, dialect.text_chars,
                    resuming=sink_state is not None)
            await self._run_file(source, skip)
            writer.finish_file(self.stream.draws)

    def _resume_point(self, inputs: list[dict[str, Any]],
                      settings: dict[str, Any]) -> Checkpoint | None:
        """The checkpoint to continue from, or None to start from the first row."""
        path = self.layout.checkpoint
        if not self.options.resume:
            if path.exists():
                self._note(f"an interrupted run's checkpoint {path} is discarded; starting "
                           "over (pass --resume to continue it instead)")
                path.unlink()
            return None
        if not path.exists():
            self._note(f"no checkpoint at {path}; starting from the beginning")
            return None
        checkpoint = Checkpoint.load(path)
        check_resumable(checkpoint, inputs, settings)
        check_checkpoint(checkpoint, path, self.inputs, self._consumed,
                         sampled=self.options.sample_percent is not None)
        return checkpoint

    def _note(self, message: str) -> None:
        if not self.options.quiet:
            self.progress.write(f"note: {message}")

    async def _run_file(self, source: InputFile, skip: int) -> None:
        window: deque[_Slot] = deque()
        self._window_chars = 0
        window_chars = self.config.window_mb * 2**20
        # Batch k+1 is distilled and tokenized on the counting thread (the tokenizer
        # releases the GIL) while batch k is planned and written and batch k+2 is read:
        # one batch ahead.
        ahead: tuple[list[_Slot], asyncio.Future[_Counted]] | None = None
        try:
            for batch in self.stream.batches(source, skip):
                self._check_stop()
                slots = [self._slot(entry) for entry in batch]
                counting = self._count(batch, slots)
                if ahead is not None:
                    await self._place(window, *ahead, window_chars)
                ahead = (slots, counting)
            if ahead is not None:
                await self._place(window, *ahead, window_chars)
                ahead = None
            while window:
                await self._await_head(window)
        finally:
            if ahead is not None:
                ahead[1].cancel()
            for slot in window:
                if slot.task is not None:
                    slot.task.cancel()
        if not self.stream.read_any:
            self.writer.empty_file(source)

    async def _place(self, window: deque[_Slot], slots: list[_Slot],
                     counting: asyncio.Future[_Counted], window_chars: float) -> None:
        """Plan a counted batch and move it into the window, writing what is ready."""
        problems, counted_rows = await counting
        counts = iter(counted_rows)
        for slot, problem in zip(slots, problems, strict=True):
            if problem is not None:
                self.writer.warn(f"{slot.record.location}: {problem}")
            if slot.turns is not None:
                counted = next(counts)
                if isinstance(counted, str):
                    slot.reject, slot.turns = counted, None
                else:
                    self._start(slot, counted)
            window.append(slot)
            self._window_chars += slot.size
            self._flush_ready(window)
            while window and (len(window) >= self.config.window_rows
                              or self._window_chars >= window_chars):
                await self._await_head(window)

    def _slot(self, entry: Entry) -> _Slot:
        if entry.reject is not None and self.options.strict:
            raise StrictStop(f"{entry.record.location}: {entry.reject}")
        return _Slot(entry.record, entry.draws, entry.dialect, entry.size, entry.turns,
                     reject=entry.reject)

    def _start(self, slot: _Slot, turn_tokens: list[int]) -> None:
        assert slot.turns is not None
        try:
            plan = self.compressor.plan(slot.turns, turn_tokens, slot.dialect, slot.distill)
        except Exception as exc:
            slot.reject, slot.turns = f"cannot plan the row: {one_line_error(exc)}", None
            return
        slot.counted = CountedRow(slot.record.row, slot.turns, turn_tokens, slot.dialect,
                                  slot.distill)
        if plan.action == "compress":
            slot.record.raw = None  # a summarized row is written anew: its line is not needed
            slot.task = self._spawn(self._compress(slot.record, slot.turns, plan, slot.dialect))
        else:
            slot.result = self.compressor.unchanged(slot.record.row, slot.turns, plan,
                                                    slot.dialect)
        slot.turns = None

    def _count(self, batch: list[Entry], slots: list[_Slot]) -> asyncio.Future[_Counted]:
        """Start distilling (§18) and counting a batch on the counting thread: why each
        row's distilling failed (or None), and the counts of the rows with turns. The
        slots are not touched elsewhere until the future is done.

        Always the same single thread: each new thread would get its own malloc arena,
        and each arena keeps a batch's worth of memory after the batch is gone; one
        thread also keeps the memo's updates in one place."""
        if self._counting is None:
            self._counting = ThreadPoolExecutor(1, thread_name_prefix="count")

        def distill_and_count() -> _Counted:
            problems = []
            for entry, slot in zip(batch, slots, strict=True):
                problems.append(entry.distill_with(self.compressor))
                slot.turns, slot.distill = entry.turns, entry.distill
            items: list[Item] = [(s.dialect, s.record.row, s.turns) for s in slots
                                 if s.turns is not None]
            return problems, self.compressor.rows.count(items)

        return asyncio.get_running_loop().run_in_executor(self._counting, distill_and_count)

    async def _compress(self, record: Record, turns: Trajectory, plan: Plan,
                        dialect: Dialect) -> RowResult:
        self._in_flight += 1
        self.progress.in_flight(self._in_flight)
        try:
            # The row within this run, the same after a resume (see `SummaryRequest`).
            origin = f"{self.metrics.processing_start_time} {record.location}"
            # A row that fails is written unchanged with its error (`compress_or_fail`,
            # the rule `analyze` follows too); every row's trouble stops the run.
            result = await self.compressor.compress_or_fail(record.row, turns, plan,
                                                            dialect, origin=origin)
            error = result.metrics.error
            if error is not None and error.startswith("compression failed: "):
                self.writer.warn(f"{record.location}: {error}")
            return result
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

    async def _await_head(self, window: deque[_Slot]) -> None:
        head = window[0]
        if head.task is not None and not head.task.done():
            assert self._stop is not None
            either: list[asyncio.Future[Any]] = [head.task, self._stop]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            self._check_stop()
        self._flush_ready(window)

    def _flush_ready(self, window: deque[_Slot]) -> None:
        while window:
            head = window[0]
            if head.task is not None:
                if not head.task.done():
                    return
                head.result = head.task.result()  # re-raises a fatal summarizer error
            window.popleft()
            self._window_chars -= head.size
            if head.reject is not None:
                self.writer.reject(head.record, head.reject, head.draws)
            else:
                assert head.result is not None
                if head.counted is not None:
                    self._over.add(head.result, head.counted, str(head.record.location),
                                   row_id(head.record.row))
                    head.counted = None
                self.writer.write(head.record, head.result, head.draws)


def _reopen(open_output: Callable[..., T], *args: Any, resuming: bool = True) -> T:
    """Open outputs, saying in one sentence what failed: a resume that finds its files
    gone, or an output that cannot be created."""
    try:
        return open_output(*args)
    except FileNotFoundError as exc:
        what = exc.filename or exc
        if not resuming:
            raise OutputError(f"cannot write {what}: {exc.strerror or exc}") from None
        raise ResumeError(f"cannot resume: the partial output {what} is missing or damaged; "
                          "run without --resume to start over") from None
    except OSError as exc:
        raise OutputError(f"cannot write {exc.filename or exc}: {exc.strerror or exc}") from None


def run_pipeline(
    compressor: TrajectoryCompressor,
    inputs: list[InputFile],
    layout: OutputLayout,
    options: RunOptions | None = None,
    dialect: Dialect | Callable[[Iterable[Any]], Dialect] | None = None,
) -> RunResult:
    """Run a `Pipeline` to completion from sync code (``dialect``: see `Pipeline`)."""
    return run_blocking(lambda: Pipeline(compressor, inputs, layout, options, dialect).run())
