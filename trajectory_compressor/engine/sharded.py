"""The driver's side of a sharded run: plan the shards, record them, join them (§7, §13).

`ShardedRun` knows nothing of how shards are executed (`engine/ray.py` runs them on Ray).
It plans one shard per input file (a plain JSONL file of many lines is cut into ranges
of lines), keeps a manifest at the run's checkpoint path (the inputs' and settings'
fingerprints, the plan, the start time) so that ``--resume`` skips the shards whose
folders say they are finished, merges each finished shard's summary cache into the
run's, and at the end joins the shards in input order into the same files the local
engine writes: outputs, over-limit and rejects files, and the metrics file.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig
from ..core.errors import OutputError, ResumeError
from ..core.metrics import AggregateMetrics, aggregate_from_state
from ..formats import jsonio
from ..formats.base import AtomicFile, InputFile, replace_file, write_atomic
from ..formats.bounded import CHECKPOINT_CAP, read_bounded
from ..formats.hf_card import card_path, dataset_card
from ..formats.registry import read_records
from .checkpoint import Checkpoint, check_resumable, input_fingerprint, settings_fingerprint
from .committed import committed_record
from .count import tokenizer_identity
from .layout import OutputLayout
from .local import RunResult
from .lock import check_held
from .options import RunOptions
from .paths import Written, check_writes, run_record
from .shard import CACHE, Shard, ShardJob, ShardResult, finished, shard_dir
from .shard_cache import merge_into
from .writer import MAX_WARNINGS

MANIFEST_VERSION = "shards-1"
# A plain JSONL input is cut into ranges of this many lines (more shards than workers
# keeps every worker busy; each costs a few files and a task).
BLOCK_LINES = 20_000
_RESTART = "run without --resume to start over"


def parts_folder(layout: OutputLayout) -> Path:
    """The shards folder beside the output (same file system: shards are renamed in)."""
    return layout.stem_path.with_name(f".{layout.stem_path.name}.shards")


class ShardedRun:
    """One run as shards: `prepare` (plan or resume), `record` each result, `commit`."""

    def __init__(self, inputs: list[InputFile], layout: OutputLayout,
                 config: CompressionConfig, options: RunOptions, *,
                 block_lines: int | None = None) -> None:
        self.inputs = inputs
        self.layout = layout
        self.config = config
        self.options = options
        self.block_lines = block_lines or BLOCK_LINES
        self.parts = parts_folder(layout)
        self.shards: list[Shard] = []
        # Finished shards, without their metrics (read back from their folders at the
        # end, one at a time); `progress` adds them up as they come, for the display.
        self.results: dict[int, ShardResult] = {}
        self.progress = AggregateMetrics()
        self.started = ""
        self.elapsed_before = 0.0  # seconds spent by the runs this one resumes
        self._clock = time.monotonic()
        self.resumed = False
        self.notes: list[str] = []  # for the person running it
        self.cache = Path(config.cache_path) if (
            config.cache_enabled and config.cache_path and config.summarizer != "extractive"
        ) else None
        settings = settings_fingerprint(config, layout.outputs, options.sample_percent,
                                        options.seed)
        settings["tokenizer"] = tokenizer_identity(config)
        self._prints = (input_fingerprint(inputs), settings)

    # planning and resuming

    def prepare(self) -> list[Shard]:
        """The shards still to run: all of them, or those a resumed run did not finish."""
        check_writes(self.inputs, [Written(self.parts, "shards folder", "folder")])
        self._clock = time.monotonic()
        manifest = self._manifest()
        if manifest is not None:
            self.shards = [Shard(**s) for s in manifest["shards"]]
            self.started = manifest["started"]
            self.elapsed_before = float(manifest.get("elapsed", 0.0))
            self.resumed = True
            for shard in self.shards:
                folder = shard_dir(self.parts, shard)
                done = finished(folder)
                if done is not None:
                    self._merge_cache(shard)
                    self._keep(done)
                else:
                    (folder / "attempts").unlink(missing_ok=True)  # the kill was not its fault
        else:
            if self.parts.exists():
                shutil.rmtree(self.parts)
            self.shards = self._plan()
            self.started = datetime.now().isoformat()
            self.parts.mkdir(parents=True)
            self._save()
        return [s for s in self.shards if s.index not in self.results]

    def job(self, **extra: Any) -> ShardJob:
        """What the workers need to run this run's shards."""
        return ShardJob(self.config, self.inputs, self.layout, self.parts, self.started,
                        options=self.options, cache=self.cache,
                        shards=self.shards, **extra)

    def _manifest(self) -> dict[str, Any] | None:
        path = self.layout.checkpoint
        if not self.options.resume:
            if path.exists():
                self.notes.append(f"an interrupted run's checkpoint {path} is discarded; "
                                  "starting over (pass --resume to continue it instead)")
                path.unlink()
            return None
        if not path.exists():
            self.notes.append(f"no checkpoint at {path}; starting from the beginning")
            return None
        try:
            data = jsonio.loads(read_bounded(path, "checkpoint", CHECKPOINT_CAP))
        except (OSError, ValueError) as exc:
            raise ResumeError(f"cannot resume: the checkpoint {path} is unreadable ({exc}); "
                              f"{_RESTART}") from None
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
            raise ResumeError(f"cannot resume: the checkpoint {path} was written by the local "
                              "engine; resume with --engine local, or " + _RESTART)
        check_resumable(Checkpoint(inputs=data["inputs"], settings=data["settings"]),
                        *self._prints)
        if not self.parts.is_dir():
            raise ResumeError(f"cannot resume: the shards folder {self.parts} is missing; "
                              + _RESTART)
        return data

    def _plan(self) -> list[Shard]:
        """One shard per input, plain JSONL inputs cut into ranges of lines; with
        ``--sample-percent`` each shard starts from the draws made before it, which
        takes counting the records of every input first."""
        shards: list[Shard] = []
        draws = 0
        for i, source in enumerate(self.inputs):
            cuts = self._cuts(source)
            for start, stop in zip([0, *cuts], [*cuts, None], strict=True):
                shards.append(Shard(len(shards), i, start, stop, draws))
                if self.options.sample_percent is not None:
                    draws += _records(source, start, stop)
        return shards

    def _cuts(self, source: InputFile) -> list[int]:
        """Line numbers after which ``source`` is cut (none for other containers)."""
        if source.format != "jsonl" or self.layout.formats[source.path] != "jsonl":
            return []
        with open(source.path, "rb") as f:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))
        return list(range(self.block_lines, lines, self.block_lines))

    def _check_lock(self) -> None:
        """`LockLost` when the run's lock is no longer its own (`lock.check_held`)."""
        check_held(self.layout.lock, next(iter(self.layout.outputs.values()),
                                          self.layout.stem_path))

    def _save(self) -> None:
        self._check_lock()
        write_atomic(self.layout.checkpoint, jsonio.dumps({
            "version": MANIFEST_VERSION, "inputs": self._prints[0], "settings": self._prints[1],
            "started": self.started, "elapsed": self.elapsed(),
            "shards": [asdict(s) for s in self.shards],
        }))

    # results

    def elapsed(self) -> float:
        """Seconds of processing, including those of the runs this one resumes."""
        return self.elapsed_before + time.monotonic() - self._clock

    def record(self, result: ShardResult) -> None:
        """A shard finished: its summaries join the run's cache; the manifest notes the
        time spent (the shard's folder already says it is done)."""
        self._keep(result)
        self._merge_cache(self.shards[result.index])
        self._save()

    def _keep(self, result: ShardResult) -> None:
        self.progress.merge(aggregate_from_state(result.metrics))
        self.results[result.index] = replace(result, metrics={})

    def _merge_cache(self, shard: Shard) -> None:
        if self.cache is not None:
            merge_into(self.cache, shard_dir(self.parts, shard) / CACHE)

    def metrics(self) -> AggregateMetrics:
        """The metrics of all the shards, added up in input order (as their folders
        record them: memory holds one shard's at a time)."""
        total = AggregateMetrics()
        for shard in self.shards:
            done = finished(shard_dir(self.parts, shard))
            if done is None:
                raise OutputError(f"the shard {shard_dir(self.parts, shard)} lost its "
                                  "record; run without --resume to start over")
            total.merge(aggregate_from_state(done.metrics))
        total.processing_start_time = self.started
        return total

    # the end

    def commit(self) -> RunResult:
        """Join every shard into the run's files (outputs renamed in, or concatenated from
        ranges; sidecars concatenated in input order), write the dataset card of split
        shards and the metrics file, then drop the manifest and the shards folder. Safe to
        repeat after a crash part-way."""
        assert len(self.results) == len(self.shards)
        self._check_lock()
        sidecars = [self._join(self.layout.over_limit, "part_over_limit.jsonl"),
                    self._join(self.layout.rejects, "part_rejects.jsonl")]
        for i, source in enumerate(self.inputs):
            self._commit_output(source, [s for s in self.shards if s.file == i])
        for sidecar in sidecars:
            sidecar.commit()
        card = card_path(self.layout.outputs.values())
        if card is not None:  # as locally: every split by its name for load_dataset(OUTPUT)
            write_atomic(card, dataset_card(self.layout.outputs.values()))
        metrics = self.metrics()
        metrics.processing_end_time = datetime.now().isoformat()
        metrics.processing_duration_seconds = self.elapsed()
        if self.config.metrics_enabled:
            report = {**metrics.to_dict(), "settings": self.config.run_settings(),
                      "tokenizer": self._prints[1]["tokenizer"],
                      "run": run_record(self.inputs, self.layout, self.config,
                                        self.options.sample_percent, self.options.seed),
                      **({"gates": dict(self.options.gates)} if self.options.gates
                         else {}),
                      "committed": committed_record(self.layout.outputs.values(),
                                                    metrics.rows_out)}
            write_atomic(self.layout.metrics, jsonio.dumps_pretty(report))
        self.layout.checkpoint.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)
        warnings = [w for i in sorted(self.results) for w in self.results[i].warnings]
        return RunResult(metrics, self.layout, warnings[:MAX_WARNINGS], resumed=self.resumed)

    def _join(self, final: Path, name: str) -> AtomicFile:
        out = AtomicFile(final)
        for shard in self.shards:
            _append(out, shard_dir(self.parts, shard) / name)
        out.flush()
        return out

    def _commit_output(self, source: InputFile, shards: list[Shard]) -> None:
        final = self.layout.outputs[source.path]
        parts = [shard_dir(self.parts, s) / final.name for s in shards]
        final.parent.mkdir(parents=True, exist_ok=True)
        if len(parts) == 1:
            if parts[0].exists() or not final.exists():  # else: renamed by an earlier commit
                replace_file(parts[0], final)
            return
        # Ranges of one JSONL file: their lines, in order, are the file (the parts stay
        # until the shards folder goes, so a commit cut short is simply done again).
        out = AtomicFile(final)
        for part in parts:
            _append(out, part)
        out.commit()


def _append(out: AtomicFile, part: Path) -> None:
    with open(part, "rb") as f:
        while chunk := f.read(1 << 20):
            out.write(chunk)


def _records(source: InputFile, start: int, stop: int | None) -> int:
    """How many records ``source`` yields from ``start`` to ``stop`` (each is one draw)."""
    n = 0
    for record in read_records(source, start):
        if stop is not None and record.position > stop:
            break
        n += 1
    return n
