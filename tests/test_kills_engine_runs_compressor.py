"""`TrajectoryCompressor` at the edges the mutation pass found untested (issue 26, item 5):
distilling before the count, a failed backend's errors by kind, the deadline's usage, the
repair that ties the first summary, a row under the target.

Expected values from SPEC §15/§18 and the docstrings: `distill` is None when it changes
nothing; the counts a caller passes are of the undistilled turns, so a distilled row is
counted again; a backend's failure keeps the kinds it named (``other`` only for errors
it did not name); a row cut by its deadline reports the requests made before the cut;
a repair "at least as good" replaces the first summary.
"""

from __future__ import annotations

import asyncio

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, words
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.engine.compressor import TrajectoryCompressor

RED = "\x1b[31m"
RESET = "\x1b[0m"
COLOURED = f"{RED}FAILED{RESET} " + words(12)  # `control` (safe) drops the two escapes
PLAIN = "FAILED " + words(12)


def compressor(counter, summarizer=None, **cfg) -> TrajectoryCompressor:
    config = CompressionConfig(**{**HAND_CONFIG, "summarizer": "extractive", **cfg})
    return TrajectoryCompressor(config, summarizer=summarizer, counter=counter)


def short_row(tool_text: str) -> dict:
    return SHAREGPT.with_turns({"id": "r"}, [
        {"from": "human", "value": words(5)}, {"from": "gpt", "value": words(5)},
        {"from": "tool", "value": tool_text}, {"from": "gpt", "value": words(5)}])


def test_distill_changing_nothing_is_none_and_the_row_is_untouched(counter):
    c = compressor(counter, distill="safe")
    data = short_row(PLAIN)
    assert c.distill(data, SHAREGPT.turns(data)) is None
    result = asyncio.run(c.compress_row(data))
    assert result.changed is False and result.row is data
    assert result.metrics.distill is None


def test_a_row_of_tool_turns_only_is_distilled(counter):
    turns = [{"from": "tool", "value": COLOURED}, {"from": "tool", "value": COLOURED + " x"}]
    done = compressor(counter, distill="safe").distill(SHAREGPT.with_turns({}, turns), turns)
    assert done is not None
    _, new_turns, stats = done
    assert [t["value"] for t in new_turns] == [PLAIN, PLAIN + " x"]
    assert stats.turns == 2


def test_a_distilled_row_is_counted_again_whatever_counts_were_passed(counter):
    c = compressor(counter, distill="safe")
    data = short_row(COLOURED)
    before = counter.count_many([t["value"] for t in SHAREGPT.turns(data)])
    after = sum(counter.count_many([words(5), words(5), PLAIN, words(5)]))
    assert sum(before) > after  # the escapes cost tokens
    result = asyncio.run(c.compress_row(data, turn_tokens=before))
    assert result.metrics.original_tokens == after
    assert SHAREGPT.turns(result.row)[2]["value"] == PLAIN


def test_compress_trajectory_counts_distilled_turns_again_too(counter):
    c = compressor(counter, distill="safe")
    turns = SHAREGPT.turns(short_row(COLOURED))
    before = counter.count_many([t["value"] for t in turns])
    after = sum(counter.count_many([words(5), words(5), PLAIN, words(5)]))

    async def run():
        async with c:
            return await c.compress_trajectory_async(turns, before)

    new_turns, metrics = asyncio.run(run())
    assert metrics.original_tokens == after
    assert new_turns[2]["value"] == PLAIN


def test_a_row_under_the_target_has_no_reason(counter):
    result = asyncio.run(compressor(counter).compress_row(HAND_ROWS[0]))
    assert result.metrics.still_over_limit is False
    assert result.reason == ""
    assert result.why is None


class NamedFailure(Summarizer):
    """Fails after one timed-out attempt, naming its kind."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        usage = SummaryUsage(api_calls=1)
        usage.failed("timeout")
        raise SummaryFailed("timed out", usage)


def test_a_failure_of_a_named_kind_adds_no_other_kind(counter):
    """HAND_ROWS[1] ("fits") is compressed: its summary falls back to extractive, and the
    one error is the timeout the backend named."""
    result = asyncio.run(compressor(counter, NamedFailure()).compress_row(HAND_ROWS[1]))
    m = result.metrics
    assert m.summary_source == "fallback"
    assert (m.summarization_api_calls, m.summarization_errors) == (1, 1)
    assert m.errors_by_kind == {"timeout": 1}


class CalledThenStuck(Summarizer):
    """Records one API call on the request, then never answers."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        request.usage.api_calls += 1
        request.usage.prompt_tokens += 7
        await asyncio.sleep(30)
        raise AssertionError("unreachable")


def test_a_row_cut_by_its_deadline_reports_the_calls_made_before(counter):
    c = compressor(counter, CalledThenStuck(), per_trajectory_timeout=0.2)
    result = asyncio.run(c.compress_row(HAND_ROWS[1]))
    m = result.metrics
    assert m.error is not None and "0.2" in m.error
    assert result.changed and SHAREGPT.turns(result.row) == SHAREGPT.turns(HAND_ROWS[1])
    assert (m.summarization_api_calls, m.prompt_tokens) == (1, 7)


class TwoAttempts(Summarizer):
    """The first summary and its repair: neither keeps a fact of the region."""

    def __init__(self) -> None:
        self.repairs = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        if request.repair is not None:
            self.repairs += 1
            return Summary("The agent then went on with the second attempt.", "llm")
        return Summary("The agent worked through the first attempt.", "llm")


def test_a_repair_as_good_as_the_first_summary_replaces_it(counter):
    """Both summaries keep none of the region's file paths (fidelity 0 under a bar of
    0.5): the repair ranks the same as the first, and a repair at least as good is the
    one kept (``on_low_fidelity: keep``)."""
    turns = [{"from": r, "value": v} for r, v in [
        ("system", words(10)), ("human", words(5)), ("gpt", words(5)), ("tool", words(5)),
        *[(r, f"open /repo/module_{k}.py " + words(35))
          for k, r in enumerate(["gpt", "tool", "gpt", "tool"])],
        ("gpt", words(5)), ("tool", words(5)), ("gpt", words(5)), ("tool", words(5))]]
    data = SHAREGPT.with_turns({"id": "r"}, turns)
    backend = TwoAttempts()
    c = compressor(counter, backend, min_fidelity=0.5, on_low_fidelity="keep",
                   summary_references="off")
    result = asyncio.run(c.compress_row(data))
    assert backend.repairs == 1
    m = result.metrics
    assert m.fidelity is not None and m.fidelity.ratio == 0
    assert m.low_fidelity and m.fidelity_repair
    written = " ".join(t["value"] for t in SHAREGPT.turns(result.row))
    assert "second attempt" in written and "first attempt" not in written


class UnnamedFailure(Summarizer):
    """Fails after two errors without saying of which kind."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        raise SummaryFailed("down", SummaryUsage(api_calls=2, errors=2, retries=1))


def test_errors_a_backend_did_not_name_are_counted_as_other(counter):
    result = asyncio.run(compressor(counter, UnnamedFailure()).compress_row(HAND_ROWS[1]))
    m = result.metrics
    assert m.summary_source == "fallback"
    assert m.summarization_errors == 2
    assert m.errors_by_kind == {"other": 2}
