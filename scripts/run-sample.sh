#!/usr/bin/env bash
# Set everything up and compress the bundled sample data with a real LLM running on this
# machine: llama.cpp serving SmolLM2-135M (README command a). The first run installs the
# 'local' extra, which compiles llama.cpp (about 6-7 minutes on two cores).
#
# A seeded 30% sample of the rows keeps the run to a few minutes on two cores (10-15 s
# per summary). Arguments go to `compress` and win: --sample-percent 100 for every row,
# --summarizer extractive for an instant run without the llama.cpp build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=dev,local
defaults=(--summarizer local --sample-percent 30)
case " $* " in
  *" --summarizer extractive "* | *" --summarizer=extractive "*)
    extras=dev
    defaults=()
    ;;
esac
bash scripts/setup.sh "$extras"
.venv/bin/trajectory-compressor compress data_samples/trajectories.jsonl \
  ${defaults[@]+"${defaults[@]}"} "$@"
output=data_samples/trajectories_compressed.jsonl
case " $* " in *" -o "* | *" --output"*) exit 0 ;; esac
# The same run on the samples of the other dialects (LLaMA-Factory ShareGPT as a .json
# array, OpenAI messages, LLaMA-Factory messages), each written in its own spelling.
for sample in llamafactory_sharegpt.json openai_messages.jsonl llamafactory_messages.jsonl; do
  echo
  echo "== data_samples/$sample"
  .venv/bin/trajectory-compressor compress "data_samples/$sample" --overwrite --quiet \
    ${defaults[@]+"${defaults[@]}"} "$@"
  .venv/bin/trajectory-compressor validate "data_samples/${sample%.*}_compressed.${sample##*.}"
done
# Show one summary turn of the output, so the result can be seen without opening it.
.venv/bin/python - "$output" <<'PY'
import json, sys, textwrap
for line in open(sys.argv[1], encoding="utf-8"):
    row = json.loads(line)
    source = row.get("compression_metrics", {}).get("summary_source")
    if source in ("llm", "cache", "extractive"):
        text = next(t["value"] for t in row["conversations"]
                    if t["value"].startswith("[CONTEXT SUMMARY]:"))
        print(f"\nthe summary turn of row {row.get('id')!r} ({source}):")
        print(textwrap.indent(textwrap.fill(text[:600], 86), "  "))
        break
PY
