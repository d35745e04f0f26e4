"""The CI flow a new user would script (issue 40): compress -> report --html -> validate on
three files of realistic agent data in three dialects, each command's CPU time (user +
system of the child process) and its ratio to compress; then the same `report` re-planning
"what would fix it" as every report did before compress stored the table; then a second
CI run from a folder holding a training repository's Hydra `configs/default.yaml`.

    PYTHONPATH=. python scripts/bench_ci.py [--source /work/realdata/sweagent.jsonl]
        [--target 16000] [--work /tmp/bench_ci]

The source is OpenAI `messages` rows with tool calls (scripts/convert_sweagent.py writes
such a file from recorded SWE-agent runs); the other two dialects are made from it here:
Hermes ShareGPT (`conversations`, `<tool_call>` blocks) as `.jsonl`, and LLaMA-Factory
ShareGPT (`function_call`/`observation`, a `system` column) as a `.json` array. Nothing of
the data is printed or kept beside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trajectory_compressor.dialects.openai import openai_to_sharegpt  # noqa: E402

HYDRA = ("defaults:\n  - _self_\nmodel:\n  name: llama-3-8b\n  lr: 2.0e-5\n"
         "trainer:\n  max_steps: 1000\n")
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def hermes_rows(rows: list[dict]) -> list[dict]:
    return [{"id": r.get("id"), "conversations": [{"from": t["from"], "value": t["value"]}
                                                   for t in openai_to_sharegpt(r["messages"])]}
            for r in rows]


def llamafactory_rows(rows: list[dict]) -> list[dict]:
    """LLaMA-Factory ShareGPT: a call turn holds the call's JSON (one, or a list), its
    result is an observation; the system prompt goes to its column."""
    out = []
    for row in hermes_rows(rows):
        system, turns = None, []
        for t in row["conversations"]:
            if t["from"] == "system":
                system = t["value"]
                continue
            calls = _CALL.findall(t["value"]) if t["from"] == "gpt" else []
            if calls:
                parsed = [json.loads(c) for c in calls]
                turns.append({"from": "function_call",
                              "value": json.dumps(parsed[0] if len(parsed) == 1 else parsed)})
            elif t["from"] == "tool":
                turns.append({"from": "observation", "value": t["value"]})
            else:
                turns.append({"from": t["from"], "value": t["value"]})
        out.append({"id": row["id"], "system": system, "conversations": turns})
    return out


def cpu(cmd: list[str], cwd: Path) -> tuple[float, int]:
    """The command's CPU seconds (user + system, its children's included) and exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
            proc.returncode)


def tc(*args: str) -> list[str]:
    return [sys.executable, "-m", "trajectory_compressor", *args]


def ci_run(work: Path, files: list[Path], target: int) -> list[dict]:
    results = []
    for src in files:
        stem, ext = src.name.rsplit(".", 1)
        out = work / f"{stem}_compressed.{ext}"
        t_compress, c1 = cpu(tc("compress", str(src), "--target-max-tokens", str(target),
                                "--quiet", "--overwrite", "--no-cache"), work)
        t_html, c2 = cpu(tc("report", str(out), "--html", str(work / f"{stem}.html")), work)
        t_report, c3 = cpu(tc("report", str(out)), work)
        t_validate, c4 = cpu(tc("validate", str(out), "--allow-over-limit", "-q"), work)
        closing = subprocess.run(tc("validate", str(out)), cwd=work, capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        metrics_path = work / f"{stem}_compressed_metrics.json"
        metrics = json.loads(metrics_path.read_text())
        # The report as before this change: the stored table removed, re-planned.
        stored = metrics.pop("remedies", None)
        metrics_path.write_text(json.dumps(metrics))
        t_old, _ = cpu(tc("report", str(out)), work)
        if stored is not None:
            metrics["remedies"] = stored
        metrics_path.write_text(json.dumps(metrics))
        results.append({
            "file": src.name, "rows": metrics["summary"]["total_trajectories"],
            "over": metrics["summary"]["trajectories_still_over_limit"],
            "compress": t_compress, "table": (stored or {}).get("cpu_seconds"),
            "report": t_report, "html": t_html, "validate": t_validate, "old_report": t_old,
            "codes": (c1, c2, c3, c4, closing.returncode),
            "closing": closing.stdout.strip().splitlines()[-1].split(" (target")[0]})
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", default="/work/realdata/sweagent.jsonl")
    parser.add_argument("--target", type=int, default=16000)
    parser.add_argument("--work", default="/tmp/bench_ci")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = [json.loads(line) for line in Path(args.source).read_text().splitlines() if line]
    files = [work / "agent_openai.jsonl", work / "agent_hermes.jsonl",
             work / "agent_llamafactory.json"]
    files[0].write_text("".join(json.dumps(r) + "\n" for r in rows))
    files[1].write_text("".join(json.dumps(r) + "\n" for r in hermes_rows(rows)))
    files[2].write_text(json.dumps(llamafactory_rows(rows)))
    print("| file | rows | over | compress | of it: table | report --html | report | "
          "validate | report before (re-plan) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in ci_run(work, files, args.target):
        c = r["compress"]
        print(f"| `{r['file']}` | {r['rows']} | {r['over']} | {c:.1f} s | "
              f"{r['table'] or 0:.1f} s | {r['html']:.1f} s ({r['html'] / c:.2f}×) | "
              f"{r['report']:.1f} s ({r['report'] / c:.2f}×) | "
              f"{r['validate']:.1f} s ({r['validate'] / c:.2f}×) | "
              f"{r['old_report']:.1f} s ({r['old_report'] / c:.2f}×) |")
        print(f"  exit codes {r['codes']}; validate: {r['closing']}", file=sys.stderr)
    # A second CI run from a training repository's folder: its Hydra config is not read.
    repo = work / "repo"
    (repo / "configs").mkdir(parents=True)
    (repo / "configs" / "default.yaml").write_text(HYDRA)
    shutil.copy(files[0], repo / files[0].name)
    t, code = cpu(tc("compress", files[0].name, "--target-max-tokens", str(args.target),
                     "--quiet", "--no-cache"), repo)
    print(f"\nsecond CI run beside a Hydra configs/default.yaml: compress exit {code}, "
          f"{t:.1f} s CPU")


if __name__ == "__main__":
    main()
