"""The Parquet sink's checkpoints, discards and write errors, the Parquet reader's
undecodable rows, and the configuration's error paths (issue 26, item 5, round 5).

Expected values from formats/parquet.py's documentation (module docstring: parts beside
the output, ``pending-<rows>.parquet`` with the previous one kept, a resumed run making
the row groups an uninterrupted one makes; `ParquetSink.discard`: "the final name is never
touched"), README "Parquet outputs" (the union of a JSONL input's keys; a row that does
not fit is a located reject suggesting ``--output-format jsonl``), SPEC §7, and
core/config.py's docstrings (the default provider's key variable goes only to it).
"""

from __future__ import annotations

import copy
import errno
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.open_files import open_files_under
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError, ResumeError
from trajectory_compressor.engine.checkpoint import (
    Checkpoint,
    check_resumable,
    settings_fingerprint,
)
from trajectory_compressor.formats.base import InputFile
from trajectory_compressor.formats.parquet import (
    METRICS_COLUMN,
    ROW_GROUP_CHARS,
    ParquetSink,
    output_schema,
    parts_dir,
    read_parquet,
)

CONV = [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"}]


def _group_per_row(_row: object) -> int:
    """A row's text measure that makes every row a row group of its own (ROW_GROUP_CHARS
    characters cut a group), so that a few rows exercise parts and row groups."""
    return ROW_GROUP_CHARS


_NEEDS_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                 reason="open files are listed from /proc (Linux)")


# -- discard: everything written goes, the final name is never touched -------------------

def test_discard_after_finish_deletes_the_temporary_file_and_the_parts(tmp_path):
    final = tmp_path / "out.parquet"
    final.write_bytes(b"an earlier output the run must not touch")
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": CONV})
    sink.write_row({"conversations": CONV})
    sink.finish()
    assert sink.temp.exists()  # the assembled file, not yet renamed
    sink.discard()
    assert not sink.temp.exists()
    assert not parts_dir(final).exists()
    assert final.read_bytes() == b"an earlier output the run must not touch"
    # Discarded is final: a later commit does not bring the output back.
    sink.commit()
    assert final.read_bytes() == b"an earlier output the run must not touch"
    assert not sink.temp.exists()


