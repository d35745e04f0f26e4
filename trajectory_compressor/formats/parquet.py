"""Parquet: rows streamed by record batch in, streamed row groups out (§7).

Reading never holds more than one record batch (plus the row group pyarrow decodes it
from). The schema helpers decide what an output Parquet file looks like: the input's
columns with their types and ``compression_metrics`` as a nullable struct column.

Writing:
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

import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.distill import ORDER
from ..core.errors import CompressorError
from ..core.extractive import clip
from ..core.metrics import METRICS_KEY
from .base import InputFile, Location, Record, replace_file, temp_path, text_chars
from .jsonio import JsonNumber

READ_BATCH_ROWS = 256
# Bytes (uncompressed) per record batch read: rows of 100 KB must not come 1,000 at once.
READ_BATCH_BYTES = 4 << 20
METRICS_COLUMN = METRICS_KEY

_INT = pa.int64()
_SAVING = pa.struct([("tokens_before", _INT), ("tokens_after", _INT), ("turns", _INT)])
METRICS_TYPE = pa.struct([
    ("original_tokens", _INT),
    ("compressed_tokens", _INT),
    ("tokens_saved", _INT),
    ("compression_ratio", pa.float64()),
    ("original_turns", _INT),
    ("compressed_turns", _INT),
    ("turns_removed", _INT),
    ("compression_region", pa.struct([("start_idx", _INT), ("end_idx", _INT),
                                      ("turns_count", _INT)])),
    ("was_compressed", pa.bool_()),
    ("still_over_limit", pa.bool_()),
    ("skipped_under_target", pa.bool_()),
    ("summarization_api_calls", _INT),
    ("summarization_errors", _INT),
    ("summary_source", pa.string()),
    ("error", pa.string()),
    ("summary_truncated", pa.bool_()),
    # §15: what the summary kept of the region's facts, and what the fidelity bar did
    ("fidelity", pa.struct([("items", _INT), ("kept", _INT), ("ratio", pa.float64()),
                            ("tail_items", _INT), ("tail_kept", _INT),
                            ("missing", pa.list_(pa.string())),
                            ("model_ratio", pa.float64()), ("invented", _INT),
                            ("invented_items", pa.list_(pa.string()))])),
    ("fidelity_repair", pa.bool_()),
    ("low_fidelity", pa.bool_()),
    ("low_fidelity_reason", pa.string()),
    # §16: tool outputs the second pass shortened
    ("elisions", pa.list_(pa.struct([("turn", _INT), ("tokens_before", _INT),
                                     ("tokens_after", _INT)]))),
    # §18: what distilling the tool outputs did; a field per rule (a struct, not a map:
    # `datasets` features have no map type), null for the rules that changed nothing
    ("distill", pa.struct([("level", pa.string()), ("tokens_before", _INT),
                           ("tokens_after", _INT), ("turns", _INT),
                           ("rules", pa.struct([(rule, _SAVING) for rule in ORDER])),
                           ("verify_failed", pa.string())])),
    # §19: what the strategy did, and the share of the assistant tokens kept
    ("strategy_used", pa.string()),
    ("masked_turns", _INT),
    ("masked_tokens", _INT),
    ("assistant_tokens_kept", pa.float64()),
    # §20: a window of a row (`output.mode: windows`); null on other rows
    ("window", _INT),
    ("windows", _INT),
    ("trained_assistant_tokens", _INT),
    ("source_id", pa.string()),
    ("trained_turns", pa.struct([("start_idx", _INT), ("end_idx", _INT)])),
    ("window_over", pa.string()),
])
# The schema of an output whose input told nothing about its columns (e.g. all rejected).
MINIMAL_SCHEMA = pa.schema([
    ("conversations", pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))),
    (METRICS_COLUMN, METRICS_TYPE),
])


def schema_problem(schema: pa.Schema) -> str | None:
    """Why no row of ``schema`` can be a trajectory, or None when some can.

    Every dialect's turns are a list of objects (ShareGPT ``conversations``, OpenAI and
    LLaMA-Factory ``messages``, a custom ``dataset.messages`` column): a file with no
    list-of-structs column holds none, said once for the file. Which column holds the
    turns and how they are spelled is each row's dialect's to judge (a Parquet file of
    OpenAI messages was rejected whole when this asked for Hermes columns).
    """
    if any(_is_turn_list(field.type) for field in schema):
        return None
    shown = ", ".join(f"{f.name} ({clip(str(f.type), 40)})" for f in schema)
    return ("no column of the file's schema is a list of turns (a list of structs), as "
            f"every dialect's turns are (columns: {clip(shown, 300) or 'none'})")


def _is_turn_list(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)):
        return False
    return bool(pa.types.is_struct(t.value_type))


def output_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with a nullable ``compression_metrics`` struct column (added or retyped),
    and its Hugging Face features metadata updated to match."""
    fields = [f for f in schema if f.name != METRICS_COLUMN]
    fields.append(pa.field(METRICS_COLUMN, METRICS_TYPE, nullable=True))
    # Other metadata (pandas' index, ARROW:schema…) still describes the kept columns.
    metadata = dict(schema.metadata or {})
    if b"huggingface" in metadata:
        metadata[b"huggingface"] = _with_metrics_feature(metadata[b"huggingface"])
    return pa.schema(fields, metadata=metadata or None)


