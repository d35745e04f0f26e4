"""The conversation model every stage works on: turns of system/human/gpt/tool text.

Dialects (`dialects/`) translate rows to and from it; nothing here knows row keys.
"""

from __future__ import annotations

import json
from typing import Any

from . import json_text

Turn = dict[str, Any]
Trajectory = list[Turn]
Row = dict[str, Any]

ROLES = ("system", "human", "gpt", "tool")
SUMMARY_PREFIX = "[CONTEXT SUMMARY]:"
# Set on a turn that is a tool call spelled as a turn of its own (LLaMA-Factory's
# `function_call`, whose value is the call's JSON): every summarizer reads it as a call.
CALL_TURN = "_call"


def call_view(turns: list[Turn]) -> list[Turn]:
    """``turns`` as a summarizer reads them: a call turn's JSON in a ``<tool_call>`` block
    (one per call of a JSON list of calls), as Hermes and OpenAI rows spell their calls;
    the other turns as they are."""
    return [{**t, "value": _call_blocks(str(t["value"]))} if t.get(CALL_TURN) else t
            for t in turns]


def _call_blocks(value: str) -> str:
    calls: Any = None
    if value.lstrip().startswith("["):
        try:
            calls = json_text.loads(value)
        except ValueError:
            calls = None
    if not isinstance(calls, list) or not calls:
        return f"<tool_call>\n{value}\n</tool_call>"
    return "\n".join(f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"
                     for call in calls)


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type, for messages about rows."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
