"""Benchmarks of trajectory-compressor against the machine's limits and the reference's approach.

    .venv/bin/python scripts/bench.py [--rows 4000] [--runs 3] [--only skip,repeat,...]
    .venv/bin/python scripts/bench.py --quick      # smoke run: small sizes, one run each

Every figure is measured side by side in one run and reported as a ratio, because the
machines are shared and noisy. Cases (see BENCHMARKS.md for the targets):

- skip:     every row under target. The whole CLI process (start-up included) vs the
            raw batch encode of the same turn texts (the limit) and vs a per-turn
            `encode` loop over an in-memory list (the reference's approach).
- skip_shared: the same with one system prompt (with tool schemas) shared by every row,
            as in Hermes-style data; everything else unique.
- repeat:   RL-shaped data (8-16 rollouts per prompt sharing the system prompt with its
            tool schemas and the task prompt): the CLI vs the raw batch encode of all texts.
- memory:   peak RSS of the CLI for N and 10xN rows, next to an everything-in-memory
            baseline that loads all rows first like the reference.
- summarize: the openai backend against the lean loopback server (lean_llm_server.py)
            with fixed latency L and concurrency C: summaries/s vs the bound C/L (whole
            run and steady state), CPU seconds per summary; in process and via the CLI.
- cache:    the same run again with a warm cache: LLM calls and time vs the skip path.
- startup:  `--help` time and the import cost of the compress path.

Results are printed as a table and written as JSON (--json PATH).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import make_samples as samples  # noqa: E402

PYTHON = sys.executable
CLI = [PYTHON, "-m", "trajectory_compressor"]


# --- data -----------------------------------------------------------------------------


def unique_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Rows under the default target whose texts do not repeat (no memo help)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        turns = samples.trajectory(rng, rng.randint(2, 6), rng.randint(6, 14), False)
        turns[0] = {"from": "system", "value": turns[0]["value"] + "\nSession notes: "
                    + samples.paragraph(rng, 3)}
        turns[1] = {"from": "human", "value": turns[1]["value"] + " " + samples.sentence(rng, 12)}
        rows.append({"id": i, "conversations": turns, "reward": round(rng.random(), 3)})
    return rows


def hermes_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Like `unique_rows`, but every row starts with the same system prompt with its tool
    schemas, as in Hermes-style function-calling datasets; everything else is unique."""
    rng = random.Random(seed)
    system = ("You are a function calling AI model. Tools:\n<tools>\n"
              + json.dumps(samples.TOOLS * 4) + "\n</tools>")
    rows = unique_rows(n, seed)
    for row in rows:
        row["conversations"][0] = {"from": "system", "value": system}
    rng.shuffle(rows)
    return rows


