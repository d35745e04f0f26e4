#!/usr/bin/env bash
# Set everything up and compress the bundled sample data (README command a).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/trajectory-compressor compress data_samples/trajectories.jsonl \
  --summarizer extractive "$@"
