"""Running the real CLI as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "trajectory_compressor", *args],
                          cwd=cwd or ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def read_jsonl(path: Path) -> list:
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