def with_training_marks(schema: pa.Schema) -> pa.Schema:
    """``schema`` whose lists of turns can hold windows output's training marks (§20,
    `dialects.training`): ``weight`` on messages (structs with a ``role``), ``train`` on
    ShareGPT turns; fields already there keep their type."""
    fields = []
    for f in schema:
        t = f.type
        if _is_turn_list(t) and f.name != METRICS_COLUMN:
            item = t.value_type
            names = {child.name for child in item}
            mark = ("weight", _INT) if "role" in names else ("train", pa.bool_())
            if mark[0] not in names:
                item = pa.struct([*item, pa.field(*mark)])
                f = f.with_type(pa.list_(item))
        fields.append(f)
    widened = pa.schema(fields, metadata=schema.metadata)
    if widened.equals(schema):
        return schema
    # `datasets` features that lack the new fields would mislead it: it infers them.
    metadata = {k: v for k, v in (schema.metadata or {}).items() if k != b"huggingface"}
    return widened.with_metadata(metadata or None)


def _with_metrics_feature(raw: bytes) -> bytes:
    """The `datasets` features metadata with a `compression_metrics` feature, so that
    `load_dataset("parquet", …)` reads the new column with the rest."""
    try:
        info = json.loads(raw)
        features = info["info"]["features"]
        from datasets import Features

        extra = Features.from_arrow_schema(pa.schema([(METRICS_COLUMN, METRICS_TYPE)]))
        features.pop(METRICS_COLUMN, None)
        features.update(extra.to_dict())
        return json.dumps(info).encode("utf-8")
    except (ValueError, KeyError, TypeError, ImportError):
        # Unreadable features would only mislead `datasets`; let it infer from the schema.
        return b'{"info": {"features": null}}'


def native(path: Path, mode: str = "rb") -> pa.NativeFile:
    """``path`` opened for pyarrow by its bytes: pyarrow opens a path by its UTF-8 form,
    which a file name that is not UTF-8 (Python spells its bytes as lone surrogates) has
    not, and such a run stopped with an internal error."""
    return pa.OSFile(os.fsencode(path), mode)


def _schema_of(path: Path) -> pa.Schema:
    with native(path) as f:
        return pq.ParquetFile(f).schema_arrow


def parquet_rows(path: Path) -> int | None:
    """The row count in a Parquet file's footer, or None if it cannot be read."""
    try:
        with native(path) as f:
            return int(pq.ParquetFile(f).metadata.num_rows)
    except (pa.ArrowException, OSError):
        return None


def parquet_schema(path: Path) -> pa.Schema | None:
    """A Parquet file's Arrow schema, or None if it cannot be read."""
    try:
        with native(path) as f:
            return pq.ParquetFile(f).schema_arrow
    except (pa.ArrowException, OSError):
        return None


