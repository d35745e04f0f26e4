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


def test_a_rate_limit_must_be_positive():
    for bad in (0, -1, -0.5):
        try:
            TokenBucket(bad, 0.0)
        except ValueError as exc:
            assert "positive" in str(exc)
        else:
            raise AssertionError(f"TokenBucket({bad}) was accepted")
    slow = TokenBucket(1, 0.0)  # one a minute: a burst of max(1, 1/6) = 1
    assert admitted_at(slow, 0.0, 1) == 1
    assert not slow.ready(0.0) and slow.ready(1.0)  # any refill makes the balance positive
    assert TokenBucket(0.5, 0.0).ready(0.0)


def test_the_refill_counts_the_time_since_the_last_look_from_any_start():
    bucket = TokenBucket(60, 100.0)  # a monotonic clock rarely starts at 0
    bucket.take(10, 100.0)  # empty
    assert admitted_at(bucket, 101.0, 1) == 1  # one second: one request


def test_a_debit_after_a_pause_comes_off_a_full_bucket():
    bucket = TokenBucket(60, 0.0)
    bucket.take(5, 20.0)  # 20 s later the bucket was full (10), not 30: 5 left
    assert admitted_at(bucket, 20.0, 1) == 5


def test_ready_at_counts_the_refill_so_far():
    bucket = TokenBucket(60, 0.0)
    bucket.take(25, 0.0)  # -15
    assert abs(bucket.ready_at(10.0) - 15.001) < 1e-9  # 5 s of debt left at 10 s
    part = TokenBucket(60, 0.0)
    part.take(9.5, 0.0)  # 0.5 left: ready now
    assert part.ready_at(0.0) == 0.0
