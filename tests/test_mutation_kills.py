"""Tests written to kill the mutants `scripts/mutation.py` found surviving (issue 20).

Each expected value is worked out by hand here, from SPEC formulas or small inputs.
"""

from __future__ import annotations

import dataclasses

import pytest

from trajectory_compressor.core.assemble import assemble, base_metrics, notice_index
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.metrics import (
    AggregateMetrics,
    Distribution,
    TrajectoryMetrics,
    aggregate_from_state,
    aggregate_state,
    bin_of,
    histogram,
    nice_edges,
)
from trajectory_compressor.core.plan import ALTERNATING, ANY_BUT_TOOL, Boundaries, Plan, Region
from trajectory_compressor.core.redact import scrub_literals

# --- metrics: histogram edges and bins (what `analyze` and `report` draw) ---------------


def test_nice_edges_by_hand() -> None:
    # (high - low) / 10 = 10: a step of 10 from 0.
    assert nice_edges(0, 100) == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    # 5021.5 a bin: 1000, 2000, 2500 and 5000 are short, 10,000 is the step; from 0.
    assert nice_edges(1412, 51627) == [0, 10000, 20000, 30000, 40000, 50000, 60000]
    # 2.5 a bin: 2.5 is not a whole number, so 5.
    assert nice_edges(0, 25) == [0, 5, 10, 15, 20, 25]
    # 0.3 a bin: never less than 1.
    assert nice_edges(0, 3) == [0, 1, 2, 3]
    # 1.2 a bin from 7: the step is 2, the first edge 7 // 2 * 2 = 6.
    assert nice_edges(7, 19) == [6, 8, 10, 12, 14, 16, 18, 20]
    assert nice_edges(5, 5) == [5, 6] and nice_edges(9, 4) == [9, 10]


def test_bins_are_half_open_but_the_last_is_closed() -> None:
    edges = [0, 10, 20]
    assert [bin_of(edges, v) for v in (0, 9, 10, 19, 20)] == [0, 0, 1, 1, 1]
    assert bin_of(edges, -1) is None and bin_of(edges, 21) is None
    assert histogram([0, 5, 10, 10, 20, 25], edges) == [2, 3]
    assert histogram([-3, 0, 9, 10], [0, 10, 20, 30]) == [2, 1, 0]


# --- metrics: distributions --------------------------------------------------------------


def test_exact_quantiles_are_nearest_rank() -> None:
    d = Distribution()
    for v in (5, 1, 9, 3):
        d.add(v)
    # sorted 1 3 5 9; rank ceil(q * 4), at least 1.
    assert (d.quantile(0.0), d.quantile(0.25), d.quantile(0.5), d.quantile(0.76),
            d.quantile(1.0)) == (1, 1, 3, 9, 9)
    assert d.summary() == {"min": 1, "median": 3, "p90": 9, "p99": 9, "max": 9}
    assert d.histogram([0, 5, 10]) == [2, 2]
    empty = Distribution()
    assert empty.quantile(0.5) is None
    assert empty.summary() == {"min": None, "median": None, "p90": None, "p99": None,
                               "max": None}


class Small(Distribution):
    EXACT_CAP = 3  # past 3 values: log buckets


def test_past_the_exact_cap_quantiles_are_within_one_percent() -> None:
    d = Small()
    for v in (400, 100, 300, 200, 0):
        d.add(v)
    assert d._exact is None and (d.count, d.min, d.max) == (5, 0, 400)
    # sorted 0 100 200 300 400: rank 1 -> 0, rank 3 -> ~200, rank 5 -> ~400 (max).
    assert d.quantile(0.1) == 0
    assert abs(d.quantile(0.5) - 200) <= 2
    assert abs(d.quantile(0.8) - 300) <= 3
    assert d.quantile(1.0) == 400
    assert d.histogram([0, 150, 350, 500]) == [2, 2, 1]
    assert d.histogram([150, 250, 450]) == [1, 2]  # 0 and 100 fall outside


