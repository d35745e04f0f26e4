"""The local engine's checkpoints and failures, in real runs in this process (issue 26,
item 5: an interrupted run, its resume and the notes about checkpoints ran only in CLI
subprocesses).

A run is interrupted here the way a revoked API key stops one (SPEC §7: a fatal summarizer
error stops the run; the temporary outputs and a checkpoint are kept for `--resume`): the
extractive summarizer, refusing after a number of summaries. Expected results: a resumed
run's outputs equal an uninterrupted run's (README, "Resuming"); a leftover checkpoint is
discarded with a note unless --resume, and --resume without one starts from the beginning
with a note; --quiet prints no note; a row whose summarizing fails with an error nobody
foresaw is written unchanged, and its error is "compression failed", a colon and what went
wrong (`core/reasons.py`, SUMMARY_FAILED).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.fixtures_runs import HAND_CONFIG, row, write_jsonl
from tests.test_kills_engine3_progress import terminal
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import CompressorError, FatalSummaryError, ResumeError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import Summary, SummaryRequest
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.options import RunOptions

# 205 tokens over a 100-token target: each row gets one summary (tests/fixtures_runs.py).
FITS = ("SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])
# One row at a time, a checkpoint after every row: the cut is exactly where it stopped.
CONFIG = CompressionConfig(**HAND_CONFIG, summarizer="extractive", window_rows=1,
                           checkpoint_rows=1)


class RevokedAfter(ExtractiveSummarizer):
    """The extractive summarizer, refusing every request after ``calls`` (a key revoked)."""

    def __init__(self, counter, calls: int) -> None:
        super().__init__(counter.count)
        self.left = calls

    async def summarize(self, request: SummaryRequest) -> Summary:
        if self.left == 0:
            raise FatalSummaryError("the API key was revoked")
        self.left -= 1
        return await super().summarize(request)


class Broken(ExtractiveSummarizer):
    """A summarizer with a bug: an error that is not a summary failure."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        raise KeyError("turns")


def folder(tmp_path: Path) -> Path:
    """Two inputs: a.jsonl (3 rows) and b.jsonl (4 rows), every row summarized once."""
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [row(f"a{i}", *FITS) for i in range(3)])
    write_jsonl(data / "b.jsonl", [row(f"b{i}", *FITS) for i in range(4)])
    return data


def outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())
            if p.suffix == ".jsonl" and not p.name.startswith(".")}


def metrics(out: Path) -> dict:
    """The run's metrics file (beside its output folder), without what differs by run."""
    data = json.loads(out.with_name(f"{out.name}_metrics.json").read_text(encoding="utf-8"))
    data.pop("processing")  # timings
    data.pop("run")  # names the output paths
    data.pop("remedies", None)  # a resumed run stores no "what would fix it" table
    committed = data.get("committed")
    if isinstance(committed, dict):  # the outputs' digests, without their paths
        committed["files"] = sorted(committed.get("files", {}).values(),
                                    key=lambda f: f["sha256"])
    return data


def test_a_run_stopped_in_its_second_input_resumes_to_the_uninterrupted_output(tmp_path,
                                                                               counter,
                                                                               capsys):
    data = folder(tmp_path)
    reference = tmp_path / "reference"
    compress_dataset(str(data), str(reference), CONFIG,
                     summarizer=ExtractiveSummarizer(counter.count))
    out = tmp_path / "out"
    # a0-a2 and b0-b1 summarized; b2's summary is refused.
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(data), str(out), CONFIG, summarizer=RevokedAfter(counter, 5))
    path = tmp_path / ".out.checkpoint.json"  # beside the output folder, as its sidecars
    checkpoint = json.loads(path.read_text(encoding="utf-8"))
    assert (checkpoint["file_index"], checkpoint["skip"]) == (1, 2)
    assert outputs(out) == {}  # nothing under a final name yet
    capsys.readouterr()
    result = compress_dataset(str(data), str(out), CONFIG, resume=True, quiet=False,
                              summarizer=ExtractiveSummarizer(counter.count))
    assert result.resumed
    assert "note:" not in capsys.readouterr().err
    assert outputs(out) == outputs(reference)
    assert [json.loads(x)["id"] for x in (out / "b.jsonl").read_text().splitlines()] == [
        "b0", "b1", "b2", "b3"]
    assert metrics(out) == metrics(reference)
    assert not path.exists()


def test_a_leftover_checkpoint_is_discarded_with_a_note_unless_quiet(tmp_path, counter,
                                                                      capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [row("r0", *FITS)])
    out = tmp_path / "out.jsonl"
    stale = tmp_path / ".out.checkpoint.json"
    for quiet in (True, False):
        stale.write_text("{}", encoding="utf-8")
        compress_dataset(str(src), str(out), CONFIG, quiet=quiet, overwrite=True,
                         summarizer=ExtractiveSummarizer(counter.count))
        assert not stale.exists()
        err = capsys.readouterr().err
        note = (f"note: an interrupted run's checkpoint {stale} is discarded; starting over "
                f"(pass --resume to continue it instead)")
        assert (note in " ".join(err.split())) is not quiet, err
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["r0"]


