"""Parquet and Arrow input: rows streamed by record batch, and the trajectory schema (§7).

Reading never holds more than one record batch (plus the row group pyarrow decodes it
from). The schema helpers decide what an output Parquet file looks like: the input's
columns with their types, ``conversations`` as a list of turn structs, and
``compression_metrics`` as a nullable struct column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .sources import InputFile, Location, Record

READ_BATCH_ROWS = 256
# Bytes (uncompressed) per record batch read: rows of 100 KB must not come 1,000 at once.
READ_BATCH_BYTES = 4 << 20
METRICS_COLUMN = "compression_metrics"

_INT = pa.int64()
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
])
# The schema of an output whose input told nothing about its columns (e.g. all rejected).
MINIMAL_SCHEMA = pa.schema([
    ("conversations", pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))),
    (METRICS_COLUMN, METRICS_TYPE),
])


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _is_text(t.value_type)
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


def schema_problem(schema: pa.Schema) -> str | None:
    """Why rows of ``schema`` cannot be trajectories, or None when they can."""
    if "conversations" not in schema.names:
        shown = ", ".join(schema.names[:8]) + (", …" if len(schema.names) > 8 else "")
        return f"the file's schema has no 'conversations' column (columns: {shown or 'none'})"
    t = schema.field("conversations").type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)):
        return f"the file's 'conversations' column is {t}, not a list of turns"
    turn = t.value_type
    if not pa.types.is_struct(turn) or not all(
        turn.get_field_index(key) >= 0 and _is_text(turn.field(key).type)
        for key in ("from", "value")
    ):
        return f"the file's turns are {turn}, not structs with string 'from' and 'value'"
    return None


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


def parquet_rows(path: Path) -> int | None:
    """The row count in a Parquet file's footer, or None if it cannot be read."""
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except (pa.ArrowException, OSError):
        return None


def parquet_schema(path: Path) -> pa.Schema | None:
    """A Parquet file's Arrow schema, or None if it cannot be read."""
    try:
        return pq.ParquetFile(path).schema_arrow
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
            chunk = batch.slice(offset, READ_BATCH_ROWS).to_pylist()
            for i, values in enumerate(chunk):
                yield Record(Location(name, row=row + offset + i), values)
        row += n


def read_parquet(source: InputFile, skip_rows: int = 0) -> Iterator[Record]:
    """Records of a Parquet file, one record batch at a time; unusable files and schemas
    become located error records."""
    name = str(source.path)
    try:
        # A buffered stream reads pages as decoded, not whole column chunks up front.
        pf = pq.ParquetFile(source.path, buffer_size=1 << 20, pre_buffer=False)
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

