"""The Ray engine (``--engine ray``): the run's shards on a Ray Data actor pool (§13).

The driver plans the shards (`sharded.ShardedRun`), starts or joins Ray, and streams the
shards still to run through ``map_batches`` on a fixed pool of `ShardWorker` actors, one
shard per batch. Each actor loads the tokenizer and the summarizer once and holds its
share of the configured concurrency and rate limits (`shard.worker_config`); it runs a
shard with the local engine's pipeline into the shard's folder (`shard.run_shard`). The
driver records each shard as it finishes (progress, warnings, summary cache) and joins
them at the end. Ray retries a task whose actor died (it restarts the actor); the shard
is then written again from scratch, so no row is lost or written twice.

``ray`` is imported only here, and only when the engine runs: it is the optional extra
``ray``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

from ..core.config import CompressionConfig
from ..core.errors import (
    CompressorError,
    ConfigError,
    FatalSummaryError,
    InputError,
    OutputError,
)
from ..core.summary import Summarizer
from ..core.terminal import inert
from ..counting.tokens import TokenCounter
from ..dialects import detect
from ..dialects.base import Dialect
from ..formats.base import InputFile
from ..formats.registry import count_rows
from ..summarizers import make_summarizer
from .compressor import TrajectoryCompressor
from .layout import OutputLayout
from .local import RunResult
from .options import RunOptions
from .shard import Shard, ShardJob, ShardResult, ShardSummarizer, run_shard, worker_config
from .sharded import ShardedRun
from .writer import MAX_WARNINGS, StrictStop

INSTALL_HINT = ("pip install 'trajectory-compressor[ray]' (in a checkout: "
                "bash scripts/setup.sh dev,ray)")


class ShardFailed(CompressorError):
    """A shard could not be run (its worker kept dying, or an unforeseen error)."""


def import_ray() -> Any:
    """The ``ray`` module with Ray Data; `ConfigError` naming the install command if the
    optional extra is missing."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        missing = exc.name or "ray"
        raise ConfigError(f"--engine ray needs the optional 'ray' extra ({missing} is not "
                          f"installed); install it with {INSTALL_HINT}") from None
    return ray


class ShardWorker:
    """One actor of the pool: a tokenizer, a summarizer with its share of the limits, and
    an event loop, kept for every shard it is given."""

    def __init__(self, job: ShardJob, keys: dict[str, str] | None = None) -> None:
        # The key values the driver sees (its environment and `.env` files, as the CLI
        # reads them), for the variables this worker's environment leaves unset: a worker
        # elsewhere, or in another folder, has neither the variable nor the file.
        for name, value in (keys or {}).items():
            if not os.environ.get(name):
                os.environ[name] = value
        self.job = job
        self.loop = asyncio.new_event_loop()
        self.dialect: Dialect | Any = job.dialect or partial(detect, config=job.config)
        self.failed: dict[str, str] | None = None
        try:
            self.compressor = _compressor(worker_config(job.config, job.workers))
        except Exception as exc:  # said by every shard it is given (Ray would retry an init)
            self.failed = {"kind": _kind(exc), "message": str(exc) or type(exc).__name__}

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np  # Ray Data's batches are numpy arrays

        results = []
        for index in batch["shard"]:
            if self.failed is not None:
                result = ShardResult(int(index), error=self.failed)
            else:
                result = self.loop.run_until_complete(run_shard(
                    self.compressor, self.job, self.job.shards[int(index)], self.dialect))
            results.append(result.to_json().decode())
        return {"result": np.array(results, dtype=object)}

    def __del__(self) -> None:
        if self.failed is None:
            with contextlib.suppress(Exception):
                summarizer = self.compressor.summarizer
                assert isinstance(summarizer, ShardSummarizer)
                self.loop.run_until_complete(summarizer.shutdown())
        self.loop.close()


def _compressor(config: CompressionConfig) -> TrajectoryCompressor:
    """A worker's compressor (its summarizer kept open over shards)."""
    counter = TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    summarizer = ShardSummarizer(make_summarizer(config, counter))
    return TrajectoryCompressor(config, summarizer, counter)


def _kind(exc: BaseException) -> str:
    return "config" if isinstance(exc, ConfigError) else "internal"


def compress_on_ray(
    inputs: list[InputFile],
    layout: OutputLayout,
    config: CompressionConfig,
    options: RunOptions,
    dialect: Dialect | None = None,
    summarizer: Summarizer | None = None,
    *,
    address: str | None = None,
    actors: int | None = None,
) -> RunResult:
    """Run a compression job on Ray: a local instance (all CPUs) unless ``address`` or
    ``RAY_ADDRESS`` names a cluster, or Ray is already initialised in this process.
    ``actors`` defaults to the cluster's CPUs (at most one per shard)."""
    ray = import_ray()
    if summarizer is not None:
        raise ConfigError("a summarizer object cannot be sent to Ray workers; name the "
                          "backend in the config (summarization.backend) instead")
    # What every worker will load, tried here first: a bad tokenizer, template or
    # backend is one clear error before Ray starts, not one per actor.
    _compressor(worker_config(config, 1))
    run = ShardedRun(inputs, layout, config, options)
    owned = False
    try:
        pending = run.prepare()
        progress = _Progress(run, options.quiet)
        for note in run.notes if not options.quiet else []:
            progress.write(f"note: {note}")
        if pending:
            owned = _init(ray, address)
            workers = _pool_size(ray, config, actors, len(pending))
            job = run.job(dialect=dialect, workers=workers)
            for result in in_input_order(_execute(ray, job, pending, workers), pending):
                _check(result)
                run.record(result)
                progress.shard(result)
        progress.close()
        return run.commit()
    except StrictStop:  # nothing is committed, nothing kept (as locally)
        shutil.rmtree(run.parts, ignore_errors=True)
        layout.checkpoint.unlink(missing_ok=True)
        raise
    finally:
        if owned:
            ray.shutdown()


