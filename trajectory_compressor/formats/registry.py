"""The containers this package reads and writes, in one table, and finding the inputs (§7).

A container is how rows sit in a file (JSON Lines, Parquet, a `datasets` Arrow shard or
stream). Each has one module with its reader and writer; this table says how a file is
recognised, read, counted and written. A new container is one module plus one row here.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, InputError
from .base import InputFile, Record, Sink, text_chars
from .links import LOOP, is_link_loop


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, imported on first call: pyarrow and `datasets` load only when used."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(import_module(f".{module}", __package__), name)(*args, **kwargs)

    return call


@dataclass(frozen=True)
class Container:
    """One container: how it is recognised, read, counted and written.

    ``read(source, skip)`` yields records after ``skip`` lines or rows; ``rows(source)``
    is the row count when it is cheap to know (else None); ``schema(source)`` the Arrow
    schema a Parquet output of it starts from; ``open_sink(final, schema, resume,
    text_chars)`` opens an output; ``written_as`` is the container an output of this input
    is written in by default (None: this one).
    """

    name: str
    suffixes: tuple[str, ...]
    extension: str | None
    read: Callable[[InputFile, int], Iterator[Record]]
    rows: Callable[[InputFile], int | None] = lambda source: source.rows
    schema: Callable[[InputFile], Any] = lambda source: None
    open_sink: Callable[..., Sink] | None = None
    written_as: str | None = None


CONTAINERS: dict[str, Container] = {c.name: c for c in (
    Container("jsonl.gz", (".jsonl.gz",), ".jsonl.gz", _lazy("jsonl", "read_jsonl"),
              open_sink=_lazy("jsonl", "open_sink")),
    Container("jsonl", (".jsonl",), ".jsonl", _lazy("jsonl", "read_jsonl"),
              rows=_lazy("jsonl", "input_rows"), open_sink=_lazy("jsonl", "open_sink")),
    # A JSON array of rows; a .json file holding JSON lines is read as jsonl (file_format).
    Container("json", (".json",), ".json", _lazy("json_array", "read_json_array"),
              rows=_lazy("json_array", "input_rows"), open_sink=_lazy("json_array", "open_sink")),
    Container("parquet", (".parquet",), ".parquet", _lazy("parquet", "read_parquet"),
              rows=_lazy("parquet", "input_rows"), schema=_lazy("parquet", "input_schema"),
              open_sink=_lazy("parquet", "open_sink")),
    # A Hugging Face dataset becomes Parquet shards that `datasets` loads back.
    Container("arrow", (), None, _lazy("hf", "read_dataset"),
              schema=_lazy("hf", "input_schema"), written_as="parquet"),
    Container("hf", (), None, _lazy("hf", "read_dataset"),
              schema=_lazy("hf", "input_schema"), written_as="parquet"),
)}
# Longest suffix first: ``.jsonl.gz`` before ``.jsonl``.
_BY_SUFFIX = sorted(((s, c.name) for c in CONTAINERS.values() for s in c.suffixes),
                    key=lambda item: -len(item[0]))
SUFFIXES = tuple(s for s, _ in _BY_SUFFIX)
_NAMED = ", ".join(s for c in CONTAINERS.values() for s in c.suffixes)


# A run's own side files are never inputs of a folder or glob: a file named like one is
# passed over when the metrics file of its run says this tool wrote it (`tool_sidecar`).
SIDECARS = ("_metrics.json", "_over_limit.jsonl", "_rejects.jsonl")
_METRICS = SIDECARS[0]
_CHECKPOINT = ".checkpoint.json"  # `OutputLayout.checkpoint`: hidden, `.<stem>.checkpoint.json`


def tool_sidecar(path: Path) -> bool:
    """Whether ``path`` is a sidecar a run of this tool wrote: named like one, with the
    run's metrics file (``<stem>_metrics.json``, the file itself for a metrics file)
    beside it recording the run (its ``run.settings_fingerprint``)."""
    if path.name.startswith(".") and path.name.endswith(_CHECKPOINT):
        return _written_by_a_run(path, _is_checkpoint)
    suffix = next((s for s in SIDECARS if path.name.endswith(s)), None)
    if suffix is None:
        return False
    return _written_by_a_run(path.with_name(path.name[:-len(suffix)] + _METRICS), _is_metrics)


def _is_metrics(data: dict[str, Any]) -> bool:
    run = data.get("run")
    return isinstance(run, dict) and isinstance(run.get("settings_fingerprint"), str)


def _is_checkpoint(data: dict[str, Any]) -> bool:
    return isinstance(data.get("settings"), dict) and {"version", "skip", "inputs"} <= set(data)


def _written_by_a_run(record: Path, looks_right: Callable[[dict[str, Any]], bool]) -> bool:
    """Whether ``record`` (a run's metrics file, or its hidden resume checkpoint) is a
    small JSON object that ``looks_right``."""
    try:
        from . import jsonio
        from .bounded import METRICS_CAP, read_bounded

        # A run's record is small and a regular file; anything else is data.
        data = jsonio.loads(read_bounded(record, "metrics file", METRICS_CAP))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and looks_right(data)


def _kind_of(path: Path) -> str:
    """What a path that is neither file nor folder is, for a message."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return LOOP if exc.errno == errno.ELOOP else "a symbolic link to nothing"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def file_format(path: Path) -> str | None:
    """The container of a file by its name (``jsonl``, ``jsonl.gz``, ``json``,
    ``parquet``), or None; an existing ``.json`` file that does not start with ``[``
    holds JSON lines."""
    name = path.name.lower()
    for suffix, container in _BY_SUFFIX:
        if name.endswith(suffix):
            if container == "json" and path.is_file():
                from .json_array import first_char

                if first_char(path) not in (b"[", b""):
                    container = "jsonl"
            if container == "jsonl" and _gzip_inside(path):
                return "jsonl.gz"  # gzip named .jsonl: read as what it is
            return container
    return None


def _gzip_inside(path: Path) -> bool:
    """Whether the regular file ``path`` starts with gzip's magic bytes."""
    from .jsonl import GZIP_MAGIC, magic

    return magic(path).startswith(GZIP_MAGIC)


def file_stem(path: Path) -> str:
    """A file's name without its container suffix (``a.jsonl.gz`` -> ``a``)."""
    name = path.name
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def file_suffix(path: Path) -> str | None:
    """The container suffix ``path``'s name ends with, as written (``.json``, ``.JSONL``)."""
    name = path.name
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix):
            return name[-len(suffix):]
    return None


