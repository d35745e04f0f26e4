"""Never destroy a file, never lose output: every path a run writes, checked before any
byte is written (§7, §12).

A run writes its outputs, their temporary names and Parquet parts folders, three
sidecars, the checkpoint and the summary cache. Each is compared with every input and
with the others after resolving links (and by inode where it exists, so a hard link
counts too); none may be a device, FIFO, socket or folder; each must lie in a folder
that can be written. An existing output is replaced only by a rerun of the run that
wrote it (the same inputs with the same settings, as its metrics file records), by a
`--resume` of it, or when ``overwrite`` is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig
from ..core.errors import ConfigError
from ..formats import jsonio
from ..formats.base import InputFile, temp_path
from ..formats.bounded import METRICS_CAP, file_kind, read_bounded
from ..formats.hf_card import card_path
from ..formats.links import resolve
from ..formats.registry import discover_inputs
from .layout import OutputLayout

_CHOOSE = "choose another output (-o), --cache-path or output.output_suffix"
_OVERWRITE = "pass --overwrite to replace it, or choose another output (-o)"
# Files SQLite keeps beside its database while it is open.
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Written:
    """One path a run writes: ``kind`` is ``file`` (renamed onto when complete), ``temp``
    (opened and written in place) or ``folder`` (created, filled, then deleted)."""

    path: Path
    what: str
    kind: str = "file"


def planned_writes(layout: OutputLayout, config: CompressionConfig) -> list[Written]:
    """Every path a run into ``layout`` may write, with what it is."""
    writes: list[Written] = []

    def atomic(path: Path, what: str) -> None:
        writes.append(Written(path, what))
        writes.append(Written(temp_path(path), f"temporary file of the {what}", "temp"))

    for source, out in layout.outputs.items():
        what = f"output of {source}"
        atomic(out, what)
        if layout.formats.get(source) == "parquet":
            from ..formats.parquet import parts_dir  # pyarrow: only for Parquet outputs

            writes.append(Written(parts_dir(out), f"parts folder of the {what}", "folder"))
    if config.metrics_enabled:
        atomic(layout.metrics, "metrics file")
    atomic(layout.over_limit, "over-limit file")
    atomic(layout.rejects, "rejects file")
    atomic(layout.checkpoint, "checkpoint")
    writes.append(Written(layout.lock, "lock file", "temp"))
    card = card_path(layout.outputs.values())
    if card is not None:
        atomic(card, "dataset card (the splits, for datasets.load_dataset)")
    if config.cache_enabled and config.cache_path and config.summarizer != "extractive":
        cache = Path(config.cache_path)
        writes.append(Written(cache, "summary cache", "temp"))
        writes.extend(Written(cache.with_name(cache.name + side), "summary cache", "temp")
                      for side in _SQLITE_SIDE_FILES)
    return writes


def check_writes(inputs: list[InputFile], writes: list[Written], choose: str = _CHOOSE) -> None:
    """Raise `ConfigError` naming both paths when a written path is an input or another
    written path, is not a regular file, or lies where no file can be created; ``choose``
    says what to do instead."""
    for item in writes:
        _check_kind(item)
        _check_folder(item.path)
    files = [(source.path, _identity(source.path)) for source in inputs if source.stream is None]
    seen: dict[Any, Written] = {}
    folders = [(w, w.path.resolve()) for w in writes if w.kind == "folder"]
    for item in writes:
        where, ident = _identity(item.path)
        for path, (real, inode) in files:
            if where == real or (inode is not None and inode == ident):
                raise ConfigError(f"{item.path} (the {item.what}) would overwrite the input "
                                  f"{path}{_via(item.path, path, where, real)}; nothing "
                                  f"was written; {choose}")
        if item.kind == "folder":
            for path, (real, _) in files:
                if real.is_relative_to(where):
                    raise ConfigError(f"the input {path} lies in {item.path} (the "
                                      f"{item.what}), which the run deletes; {choose}")
        else:
            for folder, real_folder in folders:
                if where.is_relative_to(real_folder):
                    raise ConfigError(f"{item.path} (the {item.what}) lies in {folder.path} "
                                      f"(the {folder.what}); {choose}")
        for key in (where, ident):
            other = seen.get(key)
            if other is not None:
                raise ConfigError(f"{item.path} (the {item.what}) and {other.path} (the "
                                  f"{other.what}) are the same file; {choose}")
            if key is not None:
                seen.setdefault(key, item)


def _via(written: Path, source: Path, real_written: Path, real_source: Path) -> str:
    """How two spellings name one file, for the message."""
    if written.absolute() == source.absolute():
        return ""
    if written.is_symlink() or source.is_symlink():
        return " (the same file, through a symbolic link)"
    if real_written != real_source:
        return " (the same file, through a hard link)"
    return " (the same file)"


def _identity(path: Path) -> tuple[Path, tuple[int, int] | None]:
    """A path's resolved form and, when it exists, its (device, inode)."""
    try:
        st = path.stat()
    except OSError:
        return resolve(path), None
    return resolve(path), (st.st_dev, st.st_ino)


