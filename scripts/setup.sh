#!/usr/bin/env bash
# Create .venv and install the package with the given extras; idempotent and quick when
# nothing changed. Usage: scripts/setup.sh [EXTRAS]   (default: dev)
#
# It says what it installs, shows the elapsed time every 30 s while pip works (the
# 'local' extra compiles llama.cpp: about 7 minutes on two cores the first time; pip
# keeps the wheel for later installs), and on failure prints the log's tail.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $("$python" --version 2>&1)" >&2
  "$python" -m venv .venv
fi
stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
  log=.venv/setup.log
  echo "setup: installing trajectory-compressor with extras [${extras}] into .venv" >&2
  case ",$extras," in
    *,local,*) echo "setup: the 'local' extra builds llama-cpp-python from source the" \
                    "first time (about 7 minutes on two cores; later installs reuse it)" >&2 ;;
  esac
  echo "setup: the full log is in $log" >&2
  # A llama.cpp built for the build machine's own CPU (-march=native, its default) has
  # died with SIGILL on machines whose CPU advertises instructions the sandbox refuses
  # (AVX-512/AMX). A portable build runs everywhere; a CMAKE_ARGS of your own wins.
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
  start=$SECONDS
  { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip &&
    .venv/bin/python -m pip install --disable-pip-version-check -e ".[${extras}]"; } \
    >"$log" 2>&1 &
  pip_pid=$!
  while kill -0 "$pip_pid" 2>/dev/null; do
    sleep 5
    elapsed=$((SECONDS - start))
    if [ $((elapsed % 30)) -lt 5 ] && [ "$elapsed" -ge 30 ]; then
      last=$(grep -E "^(Collecting|Building|Installing|Successfully)" "$log" | tail -n 1 |
             cut -c1-70)
      echo "setup: ${elapsed}s elapsed${last:+ — $last}" >&2
    fi
  done
  if ! wait "$pip_pid"; then
    tail -n 30 "$log" >&2
    echo "setup failed after $((SECONDS - start))s; the full log is in $log" >&2
    exit 1
  fi
  echo "setup: done in $((SECONDS - start))s" >&2
  touch "$stamp"
fi
