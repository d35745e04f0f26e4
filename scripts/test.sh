#!/usr/bin/env bash
# Set everything up and run the whole test suite: ruff, mypy, pytest (README command b).
# It installs the 'local' extra: the tests run the real llama.cpp server (the first
# install compiles llama.cpp, about 6-7 minutes on two cores); and the 'ray' extra: the
# Ray engine's tests run on a local Ray with 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,local,ray
echo "== chromium (the HTML report's browser tests; Debian's package)"
command -v chromium || (echo "installing chromium: apt-get install chromium" &&
                        apt-get update -qq && apt-get install -y -qq chromium)
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy trajectory_compressor
echo "== pytest"
.venv/bin/python -m pytest -q "$@"
