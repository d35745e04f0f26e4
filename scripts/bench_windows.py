"""Windows output against one-row compression and truncation (issue 39, BENCHMARKS.md
"Windows output").

    python scripts/bench_windows.py INPUT [--targets 4000,8000,16000] [--summarizer extractive]

For each target, over the rows of INPUT (a .jsonl or .json file of any dialect), with the
bundled tokenizer counting each turn alone (the default `turns` counting):

- ``truncate``: what a trainer's ``cutoff_len`` keeps: each row cut after its first
  ``target`` tokens; an assistant turn cut in two counts the tokens before the cut;
- ``rows``: `compress` (summarize, the default) then dropping the rows still over the
  target, as axolotl does by default: the assistant tokens of the rows written within it;
- ``windows``: `compress --output-mode windows`: the assistant tokens each window trains
  (assistant turns not marked not-trained), windows over the target dropped likewise;

and for each mode the share of the input's assistant tokens trained, rows out per row in,
rows over the target, summaries made and wall time. Nothing of INPUT is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trajectory_compressor.core.config import CompressionConfig  # noqa: E402
from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402
from trajectory_compressor.dialects import detect  # noqa: E402
from trajectory_compressor.dialects.base import SOURCE  # noqa: E402
from trajectory_compressor.dialects.training import is_marked  # noqa: E402
from trajectory_compressor.engine.job import compress_dataset  # noqa: E402


def read_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def counted(rows: list[dict[str, Any]], counter: TokenCounter, config: CompressionConfig
            ) -> tuple[Any, list[list[tuple[dict[str, Any], int]]]]:
    dialect = detect(rows, config)
    out = []
    for row in rows:
        turns = dialect.turns(row)
        out.append(list(zip(turns, counter.count_many([t["value"] for t in turns]),
                            strict=True)))
    return dialect, out


def item_of(turn: dict[str, Any]) -> Any:
    source = turn.get(SOURCE)
    if isinstance(source, tuple):
        return source[1]
    return source if source is not None else turn


def trained(dialect: Any, rows: list[list[tuple[dict[str, Any], int]]], target: int
            ) -> tuple[int, int]:
    """Assistant tokens trained in the rows within ``target``, and the rows over it."""
    total = over = 0
    for turns in rows:
        if sum(n for _, n in turns) > target:
            over += 1
            continue
        total += sum(n for t, n in turns if t["from"] == "gpt"
                     and not is_marked(dialect, item_of(t)))
    return total, over


def truncated(rows: list[list[tuple[dict[str, Any], int]]], target: int) -> int:
    total = 0
    for turns in rows:
        before = 0
        for turn, n in turns:
            if turn["from"] == "gpt":
                total += max(0, min(n, target - before))
            before += n
    return total


def run(src: Path, target: int, mode: str, summarizer: str, counter: TokenCounter,
        folder: Path) -> dict[str, Any]:
    out = folder / f"out_{target}_{mode}.jsonl"
    config = CompressionConfig().replace(target_max_tokens=target, summarizer=summarizer,
                                         output_mode=mode, cache_enabled=False)
    start = time.perf_counter()
    compress_dataset(str(src), str(out), config, quiet=True, overwrite=True)
    seconds = time.perf_counter() - start
    rows = read_rows(out)
    dialect, counts = counted(rows, counter, config)
    tokens, over = trained(dialect, counts, target)
    metrics = json.loads((folder / f"out_{target}_{mode}_metrics.json").read_text())
    summaries = (metrics["windows"]["summaries"] if "windows" in metrics
                 else metrics["summary"]["trajectories_compressed"])
    return {"trained": tokens, "rows_out": len(rows), "over": over, "summaries": summaries,
            "seconds": seconds, "windowed": metrics.get("windows", {}).get("windowed_rows")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("--targets", default="4000,8000,16000")
    parser.add_argument("--summarizer", default="extractive")
    args = parser.parse_args()
    counter = TokenCounter.load()
    config = CompressionConfig()
    rows = read_rows(args.input)
    _, counts = counted(rows, counter, config)
    assistant = sum(n for turns in counts for t, n in turns if t["from"] == "gpt")
    print(f"{args.input.name}: {len(rows)} rows, {sum(n for c in counts for _, n in c):,} "
          f"tokens, {assistant:,} assistant tokens")
    print("| target | mode | assistant tokens trained | share | rows out / row in | "
          "rows over target | summaries | window boundaries | time s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        src = folder / "in.jsonl"
        src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                       encoding="utf-8")
        for target in (int(t) for t in args.targets.split(",")):
            cut = truncated(counts, target)
            print(f"| {target:,} | truncate (cutoff_len) | {cut:,} | {cut / assistant:.1%} | "
                  f"1.00 | 0 | 0 | - | - |")
            for mode in ("rows", "windows"):
                r = run(src, target, mode, args.summarizer, counter, folder)
                boundaries = (r["rows_out"] - len(rows)) if mode == "windows" else "-"
                label = "rows (summarize)" if mode == "rows" else "windows"
                print(f"| {target:,} | {label} | {r['trained']:,} | "
                      f"{r['trained'] / assistant:.1%} | {r['rows_out'] / len(rows):.2f} | "
                      f"{r['over']} | {r['summaries']} | {boundaries} | {r['seconds']:.1f} |")


if __name__ == "__main__":
    main()