def test_resume_without_a_checkpoint_starts_from_the_beginning(tmp_path, counter, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [row("r0", *FITS), row("r1", *FITS)])
    out = tmp_path / "out.jsonl"
    result = compress_dataset(str(src), str(out), CONFIG, resume=True, quiet=False,
                              summarizer=ExtractiveSummarizer(counter.count))
    err = " ".join(capsys.readouterr().err.split())
    assert (f"note: no checkpoint at {tmp_path / '.out.checkpoint.json'}; starting from the "
            f"beginning") in err
    assert not result.resumed
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["r0", "r1"]


def test_a_summarizer_error_nobody_foresaw_costs_the_row_its_summary_not_the_run(
        tmp_path, counter):
    rows = [row("r0", *FITS), row("short", "SHGTHG", [10, 5, 5, 5, 5, 5])]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    result = compress_dataset(str(src), str(out), CONFIG,
                              summarizer=Broken(counter.count), options=RunOptions())
    written = [json.loads(x) for x in out.read_text().splitlines()]
    error = "compression failed: KeyError: 'turns'"
    assert [w.pop("compression_metrics", {}).get("error") for w in written] == [error, None]
    assert written == rows  # unchanged, in order
    assert result.warnings == [f"{src}:1: {error}"]
    assert result.metrics.trajectories_failed == 1
    (entry,) = [json.loads(x) for x in
                (tmp_path / "out_over_limit.jsonl").read_text().splitlines()]
    assert entry["id"] == "r0" and entry["reason"] == "summary_failed"
    assert entry["reason_text"] == error


def interrupted(tmp_path: Path, counter) -> tuple[Path, Path, dict]:
    """A folder run stopped in b.jsonl after its second row: inputs, output, checkpoint."""
    data = folder(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(data), str(out), CONFIG, summarizer=RevokedAfter(counter, 5))
    checkpoint = json.loads((tmp_path / ".out.checkpoint.json").read_text(encoding="utf-8"))
    return data, out, checkpoint


def test_a_resume_refuses_other_settings_and_consumed_bytes_edited_in_place(tmp_path,
                                                                            counter):
    data, out, _ = interrupted(tmp_path, counter)
    extractive = ExtractiveSummarizer(counter.count)
    with pytest.raises(ResumeError, match=re.escape(
            "the setting compression.target_max_tokens is 120 but was 100 in the interrupted "
            "run")):
        compress_dataset(str(data), str(out), CONFIG.replace(target_max_tokens=120),
                         resume=True, summarizer=extractive)
    # An edit that keeps the size and the modification time, in a row already read.
    a = data / "a.jsonl"
    stat = a.stat()
    text = a.read_text(encoding="utf-8")
    a.write_text(text.replace('"a1"', '"A1"'), encoding="utf-8")
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ResumeError) as info:
        compress_dataset(str(data), str(out), CONFIG, resume=True, summarizer=extractive)
    assert str(info.value).startswith(f"cannot resume: the input {a} changed in the part the "
                                      "interrupted run had already read")
    a.write_text(text, encoding="utf-8")
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert compress_dataset(str(data), str(out), CONFIG, resume=True,
                            summarizer=extractive).resumed


def test_the_metrics_say_when_the_run_started_and_ended(tmp_path, counter):
    data, out, checkpoint = interrupted(tmp_path, counter)
    assert checkpoint["started"]
    compress_dataset(str(data), str(out), CONFIG, resume=True,
                     summarizer=ExtractiveSummarizer(counter.count))
    processing = json.loads((tmp_path / "out_metrics.json").read_text())["processing"]
    # The resumed run is the interrupted one going on: it started when that one did.
    assert processing["start_time"] == checkpoint["started"]
    start = datetime.fromisoformat(processing["start_time"])
    end = datetime.fromisoformat(processing["end_time"])
    assert start <= end <= datetime.now()
    assert processing["duration_seconds"] > 0
    fresh = tmp_path / "fresh"
    compress_dataset(str(data), str(fresh), CONFIG,
                     summarizer=ExtractiveSummarizer(counter.count))
    processing = json.loads((tmp_path / "fresh_metrics.json").read_text())["processing"]
    assert datetime.fromisoformat(processing["start_time"]) <= datetime.fromisoformat(
        processing["end_time"])


class Notifying(ExtractiveSummarizer):
    """The extractive summarizer, saying once what a person should see at once (as an
    endpoint's first failure of a kind): through the run's `notify`, else on its own."""

    own: list[str]

    async def summarize(self, request: SummaryRequest) -> Summary:
        if not hasattr(self, "own"):
            self.own = []
            (self.notify or self.own.append)("the endpoint answered 429 \x1b[2Jslow down")
        return await super().summarize(request)


