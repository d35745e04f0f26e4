"""`AggregateMetrics.merge`: the totals of parts add up to the totals of the whole."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.metrics import AggregateMetrics, Distribution, TrajectoryMetrics


def _row(before: int, after: int, compressed: bool, source: str) -> TrajectoryMetrics:
    return TrajectoryMetrics(
        original_tokens=before, compressed_tokens=after, tokens_saved=before - after,
        compression_ratio=after / before, original_turns=10, compressed_turns=8 if compressed
        else 10, turns_removed=2 if compressed else 0, was_compressed=compressed,
        still_over_limit=after > 100, skipped_under_target=not compressed and after <= 100,
        summarization_api_calls=1 if compressed else 0,
        summary_source=source if compressed else None)


rows = st.lists(st.builds(
    lambda b, saved, c, s: _row(b, b - (saved if c else 0), c, s),
    st.integers(50, 5000), st.integers(0, 40), st.booleans(),
    st.sampled_from(["llm", "cache", "extractive", "fallback"])), max_size=30)


@settings(max_examples=60, deadline=None)
@given(rows, st.integers(0, 30))
def test_merging_parts_equals_adding_every_row_to_one(all_rows, cut):
    whole, first, second = AggregateMetrics(), AggregateMetrics(), AggregateMetrics()
    for i, m in enumerate(all_rows):
        whole.add(m)
        (first if i < cut else second).add(m)
    first.merge(second)
    assert first.to_dict() == whole.to_dict()


def test_a_merged_distribution_past_the_exact_cap_keeps_count_min_and_max(monkeypatch):
    monkeypatch.setattr(Distribution, "EXACT_CAP", 4)
    a, b = Distribution(), Distribution()
    for v in (10, 20, 30, 40, 50, 60):  # past the cap: buckets
        a.add(v)
    for v in (5, 1000):
        b.add(v)
    a.merge(b)
    assert (a.count, a.min, a.max) == (8, 5, 1000)
    b.merge(a)  # exact into bucketed
    assert (b.count, b.min, b.max) == (10, 5, 1000)
