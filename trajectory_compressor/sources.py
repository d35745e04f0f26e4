"""Reading inputs lazily: JSONL (plain or gzip) files, folders and globs of them (§7)."""

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


@dataclass(frozen=True)
class InputFile:
    """One input file and its format (``jsonl``, ``jsonl.gz`` or ``parquet``)."""

    path: Path
    format: str

    @property
    def stem(self) -> str:
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


def discover_inputs(spec: str) -> list[InputFile]:
    """The files named by ``spec``: a file, a folder (its supported files) or a glob."""
    path = Path(spec)
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
    """Records of any supported input file."""
    if source.format == "parquet":
        from .parquet import read_parquet

        return read_parquet(source, skip_rows=skip_lines)
    return read_jsonl(source, skip_lines)
