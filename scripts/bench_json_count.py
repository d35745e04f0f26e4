"""Counting a `.json` array's rows for the progress bar, against reading and parsing it.

    .venv/bin/python scripts/bench_json_count.py [--rows 150000] [--runs 3] [--file PATH]

Writes a JSON array of generated rows (tests/datagen: tool calls as JSON inside the
strings, so escaped quotes everywhere; one row per line), unless ``--file`` names one,
then times, alternating, the median of ``--runs``:

- the count (`formats.json_array.input_rows`, what the progress bar's total costs);
- the reader (`read_json_array`: scanning and parsing every element, as a run reads);
- `orjson.loads` of the whole file in memory (the fastest parse there is; a run cannot
  use it, since it holds the whole file).

Figures in BENCHMARKS.md, "Counting a .json array".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from tests.datagen import rows  # noqa: E402
from trajectory_compressor.formats.base import InputFile  # noqa: E402
from trajectory_compressor.formats.json_array import input_rows, read_json_array  # noqa: E402


def write_array(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as f:
        f.write("[")
        for i, row in enumerate(rows(n)):
            f.write((",\n" if i else "\n") + json.dumps(row, ensure_ascii=False))
        f.write("\n]\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=150_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--file", type=Path, help="an existing .json array to time instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file or Path(tmp) / "rows.json"
        if args.file is None:
            write_array(path, args.rows)
        size = path.stat().st_size
        source = InputFile(path, "json")
        cases: dict[str, Callable[[], int]] = {
            "count (input_rows)": lambda: input_rows(source) or 0,
            "reader (scan + parse)": lambda: sum(1 for _ in read_json_array(source)),
            "orjson.loads, whole file": lambda: len(orjson.loads(path.read_bytes())),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        counts: dict[str, int] = {}
        for _ in range(args.runs):
            for name, case in cases.items():
                start = time.perf_counter()
                counts[name] = case()
                times[name].append(time.perf_counter() - start)
        print(f"file {size / 1e6:,.0f} MB, load average {os.getloadavg()[0]:.2f}")
        count = statistics.median(times["count (input_rows)"])
        for name, spent in times.items():
            median = statistics.median(spent)
            print(f"{name:28} {counts[name]:>9,} rows {median:7.2f} s "
                  f"{size / median / 1e6:7.0f} MB/s  {median / count:5.1f}x the count")


if __name__ == "__main__":
    main()
