"""Convert recorded SWE-agent trajectories (`*.traj`) into OpenAI `messages` JSONL rows.

The benchmarks of the strategies, distill and windows are measured on real agent runs:
SWE-agent's repository ships recorded trajectories as demonstrations and test data. Their
text is not committed here; this converter reads them from a path given on the command
line (a `.traj` file or a folder searched recursively) and writes one row per trajectory:

    python scripts/convert_sweagent.py PATH_TO_SWE_AGENT_CHECKOUT -o /tmp/real.jsonl

Each assistant step becomes an assistant message whose `tool_calls` carry the step's
action (the recorded call where the run used function calling, else one call of the
action's first word with the whole command line as its `command` argument), and the
observation that follows becomes the `tool` message answering it. The system prompt and
the task stay `system` and `user` messages. Rows are sorted by path, ids are the path
relative to the given folder.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any


def _recorded_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    raw = message.get("tool_calls")
    if not raw:
        return []
    if isinstance(raw, str):  # some runs store the list as its Python repr
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return []
    calls = []
    for call in raw if isinstance(raw, list) else []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append({"id": str(call.get("id") or f"call_{len(calls)}"), "type": "function",
                      "function": {"name": str(function.get("name", "tool")),
                                   "arguments": arguments}})
    return calls


def _action_call(action: str, index: int) -> dict[str, Any]:
    action = action.strip()
    name = action.split(maxsplit=1)[0] if action else "bash"
    return {"id": f"call_{index}", "type": "function",
            "function": {"name": name, "arguments": json.dumps({"command": action})}}


def convert(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One trajectory's history as OpenAI messages with `tool_calls` and `tool` answers."""
    messages: list[dict[str, Any]] = []
    pending: list[str] = []  # call ids of the last assistant step not yet answered
    for index, message in enumerate(history):
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(str(part.get("text", "")) for part in content
                              if isinstance(part, dict))
        content = "" if content is None else str(content)
        if role == "system":
            messages.append({"role": "system", "content": content})
        elif role == "assistant":
            calls = _recorded_calls(message)
            action = message.get("action")
            if not calls and isinstance(action, str) and action.strip():
                calls = [_action_call(action, index)]
            thought = message.get("thought")
            text = thought if isinstance(thought, str) and calls else content
            out: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                out["tool_calls"] = calls
            messages.append(out)
            pending = [call["id"] for call in calls]
        elif pending and role in ("user", "tool"):
            messages.append({"role": "tool", "tool_call_id": pending[0], "content": content})
            for extra in pending[1:]:  # several calls answered by one observation
                messages.append({"role": "tool", "tool_call_id": extra, "content": ""})
            pending = []
        else:
            messages.append({"role": "user", "content": content})
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a .traj file or a folder with .traj files")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the JSONL to write")
    args = parser.parse_args(argv)
    paths = [args.source] if args.source.is_file() else sorted(args.source.rglob("*.traj"))
    root = args.source if args.source.is_dir() else args.source.parent
    written = 0
    with args.output.open("w", encoding="utf-8") as out:
        for path in paths:
            data = json.loads(path.read_text(encoding="utf-8"))
            history = data.get("history") if isinstance(data, dict) else None
            if not isinstance(history, list) or not history:
                print(f"{path}: no history, skipped", file=sys.stderr)
                continue
            row = {"id": str(path.relative_to(root)), "messages": convert(history)}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            written += 1
    print(f"{written} trajectories written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
