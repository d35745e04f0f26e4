"""`engine.projection`: the one result a row stands for in `analyze` and its remedies,
exact (extractive, built) or projected (an LLM summary of ``summary_target_tokens``), and
whether the second pass would bring a projected row under. Figures worked out by hand on
"word" rows (``words(n)`` is ``n`` tokens with the bundled tokenizer; turn counting).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, row, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import SummaryRequest, render_turns
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects import detect
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor
from trajectory_compressor.engine.projection import (
    CountedRow,
    elision_fits,
    outcome,
    projected,
)
from trajectory_compressor.inspect.analyze import analyze

ROWS = {r["id"]: r for r in HAND_ROWS}


def compressor_for(counter: TokenCounter, **settings: Any) -> TrajectoryCompressor:
    config = CompressionConfig(summarizer="extractive", **{**HAND_CONFIG, **settings})
    return TrajectoryCompressor(config, summarizer=ExtractiveSummarizer(counter.count),
                                counter=counter)


def counted(data: dict, compressor: TrajectoryCompressor) -> CountedRow:
    dialect = detect([data], compressor.config)
    turns = dialect.turns(data)
    return CountedRow(data, turns, compressor.counter.count_many([t["value"] for t in turns]),
                      dialect)


def run(compressor: TrajectoryCompressor, coro_of: Any) -> Any:
    async def go() -> Any:
        async with compressor:
            return await coro_of()
    return asyncio.run(go())


def test_a_row_under_the_target_is_itself(counter):
    compressor = compressor_for(counter)
    short = counted(ROWS["short"], compressor)  # 35 tokens, target 100
    for exact in (True, False):
        result = run(compressor, lambda exact=exact: outcome(compressor, short, exact=exact))
        assert isinstance(result, RowResult)
        assert result.plan.action == "skip" and not result.changed
        assert result.row is ROWS["short"]  # the input object, untouched


def test_exact_builds_the_extractive_summary(counter):
    """"fits" (205 tokens): middle 4-7 all summarized, 160 tokens, for a row of 65 with a
    20-token summary; the exact outcome is the extractive summary built."""
    compressor = compressor_for(counter)
    fits = counted(ROWS["fits"], compressor)
    result = run(compressor, lambda: outcome(compressor, fits, exact=True))
    assert result.changed and result.metrics.summary_source == "extractive"
    assert (result.plan.region.start, result.plan.region.end) == (4, 8)
    assert len(result.turns) == 12 - 4 + 1
    assert result.turns[4]["value"].startswith(SUMMARY_PREFIX)
    assert result.metrics.summarization_api_calls == 0  # no LLM was asked


def test_the_projection_of_an_llm_summary(counter):
    compressor = compressor_for(counter)
    fits = counted(ROWS["fits"], compressor)
    result = run(compressor, lambda: outcome(compressor, fits, exact=False))
    m = result.metrics
    assert result.changed and result.turns is fits.turns  # shown as read
    assert (m.summarization_api_calls, m.summary_source) == (1, "llm")
    assert m.completion_tokens == 20  # summary_target_tokens
    region = SummaryRequest(fits.turns[4:8], 4, 20)
    assert m.prompt_tokens == counter.count(render_turns(region)) > 160
    assert (m.original_tokens, m.compressed_tokens) == (205, 205 - 160 + 20)


def test_the_projected_input_is_bounded_by_max_input_tokens(counter):
    """A 1,200-token region is sent cut to the summarizer's input limit (512 here)."""
    compressor = compressor_for(counter, max_input_tokens=512)
    long = counted(row("long", "SHGTGTGTGTGT", [10, 5, 5, 5, 300, 300, 300, 300, 5, 5, 5, 5]),
                   compressor)
    plan = compressor.plan(long.turns, long.turn_tokens, long.dialect)
    assert plan.region is not None and plan.region_tokens == 1200
    result = projected(compressor, long, plan, long.turns)
    assert result.metrics.prompt_tokens == 512


