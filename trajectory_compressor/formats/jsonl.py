"""JSON Lines: one row per line, plain or gzip (`.jsonl`, `.jsonl.gz`); reader and sink."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from . import jsonio
from .base import AtomicFile, InputFile, Location, Record

GZIP_MAGIC = b"\x1f\x8b"
# Compressions a file named .jsonl may hold that are not read: the hint names the tool.
_OTHER_MAGIC = ((b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"), (b"\xfd7zXZ\x00", "xz", "xz -d"),
                (b"BZh", "bzip2", "bzip2 -d"))


def magic(path: Path) -> bytes:
    """The first bytes of ``path`` (empty when it is no regular file or cannot be read)."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.read(fd, 8) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def compressed_hint(path: Path) -> str | None:
    """Why a plain JSON lines file cannot be read when it is compressed in a format the
    reader does not open (zstd, xz, bzip2), with the command that decompresses it."""
    head = magic(path)
    for prefix, name, command in _OTHER_MAGIC:
        if head.startswith(prefix) and (name != "bzip2" or head[3:4].isdigit()):
            return (f"the file is {name}-compressed although its name says JSON lines; "
                    f"decompress it first ({command} {path.name}), or give the "
                    "decompressed file (gzip is read as it is, whatever the name)")
    return None


def _open_binary(source: InputFile) -> IO[bytes]:
    if source.format == "jsonl.gz":
        return gzip.open(source.path, "rb")  # type: ignore[return-value]
    return open(source.path, "rb")


def read_jsonl(source: InputFile, skip_lines: int = 0) -> Iterator[Record]:
    """Records of a JSONL file, one per non-blank line; bad lines carry their error.

    ``skip_lines`` physical lines are passed over unparsed (resume). A file that cannot be
    read on (a truncated or corrupt gzip stream, a read error) ends with one error record
    at the line where it broke: the lines before it are kept.
    """
    name = str(source.path)
    number = 0
    hint = compressed_hint(source.path) if source.format == "jsonl" else None
    if hint is not None:
        if skip_lines == 0:
            yield Record(Location(name), error=hint)
        return
    try:
        with _open_binary(source) as f:
            for number, line in enumerate(f, start=1):
                if number <= skip_lines:
                    continue
                raw = line.rstrip(b"\r\n")
                if raw.strip():
                    yield _record(Location(name, line=number), raw)
    except (OSError, EOFError, zlib.error) as exc:
        broken = number + 1
        if broken > skip_lines:
            what = _broken_file(source, exc)
            location = Location(name) if number == 0 else Location(name, line=broken)
            yield Record(location, error=what if number == 0 else
                         f"{what}; the file breaks off after line {number}")


def input_rows(source: InputFile) -> int | None:
    """The lines of a plain JSON Lines file, counted fast (about a second per GB), for a
    progress bar with a total; None for gzip (it would mean decompressing it twice)."""
    if source.format != "jsonl":
        return None
    lines, last = 0, b"\n"
    try:
        with open(source.path, "rb") as f:
            while chunk := f.read(1 << 22):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return None
    return lines + (last != b"\n")


# A UTF-8 byte order mark (Windows editors write one; ``cat`` of two such files puts one
# mid-file) is no part of the row: dropped, so an unchanged row is written back as JSON.
_BOM = b"\xef\xbb\xbf"


def _record(location: Location, raw: bytes) -> Record:
    raw = raw.removeprefix(_BOM)
    try:
        return Record(location, jsonio.loads(raw), raw)
    except UnicodeDecodeError as exc:
        return Record(location, raw=raw, error=(
            f"line is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"))
    except ValueError as exc:
        return Record(location, raw=raw, error=f"invalid JSON: {exc}")


def _broken_file(source: InputFile, exc: BaseException) -> str:
    if source.format == "jsonl.gz":
        if isinstance(exc, gzip.BadGzipFile):
            return ("not a gzip file (named .gz)" if source.path.name.lower().endswith(".gz")
                    else "not a gzip file")
        if isinstance(exc, EOFError):
            return "the gzip stream is truncated"
        return f"the gzip stream is corrupt ({exc})"
    return f"cannot read the file ({getattr(exc, 'strerror', None) or exc})"


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
