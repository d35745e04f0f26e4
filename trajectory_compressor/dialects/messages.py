"""OpenAI-style ``messages`` rows (OpenAI fine-tuning, TRL, axolotl, LLaMA-Factory) (§14).

A row holds ``messages`` of ``{"role", "content", ...}``: roles system/developer, user,
assistant, tool (and the legacy ``function``). ``content`` is a string, null (an assistant
message that only calls tools) or a list of parts: ``{"type": "text", "text": …}`` in
OpenAI's spelling, ``{"type": "text" | "reasoning" | "tool_call", "value": …}`` in
LLaMA-Factory's. Assistant ``tool_calls`` carry ``function.arguments`` (a JSON string or
an object); a tool message answers one of them by ``tool_call_id`` or, without ids, by
position. Per-message extra keys (``loss_weight``, ``weight``, ``name``, …) are kept.
The row may have ``tools``: a list of schemas or the same as a JSON string.

Each message becomes one turn whose text is what the reference would count for it: the
text parts, then each tool call rendered as a Hermes ``<tool_call>`` block. Messages the
compressor does not replace are written back as the very objects that were read.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ..core import json_text
from ..core.conversation import Row, Trajectory, json_type
from ..core.errors import RowError
from ..core.plan import ANY_BUT_TOOL, Boundaries
from .base import SOURCE, parse_tools, summary_weights
from .openai import render_tool_call

ROLES = {"system": "system", "developer": "system", "user": "human", "assistant": "gpt",
         "tool": "tool", "function": "tool"}
# Part types whose text is counted; other parts (images, audio) are kept but not counted.
TEXT_PARTS = ("text", "reasoning", "thinking", "input_text", "output_text")


class Messages:
    """The OpenAI ``messages`` dialect (column name configurable)."""

    name = "openai"

    def __init__(self, column: str = "messages", tools: str | None = "tools",
                 summary_role: str = "user") -> None:
        self.column = column
        self.tools = tools
        self.summary_role = summary_role

    def turns(self, row: Any) -> Trajectory:
        if not isinstance(row, dict):
            raise RowError(f"row is a JSON {json_type(row)}, expected an object")
        messages = row.get(self.column)
        if not isinstance(messages, list):
            raise RowError(f"row has no {self.column!r} list" if self.column not in row else
                           f"{self.column!r} is a JSON {json_type(messages)}, expected a list")
        if self.tools and row.get(self.tools) is not None:
            _check_tools(row[self.tools], self.tools)
        turns: Trajectory = []
        open_calls: list[str | None] = []  # calls of the last assistant not answered yet
        for i, message in enumerate(messages):
            where = f"{self.column}[{i}]"
            if not isinstance(message, dict):
                raise RowError(f"{where} is a JSON {json_type(message)}, expected an object")
            tag = message.get("role")
            role = ROLES.get(tag) if isinstance(tag, str) else None
            if role is None:
                raise RowError(f"{where}.role is {message.get('role')!r}, not one of "
                               f"{', '.join(ROLES)}")
            text = _content_text(message.get("content"), f"{where}.content")
            if role == "gpt":
                calls = _tool_calls(message, where)
                # LLaMA-Factory rows put calls in tool_call parts, answered by position.
                part_calls: list[str | None] = [None for p in message.get("content") or []
                              if isinstance(p, dict) and p.get("type") == "tool_call"]
                open_calls = [call_id for call_id, _ in calls] + part_calls
                text = "\n".join(p for p in (text, *(block for _, block in calls)) if p)
            elif role == "tool":
                _answer(open_calls, message, where)
            else:
                open_calls = []
            turns.append({"from": role, "value": text, SOURCE: message})
        return turns

    def boundaries(self, turns: Trajectory) -> Boundaries:
        # Tool messages follow their assistant message: a region that never starts or ends
        # on a tool message never separates a result from its call.
        return ANY_BUT_TOOL

    def with_turns(self, row: Row, turns: Trajectory, summary_at: int | None = None) -> Row:
        messages = row.get(self.column) or []
        out: list[Any] = []
        for i, turn in enumerate(turns):
            original = turn.get(SOURCE)
            if i == summary_at or original is None:
                out.append({"role": self.summary_role,
                            "content": _like_content(messages, turn["value"]),
                            **summary_weights(messages)})
            elif turn["from"] == "system" and _content_text(original.get("content"), "") \
                    != turn["value"]:
                out.append(_with_suffix(original, turn["value"]))
            elif turn["from"] == "tool" and _content_text(original.get("content"), "") \
                    != turn["value"]:
                out.append(_with_text(original, turn["value"]))  # a shortened output
            else:
                out.append(original)
        new_row = dict(row)
        new_row[self.column] = out
        return new_row

    def template_messages(
        self, row: Row, turns: Trajectory
    ) -> tuple[list[dict[str, Any]], list[Any] | None]:
        """OpenAI messages as chat templates take them: text content, ``tool_calls`` with
        arguments as objects, ``tool_call_id`` kept."""
        messages = []
        for turn in turns:
            original = turn.get(SOURCE)
            if original is None:
                messages.append({"role": self.summary_role, "content": turn["value"]})
                continue
            role = original["role"]
            message: dict[str, Any] = {
                "role": "system" if role == "developer" else "tool" if role == "function"
                else role,
                "content": _content_text(original.get("content"), "")}
            if role == "assistant":
                calls = _template_calls(original)
                if calls:
                    message["tool_calls"] = calls
            for key in ("tool_call_id", "name"):
                if key in original:
                    message[key] = original[key]
            messages.append(message)
        return messages, parse_tools(row.get(self.tools)) if self.tools else None

    def text_chars(self, row: Any) -> int:
        messages = row.get(self.column) if isinstance(row, dict) else None
        if not isinstance(messages, list):
            return 0
        total = 0
        for m in messages:
            if isinstance(m, dict):
                content = m.get("content")
                if isinstance(content, str):
                    total += len(content)
                elif isinstance(content, list):
                    total += sum(len(str(p.get("text") or p.get("value") or ""))
                                 for p in content if isinstance(p, dict))
        return total


def _content_text(content: Any, where: str) -> str:
    """The counted text of a message's content (a string, null or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RowError(f"{where} is a JSON {json_type(content)}, expected a string, null or "
                       "a list of parts")
    texts = []
    for k, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise RowError(f"{where}[{k}] is a JSON {json_type(part)}, expected an object")
        kind = part.get("type")
        value = part.get("text", part.get("value"))
        if kind == "tool_call":
            texts.append(_part_call(value, f"{where}[{k}]"))
        elif kind in TEXT_PARTS or (kind is None and isinstance(value, str)):
            if not isinstance(value, str):
                raise RowError(f"{where}[{k}] has no string 'text' or 'value'")
            texts.append(value)
    return "\n".join(texts)


