"""`engine.replan` and `core.explain`: the survivors of the fifth mutation round (issue 26,
item 5) on rows whose outcome is worked out by hand.

Expected values from README ("What would fix it", "Still over the limit": the codes and
their numbers), the modules' docstrings and hand counts: ``words(n)`` is n tokens with the
bundled tokenizer (turn counting); a row's plan follows `core.plan` (the last four turns
and each role's first turn protected unless said otherwise; the region grows from the
middle's start until it holds ``total - target + summary`` tokens).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, row, words, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.explain import RowReason, explain, reason_numbers
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.remedies import Fixes
from trajectory_compressor.core.summary import Summary, SummaryRequest
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects import detect
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor
from trajectory_compressor.engine.projection import CountedRow, outcome
from trajectory_compressor.engine.replan import (
    OverRow,
    OverRows,
    WhatWouldFix,
    _cannot_fit,
    find_fixes,
)
from trajectory_compressor.inspect.analyze import analyze

NO_FIRST = {"protect_first_system": False, "protect_first_human": False,
            "protect_first_gpt": False, "protect_first_tool": False}


class Recording(ExtractiveSummarizer):
    """The extractive summarizer, noting each region it is asked to summarize as
    ``(first turn, end, summary size)``."""

    def __init__(self, counter: TokenCounter) -> None:
        super().__init__(counter.count)
        self.asked: list[tuple[int, int, int]] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.asked.append((request.first_index, request.first_index + len(request.turns),
                           request.target_tokens))
        return await super().summarize(request)


def compressor_for(counter: TokenCounter, **settings: Any) -> TrajectoryCompressor:
    config = CompressionConfig(summarizer="extractive", **{**HAND_CONFIG, **settings})
    return TrajectoryCompressor(config, summarizer=Recording(counter), counter=counter)


def asked(compressor: TrajectoryCompressor) -> list[tuple[int, int, int]]:
    summarizer = compressor.summarizer
    assert isinstance(summarizer, Recording)
    return summarizer.asked


def counted(data: dict, compressor: TrajectoryCompressor) -> CountedRow:
    dialect = detect([data], compressor.config)
    turns = dialect.turns(data)
    return CountedRow(data, turns, compressor.counter.count_many([t["value"] for t in turns]),
                      dialect)


def over_rows(compressor: TrajectoryCompressor, *rows: dict) -> tuple[OverRows, list[RowResult]]:
    """The rows as `analyze` keeps them for the table: each one's result as the settings
    leave it, kept when over the limit."""
    async def go() -> tuple[OverRows, list[RowResult]]:
        over, results = OverRows(), []
        async with compressor:
            for n, data in enumerate(rows, 1):
                c = counted(data, compressor)
                result = await outcome(compressor, c, exact=True)
                over.add(result, c, f"in.jsonl:{n}", data["id"])
                results.append(result)
        return over, results
    return asyncio.run(go())


def fixes_for(compressor: TrajectoryCompressor, over: OverRows) -> WhatWouldFix:
    async def go() -> WhatWouldFix:
        async with compressor:
            return await find_fixes(compressor, over, exact=True)
    return asyncio.run(go())


def alone(fixes: WhatWouldFix) -> dict[str, tuple[str, int]]:
    return {e["families"][0]: (e["flags"], e["rows_under"])
            for e in fixes.to_dict()["alone"]}


# -- the rows kept for the table -----------------------------------------------------------

# A 30-token notice on the system turn (`add_summary_notice`), summaries of 10 tokens.
NOTICE = {"add_summary_notice": True, "summary_notice_text": " " + words(30),
          "summary_target_tokens": 10}
# 205 tokens: the middle 4-5 (20 tokens) is the region; its summary plus the 30-token
# notice would make the row longer than it was: `summary_grew`, a failed row.
GROWS = row("grows", "SHGTGTGTGT", [10, 5, 5, 5, 10, 10, 40, 40, 40, 40])


def test_a_failed_row_is_counted_apart_and_not_examined(tmp_path, counter):
    """README: failed rows are counted (`rows_failed`) but not examined by the table
    (`summary_grew`: "not examined by the table")."""
    src = write_jsonl(tmp_path / "in.jsonl", [GROWS, HAND_ROWS[2], HAND_ROWS[0]])
    config = CompressionConfig(summarizer="extractive", **{**HAND_CONFIG, **NOTICE})
    (t,) = analyze(str(src), config, counter=counter).targets
    assert t.metrics.trajectories_failed == 1
    assert t.fixes is not None
    table = t.fixes.to_dict()
    assert (table["rows_failed"], table["rows_over"], table["rows_examined"]) == (1, 1, 1)
    assert [r["id"] for r in table["rows"]] == ["big-tail"]
    # Two failed rows: two counted apart, none kept.
    compressor = compressor_for(counter, **NOTICE)
    over, results = over_rows(compressor, GROWS, {**GROWS, "id": "grows-2"})
    assert all(r.metrics.failed and r.metrics.still_over_limit for r in results)
    assert (over.failed, over.over, over.rows) == (2, 0, [])


def test_at_most_the_first_50_rows_over_the_limit_are_examined(counter):
    """README: "at most the first 50 rows over the limit are examined (the table says so
    when there are more)"."""
    compressor = compressor_for(counter)
    c = counted(HAND_ROWS[2], compressor)
    over = OverRows()
    for n in range(1, 51):
        over.keep(OverRow(f"in.jsonl:{n}", n, "protected_tail_over_target", 165, c))
    fixes = WhatWouldFix(over, Fixes(0), True, 20, 100)
    assert (fixes.examined, fixes.capped_rows) == (50, False)
    over.keep(OverRow("in.jsonl:51", 51, "protected_tail_over_target", 165, c))
    table = fixes.to_dict()
    assert (table["rows_over"], table["rows_examined"], table["max_rows"]) == (51, 50, 50)
    assert fixes.capped_rows
    assert [r["id"] for r in table["rows"]] == list(range(1, 51))  # the first ones


