"""CI gates (§16): `--max-over-limit`, `--max-failed`, `--max-rejected` on `compress`,
`report` and `validate`, through the real CLI.

The hand rows of `fixtures_runs` with one invalid line: 5 rows (1 under the target, 1
compressed to fit, 3 still over: big-tail, compressed too, no-middle, small-middle) and 1
rejected line.
Over-limit and failed shares are of the 5 rows; rejected shares of the 6 lines read.
"""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.fixtures_runs import HAND_ROWS, compress_run, write_jsonl
from tests.test_report import SLOW, SlowOnMarker, hand_config
from trajectory_compressor.app.gates import Counts, GateResult, evaluate, parse_gate
from trajectory_compressor.core.errors import ConfigError

HAND_YAML = """\
compression: {target_max_tokens: 100, summary_target_tokens: 20}
output: {add_summary_notice: false}
summarization: {backend: extractive}
"""


@pytest.fixture(scope="module")
def hand_run(tmp_path_factory):
    """``compress`` of the hand rows, gated within bounds (exit 1: a row was rejected)."""
    tmp = tmp_path_factory.mktemp("gates")
    (tmp / "hand.yaml").write_text(HAND_YAML)
    src = write_jsonl(tmp / "in.jsonl", HAND_ROWS, extra_lines=("{oops",))
    out = tmp / "out.jsonl"
    proc = invoke_cli("compress", str(src), "-o", str(out), "-c", str(tmp / "hand.yaml"),
                   "--quiet", "--max-over-limit", "3", "--max-failed", "0",
                   "--max-rejected", "20%")
    return tmp, src, out, proc


def test_gates_within_bounds_keep_the_exit_code_of_the_run(hand_run):
    _, _, out, proc = hand_run
    assert proc.returncode == 1, proc.stderr  # the rejected line; no gate failed
    assert "gate failed" not in proc.stderr
    metrics = json.loads(out.with_name("out_metrics.json").read_text())["summary"]
    assert (metrics["total_trajectories"], metrics["trajectories_still_over_limit"],
            metrics["trajectories_failed"], metrics["rows_rejected"]) == (5, 3, 0, 1)


def test_compress_over_a_gate_writes_everything_and_exits_3(hand_run):
    tmp, src, _, _ = hand_run
    out = tmp / "gated.jsonl"
    proc = invoke_cli("compress", str(src), "-o", str(out), "-c", str(tmp / "hand.yaml"),
                   "--quiet", "--max-over-limit", "59%", "--max-rejected", "0")
    assert proc.returncode == 3
    # 3 of 5 rows is 60% > 59%; 1 rejected of 6 lines read is 16.7% > 0 rows.
    assert proc.stderr.splitlines()[-2:] == ["gate failed: over-limit rows 3 (60.0%) > 59%",
                                             "gate failed: rejected rows 1 (16.7%) > 0"]
    assert len(read_jsonl(out)) == 5 and len(read_jsonl(tmp / "gated_over_limit.jsonl")) == 3
    assert len(read_jsonl(tmp / "gated_rejects.jsonl")) == 1
    assert (tmp / "gated_metrics.json").exists()


@pytest.mark.parametrize(("flags", "code", "lines"), [
    (["--max-over-limit", "3"], 0, []),
    (["--max-over-limit", "2"], 3, ["gate failed: over-limit rows 3 (60.0%) > 2"]),
    (["--max-over-limit", "60%"], 0, []),
    (["--max-over-limit", "0.5%"], 3, ["gate failed: over-limit rows 3 (60.0%) > 0.5%"]),
    (["--max-failed", "0"], 0, []),
    (["--max-failed", "0%"], 0, []),
    (["--max-rejected", "1"], 0, []),
    (["--max-rejected", "0"], 3, ["gate failed: rejected rows 1 (16.7%) > 0"]),
    (["--max-rejected", "17%"], 0, []),
    (["--max-rejected", "16%"], 3, ["gate failed: rejected rows 1 (16.7%) > 16%"]),
])
def test_report_gates_on_a_finished_run(hand_run, flags, code, lines):
    _, _, out, _ = hand_run
    proc = invoke_cli("report", str(out), *flags)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.splitlines() == lines
    assert "Still over the limit or failed: 3 rows" in proc.stdout  # the report as ever


def test_report_json_lists_the_gates_and_the_figures(hand_run):
    _, _, out, _ = hand_run
    proc = invoke_cli("report", str(out), "--json", "--max-over-limit", "2", "--max-failed", "0")
    assert proc.returncode == 3
    data = json.loads(proc.stdout)
    assert data["gates"] == [
        {"gate": "max-over-limit", "limit": "2", "count": 3, "total": 5,
         "share_percent": 60.0, "passed": False},
        {"gate": "max-failed", "limit": "0", "count": 0, "total": 5, "share_percent": 0.0,
         "passed": True}]
    assert data["figures"] == {
        "rows": 5, "compressed": 2, "skipped_under_target": 1, "over_limit": 3, "failed": 0,
        "rejected": 1, "reasons": {"nothing_compressible": 1, "protected_tail_over_target": 1,
                                   "region_too_small": 1}}


def test_the_failed_gate_and_3_winning_over_1(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", [*HAND_ROWS, SLOW])
    out = tmp_path / "out.jsonl"
    result = compress_run(src, out, hand_config(), counter, SlowOnMarker(counter))
    assert result.exit_code == 1 and result.metrics.trajectories_failed == 1
    proc = invoke_cli("report", str(out), "--max-failed", "0")
    assert proc.returncode == 3
    assert proc.stderr == "gate failed: failed rows 1 (16.7%) > 0\n"
    assert invoke_cli("report", str(out), "--max-failed", "16.7%").returncode == 0
    assert invoke_cli("report", str(out), "--max-failed", "1").returncode == 0


def test_validate_gates(hand_run):
    tmp, src, out, _ = hand_run
    common = ["-c", str(tmp / "hand.yaml")]
    proc = invoke_cli("validate", str(out), *common, "--max-over-limit", "3",
                   "--max-rejected", "0", "--max-failed", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = invoke_cli("validate", str(out), *common, "--max-over-limit", "50%")
    assert proc.returncode == 3
    assert proc.stderr == "gate failed: over-limit rows 3 (60.0%) > 50%\n"
    # The input: its bad line is a problem (1) and an unreadable row (rejected): 3 wins.
    proc = invoke_cli("validate", str(src), *common, "--max-rejected", "0", "--quiet")
    assert proc.returncode == 3
    assert "gate failed: rejected rows 1 (16.7%) > 0" in proc.stderr


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "101%", "5 rows"])
def test_a_bad_gate_is_a_usage_error(hand_run, value):
    _, _, out, _ = hand_run
    proc = invoke_cli("report", str(out), "--max-over-limit", value)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --max-over-limit") and len(
        proc.stderr.splitlines()) == 1


def test_gate_arithmetic():
    counts = Counts(rows=200, over_limit=7, failed=0, rejected=0)
    [result] = evaluate([parse_gate("over_limit", "1%")], counts)
    assert not result.passed and result.line() == "gate failed: over-limit rows 7 (3.5%) > 1%"
    assert GateResult(parse_gate("over_limit", "3.5%"), 7, 200).passed  # not more than
    assert GateResult(parse_gate("failed", "0"), 0, 0).passed  # no rows: nothing failed
    assert GateResult(parse_gate("rejected", "0%"), 1, 2000).line() == \
        "gate failed: rejected rows 1 (0.05%) > 0%"
    with pytest.raises(ConfigError, match="--max-failed"):
        parse_gate("failed", "many")
