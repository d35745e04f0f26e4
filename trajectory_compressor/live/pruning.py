"""Phase 1, no LLM: shrink old tool traffic before it is summarized (§10).

Outside the protected tail,
- a large tool result becomes one line saying which tool ran on what, how it went and how
  big the output was;
- a tool result identical to a newer one becomes a pointer to the newer copy;
- a large string argument of a tool call is cut to its beginning, keeping the JSON valid.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core import json_text
from ..core.extractive import ERROR_LINE, KEY_ARGS, clip, response_text
from .messages import (
    Message,
    call_arguments,
    call_name,
    role_of,
    text_of,
    tool_calls_of,
    with_content,
)

# Results shorter than this already read as well as their description would.
PRUNE_MIN_CHARS = 400
# Shorter duplicates are not worth a pointer.
DEDUPE_MIN_CHARS = 100
# A tool-call argument string is cut to this many characters.
ARGUMENT_MAX_CHARS = 500
_SHOWN_ARG_CHARS = 80
PRUNED_TAG = "[tool result pruned]"
DUPLICATE_TAG = "[duplicate tool result:"
_SHOWN_LINE_CHARS = 120


@dataclass
class PruneStats:
    """What phase 1 changed."""

    described: int = 0
    deduplicated: int = 0
    truncated_calls: int = 0


def prune(messages: Sequence[Message], start: int, end: int) -> tuple[list[Message], PruneStats]:
    """Copies of ``messages[start:end]`` with phase 1 applied; the input is not modified.

    Messages from ``end`` on are read (a result identical to one of them is a duplicate)
    but never changed: they are the protected tail.
    """
    stats = PruneStats()
    calls = {str(call.get("id")): call for m in messages for call in tool_calls_of(m)}
    newest: dict[str, int] = {}
    for i, message in enumerate(messages):
        if role_of(message) == "tool" and isinstance(message.get("content"), str):
            newest[message["content"]] = i
    out: list[Message] = []
    for i in range(start, end):
        message = messages[i]
        content = message.get("content")
        if role_of(message) == "tool" and isinstance(content, str):
            call = calls.get(str(message.get("tool_call_id")))
            name = call_name(call) if call else str(message.get("name") or "tool")
            later = newest.get(content, i)
            if later > i and len(content) >= DEDUPE_MIN_CHARS:
                stats.deduplicated += 1
                message = with_content(message, f"{DUPLICATE_TAG} same output as the "
                                                f"newer {name} result in message {later}]")
            elif len(content) >= PRUNE_MIN_CHARS:
                stats.described += 1
                message = with_content(message, describe_result(name, call, content))
        elif tool_calls_of(message):
            message, truncated = _truncate_calls(message)
            stats.truncated_calls += truncated
        out.append(message)
    return out, stats


def describe_result(name: str, call: dict[str, Any] | None, content: str) -> str:
    """One line for a tool result: tool, key argument, outcome, size."""
    outcome, _ = outcome_of(content)
    # Lines of the output itself: a JSON-wrapped output has its newlines escaped.
    lines = response_text(content)[0].count("\n") + 1
    return (f"{PRUNED_TAG} {call_label(name, call)} → {outcome} "
            f"[{len(content):,} chars, {lines:,} lines]")


def call_label(name: str, call: dict[str, Any] | None) -> str:
    """``name(key=argument)``: which tool ran on what."""
    argument = key_argument(call_arguments(call)) if call else ""
    return f"{name}({argument})"


def outcome_of(content: str) -> tuple[str, bool]:
    """How a tool call went, in a few words, and whether it failed."""
    body, exit_code = response_text(content)
    errors = [line for line in body.splitlines() if ERROR_LINE.search(line)]
    if exit_code not in (None, 0):
        detail = f": {clip(errors[-1], _SHOWN_LINE_CHARS)}" if errors else ""
        return f"exit {exit_code}{detail}", True
    if errors:
        return f"error: {clip(errors[-1], _SHOWN_LINE_CHARS)}", True
    first = next((line for line in body.splitlines() if line.strip()), "")
    outcome = "ok" + (f" (exit {exit_code})" if exit_code == 0 else "")
    return outcome + (f": {clip(first, _SHOWN_LINE_CHARS)}" if first else ""), False


def key_argument(arguments: str) -> str:
    """The argument that says what a call was about (``path=…``, ``command=…``, …)."""
    try:
        args = json_text.loads(arguments) if arguments else {}
    except ValueError:
        return clip(arguments, _SHOWN_ARG_CHARS)
    if not isinstance(args, dict):
        return clip(str(args), _SHOWN_ARG_CHARS)
    key = next((k for k in KEY_ARGS if k in args), next(iter(args), None))
    return "" if key is None else f"{key}={clip(str(args[key]), _SHOWN_ARG_CHARS)}"


def _truncate_calls(message: Message) -> tuple[Message, int]:
    """``message`` with large tool-call arguments cut; how many calls were cut."""
    calls = []
    truncated = 0
    for call in message.get("tool_calls") or []:
        arguments = call_arguments(call) if isinstance(call, dict) else ""
        if len(arguments) <= ARGUMENT_MAX_CHARS:
            calls.append(call)
            continue
        truncated += 1
        function = {**call.get("function", {}), "arguments": truncate_arguments(arguments)}
        calls.append({**call, "function": function})
    if not truncated:
        return message, 0
    copy = dict(message)
    copy["tool_calls"] = calls
    return copy, truncated


def truncate_arguments(arguments: str, limit: int = ARGUMENT_MAX_CHARS) -> str:
    """Arguments with every long string value cut to ``limit`` characters.

    Cutting inside the JSON text would leave arguments no provider accepts; cutting the
    string values keeps the JSON valid and the keys readable.
    """
    try:
        args = json_text.loads(arguments)
    except ValueError:
        return f"{arguments[:limit]}…[{len(arguments) - limit} characters cut]"

    def cut(value: Any) -> Any:
        if isinstance(value, str) and len(value) > limit:
            return f"{value[:limit]}…[{len(value) - limit} characters cut]"
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, list):
            return [cut(v) for v in value]
        return value

    return json.dumps(cut(args), ensure_ascii=False)


def is_pruned(message: Message) -> bool:
    """Whether phase 1 replaced this message's content."""
    return text_of(message).startswith((PRUNED_TAG, DUPLICATE_TAG))
