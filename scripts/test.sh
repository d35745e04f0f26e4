#!/usr/bin/env bash
# Set everything up and run the whole test suite: ruff, mypy, pytest (README command b).
# It installs the 'docs' extra (the manual is built with mkdocs --strict and its examples
# run: tests/test_docs.py), the 'local' extra: the tests run the real llama.cpp server (the first
# install compiles llama.cpp, about 6-7 minutes on two cores); and the 'ray' extra: the
# Ray engine's tests run on a local Ray with 2 CPUs. pytest runs on several workers
# (pytest-xdist; TC_TEST_WORKERS, default 4, or 2 with --quick), prints the 25 slowest
# tests at the end, then its wall time and the load average.
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
  bash scripts/setup.sh dev,docs,local,ray
  # The HTML report's browser tests drive Debian's chromium. This script never installs a
  # system package: without chromium on PATH those tests skip, saying so (install it with
  # `apt-get install chromium` to run them; .ci/run installs it, and there they must run).
  command -v chromium >/dev/null ||
    echo "== no chromium on PATH: the browser tests will be skipped (apt-get install chromium)"
fi
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy trajectory_compressor
# Workers: the slow tests mostly wait (a process starting, a rate limit, Ray, llama.cpp),
# so more workers than cores overlap those waits with the others' work; each worker
# takes the longest test left first (tests/schedule.py; --no-loadscope-reorder keeps that
# order). A file whose tests share a module-scoped fixture stays on one worker.
workers=(--dist loadgroup --no-loadscope-reorder)
if [ "$quick" = 1 ]; then
  echo "== pytest (quick tier)"
  pytest_args=(-m quick -n "${TC_TEST_WORKERS:-2}" "${workers[@]}")
else
  echo "== pytest"
  pytest_args=(-n "${TC_TEST_WORKERS:-4}" "${workers[@]}")
fi
# Python keeps the bytecode it compiles (__pycache__, ignored by git): each worker and each
# CLI the tests start would otherwise compile the tests and the package again (an
# environment that sets PYTHONDONTWRITEBYTECODE doubles the collection time).
unset PYTHONDONTWRITEBYTECODE
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$SECONDS
status=0
.venv/bin/python -m pytest -q --durations=25 "${pytest_args[@]}" ${args[@]+"${args[@]}"} ||
  status=$?
echo "== pytest took $((SECONDS - start)) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
