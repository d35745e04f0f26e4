"""Reading inputs lazily: JSONL (plain or gzip) and Parquet files, folders and globs of them,
and Hugging Face datasets (§7)."""

from __future__ import annotations

import glob
import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import jsonio
from .errors import InputError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json")
PARQUET_SUFFIXES = (".parquet",)


@dataclass(frozen=True)
class Location:
    """Where a row came from: a file and its 1-based line (JSONL) or 0-based row (Parquet)."""

    file: str
    line: int | None = None
    row: int | None = None

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line}"
        if self.row is not None:
            return f"{self.file} row {self.row}"
        return self.file

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file}
        if self.line is not None:
            d["line"] = self.line
        if self.row is not None:
            d["row"] = self.row
        return d


@dataclass
class Record:
    """One input row: parsed, or the reason it could not be; ``raw`` is its original line."""

    location: Location
    row: Any = None
    raw: bytes | None = None
    error: str | None = None

    @property
    def position(self) -> int:
        """How many lines (JSONL) or rows (Parquet, Arrow) of its file end with this record.

        A resumed read passes ``position`` as ``skip_lines`` to continue after it; a
        whole-file error (no line or row) counts as 1, so it is not reported twice.
        """
        if self.location.line is not None:
            return self.location.line
        if self.location.row is not None:
            return self.location.row + 1
        return 1


@dataclass(frozen=True)
class InputFile:
    """One input and its format: ``jsonl``, ``jsonl.gz`` or ``parquet`` files, ``arrow``
    shards of a `save_to_disk` folder, or ``hf`` shards of a streamed Hugging Face dataset.

    ``name`` is the output name (without extension) when it is not the file's stem;
    ``stream`` says which dataset shard an ``hf`` input is; ``rows`` is its row count
    when known without reading it.
    """

    path: Path
    format: str
    name: str | None = None
    stream: Any = None
    rows: int | None = None

    @property
    def stem(self) -> str:
        if self.name is not None:
            return self.name
        name = self.path.name
        for suffix in (".jsonl.gz", ".jsonl", ".json", ".parquet"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return self.path.stem


def file_format(path: Path) -> str | None:
    """``jsonl``, ``jsonl.gz`` or ``parquet`` by the file name; None if unsupported."""
    name = path.name.lower()
    if name.endswith(".jsonl.gz"):
        return "jsonl.gz"
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def discover_inputs(
    spec: str,
    *,
    split: str | None = None,
    data_files: str | list[str] | dict[str, Any] | None = None,
) -> list[InputFile]:
    """The inputs named by ``spec``: a file, a folder (its supported files), a glob, a
    Hugging Face `save_to_disk` folder, or a dataset name for `datasets` streaming.

    ``split`` and ``data_files`` are passed to `datasets` as it understands them; giving
    either makes ``spec`` a dataset (unless it is a `save_to_disk` folder).
    """
    from . import hfdata

    path = Path(spec)
    if path.is_dir() and hfdata.is_saved_dataset(path):
        if data_files is not None:
            raise InputError(f"{spec} is a save_to_disk folder; --data-files does not apply")
        return hfdata.saved_dataset_inputs(path, split)
    if split is not None or data_files is not None:
        if path.is_file():
            raise InputError(f"--split and --data-files apply to Hugging Face datasets, not to "
                             f"the file {spec}")
        return hfdata.stream_inputs(spec, split, data_files)
    if path.is_file():
        fmt = file_format(path)
        if fmt is None:
            raise InputError(
                f"{spec}: unsupported file type (expected .jsonl, .jsonl.gz or .parquet)"
            )
        return [InputFile(path, fmt)]
    if path.is_dir():
        candidates = sorted(p for p in path.iterdir() if p.is_file())
    elif any(ch in spec for ch in "*?["):
        candidates = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
    elif hfdata.looks_like_dataset_name(spec):
        return hfdata.stream_inputs(spec, None, None)
    else:
        raise InputError(f"input not found: {spec}")
    files = [InputFile(p, fmt) for p in candidates if (fmt := file_format(p)) is not None]
    if not files:
        raise InputError(f"{spec}: no .jsonl, .jsonl.gz or .parquet files found")
    return files


def _open_binary(source: InputFile) -> IO[bytes]:
    if source.format == "jsonl.gz":
        return gzip.open(source.path, "rb")  # type: ignore[return-value]
    return open(source.path, "rb")


def read_jsonl(source: InputFile, skip_lines: int = 0) -> Iterator[Record]:
    """Records of a JSONL file, one per non-blank line; bad lines carry their error.

    ``skip_lines`` physical lines are passed over unparsed (resume).
    """
    name = str(source.path)
    with _open_binary(source) as f:
        for number, line in enumerate(f, start=1):
            if number <= skip_lines:
                continue
            raw = line.rstrip(b"\r\n")
            if not raw.strip():
                continue
            location = Location(name, line=number)
            try:
                yield Record(location, jsonio.loads(raw), raw)
            except UnicodeDecodeError as exc:
                yield Record(location, raw=raw, error=(
                    f"line is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
                ))
            except ValueError as exc:
                yield Record(location, raw=raw, error=f"invalid JSON: {exc}")


def read_records(source: InputFile, skip_lines: int = 0) -> Iterator[Record]:
    """Records of any supported input; ``skip_lines`` lines (JSONL) or rows (others) are
    passed over (resume)."""
    if source.format == "parquet":
        from .parquet import read_parquet

        return read_parquet(source, skip_rows=skip_lines)
    if source.format in ("arrow", "hf"):
        from .hfdata import read_dataset

        return read_dataset(source, skip_rows=skip_lines)
    return read_jsonl(source, skip_lines)


def count_rows(inputs: list[InputFile]) -> int | None:
    """The total row count of ``inputs`` when every one of them knows it, else None."""
    total = 0
    for source in inputs:
        if source.rows is not None:
            total += source.rows
        elif source.format == "parquet":
            from .parquet import parquet_rows

            rows = parquet_rows(source.path)
            if rows is None:
                return None
            total += rows
        else:
            return None
    return total