def test_discard_before_anything_was_assembled_and_commit_after_it(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    sink.write_row({"conversations": CONV})  # buffered only: no part, no temporary file
    sink.discard()  # nothing to delete under the temporary name: no error
    assert not parts_dir(final).exists()
    sink.commit()
    assert not final.exists()
    assert not sink.temp.exists()


def test_discard_of_an_empty_sink_then_commit_writes_nothing(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    sink.discard()
    sink.commit()
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


# -- flush: the pending rows of this checkpoint and of the previous one are kept ----------

def test_flush_keeps_the_pending_rows_of_the_last_two_checkpoints_only(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    states = []
    for _ in range(4):
        sink.write_row({"conversations": CONV})
        states.append(sink.flush())
    assert states[-1] == {"parts": 0, "pending": 4, "rows": 4}
    pending = sorted(p.name for p in parts_dir(final).glob("pending-*.parquet"))
    assert pending == ["pending-000000000003.parquet", "pending-000000000004.parquet"]
    # The previous checkpoint's state still resumes (its pending file was kept).
    sink.close_keep()
    again = ParquetSink(final, resume=states[2])
    assert again.rows == 3
    again.commit()
    assert pq.read_table(final).num_rows == 3


# -- resume: missing or different parts are refused as missing files ---------------------

@pytest.mark.parametrize("inferred", [True, False], ids=["inferred", "input-schema"])
def test_resume_without_the_parts_folder_is_a_missing_file(tmp_path, inferred):
    final = tmp_path / "out.parquet"
    schema = None if inferred else _schema_with_int_column()
    with pytest.raises(FileNotFoundError) as info:
        ParquetSink(final, schema, resume={"parts": 1, "pending": 0, "rows": 1000})
    assert info.value.errno == errno.ENOENT


@pytest.mark.parametrize("inferred", [True, False], ids=["inferred", "input-schema"])
def test_resume_with_a_part_gone_is_a_missing_file(tmp_path, inferred):
    final = tmp_path / "out.parquet"
    schema = None if inferred else _schema_with_int_column()
    sink = ParquetSink(final, schema, text_chars=_group_per_row)
    sink.write_row({"conversations": CONV, "score": 1})
    sink.write_row({"conversations": CONV, "score": 2})
    state = sink.flush()
    sink.close_keep()
    assert state["parts"] == 1
    sink = ParquetSink(final, schema, resume=state, text_chars=_group_per_row)
    sink.write_row({"conversations": CONV, "score": 3})  # a part after the checkpoint
    state = sink.flush()
    sink.close_keep()
    assert state["parts"] == 2
    (parts_dir(final) / "part-000000.parquet").unlink()
    with pytest.raises(FileNotFoundError) as info:
        ParquetSink(final, schema, resume=state, text_chars=_group_per_row)
    assert info.value.errno == errno.ENOENT


def test_resume_whose_pending_rows_differ_from_the_checkpoint_is_a_missing_file(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    sink.write_row({"conversations": CONV})
    sink.write_row({"conversations": CONV})
    state = sink.flush()
    sink.close_keep()
    assert state == {"parts": 0, "pending": 2, "rows": 2}
    with pytest.raises(FileNotFoundError) as info:
        ParquetSink(final, resume={**state, "pending": 3})
    assert info.value.errno == errno.ENOENT
    # The state as flushed resumes with both rows.
    again = ParquetSink(final, resume=state)
    again.commit()
    assert pq.read_table(final).column("conversations").to_pylist() == [CONV, CONV]


# -- write errors: a row that does not fit the input's schema ----------------------------

def _schema_with_int_column() -> pa.Schema:
    turns = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))
    return output_schema(pa.schema([("conversations", turns), ("score", pa.int64())]))


def _misfit_message(final: Path) -> str:
    sink = ParquetSink(final, _schema_with_int_column())
    sink.write_row({"conversations": CONV, "score": 3})  # fits
    with pytest.raises(ValueError) as info:
        sink.write_row({"conversations": CONV, "score": "three"})
    sink.discard()
    return str(info.value)


def test_a_row_that_does_not_fit_the_input_schema_is_refused_with_the_remedy(tmp_path):
    final = tmp_path / "o.parquet"
    message = _misfit_message(final)
    assert message.startswith(f"{final}: ")
    assert message.endswith("use --output-format jsonl")
    assert len(message) < 300  # the short path keeps it whole


def test_a_long_write_error_is_clipped_to_300_characters(tmp_path):
    short = tmp_path / "o.parquet"
    whole = _misfit_message(short)
    rest = whole[len(str(short)):]  # the message after the path, the same for any path
    # A path that makes the message exactly 300 characters: kept whole.
    name = "o" * (300 - len(rest) - len(str(tmp_path)) - len(os.sep) - len(".parquet"))
    exact = tmp_path / f"{name}.parquet"
    assert len(str(exact) + rest) == 300
    assert _misfit_message(exact) == str(exact) + rest
    # One character more: clipped to 300, the last an ellipsis.
    longer = tmp_path / f"{name}o.parquet"
    clipped = _misfit_message(longer)
    assert len(clipped) == 300
    assert clipped == (str(longer) + rest)[:299] + "…"


# -- assembly: parts of different inferred schemas, and an output with no rows -----------

def test_parts_with_different_keys_are_assembled_with_nulls_for_missing_columns(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": CONV, "id": "a"})
    sink.write_row({"conversations": CONV, "id": "b", "source": "web"})
    sink.write_row({"conversations": CONV, "id": "c"})
    sink.commit()
    table = pq.read_table(final)
    assert set(table.column_names) == {"conversations", "id", "source", METRICS_COLUMN}
    assert table.column("id").to_pylist() == ["a", "b", "c"]
    assert table.column("source").to_pylist() == [None, "web", None]
    assert table.column(METRICS_COLUMN).to_pylist() == [None, None, None]
    assert not parts_dir(final).exists()


def test_an_output_with_no_rows_and_no_schema_has_the_minimal_columns(tmp_path):
    # Every row rejected, a JSONL input: nothing tells the columns. The output is still a
    # readable Parquet file, of ShareGPT turns and the metrics column.
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final)
    sink.commit()
    table = pq.read_table(final)
    assert table.num_rows == 0
    assert table.column_names == ["conversations", METRICS_COLUMN]
    turns = table.schema.field("conversations").type
    assert pa.types.is_list(turns)
    assert [f.name for f in turns.value_type] == ["from", "value"]


# -- the features metadata of a Hugging Face export --------------------------------------

def test_unreadable_huggingface_features_are_replaced_by_none(tmp_path):
    turns = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))
    for raw in (b"not json", b'{"info": {}}', b'["a list"]'):
        schema = pa.schema([("conversations", turns)],
                           metadata={b"huggingface": raw, b"other": b"kept"})
        out = output_schema(schema)
        assert json.loads(out.metadata[b"huggingface"]) == {"info": {"features": None}}
        assert out.metadata[b"other"] == b"kept"
        assert out.names == ["conversations", METRICS_COLUMN]


