"""`validate OUTPUT` checks against the settings the run recorded (issue 25, item 2).

The target, summary size, counting mode and tokenizer come from the metrics file beside
the output; each flag overrides one; the closing line says where they came from; the CI
gates count against them; an output without rows is a problem unless its run had none.
Every dialect and container `compress` writes, compressed at a target low enough that
rows stay over it.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.cli_helpers import invoke_cli
from tests.sample_files import sample_head
from trajectory_compressor.engine.layout import finished_layout

SAMPLE_NAMES = ("trajectories.jsonl", "trajectories.parquet", "openai_messages.jsonl",
                "llamafactory_sharegpt.json", "llamafactory_messages.jsonl")
TARGET, SUMMARY = 300, 50  # far below the samples' rows: most stay over


@pytest.fixture(scope="module", params=SAMPLE_NAMES)
def low_run(request, tmp_path_factory):
    """A sample compressed at `TARGET`: (output, its metrics file's summary)."""
    name = request.param
    tmp = tmp_path_factory.mktemp("low")
    stem, suffix = name.rsplit(".", 1)
    out = tmp / f"{stem}_low.{suffix}"
    (tmp / "in").mkdir()
    src = sample_head(name, tmp / "in")  # 10 rows (of 50 in the Hermes samples)
    proc = invoke_cli("compress", str(src), "-o", str(out), "--summarizer",
                   "extractive", "--no-cache", "-q", "--target-max-tokens", str(TARGET),
                   "--summary-target-tokens", str(SUMMARY))
    assert proc.returncode == 0, proc.stderr
    (metrics_file,) = tmp.glob("*_metrics.json")
    metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
    return out, metrics["summary"], metrics_file


def test_the_gate_counts_against_the_runs_target(low_run):
    out, summary, metrics_file = low_run
    over = summary["trajectories_still_over_limit"]
    assert over > 1  # the run left rows over its target of 300
    result = invoke_cli("validate", str(out), "--max-over-limit", "0")
    assert result.returncode == 3, (result.stdout, result.stderr)
    share = 100 * over / summary["total_trajectories"]
    assert f"gate failed: over-limit rows {over} ({share:.1f}%) > 0" in result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        f"{summary['total_trajectories']} rows checked, 0 problems; allowed by "
        f"--max-over-limit: {over} rows over the target 300, flagged still_over_limit by the "
        f"run (target 300, summary 50, counting turns, tokenizer deepseek-v4; settings from "
        f"{metrics_file.name})")


def test_a_flag_overrides_the_recorded_setting_and_says_so(low_run):
    out, summary, metrics_file = low_run
    result = invoke_cli("validate", str(out), "--max-over-limit", "0",
                     "--target-max-tokens", "1000000")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.strip().splitlines()[-1] == (
        f"{summary['total_trajectories']} rows checked, 0 problems (target 1,000,000, "
        f"summary 50, counting turns, tokenizer deepseek-v4; settings from "
        f"{metrics_file.name}, --target-max-tokens from the command line)")


def test_without_a_metrics_file_it_names_the_defaults(low_run, tmp_path):
    out = low_run[0]
    alone = tmp_path / out.name
    shutil.copyfile(out, alone)
    result = invoke_cli("validate", str(alone))
    # At the default target (built-in, 15,250) the sample rows fit or are
    # flagged over; what matters is that the line names the defaults it used.
    assert result.stdout.strip().splitlines()[-1].endswith(
        "(target 15,250, summary 750, counting turns, tokenizer deepseek-v4; no metrics file "
        "beside it: built-in defaults)"), result.stdout


def test_an_emptied_output_is_a_problem_when_its_run_wrote_rows(low_run):
    out, summary, metrics_file = low_run
    empty = {".jsonl": b"", ".json": b"[]"}.get(out.suffix)
    if empty is None:
        pytest.skip("a Parquet file without rows still holds a schema; JSONL and JSON cover it")
    emptied = out.parent / f"emptied{out.suffix}"
    shutil.copyfile(metrics_file, finished_layout(emptied).metrics)
    emptied.write_bytes(empty)
    result = invoke_cli("validate", str(emptied))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert (f"{emptied}: no rows, but its run's metrics say it wrote "
            f"{summary['total_trajectories']}") in result.stdout.splitlines()
    # The copied metrics file is another output's, and validate says so (issue 36 item 6).
    assert "is another run's" in result.stdout


def test_an_empty_file_without_metrics_is_a_problem(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = invoke_cli("validate", str(empty))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout.startswith(f"{empty}: no rows, and no metrics file says")


def test_an_empty_output_of_an_empty_run_passes(tmp_path):
    src = tmp_path / "none.jsonl"
    src.write_bytes(b"")
    out = tmp_path / "none_out.jsonl"
    proc = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                   "--no-cache", "-q")
    assert proc.returncode == 0, proc.stderr
    result = invoke_cli("validate", str(out))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.startswith("0 rows checked, 0 problems (target 15,250")
    assert "settings from none_out_metrics.json" in result.stdout
