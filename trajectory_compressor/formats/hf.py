"""Hugging Face datasets as input: `save_to_disk` folders and `datasets` streaming (§7).

A `save_to_disk` folder is read straight from its Arrow shards (memory-mapped, one record
batch at a time), each shard becoming one input. Anything else goes through
``datasets.load_dataset(..., streaming=True)``: a hub name, a local dataset folder, or a
packaged builder (``json``, ``parquet``…) with ``data_files``; each stream shard becomes
one input. Either way nothing is materialised, and each input gives one Parquet shard
named ``<split>-NNNNN-of-NNNNN`` so that `datasets.load_dataset` reads the output back.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

from ..core.errors import InputError
from .base import InputFile, Location, Record
from .parquet import output_schema, records_from_batches, schema_problem

# A hub id: "name" or "owner/name" (letters, digits, '-', '_', '.').
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")


@dataclass(frozen=True)
class StreamShard:
    """One shard of a dataset streamed by `datasets`: how to load it again."""

    dataset: str
    split: str
    data_files: str | None  # JSON of the ``data_files`` argument (hashable)
    index: int
    shards: int

    @property
    def label(self) -> str:
        return f"{self.dataset} [{self.split}, shard {self.index + 1}/{self.shards}]"


def shard_name(split: str, index: int, shards: int) -> str:
    """The output name `datasets` recognises as a shard of ``split``."""
    return f"{split}-{index:05d}-of-{shards:05d}"


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a folder written by `Dataset.save_to_disk` (or a DatasetDict's)."""
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    )


def looks_like_dataset_name(spec: str) -> bool:
    """Whether a ``spec`` that is no local path (nor a file name) could name a hub dataset."""
    return bool(_HUB_ID.match(spec))


def saved_dataset_inputs(path: Path, split: str | None) -> list[InputFile]:
    """One ``arrow`` input per shard of a `save_to_disk` folder (every split, or ``split``)."""
    if (path / "dataset_dict.json").is_file():
        splits = _read_json(path / "dataset_dict.json").get("splits") or []
        if split is not None:
            if split not in splits:
                raise InputError(f"{path} has no split '{split}' (splits: {', '.join(splits)})")
            splits = [split]
        return [f for s in splits for f in _saved_split(path / s, s)]
    state = _read_json(path / "state.json")
    own = state.get("_split") or "train"
    if split is not None and split != own:
        raise InputError(f"{path} is a single '{own}' dataset, not a DatasetDict with "
                         f"a '{split}' split")
    return _saved_split(path, own)


def _saved_split(folder: Path, split: str) -> list[InputFile]:
    state = _read_json(folder / "state.json")
    files = [folder / entry["filename"] for entry in state.get("_data_files") or []]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise InputError(f"{missing[0]}: shard listed in {folder / 'state.json'} is missing")
    n = len(files)
    return [InputFile(f, "arrow", name=shard_name(split, i, n), rows=_arrow_rows(f))
            for i, f in enumerate(files)]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read this save_to_disk metadata ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: save_to_disk metadata is not a JSON object")
    return data


def _open_arrow(path: Path, mapped: bool = False) -> Any:
    """A reader over an Arrow IPC file (`datasets` writes the streaming format).

    Mapped, batches are not copied (counting rows touches only their headers); rows are
    read through plain reads, since every mapped page read would stay resident and peak
    memory would follow the shard's size.
    """
    return _open_arrow_source(path, mapped)[0]


def _open_arrow_source(path: Path, mapped: bool = False) -> tuple[Any, Any]:
    """`_open_arrow`'s reader and the file it reads (where it stopped: ``tell()``)."""
    # By its bytes: pyarrow would encode a str path as UTF-8, which a file name that is
    # not UTF-8 has no form in.
    source = pa.memory_map(os.fsencode(path)) if mapped else pa.OSFile(os.fsencode(path))
    try:
        return pa.ipc.open_stream(source), source
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_file(source), source


def _arrow_batches(reader: Any) -> Iterator[pa.RecordBatch]:
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


def _arrow_rows(path: Path) -> int | None:
    try:
        return sum(b.num_rows for b in _arrow_batches(_open_arrow(path, mapped=True)))
    except (pa.ArrowException, OSError):
        return None


def arrow_schema(path: Path) -> pa.Schema | None:
    """An Arrow shard's schema, or None if it cannot be read."""
    try:
        schema: pa.Schema = _open_arrow(path, mapped=True).schema
        return schema
    except (pa.ArrowException, OSError):
        return None


def read_dataset(source: InputFile, skip_rows: int = 0) -> Iterator[Record]:
    """Records of an ``arrow`` shard or an ``hf`` stream shard, after ``skip_rows`` rows."""
    if source.format == "arrow":
        return _read_arrow(source, skip_rows)
    return _read_stream(source, skip_rows)


