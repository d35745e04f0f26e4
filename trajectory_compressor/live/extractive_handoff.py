"""The default handoff writer: no model, offline, deterministic, structured, within budget.

It fills the handoff sections from the messages themselves, with the extractive
backend's parsers: tool calls with their key argument and outcome (Completed Actions,
Blocked, In Progress), the user's asks (Active Task, Pending User Asks), what the assistant
said (Key Decisions), paths (Relevant Files). An earlier summary's items are kept; when the
budget is short the oldest items go first. With a focus topic, items mentioning it are
chosen first and get most of the budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..core.extractive import PATH_PATTERN, THINK_BLOCK, clip, truncate_to_tokens
from .handoff import FOCUS_SHARE, SECTIONS, HandoffRequest
from .messages import Message, call_name, role_of, text_of, tool_calls_of
from .pruning import (
    DUPLICATE_TAG,
    PRUNED_TAG,
    call_label,
    describe_result,
    is_pruned,
    outcome_of,
)

_ITEM_CHARS = 240
_SECTION = re.compile(r"^#+\s*(.+?)\s*$")
_HEADER_TAIL = "(extractive summary: items are quoted or clipped from them)."


class ExtractiveHandoff:
    """Writes a sectioned handoff from the middle messages, within the request's budget."""

    def __init__(self, count_tokens: Callable[[str], int]) -> None:
        self._count = count_tokens

    def write(self, request: HandoffRequest) -> str:
        sections = _parse_previous(request.previous_summary)
        for name, items in _collect(request.messages).items():
            sections.setdefault(name, []).extend(items)
        last = request.first_index + len(request.messages) - 1
        header = (f"Messages {request.first_index}-{last} were compacted {_HEADER_TAIL}")
        budget = request.budget if request.max_tokens is None else max(
            0, min(request.budget, request.max_tokens))
        chosen = self._choose(sections, budget, request.focus_topic, header)
        body = [header]
        for name in SECTIONS:
            if chosen.get(name):
                body.append(f"## {name}\n" + "\n".join(f"- {item}" for item in chosen[name]))
        text = "\n\n".join(body)
        if self._count(text) > budget:  # the per-item costs are an estimate
            text = truncate_to_tokens(text, budget, self._count) or header
        return text

    def _choose(
        self, sections: dict[str, list[str]], budget: int, focus_topic: str | None, header: str
    ) -> dict[str, list[str]]:
        """The items that fit the budget: focused ones first, then the rest, newest first."""
        words = [w.lower() for w in re.findall(r"\w{3,}", focus_topic or "")]

        def focused(item: str) -> bool:
            return any(word in item.lower() for word in words)

        spent = self._count(header) + 2
        picked: dict[str, set[int]] = {name: set() for name in sections}
        ranks = [focused, lambda item: not focused(item)] if words else [lambda item: True]
        for rank, wanted in enumerate(ranks):
            cap = budget
            if rank == 1 and spent > self._count(header) + 2:
                # The rest of the conversation gets what the focus left, at most its share.
                cap = min(cap, spent + int(budget * (1 - FOCUS_SHARE)))
            queues = {name: [i for i in range(len(items) - 1, -1, -1) if wanted(items[i])]
                      for name, items in sections.items()}
            progressed = True
            while progressed:
                progressed = False
                for name, queue in queues.items():
                    if not queue:
                        continue
                    i = queue.pop(0)
                    cost = self._count(f"- {sections[name][i]}\n")
                    if not picked[name]:
                        cost += self._count(f"## {name}\n") + 1
                    if spent + cost > cap:
                        queue.clear()
                        continue
                    picked[name].add(i)
                    spent += cost
                    progressed = True
        return {name: [sections[name][i] for i in sorted(picked[name])] for name in sections}


def _parse_previous(summary: str) -> dict[str, list[str]]:
    """An earlier summary's items by section; free text goes to Critical Context."""
    sections: dict[str, list[str]] = {}
    current = "Critical Context"
    for line in summary.splitlines():
        line = line.strip()
        heading = _SECTION.match(line)
        if heading:
            name = heading.group(1)
            current = name if name in SECTIONS else "Critical Context"
            continue
        item = line[2:].strip() if line.startswith(("- ", "* ")) else line
        if item and item.lower() != "none" and not item.endswith(_HEADER_TAIL):
            _add(sections.setdefault(current, []), item)
    return sections


def _add(items: list[str], item: str) -> None:
    if item and item not in items:
        items.append(item)


def _collect(messages: Iterable[Message]) -> dict[str, list[str]]:
    """New items from the middle messages, in conversation order."""
    messages = list(messages)
    out: dict[str, list[str]] = {name: [] for name in SECTIONS}
    calls = {str(call.get("id")): call for m in messages for call in tool_calls_of(m)}
    answered = {str(m.get("tool_call_id")) for m in messages if role_of(m) == "tool"}
    asks = []
    for message in messages:
        role, text = role_of(message), text_of(message)
        visible = THINK_BLOCK.sub("", text).strip()
        for path in PATH_PATTERN.findall(visible):
            _add(out["Relevant Files"], path)
        if role == "user":
            asks.append(clip(visible, _ITEM_CHARS))
        elif role == "assistant":
            if visible:
                _add(out["Key Decisions"], clip(visible, _ITEM_CHARS))
            for call in tool_calls_of(message):
                if str(call.get("id")) not in answered:
                    _add(out["In Progress"], f"{call_label(call_name(call), call)}: no result")
        elif role == "tool":
            made = calls.get(str(message.get("tool_call_id")))
            name = call_name(made) if made else str(message.get("name") or "tool")
            item, failed = _action(name, made, text, message)
            _add(out["Completed Actions"], item)
            if failed:
                _add(out["Blocked"], item)
    if asks:
        out["Active Task"].append(asks[-1])
        for ask in asks[:-1]:
            _add(out["Pending User Asks"], ask)
    return out


def _action(name: str, call: dict | None, text: str, message: Message) -> tuple[str, bool]:
    """A tool call and its outcome as one item, and whether it failed."""
    if text.startswith(DUPLICATE_TAG):
        return f"{name}: {text[len(DUPLICATE_TAG):].strip(' ]')}", False
    if is_pruned(message):
        item = text[len(PRUNED_TAG):].strip()
        # Phase 1 already wrote the outcome into the line.
        failed = " → exit " in item or " → error" in item
    else:
        item = describe_result(name, call, text)[len(PRUNED_TAG):].strip()
        _, failed = outcome_of(text)
    return clip(item, _ITEM_CHARS), failed
