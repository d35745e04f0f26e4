"""`report` and `validate` read a run's sidecars bounded (issue 36, item 5).

A metrics file that was a link to ``/dev/zero`` made `report` read 8.5 GB. Now a sidecar
(metrics, over-limit, rejects, checkpoint) that is not a regular file is refused at once
with a message naming it and what it is, and one over its cap (README, "Bad input") is
refused by its size, before it is read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli, run_cli
from tests.fixtures_runs import long_hermes_row
from trajectory_compressor.formats import bounded

SMALL = ("--summarizer", "extractive", "--target-max-tokens", "150",
         "--summary-target-tokens", "10", "--no-cache")


def _run(tmp_path: Path) -> Path:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(long_hermes_row(f"r{i}")) + "\n" for i in range(3)),
                   encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    assert result.returncode == 0, result.stderr
    return out


def _replace(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:  # a sparse file past the metrics cap: no disk used, never read
        with path.open("wb") as f:
            f.truncate(bounded.METRICS_CAP + 1)


WHAT = {"/dev/zero": "a character device", "fifo": "a FIFO", "folder": "a folder",
        "huge": "over the cap of 64 MiB"}


@pytest.mark.parametrize("command", ["report", "validate", "report --html"])
@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "huge"])
def test_a_metrics_file_that_is_no_regular_file_or_too_big_is_refused(tmp_path, command,
                                                                       kind):
    out = _run(tmp_path)
    metrics = tmp_path / "out_metrics.json"
    _replace(metrics, kind)
    args = {"report": ["report", str(out)], "validate": ["validate", str(out)],
            "report --html": ["report", str(out), "--html", str(tmp_path / "p.html")]}
    # A subprocess with a timeout: a read of /dev/zero or a FIFO would never end.
    result = run_cli(*args[command], timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert str(metrics) in result.stderr and WHAT[kind] in result.stderr
    assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("sidecar", ["over_limit", "rejects"])
@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "folder"])
def test_an_over_limit_or_rejects_file_that_is_no_regular_file_is_refused(tmp_path,
                                                                          sidecar, kind):
    out = _run(tmp_path)
    # Without a metrics file, `report` counts the rejects file's lines itself.
    (tmp_path / "out_metrics.json").unlink()
    path = tmp_path / f"out_{sidecar}.jsonl"
    _replace(path, kind)
    # The rejects file is counted for the CI gate (--max-rejected) of such a run.
    result = run_cli("report", str(out), "--max-rejected", "5", timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr and WHAT[kind] in result.stderr


def test_a_line_over_its_cap_is_refused_by_its_length(tmp_path, monkeypatch):
    out = _run(tmp_path)
    over = tmp_path / "out_over_limit.jsonl"
    first = over.read_bytes().split(b"\n")[0]
    monkeypatch.setattr(bounded, "LINE_CAP", len(first) - 1)
    result = invoke_cli("report", str(out))
    assert result.returncode == 2, result.stderr
    assert f"{over}:1: a line of the over-limit file is over" in result.stderr
    monkeypatch.setattr(bounded, "LINE_CAP", len(first) + 1)  # the newline fits too
    assert invoke_cli("report", str(out)).returncode == 0


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "huge"])
def test_a_checkpoint_that_is_no_regular_file_or_too_big_is_refused_by_resume(tmp_path,
                                                                             kind):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(long_hermes_row("r0")) + "\n", encoding="utf-8")
    checkpoint = tmp_path / ".out.checkpoint.json"
    if kind == "huge":
        with checkpoint.open("wb") as f:
            f.truncate(bounded.CHECKPOINT_CAP + 1)
    else:
        _replace(checkpoint, kind)
    result = run_cli("compress", str(src), "-o", str(tmp_path / "out.jsonl"), *SMALL,
                     "--resume", timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert str(checkpoint) in result.stderr
    assert ("over the cap of 256 MiB" if kind == "huge" else WHAT[kind]) in result.stderr


@pytest.mark.parametrize("kind", ["/dev/zero", "huge"])
def test_a_rerun_beside_a_metrics_file_linked_to_dev_zero_does_not_hang(tmp_path, kind):
    # compress reads the metrics file beside an existing output to know who wrote it: a
    # device there is refused as a path it writes, a huge file as no record of a run.
    out = _run(tmp_path)
    _replace(tmp_path / "out_metrics.json", kind)
    result = run_cli("compress", str(tmp_path / "in.jsonl"), "-o", str(out), *SMALL,
                     timeout=120)
    assert result.returncode == 2, result.stderr
    assert ("a character device" if kind == "/dev/zero" else "--overwrite") in result.stderr
