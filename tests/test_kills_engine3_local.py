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
from pathlib import Path

import pytest

from tests.fixtures_runs import HAND_CONFIG, row, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import FatalSummaryError
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
