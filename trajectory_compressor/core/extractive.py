"""The `extractive` summarizer: no model, offline, deterministic (§5).

It lists what a reader of the remaining trajectory needs from the removed turns: the
identifiers that the later turns mention again (`SummaryRequest.tail_items`, first and
verbatim, in up to half of the budget), the tools called with their key arguments, the
files and paths touched, errors and exit codes, and the first and last lines of long
outputs, within the token budget.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from . import json_text
from .conversation import Turn
from .distill_notation import OPEN, NotationError, expand
from .summary import (
    Summarizer,
    Summary,
    SummaryRequest,
    finish_summary_text,
)
from .terminal_view import terminal_view

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*(?:</tool_response>|$)", re.DOTALL)
THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
PATH_PATTERN = re.compile(
    r"(?<![\w/.])(?:~|\.{1,2})?(?:/[\w.\-]+){2,}|\b[\w\-]+(?:/[\w.\-]+)+\.\w{1,6}\b"
    r"|\b[\w\-]+\.(?:py|js|ts|json|yaml|yml|toml|md|txt|csv|sh|rs|go|java|c|h|"
    r"cpp|html|css|sql|log|ini|cfg)\b"
)
ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b:|^\s*(?:error|fatal|FAILED|FAIL)\b|"
                         r"(?i:command not found|no such file or directory|permission denied|"
                         r"timed out)")
_EXIT_CODE = re.compile(r"(?i)\b(?:exit(?:_| )?code|returncode|exit status)\W{0,3}(-?\d+)")
KEY_ARGS = ("path", "file", "file_path", "filename", "command", "cmd", "query", "url",
             "pattern", "name")
_BULK_ARGS = ("content", "code", "text", "body", "patch", "diff")
_ARG_CHARS = 80
_LINE_CHARS = 160
REFERENCED_LABEL = "Referenced later:"
# The share of the budget the identifiers the later turns need may take.
_REFERENCED_SHARE = 0.5


def clip(text: str, limit: int) -> str:
    """``text`` on one line (white space folded), cut to ``limit`` characters with ``…``."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parse_json(text: str) -> Any:
    try:
        return json_text.loads(text)
    except (ValueError, TypeError):
        return None


def _describe_call(payload: str) -> str:
    call = _parse_json(payload)
    if not isinstance(call, dict):
        return clip(payload, _ARG_CHARS)
    name = str(call.get("name", "tool"))
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):
        args = _parse_json(args) or {"input": args}
    shown = []
    if isinstance(args, dict):
        keys = [k for k in KEY_ARGS if k in args] or [k for k in args if k not in _BULK_ARGS][:2]
        for key in keys[:3]:
            shown.append(f"{key}={clip(str(args[key]), _ARG_CHARS)}")
        # Counts the extractive text makes up itself are not written as "<n> <unit>": a
        # reader (and `core.invented`) would take them for facts of the row.
        shown += [f"{key}=<length {len(str(args[key]))}>" for key in _BULK_ARGS if key in args]
    return f"{name}({', '.join(shown)})"


def _first_last_lines(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) <= 2:
        return " | ".join(clip(line, _LINE_CHARS) for line in lines)
    return (f"{clip(lines[0], _LINE_CHARS)} … ({len(lines) - 2} more lines) … "
            f"{clip(lines[-1], _LINE_CHARS)}")


def response_text(payload: str, depth: int = 0) -> tuple[str, int | None]:
    """The readable output in a tool response (JSON in JSON: 4 objects deep), and its exit code."""
    data = _parse_json(payload)
    if not isinstance(data, dict) or depth > 3:
        return payload, None
    code = data.get("exit_code", data.get("returncode"))
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    streams = [str(data[k]) for k in ("stdout", "stderr") if isinstance(data.get(k), str)
               and data[k].strip()]
    if streams:
        return "\n".join(streams), exit_code
    for key in ("content", "output", "result", "text", "error"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            inner, inner_code = response_text(value, depth + 1)
            return inner, exit_code if exit_code is not None else inner_code
    return json.dumps(data, ensure_ascii=False), exit_code


def _readable(role: str, value: str, visible: str) -> str:
    """The turn's text with its JSON tool calls and responses decoded: inside them a line
    break is the two characters `\\n`, and `\\ntests/a.py` is not the path `ntests/a.py`.
    A tool's output reads as a terminal showed it (`shown`)."""
    if role == "tool":
        outside, payloads = "", _TOOL_RESPONSE.findall(value) or [value]
        return "\n".join(shown(text) for payload in payloads
                         for text in _strings(_parse_json(payload), payload))
    outside, payloads = _TOOL_CALL.sub("\n", visible), _TOOL_CALL.findall(visible)
    decoded = ("\n".join(_strings(_parse_json(payload), payload)) for payload in payloads)
    return "\n".join([outside, *decoded])


def shown(output: str) -> str:
    """A tool output as a terminal showed it: escapes applied (`terminal_view`), and a
    distilled output read back where it reads back alone (a reference to another output
    stays as it is written)."""
    if OPEN in output:
        try:
            return expand(output)
        except NotationError:
            pass
    return terminal_view(output)


def _strings(data: Any, raw: str) -> list[str]:
    """The string and number leaves of a decoded JSON value; ``raw`` when it did not decode."""
    if data is None:
        return [raw]
    found: list[str] = []
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, str):
            decoded = _parse_json(node) if node.lstrip().startswith(("{", "[")) else None
            found.extend(_strings(decoded, node) if decoded is not None else [node])
        elif node is not None:
            found.append(str(node))
    return found