def _check_kind(item: Written) -> None:
    path = item.path
    if not os.path.lexists(path):
        return
    if item.kind != "file" and path.is_symlink():
        raise ConfigError(f"{path} (the {item.what}) is a symbolic link; the run writes it "
                          "in place, so remove the link first")
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # a dangling link: renaming onto it replaces the link, nothing else
    if item.kind == "folder":
        if not stat.S_ISDIR(mode):
            raise ConfigError(f"{path} (the {item.what}) exists and is not a folder; "
                              "remove it")
        return
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{path} (the {item.what}) is a folder; a file is written there")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{path} (the {item.what}) is {file_kind(mode)}, not a regular "
                          "file; the run would replace it, so give the name of a file")


def _check_folder(path: Path) -> None:
    """The nearest existing folder above ``path`` must be a folder we may write in."""
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"cannot write {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write {path}: permission denied (the folder {parent} "
                          "is not writable)")


# Who wrote an existing output

def input_id(source: InputFile) -> str:
    """How a run's metrics file names one of its inputs."""
    if source.stream is not None:
        label = getattr(source.stream, "label", None)
        return str(label) if label is not None else str(source.path)
    return str(source.path.resolve())


def settings_digest(config: CompressionConfig, sample_percent: float | None,
                    seed: int) -> str:
    """A fingerprint of the settings that decide the output rows."""
    settings = {"config": config.fingerprint_dict(),
                "sample": [sample_percent, seed if sample_percent is not None else None]}
    text = json.dumps(settings, sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def run_record(inputs: list[InputFile], layout: OutputLayout, config: CompressionConfig,
               sample_percent: float | None, seed: int) -> dict[str, Any]:
    """The metrics file's ``run`` section: which input each output was written from, and
    the settings' fingerprint (what `check_existing` compares a new run with)."""
    return {
        "inputs": [input_id(source) for source in inputs],
        "outputs": {str(layout.outputs[source.path].resolve()): input_id(source)
                    for source in inputs if source.path in layout.outputs},
        "settings_fingerprint": settings_digest(config, sample_percent, seed),
    }


def check_existing(inputs: list[InputFile], layout: OutputLayout, config: CompressionConfig,
                   record: dict[str, Any], *, overwrite: bool = False,
                   resume: bool = False) -> None:
    """Refuse to replace outputs (or sidecars) that another run wrote: from other inputs,
    with other settings, or by something that left no metrics file to say."""
    if overwrite or (resume and layout.checkpoint.exists()):
        return  # a resume continues its own run; the checkpoint says whether it is
    found = [(source, out) for source, out in layout.outputs.items() if os.path.lexists(out)]
    sidecars = [p for p in layout.sidecars if os.path.lexists(p)]
    if not found and not sidecars:
        return
    first = found[0][1] if found else sidecars[0]
    old = _recorded(layout.metrics)
    if old is None:
        why = (f"there is no metrics file {layout.metrics} beside it to say which run "
               "wrote it (not written by trajectory-compressor, or with metrics disabled)"
               if not layout.metrics.exists() else
               f"its metrics file {layout.metrics} does not say which run wrote it")
        raise ConfigError(f"{first} already exists, and {why}; {_OVERWRITE}")
    outputs = old.get("outputs")
    if not isinstance(outputs, dict):
        outputs = {}
    ids = {source.path: input_id(source) for source in inputs}
    for source_path, out in found:
        wrote = outputs.get(str(out.resolve()))
        now = ids.get(source_path, str(source_path))
        if wrote is None:
            raise ConfigError(f"{out} already exists and the run recorded in "
                              f"{layout.metrics} did not write it; {_OVERWRITE}")
        if wrote != now:
            raise ConfigError(f"{out} holds the output of the input {wrote}; this run would "
                              f"replace it with the output of {now}; {_OVERWRITE}")
    old_inputs = [str(i) for i in old.get("inputs") or []]
    if old_inputs and not set(old_inputs) & set(ids.values()):
        raise ConfigError(f"{first} belongs to the run over the input {old_inputs[0]}; this "
                          f"run over {next(iter(ids.values()))} would replace it; {_OVERWRITE}")
    if old.get("settings_fingerprint") != record.get("settings_fingerprint"):
        raise ConfigError(f"{first} was written from the same input with other settings"
                          f"{_first_difference(layout.metrics, config)}; {_OVERWRITE}")


def _recorded(metrics: Path) -> dict[str, Any] | None:
    """The ``run`` section of a metrics file, or None when there is none to read."""
    try:
        data = jsonio.loads(read_bounded(metrics, "metrics file", METRICS_CAP))
    except (OSError, ValueError):
        return None
    run = data.get("run") if isinstance(data, dict) else None
    return run if isinstance(run, dict) else None


def _first_difference(metrics: Path, config: CompressionConfig) -> str:
    """`` (section.key was X, now Y)`` for the first recorded setting that changed."""
    try:
        old = jsonio.loads(read_bounded(metrics, "metrics file", METRICS_CAP)).get(
            "settings") or {}
    except (OSError, ValueError, AttributeError):
        return ""
    for section, values in config.run_settings().items():
        before = old.get(section) if isinstance(old, dict) else None
        for key, value in values.items():
            was = before.get(key) if isinstance(before, dict) else None
            if was != value:
                return f" ({section}.{key} was {was!r}, now {value!r})"
    return ""


def check_written_file(path: Path, input_spec: str, what: str,
                       protected: Sequence[str | Path] = ()) -> None:
    """A single file another command writes (``analyze --json``, ``report --html``): not
    an input, not one of ``protected`` (a run's own inputs and sidecars, say), not a
    device or folder, in a folder that can be written."""
    inputs: list[InputFile] = []
    local = Path(input_spec).exists() or any(ch in input_spec for ch in "*?[")
    if local:
        try:
            inputs = discover_inputs(input_spec)
        except Exception:  # the command itself reports a bad input, in its words
            inputs = []
    inputs += [InputFile(Path(p), "file") for p in protected]
    writes = [Written(path, what), Written(temp_path(path), f"temporary file of {what}", "temp")]
    check_writes(inputs, writes, f"choose another name for the {what}")


def recorded_inputs(metrics: Any) -> list[Path]:
    """The local input files a run's metrics (``run.inputs``) name: what a command that
    reads the run must never write over."""
    run = metrics.get("run") if isinstance(metrics, dict) else None
    names = run.get("inputs") if isinstance(run, dict) else None
    if not isinstance(names, list):
        return []
    return [Path(n) for n in names if isinstance(n, str) and os.path.lexists(n)]
