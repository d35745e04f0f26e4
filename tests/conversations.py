"""OpenAI-format agent conversations for the live and parity tests, and their invariants."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from trajectory_compressor.live.markers import is_summary_text

WORDS = ["the", "build", "cache", "worker", "parser", "index", "retry", "config", "données",
         "模型", "schema", "latency", "deploy", "queue", "token", "stream"]
TOOLS = ["terminal", "read_file", "write_file", "web_search"]


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def tool_call(call_id: str, name: str, rng: random.Random) -> dict[str, Any]:
    key = {"terminal": "command", "web_search": "query"}.get(name, "path")
    value = f"src/{rng.choice(WORDS)}.py" if key == "path" else words(rng, 3)
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps({key: value})}}


def tool_output(name: str, rng: random.Random, size: int) -> str:
    lines = [words(rng, 8) for _ in range(max(1, size // 8))]
    if name == "terminal":
        failed = rng.random() < 0.3
        if failed:
            lines.append("ValueError: bad " + rng.choice(WORDS))
        return json.dumps({"stdout": "\n".join(lines), "exit_code": 1 if failed else 0})
    return "\n".join(lines)


def conversation(
    seed: int,
    rounds: int = 3,
    steps: int = 3,
    output_words: tuple[int, int] = (40, 400),
    duplicate_every: int = 0,
    ask_last: bool = False,
) -> list[dict[str, Any]]:
    """A system prompt, then rounds of: user ask, tool-call steps (parallel calls), answer."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " + words(rng, 30)}]
    calls = 0
    repeated: str | None = None
    for r in range(rounds):
        messages.append({"role": "user", "content": f"Task {r}: " + words(rng, 12)})
        for _ in range(rng.randint(1, steps)):
            batch = []
            for _ in range(rng.randint(1, 3)):
                batch.append(tool_call(f"call_{calls}", rng.choice(TOOLS), rng))
                calls += 1
            text = words(rng, 10) if rng.random() < 0.5 else None
            messages.append({"role": "assistant", "content": text, "tool_calls": batch})
            for call in batch:
                name = call["function"]["name"]
                output = tool_output(name, rng, rng.randint(*output_words))
                if duplicate_every and calls % duplicate_every == 0:
                    repeated = repeated or output
                    output = repeated
                messages.append({"role": "tool", "tool_call_id": call["id"], "name": name,
                                 "content": output})
        messages.append({"role": "assistant", "content": "Done: " + words(rng, 25)})
    if ask_last:  # compression often runs right after the user's new message
        messages.append({"role": "user", "content": "Next: " + words(rng, 12)})
    return messages


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Generated conversations: sizes and shapes vary, the text comes from a seeded RNG."""
    return conversation(
        seed=draw(st.integers(0, 2**32)),
        rounds=draw(st.integers(1, 5)),
        steps=draw(st.integers(1, 5)),
        output_words=(20, draw(st.integers(40, 600))),
        duplicate_every=draw(st.sampled_from([0, 0, 3])),
        ask_last=draw(st.booleans()),
    )


def content(message: dict[str, Any]) -> str:
    value = message.get("content")
    return value if isinstance(value, str) else ""


def summary_indices(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Indices of summary messages (live prefix or the batch/legacy one)."""
    return [i for i, m in enumerate(messages)
            if m.get("role") in ("user", "assistant") and is_summary_text(content(m))]


def orphans(messages: Sequence[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """(calls without a result, results without a call)."""
    calls = {c["id"] for m in messages if m.get("role") == "assistant"
             for c in m.get("tool_calls") or []}
    results = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    return calls - results, {r for r in results if r not in calls}


def latest_user(messages: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    users = [m for m in messages if m.get("role") == "user" and not is_summary_text(content(m))]
    return users[-1] if users else None
