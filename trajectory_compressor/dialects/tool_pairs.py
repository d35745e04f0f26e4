"""Which tool calls of a conversation no tool result answers, in every dialect's terms.

Every dialect reads its calls into assistant (`gpt`) turns and its results into `tool`
turns that follow them: Hermes ``<tool_call>`` blocks answered by ``<tool_response>``
blocks (one or several per tool turn), OpenAI ``tool_calls`` (rendered as blocks) answered
by one ``tool`` message each, LLaMA-Factory ``function_call`` turns (marked `CALL_TURN`)
answered by an ``observation``. A call is answered by the tool turns right after its
turn; a result with no call before it is the dialects' own error already.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..core import json_text
from ..core.conversation import CALL_TURN, Trajectory, Turn

_CALL = "<tool_call>"
_RESPONSE = "<tool_response>"


@dataclass(frozen=True)
class Unanswered:
    """An assistant turn whose calls outnumber the results after it."""

    turn: int
    calls: int
    results: int
    last: bool = False  # the row ends with this turn's results

    def message(self) -> str:
        if self.results == 0:
            what = "a tool call" if self.calls == 1 else f"{self.calls} tool calls"
            return f"turn {self.turn} makes {what} that no tool result answers"
        return (f"turn {self.turn} makes {self.calls} tool calls but only {self.results} "
                "tool results answer them")


def calls_in(turn: Turn) -> int:
    """How many tool calls an assistant turn makes."""
    if turn.get("from") != "gpt":
        return 0
    value = str(turn.get("value", ""))
    if turn.get(CALL_TURN):
        try:
            payload = json_text.loads(value)
        except ValueError:
            return 1
        return len(payload) if isinstance(payload, list) and payload else 1
    return value.count(_CALL)


def results_in(turn: Turn) -> int:
    """How many tool results a tool turn holds (one unless it holds several blocks)."""
    return max(1, str(turn.get("value", "")).count(_RESPONSE))


def unanswered_calls(turns: Trajectory) -> Iterator[Unanswered]:
    """Each assistant turn of ``turns`` with more calls than results right after it."""
    for index, turn in enumerate(turns):
        calls = calls_in(turn)
        if not calls:
            continue
        results, after = 0, index + 1
        while after < len(turns) and turns[after].get("from") == "tool":
            results += results_in(turns[after])
            after += 1
        if results == 0 and after == len(turns):
            # The episode ended on its call (an agent's final `submit`): a complete
            # training example (OpenAI fine-tuning trains such a last call), not a break.
            continue
        if results < calls:
            yield Unanswered(index, calls, results, last=after == len(turns))
