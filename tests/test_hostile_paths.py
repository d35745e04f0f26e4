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
        "--summary-target-tokens", str(HAND_CONFIG["summary_target_tokens"]),
        "--summarizer", "extractive")


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


# 10. Every string from data printed to a terminal is inert

# What a terminal acts on: ESC (OSC, CSI), BEL, C1 CSI, bidi overrides and isolates.
LIVE = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\r")


def assert_inert(text: str) -> None:
    assert not [ch for ch in LIVE if ch in text], repr(text)


def test_report_show_prints_a_hostile_row_id_inert(tmp_path):
    # OSC 52 ended by ST (not BEL, as in the trial), a C1 CSI, a right-to-left override.
    hostile = "r1\x1b]52;c;cm0gLXJmIH4=\x1b\\\u202e\x9b2J"
    row = {**HAND_ROWS[0], "id": hostile}
    _, out = compressed(tmp_path, [row, *HAND_ROWS[1:]])
    for key in ("0", hostile):
        proc = run_cli("report", str(out), "--show", key)
        assert proc.returncode == 0, proc.stderr
        assert_inert(proc.stdout + proc.stderr)
        # Still readable: every character is there, spelled out.
        assert "r1\\u001b]52;c;cm0gLXJmIH4=\\u001b\\\\u202e\\u009b2J" in proc.stdout
    proc = run_cli("report", str(out), "--show", "0", "--json")
    assert_inert(proc.stdout)
    assert json.loads(proc.stdout)["id"] == hostile  # the JSON keeps the exact value


def test_compress_summary_and_rejects_list_print_a_hostile_file_name_inert(tmp_path):
    # The trial's escape was in a row id; here in the input's file name, which the summary
    # prints (the default output is named after it) and every reject's location holds.
    name = "d\x1b]52;c;QUJD\x07\u2066x\r.jsonl"
    src = write_jsonl(tmp_path / name, HAND_ROWS[:2], extra_lines=("{not json",))
    proc = run_cli("compress", str(src), *HAND)
    assert proc.returncode == 1, proc.stderr  # 1: a row was rejected
    assert "Rejected rows: 1" in proc.stdout
    assert_inert(proc.stdout + proc.stderr)
    assert "\\u2066x\\u000d_compressed.jsonl" in proc.stdout
    # Errors quoting a path are inert too.
    proc = run_cli("report", str(tmp_path / ("gone\x1b[2J\u202e.jsonl")))
    assert proc.returncode == 2 and "gone\\u001b[2J\\u202e.jsonl" in proc.stderr
    assert_inert(proc.stderr)
