#!/usr/bin/env bash
# Set everything up and run the whole test suite: ruff, mypy, pytest (README command b).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy trajectory_compressor
echo "== pytest"
.venv/bin/python -m pytest -q "$@"