# -- re-planning a row under a remedy -------------------------------------------------------

# Target 1,000, summary 200, the second pass on, a 600-token notice. 1,425 tokens: head
# 0-3 (225), middle 4-7 (G25 T500 G25 T380: 930), tail 8-11 (250). Needed 1,425 - 1,000
# + 200 = 625: the region is the whole middle (4-8); its summary (at most 200) and the
# notice add at most 800, less than its 930 tokens (not failed), but 475 + 600 and any
# summary is over the target. With a
# summary of 100 (50, 25) the region needs 525 (475, 450): turns 4-5 (525 tokens) give
# it, fewer than the notice alone adds: the summary would make the row longer, it fails.
LARGE_NOTICE = {"target_max_tokens": 1000, "summary_target_tokens": 200,
                "add_summary_notice": True, "summary_notice_text": " " + words(600),
                "over_limit_strategy": "elide_tool_outputs"}
FAILS_SMALLER = row("fails-smaller", "SHGTGTGTGTGT",
                    [100, 50, 25, 50, 25, 500, 25, 380, 25, 100, 25, 100])


def test_a_remedy_under_which_the_row_fails_does_not_fix_it(counter):
    """A failed row is written as it was (README: `summary_grew`, failed): a remedy that
    makes the row fail brings it under nothing, even though the second pass could have
    cut its tool outputs (500 and 380 tokens) by the 425 it is over."""
    compressor = compressor_for(counter, **LARGE_NOTICE)
    over, (result,) = over_rows(compressor, FAILS_SMALLER)
    assert result.plan.region is not None and result.plan.region_tokens == 930
    assert not result.metrics.failed and result.metrics.still_over_limit
    # compress with --summary-target-tokens 100: the row fails.
    smaller = compressor.with_config(compressor.config.replace(summary_target_tokens=100))
    (failed,) = over_rows(smaller, FAILS_SMALLER)[1]
    assert failed.metrics.failed and failed.plan.region_tokens == 525
    fixes = fixes_for(compressor, over)
    assert alone(fixes)["summary"][1] == 0
    assert not [e for e in fixes.fixed_by(0) if e.remedies[0].family == "summary"]


# 135 tokens, nothing protected at the start: the middle is turns 0-3, a 100-token tool
# output first (a region never starts on a tool turn: it would be 1-3, 15 tokens, not more
# than the summary: `region_too_small`), the last four turns (20 tokens) protected.
TOOL_FIRST = row("tool-first", "TGHGGTGT", [100, 5, 5, 5, 5, 5, 5, 5])