def test_a_summarizers_notes_go_through_the_runs_display(tmp_path, counter, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [row("r0", *FITS), row("r1", *FITS)])
    summarizer = Notifying(counter.count)
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), CONFIG, quiet=False,
                     summarizer=summarizer)
    assert summarizer.own == []
    err = capsys.readouterr().err
    assert "warning: the endpoint answered 429" in err and "slow down" in err
    assert "\x1b" not in err


def test_the_bar_of_a_run_ends_with_nothing_in_flight(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(3)])
    with terminal(300) as screen:
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), CONFIG, quiet=False,
                         summarizer=ExtractiveSummarizer(counter.count))
        last = screen.draws()[-1]
        assert screen.read().endswith("\r\n")  # the run closed its bar
    assert re.search(r"\| 3/3 \[.*compressed=3, .*in_flight=0\]$", last), last


def test_a_resumed_runs_bar_goes_on_from_the_interrupted_runs_counts(tmp_path, counter):
    data, out, _ = interrupted(tmp_path, counter)
    with terminal(300) as screen:
        compress_dataset(str(data), str(out), CONFIG, resume=True, quiet=False,
                         summarizer=ExtractiveSummarizer(counter.count))
        last = screen.draws()[-1]
    assert re.search(r"\| 7/7 \[.*compressed=7, ", last), last


def test_a_sampled_run_resumes_to_the_same_sample(tmp_path, counter):
    data = folder(tmp_path)
    sample = {"sample_percent": 60, "seed": 3}
    reference = tmp_path / "reference"
    compress_dataset(str(data), str(reference), CONFIG, **sample,
                     summarizer=ExtractiveSummarizer(counter.count))
    kept = [json.loads(x)["id"] for p in sorted(reference.iterdir())
            for x in p.read_text().splitlines()]
    assert 2 <= len(kept) < 7  # a sample, with a row to stop at after the first summary
    out = tmp_path / "out"
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(data), str(out), CONFIG, **sample,
                         summarizer=RevokedAfter(counter, 1))
    compress_dataset(str(data), str(out), CONFIG, **sample, resume=True,
                     summarizer=ExtractiveSummarizer(counter.count))
    assert outputs(out) == outputs(reference)


def test_a_run_leaves_no_counting_thread_behind(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", [row("r0", *FITS)])
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), CONFIG,
                     summarizer=ExtractiveSummarizer(counter.count))
    deadline = time.monotonic() + 5
    while any(t.name.startswith("count") for t in threading.enumerate()):
        assert time.monotonic() < deadline, [t.name for t in threading.enumerate()]
        time.sleep(0.01)


def test_a_folder_of_split_shards_gets_a_dataset_card(tmp_path, counter):
    # README: "A `README.md` dataset card beside the shards lists each split's files (YAML
    # `configs`)"; outputs that are all split shards in one folder are such shards.
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "train-00000-of-00001.jsonl", [row("t0", *FITS)])
    write_jsonl(data / "test-00000-of-00001.jsonl", [row("e0", *FITS)])
    out = tmp_path / "out"
    compress_dataset(str(data), str(out), CONFIG,
                     summarizer=ExtractiveSummarizer(counter.count))
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\nconfigs:\n- config_name: default\n  data_files:\n")
    assert sorted(re.findall(r"- split: (\w+)\n    path: (\S+)\n", card)) == [
        ("test", "test-*-of-*"), ("train", "train-*-of-*")]


def test_a_row_being_summarized_counts_as_in_flight(tmp_path, counter, monkeypatch):
    # The bar's in_flight counter: the rows whose summaries are being made. Each run's
    # progress display is watched from its summarizer while it summarizes.
    from trajectory_compressor.engine import local as local_module
    from trajectory_compressor.engine.progress import Progress

    shown: list[Progress] = []

    class Watched(Progress):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            shown.append(self)

    seen: list[int] = []

    class Looking(ExtractiveSummarizer):
        async def summarize(self, request: SummaryRequest) -> Summary:
            seen.append(shown[-1].counters["in_flight"])
            return await super().summarize(request)

        def live_counters(self) -> dict[str, int]:
            return {"api_calls": 40 + len(seen)}

    monkeypatch.setattr(local_module, "Progress", Watched)
    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(2)])
    summarizer = Looking(counter.count)
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), CONFIG, summarizer=summarizer)
    assert seen == [1, 1]  # one row at a time (window_rows 1)
    assert shown[-1].counters["in_flight"] == 0
    # The summarizer's own counters, read after each row, replace the per-row sums.
    assert shown[-1].counters["api_calls"] == 42


def test_a_strict_run_stops_at_a_bad_row_and_commits_nothing(tmp_path, counter):
    # README: "--strict stops at the first bad or failed row with exit code 1 and commits
    # nothing".
    src = write_jsonl(tmp_path / "in.jsonl", [row("r0", *FITS)], extra_lines=("{broken",))
    with pytest.raises(CompressorError, match=re.escape(f"{src}:2")):
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), CONFIG, strict=True,
                         summarizer=ExtractiveSummarizer(counter.count))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
