"""Running the real CLI as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "trajectory_compressor", *args],
                          cwd=cwd or ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


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
