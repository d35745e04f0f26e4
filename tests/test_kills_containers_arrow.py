"""Parquet files and Hugging Face datasets unit by unit, the behaviours the mutation pass
found unpinned (issue 26, item 5).

From formats/parquet.py's and formats/hf.py's documentation, README "Parquet outputs" and
SPEC §7: unusable files, schemas and values are located rejects, said once (never again on
a resume); a Parquet output keeps its input's schema metadata and extends its Hugging Face
features to match the columns; a row Parquet cannot hold (nested past what a reader
opens) is refused as it is written; a resumed output holds only what its checkpoint
covered. A `save_to_disk` folder is read straight from its Arrow shards (the streaming or
the file format), every split or the one asked for; a streamed dataset gives its schema
only when it is plain Arrow with turn structs, and a failure to read it is one sentence.
All sample files are written here (pyarrow, `datasets.save_to_disk`, local data files).
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajectory_compressor.core.errors import InputError
from trajectory_compressor.formats import hf
from trajectory_compressor.formats.base import InputFile
from trajectory_compressor.formats.parquet import (
    METRICS_COLUMN,
    ParquetSink,
    output_schema,
    parts_dir,
    read_parquet,
    records_from_batches,
)
from trajectory_compressor.formats.registry import count_rows, discover_inputs, read_records


@pytest.fixture(autouse=True)
def _quiet_datasets():
    datasets.disable_progress_bars()


def _row(i: int) -> dict:
    return {"id": f"r{i}", "conversations": [{"from": "human", "value": f"hello {i}"},
                                             {"from": "gpt", "value": f"hi {i}"}]}


def _rows(n: int, start: int = 0) -> list[dict]:
    return [_row(i) for i in range(start, start + n)]


def _ids(records) -> list:
    return [(r.location.row, r.row["id"] if r.row else None, r.error) for r in records]


# -- Parquet: reading ------------------------------------------------------------------------


def test_a_missing_parquet_file_is_one_reject_never_repeated_on_resume(tmp_path):
    source = InputFile(tmp_path / "gone.parquet", "parquet")
    first = list(read_parquet(source))
    assert len(first) == 1 and first[0].location.row is None
    assert first[0].error.startswith("not a readable Parquet file")
    assert list(read_parquet(source, skip_rows=1)) == []


def test_a_parquet_file_damaged_before_its_first_row_is_one_located_reject(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(300)), path, row_group_size=100)
    data = bytearray(path.read_bytes())
    data[10:200] = b"Z" * 190  # the first data pages; the footer still reads
    path.write_bytes(bytes(data))
    got = list(read_parquet(InputFile(path, "parquet")))
    assert len(got) == 1
    assert got[0].location.row == 0
    assert got[0].error.startswith("the Parquet file is damaged from this row on")
    assert got[0].error.endswith("300 rows could not be read")


def test_a_string_that_is_not_utf8_rejects_its_row_only(tmp_path):
    path = tmp_path / "u.parquet"
    text = pa.array([b"fine", b"\xff\xfe", b"also fine"], pa.binary()).view(pa.string())
    table = pa.table({"id": ["r0", "r1", "r2"], "note": text,
                      "conversations": pa.array([_row(i)["conversations"] for i in range(3)])})
    pq.write_table(table, path)
    got = list(read_parquet(InputFile(path, "parquet")))
    assert [(r.location.row, r.row and r.row["note"]) for r in got] == [
        (0, "fine"), (1, None), (2, "also fine")]
    assert got[1].error is not None
    assert got[1].error.startswith("a string value is not valid UTF-8")


def test_batches_are_numbered_from_row_zero_by_default():
    batch = pa.RecordBatch.from_pylist(_rows(3))
    got = list(records_from_batches("x.arrow", [batch, batch]))
    assert [r.location.row for r in got] == [0, 1, 2, 3, 4, 5]
    resumed = list(records_from_batches("x.arrow", [batch, batch], skip_rows=3))
    assert [(r.location.row, r.row["id"]) for r in resumed] == [(3, "r0"), (4, "r1"),
                                                                (5, "r2")]


# -- Parquet: schemas and writing -------------------------------------------------------------


def test_the_output_schema_keeps_the_inputs_other_metadata():
    schema = pa.schema([("conversations", pa.list_(pa.struct([("value", pa.string())])))],
                       metadata={b"pandas": b'{"index_columns": []}'})
    out = output_schema(schema)
    assert out.metadata == {b"pandas": b'{"index_columns": []}'}
    assert out.names == ["conversations", METRICS_COLUMN]


def test_the_huggingface_features_follow_the_columns_order():
    # An input that had a compression_metrics column first: the output moves it last,
    # and its features (what `datasets` reads the columns as) list it last too.
    features = {METRICS_COLUMN: {"dtype": "string", "_type": "Value"},
                "id": {"dtype": "string", "_type": "Value"}}
    schema = pa.schema([(METRICS_COLUMN, pa.string()), ("id", pa.string())],
                       metadata={b"huggingface": json.dumps(
                           {"info": {"features": features}}).encode()})
    out = output_schema(schema)
    feats = json.loads(out.metadata[b"huggingface"])["info"]["features"]
    assert list(feats) == out.names == ["id", METRICS_COLUMN]
    assert feats[METRICS_COLUMN] != {"dtype": "string", "_type": "Value"}


def test_a_row_nested_past_what_a_parquet_reader_opens_is_refused_when_written(tmp_path):
    deep: object = 1
    for _ in range(60):
        deep = [deep]
    sink = ParquetSink(tmp_path / "o.parquet")
    with pytest.raises(ValueError, match="Parquet cannot hold this row"):
        sink.write_row({**_row(0), "deep": deep})
    sink.write_row(_row(1))
    sink.commit()
    assert pq.read_table(tmp_path / "o.parquet").column("id").to_pylist() == ["r1"]


def test_row_groups_hold_at_most_a_thousand_rows(tmp_path):
    # README: row groups hold at most 1,000 rows (or 4 MiB of turn text).
    final = tmp_path / "o.parquet"
    sink = ParquetSink(final)
    for _ in range(1001):
        sink.write_row({"n": 1})
    sink.commit()
    meta = pq.ParquetFile(final).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [1000, 1]


def test_committing_twice_keeps_the_output(tmp_path):
    final = tmp_path / "o.parquet"
    sink = ParquetSink(final)
    sink.write_row(_row(0))
    sink.commit()
    sink.commit()
    assert pq.read_table(final).column("id").to_pylist() == ["r0"]


def test_a_resumed_parquet_output_drops_the_parts_written_after_its_checkpoint(tmp_path):
    final = tmp_path / "o.parquet"
    # Every row is a row group of its own (4 MiB of text each): parts come quickly.
    sink = ParquetSink(final, text_chars=lambda row: 4 << 20)
    sink.write_row(_row(0))
    state = sink.flush()  # part 0 closed
    assert state["parts"] == 1
    sink.write_row(_row(1))
    sink.flush()  # part 1 closed
    sink.write_row(_row(2))  # part 2 open
    sink.close_keep()
    parts = parts_dir(final)
    assert sorted(p.name for p in parts.glob("part-*.parquet")) == [
        "part-000000.parquet", "part-000001.parquet", "part-000002.parquet"]
    resumed = ParquetSink(final, resume=state, text_chars=lambda row: 4 << 20)
    # Only what the checkpoint covers is left (part 2 may have no footer).
    assert sorted(p.name for p in parts.glob("part-*.parquet")) == ["part-000000.parquet"]
    resumed.write_row(_row(5))
    resumed.commit()
    assert pq.read_table(final).column("id").to_pylist() == ["r0", "r5"]


# -- Hugging Face: save_to_disk folders ---------------------------------------------------------


def _dataset(n: int, start: int = 0) -> datasets.Dataset:
    return datasets.Dataset.from_list(_rows(n, start))


def test_a_dataset_dict_folder_gives_every_split_or_the_one_asked_for(tmp_path):
    folder = tmp_path / "dd"
    datasets.DatasetDict({"train": _dataset(4), "test": _dataset(3, start=100)}).save_to_disk(
        str(folder))
    every = discover_inputs(str(folder))
    assert sorted(i.name for i in every) == ["test-00000-of-00001", "train-00000-of-00001"]
    assert count_rows(every) == 7
    test = discover_inputs(str(folder), split="test")
    assert [i.name for i in test] == ["test-00000-of-00001"]
    assert [r.row["id"] for r in read_records(test[0])] == ["r100", "r101", "r102"]


def test_a_shard_listed_in_state_json_but_missing_is_named(tmp_path):
    folder = tmp_path / "ds"
    _dataset(6).save_to_disk(str(folder), num_shards=2)
    state = json.loads((folder / "state.json").read_text())
    gone = folder / state["_data_files"][1]["filename"]
    gone.unlink()
    with pytest.raises(InputError) as caught:
        discover_inputs(str(folder))
    assert str(caught.value) == (
        f"{gone}: shard listed in {folder / 'state.json'} is missing")


def test_an_arrow_shard_in_the_ipc_file_format_is_counted_and_read(tmp_path):
    folder = tmp_path / "ds"
    _dataset(5).save_to_disk(str(folder))
    state = json.loads((folder / "state.json").read_text())
    shard = folder / state["_data_files"][0]["filename"]
    with pa.OSFile(str(shard)) as source:  # copied: the file is rewritten below
        table = pa.ipc.open_stream(source).read_all()
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=2):
            writer.write_batch(batch)
    inputs = discover_inputs(str(folder))
    assert count_rows(inputs) == 5
    assert [r.row["id"] for r in read_records(inputs[0])] == [f"r{i}" for i in range(5)]
    schema = hf.input_schema(inputs[0])
    assert schema is not None and schema.names == ["id", "conversations", METRICS_COLUMN]


def test_an_arrow_shard_that_does_not_open_is_one_reject_never_repeated(tmp_path):
    shard = tmp_path / "data-00000-of-00001.arrow"
    shard.write_bytes(b"not arrow at all")
    source = InputFile(shard, "arrow", rows=None)
    got = list(hf.read_dataset(source))
    assert len(got) == 1 and got[0].location.row is None
    assert got[0].error.startswith("not a readable Arrow file")
    assert list(hf.read_dataset(source, skip_rows=1)) == []


# -- Hugging Face: streamed datasets (local data files, no hub) ---------------------------------


def test_a_stream_without_known_features_or_turn_columns_has_no_schema(tmp_path):
    lines = tmp_path / "a.jsonl"
    # Features `datasets` cannot infer from the file's start: none known, rows inferred.
    lines.write_text(json.dumps(_row(0)) + '\n{"conversations": [}\n')
    by_json = discover_inputs("json", data_files=str(lines))
    assert hf.stream_schema(by_json[0]) is None
    turns = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(2)), turns)
    by_parquet = discover_inputs("parquet", data_files=str(turns))
    schema = hf.stream_schema(by_parquet[0])
    assert schema is not None and schema.names == ["id", "conversations"]
    flat = tmp_path / "f.parquet"
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), flat)
    # No list of turn structs: no row can be a trajectory, so no schema to keep.
    assert hf.stream_schema(discover_inputs("parquet", data_files=str(flat))[0]) is None


def test_a_stream_that_breaks_off_is_one_input_error(tmp_path):
    lines = tmp_path / "a.jsonl"
    lines.write_text(json.dumps(_row(0)) + '\n{"conversations": [}\n')
    inputs = discover_inputs("json", data_files=str(lines))
    with pytest.raises(InputError, match=r"^json \[train, shard 1/1\]: reading the dataset "
                                         r"failed \(JSON parse error"):
        list(read_records(inputs[0]))


def test_data_files_that_match_nothing_are_one_input_error(tmp_path):
    with pytest.raises(InputError, match=r"^cannot load Hugging Face dataset 'json': no data "
                                         r"files matched"):
        discover_inputs("json", data_files=str(tmp_path / "none" / "*.jsonl"))


def test_a_bare_builder_name_is_streamed_by_datasets(tmp_path, monkeypatch):
    # Not a path here: "json" is a dataset name for `datasets` streaming (its json builder
    # finds the data files of the working folder).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"conversations": []}\n')
    found = discover_inputs("json")
    assert [(f.format, f.stream.dataset, f.name) for f in found] == [
        ("hf", "json", "train-00000-of-00001")]


# -- Hugging Face, whole ----------------------------------------------------------------------


def test_a_single_dataset_folder_is_its_own_split_only(tmp_path):
    folder = tmp_path / "ds"
    _dataset(3).save_to_disk(str(folder))  # no split recorded: it is 'train'
    assert [i.name for i in discover_inputs(str(folder))] == ["train-00000-of-00001"]
    assert [i.name for i in discover_inputs(str(folder), split="train")] == [
        "train-00000-of-00001"]
    with pytest.raises(InputError, match="is a single 'train' dataset, not a DatasetDict "
                                         "with a 'test' split"):
        discover_inputs(str(folder), split="test")


def test_save_to_disk_metadata_that_is_no_object_is_one_sentence(tmp_path):
    folder = tmp_path / "ds"
    _dataset(3).save_to_disk(str(folder))
    (folder / "state.json").write_text("[1, 2]")
    with pytest.raises(InputError, match=r"state\.json: save_to_disk metadata is not a JSON "
                                         r"object$"):
        discover_inputs(str(folder))


def test_an_arrow_shard_without_turn_lists_rejects_each_row_once(tmp_path):
    folder = tmp_path / "ds"
    datasets.Dataset.from_list([{"a": i} for i in range(3)]).save_to_disk(str(folder))
    (source,) = discover_inputs(str(folder))
    got = list(read_records(source))
    assert [r.location.row for r in got] == [0, 1, 2]
    assert all(r.error.startswith("no column of the file's schema is a list of turns")
               for r in got)
    assert [r.location.row for r in read_records(source, 2)] == [2]


def _stream_shard(tmp_path: Path, rows: list[dict], batch: int) -> InputFile:
    """A save_to_disk folder whose one shard is an Arrow stream of ``batch``-row batches."""
    folder = tmp_path / "ds"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    state = json.loads((folder / "state.json").read_text())
    shard = folder / state["_data_files"][0]["filename"]
    with pa.OSFile(str(shard)) as source:
        table = pa.ipc.open_stream(source).read_all()
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for piece in table.to_batches(max_chunksize=batch):
            writer.write_batch(piece)
    (source,) = discover_inputs(str(folder))
    return source


def test_an_arrow_shard_that_breaks_off_keeps_its_rows_and_says_where(tmp_path):
    source = _stream_shard(tmp_path, _rows(6), batch=2)
    data = source.path.read_bytes()
    source.path.write_bytes(data[:len(data) - 60])  # into the last batch
    got = list(read_records(source))
    assert [(r.location.row, r.row and r.row["id"]) for r in got[:-1]] == [
        (0, "r0"), (1, "r1"), (2, "r2"), (3, "r3")]
    assert got[-1].location.row == 4
    assert got[-1].error.startswith("the Arrow file breaks off after 4 rows (")
    # Resumed past the rows it could read: nothing more to say.
    assert list(read_records(source, 5)) == []


def test_bytes_after_an_arrow_stream_are_said_not_dropped(tmp_path):
    source = _stream_shard(tmp_path, _rows(4), batch=2)
    with open(source.path, "ab") as f:
        f.write(b"garbage!")
    got = list(read_records(source))
    assert [r.row["id"] for r in got[:-1]] == ["r0", "r1", "r2", "r3"]
    assert got[-1].location.row == 4
    assert got[-1].error.startswith("8 bytes after the end of the Arrow stream")


def test_a_streamed_dataset_reads_each_shard_and_resumes_after_its_rows(tmp_path):
    for name, rows in (("a.jsonl", _rows(3)), ("b.jsonl", _rows(2, start=10))):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    inputs = discover_inputs("json", data_files=[str(tmp_path / "a.jsonl"),
                                                 str(tmp_path / "b.jsonl")])
    assert [i.name for i in inputs] == ["train-00000-of-00002", "train-00001-of-00002"]
    read = [[(r.location.row, r.row["id"]) for r in read_records(i)] for i in inputs]
    assert read == [[(0, "r0"), (1, "r1"), (2, "r2")], [(0, "r10"), (1, "r11")]]
    assert str(next(iter(read_records(inputs[1]))).location) == "json [train, shard 2/2] row 0"
    assert [(r.location.row, r.row["id"]) for r in read_records(inputs[0], 2)] == [(2, "r2")]


def test_a_streamed_dataset_with_extension_features_has_no_schema(tmp_path):
    features = datasets.Features({
        "conversations": [{"from": datasets.Value("string"), "value": datasets.Value("string")}],
        "grid": datasets.Array2D((2, 2), "int32")})
    path = tmp_path / "x.parquet"
    datasets.Dataset.from_list(
        [{"conversations": _row(0)["conversations"], "grid": [[1, 2], [3, 4]]}],
        features=features).to_parquet(str(path))
    (source,) = discover_inputs("parquet", data_files=str(path))
    assert hf.stream_schema(source) is None


def test_an_unreachable_hub_is_one_sentence_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("HF_HUB_OFFLINE", *hf._PROXY_VARS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused
    with pytest.raises(InputError, match=r"^input not found: someone/some-data is not a "
                                         r"local file, folder or glob, and the Hugging Face "
                                         r"Hub \(127\.0\.0\.1\) is unreachable"):
        discover_inputs("someone/some-data")


def test_a_dataset_dict_without_the_split_asked_for_names_its_splits(tmp_path):
    folder = tmp_path / "dd"
    datasets.DatasetDict({"train": _dataset(2), "test": _dataset(1)}).save_to_disk(str(folder))
    with pytest.raises(InputError, match=r"has no split 'validation' \(splits: train, test\)"):
        discover_inputs(str(folder), split="validation")


def test_unreadable_save_to_disk_metadata_is_one_sentence(tmp_path):
    folder = tmp_path / "ds"
    _dataset(2).save_to_disk(str(folder))
    (folder / "state.json").write_text("{not json")
    with pytest.raises(InputError, match=r"state\.json: cannot read this save_to_disk metadata"):
        discover_inputs(str(folder))


def test_a_save_to_disk_folder_needs_both_of_its_metadata_files(tmp_path):
    (tmp_path / "state.json").write_text("{}")
    assert hf.is_saved_dataset(tmp_path) is False
    (tmp_path / "dataset_info.json").write_text("{}")
    assert hf.is_saved_dataset(tmp_path) is True


def test_stream_shards_are_frozen_and_keyed_by_their_data_files_in_any_order(tmp_path):
    import dataclasses

    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(json.dumps(_row(0)) + "\n")
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    one = discover_inputs("json", data_files={"train": a, "test": b})
    other = discover_inputs("json", data_files={"test": b, "train": a})
    assert [i.stream for i in one] == [i.stream for i in other]
    with pytest.raises(dataclasses.FrozenInstanceError):
        one[0].stream.index = 3  # type: ignore[misc]


def test_a_shard_that_breaks_off_says_so_on_a_resume_at_its_break(tmp_path):
    source = _stream_shard(tmp_path, _rows(6), batch=2)
    data = source.path.read_bytes()
    source.path.write_bytes(data[:len(data) - 60])
    # Resumed after the 4 rows it could read: the break is still to be said.
    got = list(read_records(source, 4))
    assert [(r.location.row, r.error is not None) for r in got] == [(4, True)]


def test_extension_features_inside_a_struct_count_too(tmp_path):
    features = datasets.Features({
        "conversations": [{"from": datasets.Value("string"), "value": datasets.Value("string")}],
        "extra": {"grid": datasets.Array2D((2, 2), "int32")}})
    path = tmp_path / "x.parquet"
    datasets.Dataset.from_list(
        [{"conversations": _row(0)["conversations"], "extra": {"grid": [[1, 2], [3, 4]]}}],
        features=features).to_parquet(str(path))
    (source,) = discover_inputs("parquet", data_files=str(path))
    assert hf.stream_schema(source) is None


def test_data_files_the_builder_cannot_read_are_one_input_error(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_bytes(b"not parquet at all, not even close")
    with pytest.raises(InputError, match=r"^cannot load Hugging Face dataset 'parquet' \(\w+: "):
        discover_inputs("parquet", data_files=str(path))
