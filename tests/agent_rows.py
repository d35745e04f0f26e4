"""Realistic agent rows for the invented-facts tests and the summarizer table (issue 23).

Seeded Hermes ShareGPT rows of the kind a training set holds: a failing test run, a
build, a service log, edits; each with real-looking paths, numbers with units, error
names and hashes. Nothing here is copied from a public dataset.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SYSTEM = ("You are a coding agent with tools: terminal(command), read_file(path), "
          "write_file(path, content). Work in /srv/app.")
MODULES = ["loader", "scheduler", "billing", "ingest", "auth", "export", "cache", "router"]
ERRORS = ["KeyError", "ValueError", "TimeoutError", "ConnectionResetError",
          "AssertionError", "FileNotFoundError", "PermissionError"]


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _response(output: str, exit_code: int = 0) -> str:
    body = json.dumps({"output": output, "exit_code": exit_code})
    return f"<tool_response>\n{body}\n</tool_response>"


def _steps(rng: random.Random) -> list[tuple[str, str]]:
    mod = rng.choice(MODULES)
    err = rng.choice(ERRORS)
    field = rng.choice(["content_length", "user_id", "shard_key", "retry_after"])
    passed, failed = rng.randint(20, 180), rng.randint(1, 4)
    secs = rng.randint(150, 980) / 100
    sha = "".join(rng.choice("0123456789abcdef") for _ in range(10))
    port = rng.choice([5432, 6379, 8080, 9200])
    rss = rng.choice([512, 768, 1536, 3072])
    wait_ms = rng.choice([2500, 30000, 4500])
    line = rng.randint(40, 400)
    worker = rng.randint(1, 8)
    build_s = rng.randint(2000, 9000) / 100
    bundle_kb = rng.randint(300, 2400)
    return [
        (f"Running the {mod} tests first.",
         _call("terminal", command=f"pytest tests/test_{mod}.py -x -q")),
        ("", _response(
            f"FAILED tests/test_{mod}.py::test_parse_header - {err}: '{field}'\n"
            f"src/app/{mod}.py:{line}: in parse_header\n"
            f"{failed} failed, {passed} passed in {secs}s", 1)),
        (f"The failure is in src/app/{mod}.py line {line}. Reading it.",
         _call("read_file", path=f"/srv/app/src/app/{mod}.py")),
        ("", _response(f"def parse_header(raw):\n    size = raw['{field}']\n"
                       f"    return Header(size=size, port={port})\n")),
        ("Checking the worker log for the same error.",
         _call("read_file", path=f"/var/log/app/worker-{worker}.log")),
        ("", _response(
            f"2026-03-02 14:03:11 ERROR {err} in {mod}.parse_header after {wait_ms} ms\n"
            f"2026-03-02 14:03:12 WARN worker-{worker} RSS {rss} MB, restarting\n"
            f"2026-03-02 14:03:15 INFO connected to db:{port}")),
        (f"Fixing the missing key with a default and rebuilding (commit {sha}).",
         _call("write_file", path=f"/srv/app/src/app/{mod}.py",
               content=f"def parse_header(raw):\n    size = raw.get('{field}', 0)\n")),
        ("", _response(f"wrote 2 lines to /srv/app/src/app/{mod}.py")),
        ("Building the release bundle.", _call("terminal", command="npm run build")),
        ("", _response(f"vite v5.2.8 building for production...\n"
                       f"dist/assets/index-{sha[:8]}.js  {bundle_kb} KB\n"
                       f"built in {build_s}s")),
        ("Re-running the tests.", _call("terminal", command=f"pytest tests/test_{mod}.py -q")),
        ("", _response(f"{passed + failed} passed in {secs + 0.4:.2f}s")),
    ]


def agent_row(i: int, seed: int = 0) -> dict[str, Any]:
    """Row ``i``: a task, about a dozen tool steps, a closing answer that refers back."""
    rng = random.Random(seed * 7919 + i)
    turns: list[dict[str, Any]] = [{"from": "system", "value": SYSTEM},
                                   {"from": "human", "value": f"Ticket #{4100 + i}: the "
                                    "nightly job fails. Find out why and fix it."}]
    for text, payload in _steps(rng):
        if payload.startswith("<tool_response>"):
            turns.append({"from": "tool", "value": payload})
        else:
            turns.append({"from": "gpt", "value": f"{text}\n{payload}"})
    turns.append({"from": "human", "value": "Which file did you change, and is it green?"})
    turns.append({"from": "gpt", "value": "I changed parse_header to use a default; "
                  "the tests pass now."})
    return {"id": f"agent-{i:04d}", "conversations": turns}


def write_agent_rows(path: Path, n: int, seed: int = 0) -> Path:
    path.write_text("".join(json.dumps(agent_row(i, seed)) + "\n" for i in range(n)),
                    encoding="utf-8")
    return path
