"""Damaged, hand-edited or foreign metrics and over-limit files (issue 25, item 5):
`report` (text, --json, --html, --show) and `validate` say which file and what is wrong,
exit 2, never an internal error (exit 4) and never a traceback.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.cli_helpers import ROOT, invoke_cli

COMMANDS = (("report",), ("report", "--json"), ("report", "--html", "page.html"),
            ("report", "--show", "0"), ("validate",))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """An OpenAI-messages run at a low target (every row over it): its folder and the
    metrics file as written."""
    tmp = tmp_path_factory.mktemp("damaged")
    out = tmp / "out.jsonl"
    proc = invoke_cli("compress", str(ROOT / "data_samples" / "openai_messages.jsonl"), "-o",
                   str(out), "--summarizer", "extractive", "--no-cache", "-q",
                   "--target-max-tokens", "300", "--summary-target-tokens", "50")
    assert proc.returncode == 0, proc.stderr
    return tmp, json.loads((tmp / "out_metrics.json").read_text(encoding="utf-8"))


def _copy(run, tmp_path):
    folder, _metrics = run
    for name in ("out.jsonl", "out_metrics.json", "out_over_limit.jsonl"):
        shutil.copyfile(folder / name, tmp_path / name)
    return tmp_path / "out.jsonl"


def _edited(metrics, path, value):
    root = data = json.loads(json.dumps(metrics))
    *parents, last = path
    for key in parents:
        data = data[key]
    data[last] = value
    return root


CASES = {
    "truncated": (lambda m: json.dumps(m)[:300], "is not valid JSON"),
    "a list": (lambda m: "[1, 2, 3]", "the top level is a list, not an object"),
    "foreign": (lambda m: json.dumps({"name": "left-pad", "version": "1.3.0"}),
                "no 'summary' section"),
    "count as text": (lambda m: json.dumps(_edited(m, ("summary", "total_trajectories"),
                                                   "ten")),
                      "summary.total_trajectories is 'ten', not a count"),
    "tokens as a list": (lambda m: json.dumps(_edited(m, ("tokens", "total_before"), [1])),
                         "tokens.total_before is [1], not a number"),
    "median as text": (lambda m: json.dumps(_edited(
        m, ("distributions", "tokens_after", "median"), "x")),
        "distributions.tokens_after.median is 'x', not a number or null"),
    "section as text": (lambda m: json.dumps(_edited(m, ("over_limit",), "many")),
                        "'over_limit' is a string, not an object"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_metrics_file_is_named_with_what_is_wrong(run, tmp_path, case):
    out = _copy(run, tmp_path)
    damage, said = CASES[case]
    (tmp_path / "out_metrics.json").write_text(damage(run[1]), encoding="utf-8")
    for command in COMMANDS:
        proc = invoke_cli(command[0], str(out), *command[1:], cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert proc.stderr.startswith(f"error: metrics file {tmp_path / 'out_metrics.json'}"), \
            (command, proc.stderr)
        assert said in proc.stderr and "Traceback" not in proc.stderr, (command, proc.stderr)


def test_a_setting_compress_would_refuse_is_named(run, tmp_path):
    out = _copy(run, tmp_path)
    bad = _edited(run[1], ("settings", "compression", "target_max_tokens"), "big")
    (tmp_path / "out_metrics.json").write_text(json.dumps(bad), encoding="utf-8")
    for command in COMMANDS:
        proc = invoke_cli(command[0], str(out), *command[1:], cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "out_metrics.json" in proc.stderr and "target_max_tokens" in proc.stderr


@pytest.mark.parametrize(("line", "said"), [
    ("[1, 2]", "the line is a list, not an object"),
    ('{"reason": "y", "metrics": {"original_tokens": "x"}}',
     "metrics.original_tokens is 'x', not a number"),
    ('{"reason": "y", "metrics": "none"}', "'metrics' is a string, not an object"),
])
def test_a_bad_over_limit_line_is_located(run, tmp_path, line, said):
    out = _copy(run, tmp_path)
    over = tmp_path / "out_over_limit.jsonl"
    lines = over.read_text(encoding="utf-8").splitlines()
    over.write_text("\n".join([*lines, line]) + "\n", encoding="utf-8")
    for command in COMMANDS[:4]:  # validate does not read the over-limit file
        proc = invoke_cli(command[0], str(out), *command[1:], cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stderr)
        assert proc.stderr.startswith(f"error: {over}:{len(lines) + 1}: {said}"), proc.stderr
