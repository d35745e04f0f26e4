"""One shard of a run: the unit a distributed engine schedules (§13).

A shard is one input file, or a range of its lines or rows. `run_shard` runs it through
the local engine's own `Pipeline` — the same stream, compressor, window and `RunWriter`
with the same sinks — into the shard's folder, so every row it writes is byte for byte
what a one-process run writes for that row. Its over-limit and rejects entries, and its
metrics as an `aggregate_state`, go beside it; `sharded.ShardedRun` joins the shards of a
run in input order.

A shard is written whole or not at all: an attempt starts by deleting what an earlier
attempt left (except its summary cache), and ``done.json``, written atomically last, is
what says the shard is finished. A worker that dies mid-shard is simply run again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import takewhile
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig
from ..core.errors import (
    CompressorError,
    ConfigError,
    FatalSummaryError,
    InputError,
    OutputError,
    one_line_error,
)
from ..core.metrics import aggregate_state
from ..core.summary import Summarizer, Summary, SummaryRequest
from ..dialects.base import Dialect
from ..formats import jsonio
from ..formats.base import InputFile, Record, write_atomic
from ..summarizers.openai import OpenAISummarizer
from .checkpoint import Checkpoint
from .compressor import TrajectoryCompressor
from .layout import OutputLayout
from .local import Pipeline
from .options import RunOptions
from .shard_cache import ShardCache
from .stream import RowStream
from .writer import RunWriter, StrictStop

DONE = "done.json"
ATTEMPTS = "attempts"
CACHE = "cache.sqlite"
# A shard whose worker died this many times stops the run instead of being retried again.
MAX_ATTEMPTS = 3
# Test hook (documented in docs/development.md): "<marker file>:<records>" makes a worker
# exit abruptly after reading that many records of a shard, once: it creates the marker
# (saying which worker died where), and does nothing while the marker exists.
KILL_ENV = "TC_TEST_KILL_WORKER"


@dataclass(frozen=True)
class Shard:
    """Input ``file`` (an index into the run's inputs) from line or row ``start`` (that many
    are skipped) up to position ``stop`` (None: the end); ``draws`` is the number of
    ``--sample-percent`` draws made before it."""

    index: int
    file: int
    start: int = 0
    stop: int | None = None
    draws: int = 0

    @property
    def name(self) -> str:
        return f"{self.index:05d}"


@dataclass
class ShardJob:
    """What every worker of a run needs: plain data, sent once to each worker."""

    config: CompressionConfig
    inputs: list[InputFile]
    layout: OutputLayout
    parts: Path  # the run's shards folder
    started: str  # the run's start time: names rows to the summary cache, as locally
    options: RunOptions = field(default_factory=RunOptions)  # the run's: sample, strict
    dialect: Dialect | None = None  # None: detected per file, as the local engine does
    cache: Path | None = None  # the run's summary cache, read-only for workers
    workers: int = 1  # how many workers share the configured limits
    shards: list[Shard] = field(default_factory=list)  # the run's plan, by index


@dataclass
class ShardResult:
    """What a finished shard did (``error``: why it could not finish)."""

    index: int
    rows: int = 0  # rows read: written, moved to the over-limit file or rejected
    metrics: dict[str, Any] = field(default_factory=dict)  # `aggregate_state`
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the summarizer's first failures
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of the worker's process (its tokenizer threads included)
    error: dict[str, str] | None = None  # {"kind": ..., "message": ...}

    def to_json(self) -> bytes:
        return jsonio.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes | str) -> ShardResult:
        return cls(**jsonio.loads(data))


def shard_dir(parts: Path, shard: Shard) -> Path:
    return parts / shard.name


def shard_layout(job: ShardJob, shard: Shard) -> OutputLayout:
    """Where a shard writes: its output under the final output's name, and its sidecars,
    all in the shard's folder."""
    folder = shard_dir(job.parts, shard)
    source = job.inputs[shard.file]
    final = job.layout.outputs[source.path]
    return OutputLayout({source.path: folder / final.name},
                        {source.path: job.layout.formats[source.path]}, folder / "part")


def finished(folder: Path) -> ShardResult | None:
    """The result a shard's folder records, if the shard is finished."""
    try:
        return ShardResult.from_json((folder / DONE).read_bytes())
    except (OSError, ValueError, TypeError):
        return None


