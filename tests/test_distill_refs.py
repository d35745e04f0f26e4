"""Distill references kept readable after the strategy (issue 38, `core.distill_refs`).

Rows are hand-made agent runs (Hermes ``<tool_response>`` JSON bodies and OpenAI
``tool`` messages) where distilling writes later outputs as references to earlier ones:
a repeated test log (``⟪same as tool output #k above⟫``) and a narrower view of a file
already shown (``⟪file lines a-b as in tool output #k⟫``). After the strategy removes or
masks the referents, or splits the row into windows, every written output that is not a
placeholder must read back (`expand_outputs` of the written row's outputs, in its own
numbering) as the terminal view of the ORIGINAL output with the same tool call id: the
call id is the oracle pairing written outputs with originals, independent of the code.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.conversation import Row
from trajectory_compressor.core.distill_notation import expand_outputs
from trajectory_compressor.core.distill_refs import resolve_references
from trajectory_compressor.core.summary import Summarizer, Summary, SummaryRequest
from trajectory_compressor.core.terminal_view import terminal_view
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects.base import Dialect
from trajectory_compressor.dialects.messages import Messages
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor

_COUNTER: list[TokenCounter] = []


def counter() -> TokenCounter:
    if not _COUNTER:
        _COUNTER.append(TokenCounter.load())
    return _COUNTER[0]


class Canned(Summarizer):
    name = "canned"

    async def summarize(self, request: SummaryRequest) -> Summary:
        return Summary("[CONTEXT SUMMARY]: the agent read app.py and ran the tests.", "llm")


def view(first: int, last: int) -> str:
    body = "".join(f"{n}:    limit_{n} = clamp(reading_{n}, ceiling={n * 7 % 50})\n"
                   for n in range(first, last + 1))
    return f"[File: /repo/app.py (80 lines total)]\n{body}(Open file: /repo/app.py)"


LOG = "\n".join(f"tests/test_app.py::test_case_{i} PASSED in {i * 3}ms" for i in range(30))


def filler(i: int) -> str:
    words = " ".join(f"entry{i}_{n}" for n in range(60))
    return f"$ ls build/stage_{i}\n{words}\n$ echo done {i}"


# (a), (b), (c): the referents (the full view, the log) come first, the references last.
EARLY = [view(1, 60), LOG, filler(1), filler(2), filler(3), filler(4), view(20, 40), LOG]
# (d): the log is kept (just before the tail), the fillers before it are summarized.
RENUMBERED = [filler(0), filler(1), filler(2), filler(3), filler(4), LOG, filler(5), LOG]


def openai_row(outputs: list[str]) -> Row:
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Find why the readings are clamped."}]
    for i, output in enumerate(outputs):
        messages += [
            {"role": "assistant", "content": f"Step {i}.", "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": "bash", "arguments": json.dumps({"step": i})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": output}]
    messages.append({"role": "assistant", "content": "The ceiling in /repo/app.py is low."})
    return {"id": "o", "messages": messages}


def hermes_row(outputs: list[str]) -> Row:
    turns = [{"from": "system", "value": "You are a coding agent."},
             {"from": "human", "value": "Find why the readings are clamped."}]
    for i, output in enumerate(outputs):
        call = json.dumps({"name": "bash", "arguments": {"step": i}})
        body = json.dumps({"tool_call_id": f"call_{i}", "name": "bash", "content": output})
        turns += [{"from": "gpt", "value": f"Step {i}.\n<tool_call>\n{call}\n</tool_call>"},
                  {"from": "tool", "value": f"<tool_response>\n{body}\n</tool_response>"}]
    turns.append({"from": "gpt", "value": "The ceiling in /repo/app.py is low."})
    return {"id": "h", "conversations": turns}


DIALECTS: dict[str, tuple[Dialect, object]] = {
    "openai": (Messages(), openai_row), "hermes": (SHAREGPT, hermes_row)}
_BODY = re.compile(r"<tool_response>\n(.*)\n</tool_response>", re.DOTALL)


def outputs(row: Row) -> list[tuple[str, str]]:
    """``(tool call id, output text)`` of a row's tool outputs, in order, read from the
    row's own fields (the oracle)."""
    if "messages" in row:
        return [(m["tool_call_id"], m["content"]) for m in row["messages"]
                if m["role"] == "tool"]
    found = []
    for turn in row["conversations"]:
        if turn["from"] == "tool":
            match = _BODY.fullmatch(turn["value"])
            assert match is not None
            body = json.loads(match.group(1))
            found.append((body["tool_call_id"], body["content"]))
    return found