# -- reading: a row pyarrow cannot turn into Python values -------------------------------

def test_a_row_that_cannot_be_decoded_is_a_located_error_and_its_neighbours_are_read(
        tmp_path):
    # A timestamp column whose time zone no database knows: pyarrow reads the file, but
    # converting a (non-null) value of it to Python fails. A null value needs no zone.
    turns = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))
    table = pa.table({
        "conversations": pa.array([CONV, CONV, CONV], turns),
        "at": pa.array([None, 5, None], pa.timestamp("s", tz="Nowhere/Atlantis")),
    })
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    records = list(read_parquet(InputFile(path, "parquet")))
    assert [r.location.row for r in records] == [0, 1, 2]
    assert records[0].error is None and records[0].row == {"conversations": CONV, "at": None}
    assert records[2].error is None and records[2].row["conversations"] == CONV
    assert records[1].row is None
    assert records[1].error is not None and "decode" in records[1].error


# -- configuration error paths -----------------------------------------------------------

def test_a_config_file_that_cannot_be_read_says_why_in_words(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        CompressionConfig.from_yaml(missing)
    assert str(info.value) == (f"cannot read config file {missing}: "
                               f"{os.strerror(errno.ENOENT)}")


def test_a_config_file_that_is_not_yaml_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("compression: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        CompressionConfig.from_yaml(bad)
    assert str(info.value).startswith(f"config file {bad} is not valid YAML")


@pytest.mark.parametrize("data", [["compression"], "compression", 3])
def test_a_config_whose_top_level_is_no_mapping_is_refused(data):
    with pytest.raises(ConfigError) as info:
        CompressionConfig.from_dict(data, source="x.yaml")
    assert str(info.value) == "x.yaml: the top level must be a mapping of sections"


def test_a_config_file_holding_a_list_is_refused(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- compression\n- summarization\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        CompressionConfig.from_yaml(path)
    assert str(info.value) == f"{path}: the top level must be a mapping of sections"


@pytest.mark.parametrize("endpoints, message", [
    ({"base_url": "http://a/v1", "model": "m"},
     "summarization.endpoints must be a list of mappings"),
    ("http://a/v1", "summarization.endpoints must be a list of mappings"),
    (["http://a/v1"], "summarization.endpoints[0] must be a mapping"),
    ([{"base_url": "http://a/v1", "model": "m"}, 7],
     "summarization.endpoints[1] must be a mapping"),
    ([{"base_url": "http://a/v1"}],
     "summarization.endpoints[0] needs a base_url and a model (strings)"),
    ([{"model": "m"}], "summarization.endpoints[0] needs a base_url and a model (strings)"),
    ([{"base_url": 5, "model": "m"}],
     "summarization.endpoints[0] needs a base_url and a model (strings)"),
])
def test_malformed_endpoint_lists_are_refused(endpoints, message):
    with pytest.raises(ConfigError) as info:
        CompressionConfig.from_dict({"summarization": {"endpoints": endpoints}},
                                    source="c.yaml")
    assert str(info.value) == f"c.yaml: {message}"


def test_endpoint_objects_are_taken_as_they_are():
    from trajectory_compressor.core.config import EndpointConfig

    one = EndpointConfig("http://127.0.0.1:9/v1", "m1")
    two = {"base_url": "http://127.0.0.1:10/v1", "model": "m2"}
    config = CompressionConfig.from_dict({"summarization": {"endpoints": [one, two]}})
    assert config.endpoints == [one, EndpointConfig("http://127.0.0.1:10/v1", "m2")]
    assert [e.model for e in config.summarization_endpoints()] == ["m1", "m2"]


@pytest.mark.parametrize("url", ["https://example.com:99999/v1", "https://example.com:x/v1"])
def test_the_default_key_variable_is_not_sent_to_a_url_with_an_unreadable_port(url):
    # The default provider's variable goes to the default provider only; a URL of another
    # host, whatever its port says, gets no key (and an unreadable port is no crash).
    config = CompressionConfig.from_dict({"summarization": {"base_url": url}})
    [endpoint] = config.summarization_endpoints()
    assert endpoint.base_url == url
    assert endpoint.api_key_env is None


def test_a_resume_names_a_setting_the_code_no_longer_knows_by_its_stored_name():
    # A checkpoint of another version may hold a setting this one has no section key for:
    # the message names it as stored, not as nothing.
    now = settings_fingerprint(CompressionConfig(), {}, None, 0)
    then = copy.deepcopy(now)
    then["config"]["retired_setting"] = 5
    with pytest.raises(ResumeError) as info:
        check_resumable(Checkpoint(inputs=[], settings=then), [], now)
    assert "the setting retired_setting is None but was 5 in the interrupted run" in \
        str(info.value)


def test_a_key_variable_name_that_is_no_name_or_has_a_long_run_of_digits_is_a_key():
    # redact.looks_like_key: a `_`-separated part of 20+ letters and digits with a digit
    # is a key (upper case only, so no "mix of cases" rule applies; no credential pattern).
    # And so is anything that is no variable name at all (a dash, a space, a leading digit).
    for value in ("MY_ABCDEF0123456789ABCDEF", "KEY_" + "0123456789ABCDEF" * 4,
                  "sk-proj-abc", "my key", "9LIVES"):
        with pytest.raises(ConfigError) as info:
            CompressionConfig.from_dict({"summarization": {"api_key_env": value}})
        assert "names the environment variable that holds the key" in str(info.value)
        assert value not in str(info.value)
    # A name of words is a name.
    config = CompressionConfig.from_dict({"summarization": {"api_key_env": "MY_LLM_KEY_2"}})
    assert config.api_key_env == "MY_LLM_KEY_2"


# -- open files: closing keeps no descriptor of a part -----------------------------------

@_NEEDS_PROC
def test_close_keep_closes_the_part_being_written(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": CONV})  # a row group written: the part is open
    assert open_files_under(parts_dir(final))
    sink.close_keep()
    assert open_files_under(parts_dir(final)) == []


@_NEEDS_PROC
def test_discard_closes_the_part_being_written(tmp_path):
    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": CONV})
    sink.discard()
    # Deleted, and not held open either (the descriptor would keep its disk space).
    assert not parts_dir(final).exists()
    assert open_files_under(parts_dir(final)) == []


# -- a resumed output refuses the rows an uninterrupted one refuses ----------------------

def _typed_rows_then_misfit(sink_of):
    """A row whose `score` is text, then one whose `score` is an integer, into the sink
    ``sink_of()`` returns (an integer `score` written already): what became of each."""
    outcome = []
    sink = sink_of()
    for row in ({"conversations": CONV, "score": "ten"}, {"conversations": CONV, "score": 2}):
        try:
            sink.write_row(row)
            outcome.append("written")
        except ValueError as exc:
            outcome.append(f"refused: {'another type' in str(exc)}")
    sink.commit()
    return outcome


@pytest.mark.parametrize("text_chars", [_group_per_row, None], ids=["parts", "pending"])
def test_a_resumed_output_refuses_a_row_of_another_type_as_an_uninterrupted_one(
        tmp_path, text_chars):
    # README "Parquet outputs": a row whose field cannot be written in the type the
    # output's earlier rows gave it is a located reject, and the run goes on; the module:
    # a resumed run makes exactly the row groups an uninterrupted one makes. The earlier
    # rows were written before the checkpoint (a closed part, or pending rows).
    kwargs = {} if text_chars is None else {"text_chars": text_chars}
    first = {"conversations": CONV, "score": 1}

    def uninterrupted():
        sink = ParquetSink(tmp_path / "a.parquet", **kwargs)
        sink.write_row(first)
        return sink

    def resumed():
        sink = ParquetSink(tmp_path / "b.parquet", **kwargs)
        sink.write_row(first)
        state = sink.flush()
        sink.close_keep()
        return ParquetSink(tmp_path / "b.parquet", resume=state, **kwargs)

    assert _typed_rows_then_misfit(uninterrupted) == ["refused: True", "written"]
    assert _typed_rows_then_misfit(resumed) == ["refused: True", "written"]
    for name in ("a.parquet", "b.parquet"):
        assert pq.read_table(tmp_path / name).column("score").to_pylist() == [1, 2]


def test_parts_that_cannot_make_one_file_are_refused_when_resumed(tmp_path):
    # Parts whose columns disagree (written by a resumed run before the fix above, then
    # interrupted again): no Parquet file holds them together (ParquetWriteError: "rows
    # that one Parquet file cannot hold together"), said before any row is added.
    from trajectory_compressor.formats.parquet import ParquetWriteError

    final = tmp_path / "out.parquet"
    sink = ParquetSink(final, text_chars=_group_per_row)
    sink.write_row({"conversations": CONV, "score": 1})
    state = sink.flush()
    sink.close_keep()
    assert state == {"parts": 1, "pending": 0, "rows": 1}
    turns = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))
    pq.write_table(pa.table({"conversations": pa.array([CONV], turns),
                             "score": pa.array(["ten"])}),
                   parts_dir(final) / "part-000001.parquet")
    with pytest.raises(ParquetWriteError) as info:
        ParquetSink(final, resume={"parts": 2, "pending": 0, "rows": 2},
                    text_chars=_group_per_row)
    assert str(info.value).startswith(f"{final}: ")
    assert "score" in str(info.value)
    assert str(info.value).endswith("use --output-format jsonl")


# -- a distribution restored from a checkpoint whose buckets hold fewer values ----------

def test_a_rank_past_the_values_a_restored_distribution_holds_is_its_maximum():
    # core/metrics.Distribution.quantile: past the values held, the maximum (a damaged or
    # hand-edited checkpoint whose count exceeds its buckets still reports numbers).
    from trajectory_compressor.core.metrics import Distribution

    class Small(Distribution):
        EXACT_CAP = 3  # past 3 values: log buckets

    d = Small()
    for v in (400, 100, 300, 200, 0):
        d.add(v)
    state = d.state()
    assert state["exact"] is None and sum(state["buckets"].values()) == 5
    damaged = Small.from_state({**state, "count": 8})
    # rank ceil(1.0 * 8) = 8 and ceil(0.99 * 8) = 8: past the 5 values held
    assert damaged.quantile(1.0) == 400
    assert damaged.summary()["p99"] == 400
    assert damaged.summary()["min"] == 0


@pytest.mark.parametrize("text_chars", [_group_per_row, None], ids=["parts", "pending"])
def test_a_resumed_output_still_widens_columns_only_nulls_typed_so_far(tmp_path, text_chars):
    # A column of nulls (or empty lists, or a struct of nulls) before the checkpoint takes
    # the type of the first value after it, as in an uninterrupted run (README: the schema
    # of a JSONL input is the union of its rows').
    kwargs = {} if text_chars is None else {"text_chars": text_chars}
    sink = ParquetSink(tmp_path / "out.parquet", **kwargs)
    sink.write_row({"conversations": CONV, "x": None, "y": [], "z": {"a": None}})
    state = sink.flush()
    sink.close_keep()
    sink = ParquetSink(tmp_path / "out.parquet", resume=state, **kwargs)
    sink.write_row({"conversations": CONV, "x": "s", "y": [1], "z": {"a": 2, "b": "q"}})
    sink.commit()
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [(r["x"], r["y"], r["z"]) for r in rows] == [
        (None, [], {"a": None, "b": None}), ("s", [1], {"a": 2, "b": "q"})]