def worker_config(config: CompressionConfig, workers: int) -> CompressionConfig:
    """``config`` for one of ``workers`` workers: its share of the concurrency and of
    every endpoint's limits, so the endpoints see the totals one process would send.
    The summary cache is given to each shard by the worker (`ShardSummarizer`)."""

    def share(limit: int) -> int:
        # Concurrency is whole: each worker gets at least one request at a time.
        return max(1, limit // workers)

    def rate(limit: int | None) -> Any:
        # A rate need not be whole: five requests a minute over two workers is 2.5 each.
        return limit if limit is None or workers == 1 else limit / workers

    endpoints = [replace(e, max_concurrency=e.max_concurrency and share(e.max_concurrency),
                         rpm=rate(e.rpm), tpm=rate(e.tpm)) for e in config.endpoints]
    return replace(config, max_concurrent_requests=share(config.max_concurrent_requests),
                   endpoints=endpoints, cache_path=None, metrics_enabled=False)


class ShardSummarizer(Summarizer):
    """A worker's summarizer: started once and kept open over the shards it runs (its HTTP
    session, local servers and rate-limit buckets live as long as the worker), with each
    shard's own summary cache attached while that shard runs."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.name = inner.name
        self.cache: ShardCache | None = None  # set by `run_shard` for each shard
        self._started = False

    @property
    def notify(self) -> Callable[[str], None] | None:
        return self.inner.notify

    @notify.setter
    def notify(self, value: Callable[[str], None] | None) -> None:
        self.inner.notify = value
        http = self._http()
        if http is not None:
            http.notify = value

    async def start(self) -> None:
        if not self._started:
            await self.inner.start()
            self._started = True
        http = self._http()
        if http is not None and self.cache is not None:
            http.cache = self.cache

    async def aclose(self) -> None:
        """The shard is over: its cache is committed and detached (the worker stays up)."""
        http = self._http()
        if http is not None and http.cache is self.cache:
            http.cache = None
        cache, self.cache = self.cache, None
        if cache is not None:
            cache.close()

    async def shutdown(self) -> None:
        """The worker is done: release what `start` acquired."""
        await self.aclose()
        if self._started:
            self._started = False
            await self.inner.aclose()

    async def summarize(self, request: SummaryRequest) -> Summary:
        return await self.inner.summarize(request)

    def live_counters(self) -> dict[str, int]:
        return self.inner.live_counters()

    def _http(self) -> OpenAISummarizer | None:
        """The pool behind the backend, which holds the cache (`local` wraps one)."""
        inner = getattr(self.inner, "inner", self.inner)
        return inner if isinstance(inner, OpenAISummarizer) else None


class _RangeStream(RowStream):
    """A `RowStream` over lines or rows ``start`` (exclusive) to ``stop`` (inclusive) of a
    file, its sampler at the draws made before ``start``."""

    def __init__(self, dialect: Any, shard: Shard, job: ShardJob, batch_rows: int,
                 die_after: tuple[Path, int] | None = None) -> None:
        super().__init__(dialect, sample_percent=job.options.sample_percent,
                         seed=job.options.seed, batch_rows=batch_rows)
        self.replay(shard.draws)
        self.start, self.stop = shard.start, shard.stop
        self.die_after = die_after

    def batches(self, source: InputFile, skip: int = 0) -> Iterator[list[Any]]:
        return super().batches(source, skip + self.start)

    def _sampled(self, records: Iterator[Record]) -> Iterator[tuple[Record, int]]:
        stop = self.stop
        if stop is not None:
            records = takewhile(lambda r: r.position <= stop, records)
        if self.die_after is not None:
            records = _dying(records, self.die_after)
        return super()._sampled(records)


def _dying(records: Iterator[Record], after: tuple[Path, int]) -> Iterator[Record]:
    marker, n = after
    for i, record in enumerate(records):
        if i == n:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass  # fired already
            else:
                os.write(fd, f"worker {os.getpid()} exited at {record.location}\n".encode())
                os.close(fd)
                os._exit(17)  # the worker dies as a crash would kill it
        yield record


class _ShardPipeline(Pipeline):
    """The local `Pipeline` over one shard, naming its rows with the run's start time (so
    the summary cache recognises what this row paid for in an interrupted attempt) and
    collecting the summarizer's notes instead of printing them."""

    # A shard starts afresh on every attempt (never from a checkpoint), and its rows lie
    # deep in its file: hashing everything before them would read the file again per shard.
    digest_inputs = False

    def __init__(self, compressor: TrajectoryCompressor, job: ShardJob, shard: Shard,
                 dialect: Dialect | Callable[[Iterable[Any]], Dialect],
                 die_after: tuple[Path, int] | None) -> None:
        source = job.inputs[shard.file]
        # Never from a checkpoint (see `digest_inputs`), and silent: the driver reports.
        options = replace(job.options, quiet=True, resume=False)
        super().__init__(compressor, [source], shard_layout(job, shard), options, dialect)
        self.stream = _RangeStream(self.dialect, shard, job, self.config.batch_rows, die_after)
        self.started = job.started
        self.notes: list[str] = []

    async def _run_files(self, writer: RunWriter, resume: Checkpoint | None) -> None:
        self.metrics.processing_start_time = self.started
        self.compressor.summarizer.notify = self.notes.append
        await super()._run_files(writer, resume)


