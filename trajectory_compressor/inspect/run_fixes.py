"""What would fix a finished run's rows still over the limit (`report`; issue 25).

The rows are re-planned as `compress` planned them, so each is read as `compress` saw it:

- a row that got no summary is in the run's output as it was planned (distilled, if the
  run distilled), and is read from there through its file's dialect (or from the
  over-limit file, where `save_over_limit: false` moved it);
- a row that got a summary no longer holds the turns the summary replaced: it is read
  from the run's input (its metrics file names the inputs; the over-limit entry gives the
  line or row), distilled as the run did.

Either way the row is counted again and must come to the tokens and turns the run
recorded for it; a row that does not (an input changed or gone since, another tokenizer)
is listed as not examined, with why, rather than re-planned wrongly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig
from ..core.conversation import Row
from ..core.errors import CompressorError, one_line_error
from ..core.extractive import ExtractiveSummarizer
from ..core.metrics import METRICS_KEY
from ..counting.tokens import TokenCounter
from ..dialects import detect
from ..dialects.base import row_id
from ..engine.blocking import run_blocking
from ..engine.compressor import TrajectoryCompressor
from ..engine.projection import CountedRow
from ..engine.replan import Fixes, OverRow, OverRows, WhatWouldFix, find_fixes
from ..engine.stream import Entry, RowStream
from ..formats.base import Location, Record
from ..formats.registry import discover_inputs


@dataclass
class Flagged:
    """A row the run left over the limit, as its over-limit entry records it."""

    location: Location
    id: Any
    code: str
    metrics: dict[str, Any]  # its `compression_metrics`, as recorded
    row: Row | None = None  # the row itself, when the run moved it to the over-limit file

    @property
    def failed(self) -> bool:
        return bool(self.metrics.get("error"))

    @property
    def summarized(self) -> bool:
        region = self.metrics.get("compression_region")
        start = region.get("start_idx", -1) if isinstance(region, dict) else -1
        return isinstance(start, int) and start >= 0

    @property
    def rewritten(self) -> bool:
        """Whether the output no longer holds the row as planned (a summary, or tool
        outputs masked, §19): it is read from the run's input."""
        masked = self.metrics.get("masked_turns")
        return self.summarized or (isinstance(masked, int) and masked > 0)

    def recorded(self, key: str) -> int | None:
        value = self.metrics.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class _Wanted:
    flagged: Flagged
    counted: CountedRow | None = None
    why: str = ""  # why it could not be read, when it could not


@dataclass
class _Reader:
    config: CompressionConfig
    compressor: TrajectoryCompressor
    wanted: list[_Wanted] = field(default_factory=list)

    def stream(self) -> RowStream:
        return RowStream(partial(detect, config=self.config), batch_rows=self.config.batch_rows)

    def take(self, want: _Wanted, entry: Entry, distill: bool) -> None:
        """``entry``'s row counted (distilled first when ``distill``), if it is the row the
        run recorded; else why not."""
        if entry.turns is None:
            want.why = f"its row cannot be read: {entry.reject}"
            return
        row, turns, stats = entry.record.row, entry.turns, None
        if distill:
            done = self.compressor.distill(row, turns, entry.dialect)
            if done is not None:
                row, turns, stats = done
        counted = self.compressor.rows.count([(entry.dialect, row, turns)])[0]
        if isinstance(counted, str):
            want.why = counted
            return
        flagged = want.flagged
        tokens, turn_count = flagged.recorded("original_tokens"), flagged.recorded(
            "original_turns")
        if (tokens is not None and sum(counted) != tokens) or (
                turn_count is not None and len(turns) != turn_count):
            recorded = " in ".join("?" if n is None else f"{n:,}" for n in (tokens, turn_count))
            want.why = (f"counted {sum(counted):,} tokens in {len(turns):,} turns, the run "
                        f"recorded {recorded} (the input changed since the run, or another "
                        "--tokenizer or --config?)")
            return
        want.counted = CountedRow(row, turns, counted, entry.dialect, stats)


