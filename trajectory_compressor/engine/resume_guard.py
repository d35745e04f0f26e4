"""A `--resume` continues only from a cut it can trust (§7).

Path, size and modification time say a file is the one an interrupted run read, unless
it was edited in place with its size and time kept. So a checkpoint also records a
digest of the bytes of each input the run had consumed (`ConsumedDigest`): hashed as
the run goes (each line once more, in order, when a checkpoint is taken), the whole file
for the inputs before the current one, the first ``skip`` lines of the current one
(formats read whole, JSON arrays and Parquet, are hashed whole). A resume hashes the
same bytes again and refuses when they differ.

A checkpoint is also data from disk: `check_checkpoint` refuses one whose counters have
the wrong type or lie out of range, or whose metrics do not account for the rows before
the cut, instead of losing or duplicating rows.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path
from typing import IO

from ..core.errors import ResumeError
from ..formats.base import InputFile
from .checkpoint import Checkpoint

_LINES = ("jsonl", "jsonl.gz")
_RESTART = "run without --resume to start over"
_CHUNK = 1 << 20


class _Input:
    """The running digest of one input's consumed bytes."""

    def __init__(self, source: InputFile) -> None:
        self.source = source
        self.lines = 0  # lines hashed so far
        self.rows = 0  # non-blank ones: a JSONL file's rows
        self._hash = hashlib.blake2b(digest_size=16)
        self._file: IO[bytes] | None = None
        self._whole: str | None = None

    def digest(self, skip: int | None) -> str:
        """The digest of the first ``skip`` lines (None: the whole file)."""
        if self._whole is not None:
            return self._whole  # finished (or read whole): never hashed twice
        if self.source.format not in _LINES:
            self._whole = self._hash_whole()
            return self._whole
        if skip is not None and skip < self.lines:
            self._restart()
        f = self._open()
        try:
            while skip is None or self.lines < skip:
                line = f.readline()
                if not line:
                    break
                self._hash.update(line)
                self.lines += 1
                self.rows += bool(line.strip())
        except (OSError, EOFError, zlib.error):
            pass  # the reader reports a broken file; the digest stops where it broke
        if skip is not None and self.lines < skip:
            raise ResumeError(f"cannot resume: the checkpoint says {skip:,} lines of "
                              f"{self.source.path} were read, but it has {self.lines:,}; "
                              f"{_RESTART}")
        found = f"{self.lines}:{self._hash.hexdigest()}"
        if skip is None:
            self._whole = found
            self.close()
        return found

    def _restart(self) -> None:
        self.close()
        self.lines = self.rows = 0
        self._hash = hashlib.blake2b(digest_size=16)

    def _open(self) -> IO[bytes]:
        # Kept open between checkpoints (closed in `close`): each line is read once.
        if self._file is None:
            if self.source.format == "jsonl.gz":
                self._file = gzip.open(self.source.path, "rb")  # type: ignore[assignment] # noqa: SIM115
            else:
                self._file = open(self.source.path, "rb")  # noqa: SIM115
        assert self._file is not None
        return self._file

    def _hash_whole(self) -> str:
        digest = hashlib.blake2b(digest_size=16)
        try:
            with open(self.source.path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
        except OSError:
            return ""
        return "file:" + digest.hexdigest()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ConsumedDigest:
    """Digests of the bytes a run has consumed from each of its inputs."""

    def __init__(self, inputs: list[InputFile]) -> None:
        self._inputs = [_Input(source) if source.stream is None else None for source in inputs]

    def at(self, file_index: int, skip: int) -> list[str]:
        """One digest per input up to ``file_index``: the inputs before it whole, that one
        up to ``skip`` lines. Inputs that are not local files get ``""``."""
        digests = []
        for index, item in enumerate(self._inputs[:file_index + 1]):
            if item is None:
                digests.append("")
                continue
            digests.append(item.digest(skip if index == file_index else None))
        return digests

    def rows_before(self, file_index: int) -> int | None:
        """Rows of the plain JSONL inputs up to the cut last digested, or None when one of
        them is of another kind (its rows are not counted here)."""
        if any(item is None or item.source.format != "jsonl"
               for item in self._inputs[:file_index + 1]):
            return None
        return sum(item.rows for item in self._inputs[:file_index + 1] if item is not None)

    def close(self) -> None:
        for item in self._inputs:
            if item is not None:
                item.close()


def check_checkpoint(checkpoint: Checkpoint, path: Path, inputs: list[InputFile],
                     digest: ConsumedDigest, sampled: bool) -> None:
    """Raise `ResumeError` when ``checkpoint`` (read from ``path``) cannot be the cut of a
    run over ``inputs``: a counter of the wrong type or out of range, consumed bytes that
    changed, or metrics that do not count the rows before the cut."""
    def bad(what: str) -> ResumeError:
        return ResumeError(f"cannot resume: the checkpoint {path} is damaged ({what}); "
                           f"{_RESTART}")

    for name in ("file_index", "skip", "over_limit", "rejects", "draws"):
        value = getattr(checkpoint, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad(f"{name} is {value!r}, not a whole number >= 0")
    if not isinstance(checkpoint.metrics, dict) or not isinstance(checkpoint.settings, dict):
        raise bad("its metrics or settings are not a mapping")
    if not isinstance(checkpoint.elapsed, (int, float)) or checkpoint.elapsed < 0:
        raise bad(f"elapsed is {checkpoint.elapsed!r}")
    if checkpoint.file_index > len(inputs):
        raise bad(f"file_index {checkpoint.file_index} is past the {len(inputs)} inputs")
    counts = {}
    for name in ("total_trajectories", "rows_rejected"):
        value = checkpoint.metrics.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad(f"metrics {name} is {value!r}")
        counts[name] = value
    recorded = getattr(checkpoint, "consumed", None)
    if recorded is not None and not (isinstance(recorded, list)
                                     and all(isinstance(d, str) for d in recorded)):
        raise bad("its digests of the inputs are not a list of strings")
    if checkpoint.file_index == len(inputs):
        return  # every input finished: nothing is read again
    now = digest.at(checkpoint.file_index, checkpoint.skip)
    # The checkpoint against itself first: its counters, then the bytes they cover.
    rows = digest.rows_before(checkpoint.file_index)
    handled = counts["total_trajectories"] + counts["rows_rejected"]
    # Each non-blank line is at least one row or reject: fewer means rows would be lost.
    if rows is not None and not sampled and handled < rows:
        raise bad(f"its metrics count {handled:,} rows before the cut, the inputs hold "
                  f"{rows:,} there")
    if not recorded:
        return
    lines = recorded[-1].partition(":")[0] if len(recorded) > checkpoint.file_index else ""
    if lines.isdigit() and int(lines) != checkpoint.skip:
        raise bad(f"skip is {checkpoint.skip:,} but its digest covers {int(lines):,} lines")
    for index, (then, current) in enumerate(zip(recorded, now, strict=False)):
        if then != current:
            raise ResumeError(
                f"cannot resume: the input {inputs[index].path} changed in the part the "
                f"interrupted run had already read (its bytes differ, though its size "
                f"and modification time do not); {_RESTART}")
