"""Phase 4: head + summary + tail, with every tool call and result still paired (§10)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from .markers import COMPACTION_NOTE, MERGE_SEPARATOR
from .messages import Message, call_name, role_of, text_of, tool_calls_of
from .placement import Placement

STUB_RESULT = "[Result not kept: it was compacted into the context summary above.]"


def with_note(message: Message) -> Message:
    """A system message with the compaction note appended, once however often it is compacted."""
    content = message.get("content")
    if COMPACTION_NOTE in text_of(message):
        return message
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": COMPACTION_NOTE}]}
    text = "" if content is None else str(content)
    return {**message, "content": f"{text}\n\n{COMPACTION_NOTE}" if text else COMPACTION_NOTE}


def merged(message: Message, summary: str) -> Message:
    """``message`` with the summary put before its own text."""
    content = message.get("content")
    if isinstance(content, list):
        lead = {"type": "text", "text": f"{summary}\n\n{MERGE_SEPARATOR}\n\n"}
        return {**message, "content": [lead, *content]}
    if not content:  # an assistant message that only calls tools
        return {**message, "content": f"{summary}\n\n{MERGE_SEPARATOR}"}
    return {**message, "content": f"{summary}\n\n{MERGE_SEPARATOR}\n\n{content}"}


def assemble(
    messages: Sequence[Message], head_end: int, placement: Placement, summary: str
) -> list[Message]:
    """A new list: the head (system note added), the summary, the tail, tool pairs repaired.

    Every message is a deep copy: the caller may change the result freely without
    touching the conversation it came from.
    """
    head = [copy.deepcopy(m) for m in messages[:head_end]]
    for i, message in enumerate(head):
        if role_of(message) == "system":
            head[i] = with_note(message)
            break
    tail = [copy.deepcopy(m) for m in messages[placement.tail_start:]]
    if placement.merge and tail:
        tail[0] = merged(tail[0], summary)
        middle: list[Message] = []
    else:
        middle = [{"role": placement.role, "content": summary}]
    return repair_tool_pairs([*head, *middle, *tail])


def repair_tool_pairs(messages: Sequence[Message]) -> list[Message]:
    """Drop tool results whose call is gone; give calls whose result is gone a stub result.

    Providers reject a tool result without its call, and a call without its result.
    """
    call_ids = {str(call.get("id")) for m in messages for call in tool_calls_of(m)}
    kept = [m for m in messages
            if role_of(m) != "tool" or str(m.get("tool_call_id")) in call_ids]
    answered = {str(m.get("tool_call_id")) for m in kept if role_of(m) == "tool"}
    out: list[Message] = []
    i = 0
    while i < len(kept):
        message = kept[i]
        out.append(message)
        i += 1
        missing = [call for call in tool_calls_of(message) if str(call.get("id")) not in answered]
        if not missing:
            continue
        # Stubs go after the results that are there, keeping the group together.
        while i < len(kept) and role_of(kept[i]) == "tool":
            out.append(kept[i])
            i += 1
        for call in missing:
            out.append({"role": "tool", "tool_call_id": call.get("id"),
                        "name": call_name(call), "content": STUB_RESULT})
            answered.add(str(call.get("id")))
    return out
