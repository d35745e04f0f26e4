"""Writing Parquet outputs: streamed row groups, atomic, resumable (§7).

A Parquet file only becomes readable when its footer is written, so an output is built
from part files beside it (``.<name>.parts/part-NNNNNN.parquet``), each closed at a
checkpoint, plus ``pending-<rows>.parquet`` holding the rows of the unfinished row group
(named by the rows written so far, and the previous one kept, so that a process dying
between a flush and its checkpoint leaves the previous checkpoint's pending rows intact).
A resumed run drops the parts written after the checkpoint and reloads the pending rows.
Row groups are cut by the rows alone (``ROW_GROUP_ROWS`` rows or ``ROW_GROUP_CHARS``
characters of turn text, which also bounds their memory), so a resumed run makes exactly
the row groups an uninterrupted one makes. When the input is complete the parts become
the file: renamed when there is one, else copied row group by row group into
``.<name>.partial``; then renamed to the final name at commit.

The schema comes from the input (Parquet, Arrow, `datasets` features) with a
``compression_metrics`` column added; a JSONL input's schema is inferred per row group
(the union of all keys) and the parts are unified at the end.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import CompressorError
from .parquet import METRICS_COLUMN, METRICS_TYPE, MINIMAL_SCHEMA, output_schema, parquet_schema
from .sinks import temp_path
from .sources import InputFile

ROW_GROUP_ROWS = 1000
ROW_GROUP_CHARS = 4 * 2**20


class ParquetWriteError(CompressorError):
    """Rows that one Parquet file cannot hold together (e.g. a column of mixed types)."""


def schema_for(source: InputFile) -> pa.Schema | None:
    """The output schema for ``source``'s rows, or None to infer it from the rows."""
    schema: pa.Schema | None = None
    if source.format == "parquet":
        schema = parquet_schema(source.path)
    elif source.format == "arrow":
        from .hfdata import arrow_schema

        schema = arrow_schema(source.path)
    elif source.format == "hf":
        from .hfdata import stream_schema

        schema = stream_schema(source)
    return None if schema is None else output_schema(schema)


def parts_dir(final: Path) -> Path:
    """Where the parts of ``final`` are kept until it is complete."""
    return final.with_name(f".{final.name}.parts")


