"""Batch inference as a job (§17): `export_batch` (phase 1) and `finish_batch` (phase 2).

Phase 1 walks the input as `compress` does (the same stream, counts, plans and summary
budgets, through the same `TrajectoryCompressor`) with a `BatchExporter` in place of the
summarizer, and writes only the batch folder: the request files and ``manifest.json``
(files, request counts, model, and what the run depends on). Phase 2 checks that the run
is the one exported, loads the provider's results into the summary cache
(`import_results`) and runs the normal pipeline with a `BatchSummarizer`: its output is
what an online run that received the same summaries writes.
"""

from __future__ import annotations

import glob
import hashlib
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.config import DEFAULT_BASE_URL, CompressionConfig, _key_of
from ..core.errors import ConfigError
from ..core.extractive import clip
from ..core.redact import Scrubber
from ..counting.identity import tokenizer_identity
from ..counting.tokens import TokenCounter
from ..dialects import detect
from ..dialects.base import Dialect
from ..dialects.sharegpt import SHAREGPT
from ..formats import jsonio
from ..formats.base import AtomicFile, InputFile, temp_path, write_atomic
from ..formats.registry import discover_inputs
from ..summarizers.batch import (
    ENDPOINT_PATH,
    BatchExporter,
    BatchSummarizer,
    CachedKeys,
    ExportStats,
    ImportReport,
    import_results,
    request_keys,
)
from ..summarizers.cache import SummaryCache, origin_digest
from ..summarizers.dotenv import key_environ
from .blocking import run_blocking
from .checkpoint import input_fingerprint
from .compressor import TrajectoryCompressor
from .job import compress_dataset
from .layout import plan_layout
from .local import RunResult
from .lock import check_held, lost, output_lock, probe
from .options import RunKeywords, RunOptions, run_options
from .ours import MANIFEST_FORMAT, is_manifest, manifest_files, refuse_foreign
from .paths import Written, check_writes
from .stream import RowStream

if TYPE_CHECKING:
    from typing_extensions import Unpack

MANIFEST = "manifest.json"
VERSION = 1
# The OpenAI Batch API's limits per input file.
DEFAULT_MAX_REQUESTS = 50_000
DEFAULT_MAX_BYTES = 200_000_000
REQUEST_FILE = "requests-{:05d}.jsonl"
_AGAIN = "export the requests again (the same command without --batch-results)"
_ANOTHER_DIR = "choose another --batch-dir"
# Settings that do not change which requests a run sends, or their bodies.
_NOT_IN_REQUESTS = ("summarizer", "base_url", "endpoints", "api_key_env", "local_model",
                    "per_trajectory_timeout", "summary_tolerance", "output_suffix",
                    "output_format", "metrics_per_trajectory", "save_over_limit")


@dataclass(frozen=True)
class BatchLimits:
    """Most requests and bytes per input file (the OpenAI Batch API's by default)."""

    max_requests: int = DEFAULT_MAX_REQUESTS
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_requests < 1:
            raise ConfigError(f"--batch-max-requests must be >= 1, got {self.max_requests}")
        if self.max_bytes < 1:
            raise ConfigError(f"--batch-max-bytes must be >= 1, got {self.max_bytes}")


@dataclass
class BatchFile:
    """One written input file."""

    name: str
    requests: int = 0
    bytes: int = 0


class RequestFiles:
    """Request lines into ``requests-NNNNN.jsonl`` files under ``folder``, a new file
    whenever the next line would pass a limit. Files are written under temporary names
    and appear under their own only on `commit` (so an interrupted export leaves the
    previous one as it was)."""

    def __init__(self, folder: Path, limits: BatchLimits) -> None:
        self.folder = folder
        self.limits = limits
        self.files: list[BatchFile] = []
        self._open: list[AtomicFile] = []

    def add(self, line: bytes) -> None:
        size = len(line)
        if size > self.limits.max_bytes:
            raise ConfigError(f"one summary request is {size:,} bytes, over the limit of "
                              f"{self.limits.max_bytes:,} bytes per file (--batch-max-bytes)")
        current = self.files[-1] if self.files else None
        if (current is None or current.requests >= self.limits.max_requests
                or current.bytes + size > self.limits.max_bytes):
            if self._open:
                self._open[-1].flush()
                self._open[-1].close_keep()
            current = BatchFile(REQUEST_FILE.format(len(self.files) + 1))
            self.files.append(current)
            self._open.append(AtomicFile(self.folder / current.name))
        self._open[-1].write(line)
        current.requests += 1
        current.bytes += size

    def commit(self) -> list[BatchFile]:
        """Move every file to its final name; the files written."""
        for f in self._open:
            if not f.closed:
                f.flush()
            f.commit()
        return self.files

    def close(self) -> None:
        """Close every file, deleting and renaming nothing."""
        for f in self._open:
            f.close_keep()

    def discard(self) -> None:
        """Delete what was written (the final names are never touched)."""
        for f in self._open:
            f.discard()


