"""The one input stream every job walks: read → validate → sample → batch.

`compress` and `analyze` both take their rows from a `RowStream`, so that they see the
same rows, sample them with the same draws and reject the same ones for the same reasons.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from ..core.conversation import Trajectory
from ..core.distill_row import DistillStats
from ..core.errors import RowError, one_line_error
from ..dialects import DETECT_SCAN, row_check
from ..dialects.base import Dialect
from ..dialects.sharegpt import SHAREGPT
from ..formats.base import InputFile, Record
from ..formats.jsonio import MAX_NESTING, too_deep
from ..formats.registry import read_records

if TYPE_CHECKING:
    from .compressor import TrajectoryCompressor

# Characters of input per batch, besides the batch's row count.
BATCH_CHARS = 4 << 20


@dataclass
class Entry:
    """One record of the stream: its validated turns, or why it is rejected.

    ``draws`` counts the sampler's draws up to and including it (0 without sampling);
    ``dialect`` is its file's.
    """

    record: Record
    draws: int
    size: int
    dialect: Dialect
    turns: Trajectory | None = None
    reject: str | None = None
    distill: DistillStats | None = None  # what distilling did to ``record.row`` (§18)

    def distill_with(self, compressor: TrajectoryCompressor) -> str | None:
        """Distill the row's tool outputs (`compression.distill`) before it is counted
        and planned: the record then holds the distilled row, written anew. Returns why
        distilling failed (the row goes on as it was), else None."""
        if self.turns is None:
            return None
        try:
            done = compressor.distill(self.record.row, self.turns, self.dialect)
        except Exception as exc:  # a rule's bug costs the row its distilling, never the row
            return f"distill failed, the row goes on undistilled: {one_line_error(exc)}"
        if done is not None:
            self.record.row, self.turns, self.distill = done
            if self.distill.verify_failed:
                return ("distilled row does not read back, written undistilled: "
                        f"{self.distill.verify_failed}")
            self.record.raw = None
        return None


class RowStream:
    """Records of input files, validated by their dialect, sampled by ``sample_percent``
    (one seeded draw per record, in input order) and batched by rows and characters.

    ``dialect`` is either one dialect for every file or a function that picks a file's
    dialect from its first rows (`dialects.detect`); `detect` applies it to a file.
    """

    def __init__(
        self,
        dialect: Dialect | Callable[[Iterable[Any]], Dialect],
        *,
        sample_percent: float | None = None,
        seed: int = 42,
        batch_rows: int = 256,
        batch_chars: int = BATCH_CHARS,
    ) -> None:
        self._choose: Callable[[Iterable[Any]], Dialect] | None = None
        self.dialect: Dialect = SHAREGPT
        if hasattr(dialect, "turns"):
            self.dialect = cast(Dialect, dialect)
        else:
            self._choose = dialect
        self.keep = None if sample_percent is None else sample_percent / 100
        self.batch_rows = batch_rows
        self.batch_chars = batch_chars
        self.draws = 0
        self.read_any = False  # whether the current file has yielded a record
        self._sampler = random.Random(seed)

    def replay(self, draws: int) -> None:
        """Make the draws an interrupted run made, so a resumed run samples the same rows."""
        for _ in range(draws):
            self._sampler.random()
        self.draws = draws

    def detect(self, source: InputFile) -> Dialect:
        """Pick ``source``'s dialect from its first rows (read from the file's start, so a
        resumed run decides as the interrupted one did)."""
        if self._choose is not None:
            first = (r.row for r in islice(read_records(source, 0), DETECT_SCAN)
                     if r.error is None and not too_deep(r.row, r.raw))
            try:
                self.dialect = self._choose(first)
            finally:
                first.close()  # the file, read only as far as the vote needed
        return self.dialect

    def batches(self, source: InputFile, skip: int = 0) -> Iterator[list[Entry]]:
        """``source``'s entries after ``skip`` lines or rows, in batches of ``batch_rows``
        rows or fewer when they reach ``batch_chars``: a batch of long trajectories would
        otherwise set peak memory."""
        self.read_any = skip > 0
        batch: list[Entry] = []
        chars = 0
        for record, draws in self._sampled(read_records(source, skip)):
            entry = self.entry(record, draws)
            batch.append(entry)
            chars += entry.size
            if len(batch) >= self.batch_rows or chars >= self.batch_chars:
                yield batch
                batch, chars = [], 0
        if batch:
            yield batch

    def entry(self, record: Record, draws: int = 0) -> Entry:
        """``record`` validated: its turns, or the reason it is rejected."""
        if record.error is None and too_deep(record.row, record.raw):
            record.error = (f"nested more than {MAX_NESTING} levels deep (objects and "
                            "arrays); rows this deep are not processed")
        size = (len(record.raw) if record.raw is not None else
                0 if record.error is not None else self.dialect.text_chars(record.row))
        entry = Entry(record, draws, size, self.dialect)
        try:
            if record.error is not None:
                raise RowError(record.error)
            check = row_check(self.dialect)
            if check is not None and (why := check(record.row)) is not None:
                raise RowError(why)
            entry.turns = self.dialect.turns(record.row)
        except RowError as exc:
            entry.reject = exc.reason
        except Exception as exc:  # a row no check foresaw: rejected, never the run
            entry.reject = f"cannot read the row: {one_line_error(exc)}"
        return entry

    def _sampled(self, records: Iterator[Record]) -> Iterator[tuple[Record, int]]:
        for record in records:
            self.read_any = True
            if self.keep is None:
                yield record, 0
                continue
            self.draws += 1
            if self._sampler.random() < self.keep:
                yield record, self.draws