def rl_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """RL rollouts: groups of 8-16 sharing the system prompt (with tools) and the task."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    tools = json.dumps(samples.TOOLS * 4)
    while len(rows) < n:
        system = ("You are a function calling AI model. Tools:\n<tools>\n" + tools
                  + "\n</tools>\nPrompt variant " + samples.paragraph(rng, 2))
        task = samples.paragraph(rng, 6)
        for _ in range(rng.randint(8, 16)):
            turns = samples.trajectory(rng, rng.randint(1, 3), rng.randint(4, 8), False)
            turns[0] = {"from": "system", "value": system}
            turns[1] = {"from": "human", "value": task}
            rows.append({"id": len(rows), "conversations": turns})
    return rows[:n]


def over_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Rows of ~1,500 tokens that all need a summary at --target-max-tokens 600."""
    rng = random.Random(seed)
    return [{"id": i, "conversations": samples.trajectory(rng, 10, 6, False)} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def turn_texts(path: Path) -> list[str]:
    return [t["value"] for line in path.open(encoding="utf-8")
            for t in json.loads(line)["conversations"]]


# --- measuring ------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_cli(args: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one CLI process."""
    probe = ("import resource, subprocess, sys, time\n"
             "t = time.perf_counter()\n"
             "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
             "dt = time.perf_counter() - t\n"
             "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([PYTHON, "-c", probe, *CLI, *args], cwd=cwd, env=env,
                         capture_output=True, text=True, check=True)
    wall, rss, code = out.stdout.split()
    if int(code) not in (0, 1):
        raise RuntimeError(f"CLI failed ({code}): {' '.join(args)}")
    return float(wall), int(rss)


def raw_encode(texts: list[str], batch: int = 4096) -> Callable[[], None]:
    from trajectory_compressor.counting.tokens import load_bundled_backend

    backend = load_bundled_backend()

    def go() -> None:
        for i in range(0, len(texts), batch):
            backend.encode_batch_fast(texts[i:i + batch], add_special_tokens=False)

    return go


def per_turn_loop(texts: list[str]) -> Callable[[], None]:
    from trajectory_compressor.counting.tokens import load_tokenizer

    tokenizer = load_tokenizer()

    def go() -> None:
        for text in texts:
            len(tokenizer.encode(text))

    return go


def median(values: list[float]) -> float:
    return statistics.median(values)


# --- cases ----------------------------------------------------------------------------


def bench_skip(work: Path, rows: int, runs: int, shared_system: bool = False) -> dict[str, Any]:
    make = hermes_rows if shared_system else unique_rows
    data = write_jsonl(work / "skip.jsonl", make(rows, 1))
    texts = turn_texts(data)
    raw_fn = raw_encode(texts)
    loop_sample = texts[: max(1, len(texts) // 10)]
    loop_fn = per_turn_loop(loop_sample)
    raw, cli, loop, cpu = [], [], [], []
    for _ in range(runs):
        raw.append(timed(raw_fn))
        wall, cpu_s = run_cli_cpu(["compress", str(data), "-o", str(work / "skip_out.jsonl"),
                                   "--summarizer", "extractive", "--quiet"], work)
        cli.append(wall)
        cpu.append(cpu_s)
        loop.append(timed(loop_fn) * len(texts) / len(loop_sample))
    from trajectory_compressor.counting.tokens import TokenCounter

    tokens = sum(TokenCounter.load().count_many(texts))
    t_raw, t_cli, t_loop = median(raw), median(cli), median(loop)
    return {"data": "shared system prompt" if shared_system else "unique texts",
            "rows": rows, "texts": len(texts), "unique_texts": len(set(texts)),
            "tokens": tokens, "raw_encode_s": t_raw, "raw_encode_runs": raw,
            "cli_s": t_cli, "cli_runs": cli, "cli_cpu_s": median(cpu),
            "per_turn_loop_s": t_loop,
            "cli_rows_per_s": rows / t_cli, "cli_tokens_per_s": tokens / t_cli,
            "ratio_vs_limit": t_raw / t_cli, "speedup_vs_per_turn_loop": t_loop / t_cli,
            "targets": {"ratio_vs_limit": 0.8, "speedup_vs_per_turn_loop": 3.0}}


def bench_repeat(work: Path, rows: int, runs: int) -> dict[str, Any]:
    data = write_jsonl(work / "rl.jsonl", rl_rows(rows, 2))
    texts = turn_texts(data)
    raw_fn = raw_encode(texts)
    raw, cli = [], []
    for _ in range(runs):
        raw.append(timed(raw_fn))
        cli.append(run_cli(["compress", str(data), "-o", str(work / "rl_out.jsonl"),
                            "--summarizer", "extractive", "--quiet"], work)[0])
    unique = len(set(texts))
    t_raw, t_cli = median(raw), median(cli)
    from trajectory_compressor.counting.tokens import TokenCounter

    counter = TokenCounter.load()
    counter.count_many(texts)
    # Keys and counts are small ints; the memo's size is its two dicts (<= 2 * memo_size).
    memo_bytes = sum(sys.getsizeof(d) for d in (counter._memo, counter._old))
    memo_bytes += 2 * 32 * counter.memo_entries  # the int objects, at most
    return {"rows": rows, "texts": len(texts), "unique_texts": unique,
            "memo_entries": counter.memo_entries, "memo_max_entries": 2 * counter._memo_size,
            "memo_mib": memo_bytes / 2**20,
            "memo_mib_at_bound": (memo_bytes / max(counter.memo_entries, 1))
            * 2 * counter._memo_size / 2**20,
            "raw_encode_s": t_raw, "cli_s": t_cli, "speedup_vs_raw_encode": t_raw / t_cli,
            "targets": {"speedup_vs_raw_encode": 1.3}}


IN_MEMORY_BASELINE = """
import json, sys
from trajectory_compressor.counting.tokens import load_tokenizer
tok = load_tokenizer()
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
counts = [[len(tok.encode(t["value"])) for t in r["conversations"]] for r in rows]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\\n")
"""


def peak_rss(cmd: list[str], cwd: Path) -> int:
    probe = ("import resource, subprocess, sys\n"
             "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([PYTHON, "-c", probe, *cmd], cwd=cwd, env=env, capture_output=True,
                         text=True, check=True)
    return int(out.stdout.split()[-1])


def bench_memory(work: Path, rows: int) -> dict[str, Any]:
    small = write_jsonl(work / "mem_small.jsonl", unique_rows(rows, 3))
    big = work / "mem_big.jsonl"
    with big.open("w", encoding="utf-8") as f:
        for _ in range(10):
            f.write(small.read_text(encoding="utf-8"))
    result: dict[str, Any] = {"rows_n": rows, "rows_10n": rows * 10}
    for name, path in (("n", small), ("10n", big)):
        result[f"cli_peak_rss_mib_{name}"] = peak_rss(
            [*CLI, "compress", str(path), "-o", str(work / f"mem_out_{name}.jsonl"),
             "--summarizer", "extractive", "--quiet", "--target-max-tokens", "3000",
             "--summary-target-tokens", "200"], work) / 1024
        result[f"in_memory_peak_rss_mib_{name}"] = peak_rss(
            [PYTHON, "-c", IN_MEMORY_BASELINE, str(path), str(work / "mem_base.jsonl")],
            work) / 1024
    result["cli_growth"] = result["cli_peak_rss_mib_10n"] / result["cli_peak_rss_mib_n"] - 1
    result["in_memory_growth"] = (result["in_memory_peak_rss_mib_10n"]
                                  / result["in_memory_peak_rss_mib_n"] - 1)
    result["targets"] = {"cli_growth": "< 0.15"}
    return result


def bench_startup(work: Path, runs: int) -> dict[str, Any]:
    helps = [run_cli(["--help"], work)[0] for _ in range(runs)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import time; t = time.perf_counter(); "
            "import trajectory_compressor.app.cli, trajectory_compressor.engine.local, "
            "trajectory_compressor.counting.tokens; "
            "from trajectory_compressor.counting.tokens import TokenCounter; "
            "t1 = time.perf_counter(); TokenCounter.load(); "
            "print(t1 - t, time.perf_counter() - t1)")
    imports, loads = [], []
    for _ in range(runs):
        out = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        imports.append(float(out[0]))
        loads.append(float(out[1]))
    heavy = subprocess.run(
        [PYTHON, "-c", "import sys, trajectory_compressor.app.commands, "
         "trajectory_compressor.engine.local;"
         "print(' '.join(m for m in ('transformers', 'datasets', 'aiohttp', 'pyarrow', "
         "'torch', 'tqdm') if m in sys.modules))"],
        env=env, capture_output=True, text=True, check=True).stdout.strip()
    return {"help_s": median(helps), "import_compress_path_s": median(imports),
            "tokenizer_load_s": median(loads),
            "heavy_modules_loaded_by_compress_path": heavy or "none"}


@contextlib.contextmanager
def lean_server(latency: float) -> Iterator[tuple[str, Callable[[], int]]]:
    """The lean fixed-latency server in a child process: its URL and a completions probe."""
    proc = subprocess.Popen([PYTHON, str(ROOT / "scripts" / "lean_llm_server.py"),
                             "--latency", str(latency)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = json.loads(proc.stdout.readline())["port"]

    def completions() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as r:
            return int(json.loads(r.read())["completions"])

    try:
        yield f"http://127.0.0.1:{port}/v1", completions
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def summarize_in_process(url: str, n: int, concurrency: int) -> tuple[float, float, float]:
    """Wall and CPU seconds of ``n`` summaries through `OpenAISummarizer`, all at once
    under its ``max_concurrent_requests`` bound, and the steady-state summaries/s."""
    import asyncio

    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.core.summary import SummaryRequest
    from trajectory_compressor.summarizers.openai import OpenAISummarizer

    config = CompressionConfig(max_concurrent_requests=concurrency, cache_enabled=False)
    config = config.with_endpoint_flags([url], "bench-model")
    rng = random.Random(7)
    regions = [samples.trajectory(rng, 3, 4, False)[2:8] for _ in range(64)]

    async def go() -> tuple[float, float, float]:
        summarizer = OpenAISummarizer(config)
        await summarizer.start()
        try:
            requests = [SummaryRequest(regions[i % len(regions)], 2 + i, 50, 400)
                        for i in range(n)]
            # Distinct regions: vary the first index so no two prompts are twins.
            done: list[float] = []

            async def one(request: SummaryRequest) -> None:
                await summarizer.summarize(request)
                done.append(time.perf_counter())

            cpu0, t0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(one(r) for r in requests))
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            # The steady state: completions between the 10th and the 90th percentile,
            # without the first wave's connection set-up and the last wave's tail.
            lo, hi = n // 10, n * 9 // 10
            return wall, cpu, (hi - lo) / (done[hi] - done[lo])
        finally:
            await summarizer.aclose()

    return asyncio.run(go())


def bench_summarize(work: Path, n: int, pipeline_rows: int, runs: int,
                    latency: float = 0.2, concurrency: int = 256) -> dict[str, Any]:
    bound = concurrency / latency
    data = write_jsonl(work / "over.jsonl", over_rows(pipeline_rows, 5))
    walls, cpus, steady, cli_walls, cli_cpus, calls = [], [], [], [], [], []
    with lean_server(latency) as (url, completions):
        for _ in range(runs):
            before = completions()
            wall, cpu, rate = summarize_in_process(url, n, concurrency)
            assert completions() - before == n, "every summary must be one request"
            walls.append(wall)
            steady.append(rate)
            cpus.append(cpu)
            before = completions()
            wall, cpu = run_cli_cpu(["compress", str(data), "-o", str(work / "over_out.jsonl"),
                                     "--summarizer", "openai", "--base-url", url,
                                     "--model", "bench-model", "--target-max-tokens", "600",
                                     "--summary-target-tokens", "50", "--no-cache",
                                     "--max-concurrent-requests", str(concurrency),
                                     "--quiet"], work)
            calls.append(completions() - before)
            cli_walls.append(wall)
            cli_cpus.append(cpu)
    t, t_cli = median(walls), median(cli_walls)
    return {"latency_s": latency, "concurrency": concurrency, "bound_per_s": bound,
            "summaries": n, "summaries_per_s": n / t, "ratio_vs_bound": n / t / bound,
            "steady_summaries_per_s": median(steady),
            "steady_ratio_vs_bound": median(steady) / bound,
            "cpu_ms_per_summary": 1000 * median(cpus) / n,
            "pipeline_rows": pipeline_rows, "pipeline_summaries": median(calls),
            "pipeline_s": t_cli, "pipeline_summaries_per_s": median(calls) / t_cli,
            "pipeline_ratio_vs_bound": median(calls) / t_cli / bound,
            "pipeline_cpu_ms_per_summary": 1000 * median(cli_cpus) / max(median(calls), 1),
            "targets": {"ratio_vs_bound": 0.9}}


def bench_cache(work: Path, rows: int, runs: int) -> dict[str, Any]:
    data = write_jsonl(work / "cache.jsonl", over_rows(rows, 6))
    cache = work / "bench_cache.sqlite"
    args = ["compress", str(data), "-o", str(work / "cache_out.jsonl"), "--summarizer",
            "openai", "--model", "bench-model", "--target-max-tokens", "600",
            "--summary-target-tokens", "50", "--cache-path", str(cache), "--quiet"]
    skip_args = ["compress", str(data), "-o", str(work / "cache_skip.jsonl"),
                 "--summarizer", "extractive", "--quiet"]
    warm, skip, warm_calls = [], [], []
    with lean_server(0.2) as (url, completions):
        cold_calls = completions()
        cold = run_cli([*args, "--base-url", url], work)[0]
        cold_calls = completions() - cold_calls
        for _ in range(runs):
            before = completions()
            warm.append(run_cli([*args, "--base-url", url], work)[0])
            warm_calls.append(completions() - before)
            skip.append(run_cli(skip_args, work)[0])  # every row under the default target
    return {"rows": rows, "cold_s": cold, "cold_llm_calls": cold_calls,
            "warm_s": median(warm), "warm_llm_calls": max(warm_calls),
            "skip_path_s": median(skip), "warm_vs_skip": median(warm) / median(skip),
            "targets": {"warm_llm_calls": 0}}


def run_cli_cpu(args: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one CLI process."""
    probe = ("import resource, subprocess, sys, time\n"
             "t = time.perf_counter()\n"
             "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
             "dt = time.perf_counter() - t\n"
             "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
             "print(dt, r.ru_utime + r.ru_stime, p.returncode)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([PYTHON, "-c", probe, *CLI, *args], cwd=cwd, env=env,
                         capture_output=True, text=True, check=True)
    wall, cpu, code = out.stdout.split()
    if int(code) not in (0, 1):
        raise RuntimeError(f"CLI failed ({code}): {' '.join(args)}")
    return float(wall), float(cpu)


CASES = ("skip", "skip_shared", "repeat", "memory", "summarize", "cache", "startup")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000, help="rows for skip/repeat")
    parser.add_argument("--memory-rows", type=int, default=1000, help="N for the memory case")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--summaries", type=int, default=6000,
                        help="summaries for the in-process summarize figure")
    parser.add_argument("--pipeline-rows", type=int, default=2000,
                        help="rows (one summary each) for the summarize case's CLI figure")
    parser.add_argument("--cache-rows", type=int, default=500, help="rows for the cache case")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: small sizes, one run each")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.memory_rows, args.runs = 200, 100, 1
        args.summaries, args.pipeline_rows, args.cache_rows = 300, 100, 50
    chosen = [c.strip() for c in args.only.split(",") if c.strip()]
    results: dict[str, Any] = {"machine": machine(), "command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory(prefix="tc-bench-") as tmp:
        work = Path(tmp)
        for case in chosen:
            print(f"== {case}", file=sys.stderr)
            if case == "skip":
                results[case] = bench_skip(work, args.rows, args.runs)
            elif case == "skip_shared":
                results[case] = bench_skip(work, args.rows, args.runs, shared_system=True)
            elif case == "repeat":
                results[case] = bench_repeat(work, args.rows, args.runs)
            elif case == "memory":
                results[case] = bench_memory(work, args.memory_rows)
            elif case == "summarize":
                results[case] = bench_summarize(work, args.summaries, args.pipeline_rows,
                                                args.runs)
            elif case == "cache":
                results[case] = bench_cache(work, args.cache_rows, args.runs)
            elif case == "startup":
                results[case] = bench_startup(work, args.runs)
            else:
                parser.error(f"unknown case {case!r}; choose from {', '.join(CASES)}")
            print(json.dumps(results[case], indent=2), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0],
            "max_rss_units": "KiB", "platform": sys.platform,
            "load_avg_1m": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d"),
            "rlimit_nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}


if __name__ == "__main__":
    main()
