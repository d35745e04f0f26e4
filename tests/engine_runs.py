"""Helpers of the tests that compare a sharded or Ray run with the local engine's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.datagen import write_jsonl
from trajectory_compressor.engine.local import RunResult


def metrics_of(result: RunResult) -> dict[str, Any]:
    """The run's metrics file without what differs between two runs of the same input."""
    data = json.loads(result.layout.metrics.read_text())
    data.pop("processing")  # timings
    data["run"].pop("outputs")  # the two runs write to different paths
    committed = data.pop("committed", None)  # the same bytes, at those other paths
    if committed is not None:
        data["committed"] = (committed["rows"], sorted(
            entry["sha256"] for entry in committed["files"].values()))
    # The Ray engine stores no "what would fix it" table (report re-plans, saying so).
    data.pop("remedies", None)
    return data


def broken_line_corpus(root: Path, files: int = 3, rows: int = 12) -> Path:
    """A folder of ``files`` Hermes JSONL files of ``rows`` rows (a broken line in the
    second)."""
    folder = root / "in"
    folder.mkdir()
    for i in range(files):
        write_jsonl(folder / f"part{i}.jsonl", rows, seed=i)
    with (folder / "part1.jsonl").open("ab") as f:
        f.write(b"{broken\n")
    return folder
