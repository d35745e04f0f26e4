"""JSON Lines: one row per line, plain or gzip (`.jsonl`, `.jsonl.gz`); reader and sink."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from . import jsonio
from .base import AtomicFile, InputFile, Location, Record


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



class JsonlSink:
    """Rows as JSON lines into an `AtomicFile`."""

    def __init__(self, final: Path, resume_at: int | None = None) -> None:
        gz = 6 if final.name.endswith(".gz") else None
        self.file = AtomicFile(final, gzip_level=gz, resume_at=resume_at)
        self.rows = 0  # written by this object (not counting a resumed file's earlier rows)

    def write_row(self, row: Any) -> None:
        self.file.write(jsonio.dumps(row) + b"\n")
        self.rows += 1

    def write_raw(self, line: bytes) -> None:
        """An unchanged input line, byte for byte."""
        self.file.write(line + b"\n")
        self.rows += 1

    def flush(self) -> int:
        return self.file.flush()

    def finish(self) -> None:
        self.file.close_keep()

    def cleanup(self) -> None:
        """Nothing to drop: a JSONL file has no intermediate parts."""

    def commit(self) -> None:
        self.file.commit()

    def discard(self) -> None:
        self.file.discard()

    def close_keep(self) -> None:
        self.file.close_keep()


def open_sink(final: Path, schema: Any, resume: int | None,
              text_chars: Callable[[Any], int]) -> JsonlSink:
    """A JSONL output (gzip when named ``.gz``); rows need no schema or size."""
    return JsonlSink(final, resume_at=resume)