def _read_arrow(source: InputFile, skip_rows: int) -> Iterator[Record]:
    """Records of an Arrow shard. A shard that breaks off (truncated, corrupt) keeps the
    rows before the break and ends with a located reject; so do bytes after the end of
    its stream (a second stream appended to it is not read): never ignored."""
    name = str(source.path)
    try:
        reader, file = _open_arrow_source(source.path)
    except (pa.ArrowException, OSError) as exc:
        if skip_rows == 0:
            yield Record(Location(name), error=f"not a readable Arrow file ({exc})")
        return
    problem = schema_problem(reader.schema)
    if problem is not None:
        for i in range(skip_rows, source.rows or 0):
            yield Record(Location(name, row=i), error=problem)
        return
    read = [0]
    broken: list[BaseException] = []

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for batch in _arrow_batches(reader):
                read[0] += batch.num_rows
                yield batch
        except (pa.ArrowException, OSError) as exc:
            broken.append(exc)

    yield from records_from_batches(name, batches(), 0, skip_rows)
    rows = read[0]
    if rows < skip_rows:
        return
    if broken:
        yield Record(Location(name, row=rows), error=(
            f"the Arrow file breaks off after {rows} rows ({_first_line(broken[0])})"))
    elif isinstance(reader, pa.ipc.RecordBatchStreamReader):
        size = source.path.stat().st_size
        if file.tell() < size:
            yield Record(Location(name, row=rows), error=(
                f"{size - file.tell()} bytes after the end of the Arrow stream (at byte "
                f"{file.tell()}) are not read: another stream appended, or garbage"))


def _read_stream(source: InputFile, skip_rows: int) -> Iterator[Record]:
    shard: StreamShard = source.stream
    ds = _load(shard.dataset, shard.split, shard.data_files)
    if ds.n_shards > 1:
        ds = ds.shard(num_shards=ds.n_shards, index=shard.index)
    if skip_rows:
        ds = ds.skip(skip_rows)
    label = shard.label
    for i, row in enumerate(_guarded(ds, shard), start=skip_rows):
        yield Record(Location(label, row=i), row)


def _guarded(ds: Any, shard: StreamShard) -> Iterator[Any]:
    try:
        yield from ds
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InputError(f"{shard.label}: reading the dataset failed ({_first_line(exc)})"
                         ) from exc


def stream_schema(source: InputFile) -> pa.Schema | None:
    """The Arrow schema of a streamed dataset's features, when `datasets` knows them and
    they are plain Arrow with turn structs (the ``json`` builder may store turns with
    varying keys as JSON text: those rows are better inferred)."""
    shard: StreamShard = source.stream
    features = _load(shard.dataset, shard.split, shard.data_files).features
    if features is None:
        return None
    schema: pa.Schema = features.arrow_schema
    if schema_problem(schema) is not None or any(_has_extension(f.type) for f in schema):
        return None
    return schema


def _has_extension(t: pa.DataType) -> bool:
    if isinstance(t, pa.ExtensionType):
        return True
    return any(_has_extension(t.field(i).type) for i in range(t.num_fields))


def stream_inputs(spec: str, split: str | None, data_files: Any) -> list[InputFile]:
    """One ``hf`` input per stream shard of dataset ``spec`` (every split, or ``split``)."""
    files_key = None if data_files is None else json.dumps(data_files, sort_keys=True)
    splits = list(_load_all(spec, files_key)) if split is None else [split]
    inputs: list[InputFile] = []
    for s in splits:
        ds = _load(spec, s, files_key)
        n = max(int(ds.n_shards), 1)
        for i in range(n):
            shard = StreamShard(spec, s, files_key, i, n)
            # The label is no file, but it names the shard uniquely (layouts key on paths).
            inputs.append(InputFile(Path(shard.label), "hf", name=shard_name(s, i, n),
                                    stream=shard))
    return inputs


@functools.lru_cache(maxsize=4)
def _load_all(spec: str, files_key: str | None) -> Any:
    return _load_dataset(spec, None, files_key)


@functools.lru_cache(maxsize=8)
def _load(spec: str, split: str, files_key: str | None) -> Any:
    return _load_dataset(spec, split, files_key)


def _load_dataset(spec: str, split: str | None, files_key: str | None) -> Any:
    data_files = None if files_key is None else json.loads(files_key)
    _check_reachable(spec)
    import datasets

    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity_error()
    try:
        import huggingface_hub

        huggingface_hub.utils.logging.set_verbosity_error()
    except (ImportError, AttributeError):
        pass
    where = f"'{spec}'" + (f" split '{split}'" if split else "")
    try:
        return datasets.load_dataset(spec, split=split, data_files=data_files, streaming=True)
    except ConnectionError as exc:
        raise InputError(f"cannot load Hugging Face dataset {where}: the hub is unreachable "
                         f"or offline and the dataset is not cached ({_first_line(exc)})"
                         ) from None
    except StopIteration:
        raise InputError(f"cannot load Hugging Face dataset {where}: no data files matched "
                         f"{data_files!r}") from None
    except Exception as exc:  # datasets raises many kinds for "cannot load this"
        raise InputError(f"cannot load Hugging Face dataset {where} "
                         f"({type(exc).__name__}: {_first_line(exc)})") from None


def _check_reachable(spec: str) -> None:
    """Fail in a second, not after the hub client's retries, when the hub is unreachable."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    if spec in _PACKAGED_DATASETS_MODULES or Path(spec).exists():
        return
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return  # the cache answers, or `datasets` says offline at once
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return  # a proxy decides; a direct probe would prove nothing
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError:
        raise InputError(
            f"input not found: {spec} is not a local file, folder or glob, and the Hugging "
            f"Face Hub ({host}) is unreachable to load it as a dataset (set HF_HUB_OFFLINE=1 "
            "to use a cached copy)"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def input_schema(source: InputFile) -> pa.Schema | None:
    """The output schema for an Arrow shard's or a stream's rows, or None to infer it."""
    schema = arrow_schema(source.path) if source.format == "arrow" else stream_schema(source)
    return None if schema is None else output_schema(schema)
