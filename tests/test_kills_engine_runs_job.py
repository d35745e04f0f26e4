"""`compress_dataset` (engine/job.py): the steps before a run writes (issue 26, item 5:
survivors of the whole-module mutation run).

Expected values from the README and SPEC §7/§12: with no backend named, `auto` runs the
extractive summarizer and the metrics file's ``settings`` name the backend that ran;
every path a run writes is checked before anything is written (the output is never the
input; the summary cache beside the output of an LLM run is one of those paths).
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.engine.job import compress_dataset

NO_KEY = "TC_KILLS_ENGINE_RUNS_NO_KEY"


def test_auto_is_settled_before_the_run_and_recorded_as_what_ran(tmp_path, monkeypatch):
    monkeypatch.delenv(NO_KEY, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env file with a key here
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    out = tmp_path / "out.jsonl"
    config = CompressionConfig(**HAND_CONFIG, summarizer="auto", api_key_env=NO_KEY)
    result = compress_dataset(str(src), str(out), config)
    assert result.metrics.total_trajectories == 5
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    assert metrics["settings"]["summarization"]["backend"] == "extractive"


def test_the_input_as_output_is_refused_before_anything_is_written(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    before = src.read_bytes()
    with pytest.raises(ConfigError, match="would overwrite the input"):
        compress_dataset(str(src), str(src), CompressionConfig(**HAND_CONFIG),
                         summarizer=ExtractiveSummarizer(counter.count))
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_the_default_summary_cache_beside_the_output_is_checked_first(tmp_path, counter):
    """An LLM run (here `openai`, its summaries given by the caller) writes its cache
    beside the output, ``out_summary_cache.sqlite``: a folder there is refused before
    the run starts."""
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    (tmp_path / "out_summary_cache.sqlite").mkdir()
    config = CompressionConfig(**HAND_CONFIG, summarizer="openai",
                               summarization_model="fake-model")
    with pytest.raises(ConfigError, match=r"out_summary_cache\.sqlite \(the summary cache\) "
                                          "is a folder"):
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), config,
                         summarizer=ExtractiveSummarizer(counter.count))
    assert not (tmp_path / "out.jsonl").exists()


def test_a_folder_run_waits_for_no_one_but_refuses_a_file_run_inside_it(tmp_path, counter):
    """README "One run per output at a time": a run into a folder in which another run
    writes a file exits naming the holder; nothing is written."""
    from trajectory_compressor.engine.lock import OutputLocked, output_lock

    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", HAND_ROWS)
    out = tmp_path / "out"
    out.mkdir()
    with output_lock(out.resolve() / ".mine.lock", out / "mine.jsonl"), \
            pytest.raises(OutputLocked, match="is being written by another run"):
        compress_dataset(str(data), str(out), CompressionConfig(**HAND_CONFIG),
                         summarizer=ExtractiveSummarizer(counter.count))
    assert list(out.iterdir()) == []


def test_overwrite_replaces_a_foreign_dataset_card(tmp_path, counter):
    """With ``overwrite`` the run writes its own card over a ``README.md`` it did not
    write (without it, the run is refused: tests/test_kills_engine_runs.py)."""
    from trajectory_compressor.engine.options import RunOptions
    from trajectory_compressor.formats.hf_card import MARK

    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "train-00000-of-00001.jsonl", HAND_ROWS)
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("# my notes\n", encoding="utf-8")
    compress_dataset(str(data), str(out), CompressionConfig(**HAND_CONFIG),
                     summarizer=ExtractiveSummarizer(counter.count),
                     options=RunOptions(overwrite=True))
    card = (out / "README.md").read_text(encoding="utf-8")
    assert MARK in card and "# my notes" not in card


def test_a_dialect_given_is_used_for_every_file_instead_of_detection(tmp_path, counter):
    """OpenAI-messages rows read as Hermes ShareGPT (the dialect given) have no
    ``conversations``: every one is rejected; detected, they are read."""
    from trajectory_compressor.dialects.sharegpt import SHAREGPT

    rows = [{"id": f"m{k}", "messages": [{"role": "user", "content": "hi"},
                                         {"role": "assistant", "content": "hello"}]}
            for k in range(2)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    config = CompressionConfig(**HAND_CONFIG)
    given = compress_dataset(str(src), str(tmp_path / "a.jsonl"), config,
                             summarizer=ExtractiveSummarizer(counter.count), dialect=SHAREGPT)
    assert (given.metrics.total_trajectories, given.metrics.rows_rejected) == (0, 2)
    detected = compress_dataset(str(src), str(tmp_path / "b.jsonl"), config,
                                summarizer=ExtractiveSummarizer(counter.count))
    assert (detected.metrics.total_trajectories, detected.metrics.rows_rejected) == (2, 0)


def test_an_output_no_run_recorded_is_not_replaced(tmp_path, counter):
    """SPEC §7: an existing output without a metrics file saying which run wrote it is
    refused (``--overwrite`` aside), and left as it was."""
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    out = tmp_path / "out.jsonl"
    out.write_text("mine\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="already exists, and there is no metrics file"):
        compress_dataset(str(src), str(out), CompressionConfig(**HAND_CONFIG),
                         summarizer=ExtractiveSummarizer(counter.count))
    assert out.read_text(encoding="utf-8") == "mine\n"


def test_the_ray_engine_is_handed_the_run(tmp_path, counter):
    """``engine: ray`` goes to Ray, which takes no summarizer object (and, without the
    extra, says to install it): either way a ConfigError before anything is written,
    never a silent local run."""
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    out = tmp_path / "out.jsonl"
    with pytest.raises(ConfigError, match=r"'ray' extra|cannot be sent to Ray workers"):
        compress_dataset(str(src), str(out), CompressionConfig(**HAND_CONFIG, engine="ray"),
                         summarizer=ExtractiveSummarizer(counter.count))
    assert not out.exists()


def test_quiet_prints_only_the_bad_rows_warnings(tmp_path, capsys):
    """The docstring: with ``quiet`` (the library's default) each bad row is a ``warning:
    FILE:LINE: ...`` line on stderr and nothing else is printed; not quiet adds the notes,
    here that a side file of an earlier run in the input folder was passed over."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", HAND_ROWS, extra_lines=("{bad",))
    # An earlier run's side files: its metrics file records the run (formats/registry).
    (folder / "a_metrics.json").write_text('{"run": {"settings_fingerprint": "f"}}',
                                           encoding="utf-8")
    (folder / "a_rejects.jsonl").write_text("", encoding="utf-8")
    config = CompressionConfig(**HAND_CONFIG, summarizer="extractive")
    compress_dataset(str(folder), str(tmp_path / "q"), config, quiet=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith(
        "warning: ")] and len(err.splitlines()) == 1
    assert "a.jsonl:6: invalid JSON" in err  # HAND_ROWS are lines 1-5
    compress_dataset(str(folder), str(tmp_path / "loud"), config, quiet=False)
    _, err = capsys.readouterr()
    assert "a.jsonl:6: invalid JSON" in err
    assert "note: 2 files in" in err and "passed over: side files of an earlier run" in err
    assert "a_metrics.json" in err and "a_rejects.jsonl" in err
