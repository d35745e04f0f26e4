"""Writing outputs atomically: a temporary name until complete, then a rename (§7)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO, Any, cast

from . import jsonio


def temp_path(final: Path) -> Path:
    """The in-progress name of ``final`` (same folder, so the rename is atomic)."""
    return final.with_name(f".{final.name}.partial")


class AtomicFile:
    """A binary file written under `temp_path` and renamed to its final name on `commit`."""

    def __init__(self, final: Path, gzip_level: int | None = None, resume_at: int | None = None):
        self.final = final
        self.temp = temp_path(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        if resume_at is not None:
            self._raw: IO[bytes] = open(self.temp, "r+b")  # noqa: SIM115
            self._raw.truncate(resume_at)
            self._raw.seek(resume_at)
        else:
            self._raw = open(self.temp, "wb")  # noqa: SIM115
        self._gzip = gzip_level
        self._out: IO[bytes] = self._raw if gzip_level is None else self._gzip_member()
        self.closed = False

    def _gzip_member(self) -> IO[bytes]:
        assert self._gzip is not None
        member = gzip.GzipFile(fileobj=self._raw, mode="ab", compresslevel=self._gzip, mtime=0)
        return cast(IO[bytes], member)

    def write(self, data: bytes) -> None:
        self._out.write(data)

    def flush(self) -> int:
        """Flush to the OS and return the byte offset a resume can truncate back to."""
        if self._gzip is not None:
            # Ending the gzip member here makes the file a valid concatenation so far.
            self._out.close()
            self._raw.flush()
            offset = self._raw.tell()
            self._out = self._gzip_member()
            return offset
        self._raw.flush()
        return self._raw.tell()

    def commit(self) -> None:
        """Finish the file and move it to its final name."""
        if self.closed:
            return
        self._out.close()
        if self._out is not self._raw:
            self._raw.close()
        os.replace(self.temp, self.final)
        self.closed = True

    def discard(self) -> None:
        """Close and delete the temporary file (the final name is never touched)."""
        if self.closed:
            return
        self._out.close()
        if self._out is not self._raw:
            self._raw.close()
        self.temp.unlink(missing_ok=True)
        self.closed = True

    def close_keep(self) -> None:
        """Close without committing, keeping the temporary file for `--resume`."""
        if self.closed:
            return
        self._out.close()
        if self._out is not self._raw:
            self._raw.close()
        self.closed = True


class JsonlSink:
    """Rows as JSON lines into an `AtomicFile`."""

    def __init__(self, final: Path, resume_at: int | None = None) -> None:
        gz = 6 if final.name.endswith(".gz") else None
        self.file = AtomicFile(final, gzip_level=gz, resume_at=resume_at)
        self.rows = 0

    def write_row(self, row: Any) -> None:
        self.file.write(jsonio.dumps(row) + b"\n")
        self.rows += 1

    def write_raw(self, line: bytes) -> None:
        """An unchanged input line, byte for byte."""
        self.file.write(line + b"\n")
        self.rows += 1

    def flush(self) -> int:
        return self.file.flush()

    def commit(self) -> None:
        self.file.commit()

    def discard(self) -> None:
        self.file.discard()

    def close_keep(self) -> None:
        self.file.close_keep()


def write_atomic(final: Path, data: bytes) -> None:
    """Write a small file in one go, atomically."""
    f = AtomicFile(final)
    f.write(data)
    f.commit()
