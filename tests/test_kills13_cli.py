"""Tests written to kill the mutants of `app/cli.py` left by the coverage-guided pass
(issue 40, item 8): what `compress` itself checks before it starts (the summarizer it
settles on and announces, the flags that go only with another summarizer or with a
finished run), the defaults of `analyze`, `report` and `validate`, the app's own typer
settings, and Ctrl-C. Each runs the real CLI in this process on three hand rows.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.cli_helpers import invoke_cli
from tests.test_kills13_commands import _rows
from trajectory_compressor.app import commands

ROWS = _rows(3)  # the hand rows of the commands kill file


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A folder with the hand rows, no user config and no key for the default endpoint."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return tmp_path


TARGET = ("--target-max-tokens", "200", "--summary-target-tokens", "40")


def _compress(home, *flags: str):
    return invoke_cli("compress", "in.jsonl", "-o", "out.jsonl", *TARGET, *flags, cwd=home)


def test_auto_is_settled_and_announced_with_the_other_choices_unless_quiet(home):
    run = _compress(home)
    assert run.returncode in (0, 1), run.stderr
    announced = [line for line in run.stderr.splitlines() if line.startswith("summarizer: ")]
    assert len(announced) == 1, run.stderr
    assert announced[0].startswith("summarizer: extractive (")
    assert announced[0].endswith("); choose another with --summarizer local|openai or "
                                 "--base-url URL")
    metrics = json.loads((home / "out_metrics.json").read_text())
    assert "extractive" in json.dumps(metrics.get("settings", metrics))
    quiet = invoke_cli("compress", "in.jsonl", "-o", "q.jsonl", *TARGET, "--quiet", cwd=home)
    assert quiet.returncode in (0, 1), quiet.stderr
    assert "summarizer: " not in quiet.stderr


def test_a_base_url_with_the_local_summarizer_is_a_config_error(home):
    run = _compress(home, "--summarizer", "local", "--base-url", "http://127.0.0.1:9/v1")
    assert run.returncode == 2
    assert run.stderr == ("error: --base-url names endpoints for --summarizer openai (or "
                          "batch); --summarizer local starts its own server: give one or the "
                          "other\n")
    assert not (home / "out.jsonl").exists()


GATES_ERROR = ("error: --max-over-limit/--max-failed/--max-rejected/--max-fallback-share gate "
               "a finished run: not --dry-run; for --summarizer batch, give them to report "
               "OUTPUT after phase 2\n")


@pytest.mark.parametrize("flags", [
    ("--dry-run",),
    ("--summarizer", "batch", "--batch-dir", "b"),
    ("--summarizer", "batch"),
    ("--batch-dir", "b"),
])
def test_gates_are_refused_where_no_run_finishes(home, flags):
    run = _compress(home, "--max-over-limit", "5", *flags)
    assert (run.returncode, run.stderr.splitlines()[-1]) == (2, GATES_ERROR.strip())
    assert not (home / "b").exists() and not (home / "out.jsonl").exists()


def test_gates_are_taken_by_a_run_that_finishes(home):
    run = _compress(home, "--summarizer", "extractive", "--max-over-limit", "100%")
    assert run.returncode == 0, run.stderr
    assert len((home / "out.jsonl").read_text().splitlines()) == len(ROWS)


def test_the_batch_summarizer_without_its_folder_asks_for_one(home):
    run = _compress(home, "--summarizer", "batch")
    assert run.returncode == 2
    assert run.stderr.startswith("error: --summarizer batch needs --batch-dir DIR")
    assert not (home / "out.jsonl").exists()


def test_a_batch_folder_alone_makes_a_batch_run(home):
    run = _compress(home, "--summarizer", "extractive", "--batch-dir", "b")
    assert run.returncode in (0, 2), run.stderr
    # the extractive summarizer is not asked: the folder calls for phase 1 of a batch run
    assert (home / "b").is_dir() or "batch" in run.stderr
    assert not (home / "out.jsonl").exists()


@pytest.mark.parametrize("flags", [("--price-in", "1"), ("--price-out", "2"),
                                   ("--price-in", "1", "--price-out", "2")])
def test_prices_without_a_batch_run_are_a_config_error(home, flags):
    run = _compress(home, "--summarizer", "extractive", *flags)
    assert (run.returncode, run.stderr) == (
        2, "error: --price-in/--price-out go with --summarizer batch (or analyze)\n")
    assert not (home / "out.jsonl").exists()


def test_a_ray_address_is_set_where_ray_reads_it(home, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "before")
    run = _compress(home, "--summarizer", "extractive", "--ray-address", "10.0.0.1:6379")
    assert run.returncode == 0, run.stderr
    assert os.environ["RAY_ADDRESS"] == "10.0.0.1:6379"


def test_ctrl_c_says_interrupted_on_stderr_and_exits_130(home, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "compress_input", interrupted)
    run = _compress(home, "--summarizer", "extractive")
    assert (run.returncode, run.stdout) == (130, "")
    assert run.stderr.splitlines()[-1].startswith("interrupted; nothing was committed")
    assert "Traceback" not in run.stderr


@pytest.fixture
def finished(home):
    run = _compress(home, "--summarizer", "extractive")
    assert run.returncode == 0, run.stderr
    return home


def test_report_and_validate_print_text_unless_asked_for_json(finished):
    for command in ("report", "validate"):
        run = invoke_cli(command, "out.jsonl", "--allow-over-limit"
                         if command == "validate" else "--limit=50", cwd=finished)
        assert run.returncode == 0, (command, run.stderr)
        assert run.stdout.strip() and not run.stdout.lstrip().startswith("{"), command


def test_an_existing_file_not_written_by_the_tool_is_kept_without_overwrite(finished):
    theirs = finished / "theirs.txt"
    for args in (("analyze", "in.jsonl", "--json", str(theirs)),
                 ("report", "out.jsonl", "--html", str(theirs))):
        theirs.write_text("a dataset\n")
        run = invoke_cli(*args, cwd=finished)
        assert run.returncode == 2, (args, run.stderr)
        assert str(theirs) in run.stderr and "--overwrite" in run.stderr
        assert theirs.read_text() == "a dataset\n"
        again = invoke_cli(*args, "--overwrite", cwd=finished)
        assert again.returncode == 0, (args, again.stderr)
        assert theirs.read_text() != "a dataset\n"


def test_report_of_a_run_without_settings_reads_the_users_config(finished):
    (finished / "out_metrics.json").unlink()
    user = finished / "xdg" / "trajectory-compressor" / "config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("compression:\n  target_max_tokens: 90000\n")
    shown = invoke_cli("report", "out.jsonl", "--show", "0", cwd=finished)
    plain = invoke_cli("report", "out.jsonl", "--show", "0", "--no-config", cwd=finished)
    assert shown.returncode == 0 and plain.returncode == 0, (shown.stderr, plain.stderr)
    assert "90,000" in shown.stdout or "90000" in shown.stdout, shown.stdout
    assert "90,000" not in plain.stdout and "90000" not in plain.stdout


def test_no_arguments_prints_the_whole_help_without_completion_options(home):
    run = invoke_cli(cwd=home)
    assert "Compress long multi-turn agent trajectories" in run.stdout
    for name in ("compress", "analyze", "report", "validate"):
        assert name in run.stdout
    assert "--install-completion" not in run.stdout
    assert "--install-completion" not in invoke_cli("--help", cwd=home).stdout


def test_report_lists_50_rows_and_its_page_the_200_worst_and_validate_fails_them(home):
    """205 rows whose protected system turn alone is over the target: all flagged."""
    rule = "Rules of the house. " * 120
    rows = [{"id": f"big-{i}", "messages": [{"role": "system", "content": rule},
                                            {"role": "user", "content": f"task {i}"},
                                            {"role": "assistant", "content": "ok"}]}
            for i in range(205)]
    (home / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _compress(home, "--summarizer", "extractive")
    assert run.returncode == 0, run.stderr
    text = invoke_cli("report", "out.jsonl", cwd=home)
    assert text.returncode == 0, text.stderr
    listed = {word for word in text.stdout.split() if word.startswith("big-")}
    assert len(listed) == 50
    assert "... 155 more (--limit 0 shows all)" in text.stdout
    page = invoke_cli("report", "out.jsonl", "--html", "page.html", cwd=home)
    assert page.returncode == 0, page.stderr
    html = (home / "page.html").read_text()
    assert len({f"big-{i}" for i in range(205) if f"big-{i}<" in html or
                f"big-{i}\"" in html}) == 200
    failed = invoke_cli("validate", "out.jsonl", cwd=home)
    assert failed.returncode == 1, failed.stderr
    assert "205 rows over the target 200" in failed.stdout
    allowed = invoke_cli("validate", "out.jsonl", "--allow-over-limit", cwd=home)
    assert allowed.returncode == 0, allowed.stdout
    assert "allowed by --allow-over-limit: 205 rows over the target 200" in allowed.stdout
