#!/usr/bin/env bash
# Create .venv and install the package with the given extras; idempotent and quick when
# nothing changed. Usage: scripts/setup.sh [EXTRAS]   (default: dev)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
  echo "setting up .venv (extras: ${extras}); the log is in .venv/setup.log" >&2
  log=.venv/setup.log
  if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip &&
         .venv/bin/python -m pip install --disable-pip-version-check -e ".[${extras}]"; } \
       >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup failed; the full log is in $log" >&2
    exit 1
  fi
  touch "$stamp"
fi
