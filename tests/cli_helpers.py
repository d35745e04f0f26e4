"""Running the real CLI: as a subprocess (`run_cli`, `start_cli`), or in this process
(`invoke_cli`) where the test is about what the command does, not about the process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "trajectory_compressor", *args],
                          cwd=cwd or ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


@dataclass
class CliRun:
    """What a test reads from a finished run, as from ``subprocess.CompletedProcess``."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def invoke_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> CliRun:
    """The CLI run in this process (typer's CliRunner) with `run_cli`'s arguments and result:
    the same exit code, stdout and stderr, without starting Python and loading the libraries
    again (about 2 s a run). An exception the CLI lets through exits 1 with its traceback on
    stderr, as the interpreter would print it. The run's working directory is ``cwd`` (the
    repository by default, as in `run_cli`) and ``env`` is set around it. Tests about the
    process itself (signals, kill -9, the entry point, locks between processes) use
    `run_cli` or `start_cli`."""
    from typer.testing import CliRunner

    from trajectory_compressor.app.cli import app

    before = Path.cwd()
    os.chdir(cwd or ROOT)
    try:
        result = CliRunner().invoke(app, list(args), env=env, prog_name="trajectory-compressor")
    finally:
        os.chdir(before)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return CliRun(list(args), result.exit_code, result.stdout, stderr)


def start_cli(*args: str) -> subprocess.Popen:
    """The CLI started in the background (its output piped), for a test to interrupt."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "trajectory_compressor", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def interrupt_when(proc: subprocess.Popen, ready: Callable[[], bool], sig: int,
                   settle: float = 0.0, limit: float = 240) -> str:
    """Send ``sig`` to ``proc`` once ``ready()`` holds (and ``settle`` seconds more);
    return its stderr after it ends."""
    deadline = time.monotonic() + limit
    while not ready():
        assert proc.poll() is None, f"the run ended too soon: {proc.stderr.read()}"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(settle)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return err


def read_jsonl(path: Path) -> list:
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