def extension(container: str) -> str:
    """The file name ending of an output in ``container``."""
    ext = CONTAINERS[container].extension
    if ext is None:
        raise ConfigError(f"{container} outputs cannot be written")
    return ext


def output_extension(source: InputFile, container: str) -> str:
    """The name ending of ``source``'s output in ``container``: the input's own suffix when
    the container is the input's (``data.json`` -> ``.json``, so it never meets the output
    of a ``data.jsonl`` beside it), else the container's extension."""
    if source.stream is None and container == source.format:
        own = file_suffix(source.path)
        if own is not None:
            return own
    return extension(container)


def output_container(source: InputFile, requested: str) -> str:
    """The container ``source``'s output is written in: ``requested``, or for ``same`` the
    input's own (or the one it is written as); JSONL from gzip input stays gzip."""
    own = CONTAINERS[source.format]
    if requested == "same":
        return own.written_as or own.name
    if requested == "jsonl" and source.format == "jsonl.gz":
        return "jsonl.gz"
    return requested


def read_records(source: InputFile, skip_lines: int = 0) -> Iterator[Record]:
    """Records of any supported input; ``skip_lines`` lines (JSONL) or rows (others) are
    passed over (resume)."""
    return CONTAINERS[source.format].read(source, skip_lines)


def open_sink(container: str, final: Path, source: InputFile, resume: Any = None,
              text_chars: Callable[[Any], int] = text_chars, marks: bool = False) -> Sink:
    """An output of ``source``'s rows written in ``container`` to ``final`` (reopened from
    a flush state ``resume``); ``text_chars`` measures a row's text; ``marks``: its turns
    may carry windows output's training marks (§20), which a fixed schema must hold."""
    opener = CONTAINERS[container].open_sink
    if opener is None:
        raise ConfigError(f"{container} outputs cannot be written")
    schema = CONTAINERS[source.format].schema(source)
    if marks and schema is not None:
        from .parquet import with_training_marks

        schema = with_training_marks(schema)
    return opener(final, schema, resume, text_chars)