def _error_kind(exc: BaseException) -> str:
    for kind, cls in (("strict", StrictStop), ("fatal", FatalSummaryError),
                      ("input", InputError), ("config", ConfigError), ("output", OutputError)):
        if isinstance(exc, cls):
            return kind
    if isinstance(exc, OSError):
        return "output"
    return "internal"


def _fresh(folder: Path) -> int:
    """Clear what an earlier attempt left (its summary cache stays) and count this attempt."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in folder.iterdir():
        if path.name.startswith(CACHE) or path.name == ATTEMPTS:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    counter = folder / ATTEMPTS
    try:
        attempts = int(counter.read_text() or 0) + 1
    except (OSError, ValueError):
        attempts = 1
    counter.write_text(str(attempts))
    return attempts


def _kill_hook() -> tuple[Path, int] | None:
    """The test hook (`KILL_ENV`): its marker file and the record count at which a worker
    dies; the first shard to read that many records while the marker is absent fires it."""
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return None
    marker, _, after = spec.rpartition(":")
    return Path(marker), int(after)


async def run_shard(compressor: TrajectoryCompressor, job: ShardJob, shard: Shard,
                    dialect: Dialect | Callable[[Iterable[Any]], Dialect]) -> ShardResult:
    """Run ``shard`` into its folder and record it finished; a finished shard is not run
    again (a retried task returns its record). ``compressor.summarizer`` is a
    `ShardSummarizer`. Errors come back in the result, never raised."""
    folder = shard_dir(job.parts, shard)
    done = finished(folder)
    if done is not None:
        return done
    started, cpu = time.monotonic(), time.process_time()
    summarizer = compressor.summarizer
    try:
        attempts = _fresh(folder)
        if attempts > MAX_ATTEMPTS:
            source = job.inputs[shard.file].path
            return ShardResult(shard.index, error={"kind": "internal", "message": (
                f"shard {shard.name} of {source} was tried {MAX_ATTEMPTS} times and its "
                "worker died each time; the run stopped")})
        if isinstance(summarizer, ShardSummarizer) and job.cache is not None:
            summarizer.cache = ShardCache(folder / CACHE, job.cache)
        pipeline = _ShardPipeline(compressor, job, shard, dialect, _kill_hook())
        result = await pipeline.run()
    except CompressorError as exc:
        return ShardResult(shard.index, error={"kind": _error_kind(exc), "message": str(exc)})
    except Exception as exc:
        message = (f"I/O error: {exc.filename}: {exc.strerror or exc}"
                   if isinstance(exc, OSError) and exc.filename else one_line_error(exc))
        return ShardResult(shard.index, error={"kind": _error_kind(exc), "message": message})
    finally:
        if isinstance(summarizer, ShardSummarizer):
            await summarizer.aclose()  # the shard's cache, whether or not the run began
    metrics = result.metrics
    record = ShardResult(shard.index, metrics.total_trajectories + metrics.rows_rejected,
                         aggregate_state(metrics), result.warnings, pipeline.notes,
                         time.monotonic() - started, time.process_time() - cpu)
    write_atomic(folder / DONE, record.to_json())
    with contextlib.suppress(OSError):
        (folder / ATTEMPTS).unlink()
    return record