def test_an_outcome_follows_the_plan_it_is_given(counter):
    """At a target of 150 "fits" needs 75 tokens of its middle plus the summary: turns
    4-5; the outcome made with that plan keeps it, whatever the compressor's target."""
    compressor = compressor_for(counter)
    fits = counted(ROWS["fits"], compressor)
    wider = compressor_for(counter, target_max_tokens=150)
    plan = wider.plan(fits.turns, fits.turn_tokens, fits.dialect)
    assert (plan.region.start, plan.region.end) == (4, 6)
    result = run(compressor, lambda: outcome(compressor, fits, exact=False, plan=plan))
    assert result.plan is plan
    assert result.metrics.compressed_tokens == 205 - 80 + 20


def test_no_second_pass_helps_when_the_whole_middle_went_and_the_tail_is_protected(counter):
    """"big-tail": head 25 + tail 120 > 100 with the whole middle summarized; no tool
    output outside the protected turns is left to cut, exact or projected."""
    compressor = compressor_for(counter, over_limit_strategy="elide_tool_outputs")
    big = counted(ROWS["big-tail"], compressor)
    plan = compressor.plan(big.turns, big.turn_tokens, big.dialect)
    for exact in (True, False):
        first = run(compressor, lambda exact=exact: outcome(compressor, big, exact=exact,
                                                            plan=plan))
        assert first.metrics.still_over_limit
        assert elision_fits(compressor, big, plan, first, exact=exact) is False


def test_a_counted_row_is_a_value(counter):
    compressor = compressor_for(counter)
    short = counted(ROWS["short"], compressor)
    with pytest.raises(dataclasses.FrozenInstanceError):
        short.turn_tokens = []  # type: ignore[misc]


def test_the_remedy_does_not_count_outputs_the_summary_already_took(tmp_path, counter):
    """No protected head, the last 2 turns protected: G(50) T(1,500) G(20) T(30) | T(1,400)
    G(20), 3,020 tokens. Over 1,500 by 1,520, the region must cover 1,620; it reaches the
    middle's end at turn 3, a tool turn before the tail's tool turn, so it stops at turn 2:
    turns 0-1 (1,550) go, from index 0. Projected with a 100-token summary: 1,570, over by
    70. The one output left outside the protected turns has 30 tokens (too short to cut):
    eliding cannot bring the row under, though the 1,500-token output the summary took
    would have given 70."""
    sizes = [50, 1500, 20, 30, 1400, 20]
    src = write_jsonl(tmp_path / "one.jsonl", [row("r", "GTGTTG", sizes)])
    settings = {"target_max_tokens": 1500, "summary_target_tokens": 100,
                "protect_last_n_turns": 2, "add_summary_notice": False,
                "protect_first_system": False, "protect_first_human": False,
                "protect_first_gpt": False, "protect_first_tool": False}

    def llm(**more: Any) -> CompressionConfig:
        return CompressionConfig(summarizer="openai", **settings, **more).with_endpoint_flags(
            ["http://127.0.0.1:9/v1"], "m")

    (target,) = analyze(str(src), llm(), counter=counter).targets
    assert target.llm.total_tokens_after == sum(sizes) - 1550 + 100
    assert target.fixes is not None
    alone = {e["flags"]: e["rows_under"] for e in target.fixes.to_dict()["alone"]}
    assert alone["--over-limit-strategy elide_tool_outputs"] == 0
    # As a run with the strategy projects it: still over.
    (elided,) = analyze(str(src), llm(over_limit_strategy="elide_tool_outputs"),
                        counter=counter).targets
    assert elided.llm.trajectories_still_over_limit == 1


# -- counted with a chat template (`token_counting: chat_template`) -----------------------

@pytest.fixture(scope="module")
def template_compressors(tmp_path_factory, counter) -> tuple[TrajectoryCompressor, ...]:
    """(keep, elide): the same settings, without and with the second pass (the template
    is loaded once for the module: a few seconds each time)."""
    from tests.template_tokenizer import CHATML

    template = tmp_path_factory.mktemp("template") / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    settings = {"target_max_tokens": 1500, "summary_target_tokens": 100,
                "protect_last_n_turns": 2, "token_counting": "chat_template",
                "chat_template": str(template)}
    keep = compressor_for(counter, **settings)
    return keep, keep.with_config(keep.config.replace(over_limit_strategy="elide_tool_outputs"))


