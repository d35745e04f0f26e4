"""What every container shares: where a row came from (`Location`, `Record`, `InputFile`)
and writing outputs atomically: a temporary name until complete, then a rename (§7).

Every sink follows one life cycle: ``write_row``…, ``flush`` (durable up to here; returns
the state a resumed run reopens it with), ``finish`` (complete under the temporary name),
``commit`` (rename to the final name), or ``discard`` / ``close_keep`` when a run stops.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

from ..core.errors import OutputError


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
        return self.name if self.name is not None else self.path.stem


class Sink(Protocol):
    """What the pipeline writes rows into (`JsonlSink`, `ParquetSink`)."""

    rows: int

    def write_row(self, row: Any) -> None: ...

    def flush(self) -> Any: ...

    def finish(self) -> None: ...

    def cleanup(self) -> None: ...

    def commit(self) -> None: ...

    def discard(self) -> None: ...

    def close_keep(self) -> None: ...


def temp_path(final: Path) -> Path:
    """The in-progress name of ``final`` (same folder, so the rename is atomic)."""
    return final.with_name(f".{final.name}.partial")


def unique_temp_path(final: Path) -> Path:
    """An in-progress name of ``final`` no other run uses (this process's id and a random
    token): for files written in one go, which no `--resume` needs to find again."""
    stem = os.fsdecode(os.fsencode(final.name)[:200])  # within NAME_MAX with the suffix
    return final.with_name(f".{stem}.{os.getpid()}-{secrets.token_hex(4)}.partial")


def create_exclusive(path: Path) -> IO[bytes]:
    """``path`` opened for writing as a new file of this run's own: an older file of that
    name (an interrupted run's, or one a run whose lock was deleted still writes) is
    unlinked first, never truncated, so two runs never write into one file."""
    for _ in range(20):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue  # another process created it between the two calls: again
        return os.fdopen(fd, "wb")
    raise OutputError(f"cannot create {path}: another process keeps creating it")


def replace_file(temp: Path, final: Path) -> None:
    """Rename ``temp`` to ``final``, never onto something that is not a regular file: a
    rename onto ``/dev/null`` or a FIFO would put a regular file in its place."""
    try:
        mode: int | None = os.lstat(final).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OutputError(f"{final} is not a regular file, so it was not replaced; the "
                          f"finished output is {temp}")
    os.replace(temp, final)


class AtomicFile:
    """A binary file written under `temp_path` and renamed to its final name on `commit`."""

    def __init__(self, final: Path, gzip_level: int | None = None, resume_at: int | None = None,
                 *, unique: bool = False):
        self.final = final
        self.temp = unique_temp_path(final) if unique else temp_path(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        if resume_at is not None:
            self._raw: IO[bytes] = open(self.temp, "r+b")  # noqa: SIM115
            if os.fstat(self._raw.fileno()).st_size < resume_at:
                self._raw.close()
                raise FileNotFoundError(2, "shorter than the checkpoint says", str(self.temp))
            # Bytes past the checkpoint belong to rows the resumed run writes again.
            self._raw.truncate(resume_at)
            self._raw.seek(resume_at)
        else:
            self._raw = create_exclusive(self.temp)
        self._gzip = gzip_level
        self._out: IO[bytes] = self._raw if gzip_level is None else self._gzip_member()
        self.closed = False
        self.committed = False

    def _gzip_member(self) -> IO[bytes]:
        assert self._gzip is not None
        member = gzip.GzipFile(fileobj=self._raw, mode="ab", compresslevel=self._gzip, mtime=0)
        return cast(IO[bytes], member)

    def write(self, data: bytes) -> None:
        self._out.write(data)

    def flush(self) -> int:
        """Make the bytes so far durable; return the offset a resume truncates back to."""
        if self._gzip is not None:
            # Ending the gzip member here makes the file a valid concatenation so far.
            self._out.close()
            self._raw.flush()
            offset = self._raw.tell()
            self._out = self._gzip_member()
        else:
            self._raw.flush()
            offset = self._raw.tell()
        os.fsync(self._raw.fileno())
        return offset

    def close_keep(self) -> None:
        """Close, keeping the temporary file (complete, or for `--resume`)."""
        if self.closed:
            return
        self._out.close()
        if self._out is not self._raw:
            self._raw.close()
        self.closed = True

    def commit(self) -> None:
        """Finish the file and move it to its final name."""
        if self.committed:
            return
        self.close_keep()
        replace_file(self.temp, self.final)
        self.committed = True

    def discard(self) -> None:
        """Close and delete the temporary file (the final name is never touched)."""
        self.close_keep()
        if not self.committed:
            self.temp.unlink(missing_ok=True)


class FinishedFile:
    """An output an interrupted run completed under its temporary name: only the rename
    (or the deletion) is left to do."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.temp = temp_path(final)
        self.rows = 0
        # Renamed already when an interrupted run died while committing.
        if not self.temp.is_file() and not final.is_file():
            raise FileNotFoundError(2, "missing", str(self.temp))

    def write_row(self, row: Any) -> None:
        raise RuntimeError(f"{self.final} is already complete")

    def flush(self) -> None:
        return None

    def finish(self) -> None:
        """Already finished."""

    def cleanup(self) -> None:
        """Nothing to drop."""

    def commit(self) -> None:
        if self.temp.exists():
            replace_file(self.temp, self.final)

    def discard(self) -> None:
        self.temp.unlink(missing_ok=True)

    def close_keep(self) -> None:
        """Nothing is open."""


def write_atomic(final: Path, data: bytes) -> None:
    """Write a small file in one go, atomically and durably (a temporary name of its own,
    fsync, rename)."""
    f = AtomicFile(final, unique=True)
    f.write(data)
    f.flush()
    f.commit()


def text_chars(value: Any) -> int:
    """How many characters of text ``value`` holds in all its strings (a size estimate)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_chars(v) for v in value.values())
    if isinstance(value, list):
        return sum(text_chars(v) for v in value)
    return 0
