"""Kill tests for `app/report_data.py` (issue 40 item 8): the data `report --html` shows,
from hand-made output rows and metrics and from real in-process compress runs, asserted
value for value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli_helpers import invoke_cli
from trajectory_compressor.core.metrics import nice_edges


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- a bug found here: the token bins of a tiny target ----------------------------------

def test_a_target_of_two_tokens_gets_bins_of_one_token(tmp_path):
    """`report --html` on a run with target 2 stopped with "internal error
    (StopIteration)": 30 bins over [0, 2] want a step under 1, and no whole-number step
    was a candidate. A step of 1 is the finest there is."""
    assert nice_edges(0, 2, 30) == [0, 1, 2]
    assert nice_edges(0, 1, 30) == [0, 1]
    assert nice_edges(5, 7, 30) == [5, 6, 7]
    src = _write(tmp_path / "in.jsonl", [
        {"id": "a", "conversations": [{"from": "human", "value": "hi"},
                                      {"from": "gpt", "value": "yo"}]}])
    out, page = tmp_path / "out.jsonl", tmp_path / "r.html"
    proc = invoke_cli("compress", str(src), "-o", str(out), "--target-max-tokens", "2",
                      "--summary-target-tokens", "1", "--summarizer", "extractive", "-q")
    assert proc.returncode == 0, proc.stderr
    proc = invoke_cli("report", str(out), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"wrote {page}: 1 rows, 0 of 0 over-limit or failed rows listed "
                           "with their timelines\n")