def template_counted(compressor: TrajectoryCompressor, sizes: list[int]) -> CountedRow:
    data = row("r", "SHGTGTGTTG", sizes)
    dialect = detect([data], compressor.config)
    turns = dialect.turns(data)
    (turn_tokens,) = compressor.rows.count([(dialect, data, turns)])
    return CountedRow(data, turns, turn_tokens, dialect)


def test_a_projections_second_pass_is_counted_by_the_turns_it_cut(template_compressors):
    """With a chat template too, the projected row's tokens after the second pass are its
    projected tokens before it minus what each elision cut (no summary text exists to
    render the row with)."""
    keep, elide = template_compressors
    one = template_counted(keep, [10, 10, 10, 10, 310, 300, 20, 200, 1100, 20])
    plan = elide.plan(one.turns, one.turn_tokens, one.dialect)
    before = projected(keep, one, plan, one.turns).metrics
    after = projected(elide, one, plan, one.turns).metrics
    assert before.still_over_limit and after.elisions
    cut = sum(e["tokens_before"] - e["tokens_after"] for e in after.elisions)
    assert after.compressed_tokens == before.compressed_tokens - cut <= 1500
    assert not after.still_over_limit


def test_the_remedys_exact_second_pass_counts_the_summary_written(template_compressors):
    """The exact check renders the row with the extractive summary `compress` writes. Here
    the one output the second pass may cut (turn 7, 200 tokens) cannot give all that is
    missing, though it could if the summary were not counted: the check says no, as the
    run with the second pass does."""
    keep, elide = template_compressors
    one = template_counted(keep, [10, 10, 10, 10, 310, 300, 20, 200, 1220, 20])
    plan = elide.plan(one.turns, one.turn_tokens, one.dialect)

    async def both() -> tuple[RowResult, RowResult]:
        async with keep:  # the two share the summarizer
            return (await keep.compress_planned(one.row, one.turns, plan, one.dialect),
                    await elide.compress_planned(one.row, one.turns, plan, one.dialect))

    first, run_with_pass = asyncio.run(both())
    assert first.metrics.still_over_limit and run_with_pass.metrics.still_over_limit
    assert elision_fits(elide, one, plan, first, exact=True) is False


def test_a_row_left_uncompressed_for_low_fidelity_can_still_be_elided(counter):
    """``on_low_fidelity: uncompressed`` under a bar of 1.0: the region (turns 4-5, turn 5
    a tool output of 25 failures with paths and line numbers) cannot be summarized in 100
    tokens without losing some, so the row is written as it was, still over. Every tool
    output of the middle is still there: the second pass cuts the 2,000-token one (turn 7),
    as the run with it does."""
    facts = "\n".join(f"FAIL /repo/src/module_{i}.py:{100 + i * 7} exit {i}" for i in range(25))
    data = row("r", "SHGTGTGTTG", [10, 10, 10, 10, 300, 1, 20, 2000, 20, 20])
    data["conversations"][5]["value"] = facts
    keep = compressor_for(counter, target_max_tokens=1500, summary_target_tokens=100,
                          protect_last_n_turns=2, min_fidelity=1.0,
                          on_low_fidelity="uncompressed")
    elide = keep.with_config(keep.config.replace(over_limit_strategy="elide_tool_outputs"))
    one = counted(data, keep)
    plan = keep.plan(one.turns, one.turn_tokens, one.dialect)
    assert plan.region is not None and (plan.region.start, plan.region.end) == (4, 6)

    async def both() -> tuple[RowResult, RowResult]:
        async with keep:
            return (await keep.compress_planned(one.row, one.turns, plan, one.dialect),
                    await elide.compress_planned(one.row, one.turns, plan, one.dialect))

    first, run_with_pass = asyncio.run(both())
    assert first.metrics.low_fidelity and first.metrics.turns_compressed_start_idx == -1
    assert first.metrics.still_over_limit and first.metrics.error is None
    assert not run_with_pass.metrics.still_over_limit
    assert [e["turn"] for e in run_with_pass.metrics.elisions] == [7]
    assert elision_fits(elide, one, plan, first, exact=True) is True