class ParquetSink:
    """Rows into the Parquet file ``final``; ``schema`` None means inferred from the rows.

    ``resume`` is a state returned by `flush`, to continue an interrupted output.
    """

    def __init__(self, final: Path, schema: pa.Schema | None = None,
                 resume: dict[str, Any] | None = None) -> None:
        self.final = final
        self.temp = temp_path(final)
        self.parts = parts_dir(final)
        self.schema = schema
        self.rows = 0
        self._buffer: list[Any] = []
        self._chars = 0
        self._writer: pq.ParquetWriter | None = None
        self._writer_schema: pa.Schema | None = None
        self._closed_parts = 0
        self._last_pending: Path | None = None
        self._unified: pa.Schema | None = None  # inferred schemas so far, to fail early
        self._finished = False
        self._done = False
        final.parent.mkdir(parents=True, exist_ok=True)
        if resume is None:
            shutil.rmtree(self.parts, ignore_errors=True)
            self.temp.unlink(missing_ok=True)
            self.parts.mkdir()
        else:
            self._restore(resume)

    # writing

    def write_row(self, row: Any) -> None:
        self._buffer.append(row)
        self._chars += _text_chars(row)
        self.rows += 1
        if len(self._buffer) >= ROW_GROUP_ROWS or self._chars >= ROW_GROUP_CHARS:
            self._write_group()

    def _write_group(self) -> None:
        table = self._table(self._buffer)
        if self.schema is None:
            seen = [table.schema] if self._unified is None else [self._unified, table.schema]
            self._unified = self._final_schema(seen)
        if self._writer is not None and table.schema != self._writer_schema:
            self._close_part()
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._part(self._closed_parts), table.schema)
            self._writer_schema = table.schema
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self._buffer = []
        self._chars = 0
        _release_memory()

    def _table(self, rows: list[Any]) -> pa.Table:
        try:
            if self.schema is not None:
                return pa.Table.from_pylist(rows, schema=self.schema)
            return _infer_table(rows)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ParquetWriteError(
                f"{self.final}: these rows do not fit one Parquet schema ({exc}); "
                "use --output-format jsonl"
            ) from None

    def _part(self, index: int) -> Path:
        return self.parts / f"part-{index:06d}.parquet"

    def _close_part(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            _fsync(self._part(self._closed_parts))
            self._closed_parts += 1

    # checkpoints

    def flush(self) -> dict[str, Any]:
        """Make every row so far durable; return the state `resume` needs."""
        self._close_part()
        pending = self._pending(self.rows)
        if self._buffer:
            tmp = self.parts / ".pending.parquet.tmp"
            pq.write_table(self._table(self._buffer), tmp)
            _fsync(tmp)
            os.replace(tmp, pending)
        keep = {pending, self._last_pending}
        for old in self.parts.glob("pending-*.parquet"):
            if old not in keep:
                old.unlink()
        self._last_pending = pending
        return {"parts": self._closed_parts, "pending": len(self._buffer), "rows": self.rows}

    def _pending(self, rows: int) -> Path:
        return self.parts / f"pending-{rows:012d}.parquet"

    def _restore(self, state: dict[str, Any]) -> None:
        parts, pending, rows = int(state["parts"]), int(state["pending"]), int(state["rows"])
        if not self.parts.is_dir() or not all(self._part(i).is_file() for i in range(parts)):
            raise FileNotFoundError(2, "parts missing", str(self.parts))
        for extra in self.parts.glob("part-*.parquet"):
            if int(extra.stem.split("-")[1]) >= parts:
                extra.unlink()  # written after the checkpoint, possibly without a footer
        self._closed_parts = parts
        self.rows = rows
        self._last_pending = self._pending(rows)
        if pending:
            table = pq.read_table(self._pending(rows))
            if table.num_rows != pending:
                raise FileNotFoundError(2, "pending rows differ", str(self.parts))
            self._buffer = table.to_pylist()
            self._chars = sum(_text_chars(r) for r in self._buffer)

    # completion

    def finish(self) -> None:
        """Write the last row group and assemble the parts into the temporary file."""
        if self._finished:
            return
        if self._buffer:
            self._write_group()
        self._close_part()
        parts = [self._part(i) for i in range(self._closed_parts)]
        schemas = [pq.ParquetFile(p).schema_arrow for p in parts]
        final_schema = self._final_schema(schemas)
        if len(parts) == 1 and schemas[0] == final_schema:
            os.replace(parts[0], self.temp)
        else:
            with pq.ParquetWriter(self.temp, final_schema) as writer:
                for part in parts:
                    pf = pq.ParquetFile(part, buffer_size=1 << 20, pre_buffer=False)
                    for g in range(pf.num_row_groups):
                        table = _conform(pf.read_row_group(g, use_threads=False), final_schema)
                        writer.write_table(table, row_group_size=max(table.num_rows, 1))
                        del table
                        _release_memory()
        self._finished = True

    def _final_schema(self, schemas: list[pa.Schema]) -> pa.Schema:
        if self.schema is not None:
            return self.schema
        if not schemas:
            return MINIMAL_SCHEMA
        try:
            return pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowException, TypeError) as exc:
            raise ParquetWriteError(
                f"{self.final}: the rows' columns change type along the file ({exc}); "
                "use --output-format jsonl"
            ) from None

    def cleanup(self) -> None:
        """Drop the parts once the temporary file is complete (and checkpointed)."""
        shutil.rmtree(self.parts, ignore_errors=True)

    def commit(self) -> None:
        """Finish and move the file to its final name."""
        if self._done:
            return
        self.finish()
        os.replace(self.temp, self.final)
        self.cleanup()
        self._done = True

    def discard(self) -> None:
        """Delete everything written; the final name is never touched."""
        self.close_keep()
        self.temp.unlink(missing_ok=True)
        self.cleanup()
        self._done = True

    def close_keep(self) -> None:
        """Close open files, keeping the parts for `--resume`."""
        if self._writer is not None:
            self._writer.close()  # a part past the checkpoint; a resume deletes it
            self._writer = None


def _release_memory() -> None:
    # Arrow's allocator keeps freed row groups for reuse; given back, peak memory stays
    # one row group whatever the number of row groups written.
    pa.default_memory_pool().release_unused()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _text_chars(row: Any) -> int:
    turns = row.get("conversations") if isinstance(row, dict) else None
    if not isinstance(turns, list):
        return 0
    return sum(len(t.get("value") or "") for t in turns if isinstance(t, dict))


def _infer_table(rows: list[Any]) -> pa.Table:
    """A table of ``rows`` whose columns are the union of their keys, types inferred from
    every value (pyarrow's own inference looks at the first row's keys only)."""
    names = list(dict.fromkeys(k for row in rows for k in row))
    if METRICS_COLUMN not in names:
        names.append(METRICS_COLUMN)
    arrays = []
    for name in names:
        values = [row.get(name) for row in rows]
        arrays.append(pa.array(values, METRICS_TYPE if name == METRICS_COLUMN else None))
    return pa.Table.from_arrays(arrays, names=names)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns: cast where they exist, nulls where they do not."""
    if table.schema == schema:
        return table
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table[field.name].cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)
