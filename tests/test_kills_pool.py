"""The pool's choices, unit by unit, without a server (issue 26, item 5).

From summarizers/pool.py's documentation (SPEC §6): the least-loaded endpoint per unit
of weight first, a retry preferring another endpoint than the one that failed; retry k
waits between ``retry_delay`` and ``retry_delay * 2**k`` (at most 60 s), and at least
``Retry-After`` unless another endpoint can serve; an endpoint whose first 3 replies all
say it is set up wrong (404, a redirect, cannot connect) stops the run unless
``allow_fallback``; rate limits and context-length errors say nothing about it.
"""

from __future__ import annotations

import random

import pytest

from trajectory_compressor.core.config import EndpointConfig
from trajectory_compressor.summarizers.chat import Failure
from trajectory_compressor.summarizers.endpoint import Endpoint
from trajectory_compressor.summarizers.pool import MAX_BACKOFF, Pool


def endpoint(name: str, weight: float = 1.0, max_concurrency: int | None = None) -> Endpoint:
    return Endpoint(EndpointConfig(f"http://{name}.test/v1", "m", weight=weight,
                                   max_concurrency=max_concurrency), None, 0.0)


class Edge(random.Random):
    """uniform() at one end of its range: ``low`` or ``high``."""

    def __init__(self, end: str) -> None:
        super().__init__(0)
        self.end = end

    def uniform(self, a: float, b: float) -> float:
        return a if self.end == "low" else b


def test_the_least_loaded_per_unit_of_weight_is_picked_and_a_retry_goes_elsewhere():
    a, b = endpoint("a"), endpoint("b", weight=3.0)
    pool = Pool([a, b])
    a.in_flight, b.in_flight = 1, 2  # loads 1 and 2/3
    assert pool._pick(None, 0.0) is b
    assert pool._pick(b, 0.0) is a  # the one that just failed comes last
    b.in_flight = 3  # load 1: a tie goes to the first listed
    assert pool._pick(None, 0.0) is a
    full = endpoint("full", max_concurrency=1)
    full.in_flight = 1
    assert Pool([full])._pick(None, 0.0) is None
    assert Pool([full, a])._pick(a, 0.0) is a  # the only one that admits a request


def test_an_endpoint_cooling_down_after_retry_after_comes_after_the_others():
    a, b = endpoint("a"), endpoint("b")
    a.cool_until = 10.0
    b.in_flight = 5
    assert Pool([a, b])._pick(None, 5.0) is b
    assert Pool([a, b])._pick(None, 10.0) is a  # cooled down at 10


@pytest.mark.parametrize("attempts, low, high", [(1, 2.0, 4.0), (2, 2.0, 8.0),
                                                 (5, 2.0, MAX_BACKOFF)])
def test_backoff_is_between_the_delay_and_its_doubling_at_most_a_minute(attempts, low, high):
    a = endpoint("a")
    failure = Failure("server", "503")
    assert Pool([a], retry_delay=2.0, rng=Edge("low"))._delay(attempts, a, failure) == low
    assert Pool([a], retry_delay=2.0, rng=Edge("high"))._delay(attempts, a, failure) == high
    assert MAX_BACKOFF == 60.0
    # A delay longer than the cap is never cut below itself.
    assert Pool([a], retry_delay=90.0, rng=Edge("high"))._delay(3, a, failure) == 90.0


def test_retry_after_is_waited_for_only_when_no_other_endpoint_can_serve():
    a, b = endpoint("a"), endpoint("b")
    limited = Failure("rate_limited", "429", retry_after=30.0)
    alone = Pool([a], retry_delay=1.0, rng=Edge("low"))
    assert alone._delay(1, a, limited) == 30.0
    shared = Pool([a, b], retry_delay=1.0, rng=Edge("low"))
    assert shared._delay(1, a, limited) == 1.0
    b.cool_until = 1e12  # b is cooling down too: wait
    assert shared._delay(1, a, limited) == 30.0
    short = Failure("rate_limited", "429", retry_after=0.5)
    assert alone._delay(1, a, short) == 1.0  # never less than the backoff


def test_three_set_up_wrong_replies_stop_the_run_unless_falling_back():
    a = endpoint("a")
    pool = Pool([a])
    for kind in ("not_found", "redirect"):
        pool._note_failure(a, Failure(kind, f"{a.name}: {kind}"))
        assert pool._fatal is None
    pool._note_failure(a, Failure("rate_limited", "429"))  # says nothing about the setup
    assert pool._fatal is None
    pool._note_failure(a, Failure("unreachable", f"{a.name}: cannot connect"))
    assert pool._fatal is not None and "failed its first 3 requests" in pool._fatal
    assert "(last: cannot connect)" in pool._fatal
    lenient = endpoint("b")
    pool = Pool([lenient], allow_fallback=True)
    for _ in range(3):
        pool._note_failure(lenient, Failure("not_found", "404"))
    assert pool._fatal is None


def test_a_good_reply_among_the_first_ones_means_the_setup_is_right():
    a = endpoint("a")
    pool = Pool([a])
    pool._note_failure(a, Failure("not_found", "404"))
    pool._note_failure(a, Failure("server", "500"))  # the endpoint answered
    pool._note_failure(a, Failure("not_found", "404"))
    pool._note_failure(a, Failure("not_found", "404"))
    assert pool._fatal is None
    one = endpoint("c")
    strict = Pool([one], fail_fast=1)
    strict._note_failure(one, Failure("unreachable", "down"))
    assert strict._fatal is not None and "failed its first request " in strict._fatal


def test_each_kind_of_failure_is_told_once_per_endpoint():
    told = []
    a = endpoint("a")
    pool = Pool([a], allow_fallback=True, on_failure=lambda e, f: told.append(f.kind))
    for kind in ("server", "server", "timeout", "auth", "auth"):
        pool._note_failure(a, Failure(kind, kind))
    assert told == ["server", "timeout", "auth"]


def test_a_pool_needs_an_endpoint():
    with pytest.raises(ValueError, match="at least one endpoint"):
        Pool([])


def test_a_failure_with_retry_after_cools_its_endpoint_for_that_long():
    import time

    a, b = endpoint("a"), endpoint("b")
    pool = Pool([a, b])
    pool._take(a, 0, time.monotonic())
    pool._release(a, Failure("http", "503", retry_after=30.0), 0)
    assert a.cool_until >= time.monotonic() + 25
    assert (pool.in_flight, a.in_flight, a.failures) == (0, 0, 1)
    assert pool._pick(None, time.monotonic()) is b  # a is cooling down
