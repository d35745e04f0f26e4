#!/usr/bin/env bash
# Set everything up and run the whole test suite: ruff, mypy, pytest (README command b).
# It installs the 'local' extra: the tests run the real llama.cpp server (the first
# install compiles llama.cpp, about 6-7 minutes on two cores); and the 'ray' extra: the
# Ray engine's tests run on a local Ray with 2 CPUs. pytest runs on two workers
# (pytest-xdist) and prints the 25 slowest tests at the end.
#
# --quick: only the quick tier (`pytest -m quick`: no process, Ray, llama.cpp or browser;
# tests/conftest.py sorts the tests), with the dev extra only: the loop to run before each
# commit. CI runs everything. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
args=()
for arg in "$@"; do
  if [ "$arg" = "--quick" ]; then quick=1; else args+=("$arg"); fi
done
if [ "$quick" = 1 ]; then
  bash scripts/setup.sh dev
else
  bash scripts/setup.sh dev,local,ray
  echo "== chromium (the HTML report's browser tests; Debian's package)"
  command -v chromium || (echo "installing chromium: apt-get install chromium" &&
                          apt-get update -qq && apt-get install -y -qq chromium)
fi
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy trajectory_compressor
if [ "$quick" = 1 ]; then
  echo "== pytest (quick tier)"
  .venv/bin/python -m pytest -q -m quick --durations=10 ${args[@]+"${args[@]}"}
else
  echo "== pytest"
  .venv/bin/python -m pytest -q -n 2 --dist loadgroup --durations=25 ${args[@]+"${args[@]}"}
fi
