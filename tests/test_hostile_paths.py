"""Hostile cases, round 2 (issue 24): paths a run writes, secrets, the terminal, config,
resume, checkpoints, batch results. One test per class of failure, each on a variant of the
case the trial found (not the case itself), run through the real CLI where a user would
meet it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_helpers import run_cli
from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, write_jsonl

HAND = ("--target-max-tokens", str(HAND_CONFIG["target_max_tokens"]),
        "--summary-target-tokens", str(HAND_CONFIG["summary_target_tokens"]))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def compressed(tmp_path: Path, rows: list | None = None) -> tuple[Path, Path]:
    """A finished run over ``rows`` (the hand rows): its input and output."""
    src = write_jsonl(tmp_path / "in.jsonl", rows if rows is not None else HAND_ROWS)
    out = tmp_path / "out" / "in_c.jsonl"
    out.parent.mkdir()
    proc = run_cli("compress", str(src), "-o", str(out), *HAND, "--quiet")
    assert proc.returncode == 0, proc.stderr
    return src, out


# 5. Every path a run writes is checked against every input (SPEC §12)

def test_batch_export_never_replaces_an_input_named_like_its_files(tmp_path):
    # The trial's input was requests-00001.jsonl; here the second file's name, and a
    # JSON-array input called manifest.json, each alone in the batch folder.
    folder = tmp_path / "b"
    folder.mkdir()
    for name in ("requests-00002.jsonl", "manifest.json"):
        src = folder / name
        if name.endswith(".json"):
            src.write_text(json.dumps(HAND_ROWS), encoding="utf-8")
        else:
            write_jsonl(src, HAND_ROWS)
        before = snapshot(tmp_path)
        proc = run_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), *HAND,
                       "--summarizer", "batch", "--model", "m", "--batch-dir", str(folder))
        assert proc.returncode == 2, proc.stderr
        assert f"would overwrite the input {src}" in proc.stderr
        assert "--batch-dir" in proc.stderr and "Traceback" not in proc.stderr
        assert snapshot(tmp_path) == before
        src.unlink()


def test_report_html_never_replaces_the_runs_own_input(tmp_path):
    src, out = compressed(tmp_path)
    # The input by another spelling: a relative path with a detour, and a link to it.
    link = tmp_path / "page.html"
    link.symlink_to(src)
    before = snapshot(tmp_path)
    for page in (tmp_path / "out" / ".." / "in.jsonl", link):
        proc = run_cli("report", str(out), "--html", str(page))
        assert proc.returncode == 2, proc.stderr
        assert "would overwrite the input" in proc.stderr and str(src.name) in proc.stderr
        assert snapshot(tmp_path) == before
    # Anywhere else the page is written.
    proc = run_cli("report", str(out), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").read_text(encoding="utf-8").startswith("<!")
    assert src.read_bytes() == before["in.jsonl"]
