"""Parquet input and the Parquet sink, on real files."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.datagen import rows, write_parquet
from trajectory_compressor.formats.base import InputFile, temp_path
from trajectory_compressor.formats.parquet import (
    METRICS_COLUMN,
    ParquetSink,
    parts_dir,
    read_parquet,
    schema_problem,
)
from trajectory_compressor.formats.registry import count_rows


def test_read_parquet_streams_every_row_with_its_location_and_skips_on_resume(tmp_path):
    path = write_parquet(tmp_path / "in.parquet", 130, row_group_rows=40)
    source = InputFile(path, "parquet")
    records = list(read_parquet(source))
    assert [r.row["id"] for r in records] == [r["id"] for r in rows(130)]
    assert [r.location.row for r in records] == list(range(130))
    assert str(records[5].location) == f"{path} row 5"
    assert records[5].position == 6
    # Resume skips whole row groups from the footer and the rest of the group row by row.
    resumed = list(read_parquet(source, skip_rows=85))
    assert [r.row["id"] for r in resumed] == [r["id"] for r in rows(130)][85:]
    assert count_rows([source, source]) == 260


def test_unusable_parquet_files_become_located_error_records(tmp_path):
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["a", "b", "c"]}), other)
    records = list(read_parquet(InputFile(other, "parquet")))
    assert [r.location.row for r in records] == [0, 1, 2]
    assert all("is a list of turns (a list of structs), as every dialect's turns are "
               "(columns: id (int64), text (string))" in (r.error or "") for r in records)
    strings = tmp_path / "strings.parquet"
    pq.write_table(pa.table({"conversations": ["[]"]}), strings)
    [record] = read_parquet(InputFile(strings, "parquet"))
    assert "(columns: conversations (string))" in (record.error or "")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 this is not parquet")
    [record] = read_parquet(InputFile(broken, "parquet"))
    assert record.location.row is None and "not a readable Parquet file" in (record.error or "")
    assert list(read_parquet(InputFile(broken, "parquet"), skip_rows=1)) == []


def test_schema_problem_accepts_the_turn_structs_of_every_dialect():
    turn = pa.struct([("from", pa.string()), ("value", pa.large_string()),
                      ("weight", pa.float64())])
    assert schema_problem(pa.schema([("conversations", pa.list_(turn))])) is None
    # OpenAI / LLaMA-Factory messages, and a custom column: each row's dialect judges them.
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    assert schema_problem(pa.schema([("messages", pa.list_(message))])) is None
    assert schema_problem(pa.schema([("id", pa.int64()),
                                     ("dialog", pa.large_list(message))])) is None
    # A list of strings holds no turns.
    assert "no column of the file's schema is a list of turns" in (
        schema_problem(pa.schema([("conversations", pa.list_(pa.string()))])) or "")


def _input_schema(tmp_path):
    path = write_parquet(tmp_path / "schema.parquet", 3)
    from trajectory_compressor.formats.parquet import output_schema

    return output_schema(pq.ParquetFile(path).schema_arrow)


def test_parquet_sink_keeps_types_adds_metrics_and_fills_missing_turn_keys(tmp_path):
    schema = _input_schema(tmp_path)
    out = tmp_path / "out.parquet"
    sink = ParquetSink(out, schema)
    data = list(rows(5))
    data[1]["conversations"][2] = {"from": "human", "value": "[CONTEXT SUMMARY]: x"}
    data[1][METRICS_COLUMN] = {"original_tokens": 10, "compression_region": {"start_idx": 2}}
    for row in data:
        sink.write_row(row)
    assert not out.exists()
    sink.commit()
    table = pq.read_table(out)
    assert table.schema.field("reward").type == pa.float64()
    assert table.schema.field(METRICS_COLUMN).nullable
    back = table.to_pylist()
    assert [r["id"] for r in back] == [r["id"] for r in data]
    assert back[1]["conversations"][2] == {"from": "human", "value": "[CONTEXT SUMMARY]: x",
                                           "weight": None}
    assert back[1][METRICS_COLUMN]["original_tokens"] == 10
    assert back[0][METRICS_COLUMN] is None
    assert not temp_path(out).exists() and not parts_dir(out).exists()


@pytest.mark.parametrize("inferred", [False, True])
def test_parquet_sink_resumed_from_a_flush_writes_the_same_bytes(tmp_path, monkeypatch,
                                                                 inferred):
    import trajectory_compressor.formats.parquet as sink_module

    monkeypatch.setattr(sink_module, "ROW_GROUP_ROWS", 7)
    schema = None if inferred else _input_schema(tmp_path)
    data = list(rows(40))
    reference = tmp_path / "ref.parquet"
    sink = ParquetSink(reference, schema)
    for i, row in enumerate(data):
        sink.write_row(row)
        if i in (4, 20):
            sink.flush()  # checkpoints of an uninterrupted run
    sink.commit()

    out = tmp_path / "resumed.parquet"
    sink = ParquetSink(out, schema)
    for row in data[:25]:
        sink.write_row(row)
    state = sink.flush()
    for row in data[25:33]:
        sink.write_row(row)  # lost: the process dies before the next checkpoint is saved,
    sink.flush()  # right after the sink flushed for it
    sink.write_row(data[33])
    sink.close_keep()
    resumed = ParquetSink(out, schema, resume=state)
    for row in data[25:]:
        resumed.write_row(row)
    resumed.commit()
    assert out.read_bytes() == reference.read_bytes()
    assert pq.ParquetFile(out).metadata.num_row_groups == 6


def test_inferred_schema_is_the_union_of_every_rows_keys(tmp_path, monkeypatch):
    import trajectory_compressor.formats.parquet as sink_module

    monkeypatch.setattr(sink_module, "ROW_GROUP_ROWS", 2)
    out = tmp_path / "out.parquet"
    sink = ParquetSink(out)
    turns = [{"from": "human", "value": "hi"}]
    sink.write_row({"conversations": turns})
    sink.write_row({"conversations": turns, "score": 1, "meta": {"a": 1}})
    sink.write_row({"conversations": [{"from": "gpt", "value": "x", "weight": 0.5}],
                    "meta": {"b": "z"}, "score": 2.5})
    sink.commit()
    back = pq.read_table(out).to_pylist()
    assert [r["score"] for r in back] == [None, 1.0, 2.5]
    assert back[1]["meta"] == {"a": 1, "b": None} and back[2]["meta"] == {"a": None, "b": "z"}
    assert back[2]["conversations"] == [{"from": "gpt", "value": "x", "weight": 0.5}]


def test_a_row_whose_column_changes_type_is_refused_alone(tmp_path, monkeypatch):
    # Issue 24 item 7: the row is refused (the caller rejects it), the file goes on.
    import trajectory_compressor.formats.parquet as sink_module

    monkeypatch.setattr(sink_module, "ROW_GROUP_ROWS", 1)
    out = tmp_path / "out.parquet"
    sink = ParquetSink(out)
    turns = [{"from": "human", "value": "hi"}]
    sink.write_row({"conversations": turns, "label": 3})
    with pytest.raises(ValueError, match="another type"):
        sink.write_row({"conversations": turns, "label": "three"})
    sink.write_row({"conversations": turns, "label": 4})
    sink.commit()
    assert pq.read_table(out).column("label").to_pylist() == [3, 4]
    assert not parts_dir(out).exists()
