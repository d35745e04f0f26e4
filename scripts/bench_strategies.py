"""Strategies (§19) side by side on real agent trajectories: summarize, mask, hybrid.

    .venv/bin/python scripts/bench_strategies.py INPUT.jsonl [--targets 4000,8000,16000]
        [--mask-keep-last 3] [--runs 3] [--skip-rows 2000] [--baseline-src DIR] [--json PATH]

INPUT: rows in any dialect `compress` reads (e.g. /work/realdata/sweagent.jsonl, made by
scripts/convert_sweagent.py from recorded SWE-agent runs; not committed). For each target
and strategy, every row goes through `TrajectoryCompressor` with the extractive
summarizer, as `compress --summarizer extractive` writes it. Figures, over the rows over
the target as read (BENCHMARKS.md "Strategies"):

- rows over before, rows fixed (under after), rows still over;
- summaries made: the LLM calls an LLM summarizer would make (one per summarized row);
- assistant tokens kept: the share of those rows' assistant tokens still in them;
- identifier retention of what was removed (the fidelity measure, `core.fidelity`): of
  the items in the original text of every turn a summary replaced or a placeholder
  masked, the share found in what stands for them (the summary, the placeholders); and
  of the items the rest of the written row names again ("needed"), the same share, and
  of those its assistant and user turns name ("needed by talk": what a placeholder
  quotes);
- seconds for the whole input (tokenizer loaded once, rows counted once per target).

Skip path: the CLI over `bench.py`'s rows, all under the target (the default target),
summarize against hybrid, runs interleaved; with ``--baseline-src`` (a checkout of the
code before strategies, e.g. from ``git archive``) also that code's CLI on the same rows.
"""

from __future__ import annotations

import argparse
import asyncio
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

from trajectory_compressor.core.config import STRATEGIES, CompressionConfig  # noqa: E402
from trajectory_compressor.core.conversation import SUMMARY_PREFIX  # noqa: E402
from trajectory_compressor.core.fidelity import FidelityProbe  # noqa: E402
from trajectory_compressor.core.mask import LABEL  # noqa: E402
from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402
from trajectory_compressor.dialects import detect  # noqa: E402
from trajectory_compressor.engine.compressor import TrajectoryCompressor  # noqa: E402


def strategy_run(rows: list[dict], counter: TokenCounter, target: int, strategy: str,
                 keep_last: int) -> dict[str, Any]:
    config = CompressionConfig(summarizer="extractive", target_max_tokens=target,
                               strategy=strategy, mask_keep_last=keep_last,
                               cache_enabled=False)
    dialect = detect(rows, config=config)
    compressor = TrajectoryCompressor(config, counter=counter, dialect=dialect)
    figures = {"rows_over": 0, "fixed": 0, "still_over": 0, "summaries": 0,
               "masked_turns": 0, "assistant_before": 0, "assistant_after": 0,
               "items": 0, "items_kept": 0, "needed": 0, "needed_kept": 0,
               "talk_needed": 0, "talk_needed_kept": 0}

    async def go() -> float:
        start = time.perf_counter()
        async with compressor:
            for row in rows:
                turns = dialect.turns(row)
                result = await compressor.compress_row(row)
                m = result.metrics
                if m.skipped_under_target or m.original_tokens <= target:
                    continue
                figures["rows_over"] += 1
                figures["fixed"] += not m.still_over_limit
                figures["still_over"] += m.still_over_limit
                figures["summaries"] += m.turns_compressed_start_idx >= 0
                figures["masked_turns"] += m.masked_turns
                figures["assistant_before"] += m.assistant_tokens
                figures["assistant_after"] += round(m.assistant_tokens * m.assistant_tokens_kept)
                _retention(figures, turns, result.plan, m, dialect.turns(result.row))
        return time.perf_counter() - start

    seconds = asyncio.run(go())
    before = figures["assistant_before"]
    return {**figures, "seconds": round(seconds, 2),
            "assistant_kept": round(figures["assistant_after"] / before, 4) if before else 1.0,
            "retention": _share(figures["items_kept"], figures["items"]),
            "needed_retention": _share(figures["needed_kept"], figures["needed"]),
            "talk_needed_retention": _share(figures["talk_needed_kept"],
                                            figures["talk_needed"])}


