"""Write small samples of each dialect the tool reads (seeded, deterministic).

    python scripts/make_dialect_samples.py [--rows 10] [--seed 11] [--out data_samples]

The trajectories come from `make_samples.py`'s generator (our own synthetic agent runs)
and are spelled three more ways:
- ``llamafactory_sharegpt.json``: a JSON array in LLaMA-Factory's ShareGPT spelling:
  ``conversations`` of human / function_call / observation / gpt turns that alternate,
  the system prompt in a ``system`` column and the tool schemas as a JSON string in a
  ``tools`` column;
- ``openai_messages.jsonl``: OpenAI ``messages`` with assistant ``tool_calls`` (content
  null, arguments as JSON strings), ``tool`` messages with ``tool_call_id``, a user
  message whose content is a list of parts, per-message ``weight``, a ``tools`` list;
- ``llamafactory_messages.jsonl``: LLaMA-Factory's newer ``messages`` rows, content as
  parts ``{"type": "text" | "reasoning" | "tool_call", "value": ...}``, tool results
  answering by position (no ids), ``loss_weight`` per message.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_samples import TOOLS, make_rows

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_THINK = re.compile(r"<think>\s*(.*?)\s*</think>\s*", re.DOTALL)


def _split_gpt(value: str) -> tuple[str, str, list[dict[str, Any]]]:
    """A Hermes gpt turn as (reasoning, text, calls)."""
    think = _THINK.search(value)
    reasoning = think.group(1) if think else ""
    rest = _THINK.sub("", value)
    calls = [json.loads(block) for block in _CALL.findall(rest)]
    text = _CALL.sub("", rest).strip()
    return reasoning, text, calls


def _steps(turns: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The turns as ("system"|"user"|"assistant"|"tools", payload) steps; consecutive tool
    turns (the answers to one assistant turn's calls) become one "tools" step."""
    steps: list[tuple[str, Any]] = []
    for turn in turns:
        role, value = turn["from"], turn["value"]
        if role == "tool":
            if steps and steps[-1][0] == "tools":
                steps[-1][1].append(value)
            else:
                steps.append(("tools", [value]))
        elif role == "gpt":
            steps.append(("assistant", _split_gpt(value)))
        else:
            steps.append(("system" if role == "system" else "user", value))
    return steps


def llamafactory_sharegpt(row: dict[str, Any]) -> dict[str, Any]:
    steps = _steps(row["conversations"])
    system = next(v for k, v in steps if k == "system")
    conversations = []
    for kind, payload in steps:
        if kind == "user":
            conversations.append({"from": "human", "value": payload})
        elif kind == "assistant":
            _, text, calls = payload
            if calls:
                value = calls[0] if len(calls) == 1 else calls
                conversations.append({"from": "function_call",
                                      "value": json.dumps(value, ensure_ascii=False)})
            else:
                conversations.append({"from": "gpt", "value": text})
        elif kind == "tools":
            conversations.append({"from": "observation", "value": "\n".join(payload)})
    return {"id": row["id"], "conversations": conversations, "system": system.split("\n")[0],
            "tools": json.dumps(TOOLS, ensure_ascii=False), "reward": row["reward"]}


def openai_messages(row: dict[str, Any], index: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    pending: list[str] = []
    for n, (kind, payload) in enumerate(_steps(row["conversations"])):
        if kind == "system":
            messages.append({"role": "system", "content": payload.split("\n")[0]})
        elif kind == "user":
            content: Any = payload
            if index % 2 == 0:
                content = [{"type": "text", "text": payload}]
            messages.append({"role": "user", "content": content})
        elif kind == "assistant":
            _, text, calls = payload
            message: dict[str, Any] = {"role": "assistant",
                                       "content": text or None, "weight": 1}
            if calls:
                pending = [f"call_{n}_{k}" for k in range(len(calls))]
                message["tool_calls"] = [
                    {"id": call_id, "type": "function",
                     "function": {"name": call["name"],
                                  "arguments": json.dumps(call["arguments"],
                                                          ensure_ascii=False)}}
                    for call_id, call in zip(pending, calls, strict=True)]
            messages.append(message)
        elif kind == "tools":
            for call_id, result in zip(pending, payload, strict=False):
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return {"id": row["id"], "messages": messages,
            "tools": [{"type": "function", "function": t} for t in TOOLS],
            "metadata": row["metadata"]}


def llamafactory_messages(row: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for kind, payload in _steps(row["conversations"]):
        if kind == "system":
            messages.append({"role": "system",
                             "content": [{"type": "text", "value": payload.split("\n")[0]}]})
        elif kind == "user":
            messages.append({"role": "user", "content": [{"type": "text", "value": payload}],
                             "loss_weight": 0.0})
        elif kind == "assistant":
            reasoning, text, calls = payload
            parts: list[dict[str, Any]] = []
            if reasoning:
                parts.append({"type": "reasoning", "value": reasoning})
            if text:
                parts.append({"type": "text", "value": text})
            parts += [{"type": "tool_call", "value": json.dumps(c, ensure_ascii=False)}
                      for c in calls]
            messages.append({"role": "assistant", "content": parts, "loss_weight": 1.0})
        elif kind == "tools":
            for result in payload:
                messages.append({"role": "tool", "content": [{"type": "text", "value": result}],
                                 "loss_weight": 0.0})
    return {"messages": messages, "tools": json.dumps(TOOLS, ensure_ascii=False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path("data_samples"))
    args = parser.parse_args()
    rows = make_rows(args.rows, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "llamafactory_sharegpt.json").open("w", encoding="utf-8") as f:
        json.dump([llamafactory_sharegpt(r) for r in rows], f, ensure_ascii=False, indent=1)
        f.write("\n")
    for name, convert in (("openai_messages.jsonl", openai_messages),
                          ("llamafactory_messages.jsonl", None)):
        with (args.out / name).open("w", encoding="utf-8") as f:
            for i, r in enumerate(rows):
                out = convert(r, i) if convert else llamafactory_messages(r)
                f.write(json.dumps(out, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows in each dialect to {args.out}")


if __name__ == "__main__":
    main()