def _part_call(value: Any, where: str) -> str:
    """A LLaMA-Factory ``tool_call`` part: ``{"name", "arguments"}`` as JSON text or object."""
    call = value
    if isinstance(value, str):
        try:
            call = json_text.loads(value)
        except ValueError:
            raise RowError(f"{where} is a tool_call whose value is not JSON") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise RowError(f"{where} is a tool_call without a 'name'")
    return render_tool_call(call["name"], call.get("arguments", {}))


def _tool_calls(message: dict[str, Any], where: str) -> list[tuple[str | None, str]]:
    """``(id, rendered block)`` of each call of an assistant message."""
    calls = message.get("tool_calls")
    if calls is None:
        legacy = message.get("function_call")
        calls = [{"function": legacy}] if isinstance(legacy, dict) else []
    if not isinstance(calls, list):
        raise RowError(f"{where}.tool_calls is a JSON {json_type(calls)}, expected a list")
    out = []
    for k, call in enumerate(calls):
        at = f"{where}.tool_calls[{k}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RowError(f"{at} has no function name")
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json_text.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                # Say why when it is the depth (`json_text`): the text may look fine.
                deep = isinstance(exc, json.JSONDecodeError) and exc.msg.startswith("nested")
                why = f" ({exc.msg})" if isinstance(exc, json.JSONDecodeError) and deep else ""
                raise RowError(f"{at}.function.arguments is not valid JSON{why}") from None
        call_id = call.get("id")
        out.append((call_id if isinstance(call_id, str) else None,
                    render_tool_call(function["name"], arguments)))
    return out


def _answer(open_calls: list[str | None], message: dict[str, Any], where: str) -> None:
    """Check that a tool message answers a call of the assistant message before it."""
    if not open_calls:
        raise RowError(f"{where} is a tool result with no assistant tool call before it")
    call_id = message.get("tool_call_id")
    if isinstance(call_id, str) and any(isinstance(c, str) for c in open_calls):
        if call_id not in open_calls:
            raise RowError(f"{where}.tool_call_id {call_id!r} answers no call of the "
                           "assistant message before it")
        open_calls.remove(call_id)
    else:
        open_calls.pop(0)  # answered by position (LLaMA-Factory rows carry no ids)


def _check_tools(value: Any, column: str) -> None:
    if isinstance(value, str):
        if not value.strip():
            return
        try:
            value = json_text.loads(value)
        except ValueError as exc:
            raise RowError(f"{column!r} is not valid JSON ({exc})") from None
    if not isinstance(value, list):
        raise RowError(f"{column!r} is a JSON {json_type(value)}, expected a list of tool "
                       "schemas")


def _like_content(messages: list[Any], text: str) -> Any:
    """The summary's content in the spelling the row's own messages use."""
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            return text
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    key = "value" if "value" in part and "text" not in part else "text"
                    return [{"type": "text", key: text}]
    return text


def _with_suffix(message: dict[str, Any], value: str) -> dict[str, Any]:
    """A system message whose text grew a suffix (the summary notice)."""
    content = message.get("content")
    old = _content_text(content, "")
    suffix = value[len(old):] if value.startswith(old) else value
    if isinstance(content, list):
        key = "text"
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                key = "value" if "value" in part and "text" not in part else "text"
        return {**message, "content": [*content, {"type": "text", key: suffix}]}
    return {**message, "content": (content or "") + suffix}


def _with_text(message: dict[str, Any], value: str) -> dict[str, Any]:
    """A tool message whose text changed (`core.elide`): the text in the content's own
    spelling, other parts (images) kept after it."""
    content = message.get("content")
    if not isinstance(content, list):
        return {**message, "content": value}
    key, others = "text", []
    for part in content:
        if isinstance(part, dict) and (part.get("type") in TEXT_PARTS or (
                part.get("type") is None and isinstance(part.get("text", part.get("value")),
                                                        str))):
            key = "value" if "value" in part and "text" not in part else "text"
        elif not isinstance(part, str):
            others.append(part)
    return {**message, "content": [{"type": "text", key: value}, *others]}


def _template_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message's calls in the shape chat templates read."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # kept as text: the row was validated
                arguments = json_text.loads(arguments) if arguments.strip() else {}
        calls.append({"id": call.get("id"), "type": "function",
                      "function": {"name": function.get("name"), "arguments": arguments}})
    return calls
