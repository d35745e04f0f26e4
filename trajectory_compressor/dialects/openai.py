"""Conversion between ShareGPT trajectories and OpenAI chat messages (§10).

ShareGPT (Hermes style)                     OpenAI chat format
``{"from": "system", "value": T}``          ``{"role": "system", "content": T}``
``{"from": "human", "value": T}``           ``{"role": "user", "content": T}``
``{"from": "gpt", "value": T + calls}``     ``{"role": "assistant", "content": T,
                                               "tool_calls": [...]}``
``{"from": "tool", "value": response}``     ``{"role": "tool", "tool_call_id": ID,
                                               "name": N, "content": C}``

A `gpt` turn carries its calls as ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>``
blocks after its text (``<think>`` stays in the text); a `tool` turn carries
``<tool_response>\\n{"tool_call_id": …, "name": …, "content": …}\\n</tool_response>``.

Tool call ids: ShareGPT calls have none, so a call takes the ``tool_call_id`` of the response
that answers it (responses are matched to the calls of the preceding `gpt` turn by name,
then in order); a call without one gets the deterministic id ``call_<turn>_<k>``.

Round trip ShareGPT → OpenAI → ShareGPT is exact for turns in that rendering (the Hermes
one, used by the bundled samples), including per-turn extra keys such as ``weight``, which
ride along as extra message keys. A tool response in any other shape (no or foreign
``tool_call_id``, other keys, non-string content) is kept verbatim as the tool message's
content and written back unchanged. Not exact: whitespace around ``<tool_call>`` blocks
other than the Hermes rendering, text between or after the blocks (moved before them),
and a `tool` turn holding several responses (split into one message per response and
written back as one turn each), a `tool` turn without a ``<tool_response>`` block (written
back wrapped in one).

OpenAI → ShareGPT → OpenAI keeps everything but the JSON spelling of call arguments
(ShareGPT stores them as objects, so they are re-serialized) and empty assistant content
beside tool calls (``None``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..core import json_text
from ..core.conversation import Turn

Message = dict[str, Any]

ROLE_TO_OPENAI = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
ROLE_TO_SHAREGPT = {v: k for k, v in ROLE_TO_OPENAI.items()}

_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE_BLOCK = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
# Message keys the converter owns; every other key is a per-turn extra carried as is.
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id")
_TURN_KEYS = ("from", "value")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _extras(item: dict[str, Any], owned: Sequence[str]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in owned}


def render_tool_call(name: str, arguments: Any) -> str:
    """One ``<tool_call>`` block in the Hermes rendering."""
    return f"<tool_call>\n{_dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def render_tool_response(call_id: str, name: str, content: str) -> str:
    """One ``<tool_response>`` block in the Hermes rendering."""
    payload = {"tool_call_id": call_id, "name": name, "content": content}
    return f"<tool_response>\n{_dumps(payload)}\n</tool_response>"


def _parse_calls(value: str) -> tuple[str, list[tuple[str, Any]]]:
    """The text of a `gpt` turn without its call blocks, and its ``(name, arguments)`` calls.

    A block whose JSON is not a call object stays in the text: it is not a call.
    """
    calls: list[tuple[str, Any]] = []
    kept: list[str] = []
    pos = 0
    for match in _CALL_BLOCK.finditer(value):
        try:
            data = json_text.loads(match.group(1))
        except ValueError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            continue
        kept.append(value[pos:match.start()])
        pos = match.end()
        calls.append((data["name"], data.get("arguments", {})))
    if not calls:
        return value, []
    kept.append(value[pos:])
    # The Hermes rendering is TEXT + "\n" + blocks joined by "\n": drop exactly that glue.
    lead = kept[0][:-1] if kept[0].endswith("\n") else kept[0]
    rest = "".join(part for part in kept[1:] if part.strip())
    return (f"{lead}\n{rest}" if lead and rest else lead or rest), calls


def _parse_response(block: str) -> dict[str, Any] | None:
    try:
        data = json_text.loads(block)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def sharegpt_to_openai(turns: Sequence[Turn]) -> list[Message]:
    """OpenAI chat messages for a ShareGPT trajectory (new objects; the input is untouched)."""
    messages: list[Message] = []
    pending: list[Message] = []  # calls of the last gpt turn not answered yet
    used_ids: set[str] = set()
    for index, turn in enumerate(turns):
        role = ROLE_TO_OPENAI.get(str(turn.get("from")), str(turn.get("from")))
        value = turn.get("value", "")
        extras = _extras(turn, _TURN_KEYS)
        if role == "assistant" and isinstance(value, str):
            text, calls = _parse_calls(value)
            message: Message = {"role": "assistant", "content": text if text or not calls
                                else None}
            if calls:
                message["tool_calls"] = [
                    {"id": f"call_{index}_{k}", "type": "function",
                     "function": {"name": name, "arguments": args if isinstance(args, str)
                                  else _dumps(args)}}
                    for k, (name, args) in enumerate(calls)
                ]
            messages.append({**message, **extras})
            pending = list(messages[-1].get("tool_calls", []))
        elif role == "tool" and isinstance(value, str):
            messages.extend(_tool_messages(value, index, extras, pending, used_ids))
        else:
            if role != "tool":
                pending = []
            messages.append({"role": role, "content": value, **extras})
    return messages


def _tool_messages(
    value: str, index: int, extras: dict[str, Any], pending: list[Message], used_ids: set[str]
) -> list[Message]:
    """The tool messages of one `tool` turn, pairing each response with a pending call."""
    blocks = list(_RESPONSE_BLOCK.finditer(value))
    parts: list[tuple[str, dict[str, Any] | None]]
    if len(blocks) > 1 and not _RESPONSE_BLOCK.sub("", value).strip():
        parts = [(b.group(0), _parse_response(b.group(1))) for b in blocks]
    else:
        parts = [(value, _parse_response(blocks[0].group(1)) if blocks else None)]
    out: list[Message] = []
    for raw, data in parts:
        name = data.get("name") if data else None
        name = name if isinstance(name, str) else None
        answered = data.get("tool_call_id") if data else None
        answered = answered if isinstance(answered, str) and answered not in used_ids else None
        call = _take_call(pending, name)
        if call is not None:
            # The response's own id is the call's real id (unless another call took it).
            if answered is not None:
                call["id"] = answered
            call_id = call["id"]
        else:
            call_id = answered or f"call_{index}_{len(out)}_unanswered"
        used_ids.add(call_id)
        content = data.get("content") if data else None
        canonical = (isinstance(content, str) and name is not None
                     and raw == render_tool_response(call_id, name, content))
        message: Message = {"role": "tool", "tool_call_id": call_id}
        if name is not None or call is not None:
            message["name"] = name or call["function"]["name"]  # type: ignore[index]
        message["content"] = content if canonical else raw
        out.append({**message, **extras})
    return out


def _take_call(pending: list[Message], name: str | None) -> Message | None:
    """The first pending call named ``name`` (else the first pending call), removed."""
    for i, call in enumerate(pending):
        if name is None or call["function"]["name"] == name:
            return pending.pop(i)
    return pending.pop(0) if pending else None


def _text(content: Any) -> str:
    """Message content as text: OpenAI content may be None or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def openai_to_sharegpt(messages: Sequence[Message]) -> list[Turn]:
    """A ShareGPT trajectory for OpenAI chat messages (new objects; the input is untouched)."""
    turns: list[Turn] = []
    names: dict[str, str] = {}  # call id -> tool name, for tool messages without a name
    for message in messages:
        role = str(message.get("role"))
        extras = _extras(message, _MESSAGE_KEYS)
        content = _text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            blocks = []
            for call in message["tool_calls"]:
                function = call.get("function", {})
                name = str(function.get("name", "tool"))
                names[str(call.get("id"))] = name
                blocks.append(render_tool_call(name, _arguments(function.get("arguments"))))
            value = "\n".join([content, *blocks] if content else blocks)
        elif role == "tool":
            name = str(extras.pop("name", None) or names.get(str(message.get("tool_call_id")),
                                                             "tool"))
            if content.startswith("<tool_response>"):
                value = content  # kept verbatim by sharegpt_to_openai
            else:
                value = render_tool_response(str(message.get("tool_call_id", "")), name, content)
        else:
            value = content
        turns.append({"from": ROLE_TO_SHAREGPT.get(role, role), "value": value, **extras})
    return turns


def _arguments(arguments: Any) -> Any:
    """OpenAI arguments (a JSON string) as the object ShareGPT writes, when they parse."""
    if isinstance(arguments, str):
        try:
            return json_text.loads(arguments)
        except ValueError:
            return arguments
    return arguments if arguments is not None else {}