def test_distribution_state_round_trips_in_both_modes() -> None:
    for cls in (Distribution, Small):
        d = cls()
        for v in (7, 70, 700, 7000):
            d.add(v)
        back = cls.from_state(d.state())
        assert (back.count, back.min, back.max, back.summary()) == (
            d.count, d.min, d.max, d.summary())


def test_merging_distributions_adds_their_values() -> None:
    a, b = Distribution(), Distribution()
    for v in (3, 1):
        a.add(v)
    for v in (2, 8, 5):
        b.add(v)
    a.merge(b)
    assert (a.count, a.min, a.max, a.quantile(0.5)) == (5, 1, 8, 3)
    a.merge(Distribution())  # nothing to add
    assert a.count == 5
    big, small = Small(), Distribution()
    for v in (10, 20, 30, 40):
        big.add(v)
    small.add(1)
    small.merge(big)  # bucketed into exact: small becomes bucketed
    assert small._exact is None and (small.count, small.min, small.max) == (5, 1, 40)
    assert small.quantile(0.2) == 1


# --- metrics: per-row dict and the aggregate's state and merge --------------------------


def test_row_metrics_dict_in_the_reference_order_and_back() -> None:
    m = TrajectoryMetrics(original_tokens=1000, compressed_tokens=612, tokens_saved=388,
                          compression_ratio=0.61234, original_turns=20, compressed_turns=15,
                          turns_removed=5, turns_compressed_start_idx=4,
                          turns_compressed_end_idx=10, turns_in_compressed_region=6,
                          was_compressed=True, summarization_api_calls=2,
                          summarization_errors=1, summary_source="fallback")
    d = m.to_dict()
    assert list(d) == ["original_tokens", "compressed_tokens", "tokens_saved",
                       "compression_ratio", "original_turns", "compressed_turns",
                       "turns_removed", "compression_region", "was_compressed",
                       "still_over_limit", "skipped_under_target", "summarization_api_calls",
                       "summarization_errors", "summary_source",
                       # then the strategy's keys (§19), last
                       "strategy_used", "masked_turns", "masked_tokens",
                       "assistant_tokens_kept"]
    assert d["compression_ratio"] == 0.6123
    assert d["compression_region"] == {"start_idx": 4, "end_idx": 10, "turns_count": 6}
    back = TrajectoryMetrics.from_dict(d)
    assert back.to_dict() == d and back.compression_ratio == 0.6123
    failed = TrajectoryMetrics(error="deadline", summary_truncated=True)
    fd = failed.to_dict()
    assert fd["error"] == "deadline" and fd["summary_truncated"] is True
    assert list(fd)[-6:-4] == ["error", "summary_truncated"]
    assert TrajectoryMetrics.from_dict(fd) == failed
    # An empty dict reads back as the defaults.
    assert TrajectoryMetrics.from_dict({}) == TrajectoryMetrics()
    assert TrajectoryMetrics().failed is False and failed.failed is True


