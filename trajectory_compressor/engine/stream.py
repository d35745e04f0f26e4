"""The one input stream every job walks: read → validate → sample → batch.

`compress` and `analyze` both take their rows from a `RowStream`, so that they see the
same rows, sample them with the same draws and reject the same ones for the same reasons.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from ..core.conversation import Trajectory
from ..core.errors import RowError
from ..dialects.base import Dialect
from ..formats.base import InputFile, Record
from ..formats.registry import read_records

# Characters of input per batch, besides the batch's row count.
BATCH_CHARS = 4 << 20


@dataclass
class Entry:
    """One record of the stream: its validated turns, or why it is rejected.

    ``draws`` counts the sampler's draws up to and including it (0 without sampling).
    """

    record: Record
    draws: int
    size: int
    turns: Trajectory | None = None
    reject: str | None = None


class RowStream:
    """Records of input files, validated by ``dialect``, sampled by ``sample_percent`` (one
    seeded draw per record, in input order) and batched by rows and characters."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        sample_percent: float | None = None,
        seed: int = 42,
        batch_rows: int = 256,
        batch_chars: int = BATCH_CHARS,
    ) -> None:
        self.dialect = dialect
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
        size = len(record.raw) if record.raw is not None else self.dialect.text_chars(record.row)
        entry = Entry(record, draws, size)
        try:
            if record.error is not None:
                raise RowError(record.error)
            entry.turns = self.dialect.turns(record.row)
        except RowError as exc:
            entry.reject = exc.reason
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
