"""Small trajectories with known token counts, and in-process compress runs over them."""

from __future__ import annotations

import json
import random
from functools import partial
from pathlib import Path

from trajectory_compressor import dialects
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import Summarizer
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.layout import plan_layout
from trajectory_compressor.engine.local import RunOptions, RunResult, run_pipeline
from trajectory_compressor.formats.registry import discover_inputs

ROLES = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}


def words(n: int) -> str:
    """A text of exactly ``n`` tokens with the bundled tokenizer ("word" is one token)."""
    return "word" + " word" * (n - 1)


def count_words(texts: list[str]) -> list[int]:
    """A stand-in token counter for pure tests: one token a whitespace-separated word."""
    return [len(t.split()) for t in texts]


def row(row_id: str, roles: str, sizes: list[int]) -> dict:
    assert len(roles) == len(sizes)
    return {"id": row_id, "conversations": [{"from": ROLES[r], "value": words(n)}
                                            for r, n in zip(roles, sizes, strict=True)]}


# target_max_tokens 100, summary_target_tokens 20, last 4 turns protected, no notice.
HAND_CONFIG = {"target_max_tokens": 100, "summary_target_tokens": 20,
               "add_summary_notice": False}
HAND_ROWS = [
    # 35 tokens: under the target.
    row("short", "SHGTHG", [10, 5, 5, 5, 5, 5]),
    # 205: head 0-3, tail 8-11, middle 4-7 (160 tokens) is all needed (125): fits.
    row("fits", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]),
    # 265: head 25 + tail 120 = 145 > 100 even after the whole middle goes.
    row("big-tail", "SHGTGTGTGTGT", [10, 5, 5, 5, 30, 30, 30, 30, 30, 30, 30, 30]),
    # 120: four turns, all protected, nothing in between.
    row("no-middle", "SHGT", [50, 50, 10, 10]),
    # 195: middle 4-5 holds 10 tokens, not more than a 20-token summary.
    row("small-middle", "SHGTGTGTGT", [10, 5, 5, 5, 5, 5, 40, 40, 40, 40]),
]


def write_jsonl(path: Path, rows: list, extra_lines: tuple[str, ...] = ()) -> Path:
    lines = [json.dumps(r, ensure_ascii=False) for r in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def generated_rows(seed: int, n: int = 40) -> list[dict]:
    """Hermes-like rows of assorted lengths, many near the targets used in the tests."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        system = "You are an agent with tools. " * rng.randint(1, 30)
        task = f"Task {i}: fix src/app_{i}.py " + words(rng.randint(3, 60))
        turns = [{"from": "system", "value": system}, {"from": "human", "value": task}]
        for j in range(rng.randint(0, 14)):
            call = {"name": rng.choice(["terminal", "read_file", "search"]),
                    "arguments": {"path": f"/repo/mod_{j}.py", "command": f"pytest -k t{j}"}}
            turns.append({"from": "gpt", "value": f"Step {j}. <tool_call>{json.dumps(call)}"
                          f"</tool_call> " + words(rng.randint(1, 40))})
            for _ in range(rng.choice([0, 1, 1, 2])):
                out_text = "\n".join(f"line {k}: " + words(rng.randint(1, 30))
                                     for k in range(rng.randint(1, 12)))
                code = rng.choice([0, 0, 1])
                turns.append({"from": "tool", "value": "<tool_response>" + json.dumps(
                    {"stdout": out_text, "exit_code": code}) + "</tool_response>"})
        turns.append({"from": "gpt", "value": "Done. " + words(rng.randint(1, 20))})
        out.append({"id": f"gen-{seed}-{i}", "conversations": turns})
    return out


def compress_run(input_path: Path, output: Path, config: CompressionConfig, counter,
                 summarizer: Summarizer | None = None,
                 options: RunOptions | None = None, detect: bool = False) -> RunResult:
    """A real `compress` run in-process (the pipeline, sinks and sidecars); ``detect``:
    each file's dialect detected as the CLI does (else Hermes ShareGPT)."""
    inputs = discover_inputs(str(input_path))
    layout = plan_layout(str(input_path), inputs, str(output), config,
                         single_file=input_path.is_file())
    compressor = TrajectoryCompressor(config, summarizer=summarizer, counter=counter)
    dialect = partial(dialects.detect, config=config) if detect else None
    return run_pipeline(compressor, inputs, layout, options or RunOptions(quiet=True),
                        dialect)


def long_hermes_row(row_id: str, **extra: object) -> dict:
    """A Hermes row of 14 turns of about 13 tokens, tool turns among them: over a
    150-token target by a few turns."""
    filler = " ".join(f"w{i}" for i in range(5))
    roles = ["system", "human", "gpt", "tool", "gpt", "tool", "gpt", "tool", "gpt", "human",
             "gpt", "tool", "gpt", "human"]
    return {"id": row_id, **extra,
            "conversations": [{"from": r, "value": f"{r} {i} {filler}"}
                              for i, r in enumerate(roles)]}
