"""Writing a run's results in input order — data rows, over-limit entries, rejects — and
the checkpoints that make it resumable (§7).

`RunWriter` owns every sink of a run. Rows reach it strictly in input order, so after
each row the sinks hold exactly the results of the input up to that row: that is the cut
a checkpoint records (the row's position, the sinks' flush states, the metrics).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import reasons
from ..core.config import CompressionConfig
from ..core.errors import CompressorError, one_line_error
from ..core.metrics import AggregateMetrics, aggregate_from_state, aggregate_state
from ..dialects.base import row_id
from ..formats.base import FinishedFile, InputFile, Record, Sink, text_chars
from ..formats.json_array import JsonArraySink
from ..formats.jsonl import JsonlSink
from ..formats.registry import open_sink
from .checkpoint import Checkpoint
from .compressor import RowResult
from .layout import OutputLayout
from .lock import check_held, lost
from .progress import Progress
from .resume_guard import ConsumedDigest

MAX_WARNINGS = 20
# Seconds between two checks that the run's lock is still its own, made before a row is
# written (so a run that waited long on a summary checks before it writes), besides the
# checks at each checkpoint and at the commit.
LOCK_CHECK_SECONDS = 0.5


class StrictStop(CompressorError):
    """`--strict` met a bad row or a failed one: the run stops, nothing is committed."""


class RunWriter:
    """The sinks of one run, the metrics of what went into them, and its checkpoints."""

    def __init__(
        self,
        layout: OutputLayout,
        config: CompressionConfig,
        progress: Progress,
        fingerprints: tuple[list[dict[str, Any]], dict[str, Any]],
        strict: bool = False,
        resume: Checkpoint | None = None,
        text_chars: Callable[[Any], int] = text_chars,
    ) -> None:
        self.layout = layout
        self.text_chars = text_chars
        self.config = config
        self.progress = progress
        self.strict = strict
        self._inputs_print, self._settings_print = fingerprints
        self.warnings: list[str] = []  # the first `MAX_WARNINGS` (the rejects file has all)
        self._warning_count = 0
        self.metrics = AggregateMetrics()
        self.file_index = 0
        self.skip = 0
        self.draws = 0
        self.elapsed_before = 0.0
        if resume is not None:
            self.metrics = aggregate_from_state(resume.metrics)
            self.file_index, self.skip, self.draws = resume.file_index, resume.skip, resume.draws
            self.elapsed_before = resume.elapsed
        self._started = time.monotonic()
        self._last_checkpoint = self._started
        self._last_lock_check = self._started
        self._since_checkpoint = 0
        self._writing = False
        self._moved = False  # a row or a file was finished since the run (re)started
        self._warned: tuple[str, str] | None = None
        # Sidecars first: a resume that cannot reopen them fails before any work.
        self.over_limit = JsonlSink(layout.over_limit,
                                    None if resume is None else resume.over_limit)
        self.rejects = JsonlSink(layout.rejects, None if resume is None else resume.rejects)
        self.sink: Sink | None = None
        self.summarizer_rows: JsonlSink | None = None  # `open_summarizer_rows`
        self._done: list[Sink] = []  # finished outputs, renamed at `commit`
        self._uncleaned: list[Sink] = []  # finished, their parts dropped at the next checkpoint
        self.consumed: ConsumedDigest | None = None  # set by a run over local files

    # files

    def open_summarizer_rows(self, path: Path, resume: Checkpoint | None) -> None:
        """Write `--emit-summarizer-rows`' rows to ``path`` with the run (§20)."""
        self.summarizer_rows = JsonlSink(path, None if resume is None
                                         else resume.summarizer_rows)

    def adopt_finished(self, final: Path) -> None:
        """An output an interrupted run already completed."""
        self._done.append(FinishedFile(final))

    def open_file(self, index: int, source: InputFile, resume: Any = None,
                  text_chars: Callable[[Any], int] | None = None) -> Sink:
        """The sink for ``source``'s output (reopened from a checkpoint state ``resume``);
        ``text_chars`` measures its rows' text (the file's dialect knows where it is)."""
        out = self.layout.outputs[source.path]
        # Windows output's training marks need room in a fixed (Parquet) schema (§20).
        marks = {"marks": True} if self.config.output_mode == "windows" else {}
        sink = open_sink(self.layout.formats[source.path], out, source, resume,
                         text_chars or self.text_chars, **marks)
        self.sink = sink
        self.file_index = index
        return sink

    def finish_file(self, draws: int) -> None:
        """The current input is exhausted: complete its output under its temporary name."""
        assert self.sink is not None
        self.sink.finish()
        self._done.append(self.sink)
        self._uncleaned.append(self.sink)
        self.sink = None
        self.file_index += 1
        self.skip = 0
        self.draws = draws
        self._moved = True
        self._maybe_checkpoint()

    # rows

    def write(self, record: Record, result: RowResult, draws: int) -> None:
        """One row's result, in input order: to the output, the over-limit file, or both."""
        self._maybe_check_lock()
        metrics = result.metrics
        if metrics.failed and self.strict:
            raise StrictStop(f"{record.location}: {metrics.error}")
        entry: dict[str, Any] | None = None
        keep = True
        why = result.why
        if metrics.still_over_limit:
            entry = {
                "location": str(record.location),
                **record.location.to_dict(),
                "id": row_id(result.row),
                **(why.to_entry() if why is not None else {}),
                "metrics": metrics.to_dict(),
            }
            if result.window_metrics is not None:  # which windows are over, and why (§20)
                entry["id"] = result.window_metrics[0].windowed.get("source_id") \
                    if result.window_metrics[0].windowed else None
                entry["windows_over"] = [
                    {"window": m.windowed["window"], "tokens": m.compressed_tokens,
                     "why": m.windowed.get("window_over") or reasons.SUMMARY_OVERRAN.text}
                    for m in result.window_metrics if m.still_over_limit and m.windowed]
            if not self.config.save_over_limit:
                entry["trajectory"] = result.row
                if result.windows is not None:
                    entry["windows"] = result.windows
                keep = False
        self._writing = True
        # The row first: a value that cannot be encoded makes it a reject before anything
        # of it is written or counted.
        try:
            if keep:
                assert self.sink is not None
                # An unchanged row keeps its bytes (numbers' exact text), unless it spans
                # lines (a pretty-printed array element) and the output is JSON lines.
                if result.windows is not None:  # one input row, k output rows (§20)
                    for window in result.windows:
                        self.sink.write_row(window)
                elif (not result.changed and record.raw is not None
                        and isinstance(self.sink, (JsonlSink, JsonArraySink))
                        and not (b"\n" in record.raw and isinstance(self.sink, JsonlSink))):
                    self.sink.write_raw(record.raw)
                else:
                    self.sink.write_row(result.row)
            if entry is not None:
                self.over_limit.write_row(entry)
            if self.summarizer_rows is not None:
                for made in result.summarizer_rows or ():
                    self.summarizer_rows.write_row(made)
        except (TypeError, ValueError, UnicodeError, OverflowError) as exc:
            self._writing = False
            self.reject(record, f"cannot write the row: {one_line_error(exc)}", draws)
            return
        self.metrics.add(metrics, why.code if why is not None else None)
        self.progress.row(metrics)
        self._handled(record, draws)

    def reject(self, record: Record, reason: str, draws: int) -> None:
        """A row that cannot be used, in input order: a rejects entry and a warning."""
        self._maybe_check_lock()
        self._writing = True
        self.metrics.rows_rejected += 1
        self.progress.rejected()
        entry: dict[str, Any] = {"location": str(record.location), **record.location.to_dict(),
                                 "error": reason}
        if record.raw is not None:
            entry["preview"] = record.raw[:200].decode("utf-8", errors="replace")
        self.rejects.write_row(entry)
        # A whole file rejected for its schema is said once, not once per row.
        if self._warned != (record.location.file, reason):
            self._warned = (record.location.file, reason)
            self.warn(f"{record.location}: {reason}")
        self._handled(record, draws)

    def empty_file(self, source: InputFile) -> None:
        """An input without a single row: said, and listed in the rejects (no row lost)."""
        message = f"{source.path}: file is empty (no rows)"
        if self.strict:
            raise StrictStop(message)
        self.rejects.write_row({"location": str(source.path), "file": str(source.path),
                                "error": "file is empty (no rows)", "rows": 0})
        self.warn(message)

    def _handled(self, record: Record, draws: int) -> None:
        self.skip = record.position
        self.draws = draws
        self._writing = False
        self._moved = True
        self._since_checkpoint += 1
        self._maybe_checkpoint()

    def warn(self, message: str) -> None:
        """A located problem on stderr (the first `MAX_WARNINGS`, then a pointer)."""
        self._warning_count += 1
        if self._warning_count <= MAX_WARNINGS:
            self.warnings.append(message)
            self.progress.write(f"warning: {message}")
        elif self._warning_count == MAX_WARNINGS + 1:
            self.progress.write("warning: more problems; see the rejects file")

    # checkpoints and the end of a run

    def elapsed(self) -> float:
        """Processing seconds, including those before a resume."""
        return self.elapsed_before + time.monotonic() - self._started

    def check_lock(self) -> None:
        """`LockLost` when the run's lock file is no longer its own (`lock.check_held`)."""
        self._last_lock_check = time.monotonic()
        check_held(self.layout.lock, next(iter(self.layout.outputs.values()),
                                          self.layout.stem_path))

    def _maybe_check_lock(self) -> None:
        if time.monotonic() - self._last_lock_check >= LOCK_CHECK_SECONDS:
            self.check_lock()

    def _maybe_checkpoint(self) -> None:
        if (self._since_checkpoint >= self.config.checkpoint_rows
                or time.monotonic() - self._last_checkpoint >= self.config.checkpoint_seconds):
            self.checkpoint()

    def checkpoint(self) -> None:
        """Make everything written durable and record the cut."""
        self.check_lock()  # a checkpoint of a run that lost its lock would be another's
        output = self.sink.flush() if self.sink is not None else None
        Checkpoint(
            inputs=self._inputs_print,
            settings=self._settings_print,
            file_index=self.file_index,
            skip=self.skip,
            output=output,
            over_limit=self.over_limit.flush(),
            rejects=self.rejects.flush(),
            draws=self.draws,
            metrics=aggregate_state(self.metrics),
            elapsed=self.elapsed(),
            started=self.metrics.processing_start_time,
            consumed=self.consumed.at(self.file_index, self.skip) if self.consumed else [],
            summarizer_rows=(self.summarizer_rows.flush() if self.summarizer_rows is not None
                             else 0),
        ).save(self.layout.checkpoint)
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        for sink in self._uncleaned:
            sink.cleanup()
        self._uncleaned.clear()

    def _sinks(self) -> list[Sink]:
        current = [self.sink] if self.sink is not None else []
        extra = [self.summarizer_rows] if self.summarizer_rows is not None else []
        return [*self._done, *current, self.over_limit, self.rejects, *extra]

    def commit(self) -> None:
        """Rename every output to its final name, then drop the checkpoint; `LockLost`
        (nothing renamed) when the run's lock is no longer its own."""
        self.check_lock()
        for sink in self._sinks():
            sink.commit()
        self.layout.checkpoint.unlink(missing_ok=True)

    def stop(self) -> bool:
        """The run was interrupted: checkpoint if the sinks are at a cut, and keep the
        temporary files for `--resume` if there is a checkpoint. True if kept.

        A run that lost its lock only closes its files: the names may be another run's."""
        if lost(self.layout.lock):
            for sink in self._sinks():
                sink.close_keep()
            return True
        if self._moved and not self._writing:
            # If this fails the previous checkpoint still stands.
            with contextlib.suppress(OSError, CompressorError):
                self.checkpoint()
        if self.layout.checkpoint.exists():
            for sink in self._sinks():
                sink.close_keep()
            return True
        self.abandon()
        return False

    def abandon(self) -> None:
        """Delete every temporary file and the checkpoint (a `--strict` stop); only close
        them when the run lost its lock (the names may be another run's)."""
        if lost(self.layout.lock):
            for sink in self._sinks():
                sink.close_keep()
            return
        for sink in self._sinks():
            sink.discard()
        self.layout.checkpoint.unlink(missing_ok=True)
