"""The circuit breaker that takes a failing endpoint out of rotation and probes it later."""

from __future__ import annotations

from typing import Literal

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Closed → open after ``threshold`` consecutive failures → half-open after a cooldown.

    In half-open state one request (the probe) may go through: its success closes the
    circuit, its failure reopens it with twice the cooldown (up to ``max_cooldown``).
    Times are plain floats from the caller's monotonic clock, so the logic is pure.
    """

    def __init__(self, threshold: int = 5, cooldown: float = 5.0, max_cooldown: float = 60.0):
        self.threshold = threshold
        self.base_cooldown = cooldown
        self.max_cooldown = max_cooldown
        self.state: State = "closed"
        self.failures = 0  # consecutive
        self.opened = 0  # how many times the circuit opened (for tests and metrics)
        self._cooldown = cooldown
        self._open_until = 0.0
        self._probing = False

    def available(self, now: float) -> bool:
        """Whether a request may be sent now (a half-open circuit admits one probe)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if now < self._open_until:
                return False
            self.state = "half_open"
        return not self._probing

    @property
    def closed(self) -> bool:
        return self.state == "closed"

    def ready_at(self) -> float:
        """When an open circuit admits its probe (``0`` when it is not open)."""
        return self._open_until if self.state == "open" else 0.0

    def on_send(self) -> None:
        """A request was sent through this circuit (in half-open state: the probe)."""
        if self.state == "half_open":
            self._probing = True

    def record_success(self) -> bool:
        """The request succeeded; returns True when this closed an open circuit."""
        reopened = self.state != "closed"
        self.state = "closed"
        self.failures = 0
        self._cooldown = self.base_cooldown
        self._probing = False
        return reopened

    def record_failure(self, now: float, may_open: bool = True) -> None:
        """The request failed in a way that says the endpoint is unwell.

        ``may_open=False`` keeps the circuit closed (the pool uses it so that its last
        closed endpoint keeps serving: with nowhere to fail over to, retries do better
        than a pause).
        """
        self.failures += 1
        if self.state == "half_open":
            self._probing = False
            self._cooldown = min(self._cooldown * 2, self.max_cooldown)
            self._open(now)
        elif self.state == "closed" and self.failures >= self.threshold and may_open:
            self._open(now)

    def record_neutral(self) -> None:
        """The request ended without saying anything about health (rate limit, cancel)."""
        self._probing = False

    def _open(self, now: float) -> None:
        self.state = "open"
        self.opened += 1
        self._open_until = now + self._cooldown
