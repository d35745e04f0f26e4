"""Which failed shard a Ray run reports: the earliest in input order, as a local run.

Shards finish in any order on Ray; a local run reads the inputs in order and stops at the
first bad one (``--strict``). `in_input_order` holds a failure back until every shard
before it is back. Pure: the results are made here, no Ray instance is needed.
"""

from __future__ import annotations

from trajectory_compressor.engine.ray import in_input_order
from trajectory_compressor.engine.shard import Shard, ShardResult


def _shards(n: int) -> list[Shard]:
    return [Shard(index=i, file=0, start=10 * i, stop=10 * (i + 1)) for i in range(n)]


def _ok(i: int) -> ShardResult:
    return ShardResult(index=i, rows=10)


def _bad(i: int) -> ShardResult:
    return ShardResult(index=i, error={"kind": "strict", "message": f"shard {i}"})


def _order(results: list[ShardResult], pending: list[Shard]) -> list[tuple[int, bool]]:
    return [(r.index, r.error is None) for r in in_input_order(iter(results), pending)]


def test_an_earlier_failure_that_finishes_later_is_the_one_reported():
    # Shard 2 fails first; shard 1 fails later: shard 1 is what a local run stops at.
    got = _order([_bad(2), _ok(0), _bad(1), _ok(3)], _shards(4))
    assert got == [(0, True), (1, False)]


def test_a_failure_waits_for_the_shards_before_it_and_not_those_after():
    seen: list[int] = []

    def finishing(results):
        for r in results:
            seen.append(r.index)
            yield r

    # Shard 3 fails first; 0-2 succeed; 4 and 5 are never waited for.
    results = [_bad(3), _ok(1), _ok(0), _ok(2), _ok(4), _ok(5)]
    got = [(r.index, r.error is None)
           for r in in_input_order(finishing(results), _shards(6))]
    assert got == [(1, True), (0, True), (2, True), (3, False)]
    assert seen == [3, 1, 0, 2]


def test_the_first_shard_failing_stops_at_once():
    got = _order([_bad(0), _ok(1)], _shards(2))
    assert got == [(0, False)]


def test_without_a_failure_every_result_comes_through_as_it_finishes():
    got = _order([_ok(2), _ok(0), _ok(1)], _shards(3))
    assert got == [(2, True), (0, True), (1, True)]


def test_only_the_pending_shards_are_waited_for_on_a_resume():
    # Shards 0 and 1 were done before the resume: a failure of shard 3 waits for 2 only.
    pending = _shards(4)[2:]
    got = _order([_bad(3), _ok(2)], pending)
    assert got == [(2, True), (3, False)]
