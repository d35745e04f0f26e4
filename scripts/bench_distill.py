"""Distill (§18) side by side with `--distill off`, on the terminal-heavy sample set.

    .venv/bin/python scripts/bench_distill.py [--runs 3] [--skip-rows 2000] [--json PATH]

Figures (BENCHMARKS.md "Distill"):

- tool-output tokens saved per rule, for `safe` and `all`, over every tool turn of
  data_samples/terminal_hermes.jsonl (made by scripts/make_terminal_samples.py);
- identifier retention of the distilled outputs: the fidelity extractor's items of each
  original output found in its distilled form (a reference resolved to the output it
  names), against the output as a terminal shows it (`core.distill.rendered`) and
  against the raw text (progress-bar states a terminal overwrote count as lost there);
- the CLI with the extractive summarizer at the default target: rows that need a
  summary (= LLM calls with an LLM backend), rows still over, tokens written;
- the skip path: the CLI over rows all under the target, `off` against `safe`, runs
  interleaved, on bench.py's skip rows (little to distill) and on the terminal set
  (every row distilled).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from bench import unique_rows, write_jsonl  # noqa: E402

from trajectory_compressor.core.distill import rendered  # noqa: E402
from trajectory_compressor.core.distill_row import DistillStats, distill_turns  # noqa: E402
from trajectory_compressor.core.fidelity import measure_fidelity  # noqa: E402
from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402

SAMPLE = ROOT / "data_samples" / "terminal_hermes.jsonl"
CLI = [sys.executable, "-m", "trajectory_compressor"]
REFERENCE = "[same output as tool output #"


def content(turn: str) -> str:
    body = turn.split("<tool_response>", 1)[1].rsplit("</tool_response>", 1)[0]
    return str(json.loads(body)["content"])


def retention(original: str, distilled: str) -> tuple[int, int]:
    """(items, kept) of ``original`` in ``distilled``, 20 lines at a time (the extractor
    keeps at most 200 items per call)."""
    lines = original.split("\n")
    items = kept = 0
    for start in range(0, len(lines), 20):
        f = measure_fidelity(["\n".join(lines[start:start + 20])], [], distilled)
        items += f.items
        kept += f.kept
    return items, kept


def rules_and_retention(counter: TokenCounter) -> dict[str, Any]:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    out: dict[str, Any] = {}
    tool_tokens = 0
    for level in ("safe", "all"):
        total = DistillStats(level)
        shown = [0, 0]
        raw = [0, 0]
        for row in rows:
            texts = [t["value"] for t in row["conversations"] if t["from"] == "tool"]
            if level == "safe":
                tool_tokens += sum(counter.count_many(texts))
            distilled, stats = distill_turns(texts, level, counter.count_many)
            total.add(stats)
            outputs: list[str] = []
            for before, after in zip(texts, distilled, strict=True):
                kept = content(after or "")
                if kept.startswith(REFERENCE):
                    kept = outputs[int(kept[len(REFERENCE):].split(" ")[0]) - 1]
                outputs.append(kept)
                for acc, original in ((shown, rendered(content(before))),
                                      (raw, content(before))):
                    items, found = retention(original, kept)
                    acc[0] += items
                    acc[1] += found
        out[level] = {
            "tokens_saved": total.saved,
            "share_of_tool_tokens": round(total.saved / tool_tokens, 4),
            "saved_by_rule": {r: s.tokens_before - s.tokens_after
                              for r, s in sorted(total.rules.items())},
            "retention_vs_shown": round(shown[1] / max(shown[0], 1), 4),
            "retention_vs_raw": round(raw[1] / max(raw[0], 1), 4),
            "items_shown": shown[0],
        }
    out["tool_tokens"] = tool_tokens
    out["rows"] = len(rows)
    return out


def run_cli(args: list[str]) -> float:
    return run_cli_timed(args)[0]


def run_cli_timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process: user + system, every thread)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def cli_runs(work: Path) -> dict[str, Any]:
    out = {}
    for level in ("off", "safe", "all"):
        target = work / f"summaries_{level}.jsonl"
        run_cli(["compress", str(SAMPLE), "-o", str(target), "--summarizer", "extractive",
                 "--distill", level, "--quiet"])
        m = json.loads(target.with_name(f"summaries_{level}_metrics.json").read_text())
        out[level] = {"rows_needing_a_summary": m["summary"]["trajectories_compressed"],
                      "still_over_limit": m["summary"]["trajectories_still_over_limit"],
                      "tokens_planned": m["tokens"]["total_before"],
                      "tokens_written": m["tokens"]["total_after"]}
    return out


def skip_path(work: Path, data: Path, runs: int, name: str) -> dict[str, Any]:
    times: dict[str, list[float]] = {"off": [], "safe": []}
    cpu: dict[str, list[float]] = {"off": [], "safe": []}
    for _ in range(runs):
        for level in times:  # interleaved: the machine's noise hits both alike
            wall, used = run_cli_timed(
                ["compress", str(data), "-o", str(work / f"{name}_{level}.jsonl"),
                 "--target-max-tokens", "1000000", "--summarizer", "extractive",
                 "--distill", level, "--quiet", "--no-cache"])
            times[level].append(wall)
            cpu[level].append(used)
    off, safe = statistics.median(times["off"]), statistics.median(times["safe"])
    off_cpu, safe_cpu = statistics.median(cpu["off"]), statistics.median(cpu["safe"])
    # CPU time is steadier than wall time on a shared machine: under load the two
    # ratios meet; with idle cores the wall ratio is lower (counting overlaps reading).
    return {"off_s": round(off, 3), "safe_s": round(safe, 3),
            "safe_vs_off": round(safe / off, 3),
            "off_cpu_s": round(off_cpu, 3), "safe_cpu_s": round(safe_cpu, 3),
            "safe_vs_off_cpu": round(safe_cpu / off_cpu, 3),
            "walls": {k: [round(t, 3) for t in v] for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-rows", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    counter = TokenCounter.load()
    results: dict[str, Any] = {"load_average": os.getloadavg()}
    results["rules"] = rules_and_retention(counter)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results["cli"] = cli_runs(work)
        plain = write_jsonl(work / "skip.jsonl", unique_rows(args.skip_rows, 1))
        results["skip_plain"] = skip_path(work, plain, args.runs, "plain")
        results["skip_terminal"] = skip_path(work, SAMPLE, args.runs, "terminal")
    results["load_average_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
