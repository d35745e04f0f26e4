"""What "What would fix it" costs `analyze` (issue 25): the dry run's time with the
remedies' search and without it (runs interleaved).

    PYTHONPATH=. .venv/bin/python scripts/bench_remedies.py [--runs 3]

Corpora: data_samples/trajectories.jsonl (50 rows, 5 over the default target), and its
5 over-limit rows repeated 20 times (100 rows over the limit, of which the table examines
the first 50: `engine.replan.MAX_ROWS`). Extractive summaries, the default settings.
Figures: BENCHMARKS.md "What would fix it".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from trajectory_compressor.core.config import CompressionConfig  # noqa: E402
from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402
from trajectory_compressor.inspect import analyze as analyze_module  # noqa: E402
from trajectory_compressor.inspect.analyze import analyze  # noqa: E402

SAMPLES = ROOT / "data_samples" / "trajectories.jsonl"
OVER_LINES = (7, 9, 19, 31, 43)  # 0-based: the rows over the default target


def repeated_over_rows(folder: Path) -> Path:
    lines = SAMPLES.read_text(encoding="utf-8").splitlines()
    path = folder / "over100.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for k in range(20):
            for i in OVER_LINES:
                row = json.loads(lines[i])
                row["id"] = f"{row['id']}-{k}"
                f.write(json.dumps(row) + "\n")
    return path


def timed(path: Path, counter: TokenCounter, table: bool) -> tuple[float, int, int]:
    """Seconds of one dry run (without the remedies' search when not ``table``), rows,
    rows over the limit."""
    saved = analyze_module.find_fixes
    if not table:
        async def skipped(*args: object, **kwargs: object) -> None:
            return None

        analyze_module.find_fixes = skipped  # type: ignore[assignment]
    try:
        start = time.perf_counter()
        analysis = analyze(str(path), CompressionConfig(summarizer="extractive"),
                           counter=counter)
        return time.perf_counter() - start, analysis.rows, analysis.targets[0].over.over
    finally:
        analyze_module.find_fixes = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    counter = TokenCounter.load()
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        for path in (SAMPLES, repeated_over_rows(Path(tmp))):
            with_table, without = [], []
            for _ in range(args.runs):  # interleaved
                seconds, rows, over = timed(path, counter, table=True)
                with_table.append(seconds)
                without.append(timed(path, counter, table=False)[0])
            print(f"{path.name}: {rows} rows, {over} over; analyze "
                  f"{statistics.median(with_table):.1f} s with the table, "
                  f"{statistics.median(without):.1f} s without (medians of {args.runs})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
