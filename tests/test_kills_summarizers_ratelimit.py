"""A token bucket holds at most its burst, whatever the debits and refunds (issue 26, item 5).

From summarizers/ratelimit.py's documentation: a bucket is refilled at ``per_minute / 60``
per second and holds at most 10 s of budget; a request is admitted while the balance is
positive, then debited its full cost; a debit may be corrected later with a negative one
(the pool refunds an over-estimated token count when the reply says what it cost).
"""

from __future__ import annotations

from trajectory_compressor.summarizers.ratelimit import TokenBucket


def admitted_at(bucket: TokenBucket, now: float, cost: float) -> int:
    """How many requests of ``cost`` go through at the instant ``now``."""
    sent = 0
    while bucket.ready(now) and sent < 1000:
        bucket.take(cost, now)
        sent += 1
    return sent


def test_a_refund_never_lifts_the_balance_above_the_burst():
    # 60 per minute: 1 a second, a burst of 10.
    bucket = TokenBucket(60, 0.0)
    assert admitted_at(bucket, 0.0, 1) == 10
    bucket.take(-30, 0.0)  # three times the burst refunded at the same instant
    assert admitted_at(bucket, 0.0, 1) == 10  # still at most 10 s of budget at once
    bucket.take(-30, 5.0)
    assert admitted_at(bucket, 5.0, 1) == 10


def test_a_refund_later_is_capped_as_well():
    bucket = TokenBucket(60, 0.0)
    bucket.take(4, 0.0)  # 6 left
    bucket.take(-10, 2.0)  # 2 s refill 2 (8), the refund 10 more: capped at 10
    assert bucket.ready_at(2.0) == 2.0
    assert admitted_at(bucket, 2.0, 1) == 10


def test_a_debt_is_repaid_at_the_refill_rate():
    bucket = TokenBucket(60, 0.0)
    bucket.take(25, 0.0)  # 10 - 25 = -15: 15 s of debt
    assert not bucket.ready(0.0)
    assert abs(bucket.ready_at(0.0) - 15.001) < 1e-9
    assert not bucket.ready(15.0) and bucket.ready(15.01)