def _retention(figures: dict[str, Any], turns: list[dict], plan: Any, m: Any,
               written: list[dict]) -> None:
    """Items of the removed text (the summarized region and the masked outputs, as read)
    found in what stands for it in the written row (the summary, the placeholders); the
    "needed" ones: those the rest of the written row names (the fidelity measure, §15)."""
    removed: set[int] = set()
    if m.turns_compressed_start_idx >= 0:
        removed.update(range(m.turns_compressed_start_idx, m.turns_compressed_end_idx))
    if plan.mask is not None:
        removed.update(t.turn for t in plan.mask.turns)
    if not removed:
        return
    standing: list[str] = []
    rest: list[str] = []
    talk: list[str] = []  # the rest's assistant and user text
    for turn in written:
        value = str(turn["value"])
        if SUMMARY_PREFIX in value:
            before, _, summary = value.partition(SUMMARY_PREFIX)
            rest.append(before)
            standing.append(summary)
        elif turn["from"] == "tool" and LABEL in value:
            standing.append(value)
        else:
            rest.append(value)
            if turn["from"] in ("gpt", "human"):
                talk.append(value)
    texts = [str(turns[i]["value"]) for i in sorted(removed)]
    kept = FidelityProbe(texts, rest).measure("\n".join(standing))
    figures["items"] += kept.items
    figures["items_kept"] += kept.kept
    figures["needed"] += kept.tail_items
    figures["needed_kept"] += kept.tail_kept
    said = FidelityProbe(texts, talk).measure("\n".join(standing))
    figures["talk_needed"] += said.tail_items
    figures["talk_needed_kept"] += said.tail_kept


def _share(kept: int, total: int) -> float | None:
    return round(kept / total, 4) if total else None


def run_cli_timed(args: list[str], src: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process: user + system, every thread)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trajectory_compressor", *args],
                          capture_output=True, text=True, env={**os.environ,
                                                               "PYTHONPATH": str(src)})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def skip_path(work: Path, rows: int, runs: int, baseline: Path | None) -> dict[str, Any]:
    data = write_jsonl(work / "skip.jsonl", unique_rows(rows, 1))
    variants: dict[str, tuple[list[str], Path]] = {
        "summarize": ([], ROOT), "hybrid": (["--strategy", "hybrid"], ROOT)}
    if baseline is not None:
        variants["baseline"] = ([], baseline)
    walls: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(runs):
        for name, (flags, src) in variants.items():  # interleaved: noise hits all alike
            wall, cpu = run_cli_timed(["compress", str(data), "-o", str(work / f"{name}.jsonl"),
                                       "--summarizer", "extractive", "--quiet", "--no-cache",
                                       "--overwrite", *flags], src)
            walls[name].append(wall)
            cpus[name].append(cpu)
    out: dict[str, Any] = {"rows": rows}
    for name in variants:
        out[f"{name}_s"] = round(statistics.median(walls[name]), 3)
        out[f"{name}_cpu_s"] = round(statistics.median(cpus[name]), 3)
    reference = "baseline" if baseline is not None else "summarize"
    for name in variants:
        if name != reference:
            out[f"{name}_vs_{reference}_cpu"] = round(
                out[f"{name}_cpu_s"] / out[f"{reference}_cpu_s"], 3)
            out[f"{name}_vs_{reference}_wall"] = round(out[f"{name}_s"] / out[f"{reference}_s"], 3)
    out["walls"] = {k: [round(t, 3) for t in v] for k, v in walls.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("--targets", default="4000,8000,16000")
    parser.add_argument("--mask-keep-last", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-rows", type=int, default=2000)
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--no-skip", action="store_true", help="leave out the skip path")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.input.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    counter = TokenCounter.load()
    results: dict[str, Any] = {"input_rows": len(rows), "mask_keep_last": args.mask_keep_last,
                               "load_average": os.getloadavg(), "targets": {}}
    for target in (int(t) for t in args.targets.split(",")):
        results["targets"][target] = {
            s: strategy_run(rows, counter, target, s, args.mask_keep_last) for s in STRATEGIES}
        for s, f in results["targets"][target].items():
            print(f"target {target:>6} {s:<10} over {f['rows_over']:>3} fixed {f['fixed']:>3} "
                  f"still {f['still_over']:>3} summaries {f['summaries']:>3} "
                  f"assistant kept {f['assistant_kept']:.3f} retention {f['retention']} "
                  f"needed {f['needed_retention']} by talk {f['talk_needed_retention']} "
                  f"{f['seconds']}s", file=sys.stderr)
    if not args.no_skip:
        with tempfile.TemporaryDirectory() as tmp:
            results["skip_path"] = skip_path(Path(tmp), args.skip_rows, args.runs,
                                             args.baseline_src)
    results["load_average_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
