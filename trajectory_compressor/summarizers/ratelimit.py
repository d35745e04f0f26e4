"""Requests-per-minute and tokens-per-minute limits of one endpoint (token buckets)."""

from __future__ import annotations


class TokenBucket:
    """A bucket refilled at ``per_minute / 60`` per second, holding at most 10 s of budget.

    A request is admitted while the balance is positive and then debited its full cost,
    so the balance may go negative: a request bigger than the burst still gets through,
    and the ones after it wait until the debt is repaid. Times come from the caller.
    """

    BURST_SECONDS = 10.0

    def __init__(self, per_minute: float, now: float) -> None:
        if per_minute <= 0:
            raise ValueError("a rate limit must be positive")
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * self.BURST_SECONDS)
        self.balance = self.capacity
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self.balance = min(self.capacity, self.balance + (now - self._at) * self.rate)
            self._at = now

    def ready(self, now: float) -> bool:
        """Whether a request may be admitted now."""
        self._refill(now)
        return self.balance > 0

    def ready_at(self, now: float) -> float:
        """The earliest time `ready` can become true."""
        self._refill(now)
        if self.balance > 0:
            return now
        # A hair past the instant the balance reaches zero, so it is positive then.
        return now + (-self.balance) / self.rate + 1e-3

    def take(self, cost: float, now: float) -> None:
        """Debit ``cost`` (may be corrected later with another `take`, even negative)."""
        self._refill(now)
        # A refund (negative cost) never lifts the balance past the burst: the next
        # request may come at this same instant (a coarse clock), before any refill caps it.
        self.balance = min(self.capacity, self.balance - cost)
