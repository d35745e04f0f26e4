"""Hugging Face datasets in, Parquet shards out: real `save_to_disk` folders and local
data files through `datasets` streaming (the hub itself is unreachable here)."""

from __future__ import annotations

import json

import datasets
import pytest

from tests.cli_helpers import read_jsonl, run_cli
from tests.datagen import rows, write_jsonl
from trajectory_compressor.core.errors import InputError
from trajectory_compressor.formats.registry import count_rows, discover_inputs, read_records

SMALL = ("--summarizer", "extractive", "--target-max-tokens", "500",
         "--summary-target-tokens", "60", "--quiet")


@pytest.fixture(autouse=True)
def _quiet_datasets():
    datasets.disable_progress_bars()


def _dataset(n: int, start: int = 0) -> datasets.Dataset:
    return datasets.Dataset.from_list(list(rows(n, start=start)))


def test_save_to_disk_folder_streams_its_shards(tmp_path):
    folder = tmp_path / "ds"
    _dataset(50).save_to_disk(str(folder), num_shards=3)
    inputs = discover_inputs(str(folder))
    assert [i.name for i in inputs] == [f"train-0000{i}-of-00003" for i in range(3)]
    assert count_rows(inputs) == 50
    ids = [r.row["id"] for source in inputs for r in read_records(source)]
    assert ids == [r["id"] for r in rows(50)]
    first = inputs[1]
    resumed = [r.row["id"] for r in read_records(first, skip_lines=4)]
    assert resumed == [r.row["id"] for r in read_records(first)][4:]


def test_save_to_disk_to_parquet_shards_that_datasets_loads_back(tmp_path):
    folder = tmp_path / "ds"
    _dataset(60).save_to_disk(str(folder), num_shards=2)
    proc = run_cli("compress", str(folder), *SMALL)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "ds_compressed"
    assert sorted(p.name for p in out.iterdir()) == ["README.md",
                                                     "train-00000-of-00002.parquet",
                                                     "train-00001-of-00002.parquet"]
    back = datasets.load_dataset("parquet", data_files=str(out / "*.parquet"), split="train",
                                 cache_dir=str(tmp_path / "cache"))
    assert back["id"] == [r["id"] for r in rows(60)]
    assert "compression_metrics" in back.features
    metrics = [m for m in back["compression_metrics"] if m is not None]
    assert metrics and any(m["was_compressed"] for m in metrics)
    original = datasets.load_from_disk(str(folder))
    assert back["reward"] == original["reward"]
    # The folder alone is a dataset too: its shard names say the split.
    by_folder = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache2"))
    assert list(by_folder) == ["train"] and by_folder["train"].num_rows == 60


def test_dataset_dict_folder_with_a_split(tmp_path):
    folder = tmp_path / "dd"
    datasets.DatasetDict({"train": _dataset(20), "test": _dataset(9, start=100)}).save_to_disk(
        str(folder))
    proc = run_cli("compress", str(folder), "--split", "test", *SMALL)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "dd_compressed"
    assert sorted(p.name for p in out.iterdir()) == ["README.md",
                                                     "test-00000-of-00001.parquet"]
    back = datasets.load_dataset("parquet", data_files=str(out / "*.parquet"), split="train",
                                 cache_dir=str(tmp_path / "cache"))
    assert back["id"] == [r["id"] for r in rows(9, start=100)]
    proc = run_cli("compress", str(folder), "--split", "test", "--dry-run", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "rows    9, rejected 0" in proc.stdout  # the test split only (20 + 9 in all)
    proc = run_cli("compress", str(folder), "--split", "validation", *SMALL)
    assert proc.returncode == 2
    assert "has no split 'validation' (splits: train, test)" in proc.stderr


def test_local_data_files_through_datasets_streaming(tmp_path):
    src = tmp_path / "logs"
    src.mkdir()
    write_jsonl(src / "a.jsonl", 12)
    with (src / "b.jsonl").open("w") as f:
        for row in rows(8, start=12):
            f.write(json.dumps(row) + "\n")
    out = tmp_path / "out"
    proc = run_cli("compress", "json", "--data-files", str(src / "*.jsonl"), "-o", str(out),
                   *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md",
                                                     "train-00000-of-00002.parquet",
                                                     "train-00001-of-00002.parquet"]
    back = datasets.load_dataset("parquet", data_files=str(out / "*.parquet"), split="train",
                                 cache_dir=str(tmp_path / "cache"))
    assert back["id"] == [r["id"] for r in rows(20)]
    # Every turn is a struct again, even where the json builder kept turns as JSON text.
    assert back.features["conversations"].feature["value"].dtype == "string"

    proc = run_cli("compress", "json", "--data-files", f"train={src / 'a.jsonl'}",
                   "--output-format", "jsonl", "-o", str(tmp_path / "j"), *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in read_jsonl(tmp_path / "j" / "train-00000-of-00001.jsonl")] == \
        [r["id"] for r in rows(12)]


def test_unreachable_hub_and_missing_files_are_one_sentence(tmp_path):
    env = {"HF_HUB_OFFLINE": "1"}
    proc = run_cli("compress", "nobody/no-such-dataset", *SMALL, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "nobody/no-such-dataset" in line and "hub" in line.lower()
    proc = run_cli("compress", "json", "--data-files", str(tmp_path / "none*.jsonl"), *SMALL,
                   cwd=tmp_path)
    assert proc.returncode == 2
    assert "no data files matched" in proc.stderr
    with pytest.raises(InputError, match="input not found"):
        discover_inputs(str(tmp_path / "missing.jsonl"))


def test_stream_shards_resume_after_their_rows(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", 9)
    inputs = discover_inputs("json", data_files=str(tmp_path / "a.jsonl"))
    assert [i.name for i in inputs] == ["train-00000-of-00001"]
    records = list(read_records(inputs[0]))
    assert [r.row["id"] for r in records] == [r["id"] for r in rows(9)]
    assert str(records[2].location).endswith("[train, shard 1/1] row 2")
    resumed = list(read_records(inputs[0], skip_lines=records[5].position))
    assert [r.location.row for r in resumed] == [6, 7, 8]
    assert [r.row for r in resumed] == [r.row for r in records[6:]]