def run(row: Row, dialect: Dialect, **settings: object) -> RowResult:
    config = CompressionConfig(**settings)  # type: ignore[arg-type]

    async def go() -> RowResult:
        async with TrajectoryCompressor(config, summarizer=Canned(), counter=counter(),
                                        dialect=dialect) as compressor:
            return await compressor.compress_row(row)

    return asyncio.run(go())


def size(row: Row, dialect: Dialect) -> int:
    return sum(counter().count_many([t["value"] for t in dialect.turns(row)]))


def reads_back(original: Row, written: Row) -> list[tuple[str, str]]:
    """Asserts every written output but a mask placeholder reads back as the terminal
    view of the original output of the same call; the written outputs."""
    before = dict(outputs(original))
    after = outputs(written)
    expanded = expand_outputs([text for _, text in after])
    checked = 0
    for (call, text), shown in zip(after, expanded, strict=True):
        if text.startswith("[tool output masked"):
            continue
        assert shown == terminal_view(before[call]), call
        checked += 1
    assert checked
    return after


def references(written: list[tuple[str, str]]) -> list[int]:
    return [int(k) for _, text in written for k in re.findall(r"tool output #(\d+)", text)]


def distilled(dialect: Dialect, row: Row) -> list[tuple[str, str]]:
    async def go() -> list[tuple[str, str]]:
        async with TrajectoryCompressor(CompressionConfig(distill="safe"), summarizer=Canned(),
                                        counter=counter(), dialect=dialect) as compressor:
            done = compressor.distill(row, dialect.turns(row), dialect)
            assert done is not None
            return outputs(done[0])

    return asyncio.run(go())


