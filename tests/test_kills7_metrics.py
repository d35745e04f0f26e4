"""`Distribution` past its exact cap: the cap's boundary, and merging bucketed parts.

A sharded or resumed run merges the distributions of its parts (`Distribution.merge`);
on a dataset past the cap the parts hold log buckets (±1%), not the values. Expected
figures are worked out by hand from the values; the cap is lowered on the instance so
that a handful of values goes past it.
"""

from __future__ import annotations

import pytest

from trajectory_compressor.core.metrics import Distribution


def _distribution(values: list[int], cap: int = 3) -> Distribution:
    d = Distribution()
    d.EXACT_CAP = cap  # type: ignore[misc]
    for v in values:
        d.add(v)
    return d


def test_the_cap_is_the_most_values_held_exactly():
    # "exact up to a cap": a cap's worth of values is still exact, one more is not.
    d = _distribution([1, 2, 3])
    assert d.state()["exact"] == [1, 2, 3]
    d.add(4)
    assert d.state()["exact"] is None
    assert sum(d.state()["buckets"].values()) == 4


def _near(value: int | None, expected: int) -> bool:
    return value is not None and abs(value - expected) <= expected * 0.01


def test_merging_a_bucketed_part_keeps_every_value_and_the_extremes():
    # The part holds 5 values past its cap of 3: log buckets. The whole is exact until
    # the merge: 500 and 9000.
    part = _distribution([5, 1000, 2000, 3000, 4000])
    assert part.state()["exact"] is None
    whole = _distribution([500, 9000], cap=100)
    whole.merge(part)
    # 5, 500, 1000, 2000, 3000, 4000, 9000: the smallest from the part, the largest from
    # the whole.
    assert whole.count == 7
    assert (whole.min, whole.max) == (5, 9000)
    assert _near(whole.quantile(0.5), 2000)  # rank 4 of 7
    assert _near(whole.quantile(0.3), 1000)  # rank ceil(2.1) = 3
    assert whole.quantile(1.0) == 9000
    assert whole.histogram([0, 100, 2500, 10_000]) == [1, 3, 3]
    assert sum(whole.state()["buckets"].values()) == 7


def test_merging_two_bucketed_parts_adds_the_counts_of_shared_buckets():
    # Both parts hold 100 and 200 (the same buckets) past their cap.
    a = _distribution([100, 100, 200, 200])
    b = _distribution([100, 200, 200, 200, 50])
    a.merge(b)
    assert a.count == 9
    assert (a.min, a.max) == (50, 200)
    # 50, 100 x3, 200 x5: one below 75, three in [75, 150), five in [150, 250].
    assert a.histogram([0, 75, 150, 250]) == [1, 3, 5]
    assert sorted(a.state()["buckets"].values()) == [1, 3, 5]
    assert _near(a.quantile(0.4), 100)  # rank ceil(3.6) = 4: the last 100
    assert _near(a.quantile(0.5), 200)  # rank 5: the first 200


@pytest.mark.parametrize("first_exact", [True, False])
def test_a_merge_into_an_empty_distribution_takes_the_parts_extremes(first_exact):
    empty = Distribution() if first_exact else _distribution([])
    part = _distribution([7, 70, 700, 7000])
    empty.merge(part)
    assert (empty.count, empty.min, empty.max) == (4, 7, 7000)
    assert empty.histogram([0, 50, 5000, 8000]) == [1, 2, 1]
