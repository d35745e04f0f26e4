"""`engine.layout`: where a run's outputs and sidecars go (issue 26, item 5: survivors of
the whole-module mutation run).

Expected paths from README "What it writes" and "One run per output at a time": a file
input gives ``<stem>_compressed.<ext>`` (``-o`` names it, and ``-o data.parquet`` asks for
Parquet), a folder or glob ``<name>_compressed/``, a streamed dataset ``ds_compressed/``
with ``<split>-00000-of-0000N.parquet`` shards; sidecars ``<output stem>_metrics.json``,
``..._summary_cache.sqlite`` beside the output (a ``.json`` output keeps its suffix); the
lock ``.<output stem>.lock``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.fixtures_runs import HAND_ROWS, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.engine.layout import finished_layout, plan_layout, sidecar_stem
from trajectory_compressor.formats.base import InputFile
from trajectory_compressor.formats.hf import StreamShard
from trajectory_compressor.formats.registry import discover_inputs


def one_file(tmp_path: Path, name: str = "data.jsonl") -> tuple[Path, list[InputFile]]:
    src = write_jsonl(tmp_path / name, HAND_ROWS[:1])
    return src, discover_inputs(str(src))


def folder(tmp_path: Path) -> tuple[Path, list[InputFile]]:
    data = tmp_path / "runs"
    data.mkdir()
    write_jsonl(data / "a.jsonl", HAND_ROWS[:1])
    return data, discover_inputs(str(data))


def test_a_file_output_and_its_sidecars(tmp_path):
    src, inputs = one_file(tmp_path)
    layout = plan_layout(str(src), inputs, None, CompressionConfig(), single_file=True)
    assert layout.outputs == {src: tmp_path / "data_compressed.jsonl"}
    assert layout.metrics == tmp_path / "data_compressed_metrics.json"
    assert layout.summary_cache == tmp_path / "data_compressed_summary_cache.sqlite"
    assert layout.lock == tmp_path.resolve() / ".data_compressed.lock"
    # Another run may write the whole folder: its lock is the folder's.
    assert layout.neighbour_locks() == [tmp_path.parent.resolve() / f".{tmp_path.name}.lock"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.stem_path = tmp_path  # type: ignore[misc]


def test_a_folder_outputs_neighbours_are_the_locks_inside_it(tmp_path):
    data, inputs = folder(tmp_path)
    layout = plan_layout(str(data), inputs, None, CompressionConfig(), single_file=False)
    out = tmp_path / "runs_compressed"
    assert layout.outputs == {data / "a.jsonl": out / "a.jsonl"}
    assert layout.metrics == tmp_path / "runs_compressed_metrics.json"
    assert layout.neighbour_locks() == []
    out.mkdir()
    (out / ".a.lock").write_text("")
    (out / "a.jsonl").write_text("")
    assert layout.neighbour_locks() == [out.resolve() / ".a.lock"]


def test_a_glob_writes_beside_its_folder(tmp_path):
    data, _ = folder(tmp_path)
    spec = str(data / "*.jsonl")
    layout = plan_layout(spec, discover_inputs(spec), None, CompressionConfig(),
                         single_file=False)
    assert layout.outputs == {data / "a.jsonl": tmp_path / "runs_compressed" / "a.jsonl"}


def test_a_streamed_dataset_writes_split_shards(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shards = [StreamShard("ds", "train", None, i, 2) for i in range(2)]
    inputs = [InputFile(Path(s.label), "hf", name=f"train-{i:05d}-of-00002", stream=s)
              for i, s in enumerate(shards)]
    layout = plan_layout("ds", inputs, None, CompressionConfig(), single_file=False)
    assert list(layout.outputs.values()) == [Path("ds_compressed/train-00000-of-00002.parquet"),
                                             Path("ds_compressed/train-00001-of-00002.parquet")]


def test_a_single_streamed_shard(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shard = StreamShard("ds", "train", None, 0, 1)
    inputs = [InputFile(Path(shard.label), "hf", name="train-00000-of-00001", stream=shard)]
    layout = plan_layout("ds", inputs, None, CompressionConfig(), single_file=False)
    assert list(layout.outputs.values()) == [Path("ds_compressed/train-00000-of-00001.parquet")]


def test_no_output_and_no_suffix_is_refused(tmp_path):
    src, inputs = one_file(tmp_path)
    with pytest.raises(ConfigError, match=r"output\.output_suffix is empty"):
        plan_layout(str(src), inputs, None, CompressionConfig(output_suffix=""),
                    single_file=True)
    # Given -o, an empty suffix is fine.
    out = tmp_path / "o.jsonl"
    layout = plan_layout(str(src), inputs, str(out), CompressionConfig(output_suffix=""),
                         single_file=True)
    assert layout.outputs == {src: out}


def test_the_input_folder_as_output_is_refused(tmp_path):
    data, inputs = folder(tmp_path)
    with pytest.raises(ConfigError, match="is the input folder"):
        plan_layout(str(data), inputs, str(data), CompressionConfig(), single_file=False)


def test_a_file_input_into_a_folder_is_refused(tmp_path):
    src, inputs = one_file(tmp_path)
    (tmp_path / "dir").mkdir()
    with pytest.raises(ConfigError, match="is a folder; give a file name for a file input"):
        plan_layout(str(src), inputs, str(tmp_path / "dir"), CompressionConfig(),
                    single_file=True)


def test_the_output_name_picks_the_container_unless_a_format_is_given(tmp_path):
    src, inputs = one_file(tmp_path)
    out = tmp_path / "o.parquet"
    layout = plan_layout(str(src), inputs, str(out), CompressionConfig(), single_file=True)
    assert layout.formats == {src: "parquet"}
    with pytest.raises(ConfigError, match=r"is named \.parquet but the output format is jsonl"):
        plan_layout(str(src), inputs, str(out), CompressionConfig(output_format="jsonl"),
                    single_file=True)
    # A name of the format asked for, or of its gzip form, is that format.
    named = plan_layout(str(src), inputs, str(tmp_path / "o.jsonl"),
                        CompressionConfig(output_format="jsonl"), single_file=True)
    assert named.formats == {src: "jsonl"}
    gz = plan_layout(str(src), inputs, str(tmp_path / "o.jsonl.gz"),
                     CompressionConfig(output_format="jsonl"), single_file=True)
    assert gz.outputs == {src: tmp_path / "o.jsonl.gz"}
    # A name without a known suffix keeps the input's container.
    odd = plan_layout(str(src), inputs, str(tmp_path / "o.txt"), CompressionConfig(),
                      single_file=True)
    assert odd.formats == {src: "jsonl"}
    assert odd.metrics == tmp_path / "o_metrics.json"  # the file without its extension


def test_every_container_names_its_sidecars_by_one_rule(tmp_path):
    for name in ("a_compressed.json", "a_compressed.jsonl", "a_compressed.JSONL.gz",
                 "a_compressed.parquet"):
        assert sidecar_stem(tmp_path / name, folder=False) == tmp_path / "a_compressed", name


@pytest.mark.parametrize("old", ["a_compressed.json_metrics.json",
                                 "a_compressed.json_over_limit.jsonl",
                                 ".a_compressed.json.checkpoint.json"])
def test_the_old_json_sidecar_names_are_still_found(tmp_path, old):
    out = tmp_path / "a_compressed.json"
    (tmp_path / old).write_text("{}", encoding="utf-8")
    assert sidecar_stem(out, folder=False) == out
    assert finished_layout(out).stem_path == out
    # Once sidecars by the one rule exist, they are the run's.
    (tmp_path / "a_compressed_metrics.json").write_text("{}", encoding="utf-8")
    assert sidecar_stem(out, folder=False) == tmp_path / "a_compressed"


def test_a_finished_run_is_found_from_its_output(tmp_path):
    out = tmp_path / "runs_compressed.jsonl"
    assert finished_layout(out).metrics == tmp_path / "runs_compressed_metrics.json"
    (tmp_path / "runs_compressed").mkdir()
    assert finished_layout(tmp_path / "runs_compressed").over_limit == \
        tmp_path / "runs_compressed_over_limit.jsonl"
