"""The Ray engine against the local one on this machine (BENCHMARKS.md "Ray engine").

    PYTHONPATH=. .venv/bin/python scripts/bench_ray.py [--rows 4000] [--files 16]
        [--summaries 1200] [--latency 0.2] [--concurrency 64] [--runs 1]

Each figure is a whole CLI process, the engines alternating in one loop (the machine is
shared). The Ray driver prints a line per finished shard on a non-terminal stderr; the
time of each line gives the pool's steady rate (rows after the first finished shard over
the time to the last one) apart from Ray's fixed cost (start a local instance and the
actors, load a tokenizer in each, shut down): wall time minus rows / steady rate.

- skip:     ``--rows`` rows under the target in ``--files`` files (tokenizing only):
            local vs ray with 1 and 2 actors.
- summary:  ``--summaries`` rows that each need one summary, against the lean loopback
            server (fixed ``--latency``), ``--concurrency`` requests at once in total,
            the same engines; the bound is concurrency / latency.

Results are printed as JSON (and written with --json PATH).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # the data generators and the lean server

ENGINES = {"local": ["--engine", "local"], "ray1": ["--engine", "ray", "--ray-actors", "1"],
           "ray2": ["--engine", "ray", "--ray-actors", "2"]}
SHARD_LINE = re.compile(r"shard (\d+)/(\d+) done: ([\d,]+) rows.*workers' CPU ([\d.]+) s")


def write_files(folder: Path, rows: list[dict[str, Any]], files: int) -> Path:
    folder.mkdir()
    per = -(-len(rows) // files)
    for i in range(files):
        bench.write_jsonl(folder / f"part{i:03d}.jsonl", rows[i * per:(i + 1) * per])
    return folder


def timed_run(args: list[str], cwd: Path) -> dict[str, float]:
    """Wall seconds of one CLI process; its CPU seconds (local: the process's; Ray: the
    actors' while on shards); and, for Ray, its steady rows/s and fixed cost."""
    env = {**os.environ, "PYTHONPATH": str(bench.ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen([*bench.CLI, *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    lines: list[tuple[float, int]] = []
    cpu = 0.0
    for line in proc.stderr:
        found = SHARD_LINE.search(line)
        if found:
            lines.append((time.perf_counter() - start, int(found.group(3).replace(",", ""))))
            cpu = float(found.group(4))
    if proc.wait() not in (0, 1):
        raise RuntimeError(f"CLI failed ({proc.returncode}): {' '.join(args)}")
    wall = time.perf_counter() - start
    if not lines:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    result = {"wall_s": wall, "cpu_s": cpu}
    if len(lines) >= 2:
        (t0, r0), (t1, r1) = lines[0], lines[-1]
        steady = (r1 - r0) / max(t1 - t0, 1e-9)
        result.update(steady_rows_per_s=steady, fixed_s=wall - r1 / steady)
    return result


def compare(work: Path, args: list[str], runs: int) -> dict[str, dict[str, float]]:
    """Each engine on ``args`` (an output per engine and run); medians per figure."""
    case = Path(args[1]).name
    found: dict[str, list[dict[str, float]]] = {name: [] for name in ENGINES}
    for run in range(runs):
        for name, flags in ENGINES.items():
            out = work / f"out_{case}_{name}_{run}"
            found[name].append(timed_run([*args, "-o", str(out), *flags], work))
            print(name, found[name][-1], file=sys.stderr, flush=True)
    return {name: {key: statistics.median(r[key] for r in results)
                   for key in results[0]} for name, results in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--summaries", type=int, default=1200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": bench.machine()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        skip = write_files(work / "skip", bench.unique_rows(args.rows, 2), args.files)
        found = compare(work, ["compress", str(skip), "--summarizer", "extractive"],
                        args.runs)
        results["skip"] = {"rows": args.rows, "files": args.files, "engines": found,
                           "rows_per_s": {n: args.rows / f["wall_s"] for n, f in found.items()},
                           "cpu_ms_per_row": {n: 1000 * f["cpu_s"] / args.rows
                                              for n, f in found.items()}}
        over = write_files(work / "over", bench.over_rows(args.summaries, 5), args.files)
        with bench.lean_server(args.latency) as (url, completions):
            before = completions()
            found = compare(work, ["compress", str(over), "--summarizer", "openai",
                                   "--base-url", url, "--model", "bench-model",
                                   "--target-max-tokens", "600", "--summary-target-tokens",
                                   "50", "--no-cache", "--max-concurrent-requests",
                                   str(args.concurrency)], args.runs)
            calls = (completions() - before) / (args.runs * len(ENGINES))
        results["summary"] = {
            "rows": args.summaries, "summaries_per_run": calls, "latency_s": args.latency,
            "concurrency": args.concurrency, "bound_per_s": args.concurrency / args.latency,
            "engines": found,
            "summaries_per_s": {n: calls / f["wall_s"] for n, f in found.items()},
            "cpu_ms_per_row": {n: 1000 * f["cpu_s"] / args.summaries
                               for n, f in found.items()}}
    results["load_avg_1m_end"] = os.getloadavg()[0]
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