def test_the_second_pass_can_cut_a_tool_output_at_the_start_of_the_row(counter):
    """The second pass shortens tool outputs outside the protected head and tail: turn 0
    here (100 tokens), by the 35 the row is over."""
    compressor = compressor_for(counter, **NO_FIRST)
    over, (result,) = over_rows(compressor, TOOL_FIRST)
    assert result.plan.region is None and result.plan.region_tokens == 15
    elide = compressor.with_config(
        compressor.config.replace(over_limit_strategy="elide_tool_outputs"))
    (cut,) = over_rows(elide, TOOL_FIRST)[1]
    assert not cut.metrics.still_over_limit
    assert [e["turn"] for e in cut.metrics.elisions] == [0]
    fixes = fixes_for(compressor, over)
    assert alone(fixes)["elide"] == ("--over-limit-strategy elide_tool_outputs", 1)
    assert "--over-limit-strategy elide_tool_outputs" in fixes.to_dict()["rows"][0]["fixed_by"]


def test_a_row_that_cannot_fit_whatever_its_summary_gets_none(counter):
    """README: a row "that stays over even with its region gone and every tool output it
    may cut gone, is known to stay over without a summary". ``big-tail`` (265 tokens,
    target 100): with the last four turns protected, head (25) and tail (120) are 145
    outside the middle, so only a target of at least 145 (the target rung, 165, at the
    summary size of 20) lets a region ending at turn 8 fit; a smaller summary or the
    second pass (no tool output outside the region) never does."""
    compressor = compressor_for(counter)
    over, _ = over_rows(compressor, HAND_ROWS[2])
    asked(compressor).clear()
    fixes = fixes_for(compressor, over)
    assert alone(fixes)["summary"][1] == 0 and alone(fixes)["elide"][1] == 0
    made = asked(compressor)
    assert made, "fewer protected last turns bring the row under: summaries are made"
    assert [a for a in made if a[1] <= 8 and a[2] != 20] == []


def cannot_fit(counter: TokenCounter, tail: list[int], **settings: Any) -> bool:
    compressor = compressor_for(counter, **settings)
    data = row("r", "SHGTGTGTGTGT", [10, 5, 5, 5, 30, 30, 30, 30, *tail])
    c = counted(data, compressor)
    plan = compressor.plan(c.turns, c.turn_tokens, c.dialect)
    assert plan.region is not None and plan.region_tokens == 120  # the middle, 4-8
    return _cannot_fit(c, plan, compressor.config.target_max_tokens,
                       compressor.config.over_limit_strategy == "elide_tool_outputs")


def test_a_row_left_at_the_target_without_its_region_is_not_known_to_stay_over(counter):
    """`_cannot_fit`: true when the row "stays over target ... even with the region gone
    and nothing in its place". Head 25 + tail 75 = 100, the target: not over; one more
    tail token: over."""
    assert cannot_fit(counter, [15, 20, 20, 20]) is False
    assert cannot_fit(counter, [15, 20, 20, 21]) is True
    # With the second pass, the tail's tool outputs are protected: nothing more goes.
    assert cannot_fit(counter, [15, 20, 20, 21],
                      over_limit_strategy="elide_tool_outputs") is True


# -- core.explain ------------------------------------------------------------------------


def test_a_row_reason_cannot_be_changed_by_one_of_the_places_that_show_it():
    """`core.explain`: the over-limit file, the metrics file and `report` all show one
    answer; it is a frozen value."""
    reason = RowReason("region_too_small", "the region is too small", {"target": 100})
    with pytest.raises(dataclasses.FrozenInstanceError):
        reason.code = "failed"  # type: ignore[misc]


def test_a_summary_written_at_the_first_turn_has_its_tokens_in_the_numbers(counter):
    """Nothing protected at the start: the region is turns 0-3 and the summary is written
    at turn 0. README: the numbers hold, "when a summary was written, what the summary and
    notice added" (``summary_tokens``); the tail (four turns of 30) keeps the row over."""
    compressor = compressor_for(counter, **NO_FIRST)
    data = row("first", "HGTGGTGT", [30, 30, 30, 30, 30, 30, 30, 30])
    (result,) = over_rows(compressor, data)[1]
    plan, metrics = result.plan, result.metrics
    assert plan.region is not None and (plan.region.start, plan.region.end) == (0, 4)
    assert metrics.turns_compressed_start_idx == 0 and metrics.still_over_limit
    summary = counter.count(result.turns[0]["value"])  # no notice: no system turn
    numbers = reason_numbers(plan, metrics)
    assert numbers["summary_tokens"] == summary
    assert metrics.compressed_tokens == 120 + summary
    why = explain(plan, metrics)
    assert why is not None and why.code == "protected_tail_over_target"
    assert why.numbers["summary_tokens"] == summary and why.failed is False
