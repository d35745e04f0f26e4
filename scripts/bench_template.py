"""Chat-template token counting against the raw tokenizer over the same rendered text.

    .venv/bin/python scripts/bench_template.py [--rows 2000] [--runs 3] [--seed 0]

Builds a local tokenizer folder (the bundled DeepSeek files plus the ChatML-like test
template), generates agent-shaped rows (system prompt, tools, user/assistant/tool turns
with tool calls), renders each row once, then times, interleaved and best of ``--runs``
(the machines are shared and noisy):

- raw:     ``tokenizer(rendered_texts)``, the batch encode of the rendered rows (the limit);
- fast:    the backend's ``encode_batch_fast`` (no offsets) over the same texts, for scale;
- totals:  ``TemplateCounter.count_totals(rows)``: render + count, the skip path;
- shares:  ``TemplateCounter.count_many_rows(rows)``: render + count + per-message shares.

Prints each time and the ratios raw/totals and raw/shares (the target: skip path >= 0.8).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.template_tokenizer import CHATML, load_template_tokenizer  # noqa: E402
from trajectory_compressor.counting.template import TemplateCounter  # noqa: E402

WORDS = [
    "the", "agent", "reads", "a", "file", "then", "runs", "tests", "and", "fixes", "failing",
    "import", "数据", "训练", "模型", "émigré", "naïve", "résumé", "def", "class", "return",
    "self", "value", "path", "config", "(x)", "->", "==", "42", "2024-05-01",
]
TOOLS = [
    {"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ')} in the workspace.",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}},
                       "required": ["arg"]}}}
    for name in ("terminal", "read_file", "write_file", "web_search")
]


def _text(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    for i in range(0, len(words), 12):
        words[i] += "\n" if rng.random() < 0.3 else ""
    return " ".join(words)


def make_rows(n: int, seed: int) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Agent-shaped rows: a system prompt, a task, then assistant calls and tool results."""
    rng = random.Random(seed)
    rows = []
    for r in range(n):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent. " + _text(rng, 20, 60)},
            {"role": "user", "content": _text(rng, 10, 120)},
        ]
        for k in range(rng.randint(2, 12)):
            cid = f"call_{r}_{k}"
            name = rng.choice(TOOLS)["function"]["name"]
            messages.append({
                "role": "assistant", "content": _text(rng, 0, 40) or None,
                "tool_calls": [{"id": cid, "type": "function", "function": {
                    "name": name, "arguments": json.dumps({"arg": _text(rng, 1, 10)})}}]})
            messages.append({"role": "tool", "tool_call_id": cid,
                             "content": _text(rng, 5, 200)})
        messages.append({"role": "assistant", "content": _text(rng, 5, 80)})
        rows.append((messages, TOOLS))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_template_tokenizer(Path(tmp) / "tok", CHATML)
    counter = TemplateCounter(tokenizer)
    rows = make_rows(args.rows, args.seed)
    texts = [counter.render(m, t) for m, t in rows]
    chars = sum(len(t) for t in texts)

    backend = tokenizer.backend_tokenizer
    times: dict[str, list[float]] = {"raw": [], "fast": [], "totals": [], "shares": []}
    results: dict[str, Any] = {}
    cases = {
        "raw": lambda: [len(ids) for ids in tokenizer(texts)["input_ids"]],
        "fast": lambda: [len(e) for e in backend.encode_batch_fast(texts,
                                                                   add_special_tokens=False)],
        "totals": lambda: counter.count_totals(rows),
        "shares": lambda: [sum(s) for s in counter.count_many_rows(rows)],
    }
    for _ in range(args.runs):
        for name, run in cases.items():
            start = time.perf_counter()
            results[name] = run()
            times[name].append(time.perf_counter() - start)
    assert len({json.dumps(r) for r in results.values()}) == 1, "counts differ"

    tokens = sum(results["raw"])
    best = {name: min(t) for name, t in times.items()}
    print(f"{args.rows} rows, {sum(len(m) for m, _ in rows)} messages, "
          f"{chars} rendered chars, {tokens} tokens; best of {args.runs}")
    for name, seconds in best.items():
        print(f"  {name:<7} {seconds:7.3f} s  {tokens / seconds / 1e3:8.1f} k tokens/s")
    print(f"  ratio raw/totals (skip path): {best['raw'] / best['totals']:.3f}")
    print(f"  ratio raw/shares (attributed): {best['raw'] / best['shares']:.3f}")
    print(f"  ratio fast/totals: {best['fast'] / best['totals']:.3f}")


if __name__ == "__main__":
    main()
