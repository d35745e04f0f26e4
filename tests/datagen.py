"""Generated trajectories for the streaming tests: small, seeded, fast to make and count."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WORDS = ["alpha", "beta", "gamma", "delta", "build", "test", "deploy", "cache", "index",
         "parser", "module", "value", "error", "config", "service", "client", "server", "table",
         "record", "batch", "stream", "buffer", "token", "memory", "latency", "retry", "timeout",
         "schema", "field", "result", "output", "input", "file", "path", "数据库", "连接", "配置"]


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def make_row(i: int, seed: int = 0, long_every: int = 3) -> dict[str, Any]:
    """Row ``i``: a system prompt, a task, tool-calling steps and an answer; one row in
    ``long_every`` is long enough to be compressed at a target of a few hundred tokens."""
    rng = random.Random(seed * 1_000_003 + i)
    steps = rng.randint(6, 10) if i % long_every == 0 else rng.randint(1, 2)
    turns: list[dict[str, Any]] = [
        {"from": "system", "value": "You are a helpful agent. " + _text(rng, 5, 20)},
        {"from": "human", "value": f"Task {i}: " + _text(rng, 5, 30)},
    ]
    for step in range(steps):
        call = {"name": rng.choice(["terminal", "read_file", "web_search"]),
                "arguments": {"path": f"src/mod_{step}.py", "command": _text(rng, 2, 6)}}
        turns.append({"from": "gpt", "value": _text(rng, 3, 15)
                      + f"\n<tool_call>\n{json.dumps(call)}\n</tool_call>", "weight": step % 2})
        turns.append({"from": "tool", "value": "<tool_response>\n"
                      + json.dumps({"output": _text(rng, 10, 40), "exit_code": step % 3})
                      + "\n</tool_response>"})
    turns.append({"from": "gpt", "value": "Done. " + _text(rng, 5, 25), "weight": 1})
    return {"id": f"row-{i:06d}", "conversations": turns, "reward": round(rng.random(), 3),
            "metadata": {"source": "gen", "step_count": steps}}


def rows(n: int, seed: int = 0, start: int = 0) -> Iterator[dict[str, Any]]:
    """``n`` generated rows, lazily."""
    for i in range(start, start + n):
        yield make_row(i, seed)


def write_jsonl(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` generated rows as JSONL (written row by row: memory stays small)."""
    with path.open("w", encoding="utf-8") as f:
        for row in rows(n, seed):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_parquet(path: Path, n: int, seed: int = 0, row_group_rows: int = 500) -> Path:
    """``n`` generated rows as Parquet, one row group per ``row_group_rows`` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    for start in range(0, n, row_group_rows):
        table = pa.Table.from_pylist(list(rows(min(row_group_rows, n - start), seed, start)))
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table.cast(writer.schema))
    assert writer is not None
    writer.close()
    return path