def records_from_batches(
    name: str, batches: Iterable[pa.RecordBatch], first_row: int = 0, skip_rows: int = 0
) -> Iterator[Record]:
    """Records of Arrow record batches whose first row is row ``first_row`` of ``name``;
    rows before ``skip_rows`` are passed over without being decoded."""
    row = first_row
    for batch in batches:
        n = batch.num_rows
        if row + n <= skip_rows:
            row += n
            continue
        start = max(skip_rows - row, 0)
        # Converting a slice at a time keeps the Python copies of huge rows few.
        for offset in range(start, n, READ_BATCH_ROWS):
            piece = batch.slice(offset, READ_BATCH_ROWS)
            try:
                chunk = piece.to_pylist()
            except (UnicodeDecodeError, pa.ArrowException):
                # One undecodable value (invalid UTF-8 in a string column) rejects its
                # row, not the slice: convert row by row to find it.
                for i in range(piece.num_rows):
                    yield _row_record(piece.slice(i, 1), Location(name, row=row + offset + i))
                continue
            for i, values in enumerate(chunk):
                yield Record(Location(name, row=row + offset + i), values)
        row += n


def _row_record(one: pa.RecordBatch, location: Location) -> Record:
    try:
        return Record(location, one.to_pylist()[0])
    except UnicodeDecodeError as exc:
        return Record(location, error=f"a string value is not valid UTF-8 ({exc.reason} at "
                                      f"byte {exc.start})")
    except pa.ArrowException as exc:
        return Record(location, error=f"cannot decode the row ({_reason(exc)})")


def read_parquet(source: InputFile, skip_rows: int = 0) -> Iterator[Record]:
    """Records of a Parquet file, one record batch at a time; unusable files and schemas
    become located error records."""
    name = str(source.path)
    try:
        file = native(source.path)
    except OSError as exc:
        if skip_rows == 0:
            yield Record(Location(name), error=f"not a readable Parquet file ({_reason(exc)})")
        return
    with file:
        yield from _parquet_records(file, name, skip_rows)


