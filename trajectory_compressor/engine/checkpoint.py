"""Resume checkpoints: how far an interrupted run got, and what it ran on (§7).

The checkpoint lives beside the output (`OutputLayout.checkpoint`). It is written at a
point where every sink holds exactly the rows of the inputs read so far, so a resumed run
truncates the temporary files back to it, skips the rows it covers and goes on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig, _key_of
from ..core.errors import ResumeError
from ..core.extractive import clip
from ..formats import jsonio
from ..formats.base import InputFile, write_atomic
from ..formats.bounded import CHECKPOINT_CAP, read_bounded

VERSION = 1
_RESTART = "run without --resume to start over"


@dataclass
class Checkpoint:
    """A consistent cut of an interrupted run."""

    inputs: list[dict[str, Any]]  # `input_fingerprint`
    settings: dict[str, Any]  # `settings_fingerprint`
    file_index: int = 0  # the inputs before this one are complete
    skip: int = 0  # lines (JSONL) or rows (others) of inputs[file_index] fully handled
    output: Any = None  # the output sink's `flush` state for inputs[file_index]
    over_limit: int = 0  # byte offsets of the sidecars
    rejects: int = 0
    draws: int = 0  # --sample-percent draws made, replayed on resume
    metrics: dict[str, Any] = field(default_factory=dict)  # `aggregate_state`
    elapsed: float = 0.0  # seconds spent before this point
    started: str = ""
    version: int = VERSION
    # Digests of the input bytes consumed before the cut (`resume_guard.ConsumedDigest`).
    consumed: list[str] = field(default_factory=list)
    # Byte offset of `--emit-summarizer-rows`' file (§20; 0 without one).
    summarizer_rows: int = 0

    def save(self, path: Path) -> None:
        """Write atomically and durably (temporary name, fsync, rename)."""
        write_atomic(path, jsonio.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        """Read a checkpoint; `ResumeError` if it is unreadable or from another version."""
        try:
            data = jsonio.loads(read_bounded(path, "checkpoint", CHECKPOINT_CAP))
            if data.get("version") != VERSION:
                raise ResumeError(f"cannot resume: the checkpoint {path} was written by an "
                                  f"incompatible version; {_RESTART}")
            return cls(**data)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise ResumeError(f"cannot resume: the checkpoint {path} is unreadable ({exc}); "
                              f"{_RESTART}") from None


def input_fingerprint(inputs: list[InputFile]) -> list[dict[str, Any]]:
    """What identifies the inputs: paths, sizes and modification times (stream shards:
    dataset, split, data files and shard)."""
    prints: list[dict[str, Any]] = []
    for source in inputs:
        if source.stream is not None:
            prints.append({"stream": asdict(source.stream)})
            continue
        st = source.path.stat()
        prints.append({"path": str(source.path.resolve()), "format": source.format,
                       "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return _normal(prints)


def settings_fingerprint(
    config: CompressionConfig,
    outputs: dict[Path, Path],
    sample_percent: float | None,
    seed: int,
) -> dict[str, Any]:
    """The settings that decide the output rows, and where they go."""
    return _normal({
        "config": config.fingerprint_dict(),
        "sample": {"sample_percent": sample_percent,
                   "seed": seed if sample_percent is not None else None},
        "outputs": {str(k): str(v) for k, v in outputs.items()},
    })


def check_resumable(checkpoint: Checkpoint, inputs: list[dict[str, Any]],
                    settings: dict[str, Any]) -> None:
    """Raise `ResumeError` naming the first way the run differs from the checkpoint's."""
    old_inputs = checkpoint.inputs
    if len(old_inputs) != len(inputs):
        raise ResumeError(f"cannot resume: the interrupted run read {len(old_inputs)} input "
                          f"files and this one reads {len(inputs)}; {_RESTART}")
    for old, new in zip(old_inputs, inputs, strict=True):
        if old != new:
            what = new.get("path") or new.get("stream", {}).get("dataset")
            raise ResumeError(f"cannot resume: the input {what} is not the one the "
                              f"interrupted run read (path, size or modification time "
                              f"changed); {_RESTART}")
    old_config, new_config = checkpoint.settings["config"], settings["config"]
    for key in sorted(set(old_config) | set(new_config)):
        if old_config.get(key) != new_config.get(key):
            raise ResumeError(
                f"cannot resume: the setting {_key_of(key)} is {_clip(new_config.get(key))} "
                f"but was {_clip(old_config.get(key))} in the interrupted run; {_RESTART}"
            )
    if checkpoint.settings["sample"] != settings["sample"]:
        raise ResumeError(f"cannot resume: --sample-percent/--seed differ from the "
                          f"interrupted run's; {_RESTART}")
    if checkpoint.settings["outputs"] != settings["outputs"]:
        raise ResumeError(f"cannot resume: the output paths differ from the interrupted "
                          f"run's; {_RESTART}")
    if checkpoint.settings.get("tokenizer") != settings.get("tokenizer"):
        raise ResumeError(f"cannot resume: the tokenizer's files, the counting mode or the "
                          f"chat template differ from the interrupted run's; {_RESTART}")


def _normal(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists, keys strings)."""
    return jsonio.loads(jsonio.dumps(value))


def _clip(value: Any, limit: int = 60) -> str:
    return clip(repr(value), limit)