class _Notes:
    """Ordered, de-duplicated findings of one kind."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._seen: set[str] = set()

    def add(self, item: str) -> None:
        if item and item not in self._seen:
            self._seen.add(item)
            self.items.append(item)


def _collect(turns: Sequence[Turn], first_index: int) -> dict[str, _Notes]:
    notes = {k: _Notes() for k in ("calls", "errors", "files", "outputs", "messages")}
    for offset, turn in enumerate(turns):
        index = first_index + offset
        role, value = turn.get("from", ""), str(turn.get("value", ""))
        # Prose reads as a terminal shows it, as the checks read it (`core.fidelity`):
        # "00A\x1f0" is "00A0", never the two words `clip` would make of it. A tool
        # output goes through `shown`, which reads distilled text back first.
        if role != "tool":
            value = terminal_view(value)
        visible = THINK_BLOCK.sub("", value)
        for path in PATH_PATTERN.findall(_readable(role, value, visible)):
            notes["files"].add(path)
        if role == "gpt":
            for payload in _TOOL_CALL.findall(visible):
                notes["calls"].add(f"turn {index}: {_describe_call(payload)}")
            text = _TOOL_CALL.sub("", visible).strip()
            if text:
                notes["messages"].add(f"turn {index} (assistant): {clip(text, _LINE_CHARS)}")
        elif role == "tool":
            payloads = _TOOL_RESPONSE.findall(value) or [value]
            for payload in payloads:
                body, exit_code = response_text(payload)
                body = shown(body)
                codes = [exit_code] if exit_code is not None else [
                    int(c) for c in _EXIT_CODE.findall(body)]
                for code in codes:
                    if code != 0:
                        notes["errors"].add(f"turn {index}: exit code {code}")
                # The last matching line is usually the error itself (end of a traceback).
                errors = [line for line in body.splitlines() if ERROR_LINE.search(line)]
                if errors:
                    notes["errors"].add(f"turn {index}: {clip(errors[-1], _LINE_CHARS)}")
                summary = _first_last_lines(body)
                if summary:
                    notes["outputs"].add(f"turn {index}: {summary}")
        elif role == "human":
            notes["messages"].add(f"turn {index} (user): {clip(visible, _LINE_CHARS)}")
    return notes


_SECTIONS = (("calls", "Tool calls"), ("errors", "Errors"), ("files", "Files and paths"),
             ("outputs", "Outputs"), ("messages", "Messages"))


def extractive_text(request: SummaryRequest, count_tokens: Callable[[str], int]) -> str:
    """The extractive summary of ``request`` (prefixed), within ``request.target_tokens``.

    Each section keeps its first items, in order: it stops at the first that does not fit.
    """
    last = request.first_index + len(request.turns) - 1
    header = (f"Turns {request.first_index}-{last} ({len(request.turns)} turns) were "
              "condensed; what they did:")
    notes = _collect(request.turns, request.first_index)
    referenced = _referenced_line(request, count_tokens)
    # Round-robin over the sections so a long list of one kind cannot starve the others.
    # Costs are counted per line (newlines split pre-tokenization, so they add up); the
    # final text is checked once and cut if the estimate was short.
    queues = [(title, list(notes[key].items)) for key, title in _SECTIONS]
    chosen: dict[str, list[str]] = {title: [] for title, _ in queues}
    spent = count_tokens(finish_summary_text(header)) + 2
    if referenced:
        spent += count_tokens(referenced + "\n")
    progressed = True
    while progressed:
        progressed = False
        for title, queue in queues:
            if not queue:
                continue
            item = queue.pop(0)
            cost = count_tokens(f"- {item}\n") + (0 if chosen[title] else
                                                 count_tokens(f"{title}:\n"))
            if spent + cost > request.target_tokens:
                queue.clear()
                continue
            chosen[title].append(item)
            spent += cost
            progressed = True
    body = [header, *([referenced] if referenced else [])]
    for title, items in chosen.items():
        if items:
            body.append(f"{title}:\n" + "\n".join(f"- {item}" for item in items))
    text = finish_summary_text("\n".join(body))
    budget = request.target_tokens
    return text if count_tokens(text) <= budget else truncate_to_tokens(text, budget, count_tokens)


def _referenced_line(request: SummaryRequest, count_tokens: Callable[[str], int]) -> str:
    """``Referenced later: a; b; ...`` with as many of the request's tail items as fit in
    its share of the budget (none: empty)."""
    items = [" ".join(i.split()) for i in request.tail_items if i.strip()]
    cap = int(request.target_tokens * _REFERENCED_SHARE)

    def line(k: int) -> str:
        return f"{REFERENCED_LABEL} {'; '.join(items[:k])}"

    lo, hi = 0, len(items)
    while lo < hi:  # the most items that fit: the count grows with the prefix
        mid = (lo + hi + 1) // 2
        if count_tokens(line(mid)) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return line(lo) if lo else ""


def truncate_to_tokens(text: str, budget: int, count_tokens: Callable[[str], int]) -> str:
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


class ExtractiveSummarizer(Summarizer):
    """Summaries built from the region itself: no model, deterministic, within budget."""

    name = "extractive"

    def __init__(self, count_tokens: Callable[[str], int], source: str = "extractive") -> None:
        self._count = count_tokens
        self._source = source

    async def summarize(self, request: SummaryRequest) -> Summary:
        return Summary(extractive_text(request, self._count), self._source)
