"""Observation masking (§19): old tool outputs become one informative line each (pure).

With ``compression.strategy: mask`` (or ``hybrid``), a row over the target gets the tool
outputs inside the region the planner may summarize (the same protected head and tail,
`core.plan.compressible_middle`) replaced, oldest tool turn first, by a placeholder line,
until the row fits or none is left. Never masked: the last ``mask_keep_last`` tool turns
of that region, outputs of the tools named in ``mask_exclude_tools``, and any output whose
placeholder would not be shorter. Only tool turns change, and each keeps its wrapper (a
Hermes ``<tool_response>`` JSON body keeps every key but ``content``), so a call keeps its
result turn and every dialect's rules hold.

The placeholder (`placeholder`), one line of at most `MAX_PLACEHOLDER_CHARS` characters::

    [tool output masked: NAME ARGS; exit N; error "LINE"; L lines, T tokens;
     named later: "a", "b" (+k more)]

(on one line).

- ``NAME ARGS``: the call's tool name and its arguments as compact JSON, cut to
  `MAX_ARGS_CHARS` with ``…`` (no call found: the response's name, else ``tool``);
- ``exit N``: the exit status the output states (``exit code 1``, ``"exit_code": 1``,
  ``exit status 2``, ``returncode``), the last one; omitted when it states none;
- ``error "LINE"``: the last line that reads as an error (``SomeError: …``, ``error:``,
  ``fatal:``, ``command not found``, ``No such file or directory``, ``Permission
  denied``, ``timed out``; numbered file-view lines never count), cut to
  `MAX_ERROR_CHARS`;
- ``L lines, T tokens``: the output's lines (as a terminal shows them) and tokens;
- ``named later``: the output's identifiers (`core.fidelity` items) that a later
  assistant or user turn names again, verbatim in JSON quotes, in the output's order,
  as many as the cap allows, then how many more there were.

Everything quoted from the row is data: JSON-quoted on one line (a line break is ``\\n``),
terminal and bidi controls written as ``\\uXXXX`` (`core.terminal.inert`), turn markers,
chat-template tokens and tool-call tags defused (`core.summary.neutralize`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .conversation import Trajectory
from .counted import counted
from .distill_row import outputs_of, with_outputs
from .extractive import response_text
from .fidelity import extract_items, mentions, searchable_text
from .plan import Region
from .summary import neutralize
from .terminal import inert
from .terminal_view import terminal_view as rendered

CountMany = Callable[[list[str]], list[int]]

MAX_PLACEHOLDER_CHARS = 600
MAX_ARGS_CHARS = 160
MAX_ERROR_CHARS = 120
LABEL = "tool output masked"

_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE_BLOCK = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
_EXIT = re.compile(r"(?i)\b(?:exit[ _]?code|exit[ _]status|exited with (?:code|status)"
                   r"|return[ _]?code)\b[\"']?\s*[:=]?\s*(-?\d+)")
_ERROR_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)\b(?::.*)?|(?i:error|fatal)\b\s*:.*"
    r"|(?:FAILED|ERROR)\b.*)$"
    r"|(?i:command not found|no such file or directory|permission denied|timed out)")
# `  12:    except KeyError:` in a file view is code, not an error the command had.
_NUMBERED = re.compile(r"^\s*\d+\s*[:|]")


@dataclass(frozen=True)
class MaskedTurn:
    """One masked tool turn: its index and its tokens before and after."""

    turn: int
    tokens_before: int
    tokens_after: int

    def to_dict(self) -> dict[str, int]:
        return {"turn": self.turn, "tokens_before": self.tokens_before,
                "tokens_after": self.tokens_after}


@dataclass(frozen=True)
class Masking:
    """What masking did to one row: the new texts of its masked tool turns."""

    texts: tuple[tuple[int, str], ...]
    turns: tuple[MaskedTurn, ...]

    @property
    def saved(self) -> int:
        """Tokens the placeholders took off the row."""
        return sum(t.tokens_before - t.tokens_after for t in self.turns)

    def apply(self, turns: Trajectory) -> Trajectory:
        """``turns`` with the masked tool turns' texts (a new list; the input untouched)."""
        out = list(turns)
        for i, text in self.texts:
            out[i] = {**out[i], "value": text}
        return out

    def counts(self, turn_tokens: Sequence[int]) -> list[int]:
        """``turn_tokens`` with the masked turns' new counts."""
        out = list(turn_tokens)
        for t in self.turns:
            out[t.turn] = out[t.turn] - t.tokens_before + t.tokens_after
        return out


