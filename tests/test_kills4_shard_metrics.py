"""The metrics of a run added up in parts equal those added up row by row (SPEC §13: the
metrics file of a sharded run is the local engine's; README "Resuming": a resumed run's
files are an uninterrupted run's).

A sharded run adds each shard's rows into its own totals, and the driver merges the
shards' totals; a resumed local run merges the checkpoint's totals with the rest. The
means of per-row ratios (average compression ratio, mean fidelity ratio, mean tail and
model ratios) are sums divided by counts, rounded to 4 decimals: if the sums depended on
how the rows were grouped, a mean at a rounding boundary would differ between a sharded
and a local run. Found by tests/test_kills4_shard.py (Hermes JSONL in ranges of 2 lines:
mean_ratio 0.1013 locally, 0.1012 sharded).
"""

from __future__ import annotations

from fractions import Fraction

from trajectory_compressor.core.fidelity import Fidelity
from trajectory_compressor.core.metrics import (
    AggregateMetrics,
    TrajectoryMetrics,
    aggregate_from_state,
    aggregate_state,
)
from trajectory_compressor.formats import jsonio

# kept/items of four rows: their exact mean is 0.29375, on a rounding boundary at 4
# decimals, and ((a + b) + c) + d and (a + b) + (c + d) round apart in binary floats.
RATIOS = [(1, 40), (3, 10), (1, 2), (7, 20)]


def row(kept: int, items: int) -> TrajectoryMetrics:
    fidelity = Fidelity(items=items, kept=kept, tail_items=items, tail_kept=kept,
                        missing=())
    return TrajectoryMetrics(original_tokens=1000, compressed_tokens=500, tokens_saved=500,
                             compression_ratio=kept / items, was_compressed=True,
                             turns_compressed_start_idx=1,  # its summary stands at turn 1
                             summary_source="llm", fidelity=fidelity)


def added(rows: list[TrajectoryMetrics]) -> AggregateMetrics:
    total = AggregateMetrics()
    for m in rows:
        total.add(m)
    return total


def through_state(metrics: AggregateMetrics) -> AggregateMetrics:
    """As a shard's done.json or a checkpoint carries it."""
    return aggregate_from_state(jsonio.loads(jsonio.dumps(aggregate_state(metrics))))


def report(metrics: AggregateMetrics) -> dict:
    data = metrics.to_dict()
    data.pop("processing")
    return data


def test_the_means_do_not_depend_on_how_the_rows_were_grouped():
    rows = [row(k, n) for k, n in RATIOS]
    whole = report(added(rows))
    for cut in range(1, len(rows)):
        merged = AggregateMetrics()
        for part in (rows[:cut], rows[cut:]):
            merged.merge(through_state(added(part)))
        assert report(merged) == whole, f"cut after row {cut}"
    pairs = AggregateMetrics()
    for part in (rows[:1], rows[1:3], rows[3:]):
        pairs.merge(through_state(added(part)))
    assert report(pairs) == whole


def test_the_means_stay_the_means():
    # Whatever makes them order-free must not move them: each mean is within its
    # rounding (half a unit of the 4th decimal) of the exact mean of the rows' ratios.
    rows = [row(k, n) for k, n in RATIOS]
    exact = float(sum(Fraction(k, n) for k, n in RATIOS) / len(RATIOS))
    data = report(added(rows))
    for value in (data["averages"]["avg_compression_ratio"],
                  data["fidelity"]["mean_ratio"], data["fidelity"]["mean_tail_ratio"],
                  data["fidelity"]["mean_model_ratio"]):
        assert abs(value - exact) <= 0.00005 + 1e-12
