"""Tests written to kill the mutants of `app/cli.py` that no in-process test reached
(issue 40, item 8): how each kind of error ends a command, the parsing of `--targets`
and the batch prices, `--version`, the config's warnings and the summarizer `--help`
names. The expected texts are written out by hand from SPEC §7's exit codes.
"""

from __future__ import annotations

import importlib.metadata
import sys

import click
import pytest
import typer

from trajectory_compressor.app import cli
from trajectory_compressor.core.errors import CompressorError, ConfigError, InputError
from trajectory_compressor.engine.writer import StrictStop
from trajectory_compressor.inspect.analyze import Prices


def _ends(exc: BaseException, capsys, debug: bool = False) -> tuple[int, str]:
    with pytest.raises((typer.Exit, click.exceptions.Exit)) as ended:
        cli._fail(exc, debug)
    return ended.value.exit_code, capsys.readouterr().err


def test_each_kind_of_error_gets_its_exit_code_and_one_sentence(capsys):
    assert _ends(ConfigError("no such key"), capsys) == (2, "error: no such key\n")
    assert _ends(InputError("bad row"), capsys) == (2, "error: bad row\n")
    assert _ends(StrictStop("stopped at row 3"), capsys) == (1, "error: stopped at row 3\n")
    assert _ends(CompressorError("the lock is held"), capsys) == (4, "error: the lock is held\n")
    assert _ends(ConfigError(""), capsys) == (2, "error: ConfigError\n")
    assert _ends(FileNotFoundError(2, "No such file or directory", "/data/in.jsonl"),
                 capsys) == (4, "error: I/O error: /data/in.jsonl: No such file or "
                             "directory; the run stopped\n")
    assert _ends(OSError(28, "No space left on device"), capsys) == (
        4, "error: I/O error: No space left on device; the run stopped\n")
    assert _ends(OSError("odd"), capsys) == (4, "error: I/O error: odd; the run stopped\n")


def test_an_internal_error_is_one_line_of_at_most_300_characters_of_its_text(capsys):
    text = "first  line\n second" + " x" * 400
    code, err = _ends(ValueError(text), capsys)
    shown = ("first line second" + " x" * 400)[:300]
    assert (code, err) == (4, f"error: internal error (ValueError: {shown}); the run "
                              "stopped; --debug shows the traceback\n")
    try:
        raise ValueError("boom")
    except ValueError as exc:
        code, err = _ends(exc, capsys, debug=True)
    assert code == 4
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith("error: internal error (ValueError: boom); the run stopped\n")


def test_an_exit_or_a_click_error_passes_through_unchanged(capsys):
    for exc in (typer.Exit(3), click.exceptions.Exit(5), click.UsageError("no"),
                click.exceptions.Abort()):
        with pytest.raises(type(exc)) as raised:
            cli._fail(exc, False)
        assert raised.value is exc
    assert capsys.readouterr().err == ""


def test_targets_are_positive_whole_numbers_once_each():
    assert cli._parse_targets("4_000, 8000,4000 ") == [4000, 8000]
    assert cli._parse_targets("1") == [1]
    for bad in ("0", "-5", "4k", "1,,2"):
        with pytest.raises(ConfigError) as caught:
            cli._parse_targets(bad)
        assert str(caught.value) == ("--targets takes positive whole numbers separated by "
                                     f"commas, got {bad!r}")


def test_prices_are_none_unless_given_and_never_negative():
    assert cli._prices(None, None) is None
    assert cli._prices(0, None) == Prices(0.0, 0.0)
    assert cli._prices(None, 0.5) == Prices(0.0, 0.5)
    assert cli._prices(0.25, 2) == Prices(0.25, 2.0)
    with pytest.raises(ConfigError, match=r"^--price-in must be >= 0, got -1$"):
        cli._prices(-1, 2)
    with pytest.raises(ConfigError, match=r"^--price-out must be >= 0, got -0.5$"):
        cli._prices(None, -0.5)


def test_version_prints_the_installed_one_or_says_how_to_install(capsys, monkeypatch):
    cli._print_version(False)
    assert capsys.readouterr().out == ""
    with pytest.raises((typer.Exit, click.exceptions.Exit)):
        cli._print_version(True)
    installed = importlib.metadata.version("trajectory-compressor")
    assert capsys.readouterr().out == f"trajectory-compressor {installed}\n"

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises((typer.Exit, click.exceptions.Exit)):
        cli._print_version(True)
    assert capsys.readouterr().out == ("trajectory-compressor (not installed: run bash "
                                       "scripts/setup.sh in the clone)\n")


def test_main_runs_the_app_under_its_name(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["anything", "--help"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 0
    assert "Usage: trajectory-compressor [OPTIONS] COMMAND" in capsys.readouterr().out


def test_a_config_with_settings_that_do_nothing_warns_once_each(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("processing:\n  num_workers: 8\n")
    config = cli._load_config(path)
    assert config.num_workers == 8
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "num_workers" in err[0]


def test_the_summarizer_help_names_the_users_config_or_why_it_is_unknown(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "trajectory-compressor"
    folder.mkdir()
    (folder / "config.yaml").write_text("summarization:\n  backend: extractive\n")
    text = cli._summarizer_here_and_now()
    assert text.startswith("extractive (summarization.backend in ")
    assert str(folder / "config.yaml") in text
    (folder / "config.yaml").write_text("nonsense: [\n")
    assert cli._summarizer_here_and_now().startswith("unknown (")


COMMANDS = ("compress", "analyze", "report", "validate")


def test_without_flags_every_command_reads_the_users_config_and_shows_no_traceback(
        tmp_path, monkeypatch):
    from tests.cli_helpers import invoke_cli

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "trajectory-compressor").mkdir()
    user = tmp_path / "trajectory-compressor" / "config.yaml"
    user.write_text("model:\n  name: not ours\n")
    missing = str(tmp_path / "missing.jsonl")
    for name in COMMANDS:
        run = invoke_cli(name, missing, cwd=tmp_path)
        assert run.returncode == 2, (name, run.stderr)
        assert run.stderr.startswith("error: ") and "Traceback" not in run.stderr, name
        # report looks for the run's files first
        assert (str(user) in run.stderr) == (name != "report"), name
        quiet = invoke_cli(name, missing, "--no-config", cwd=tmp_path)
        assert quiet.returncode == 2, (name, quiet.stderr)
        assert str(user) not in quiet.stderr and "Traceback" not in quiet.stderr, name
