"""Tests written to kill the mutants of `app/commands.py` left by the coverage-guided pass
(issue 40, item 8): compress's closing block and the first rejects it lists, the
fallback checks at the end of a run (a failing LLM on loopback, in this process), the
defaults of `analyze_input`, `report_output` and `validate_output_text` as a library
caller meets them, the settings `report --show` applies, `--html`'s refusals,
`validate`'s closing line and the run's own gate, and the error line coming last when
stdout and stderr share one pipe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import ROOT, invoke_cli
from tests.fake_llm_server import FakeLLMServer
from tests.test_loud_failures import ENV, KEY_ENV, config, three_rows
from trajectory_compressor.app import commands
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.engine.options import RunOptions

TARGET = {"target_max_tokens": 200, "summary_target_tokens": 40}
CONFIG = CompressionConfig(summarizer="extractive", **TARGET)  # type: ignore[arg-type]
RULE = "Rules of the house. " * 120


def _rows(n: int, big: bool = False) -> list[dict]:
    """``n`` rows; ``big``: a protected system turn alone over the target (all flagged)."""
    system = RULE if big else "You are a coding agent."
    return [{"id": f"r{i}", "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Fix the failing test number {i}."},
        {"role": "assistant", "content": "I will read the test first. " * 5},
        {"role": "user", "content": "pytest output: " + "FAILED t.py::t - assert 1 == 2 " * 20},
        {"role": "assistant", "content": "The fix is in parse(); done. " * 4},
    ]} for i in range(n)]


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


def test_compress_prints_its_closing_block_unless_quiet(here, capsys):
    src = _write(here / "in.jsonl", [*_rows(3), "not json", "[1, 2]"])
    code = commands.compress_input(str(src), "out.jsonl", CONFIG, RunOptions(quiet=True))
    assert code == 1  # two rows rejected
    assert capsys.readouterr().out == ""
    code = commands.compress_input(str(src), "loud.jsonl", CONFIG, RunOptions(quiet=False))
    assert code == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Trajectory compression finished"
    assert lines[1] == f"  rows             {3:>10,}   rejected 2"  # rows read and kept
    percent = [line.split() for line in lines if line.rstrip().endswith("%")]
    assert len(percent) == 3  # compressed, skipped, still over limit
    for words in percent:
        assert words[-1] == f"{100 * int(words[-2]) / 3:.1f}%", words
    shown = [line.split(None, 1) for line in lines if line.startswith("  ") and
             line.split()[0] in ("output", "metrics", "rejects")]
    assert shown == [["output", "loud.jsonl"], ["metrics", "loud_metrics.json"],
                     ["rejects", "loud_rejects.jsonl"]]
    assert any(line.startswith("  over limit       loud_over_limit.jsonl") for line in lines)
    assert lines[-4:-2] == ["", "Rejected rows: 2"]
    assert lines[-2].startswith("  in.jsonl:4: ") and lines[-1].startswith("  in.jsonl:5: ")


def test_a_masking_run_says_what_its_strategy_did_before_the_time(here, capsys):
    src = _write(here / "in.jsonl", _rows(3))
    masking = CONFIG.replace(strategy="mask")
    commands.compress_input(str(src), "out.jsonl", masking, RunOptions(quiet=False))
    lines = capsys.readouterr().out.splitlines()
    strategy = [i for i, line in enumerate(lines) if line.startswith("  strategy ")]
    time = [i for i, line in enumerate(lines) if line.startswith("  time ")]
    assert len(strategy) == 1 and len(time) == 1 and strategy[0] < time[0], lines
    assert lines[strategy[0] - 1].startswith("  API calls "), lines


def test_the_first_five_rejects_and_how_many_there_are(here):
    path = here / "r.jsonl"
    entries = [json.dumps({"location": f"{here}/in.jsonl:{i}", "error": f"bad {i}"})
               for i in range(1, 8)]
    _write(path, [entries[0], "", "not json", *entries[1:], "[1]"])
    first, total = commands._first_rejects(path)
    assert total == 9  # the blank line is no entry; the damaged ones are counted
    assert first == [(f"in.jsonl:{i}", f"bad {i}") for i in range(1, 6)]  # "not json" skipped
    assert commands._first_rejects(path, keep=1) == ([("in.jsonl:1", "bad 1")], 9)
    _write(path, [json.dumps({})] * 7)
    assert commands._first_rejects(path) == ([("?", "rejected")] * 5, 7)
    assert commands._first_rejects(here / "missing.jsonl") == ([], 0)
    assert commands._first_rejects(here) == ([], 0)  # a folder: OSError too


def _failing_run(here, *flags: str, script: list[str] | None = None):
    src = three_rows(ROOT / "data_samples" / "trajectories.jsonl", here)
    with FakeLLMServer(faults={"http500": 1.0}, script=script).in_thread() as server:
        return invoke_cli("compress", str(src), "-o", str(here / "out.jsonl"), "--config",
                          str(config(here, "  max_retries: 1\n")), "--base-url", server.url,
                          "--api-key-env", KEY_ENV, "--model", "m", "--quiet",
                          "--max-concurrent-requests", "1", *flags, env=ENV, cwd=here)


def test_a_run_of_fallbacks_only_exits_2_after_its_summary_unless_allowed(here):
    run = _failing_run(here)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1].startswith(
        "error: no summary came from the LLM: all 3 summaries asked of it fell back")
    allowed = _failing_run(here, "--allow-fallback", "--overwrite")
    assert allowed.returncode == 0, allowed.stderr
    assert "no summary came from the LLM" not in allowed.stderr


def test_the_configured_fallback_share_gates_the_run(here):
    (here / "share.yaml").write_text("summarization:\n  retry_delay: 0.01\n  max_retries: 1\n"
                                     "  max_fallback_share: 10%\n")
    src = three_rows(ROOT / "data_samples" / "trajectories.jsonl", here)
    with FakeLLMServer(faults={"http500": 1.0}, script=["ok", "http500", "http500"]
                       ).in_thread() as server:
        run = invoke_cli("compress", str(src), "-o", "out.jsonl", "--config", "share.yaml",
                         "--base-url", server.url, "--api-key-env", KEY_ENV, "--model", "m",
                         "--quiet", "--max-concurrent-requests", "1", env=ENV, cwd=here)
    assert run.returncode == 3, run.stderr
    assert run.stderr.splitlines()[-1] == "gate failed: fallback summaries 2 (66.7%) > 10%"
    with FakeLLMServer(faults={"http500": 1.0}, script=["ok", "http500", "http500"]
                       ).in_thread() as server:
        run = invoke_cli("compress", str(src), "-o", "flag.jsonl", "--config", "share.yaml",
                         "--base-url", server.url, "--api-key-env", KEY_ENV, "--model", "m",
                         "--quiet", "--max-concurrent-requests", "1",
                         "--max-fallback-share", "70%", env=ENV, cwd=here)
    assert run.returncode == 0, run.stderr  # the flag replaces the config's gate


def test_analyze_input_returns_0_and_keeps_a_foreign_json_file_by_default(here, capsys):
    src = _write(here / "in.jsonl", _rows(2))
    assert commands.analyze_input(str(src), CONFIG, RunOptions()) == 0
    theirs = _write(here / "theirs.json", ["{}"])
    with pytest.raises(ConfigError, match="--overwrite"):
        commands.analyze_input(str(src), CONFIG, RunOptions(), json_path=str(theirs))
    assert theirs.read_text() == "{}\n"
    capsys.readouterr()


@pytest.fixture
def flagged(here):
    """205 rows, every one still over the target after the run."""
    src = _write(here / "in.jsonl", _rows(205, big=True))
    assert commands.compress_input(str(src), "out.jsonl", CONFIG, RunOptions()) == 0
    return here


def test_report_output_defaults_text_50_rows_a_200_row_page_no_overwrite(flagged, capsys):
    assert commands.report_output("out.jsonl", None) == 0
    text = capsys.readouterr().out
    assert not text.startswith("{")
    assert len({w for w in text.split() if w.startswith("r") and w[1:].isdigit()}) == 50
    assert commands.report_output("out.jsonl", None, html="page.html") == 0
    html = (flagged / "page.html").read_text()
    assert sum(f"r{i}<" in html or f"r{i}\"" in html for i in range(205)) == 200
    theirs = _write(flagged / "theirs.html", ["mine"])
    with pytest.raises(ConfigError, match="--overwrite"):
        commands.report_output("out.jsonl", None, html=str(theirs))
    assert theirs.read_text() == "mine\n"
    capsys.readouterr()


def test_report_show_applies_the_overrides_on_the_recorded_settings(flagged, capsys):
    assert commands.report_output("out.jsonl", None, show="r0") == 0
    recorded = capsys.readouterr().out
    assert commands.report_output("out.jsonl", None, {"target_max_tokens": 77777},
                                  show="r0") == 0
    overridden = capsys.readouterr().out
    assert "77,777" in overridden and "77,777" not in recorded


@pytest.mark.parametrize("sidecar", ["out_metrics.json", "out_over_limit.jsonl",
                                     "out_rejects.jsonl"])
def test_html_never_replaces_a_sidecar_of_its_run(flagged, sidecar):
    (flagged / "out_rejects.jsonl").touch()
    before = (flagged / sidecar).read_bytes()
    run = invoke_cli("report", "out.jsonl", "--html", sidecar, cwd=flagged)
    assert run.returncode == 2
    assert run.stderr == (f"error: --html {sidecar} would overwrite the run's {sidecar}; "
                          "choose another file name\n")
    assert (flagged / sidecar).read_bytes() == before


def test_show_of_a_row_whose_turns_cannot_be_read_names_it(here):
    _write(here / "out.jsonl", [{"id": "x", "conversations": [{"from": "alien", "value": 1}]}])
    (here / "out_over_limit.jsonl").touch()
    run = invoke_cli("report", "out.jsonl", "--show", "x", "--no-config", cwd=here)
    assert run.returncode == 2
    assert run.stderr.startswith("error: out.jsonl:1: ") or \
        run.stderr.startswith(f"error: {here / 'out.jsonl'}:1: "), run.stderr
    assert "Traceback" not in run.stderr


def _one_pipe(*args: str, cwd: Path) -> list[str]:
    """The CLI as a process whose stdout and stderr go to one pipe (a CI log: ``2>&1``)."""
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)  # stdout buffered, as in most CI jobs
    proc = subprocess.run([sys.executable, "-m", "trajectory_compressor", *args], cwd=cwd,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    return proc.stdout.splitlines()


def test_in_one_pipe_the_error_line_comes_after_the_text_it_closes(here):
    _write(here / "bad.jsonl", ["not json", "[1]"])
    lines = _one_pipe("analyze", "bad.jsonl", "--no-config", cwd=here)
    assert lines[-1].startswith("error: all 2 rows were rejected, nothing to analyze"), lines
    assert len(lines) > 1
    src = three_rows(ROOT / "data_samples" / "trajectories.jsonl", here)
    with FakeLLMServer(faults={"http500": 1.0}).in_thread() as server:
        lines = _one_pipe("compress", str(src), "-o", "out.jsonl", "--config",
                          str(config(here, "  max_retries: 1\n")), "--base-url", server.url,
                          "--api-key-env", KEY_ENV, "--model", "m", cwd=here)
    assert lines[-1].startswith("error: no summary came from the LLM"), lines
    assert "Trajectory compression finished" in lines[:-1]


def _found(rows: int, flagged: int = 0, **kinds: int):
    from collections import Counter

    from trajectory_compressor.inspect.validate import Validation

    return Validation(rows=rows, flagged=flagged, kinds=Counter(kinds))


def test_the_closing_line_names_every_kind_and_who_flagged_the_rows_over_the_target():
    line = commands.closing_line
    assert line(_found(30, 13, over_target=13, unanswered_call=2), 4000, False,
                "--allow-over-limit") == (
        "30 rows checked, 15 problems: 13 rows over the target 4,000, flagged "
        "still_over_limit by the run; 2 rows with a tool call no result answers")
    assert line(_found(5, 2, over_target=3), 200, False, "-") == (
        "5 rows checked, 3 problems: 3 rows over the target 200 (2 flagged "
        "still_over_limit by the run, 1 not)")
    assert line(_found(5, 0, over_target=1, duplicate=1), 200, False, "-") == (
        "5 rows checked, 2 problems: 1 row over the target 200, not flagged by the run; "
        "1 duplicated row")
    assert line(_found(5, 3, over_target=3, sidecar=1), 200, True, "--allow-over-limit") == (
        "5 rows checked, 1 problem: 1 disagreement with the run's metrics file; allowed by "
        "--allow-over-limit: 3 rows over the target 200, flagged still_over_limit by the run")
    assert line(_found(1), 200, True, "x") == "1 row checked, 0 problems"


@pytest.fixture
def gated(here):
    """A run of 205 rows over the target, given --max-over-limit 100% (recorded)."""
    src = _write(here / "in.jsonl", _rows(205, big=True))
    options = RunOptions(gates=(("over_limit", "100%"),))
    assert commands.compress_input(str(src), "out.jsonl", CONFIG, options) == 0
    return here


def _validate(**given) -> int:
    """validate_output_text with its defaults but for ``given`` (as_json, allow_over_limit,
    gates, quiet)."""
    return commands.validate_output_text("out.jsonl", None, {}, ("default", CONFIG), **given)


def test_validate_applies_the_runs_own_gate_and_names_it(gated, capsys):
    assert _validate() == 0
    out = capsys.readouterr().out
    assert "allowed by the run's own --max-over-limit: 205 rows over the target 200" in out
    assert _validate(as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["problems"] == 0 and data["problem_list"] == []
    assert [(g["gate"], g["limit"], g["count"], g["passed"]) for g in data["gates"]] == [
        ("max-over-limit", "100%", 205, True)]
    from trajectory_compressor.app.gates import parse_gate

    assert _validate(gates=[parse_gate("over_limit", "10")], quiet=True) == 3
    captured = capsys.readouterr()
    assert "gate failed: " in captured.err and captured.out == ""


def test_validate_lists_each_row_over_the_target_in_its_json(flagged, capsys):
    assert _validate(as_json=True) == 1
    data = json.loads(capsys.readouterr().out)
    assert len(data["problem_list"]) == 205 and data["problems"] == 205
    assert "gates" not in data
    assert _validate(as_json=True, allow_over_limit=True) == 0
    assert json.loads(capsys.readouterr().out)["problem_list"] == []
    assert _validate() == 1
    text = capsys.readouterr().out.splitlines()
    assert len(text) == 206 and text[-1].startswith("205 rows checked, 205 problems: ")


def test_an_empty_output_of_a_run_that_wrote_rows_is_one_listed_problem(flagged, capsys):
    (flagged / "out.jsonl").write_text("")
    assert _validate(as_json=True) == 1
    data = json.loads(capsys.readouterr().out)
    assert [p["kind"] for p in data["problem_list"]].count("empty") == 1


def test_recorded_gates_skip_damaged_entries_and_non_objects():
    recorded = commands._recorded_gates
    assert recorded({}) == [] and recorded({"gates": ["over_limit"]}) == []
    gates = recorded({"gates": {"over_limit": "5%", "failed": "lots", "rejected": 3}})
    assert [g.what for g in gates] == ["over_limit"]


def test_one_row_is_100_percent_and_a_folder_run_shows_its_output_folder(here, capsys):
    _write(here / "one.jsonl", _rows(1))
    commands.compress_input("one.jsonl", "one_out.jsonl", CONFIG, RunOptions(quiet=False))
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[-1] for line in lines if line.endswith("%")) == [
        "0.0%", "0.0%", "100.0%"]  # of one row
    (here / "in").mkdir()
    _write(here / "in" / "a.jsonl", _rows(1))
    _write(here / "in" / "b.jsonl", _rows(2))
    commands.compress_input("in", "out", CONFIG, RunOptions(quiet=False))
    outputs = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("  output ")]
    assert outputs == ["  output           out"]


def test_the_config_share_is_a_gate_when_no_flag_replaces_it(here, capsys):
    src = _write(here / "in.jsonl", _rows(2))
    shared = CONFIG.replace(max_fallback_share="50%")
    assert commands.compress_input(str(src), "out.jsonl", shared, RunOptions()) == 0
    from trajectory_compressor.app.gates import parse_gate

    flag = [parse_gate("fallback_share", "0")]
    assert commands.compress_input(str(src), "o2.jsonl", shared, RunOptions(),
                                   gates=flag) == 0
    assert capsys.readouterr().err == ""