@dataclass
class ExportResult:
    """What phase 1 wrote."""

    folder: Path
    manifest: Path
    model: str
    files: list[BatchFile]
    stats: ExportStats
    rows: int = 0
    rows_rejected: int = 0


def export_batch(
    input_spec: str,
    output: str | None,
    config: CompressionConfig,
    batch_dir: str | Path,
    *,
    limits: BatchLimits | None = None,
    options: RunOptions | None = None,
    dialect: Dialect | None = None,
    **keywords: Unpack[RunKeywords],
) -> ExportResult:
    """Phase 1: write the summary requests a run of ``input_spec`` would send as OpenAI
    Batch API files in ``batch_dir``, with ``manifest.json``; nothing else is written.

    ``output`` only locates the summary cache (requests it already answers are left out);
    of ``options`` (or its fields as keywords, as `compress_dataset` takes them) only the
    rows it selects matter. Running it again with the same inputs and settings writes the
    same files.
    """
    limits = limits or BatchLimits()
    options = run_options(options, **keywords)
    inputs = discover_inputs(input_spec, split=options.split, data_files=options.data_files)
    folder = _batch_folder(batch_dir, input_spec)
    config = _with_cache_path(input_spec, inputs, output, config)
    _check_batch_writes(folder, inputs)
    _check_batch_ours(folder, options.overwrite)
    # One export per folder at a time: another's partial files are not stale.
    with output_lock(_batch_lock(folder), folder / MANIFEST, _ANOTHER_DIR):
        counter = TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
        for stale in folder.glob(".requests-*.jsonl.partial"):  # an interrupted export's
            stale.unlink()
        files = RequestFiles(folder, limits)
        cached = CachedKeys(Path(config.cache_path) if config.cache_path else None)
        exporter = BatchExporter(config, files.add, counter.count, cached)
        compressor = TrajectoryCompressor(config, exporter, counter, dialect or SHAREGPT)
        stream = RowStream(dialect or partial(detect, config=config),
                           sample_percent=options.sample_percent, seed=options.seed,
                           batch_rows=config.batch_rows)
        lock = _batch_lock(folder)
        try:
            rows, rejected = run_blocking(lambda: _walk(compressor, inputs, stream))
            check_held(lock, folder / MANIFEST)  # its lock deleted: another export's folder
            written = files.commit()
        except BaseException:
            if lost(lock):
                files.close()  # the names may be another export's now: left alone
            else:
                files.discard()
            raise
        finally:
            cached.close()
        run = batch_fingerprint(inputs, config, options)
        manifest = {
            "format": MANIFEST_FORMAT, "version": VERSION,
            "model": exporter.model, "url": ENDPOINT_PATH,
            "fingerprint": _digest(run),
            "files": [asdict(f) for f in written],
            "requests": exporter.stats.requests,
            "limits": asdict(limits),
            "stats": {**asdict(exporter.stats), "rows": rows, "rows_rejected": rejected},
            "run": run,
        }
        path = folder / MANIFEST
        old = _read_json(path)
        check_held(lock, path)
        write_atomic(path, jsonio.dumps_pretty(manifest))
        names = {f.name for f in written}
        for entry in (old or {}).get("files", []):  # files of the previous export, no more
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and name not in names and _is_request_file(name):
                (folder / name).unlink(missing_ok=True)
        return ExportResult(folder, path, exporter.model, written, exporter.stats, rows, rejected)


