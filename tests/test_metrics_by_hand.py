"""Metrics, the summary budget and the aggregate file, against numbers worked out by hand.

Per-turn counts are given to the compressor explicitly (``turn_tokens``), so the plan's
numbers are the ones written here. Only two counts come from the real bundled tokenizer:
the fixed summary text and the system-notice delta, measured with the raw `tokenizers`
``encode`` (no batching, no memo) as an independent check of what the compressor counts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trajectory_compressor.core.assemble import compressed_metrics
from trajectory_compressor.core.config import DEFAULT_SUMMARY_NOTICE, CompressionConfig
from trajectory_compressor.core.metrics import AggregateMetrics, TrajectoryMetrics
from trajectory_compressor.core.plan import Plan, Region
from trajectory_compressor.core.summary import Summarizer, Summary, SummaryRequest, SummaryUsage
from trajectory_compressor.counting.tokens import TokenCounter, load_bundled_backend
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor

SYSTEM_TEXT = "You are a careful coding agent. Use the tools to inspect the repository."
SUMMARY_TEXT = "[CONTEXT SUMMARY]: The assistant listed src/ and read main.py (42 lines)."


@pytest.fixture(scope="module")
def bundled() -> TokenCounter:
    return TokenCounter.load()


@pytest.fixture(scope="module")
def raw_len() -> Any:
    backend = load_bundled_backend()
    return lambda text: len(backend.encode(text, add_special_tokens=False).ids)


class RecordingSummarizer(Summarizer):
    """Returns ``SUMMARY_TEXT`` and remembers every budget it was asked for."""

    name = "recording"

    def __init__(self) -> None:
        self.budgets: list[int] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.budgets.append(request.target_tokens)
        return Summary(SUMMARY_TEXT, "llm", SummaryUsage(api_calls=1, prompt_tokens=321,
                                                          completion_tokens=17))


# n = 8, n // 2 = 4. Protected: first system 0, human 1, gpt 2, tool 3; the last two 6, 7.
# The middle is [4, 6). Whenever ``needed`` exceeds the middle's tokens (always below,
# since target < total and needed = total - target + summary > summary), the region is
# the whole middle [4, 6).
ROLES = ["system", "human", "gpt", "tool", "human", "gpt", "human", "gpt"]


def turns() -> list[dict[str, str]]:
    values = [SYSTEM_TEXT, "List the files.", "<tool_call>{}</tool_call>", "src/ tests/",
              "Now read main.py.", "It has 42 lines.", "Thanks.", "Done."]
    return [{"from": r, "value": v} for r, v in zip(ROLES, values, strict=True)]


def compress(counter: TokenCounter, tokens: list[int], **knobs: Any) -> tuple[
        RowResult, RecordingSummarizer]:
    config = CompressionConfig(protect_last_n_turns=2, **knobs)
    summarizer = RecordingSummarizer()
    compressor = TrajectoryCompressor(config, summarizer=summarizer, counter=counter)

    async def go() -> RowResult:
        async with compressor:
            return await compressor.compress_row({"id": "r1", "conversations": turns()},
                                                 tokens)

    return asyncio.run(go()), summarizer


def notice_delta(raw_len: Any) -> int:
    delta = raw_len(SYSTEM_TEXT + DEFAULT_SUMMARY_NOTICE) - raw_len(SYSTEM_TEXT)
    assert delta >= 3  # the cases below need a notice of a few tokens
    return int(delta)


# --- the summary budget: max(1, min(summary_target, region - notice_delta - 1)) -------

def test_budget_is_cut_by_the_notice_delta(bundled: TokenCounter, raw_len: Any) -> None:
    # tokens: 100 + 3*10 + 30 + 30 + 2*10 = 210 > target 150. Region [4, 6) = 60 tokens.
    # summary target 58 < 60 passes the guard. Budget = max(1, min(58, 60 - d - 1)):
    # with d >= 3 that is 59 - d (< 58), so summary + notice (<= 59) stays below 60.
    d = notice_delta(raw_len)
    result, summarizer = compress(bundled, [100, 10, 10, 10, 30, 30, 10, 10],
                                  target_max_tokens=150, summary_target_tokens=58)
    assert result.metrics.was_compressed
    assert summarizer.budgets == [59 - d]


def test_budget_without_notice_is_region_minus_one_at_most(bundled: TokenCounter) -> None:
    # Same row, notice off: d = 0. min(58, 60 - 0 - 1) = 58.
    result, summarizer = compress(bundled, [100, 10, 10, 10, 30, 30, 10, 10],
                                  target_max_tokens=150, summary_target_tokens=58,
                                  add_summary_notice=False)
    assert result.metrics.was_compressed
    assert summarizer.budgets == [58]
    # summary target 59: min(59, 60 - 1) = 59; region 60 > 59 passes the guard.
    _, summarizer = compress(bundled, [100, 10, 10, 10, 30, 30, 10, 10],
                             target_max_tokens=150, summary_target_tokens=59,
                             add_summary_notice=False)
    assert summarizer.budgets == [59]


def test_budget_is_the_summary_target_for_a_big_region(bundled: TokenCounter,
                                                       raw_len: Any) -> None:
    # Region 60, summary target 20: min(20, 59 - d) = 20 while d < 39.
    assert notice_delta(raw_len) < 39
    _, summarizer = compress(bundled, [100, 10, 10, 10, 30, 30, 10, 10],
                             target_max_tokens=150, summary_target_tokens=20)
    assert summarizer.budgets == [20]


def test_budget_never_below_one(bundled: TokenCounter, raw_len: Any) -> None:
    # Middle 1 + 1 = 2 tokens; total 100 + 30 + 2 + 20 = 152 > 150; summary target 1:
    # needed = 152 - 150 + 1 = 3 > 2 -> the whole middle, 2 > 1 passes the guard.
    # 2 - d - 1 <= -2 with d >= 3, so the budget is max(1, ...) = 1.
    notice_delta(raw_len)
    _, summarizer = compress(bundled, [100, 10, 10, 10, 1, 1, 10, 10],
                             target_max_tokens=150, summary_target_tokens=1)
    assert summarizer.budgets == [1]


# --- per-row metrics with the notice delta --------------------------------------------

def test_row_metrics_count_the_notice_delta(bundled: TokenCounter, raw_len: Any) -> None:
    d, c = notice_delta(raw_len), raw_len(SUMMARY_TEXT)
    tokens = [100, 10, 10, 10, 30, 30, 10, 10]  # total 210, region [4, 6) = 60
    result, _ = compress(bundled, tokens, target_max_tokens=150, summary_target_tokens=20)
    m = result.metrics
    compressed = 210 - 60 + c + d
    assert m.original_tokens == 210
    assert m.compressed_tokens == compressed
    assert m.tokens_saved == 210 - compressed == 60 - c - d
    assert m.compression_ratio == pytest.approx(compressed / 210)
    assert (m.original_turns, m.compressed_turns, m.turns_removed) == (8, 7, 1)
    assert (m.turns_compressed_start_idx, m.turns_compressed_end_idx,
            m.turns_in_compressed_region) == (4, 6, 2)
    assert m.was_compressed and not m.skipped_under_target
    assert m.still_over_limit is (compressed > 150)
    assert (m.summary_source, m.summarization_api_calls) == ("llm", 1)
    assert (m.prompt_tokens, m.completion_tokens) == (321, 17)
    row = result.row
    assert row["id"] == "r1"
    assert row["compression_metrics"]["tokens_saved"] == 60 - c - d
    new = row["conversations"]
    assert [t["from"] for t in new] == ["system", "human", "gpt", "tool", "human", "human",
                                        "gpt"]
    assert new[0]["value"] == SYSTEM_TEXT + DEFAULT_SUMMARY_NOTICE
    assert new[4]["value"] == SUMMARY_TEXT


def test_row_metrics_without_notice(bundled: TokenCounter, raw_len: Any) -> None:
    c = raw_len(SUMMARY_TEXT)
    result, _ = compress(bundled, [100, 10, 10, 10, 30, 30, 10, 10], target_max_tokens=150,
                         summary_target_tokens=20, add_summary_notice=False)
    # d = 0: compressed = 210 - 60 + c.
    assert result.metrics.compressed_tokens == 150 + c
    assert result.metrics.tokens_saved == 60 - c
    assert result.row["conversations"][0]["value"] == SYSTEM_TEXT


def test_projected_metrics_count_the_notice_delta(bundled: TokenCounter, raw_len: Any) -> None:
    # The dry run's projection: 210 - 60 + 25 + d.
    d = notice_delta(raw_len)
    config = CompressionConfig(protect_last_n_turns=2, target_max_tokens=150,
                               summary_target_tokens=20)
    compressor = TrajectoryCompressor(config, summarizer=RecordingSummarizer(), counter=bundled)
    plan = compressor.plan(turns(), [100, 10, 10, 10, 30, 30, 10, 10])
    m = compressor.projected_metrics(turns(), plan, 25)
    assert m.compressed_tokens == 175 + d
    assert m.tokens_saved == 35 - d


def test_compressed_metrics_formula_by_hand() -> None:
    # total 1000, region [3, 7) of 400 tokens, 10 turns, summary 120, notice delta 7:
    # compressed = 1000 - 400 + 120 + 7 = 727; saved 273; ratio 0.727;
    # turns 10 - 4 + 1 = 7, removed 3; over a 800 target? no. Over 700? yes.
    plan = Plan("compress", 1000, Region(2, 9), Region(3, 7), 400)
    m = compressed_metrics(plan, 10, 120, 7, CompressionConfig(target_max_tokens=800))
    assert (m.original_tokens, m.compressed_tokens, m.tokens_saved) == (1000, 727, 273)
    assert m.compression_ratio == pytest.approx(0.727)
    assert (m.original_turns, m.compressed_turns, m.turns_removed) == (10, 7, 3)
    assert (m.turns_compressed_start_idx, m.turns_compressed_end_idx,
            m.turns_in_compressed_region) == (3, 7, 4)
    assert m.was_compressed and not m.still_over_limit
    m = compressed_metrics(plan, 10, 120, 7, CompressionConfig(target_max_tokens=700,
                                                               summary_target_tokens=100))
    assert m.still_over_limit


# --- the aggregate file ----------------------------------------------------------------

def hand_rows() -> list[TrajectoryMetrics]:
    return [
        # 1. under the target
        TrajectoryMetrics(original_tokens=100, compressed_tokens=100, original_turns=4,
                          compressed_turns=4, skipped_under_target=True),
        # 2. compressed by the LLM
        TrajectoryMetrics(original_tokens=1000, compressed_tokens=600, tokens_saved=400,
                          compression_ratio=0.6, original_turns=20, compressed_turns=15,
                          turns_removed=5, was_compressed=True, summarization_api_calls=1,
                          summary_source="llm", prompt_tokens=900, completion_tokens=150),
        # 3. compressed by the fallback, still over
        TrajectoryMetrics(original_tokens=2000, compressed_tokens=1500, tokens_saved=500,
                          compression_ratio=0.75, original_turns=30, compressed_turns=22,
                          turns_removed=8, was_compressed=True, still_over_limit=True,
                          summarization_api_calls=3, summarization_errors=2, retries=2,
                          summary_source="fallback", prompt_tokens=1800),
        # 4. over the limit, nothing to cut
        TrajectoryMetrics(original_tokens=1200, compressed_tokens=1200, original_turns=10,
                          compressed_turns=10, still_over_limit=True),
        # 5. failed (deadline), unchanged
        TrajectoryMetrics(original_tokens=1300, compressed_tokens=1300, original_turns=12,
                          compressed_turns=12, still_over_limit=True,
                          summarization_api_calls=2, summarization_errors=2, retries=1,
                          error="deadline", prompt_tokens=100),
        # 6. compressed from the cache
        TrajectoryMetrics(original_tokens=800, compressed_tokens=500, tokens_saved=300,
                          compression_ratio=0.625, original_turns=16, compressed_turns=9,
                          turns_removed=7, was_compressed=True, summary_source="cache"),
    ]


def test_aggregate_to_dict_by_hand() -> None:
    agg = AggregateMetrics(rows_rejected=2, processing_start_time="2025-01-01T00:00:00",
                           processing_end_time="2025-01-01T00:00:12",
                           processing_duration_seconds=12.3456)
    for m in hand_rows():
        agg.add(m)
    d = agg.to_dict()
    assert list(d) == ["summary", "tokens", "turns", "averages", "summarization",
                       "processing", "usage", "distributions", "over_limit", "strategy"]
    # 6 rows; compressed: 2, 3, 6; skipped: 1; still over: 3, 4, 5; failed: 5. 3/6 = 0.5.
    assert d["summary"] == {
        "total_trajectories": 6, "trajectories_compressed": 3,
        "trajectories_skipped_under_target": 1, "trajectories_still_over_limit": 3,
        "trajectories_failed": 1, "compression_rate": 0.5, "rows_rejected": 2,
    }
    # before 100+1000+2000+1200+1300+800 = 6400; after 100+600+1500+1200+1300+500 = 5200;
    # saved 400+500+300 = 1200; 5200/6400 = 0.8125.
    assert d["tokens"] == {"total_before": 6400, "total_after": 5200, "total_saved": 1200,
                           "overall_compression_ratio": 0.8125}
    # turns 4+20+30+10+12+16 = 92 -> 4+15+22+10+12+9 = 72; removed 5+8+7 = 20.
    assert d["turns"] == {"total_before": 92, "total_after": 72, "total_removed": 20}
    # Over the 3 compressed rows only: (0.6+0.75+0.625)/3 = 0.658333 -> 0.6583
    # (over all six rows it would be 4.975/6 = 0.8292); 1200/3 = 400.0; 20/3 -> 6.67.
    assert d["averages"] == {"avg_compression_ratio": 0.6583,
                             "avg_tokens_saved_per_compressed": 400.0,
                             "avg_turns_removed_per_compressed": 6.67}
    # calls 1+3+2 = 6, errors 2+2 = 4: 1 - 4/6 = 0.3333; retries 2+1 = 3.
    assert d["summarization"] == {
        "total_api_calls": 6, "total_errors": 4, "success_rate": 0.3333, "retries": 3,
        "summaries_by_source": {"llm": 1, "cache": 1, "extractive": 0, "fallback": 1},
        "summaries_truncated": 0, "errors_by_kind": {},
    }
    assert d["processing"] == {"start_time": "2025-01-01T00:00:00",
                               "end_time": "2025-01-01T00:00:12", "duration_seconds": 12.35}
    # prompt 900+1800+100 = 2800, completion 150.
    assert d["usage"] == {"prompt_tokens": 2800, "completion_tokens": 150, "total_tokens": 2950}
    # Nearest rank of 6 values: median rank 3, p90 rank ceil(5.4) = 6, p99 rank 6.
    # before sorted 100 800 1000 1200 1300 2000; after sorted 100 500 600 1200 1300 1500.
    assert d["distributions"] == {
        "tokens_before": {"min": 100, "median": 1000, "p90": 2000, "p99": 2000, "max": 2000},
        "tokens_after": {"min": 100, "median": 600, "p90": 1500, "p99": 1500, "max": 1500},
    }
    # No reason codes were given (`add(m)` alone) and no row was elided.
    assert d["over_limit"] == {"reasons": {}, "rows_elided": 0, "tool_outputs_elided": 0,
                               "tokens_elided": 0}


def test_aggregate_with_nothing_compressed() -> None:
    # Only rows 1 and 4: no compressed row, so the averages fall back to 1.0 / 0 / 0.
    agg = AggregateMetrics()
    rows = hand_rows()
    agg.add(rows[0])
    agg.add(rows[3])
    d = agg.to_dict()
    assert d["averages"] == {"avg_compression_ratio": 1.0, "avg_tokens_saved_per_compressed": 0,
                             "avg_turns_removed_per_compressed": 0}
    assert d["summary"]["compression_rate"] == 0.0
    # 1300 / 1300 = 1.0; success rate with no calls: 1 - 0/1 = 1.0.
    assert d["tokens"]["overall_compression_ratio"] == 1.0
    assert d["summarization"]["success_rate"] == 1.0