@pytest.mark.parametrize("name", list(DIALECTS))
def test_the_rows_distill_to_references(name):
    # The premise: distilled alone, the last two outputs are references to #1 and #2.
    dialect, make = DIALECTS[name]
    done = distilled(dialect, make(EARLY))  # type: ignore[operator]
    assert done[6][1].splitlines()[1] == "⟪file lines 20-40 as in tool output #1⟫"
    assert done[7][1] == "⟪same as tool output #2 above⟫"
    assert references(distilled(dialect, make(RENUMBERED))) == [6]  # type: ignore[operator]


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_referent_summarized_away_is_written_out(name):
    dialect, make = DIALECTS[name]
    row = make(EARLY)  # type: ignore[operator]
    result = run(row, dialect, distill="safe", target_max_tokens=size(row, dialect) // 3,
                 summary_target_tokens=60)
    m = result.metrics
    assert m.was_compressed and not m.error
    written = reads_back(row, result.row)
    calls = [call for call, _ in written]
    assert "call_1" not in calls  # the log is inside the summary
    assert "⟪same as" not in written[-1][1]  # so its repeat is written out
    assert m.compressed_tokens == size(result.row, dialect) <= m.original_tokens


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_masked_referent_is_written_out(name):
    dialect, make = DIALECTS[name]
    row = make(EARLY)  # type: ignore[operator]
    result = run(row, dialect, distill="safe", strategy="mask",
                 target_max_tokens=size(row, dialect) // 4)
    m = result.metrics
    assert m.masked_turns > 0 and not m.error
    written = reads_back(row, result.row)
    masked = [call for call, text in written if text.startswith("[tool output masked")]
    assert "call_1" in masked  # the log's first showing is a placeholder
    assert m.compressed_tokens == size(result.row, dialect) <= m.original_tokens


@pytest.mark.parametrize("name", list(DIALECTS))
def test_windows_write_out_what_an_earlier_window_holds(name):
    dialect, make = DIALECTS[name]
    row = make(EARLY)  # type: ignore[operator]
    result = run(row, dialect, distill="safe", output_mode="windows",
                 target_max_tokens=size(row, dialect) // 2, summary_target_tokens=60)
    assert result.windows is not None and len(result.windows) >= 2
    assert result.window_metrics is not None
    for window, metrics in zip(result.windows, result.window_metrics, strict=True):
        written = reads_back(row, window)
        calls = [call for call, _ in written]
        # Each reference names an output inside the window, before it.
        for position, (_, text) in enumerate(written):
            assert all(k <= position for k in references([("", text)]))
        if "call_7" in calls and "call_1" not in calls:
            assert "⟪same as" not in written[-1][1]
        assert metrics.compressed_tokens == size(window, dialect)


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_kept_referent_is_renumbered(name):
    dialect, make = DIALECTS[name]
    row = make(RENUMBERED)  # type: ignore[operator]
    result = run(row, dialect, distill="safe", target_max_tokens=size(row, dialect) // 2,
                 summary_target_tokens=60, protect_last_n_turns=6)
    m = result.metrics
    assert m.was_compressed and not m.error
    written = reads_back(row, result.row)
    calls = [call for call, _ in written]
    assert "call_5" in calls and "call_7" in calls and "call_2" not in calls
    # The repeat names the kept log by its place in the written row.
    assert written[-1][1] == f"⟪same as tool output #{calls.index('call_5') + 1} above⟫"
    assert m.compressed_tokens == size(result.row, dialect) <= m.original_tokens


@pytest.mark.parametrize("name", list(DIALECTS))
@pytest.mark.parametrize("settings", [
    {"summary_target_tokens": 60}, {"strategy": "mask"},
    {"output_mode": "windows", "summary_target_tokens": 60}])
def test_without_distill_outputs_are_written_as_they_came(name, settings):
    dialect, make = DIALECTS[name]
    row = make(EARLY)  # type: ignore[operator]
    result = run(row, dialect, target_max_tokens=size(row, dialect) // 2, **settings)
    before = dict(outputs(row))
    for written in result.windows or [result.row]:
        for call, text in outputs(written):
            assert text.startswith("[tool output masked") or text == before[call]


def test_resolve_by_hand():
    # Source turns: 0 system, 1 tool "A / ⟪odd / C" (a literal ⟪ line escaped), 2 gpt,
    # 3 tool "X", 4 gpt, 5 tool referring to #1 twice and to #2. Written: turn 1 and 2
    # summarized into one turn, so "X" is output #1 and "A…" is gone.
    source = [None, "A\n\\⟪odd\nC", None, "X", None,
              "⟪lines 2-3 of tool output #1⟫\n⟪same as tool output #2 above⟫\nend"]
    written = [None, None, "X", None, source[5]]
    resolved = resolve_references(source, written, [0, None, 3, 4, 5])
    assert resolved == [None, None, "X", None,
                        "\\⟪odd\nC\n⟪same as tool output #1 above⟫\nend"]
    assert expand_outputs(["X", str(resolved[4])]) == ["X", "⟪odd\nC\nX\nend"]
    # Nothing to resolve: the same list.
    assert resolve_references(["a"], ["a"], [0]) == ["a"]


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_row_writing_out_would_grow_is_written_as_distilled(name):
    # Masking the log saves its text less a placeholder; writing the log out in place of
    # its repeat's reference puts the text back: the row would end longer than it came.
    dialect, make = DIALECTS[name]
    row = make([filler(0), LOG, filler(1), filler(2), LOG])  # type: ignore[operator]
    result = run(row, dialect, distill="safe", strategy="mask", mask_keep_last=1,
                 target_max_tokens=size(row, dialect) // 4)
    m = result.metrics
    written = reads_back(row, result.row)
    # The fallback: every output as distilled, nothing masked, the growth the error.
    assert m.error and "longer than the original" in m.error
    assert m.masked_turns == 0 and m.strategy_used != "mask"
    assert not any(text.startswith("[tool output masked") for _, text in written)
    assert written[4][1] == "⟪same as tool output #2 above⟫"
    assert m.compressed_tokens == size(result.row, dialect) <= m.original_tokens