def run_fixes(output: Path, flagged: Sequence[Flagged], config: CompressionConfig,
              inputs: Sequence[Path], counter: TokenCounter | None = None) -> WhatWouldFix:
    """The remedies for ``flagged`` (in the order the run wrote them), re-planned under
    ``config`` (counted with ``counter``, else the config's tokenizer); ``inputs``: the
    run's input files, where summarized rows are read."""
    over = OverRows()
    try:
        counter = counter or TokenCounter.load(config.tokenizer_name,
                                               config.trust_remote_code)
        compressor = TrajectoryCompressor(config, ExtractiveSummarizer(counter.count), counter)
    except CompressorError as exc:  # a tokenizer or chat template not to be had here
        for f in flagged:
            if f.failed:
                over.failed += 1
            else:
                over.cannot_examine(str(f.location), f"it cannot be counted here: {exc}")
        return WhatWouldFix(over, Fixes(0), config.summarizer == "extractive",
                            config.summary_target_tokens, config.target_max_tokens)
    reader = _Reader(config, compressor)
    for f in flagged:
        if f.failed:
            over.failed += 1
        elif len(reader.wanted) < over.limit:
            reader.wanted.append(_Wanted(f))
        else:
            over.over += 1  # counted, not examined
    _read_written(reader, output)
    _read_inputs(reader, inputs)
    for want in reader.wanted:
        where = str(want.flagged.location)
        if want.counted is None:
            over.cannot_examine(where, want.why or "its row was not found")
            continue
        tokens_after = want.flagged.recorded("compressed_tokens") or want.counted.total
        over.keep(OverRow(where, want.flagged.id, want.flagged.code, tokens_after,
                          want.counted))
    exact = config.summarizer == "extractive"

    async def search() -> WhatWouldFix:
        async with compressor:
            return await find_fixes(compressor, over, exact=exact)

    return run_blocking(search)


def _read_written(reader: _Reader, output: Path) -> None:
    """The rows that got no summary, from the output (or their over-limit entry)."""
    waiting = [w for w in reader.wanted if not w.flagged.rewritten]
    moved = [w for w in waiting if w.flagged.row is not None]
    if moved:
        stream = reader.stream()
        stream.dialect = detect([w.flagged.row for w in moved], reader.config)
        for want in moved:
            entry = stream.entry(Record(want.flagged.location, want.flagged.row))
            reader.take(want, entry, distill=False)
    waiting = [w for w in waiting if w.flagged.row is None]
    if not waiting:
        return
    for source in discover_inputs(str(output)):
        stream = reader.stream()
        stream.detect(source)
        for batch in stream.batches(source):
            for entry in batch:
                raw = entry.record.row.get(METRICS_KEY) if isinstance(entry.record.row,
                                                                      dict) else None
                for k, want in enumerate(waiting):
                    if row_id(entry.record.row) == want.flagged.id and _same(raw, want):
                        reader.take(want, entry, distill=False)
                        del waiting[k]
                        break
            if not waiting:
                return
    for want in waiting:
        want.why = f"its row is not in {output}"


def _read_inputs(reader: _Reader, inputs: Sequence[Path]) -> None:
    """The rows that got a summary, from the run's input at their recorded place."""
    waiting = [w for w in reader.wanted if w.flagged.rewritten]
    if not waiting:
        return
    files: dict[Path, list[_Wanted]] = {}
    for want in waiting:
        named = Path(want.flagged.location.file)
        found = [p for p in inputs if p.name == named.name]
        if not found and os.path.isfile(named):
            found = [named]
        if not found:
            want.why = (f"it got a summary, so only its input holds the turns a re-plan "
                        f"needs, and {named} is not among the run's inputs that still exist")
        for path in found[:1]:
            files.setdefault(path, []).append(want)
    for path, wanted in files.items():
        if not path.is_file():
            for want in wanted:
                want.why = f"its input {path} is gone"
            continue
        by_place = {(w.flagged.location.line, w.flagged.location.row): w for w in wanted}
        try:
            for source in discover_inputs(str(path)):
                stream = reader.stream()
                stream.detect(source)
                for batch in stream.batches(source):
                    for entry in batch:
                        place = (entry.record.location.line, entry.record.location.row)
                        if place in by_place:
                            reader.take(by_place.pop(place), entry, distill=True)
                    if not by_place:
                        break
        except (OSError, CompressorError) as exc:  # the table never costs the report
            for want in by_place.values():
                want.why = f"its input {path} cannot be read: {one_line_error(exc)}"
            continue
        for want in by_place.values():
            want.why = f"{path} has no row at {want.flagged.location}"


def _same(written: Any, want: _Wanted) -> bool:
    """The written row's metrics are the ones its entry records (absent keys aside: a
    Parquet struct column gives every row every field)."""
    if not isinstance(written, dict):
        return False

    def present(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not None}

    return present(written) == present(want.flagged.metrics)