def test_aggregate_state_round_trips_and_merge_adds_everything() -> None:
    a = AggregateMetrics(processing_duration_seconds=3.0)
    a.add(TrajectoryMetrics(original_tokens=100, compressed_tokens=60, tokens_saved=40,
                            compression_ratio=0.6, original_turns=8, compressed_turns=5,
                            turns_removed=3, was_compressed=True, summary_source="llm",
                            summarization_api_calls=1, prompt_tokens=90,
                            completion_tokens=10, retries=1, summary_truncated=True,
                            errors_by_kind={"http": 1}))
    a.rows_rejected = 2
    back = aggregate_from_state(aggregate_state(a))
    assert back.to_dict() == a.to_dict()
    assert aggregate_from_state({}).to_dict() == AggregateMetrics().to_dict()
    b = AggregateMetrics(processing_duration_seconds=50.0)
    b.add(TrajectoryMetrics(original_tokens=10, compressed_tokens=10, original_turns=2,
                            compressed_turns=2, skipped_under_target=True,
                            errors_by_kind={"http": 2, "timeout": 1}))
    a.merge(b)
    d = a.to_dict()
    assert d["summary"]["total_trajectories"] == 2 and d["summary"]["rows_rejected"] == 2
    assert d["tokens"] == {"total_before": 110, "total_after": 70, "total_saved": 40,
                           "overall_compression_ratio": round(70 / 110, 4)}
    assert d["summarization"]["errors_by_kind"] == {"http": 3, "timeout": 1}
    assert d["summarization"]["summaries_truncated"] == 1
    assert d["usage"] == {"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100}
    assert d["processing"]["duration_seconds"] == 3.0  # the times stay this object's
    assert d["distributions"]["tokens_before"]["min"] == 10


# --- assembly --------------------------------------------------------------------------


def turn(role: str, value: str) -> dict[str, str]:
    return {"from": role, "value": value, "weight": 1}


def test_base_metrics_of_a_row_left_as_it_is() -> None:
    skipped = base_metrics(Plan("skip", 500, Region(2, 4)), 6)
    assert skipped == TrajectoryMetrics(original_tokens=500, compressed_tokens=500,
                                        original_turns=6, compressed_turns=6,
                                        skipped_under_target=True, still_over_limit=False)
    over = base_metrics(Plan("over_limit", 900, Region(2, 2), reason="x"), 4)
    assert (over.skipped_under_target, over.still_over_limit) == (False, True)
    assert (over.tokens_saved, over.compression_ratio, over.turns_removed) == (0, 1.0, 0)
    assert over.turns_compressed_start_idx == -1 and not over.was_compressed
    # A planned compression that failed is written unchanged: still over the limit.
    assert base_metrics(Plan("compress", 900, Region(2, 6), Region(2, 4), 300), 8) \
        .still_over_limit


def test_the_notice_goes_to_the_first_system_turn_of_the_head_only() -> None:
    config = CompressionConfig()
    turns = [turn("human", "h"), turn("system", "s1"), turn("system", "s2"), turn("gpt", "g"),
             turn("tool", "t"), turn("gpt", "g2")]
    assert notice_index(turns, Region(3, 5), config) == 1
    assert notice_index(turns, Region(1, 5), config) is None  # the system turn is summarized
    assert notice_index(turns, Region(2, 5), config) == 1
    assert notice_index(turns, Region(3, 5), CompressionConfig(add_summary_notice=False)) \
        is None
    no_system = [turn("human", "h"), turn("gpt", "g"), turn("tool", "t")]
    assert notice_index(no_system, Region(1, 3), config) is None


def test_assemble_by_hand() -> None:
    config = CompressionConfig(summary_notice_text=" [notice]")
    turns = [turn("system", "sys"), turn("human", "task"), turn("gpt", "a"),
             turn("tool", "b"), turn("gpt", "c"), turn("human", "end")]
    out = assemble(turns, Region(2, 4), "[CONTEXT SUMMARY]: s", config)
    assert out == [
        {"from": "system", "value": "sys [notice]", "weight": 1},
        {"from": "human", "value": "task", "weight": 1},
        {"from": "human", "value": "[CONTEXT SUMMARY]: s"},
        {"from": "gpt", "value": "c", "weight": 1},
        {"from": "human", "value": "end", "weight": 1},
    ]
    out[0]["value"] = out[3]["value"] = "changed"  # copies: the input is untouched
    assert turns[0]["value"] == "sys" and turns[4]["value"] == "c"
    plain = assemble(turns, Region(2, 4), "S", CompressionConfig(add_summary_notice=False))
    assert plain[0] == turns[0] and len(plain) == 5


def test_a_row_exactly_at_the_target_after_compression_is_not_over_it() -> None:
    from trajectory_compressor.core.assemble import compressed_metrics

    # 1000 - 400 + 150 + 0 = 750 = the target: "over" is strictly more (SPEC §3.8).
    plan = Plan("compress", 1000, Region(2, 9), Region(3, 7), 400)
    at = compressed_metrics(plan, 10, 150, 0, CompressionConfig(target_max_tokens=750,
                                                                 summary_target_tokens=100))
    assert at.compressed_tokens == 750 and at.still_over_limit is False
    above = compressed_metrics(plan, 10, 151, 0, CompressionConfig(target_max_tokens=750,
                                                                    summary_target_tokens=100))
    assert above.still_over_limit is True


def test_aggregate_counters_by_hand() -> None:
    # Two compressed rows and one skipped; the sections the reference defines, by hand.
    agg = AggregateMetrics()
    agg.add(TrajectoryMetrics(original_tokens=1000, compressed_tokens=600, tokens_saved=400,
                              compression_ratio=0.6, original_turns=20, compressed_turns=15,
                              turns_removed=5, was_compressed=True, summary_source="llm",
                              summarization_api_calls=2, summarization_errors=1, retries=1))
    agg.add(TrajectoryMetrics(original_tokens=800, compressed_tokens=400, tokens_saved=400,
                              compression_ratio=0.5, original_turns=10, compressed_turns=6,
                              turns_removed=4, was_compressed=True, summary_source="cache"))
    agg.add(TrajectoryMetrics(original_tokens=100, compressed_tokens=100, original_turns=4,
                              compressed_turns=4, skipped_under_target=True))
    d = agg.to_dict()
    assert d["turns"] == {"total_before": 34, "total_after": 25, "total_removed": 9}
    # (0.6 + 0.5) / 2; 800 / 2; 9 / 2 — over the two compressed rows only.
    assert d["averages"] == {"avg_compression_ratio": 0.55,
                             "avg_tokens_saved_per_compressed": 400.0,
                             "avg_turns_removed_per_compressed": 4.5}
    # 2 calls, 1 error: 1 - 1/2.
    assert (d["summarization"]["total_api_calls"], d["summarization"]["total_errors"],
            d["summarization"]["success_rate"], d["summarization"]["retries"]) == (2, 1, 0.5, 1)
    assert d["summarization"]["summaries_by_source"] == {"llm": 1, "cache": 1,
                                                         "extractive": 0, "fallback": 0}
    assert (d["summary"]["trajectories_compressed"],
            d["summary"]["trajectories_skipped_under_target"]) == (2, 1)


def test_fidelity_and_reasons_fold_into_the_aggregate_by_hand() -> None:
    from trajectory_compressor.core.fidelity import Fidelity

    agg = AggregateMetrics()
    # (rows with a summary written: it stands in for turns from 1 on)
    agg.add(TrajectoryMetrics(was_compressed=True, turns_compressed_start_idx=1,
                              fidelity=Fidelity(10, 8, 4, 2, ()),
                              low_fidelity=True, fidelity_repair=True), reason="no_middle")
    agg.add(TrajectoryMetrics(was_compressed=True, turns_compressed_start_idx=1,
                              fidelity=Fidelity(5, 5, 0, 0, ())), reason="no_middle")
    assert agg.reasons == {"no_middle": 2}
    # Ratios 0.8 and 1.0: mean 0.9; nearest rank 1 of 2 for p10 and the median: 0.8.
    # Tail: only the first row has tail items, 2 of 4.
    assert agg.to_dict()["fidelity"] == {
        "count": 2, "mean_ratio": 0.9, "min_ratio": 0.8, "p10_ratio": 0.8,
        "median_ratio": 0.8, "tail_rows": 1, "mean_tail_ratio": 0.5, "items": 15, "kept": 13,
        "tail_items": 4, "tail_kept": 2, "repair_requests": 1, "low_fidelity_rows": 1,
        # issue 23: no references line apart (own text = whole), nothing invented
        "mean_model_ratio": 0.9, "invented_rows": 0, "invented_share": 0.0,
        "invented_items": 0}
    # Ratios alone (no repair, no low row) are enough for the section.
    plain = AggregateMetrics()
    plain.add(TrajectoryMetrics(was_compressed=True, turns_compressed_start_idx=1,
                                fidelity=Fidelity(5, 5, 0, 0, ())))
    assert plain.to_dict()["fidelity"]["count"] == 1


# --- planner: what a plan says besides its region --------------------------------------


def test_a_plan_names_the_protected_side_that_keeps_the_row_over_by_hand() -> None:
    from trajectory_compressor.core import plan as planner

    roles = ["system", "human", "gpt", "tool", "gpt", "tool", "gpt", "tool",
             "gpt", "tool", "gpt", "tool"]
    config = CompressionConfig(target_max_tokens=150, summary_target_tokens=20)
    # Head 0-3 (130 tokens), middle 4-7 (200), tail 8-11 (20): 350 in all. needed = 350 -
    # 150 + 20 = 220 > 200, so the whole middle; 350 - 200 + 20 = 170 > 150: still over,
    # and head + tail + summary = 170 > 150 too: the head (the larger side) is why.
    heavy_head = planner.plan_trajectory(roles, [100, 10, 10, 10, 50, 50, 50, 50, 5, 5, 5, 5],
                                         config)
    assert (heavy_head.action, heavy_head.region, heavy_head.region_tokens) == (
        "compress", Region(4, 8), 200)
    assert heavy_head.reason == planner.PROTECTED_HEAD
    assert (heavy_head.head_tokens, heavy_head.tail_tokens, heavy_head.middle_tokens) == (
        130, 20, 200)
    assert heavy_head.region is not None and heavy_head.region.turns == 4
    heavy_tail = planner.plan_trajectory(roles, [5, 5, 5, 5, 50, 50, 50, 50, 100, 10, 10, 10],
                                         config)
    assert heavy_tail.reason == planner.PROTECTED_TAIL
    # Under the target: skipped, no region, nothing counted in one.
    skipped = planner.plan_trajectory(roles, [1] * 12, config)
    assert (skipped.action, skipped.region, skipped.region_tokens, skipped.reason) == (
        "skip", None, 0, "")
    assert skipped.projected_tokens(999) == 12


def test_a_plan_built_by_hand_without_a_region_counts_no_region_tokens() -> None:
    # What a caller that builds a skip plan itself (as the writer's tests do) relies on.
    plan = Plan("skip", 900, Region(0, 2))
    assert (plan.region, plan.region_tokens, plan.reason) == (None, 0, "")
    assert (plan.head_tokens, plan.tail_tokens, plan.middle_tokens) == (0, 0, 900)
    assert (plan.target, plan.summary_target) == (0, 0)


def test_plans_regions_and_boundaries_are_values_that_cannot_change() -> None:
    # The dialects hand out the same two Boundaries to every row, and a plan travels from
    # the planner to assembly, metrics and the over-limit entry: none may be changed on
    # the way, and equal values hash alike (usable as keys).
    plan = Plan("compress", 10, Region(1, 3), Region(1, 2), 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.region_tokens = 6  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.middle.end = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ANY_BUT_TOOL.start_roles = frozenset({"tool"})  # type: ignore[misc]
    assert hash(plan) == hash(Plan("compress", 10, Region(1, 3), Region(1, 2), 5))
    assert hash(ALTERNATING) == hash(Boundaries(frozenset({"gpt"}), frozenset({"gpt"})))
    assert Boundaries(None, None) == ANY_BUT_TOOL


# --- redaction: a marker that spells a secret again ------------------------------------


def test_a_secret_spelled_by_a_later_marker_widens_that_span_only() -> None:
    # "a SECRETA b SECRETAxy c": SECRETA at 2-8 and 12-18, "xy c" from 19. One pass gives
    # "a [REDACTED] b [REDACTED]xy c", where "D]xy" is spelled from output offset 23; its
    # kept part "xy" starts at output 25 = input 19, so the span widens by input 19-21 and
    # merges with 12-19. The head "a " and " b " between the markers stay.
    text = "a SECRETA b SECRETAxy c"
    assert scrub_literals(text, ["SECRETA", "D]xy"]) == "a [REDACTED] b [REDACTED] c"
    # The same with text after the widened span, and after a second kept segment.
    assert (scrub_literals("x SECRETA, SECRETAxy!? SECRETA z", ["SECRETA", "D]xy!"])
            == "x [REDACTED], [REDACTED]? [REDACTED] z")
