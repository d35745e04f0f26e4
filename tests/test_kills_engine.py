"""The engine's run entry, unit by unit (issue 26, item 5: lines only the subprocess tests
ran, so the mutation runner's in-process map had no test for them).

Expected values come from the README ("Inputs": a folder input passes over the side
files an earlier run of this tool wrote there, and says so on stderr, naming up to five).
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.options import RunOptions

RUN_RECORD = json.dumps({"run": {"settings_fingerprint": "f"}})


def earlier_run(folder, stem):
    """The three side files a run with output ``stem`` leaves beside its output."""
    (folder / f"{stem}_metrics.json").write_text(RUN_RECORD, encoding="utf-8")
    (folder / f"{stem}_over_limit.jsonl").write_text("", encoding="utf-8")
    (folder / f"{stem}_rejects.jsonl").write_text("", encoding="utf-8")


@pytest.mark.parametrize("runs, said", [
    (1, "3 files in {data} passed over: side files of an earlier run (r0_metrics.json, "
        "r0_over_limit.jsonl, r0_rejects.jsonl)"),
    (2, "6 files in {data} passed over: side files of an earlier run (r0_metrics.json, "
        "r0_over_limit.jsonl, r0_rejects.jsonl, r1_metrics.json, r1_over_limit.jsonl, "
        "...)"),
])
def test_a_folder_run_names_the_side_files_it_passed_over(tmp_path, counter, capsys, runs,
                                                          said):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", HAND_ROWS)
    for k in range(runs):
        earlier_run(data, f"r{k}")
    compress_dataset(str(data), str(tmp_path / "out"), CompressionConfig(**HAND_CONFIG),
                     summarizer=ExtractiveSummarizer(counter.count),
                     options=RunOptions(quiet=False))
    err = " ".join(capsys.readouterr().err.split())
    assert f"note: {said.format(data=data)}" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.suffix == ".jsonl") == [
        "a.jsonl"]


def test_one_side_file_is_one_file_and_quiet_says_nothing(tmp_path, counter, capsys):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", HAND_ROWS)
    (data / "r_metrics.json").write_text(RUN_RECORD, encoding="utf-8")
    summarizer = ExtractiveSummarizer(counter.count)
    compress_dataset(str(data), str(tmp_path / "out"), CompressionConfig(**HAND_CONFIG),
                     summarizer=summarizer, options=RunOptions(quiet=False))
    err = " ".join(capsys.readouterr().err.split())
    assert f"note: 1 file in {data} passed over: side files of an earlier run " \
           "(r_metrics.json)" in err
    compress_dataset(str(data), str(tmp_path / "out2"), CompressionConfig(**HAND_CONFIG),
                     summarizer=summarizer, options=RunOptions(quiet=True))
    assert "passed over" not in capsys.readouterr().err