def _execute(ray: Any, job: ShardJob, pending: list[Shard], workers: int
             ) -> Iterator[ShardResult]:
    """Results of ``pending`` as their shards finish (in any order)."""
    items = [{"shard": s.index} for s in pending]
    dataset = ray.data.from_items(items, override_num_blocks=len(items))
    dataset = dataset.map_batches(
        ShardWorker, fn_constructor_kwargs={"job": job, "keys": driver_keys(job.config)},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=1)
    for row in dataset.iter_rows():
        yield ShardResult.from_json(row["result"])


def driver_keys(config: CompressionConfig) -> dict[str, str]:
    """The values of the key variables ``config`` names, as this process sees them (the
    environment, then the `.env` files: `summarizers.dotenv`), for the workers."""
    from ..summarizers.dotenv import key_environ

    env = key_environ()
    names = {config.api_key_env, *(e.api_key_env for e in config.endpoints)}
    return {name: env[name] for name in sorted(n for n in names if n) if env.get(name)}


def in_input_order(results: Iterable[ShardResult], pending: list[Shard]
                   ) -> Iterator[ShardResult]:
    """``results`` as the shards finish, but a failed shard's only once every shard before
    it (in input order) is back, and then the earliest failure, the one a local run stops
    at: with several bad inputs (``--strict``), which one the run names does not depend on
    which shard finished first. The shards after it are not waited for."""
    waiting = {shard.index for shard in pending}
    failed: ShardResult | None = None
    for result in results:
        waiting.discard(result.index)
        if result.error is None:
            yield result  # recorded: a resume after the error does not redo it
        elif failed is None or result.index < failed.index:
            failed = result
        if failed is not None and not any(i < failed.index for i in waiting):
            break
    if failed is not None:
        yield failed


def _check(result: ShardResult) -> None:
    """Raise the error a shard came back with, as the kind the local engine raises."""
    if result.error is None:
        return
    kind, message = result.error["kind"], result.error["message"]
    errors: dict[str, type[CompressorError]] = {
        "strict": StrictStop, "fatal": FatalSummaryError, "input": InputError,
        "config": ConfigError, "output": OutputError}
    raise errors.get(kind, ShardFailed)(message)


def _init(ray: Any, address: str | None) -> bool:
    """Connect to Ray (start a local instance unless given a cluster); True if this call
    started it, so the run shuts it down."""
    if ray.is_initialized():
        return False
    # Ray's C++ core logs a line for each actor it may restart; the driver's stderr is
    # for the run's own messages (set RAY_BACKEND_LOG_LEVEL to see Ray's again).
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    cluster = address or os.environ.get("RAY_ADDRESS")
    try:
        with _quiet_stderr():
            if cluster:
                ray.init(address=address, **quiet)  # a cluster: its own settings apply
            else:
                ray.init(include_dashboard=False, **quiet)
    except Exception as exc:
        where = f"the Ray cluster at {cluster}" if cluster else "a local Ray instance"
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ConfigError(f"cannot start or join {where}: {text}") from None
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return True


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Hide what the C++ core prints on file descriptor 2 while Ray starts (its log-level
    notice); an error still arrives as the exception ``ray.init`` raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _pool_size(ray: Any, config: CompressionConfig, actors: int | None, shards: int) -> int:
    """Actors: as asked, else one per CPU of the cluster; never more than there are
    shards, nor (with an LLM backend) than requests allowed at once."""
    wanted = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
    if config.summarizer != "extractive":
        wanted = min(wanted, config.max_concurrent_requests)
    return max(1, min(wanted, shards))


class _Progress:
    """Shards and rows done on the driver: a tqdm bar on a terminal, else a line per
    shard on stderr (nothing with --quiet); warnings as the shards report them."""

    def __init__(self, run: ShardedRun, quiet: bool) -> None:
        self.run = run
        self.quiet = quiet
        self.total_shards = len(run.shards)
        self.warned = 0
        self.cpu = 0.0  # CPU seconds the workers spent on this run's shards
        self.counters = {"shards": f"{len(run.results)}/{self.total_shards}"}
        self._bar: Any = None
        done = sum(r.rows for r in run.results.values())
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            total = None if run.options.sample_percent is not None else count_rows(run.inputs)
            self._bar = tqdm(total=total, initial=done, unit="row", file=sys.stderr)

    def shard(self, result: ShardResult) -> None:
        metrics = self.run.progress
        for text in [*result.notes, *result.warnings]:
            self.warned += 1
            if self.warned <= MAX_WARNINGS:
                self.write(f"warning: {text}")
            elif self.warned == MAX_WARNINGS + 1:
                self.write("warning: more problems; see the rejects file")
        counters = {"shards": f"{len(self.run.results)}/{self.total_shards}",
                    "compressed": metrics.trajectories_compressed,
                    "over_limit": metrics.trajectories_still_over_limit,
                    "failed": metrics.trajectories_failed, "rejected": metrics.rows_rejected,
                    "api_calls": metrics.total_summarization_calls}
        if self._bar is not None:
            self._bar.update(result.rows)
            self._bar.set_postfix(counters, refresh=True)
        elif not self.quiet:
            rows = metrics.total_trajectories + metrics.rows_rejected
            self.cpu += result.cpu_seconds
            print(f"shard {counters['shards']} done: {rows:,} rows, "
                  + ", ".join(f"{k} {v:,}" for k, v in list(counters.items())[1:])
                  + f"; workers' CPU {self.cpu:.1f} s", file=sys.stderr, flush=True)

    def write(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(inert(message), file=sys.stderr)
        else:
            print(inert(message), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
