"""Distill (§18) round 2: `safe` and `all` against `off` and a 50-line baseline.

    .venv/bin/python scripts/bench_distill.py [--runs 3] [--skip-rows 2000 (0: none)]
        [--real /work/realdata/sweagent.jsonl] [--json PATH]

Figures (BENCHMARKS.md "Distill, round 2"), per data set (the terminal-heavy sample
data_samples/terminal_hermes.jsonl, and real agent trajectories when ``--real`` names
them; their text is never written anywhere):

- tool-output tokens saved by `safe`, `all` and `scripts/distill_baseline.py`, in all
  and per output type (terminal: escapes or CRs; file_view: numbered lines; json; other);
  each output's tokens counted alone, before and after;
- reconstruction failures: `safe` rows whose outputs do not read back (`verify_turns`),
  and outputs where the baseline's "what the terminal showed" (ANSI stripped, last CR
  segment) is not what a terminal showed (`terminal_view`);
- the share of tool outputs and of tool turns `safe` leaves as they are (the early
  exit), and in-process CPU of counting the tool turns (`off`) against distilling them
  and counting the result (`safe` as the CLI counts it, baseline);
- the CLI's skip path (every row under the target), `off` against `safe`, runs
  interleaved, CPU seconds of the process: on bench.py's plain rows, the terminal sample
  and the real set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
from distill_baseline import baseline_outputs, shown_by_baseline  # noqa: E402

from trajectory_compressor.core.config import CompressionConfig  # noqa: E402
from trajectory_compressor.core.distill import RowMemory, distill_output  # noqa: E402
from trajectory_compressor.core.distill_row import (  # noqa: E402
    distill_turns,
    tool_outputs,
    verify_turns,
)
from trajectory_compressor.core.terminal_view import terminal_view  # noqa: E402
from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402
from trajectory_compressor.dialects import detect  # noqa: E402

SAMPLE = ROOT / "data_samples" / "terminal_hermes.jsonl"
CLI = [sys.executable, "-m", "trajectory_compressor"]
_NUMBERED = re.compile(r"^ *\d+(?::|\t)", re.MULTILINE)
METHODS = ("safe", "all", "baseline")


def tool_texts(path: Path) -> list[list[str | None]]:
    """Each row's turn texts, None for a turn that is no tool turn."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    dialect = detect(rows[:5], CompressionConfig())
    return [[t["value"] if t["from"] == "tool" and isinstance(t.get("value"), str) else None
             for t in dialect.turns(row)] for row in rows]


def kind(output: str) -> str:
    if "\x1b" in output or "\r" in output.replace("\r\n", ""):
        return "terminal"
    lines = output.count("\n") + 1
    if lines >= 3 and len(_NUMBERED.findall(output)) * 2 >= lines:
        return "file_view"
    if output.lstrip()[:1] in ("{", "["):
        return "json"
    return "other"


def measure(counter: TokenCounter, rows: list[list[str | None]]) -> dict[str, Any]:
    before: dict[str, int] = {}
    after: dict[str, dict[str, int]] = {m: {} for m in METHODS}
    failures = invented = outputs_total = untouched = turns_total = turns_untouched = 0
    cpu = {"off": 0.0, "safe": 0.0, "baseline": 0.0}
    by_rule: dict[str, dict[str, int]] = {"safe": {}, "all": {}}
    # One fresh counter per method for the whole set, as a CLI run has one: its memo and
    # the tiles' one-off check (`TokenCounter.count_pairs`) are paid once.
    fresh = {method: TokenCounter.load() for method in cpu}
    for texts in rows:
        originals = tool_outputs(texts)
        kinds = [kind(o) for o in originals]
        for k, n in zip(kinds, counter.count_many(originals), strict=True):
            before[k] = before.get(k, 0) + n
        for method in METHODS:
            if method == "baseline":
                done = baseline_outputs(originals)
            else:
                out, stats = distill_turns(texts, method, counter.count_many)
                for rule, saving in stats.rules.items():
                    by_rule[method][rule] = by_rule[method].get(rule, 0) \
                        + saving.tokens_before - saving.tokens_after
                done = tool_outputs(out)
                if method == "safe":
                    failures += verify_turns(texts, out) is not None
                    pairs = [(a, b) for a, b in zip(texts, out, strict=True) if a is not None]
                    turns_total += len(pairs)
                    turns_untouched += sum(a == b for a, b in pairs)
            for k, n in zip(kinds, counter.count_many(done), strict=True):
                after[method][k] = after[method].get(k, 0) + n
        invented += sum(shown_by_baseline(o) != terminal_view(o) for o in originals)
        memory = RowMemory()
        for o in originals:
            outputs_total += 1
            untouched += not distill_output(o, "safe", memory)
        # In-process CPU of the skip path's extra work, each with a fresh count memo.
        turns = [t for t in texts if t is not None]
        for method, counter_of in fresh.items():
            start = time.process_time()
            if method == "safe":
                out, _ = distill_turns(texts, "safe", counter_of.count_many,
                                       count_pairs=counter_of.count_pairs)
                counter_of.count_many([t for t in out if t is not None])
            elif method == "baseline":
                counter_of.count_many(turns)
                counter_of.count_many(baseline_outputs(originals))
            else:
                counter_of.count_many(turns)
            cpu[method] += time.process_time() - start
    total = sum(before.values())
    result: dict[str, Any] = {"rows": len(rows), "tool_outputs": outputs_total,
                              "tool_tokens": total, "tokens_by_type": before}
    for method in METHODS:
        saved = {k: before[k] - after[method].get(k, 0) for k in before}
        result[method] = {
            "saved": sum(saved.values()),
            "share": round(sum(saved.values()) / max(total, 1), 4),
            "share_by_type": {k: round(saved[k] / max(before[k], 1), 4) for k in sorted(before)}}
    for method, rules in by_rule.items():  # turn tokens (Hermes wrapper included)
        result[method]["turn_tokens_saved_by_rule"] = dict(sorted(rules.items()))
    result["safe"]["rows_not_reading_back"] = failures
    result["baseline"]["outputs_shown_wrong"] = invented
    # The early exit: outputs no rule changed, and tool turns written as they came.
    result["safe"]["outputs_left_as_they_are"] = round(untouched / max(outputs_total, 1), 4)
    result["safe"]["tool_turns_left_as_they_are"] = round(
        turns_untouched / max(turns_total, 1), 4)
    result["in_process_cpu_vs_off"] = {m: round(cpu[m] / cpu["off"], 3) for m in cpu}
    return result


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
    parser.add_argument("--skip-rows", type=int, default=2000,
                        help="bench.py's plain rows for the skip path (0: none)")
    parser.add_argument("--real", type=Path, help="real trajectories (any dialect)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    counter = TokenCounter.load()
    results: dict[str, Any] = {"load_average": os.getloadavg()}
    sets = {"terminal_sample": SAMPLE, **({"real": args.real} if args.real else {})}
    for name, path in sets.items():
        results[name] = measure(counter, tool_texts(path))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.skip_rows:
            plain = write_jsonl(work / "skip.jsonl", unique_rows(args.skip_rows, 1))
            results["skip_plain"] = skip_path(work, plain, args.runs, "plain")
        for name, path in sets.items():
            results[f"skip_{name}"] = skip_path(work, path, args.runs, name)
    results["load_average_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
