"""Write the bundled sample data: realistic Hermes-style trajectories (seeded, deterministic).

    python scripts/make_samples.py [--rows 50] [--seed 7] [--out data_samples]

Rows have system prompts with tool schemas, <think> blocks, <tool_call>/<tool_response>
JSON, parallel tool calls, long outputs, some CJK text, extra row fields and per-turn keys.
Their lengths spread around the default target (15,250 tokens) so that some rows are
skipped, most are compressed and a few stay over the limit.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

TOOLS = [
    {
        "name": "terminal",
        "description": "Run a shell command in the sandbox and return "
        "stdout, stderr and the exit code.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a UTF-8 text file from the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}},
            "required": ["path"],
        },
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a file in the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "web_search",
        "description": "Search the web and return the top results.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "num_results": {"type": "integer"}},
            "required": ["query"],
        },
    },
    {
        "name": "web_extract",
        "description": "Fetch a page and return its main text.",
        "parameters": {
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
        },
    },
]

WORDS = [
    "the",
    "data",
    "model",
    "request",
    "response",
    "cache",
    "index",
    "parser",
    "module",
    "function",
    "value",
    "error",
    "config",
    "service",
    "client",
    "server",
    "table",
    "column",
    "record",
    "batch",
    "stream",
    "buffer",
    "token",
    "memory",
    "latency",
    "throughput",
    "retry",
    "timeout",
    "schema",
    "field",
    "option",
    "result",
    "output",
    "input",
    "file",
    "path",
    "folder",
    "build",
    "test",
    "deploy",
    "metric",
    "report",
    "user",
    "session",
    "queue",
    "worker",
]
FILES = [
    "src/app/main.py",
    "src/app/db.py",
    "src/app/api/routes.py",
    "tests/test_api.py",
    "README.md",
    "pyproject.toml",
    "src/app/cache.py",
    "scripts/migrate.sh",
    "config/settings.yaml",
    "src/app/models/user.py",
    "docs/design.md",
]
TASKS = [
    "Fix the failing test in tests/test_api.py and explain the root cause.",
    "Add a Redis cache in front of the user lookup and measure the latency change.",
    "Find the three most cited papers on speculative decoding and summarise them.",
    "Migrate the settings loader from INI to YAML without breaking existing deployments.",
    "Profile the batch importer and make it at least twice as fast.",
    "请检查 src/app/db.py 中的数据库连接池配置，并修复连接泄漏问题。",
    "调研三个开源向量数据库，比较它们的写入吞吐量和查询延迟，并给出建议。",
]
CJK = [
    "数据库",
    "连接",
    "配置",
    "错误",
    "测试",
    "性能",
    "缓存",
    "查询",
    "结果",
    "文件",
    "服务",
    "用户",
    "请求",
    "日志",
    "分析",
    "优化",
    "模型",
    "参数",
    "训练",
    "推理",
]


def sentence(rng: random.Random, n: int, cjk: bool = False) -> str:
    vocab = CJK if cjk else WORDS
    joiner = "" if cjk else " "
    words = [rng.choice(vocab) for _ in range(n)]
    return joiner.join(words) + ("。" if cjk else ".")


def paragraph(rng: random.Random, sentences: int, cjk: bool = False) -> str:
    return " ".join(sentence(rng, rng.randint(6, 18), cjk) for _ in range(sentences))


def code_block(rng: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
        kind = rng.random()
        if kind < 0.3:
            out.append(f"def {name}(self, {rng.choice(WORDS)}: int = {rng.randint(0, 99)}):")
        elif kind < 0.6:
            out.append(
                f"    {name} = {rng.choice(WORDS)}.get('{rng.choice(WORDS)}', "
                f"{rng.randint(0, 9999)})"
            )
        elif kind < 0.8:
            out.append(f"    # {sentence(rng, rng.randint(4, 10))}")
        else:
            out.append(f"    return {name}  # line {i}")
    return "\n".join(out)


def log_output(rng: random.Random, lines: int, failing: bool) -> str:
    out = []
    for i in range(lines):
        level = rng.choice(["INFO", "INFO", "DEBUG", "WARN"])
        out.append(
            f"2026-11-0{rng.randint(1, 9)} 12:{i % 60:02d}:{rng.randint(0, 59):02d} "
            f"{level} {rng.choice(WORDS)}.{rng.choice(WORDS)}: {sentence(rng, 8)}"
        )
    if failing:
        out.append("Traceback (most recent call last):")
        out.append(
            f'  File "{rng.choice(FILES)}", line {rng.randint(10, 400)}, in {rng.choice(WORDS)}'
        )
        out.append(f"KeyError: '{rng.choice(WORDS)}'")
    return "\n".join(out)


def tool_call(rng: random.Random) -> tuple[str, dict[str, Any]]:
    tool = rng.choice(TOOLS)["name"]
    args: dict[str, Any]
    if tool == "terminal":
        args = {
            "command": rng.choice(
                [
                    "pytest -q tests/test_api.py",
                    "python -m app.bench",
                    "grep -rn 'pool' src/app",
                    "ls -la src/app",
                    "git diff --stat",
                    "pip install redis==5.0.1",
                ]
            )
        }
    elif tool in ("read_file", "write_file"):
        args = {"path": rng.choice(FILES)}
        if tool == "write_file":
            args["content"] = code_block(rng, rng.randint(5, 30))
    elif tool == "web_search":
        args = {"query": sentence(rng, rng.randint(3, 7))[:-1], "num_results": 5}
    else:
        args = {"url": f"https://docs.example.org/{rng.choice(WORDS)}/{rng.choice(WORDS)}"}
    return tool, args


def tool_result(rng: random.Random, tool: str, args: dict[str, Any], size: int) -> str:
    if tool == "terminal":
        failing = rng.random() < 0.3
        body: dict[str, Any] = {
            "stdout": log_output(rng, size, failing),
            "stderr": "",
            "exit_code": 1 if failing else 0,
        }
    elif tool == "read_file":
        body = {"path": args["path"], "content": code_block(rng, size)}
    elif tool == "write_file":
        body = {"path": args["path"], "bytes_written": len(args["content"])}
    elif tool == "web_search":
        body = {
            "results": [
                {
                    "title": sentence(rng, 6),
                    "url": f"https://example.com/{i}",
                    "snippet": paragraph(rng, 2),
                }
                for i in range(max(1, size // 8))
            ]
        }
    else:
        body = {"url": args["url"], "content": paragraph(rng, max(1, size // 2))}
    payload = {
        "tool_call_id": f"call_{rng.randrange(16**8):08x}",
        "name": tool,
        "content": json.dumps(body, ensure_ascii=False),
    }
    return "<tool_response>\n" + json.dumps(payload, ensure_ascii=False) + "\n</tool_response>"


def trajectory(rng: random.Random, steps: int, output_size: int, big_tail: bool) -> list[dict]:
    task = rng.choice(TASKS)
    cjk = any("\u4e00" <= ch <= "\u9fff" for ch in task)
    system = (
        "You are a function calling AI model. You are provided with function "
        "signatures within <tools></tools> XML tags. You may call one or more "
        "functions to assist with the user query. Don't make assumptions about what "
        "values to plug into functions.\n<tools>\n"
        + json.dumps(TOOLS)
        + "\n</tools>\nFor each function call return a json object "
        "with function name and arguments within <tool_call></tool_call> XML tags."
    )
    turns: list[dict[str, Any]] = [
        {"from": "system", "value": system},
        {"from": "human", "value": task},
    ]
    for step in range(steps):
        calls = [tool_call(rng) for _ in range(1 if rng.random() < 0.75 else rng.randint(2, 3))]
        think = f"<think>\n{paragraph(rng, rng.randint(1, 4), cjk)}\n</think>\n"
        blocks = "\n".join(
            "<tool_call>\n"
            + json.dumps({"name": t, "arguments": a}, ensure_ascii=False)
            + "\n</tool_call>"
            for t, a in calls
        )
        turns.append({"from": "gpt", "value": think + blocks, "weight": 1})
        last = step == steps - 1
        for tool, args in calls:
            size = output_size * (2 if big_tail and last else 1)
            turns.append(
                {
                    "from": "tool",
                    "value": tool_result(rng, tool, args, rng.randint(size // 2, size)),
                }
            )
    turns.append(
        {
            "from": "gpt",
            "value": "<think>\n"
            + paragraph(rng, 2, cjk)
            + "\n</think>\n"
            + paragraph(rng, rng.randint(3, 8), cjk),
            "weight": 1,
        }
    )
    return turns


def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = "skip" if i % 5 == 0 else ("over" if i % 12 == 7 else "compress")
        steps = {"skip": rng.randint(3, 8), "compress": rng.randint(32, 48), "over": 3}[kind]
        output_size = {
            "skip": rng.randint(8, 20),
            "compress": rng.randint(32, 48),
            "over": rng.randint(420, 480),
        }[kind]
        rows.append(
            {
                "id": f"traj-{seed}-{i:04d}",
                "conversations": trajectory(rng, steps, output_size, big_tail=kind == "over"),
                "reward": round(rng.uniform(-1, 1), 3),
                "metadata": {
                    "source": "hermes-agent",
                    "model": "hermes-4-70b",
                    "toolsets": ["terminal", "file", "web"],
                    "attempt": rng.randint(1, 4),
                },
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("data_samples"))
    args = parser.parse_args()
    rows = make_rows(args.rows, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / "trajectories.jsonl"
    with jsonl.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), args.out / "trajectories.parquet", row_group_size=16)
    print(f"wrote {len(rows)} rows to {jsonl} and {args.out / 'trajectories.parquet'}")


if __name__ == "__main__":
    main()