async def _walk(compressor: TrajectoryCompressor, inputs: list[InputFile],
                stream: RowStream) -> tuple[int, int]:
    """Count and plan every row as the pipeline does; summarize the ones it would."""
    rows = rejected = 0
    async with compressor:
        for source in inputs:
            stream.detect(source)
            for batch in stream.batches(source):
                for entry in batch:
                    entry.distill_with(compressor)  # as the pipeline does (§18)
                valid = [e for e in batch if e.turns is not None]
                rejected += len(batch) - len(valid)
                counted = compressor.rows.count([(e.dialect, e.record.row, e.turns)
                                                 for e in valid if e.turns is not None])
                for entry, turn_tokens in zip(valid, counted, strict=True):
                    assert entry.turns is not None
                    if isinstance(turn_tokens, str):
                        rejected += 1
                        continue
                    rows += 1
                    try:
                        plan = compressor.plan(entry.turns, turn_tokens, entry.dialect,
                                               entry.distill)
                    except Exception:  # the pipeline rejects such a row
                        rejected += 1
                        continue
                    if plan.action == "compress":
                        await compressor.compress_planned(entry.record.row, entry.turns,
                                                          plan, entry.dialect)
    return rows, rejected


def finish_batch(
    input_spec: str,
    output: str | None,
    config: CompressionConfig,
    batch_dir: str | Path,
    results: list[str],
    *,
    options: RunOptions | None = None,
    dialect: Dialect | None = None,
    **keywords: Unpack[RunKeywords],
) -> tuple[ImportReport, RunResult]:
    """Phase 2: load the results files into the summary cache and run the compression
    with ``options`` (or its fields as keywords, as `compress_dataset` takes them).

    A request that failed in the batch, or has no result, goes to the configured
    endpoints when there are any (`--base-url`, `summarization.endpoints`, or a
    `summarization.base_url` other than the default provider's); otherwise its row gets
    the extractive fallback (``summary_source: "fallback"``, errors counted).
    """
    if not config.cache_enabled:
        raise ConfigError("batch results are loaded into the summary cache; run phase 2 "
                          "without --no-cache")
    if config.engine != "local":
        raise ConfigError("--summarizer batch runs on the local engine")
    options = run_options(options, **keywords)
    folder = Path(batch_dir)
    probe([_batch_lock(folder)], folder / MANIFEST, _ANOTHER_DIR)  # an export still writing
    manifest = _read_json(folder / MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("version") != VERSION:
        raise ConfigError(f"{folder / MANIFEST} is missing or unreadable; {_AGAIN}")
    inputs = discover_inputs(input_spec, split=options.split, data_files=options.data_files)
    config = _with_cache_path(input_spec, inputs, output, config)
    _check_same_run(manifest, batch_fingerprint(inputs, config, options), folder)
    paths = _result_paths(results)
    expected = request_keys(folder / str(f.get("name")) for f in manifest.get("files", [])
                            if isinstance(f, dict))
    environ = key_environ()
    model = config.summarization_model
    origin = origin_digest(f"batch {manifest['fingerprint']}")
    assert config.cache_path is not None
    cache = SummaryCache(config.cache_path, tokenizer_identity(config))
    try:
        report = import_results(paths, cache, model, Scrubber(config.secret_values(environ)),
                                origin, expected)
    finally:
        cache.close()
    counter = TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    online = None
    if has_endpoint(config):
        from ..summarizers.openai import OpenAISummarizer

        online = OpenAISummarizer(config, environ=environ, count_tokens=counter.count)
    summarizer = BatchSummarizer(config, origin, report.failures, count_tokens=counter.count,
                                 online=online)
    result = compress_dataset(input_spec, output, config, options=options,
                              summarizer=summarizer, dialect=dialect)
    return report, result


def has_endpoint(config: CompressionConfig) -> bool:
    """Whether the run names an endpoint for the requests the batch did not answer."""
    return bool(config.endpoints) or config.base_url.rstrip("/") != DEFAULT_BASE_URL


def batch_fingerprint(inputs: list[InputFile], config: CompressionConfig,
                      options: RunOptions) -> dict[str, Any]:
    """What decides the requests a run sends: its inputs, the settings that shape rows
    and prompts, the tokenizer, the sample."""
    settings = config.fingerprint_dict()
    for name in _NOT_IN_REQUESTS:
        settings.pop(name, None)
    return jsonio.loads(jsonio.dumps({
        "inputs": input_fingerprint(inputs),
        "config": settings,
        "tokenizer": tokenizer_identity(config),
        "sample": {"sample_percent": options.sample_percent,
                   "seed": options.seed if options.sample_percent is not None else None},
    }))


def _check_same_run(manifest: dict[str, Any], now: dict[str, Any], folder: Path) -> None:
    """Raise `ConfigError` naming the first way this run differs from the exported one."""
    then = manifest.get("run")
    if not isinstance(then, dict):
        raise ConfigError(f"{folder / MANIFEST} does not say which run it was exported for; "
                          f"{_AGAIN}")
    if then.get("inputs") != now["inputs"]:
        raise ConfigError(f"the inputs are not the ones the requests in {folder} were "
                          f"exported from (paths, sizes or modification times differ); {_AGAIN}")
    old, new = then.get("config") or {}, now["config"]
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            raise ConfigError(
                f"the setting {_key_of(key)} is {clip(repr(new.get(key)), 60)} but was "
                f"{clip(repr(old.get(key)), 60)} when the requests in {folder} were "
                f"exported; {_AGAIN}")
    if then.get("tokenizer") != now["tokenizer"]:
        raise ConfigError(f"the tokenizer is not the one the requests in {folder} were "
                          f"exported with; {_AGAIN}")
    if then.get("sample") != now["sample"]:
        raise ConfigError(f"--sample-percent/--seed differ from the export's; {_AGAIN}")


def _batch_folder(batch_dir: str | Path, input_spec: str) -> Path:
    folder = Path(batch_dir)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--batch-dir {folder} is a file; give a folder")
    spec = Path(input_spec)
    if spec.is_dir():
        inside = folder.resolve()
        if inside == spec.resolve() or spec.resolve() in inside.parents:
            raise ConfigError(f"--batch-dir {folder} lies in the input folder {spec}, whose "
                              "files would then include the request files; choose another")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _check_batch_writes(folder: Path, inputs: list[InputFile]) -> None:
    """SPEC §12 for phase 1, before anything is written: the manifest and every request
    file an export may replace or delete (the folder's ``requests-*.jsonl``, their
    temporary names) is no input and no device, FIFO or folder."""
    stem = REQUEST_FILE.partition("{")[0]
    writes = [Written(folder / MANIFEST, "batch manifest"),
              Written(temp_path(folder / MANIFEST), "temporary file of the batch manifest",
                      "temp")]
    writes += [Written(p, "batch request file") for p in sorted(folder.glob(stem + "*.jsonl"))]
    writes += [Written(p, "temporary batch request file", "temp")
               for p in sorted(folder.glob(f".{stem}*.jsonl.partial"))]
    writes.append(Written(_batch_lock(folder), "lock file of the batch folder", "temp"))
    check_writes(inputs, writes, _ANOTHER_DIR)


def _check_batch_ours(folder: Path, overwrite: bool) -> None:
    """The manifest and request files an export replaces are an earlier export's (its
    manifest lists them), unless ``overwrite``: a file merely named like them is kept."""
    manifest = folder / MANIFEST
    refuse_foreign(manifest, "batch manifest", is_manifest, overwrite=overwrite)
    listed = manifest_files(manifest)
    stem = REQUEST_FILE.partition("{")[0]
    for path in sorted(folder.glob(stem + "*.jsonl")):
        refuse_foreign(path, "batch request file", lambda p: p.name in listed,
                       overwrite=overwrite)


def _batch_lock(folder: Path) -> Path:
    """Held by the export writing into ``folder`` (phase 2 refuses while it runs)."""
    return folder.resolve() / ".batch.lock"


def _with_cache_path(input_spec: str, inputs: list[InputFile], output: str | None,
                     config: CompressionConfig) -> CompressionConfig:
    """``config`` with the cache file `compress_dataset` would use (beside the output)."""
    if not config.cache_enabled or config.cache_path is not None:
        return config
    single = Path(input_spec).is_file() and inputs[0].stream is None
    layout = plan_layout(input_spec, inputs, output, config, single_file=single)
    return config.replace(cache_path=str(layout.summary_cache))


def _result_paths(results: list[str]) -> list[Path]:
    """The results files: each value a file, or a glob pattern matching some."""
    if not results:
        raise ConfigError("give the provider's output file(s) with --batch-results")
    paths: list[Path] = []
    for value in results:
        if Path(value).is_file():
            paths.append(Path(value))
            continue
        matched = sorted(glob.glob(value)) if glob.has_magic(value) else []
        if not matched:
            raise ConfigError(f"batch results file not found: {value}")
        paths += [Path(m) for m in matched if Path(m).is_file()]
    return list(dict.fromkeys(paths))


def _is_request_file(name: str) -> bool:
    return name.startswith(REQUEST_FILE.partition("{")[0]) and name.endswith(".jsonl") \
        and "/" not in name


def _read_json(path: Path) -> Any:
    try:
        return jsonio.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _digest(value: Any) -> str:
    return hashlib.blake2b(jsonio.dumps(value), digest_size=12).hexdigest()