def count_rows(inputs: list[InputFile]) -> int | None:
    """The total row count of ``inputs`` when every one of them knows it cheaply, else None."""
    total = 0
    for source in inputs:
        rows = CONTAINERS[source.format].rows(source)
        if rows is None:
            return None
        total += rows
    return total


def discover_inputs(
    spec: str,
    *,
    split: str | None = None,
    data_files: str | list[str] | dict[str, Any] | None = None,
    skipped: list[Path] | None = None,
) -> list[InputFile]:
    """The inputs named by ``spec``: a file, a folder (its supported files), a glob, a
    Hugging Face `save_to_disk` folder, or a dataset name for `datasets` streaming.

    A folder's or glob's files that a run of this tool wrote beside its output
    (`tool_sidecar`) are passed over, and added to ``skipped`` when it is given.

    ``split`` and ``data_files`` are passed to `datasets` as it understands them; giving
    either makes ``spec`` a dataset (unless it is a `save_to_disk` folder).
    """
    from . import hf

    path = Path(spec)
    if path.is_dir() and hf.is_saved_dataset(path):
        if data_files is not None:
            raise InputError(f"{spec} is a save_to_disk folder; --data-files does not apply")
        return hf.saved_dataset_inputs(path, split)
    if split is not None or data_files is not None:
        if path.is_file():
            raise InputError(f"--split and --data-files apply to Hugging Face datasets, not to "
                             f"the file {spec}")
        return hf.stream_inputs(spec, split, data_files)
    if path.is_file():
        fmt = file_format(path)
        if fmt is None:
            raise InputError(f"{spec}: unsupported file type (expected {_NAMED})")
        return [InputFile(path, fmt, name=file_stem(path))]
    if path.is_dir():
        found = sorted(path.iterdir())
    elif any(ch in spec for ch in "*?["):
        found = sorted(Path(p) for p in glob.glob(spec, recursive=True))
    elif is_link_loop(path):
        raise InputError(f"{spec} is {LOOP}, not a file or folder; remove the link or "
                         "point it at the data")
    elif file_format(path) is None and hf.looks_like_dataset_name(spec):
        return hf.stream_inputs(spec, None, None)
    elif os.path.lexists(spec):
        raise InputError(f"{spec} is {_kind_of(path)}, not a file or folder; the run reads "
                         "its input more than once (to count, then to compress), so write "
                         "the data to a regular file and give that")
    else:
        raise InputError(f"input not found: {spec}")
    # A data file that is no regular file (a FIFO, a device, a link to nothing) holds rows
    # the run cannot read: said, never passed over in silence.
    odd = next((p for p in found if not p.is_file() and not p.is_dir()
                and file_format(p) is not None), None)
    if odd is not None:
        raise InputError(f"{odd} in {spec} is {_kind_of(odd)}, not a regular file, so its "
                         "rows cannot be read (the run reads each input more than once); "
                         "remove it, or name the files to read with a glob")
    candidates = [p for p in found if p.is_file()]
    ours = [p for p in candidates if tool_sidecar(p)]
    if skipped is not None:
        skipped += ours
    files = [InputFile(p, fmt, name=file_stem(p)) for p in candidates
             if (fmt := file_format(p)) is not None and p not in ours]
    if not files:
        raise InputError(f"{spec}: no {_NAMED} files found")
    return files
