"""The Ray engine against the local one on this machine (BENCHMARKS.md "Ray engine").

    PYTHONPATH=. .venv/bin/python scripts/bench_ray.py [--rows 4000] [--files 8]
        [--summaries 1200] [--latency 0.2] [--concurrency 64] [--runs 2]

Every figure is a whole CLI process (start-up included), the engines alternating in one
loop because the machine is shared:

- overhead: one row through each engine: Ray's fixed cost (start a local instance, start
            the actors, load a tokenizer in each, shut down) is the difference.
- skip:     ``--rows`` rows under the target in ``--files`` files (tokenizing only):
            local vs ray with 1 and 2 actors; rows/s whole, and after the fixed cost.
- summary:  ``--summaries`` rows that each need one summary, against the lean loopback
            server (fixed ``--latency``) with ``--concurrency`` requests at once in total:
            local vs ray with 1 and 2 actors, against the bound concurrency / latency.

Results are printed as JSON (and written with --json PATH).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # the data generators, the CLI probe and the lean server

ENGINES = {"local": ["--engine", "local"], "ray1": ["--engine", "ray", "--ray-actors", "1"],
           "ray2": ["--engine", "ray", "--ray-actors", "2"]}


def write_files(folder: Path, rows: list[dict[str, Any]], files: int) -> Path:
    folder.mkdir()
    per = -(-len(rows) // files)
    for i in range(files):
        bench.write_jsonl(folder / f"part{i:03d}.jsonl", rows[i * per:(i + 1) * per])
    return folder


def times(work: Path, args: list[str], runs: int) -> dict[str, float]:
    """Median wall seconds of each engine on ``args`` (an output per engine and run)."""
    walls: dict[str, list[float]] = {name: [] for name in ENGINES}
    case = Path(args[1]).name
    for run in range(runs):
        for name, flags in ENGINES.items():
            out = work / f"out_{case}_{name}_{run}"
            walls[name].append(bench.run_cli([*args, "-o", str(out), *flags, "--quiet"],
                                             work)[0])
    return {name: statistics.median(w) for name, w in walls.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--summaries", type=int, default=1200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": bench.machine()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = write_files(work / "tiny", bench.unique_rows(1, 1), 1)
        overhead = times(work, ["compress", str(tiny), "--summarizer", "extractive"],
                         args.runs)
        fixed = {name: overhead[name] - overhead["local"] for name in ENGINES}
        results["overhead_s"] = {"one_row": overhead, "ray_fixed": fixed}
        print(json.dumps(results["overhead_s"]), file=sys.stderr, flush=True)

        skip = write_files(work / "skip", bench.unique_rows(args.rows, 2), args.files)
        walls = times(work, ["compress", str(skip), "--summarizer", "extractive"], args.runs)
        results["skip"] = {"rows": args.rows, "files": args.files, "wall_s": walls,
                           "rows_per_s": {n: args.rows / w for n, w in walls.items()},
                           "rows_per_s_after_fixed": {
                               n: args.rows / max(w - overhead[n], 1e-9)
                               for n, w in walls.items()}}
        print(json.dumps(results["skip"]), file=sys.stderr, flush=True)

        over = write_files(work / "over", bench.over_rows(args.summaries, 5), args.files)
        with bench.lean_server(args.latency) as (url, completions):
            before = completions()
            walls = times(work, ["compress", str(over), "--summarizer", "openai",
                                 "--base-url", url, "--model", "bench-model",
                                 "--target-max-tokens", "600", "--summary-target-tokens",
                                 "50", "--no-cache", "--max-concurrent-requests",
                                 str(args.concurrency)], args.runs)
            calls = (completions() - before) / (args.runs * len(ENGINES))
        bound = args.concurrency / args.latency
        results["summary"] = {
            "rows": args.summaries, "summaries_per_run": calls, "latency_s": args.latency,
            "concurrency": args.concurrency, "bound_per_s": bound, "wall_s": walls,
            "summaries_per_s": {n: calls / w for n, w in walls.items()},
            "summaries_per_s_after_fixed": {n: calls / max(w - overhead[n], 1e-9)
                                            for n, w in walls.items()}}
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