def apply_mask(turns: Trajectory, mask: Masking | None) -> Trajectory:
    """``turns`` as a plan with ``mask`` writes them: its masked tool outputs in place."""
    return turns if mask is None else mask.apply(turns)


@dataclass(frozen=True)
class Call:
    """A tool call as a placeholder names it."""

    name: str
    arguments: Any


def calls_of(text: str) -> list[Call]:
    """The calls of an assistant turn: its ``<tool_call>`` blocks, else the whole text when
    it is one ``{"name", "arguments"}`` object (a LLaMA-Factory ``function_call`` turn)."""
    bodies = _CALL_BLOCK.findall(text) if "<tool_call>" in text else [text]
    calls = []
    for body in bodies:
        data = _json(body.strip()) if body.strip().startswith("{") else None
        if isinstance(data, dict) and isinstance(data.get("function"), dict):
            data = data["function"]  # the OpenAI shape
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            arguments = data.get("arguments", data.get("parameters", {}))
            if isinstance(arguments, str):
                parsed = _json(arguments)
                arguments = parsed if isinstance(parsed, dict) else arguments
            calls.append(Call(data["name"], arguments))
    return calls


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _response_names(text: str) -> list[str | None]:
    """The ``name`` of each Hermes ``<tool_response>`` JSON body of a tool turn."""
    names: list[str | None] = []
    for body in _RESPONSE_BLOCK.findall(text):
        data = _json(body.strip()) if body.strip().startswith("{") else None
        name = data.get("name") if isinstance(data, dict) else None
        names.append(name if isinstance(name, str) else None)
    return names


def output_calls(roles: Sequence[str], texts: Sequence[str]) -> dict[int, list[Call | None]]:
    """For each tool turn, the call each of its outputs answers (None: not found), matched
    to the calls of the assistant turn before it by the response's tool name, else in
    order."""
    found: dict[int, list[Call | None]] = {}
    pending: list[Call] = []
    for i, (role, text) in enumerate(zip(roles, texts, strict=True)):
        if role == "gpt":
            pending = calls_of(text)
        elif role == "tool":
            outputs = outputs_of(text)
            names = _response_names(text)
            answers: list[Call | None] = []
            for k in range(len(outputs)):
                name = names[k] if k < len(names) and len(names) == len(outputs) else None
                match = next((c for c in pending if name is None or c.name == name), None)
                if match is not None:
                    pending.remove(match)
                elif name is not None:
                    match = Call(name, None)
                answers.append(match)
            found[i] = answers
        else:
            pending = []
    return found


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _call_text(call: Call | None) -> str:
    if call is None:
        return "tool"
    name = " ".join(call.name.split()) or "tool"
    if call.arguments is None or call.arguments == {}:
        return _clip(name, MAX_ARGS_CHARS)
    args = json.dumps(call.arguments, ensure_ascii=False) if not isinstance(
        call.arguments, str) else _quote(call.arguments)
    return _clip(f"{name} {args}", MAX_ARGS_CHARS)


def exit_status(view: str, stated: int | None = None) -> int | None:
    """The exit status an output states (``stated``: a JSON ``exit_code``), the last."""
    if stated is not None:
        return stated
    codes = _EXIT.findall(view)
    return int(codes[-1]) if codes else None


def error_line(view: str) -> str | None:
    """The last line of ``view`` that reads as an error (see the module's docstring)."""
    for line in reversed(view.split("\n")):
        if _NUMBERED.match(line):
            continue
        stripped = line.strip()
        if stripped and _ERROR_LINE.search(stripped):
            return _clip(" ".join(stripped.split()), MAX_ERROR_CHARS)
    return None


def line_count(view: str) -> int:
    """Lines of an output: ``\\n``-separated, a final line break starting no new line."""
    if not view:
        return 0
    return view.count("\n") + (0 if view.endswith("\n") else 1)


def placeholder(call: Call | None, output: str, tokens: int, named_later: Sequence[str]) -> str:
    """The one line that stands for ``output`` (see the module's docstring)."""
    readable, stated = response_text(output)
    view = rendered(readable.replace("\r\n", "\n"))
    parts = [f"{LABEL}: {_call_text(call)}"]
    code = exit_status(view, stated)
    if code is not None:
        parts.append(f"exit {code}")
    error = error_line(view)
    if error is not None:
        parts.append(f"error {_quote(error)}")
    lines = line_count(view)
    parts.append(f"{counted(lines, 'line')}, {tokens:,} tokens")
    head = "[" + "; ".join(_safe(p) for p in parts)
    quoted = [_safe(_quote(" ".join(item.split()))) for item in named_later]
    room = MAX_PLACEHOLDER_CHARS - len(head) - 1
    if quoted:
        label = "; named later: "
        shown: list[str] = []
        for k, item in enumerate(quoted):
            more = len(quoted) - k - 1
            tail = f" (+{more} more)" if more else ""
            if len(label) + len(", ".join([*shown, item])) + len(tail) > room:
                break
            shown.append(item)
        rest = len(quoted) - len(shown)
        if shown:
            head += label + ", ".join(shown) + (f" (+{rest} more)" if rest else "")
        elif len(f"; named later: +{rest} more") <= room:
            head += f"; named later: +{rest} more"
    return head[:MAX_PLACEHOLDER_CHARS - 1] + "]"


