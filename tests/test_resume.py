"""Checkpoints and --resume: real runs killed part-way, then resumed."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.cli_helpers import interrupt_when, read_jsonl, run_cli, start_cli
from tests.datagen import write_jsonl, write_parquet

# A checkpoint every 100 rows of 2,000: the runs are killed right after the first, with
# about 1,900 rows (some seconds of work) still to go.
ARGS = ("--summarizer", "extractive", "--target-max-tokens", "500",
        "--summary-target-tokens", "60", "--quiet", "--checkpoint-every", "100")
SIDECARS = ("_over_limit.jsonl", "_rejects.jsonl")


def _metrics(path: Path) -> dict:
    data = json.loads(path.read_text())
    data.pop("processing")  # timings differ; everything else must not
    data.pop("run")  # names the output paths, and the runs compared write to different ones
    committed = data.pop("committed")  # the same bytes, at those other paths
    data["committed"] = (committed["rows"],
                         sorted(entry["sha256"] for entry in committed["files"].values()))
    # A resumed run did not plan the rows before its checkpoint: it stores no table.
    data.pop("remedies", None)
    return data


def _same_outputs(a: Path, b: Path) -> None:
    assert a.read_bytes() == b.read_bytes()
    for suffix in SIDECARS:
        stem_a = a.with_name(a.name.split(".")[0] + suffix)
        stem_b = b.with_name(b.name.split(".")[0] + suffix)
        assert stem_a.read_bytes() == stem_b.read_bytes(), suffix
    assert _metrics(a.with_name(a.name.split(".")[0] + "_metrics.json")) == _metrics(
        b.with_name(b.name.split(".")[0] + "_metrics.json"))


@pytest.fixture(scope="module")
def jsonl_run(tmp_path_factory):
    """An input with a few bad lines, and the output of an uninterrupted run."""
    root = tmp_path_factory.mktemp("resume")
    src = write_jsonl(root / "in.jsonl", 2000)
    with src.open("ab") as f:
        f.write(b"{broken\n")
    lines = src.read_bytes().splitlines(keepends=True)
    lines.insert(600, b'{"no": "conversations"}\n')  # after the first checkpoint
    src.write_bytes(b"".join(lines))
    reference = root / "ref.jsonl"
    proc = run_cli("compress", str(src), "-o", str(reference), *ARGS)
    assert proc.returncode == 1, proc.stderr  # the bad lines were rejected
    return src, reference


def test_sigkill_then_resume_equals_an_uninterrupted_run(jsonl_run, tmp_path):
    src, reference = jsonl_run
    out = tmp_path / "out.jsonl"
    checkpoint = tmp_path / ".out.checkpoint.json"
    proc = start_cli("compress", str(src), "-o", str(out), *ARGS)
    interrupt_when(proc, checkpoint.exists, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    # Nothing under a final name; the partial files and the checkpoint stay.
    assert not out.exists() and not (tmp_path / "out_metrics.json").exists()
    assert (tmp_path / ".out.jsonl.partial").exists() and checkpoint.exists()

    # A resume with other settings or another input is refused, and harms nothing.
    proc = run_cli("compress", str(src), "-o", str(out), *ARGS, "--resume",
                   "--target-max-tokens", "600")
    assert proc.returncode == 2
    assert ("cannot resume: the setting compression.target_max_tokens is 600 but was 500 "
            "in the interrupted run") in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_cli("compress", str(src), "-o", str(out), *ARGS, "--resume",
                   "--sample-percent", "50")
    assert proc.returncode == 2 and "cannot resume: --sample-percent/--seed" in proc.stderr
    assert checkpoint.exists()

    proc = run_cli("compress", str(src), "-o", str(out), *ARGS, "--resume")
    assert proc.returncode == 1, proc.stderr  # the same rejected lines, reported again
    _same_outputs(out, reference)
    assert not checkpoint.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert [r["line"] for r in rejects] == [601, 2002]


def test_resume_refuses_an_input_that_changed(jsonl_run, tmp_path):
    src, _ = jsonl_run
    mine = tmp_path / "in.jsonl"
    mine.write_bytes(src.read_bytes())
    out = tmp_path / "out.jsonl"
    proc = start_cli("compress", str(mine), "-o", str(out), *ARGS)
    interrupt_when(proc, (tmp_path / ".out.checkpoint.json").exists, signal.SIGKILL)
    partial = tmp_path / ".out.jsonl.partial"
    partial.rename(tmp_path / "aside")
    proc = run_cli("compress", str(mine), "-o", str(out), *ARGS, "--resume")
    assert proc.returncode == 2
    assert f"cannot resume: the partial output {partial} is missing or damaged" in proc.stderr
    (tmp_path / "aside").rename(partial)
    with mine.open("ab") as f:
        f.write(b"\n")
    proc = run_cli("compress", str(mine), "-o", str(out), *ARGS, "--resume")
    assert proc.returncode == 2
    assert f"cannot resume: the input {mine} is not the one the interrupted run read" \
        in proc.stderr
    # Without --resume the run starts over, says so, and leaves no checkpoint behind.
    proc = run_cli("compress", str(mine), "-o", str(out), *ARGS[:-3])
    assert proc.returncode == 1
    assert "checkpoint" in proc.stderr and "starting over" in proc.stderr
    assert not (tmp_path / ".out.checkpoint.json").exists()
    assert len(read_jsonl(out)) == 2000


def test_ctrl_c_keeps_a_checkpoint_and_resume_finishes(jsonl_run, tmp_path):
    src, reference = jsonl_run
    out = tmp_path / "out.jsonl"
    checkpoint = tmp_path / ".out.checkpoint.json"
    proc = start_cli("compress", str(src), "-o", str(out), *ARGS)
    err = interrupt_when(proc, checkpoint.exists, signal.SIGINT)
    assert proc.returncode == 130
    assert "--resume" in err and "Traceback" not in err
    assert not out.exists() and checkpoint.exists()
    proc = run_cli("compress", str(src), "-o", str(out), *ARGS, "--resume")
    assert proc.returncode == 1, proc.stderr
    _same_outputs(out, reference)


def test_resume_without_a_checkpoint_starts_fresh(jsonl_run, tmp_path):
    src, reference = jsonl_run
    out = tmp_path / "out.jsonl"
    proc = run_cli("compress", str(src), "-o", str(out), *ARGS[:-3], "--resume",
                   "--checkpoint-every", "100")
    assert proc.returncode == 1
    assert "no checkpoint" in proc.stderr and "starting from the beginning" in proc.stderr
    _same_outputs(out, reference)


def test_sigkill_then_resume_with_parquet_and_sampling(tmp_path):
    src = write_parquet(tmp_path / "in.parquet", 2000, row_group_rows=200)
    sample = ("--sample-percent", "60", "--seed", "3")
    reference = tmp_path / "ref.parquet"
    proc = run_cli("compress", str(src), "-o", str(reference), *ARGS, *sample)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out.parquet"
    proc = start_cli("compress", str(src), "-o", str(out), *ARGS, *sample)
    interrupt_when(proc, (tmp_path / ".out.checkpoint.json").exists, signal.SIGKILL)
    assert not out.exists()
    proc = run_cli("compress", str(src), "-o", str(out), *ARGS, *sample, "--resume")
    assert proc.returncode == 0, proc.stderr
    _same_outputs(out, reference)
    assert not (tmp_path / ".out.parquet.parts").exists()
