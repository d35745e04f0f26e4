#!/usr/bin/env python3
"""Peak memory of the CLI on one giant tool turn (issue 24 item 8; BENCHMARKS "Giant turn").

Writes a Hermes row whose middle tool output is ``--mb`` MB of log lines (three short
rows beside it) as .jsonl, .json and Parquet, then runs each case in its own process and
reports its peak RSS (``ru_maxrss`` from ``wait4``) and wall time. ``--before DIR`` runs
the same cases with another checkout's package first on ``PYTHONPATH`` (a side-by-side
before/after in one run).

    .venv/bin/python scripts/bench_giant.py --mb 60 [--before /tmp/before] [--only jsonl,template]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "trajectory_compressor"]


def giant_rows(mb: int) -> list[dict]:
    rnd = random.Random(1)
    lines: list[str] = []
    size = 0
    while size < mb * 1_000_000:
        line = (f"2024-11-{rnd.randint(1, 28):02d}T10:{rnd.randint(0, 59):02d}:02Z INFO step "
                f"{rnd.randint(0, 10**6)} loss={rnd.random():.4f} "
                f"path=/data/shard-{rnd.randint(0, 999):03d}.parquet ok\n")
        lines.append(line)
        size += len(line)
    big = "".join(lines)

    def call(name: str, args: dict) -> dict:
        return {"from": "gpt", "value": "<tool_call>" + json.dumps(
            {"name": name, "arguments": args}) + "</tool_call>"}

    def answer(name: str, content: str) -> dict:
        return {"from": "tool", "value": "<tool_response>" + json.dumps(
            {"name": name, "content": content}) + "</tool_response>"}

    head = [{"from": "system", "value": "You are an agent."},
            {"from": "human", "value": "Train the model."},
            call("run", {"cmd": "python train.py"}), answer("run", "started")]
    middle = []
    for i in range(3):
        middle += [call("tail", {"n": i}), answer("tail", big if i == 1 else "short output")]
    tail = [{"from": "gpt", "value": "Training finished."},
            {"from": "human", "value": "thanks"}, {"from": "gpt", "value": "Done."}]
    rows = [{"id": "giant", "conversations": head + middle + tail}]
    rows += [{"id": f"small{k}", "conversations": head + tail} for k in range(3)]
    return rows


def write_inputs(folder: Path, mb: int) -> dict[str, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = giant_rows(mb)
    paths = {"jsonl": folder / "giant.jsonl", "json": folder / "giant.json",
             "parquet": folder / "giant.parquet"}
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    paths["json"].write_text(json.dumps(rows), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(rows), paths["parquet"])
    return paths


def template_folder(dest: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.template_tokenizer import make_tokenizer_dir

    return make_tokenizer_dir(dest)


def measure(args: list[str], pythonpath: str | None, cwd: Path) -> tuple[int, float, int]:
    """``(exit code, seconds, peak RSS in MiB)`` of one CLI run in its own process."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    start = time.perf_counter()
    proc = subprocess.Popen(CLI + args, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    return os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=60, help="size of the giant turn in MB")
    parser.add_argument("--before", help="another checkout to compare with (its folder)")
    parser.add_argument("--only", help="comma-separated cases (default: all)")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_giant_") as tmp:
        folder = Path(tmp)
        inputs = write_inputs(folder, opts.mb)
        tok = template_folder(folder / "tok")
        size = inputs["jsonl"].stat().st_size / 1e6
        cases = {
            "jsonl": ["compress", str(inputs["jsonl"]), "--summarizer", "extractive"],
            "json": ["compress", str(inputs["json"]), "--summarizer", "extractive"],
            "parquet": ["compress", str(inputs["parquet"]), "--summarizer", "extractive"],
            "distill": ["compress", str(inputs["jsonl"]), "--summarizer", "extractive",
                        "--distill", "safe"],
            "template": ["compress", str(inputs["jsonl"]), "--summarizer", "extractive",
                         "--tokenizer", str(tok), "--token-counting", "chat_template"],
            "over_limit": ["compress", str(inputs["jsonl"]), "--summarizer", "extractive",
                           "--protect-last-n-turns", "6",
                           "--over-limit-strategy", "elide_tool_outputs"],
            "analyze": ["analyze", str(inputs["jsonl"])],
        }
        chosen = opts.only.split(",") if opts.only else list(cases)
        print(f"input: {size:.1f} MB .jsonl, one tool turn of {opts.mb} MB; "
              f"load average {os.getloadavg()[0]:.1f}")
        print("| case | after: exit, s, peak MiB |" + (" before: exit, s, peak MiB |"
                                                      if opts.before else ""))
        for name in chosen:
            out = folder / f"out_{name}"
            args = list(cases[name])
            if args[0] == "compress":
                args += ["-o", str(out / f"o.{_ext(args)}"), "--quiet"]
            cells = []
            for path in ([None, opts.before] if opts.before else [None]):
                if out.exists():
                    subprocess.run(["rm", "-rf", str(out)], check=True)
                code, seconds, peak = measure(args, path, folder)
                cells.append(f"{code}, {seconds:.1f}, {peak:,}")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def _ext(args: list[str]) -> str:
    source = args[1]
    return "parquet" if source.endswith(".parquet") else source.rsplit(".", 1)[-1]


if __name__ == "__main__":
    main()