def _safe(text: str) -> str:
    """Row text made inert on one line: controls spelled out, markers defused."""
    return inert(neutralize(" ".join(text.split("\n"))))


def candidates(roles: Sequence[str], middle: Region, keep_last: int) -> list[int]:
    """The tool turns masking may touch, oldest first: those of the planner's compressible
    middle but its last ``keep_last``."""
    tools = [i for i in range(middle.start, min(middle.end, len(roles))) if roles[i] == "tool"]
    return tools[:max(len(tools) - keep_last, 0)]


def mask_row(roles: Sequence[str], texts: Sequence[str], turn_tokens: Sequence[int],
             middle: Region, target: int, keep_last: int, exclude: Sequence[str],
             count_many: CountMany, counted: Sequence[int] | None = None) -> Masking | None:
    """The masking that brings a row of ``turn_tokens`` under ``target`` (or as close as
    masking gets), oldest tool turn first; None when no output can be masked.

    ``counted``: each turn's text counted alone, when ``turn_tokens`` are not that (the
    chat-template mode attributes template tokens to turns); a turn's saving is then
    what its text loses.
    """
    total = sum(turn_tokens)
    if total <= target:
        return None
    chosen = candidates(roles, middle, keep_last)
    if not chosen:
        return None
    masker = Masker(roles, texts, exclude, count_many)
    new_texts: dict[int, str] = {}
    for i in chosen:
        text = masker.text(i, counted[i] if counted is not None else turn_tokens[i])
        if text is not None:
            new_texts[i] = text
    order = [i for i in chosen if i in new_texts]
    if not order:
        return None
    after = count_many([new_texts[i] for i in order])
    before = [counted[i] if counted is not None else turn_tokens[i] for i in order]
    done: list[MaskedTurn] = []
    for i, old, new in zip(order, before, after, strict=True):
        if total <= target:
            break
        if new >= old:
            continue
        done.append(MaskedTurn(i, old, new))
        total -= old - new
    if not done:
        return None
    return Masking(tuple((t.turn, new_texts[t.turn]) for t in done), tuple(done))


class Masker:
    """The masked text of any tool turn of one row (its outputs as placeholders)."""

    def __init__(self, roles: Sequence[str], texts: Sequence[str], exclude: Sequence[str],
                 count_many: CountMany) -> None:
        self._texts = texts
        self._excluded = set(exclude)
        self._count_many = count_many
        self._calls = output_calls(roles, texts)
        self._later = _Later(roles, texts)

    def text(self, i: int, tokens: int) -> str | None:
        """Tool turn ``i`` (its text alone of ``tokens`` tokens) with each output a
        placeholder, the outputs of excluded tools kept; None when every one is kept."""
        outputs = outputs_of(self._texts[i])
        answers = self._calls.get(i, [])
        sizes = self._count_many(outputs) if len(outputs) > 1 else [tokens]
        replaced: list[str | None] = []
        for k, output in enumerate(outputs):
            call = answers[k] if k < len(answers) else None
            if call is not None and call.name in self._excluded:
                replaced.append(None)
                continue
            replaced.append(placeholder(call, output, sizes[k], self._later.named(output, i)))
        if all(r is None for r in replaced):
            return None
        return with_outputs(self._texts[i], replaced)


class _Later:
    """Which items of an output a later assistant or user turn names (searched once)."""

    def __init__(self, roles: Sequence[str], texts: Sequence[str]) -> None:
        self._turns = [(i, text) for i, (role, text) in enumerate(zip(roles, texts, strict=True))
                       if role in ("gpt", "human")]
        self._searchable: dict[int, str] = {}

    def named(self, output: str, after: int) -> list[str]:
        later = [i for i, _ in self._turns if i > after]
        if not later:
            return []
        texts = dict(self._turns)
        for i in later:
            if i not in self._searchable:
                self._searchable[i] = searchable_text([texts[i]])
        readable, _ = response_text(output)
        items = extract_items([rendered(readable)])
        return [item for item in items
                if any(mentions(item, self._searchable[i]) for i in later)]