def _parquet_records(file: pa.NativeFile, name: str, skip_rows: int) -> Iterator[Record]:
    try:
        # A buffered stream reads pages as decoded, not whole column chunks up front.
        pf = pq.ParquetFile(file, buffer_size=1 << 20, pre_buffer=False)
        schema = pf.schema_arrow
    except (pa.ArrowException, OSError) as exc:
        if skip_rows == 0:
            yield Record(Location(name), error=f"not a readable Parquet file ({_reason(exc)})")
        return
    problem = schema_problem(schema)
    total = pf.metadata.num_rows
    if problem is not None:
        for i in range(skip_rows, total):
            yield Record(Location(name, row=i), error=problem)
        return
    # Skip whole row groups from the footer; only the group holding the resume row is read.
    groups: list[int] = []
    first_row = row = 0
    for g in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if row + n <= skip_rows:
            first_row = row + n
        else:
            groups.append(g)
        row += n
    if not groups:
        return
    md = pf.metadata
    row_bytes = sum(md.row_group(g).total_byte_size for g in groups) // max(md.num_rows, 1)
    batch_rows = max(1, min(READ_BATCH_ROWS, READ_BATCH_BYTES // max(row_bytes, 1)))
    batches = pf.iter_batches(batch_size=batch_rows, row_groups=groups, use_threads=False)
    next_row = skip_rows
    try:
        for record in records_from_batches(name, batches, first_row, skip_rows):
            next_row = (record.location.row or 0) + 1
            yield record
    except (pa.ArrowException, OSError) as exc:
        yield Record(Location(name, row=next_row), error=(
            f"the Parquet file is damaged from this row on ({_reason(exc)}); "
            f"{total - next_row} rows could not be read"))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


ROW_GROUP_ROWS = 1000
ROW_GROUP_CHARS = 4 * 2**20


def _check_utf8(value: Any) -> None:
    """Raise `UnicodeEncodeError` if a string in ``value`` has no UTF-8 form (Parquet
    strings are UTF-8; JSON can carry a lone surrogate escape, Parquet cannot), and
    `ValueError` for a number no Parquet double holds (``1e400``: it would become inf)
    or an integer no Parquet integer holds (JSON integers have no size)."""
    if isinstance(value, str):
        if not value.isascii():
            value.encode("utf-8")
    elif isinstance(value, int) and not -(2**63) <= value < 2**64:
        raise ValueError(f"the integer {clip(str(value), 60)} is out of the range of a "
                         "Parquet integer (64 bits); use --output-format jsonl")
    elif isinstance(value, JsonNumber):
        raise ValueError(f"the number {value.text} is out of the range of a Parquet double "
                         f"(it would be stored as {float(value)!r}); use --output-format "
                         "jsonl")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_utf8(key)
            _check_utf8(item)
    elif isinstance(value, list):
        for item in value:
            _check_utf8(item)


class ParquetWriteError(CompressorError):
    """Rows that one Parquet file cannot hold together (e.g. a column of mixed types)."""


def parts_dir(final: Path) -> Path:
    """Where the parts of ``final`` are kept until it is complete."""
    return final.with_name(f".{final.name}.parts")


class ParquetSink:
    """Rows into the Parquet file ``final``; ``schema`` None means inferred from the rows.

    ``resume`` is a state returned by `flush`, to continue an interrupted output;
    ``text_chars`` measures a row's text (its dialect knows where the text is), which cuts
    row groups.
    """

    def __init__(self, final: Path, schema: pa.Schema | None = None,
                 resume: dict[str, Any] | None = None,
                 text_chars: Callable[[Any], int] = text_chars) -> None:
        self._text_chars = text_chars
        self.final = final
        self.temp = temp_path(final)
        self.parts = parts_dir(final)
        self.schema = schema
        self.rows = 0
        self._buffer: list[Any] = []
        self._chars = 0
        self._writer: pq.ParquetWriter | None = None
        self._writer_file: pa.NativeFile | None = None
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
        """Buffer ``row`` for the next row group; a row this file cannot hold raises here,
        so the caller can reject just it: a string Parquet cannot store (a lone surrogate,
        `UnicodeEncodeError`), a field whose type differs from the file's (`ValueError`),
        a value nested deeper than Parquet allows (`ValueError`)."""
        _check_utf8(row)
        self._check_fits(row)
        self._buffer.append(row)
        self._chars += self._text_chars(row)
        self.rows += 1
        if len(self._buffer) >= ROW_GROUP_ROWS or self._chars >= ROW_GROUP_CHARS:
            self._write_group()

    def _check_fits(self, row: Any) -> None:
        """Raise `ValueError` when ``row`` does not fit the file's columns (the input's
        schema, or the types inferred from the rows so far) or nests too deep."""
        try:
            one = self._table([row]).schema
        except ParquetWriteError as exc:
            raise ValueError(_short(exc)) from None
        if _type_depth(one) > _CHECK_DEPTH:
            try:  # written and read back: a reader refuses some files a writer makes
                sink = pa.BufferOutputStream()
                pq.write_table(_writable(pa.Table.from_pylist([row], schema=one)), sink)
                pq.read_table(pa.BufferReader(sink.getvalue()))
            except (pa.ArrowException, OSError, TypeError, ValueError) as exc:
                raise ValueError(f"Parquet cannot hold this row: {exc}") from None
        if self.schema is None:
            seen = [one] if self._unified is None else [self._unified, one]
            try:
                self._unified = pa.unify_schemas(seen, promote_options="permissive")
            except (pa.ArrowException, TypeError) as exc:
                raise ValueError(f"a field of this row has another type than in the rows "
                                 f"before it, and one Parquet column has one type ({exc})"
                                 ) from None

    def _write_group(self) -> None:
        table = _writable(self._table(self._buffer))
        if self.schema is None:
            seen = [table.schema] if self._unified is None else [self._unified, table.schema]
            self._unified = self._final_schema(seen)
        if self._writer is not None and table.schema != self._writer_schema:
            self._close_part()
        if self._writer is None:
            self._writer_file = native(self._part(self._closed_parts), "wb")
            self._writer = pq.ParquetWriter(self._writer_file, table.schema)
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
            if self._writer_file is not None:
                self._writer_file.close()
            _fsync(self._part(self._closed_parts))
            self._closed_parts += 1

    # checkpoints

    def flush(self) -> dict[str, Any]:
        """Make every row so far durable; return the state `resume` needs."""
        self._close_part()
        pending = self._pending(self.rows)
        if self._buffer:
            tmp = self.parts / ".pending.parquet.tmp"
            with native(tmp, "wb") as f:
                pq.write_table(_writable(self._table(self._buffer)), f)
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
        # The rows before the checkpoint typed the inferred columns: a row after it must
        # fit them, as in an uninterrupted run (else it is refused at the end, whole file).
        seen = [] if self.schema is not None else [_schema_of(self._part(i))
                                                   for i in range(parts)]
        if pending:
            with native(self._pending(rows)) as f:
                table = pq.read_table(f)
            if table.num_rows != pending:
                raise FileNotFoundError(2, "pending rows differ", str(self.parts))
            self._buffer = table.to_pylist()
            self._chars = sum(self._text_chars(r) for r in self._buffer)
            if self.schema is None:
                seen.append(table.schema)
        if seen:
            self._unified = self._final_schema(seen)

    # completion

    def finish(self) -> None:
        """Write the last row group and assemble the parts into the temporary file."""
        if self._finished:
            return
        if self._buffer:
            self._write_group()
        self._close_part()
        parts = [self._part(i) for i in range(self._closed_parts)]
        schemas = [_schema_of(p) for p in parts]
        final_schema = self._final_schema(schemas)
        if len(parts) == 1 and schemas[0] == final_schema:
            os.replace(parts[0], self.temp)
        else:
            with native(self.temp, "wb") as out, pq.ParquetWriter(out, final_schema) as writer:
                for part in parts:
                    with native(part) as f:
                        pf = pq.ParquetFile(f, buffer_size=1 << 20, pre_buffer=False)
                        for g in range(pf.num_row_groups):
                            table = _conform(pf.read_row_group(g, use_threads=False),
                                             final_schema)
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
        replace_file(self.temp, self.final)
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
            # The writer leaves the file it was given open: a discarded part would keep
            # its disk space, and every stopped run a descriptor.
            if self._writer_file is not None:
                self._writer_file.close()


# Nesting below this many types is far inside Parquet's own limit: not test-written.
_CHECK_DEPTH = 24


def _type_depth(schema: pa.Schema) -> int:
    """How deep the types of ``schema`` nest (a flat column is 1)."""
    deepest = 0
    stack = [(field.type, 1) for field in schema]
    while stack:
        kind, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((kind.field(i).type, depth + 1) for i in range(kind.num_fields))
    return deepest


def _short(exc: BaseException, limit: int = 300) -> str:
    """``exc``'s message clipped to ``limit`` characters, the last then an ellipsis."""
    text = str(exc)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def _writable(table: pa.Table) -> pa.Table:
    """``table`` with every struct type that has no field written as null: Parquet cannot
    write a struct without fields, which is what an empty JSON object becomes when no row
    of the group gives that object a key (``"meta": {}``). The rows' own types still check
    them against each other (`_check_fits`): a field that is an object in one row and a
    string in another stays a reject."""
    columns = []
    for column in table.columns:
        kind = _no_empty_struct(column.type)
        if kind != column.type:
            column = pa.chunked_array(
                [pa.array([_fit(v, kind) for v in column.to_pylist()], kind)], kind)
        columns.append(column)
    schema = pa.schema([f.with_type(c.type) for f, c in zip(table.schema, columns,
                                                             strict=True)],
                       metadata=table.schema.metadata)
    return table if schema == table.schema else pa.Table.from_arrays(columns, schema=schema)


def _no_empty_struct(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every struct type that has no field replaced by the null type."""
    if pa.types.is_struct(kind):
        if kind.num_fields == 0:
            return pa.null()
        return pa.struct([kind.field(i).with_type(_no_empty_struct(kind.field(i).type))
                          for i in range(kind.num_fields)])
    # Inferred types have plain lists; a schema read from a file has no empty struct.
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_no_empty_struct(kind.value_type)))
    return kind


def _fit(value: Any, kind: pa.DataType) -> Any:
    """A Python value of a column made into one of ``kind`` (`_no_empty_struct`)."""
    if value is None or pa.types.is_null(kind):
        return None
    if pa.types.is_struct(kind):
        return {kind.field(i).name: _fit(value.get(kind.field(i).name), kind.field(i).type)
                for i in range(kind.num_fields)}
    if pa.types.is_list(kind):
        return [_fit(v, kind.value_type) for v in value]
    return value


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


def input_rows(source: InputFile) -> int | None:
    """A Parquet input's row count, from its footer."""
    return source.rows if source.rows is not None else parquet_rows(source.path)


def input_schema(source: InputFile) -> pa.Schema | None:
    """The output schema for a Parquet input's rows, or None to infer it from the rows."""
    schema = parquet_schema(source.path)
    return None if schema is None else output_schema(schema)


def open_sink(final: Path, schema: pa.Schema | None, resume: dict[str, Any] | None,
              text_chars: Callable[[Any], int]) -> ParquetSink:
    """A Parquet output with ``schema`` (None: inferred from the rows)."""
    return ParquetSink(final, schema, resume=resume, text_chars=text_chars)
