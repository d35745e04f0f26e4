"""The pool's lifecycle, its fail-fast notices and its waiters (issue 26, item 5, round 6).

From summarizers/pool.py's documentation (SPEC §6): the pool opens one HTTP session and
closes it, saying at close what is still to be said; waiting requests queue in FIFO order
and a woken waiter that still finds nothing keeps its place in line; a rate limit
refilling or a circuit's cooldown ending wakes a waiter; a waiter that is not woken
leaves the line; an endpoint whose first replies all say it is set up wrong stops the run
and wakes every waiter, its notices waiting for that verdict (the others are told at
once); ``allow_fallback`` turns a rejected key into an ordinary failed attempt; a
context-length 400 shrinks the input by the factor its message gives. The defaults are
those of the config (``max_concurrent_requests``, ``max_retries``).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import FatalSummaryError
from trajectory_compressor.summarizers import pool as pool_module
from trajectory_compressor.summarizers.breaker import CircuitBreaker
from trajectory_compressor.summarizers.chat import ChatRequest, Completion, Failure
from trajectory_compressor.summarizers.endpoint import Endpoint
from trajectory_compressor.summarizers.pool import Pool, PoolFailure

WAIT = 5.0  # seconds a step that should happen at once may take on a loaded machine


def endpoint(url: str = "http://127.0.0.1:9/v1", **config) -> Endpoint:
    breaker = config.pop("breaker", None)
    return Endpoint(EndpointConfig(url, "fake-model", **config), None, time.monotonic(),
                    breaker)


def request(shrink=None) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "word " * 400}], 50, 0.3, 600,
                       shrink=shrink)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_the_defaults_are_the_configs_and_every_attempt_failing_says_so():
    cfg = CompressionConfig()

    async def main():
        async with FakeLLMServer(faults={"http500": 1.0}) as server:
            pool = Pool([endpoint(server.url)], retry_delay=0.0)
            await pool.start()
            try:
                with pytest.raises(PoolFailure) as caught:
                    await asyncio.wait_for(pool.complete(request()), 4 * WAIT)
            finally:
                await pool.aclose()
            return pool, caught.value, server.requests

    pool, failure, sent = asyncio.run(main())
    assert pool.max_in_flight == cfg.max_concurrent_requests == 50
    assert cfg.max_retries == 3
    assert sent == 3 and failure.usage.api_calls == 3
    assert failure.reason.startswith("3 attempts failed")
    assert str(failure) == failure.reason  # the exception's message is its reason


def test_the_default_in_flight_limit_queues_the_fifty_first_request():
    async def main():
        pool = Pool([endpoint()])
        taken = [await asyncio.wait_for(pool._acquire(None, 0, None), WAIT) for _ in range(50)]
        extra = asyncio.create_task(pool._acquire(None, 0, None))
        await settle()
        queued = not extra.done()
        pool._release(taken[0], None, 0)
        await asyncio.wait_for(extra, WAIT)
        return queued, pool.in_flight

    assert asyncio.run(main()) == (True, 50)


def test_one_session_is_opened_closed_and_held_notices_are_told_at_close():
    told: list[str] = []

    async def main():
        a = endpoint()
        pool = Pool([a], on_failure=lambda e, f: told.append(f.kind))
        await pool.aclose()  # closing a pool never started is harmless
        await pool.start()
        session = pool._session
        await pool.start()  # a second start keeps the run's one session
        same = pool._session is session
        pool._note_failure(a, Failure("not_found", f"{a.name}: 404"))
        held = list(told)  # the first reply said "set up wrong": wait for the verdict
        await pool.aclose()
        return same, session is not None and session.closed, pool._session, held

    same, closed, after, held = asyncio.run(main())
    assert same and closed and after is None
    assert held == [] and told == ["not_found"]


def test_a_good_reply_tells_the_held_notices_and_counts_among_the_first_replies():
    told: list[str] = []

    async def main():
        async with FakeLLMServer() as server:
            a = endpoint(server.url)
            pool = Pool([a], on_failure=lambda e, f: told.append(f.kind))
            await pool.start()
            try:
                pool._note_failure(a, Failure("not_found", f"{a.name}: 404"))
                before = list(told)
                await asyncio.wait_for(pool.complete(request()), WAIT)
                after_success = list(told)
                replies = a.early_replies
                # Two more set-up-wrong replies: three of the first three were not all
                # wrong (one was good), so the run goes on.
                for _ in range(2):
                    pool._note_failure(a, Failure("not_found", f"{a.name}: 404"))
                return before, after_success, replies, pool._fatal
            finally:
                await pool.aclose()

    before, after_success, replies, fatal = asyncio.run(main())
    assert before == [] and after_success == ["not_found"]
    assert replies == 2  # one failed reply, one good one
    assert fatal is None


def test_a_failure_that_is_not_about_the_setup_is_told_at_once():
    told: list[str] = []
    a = endpoint()
    pool = Pool([a], on_failure=lambda e, f: told.append(f.kind))
    pool._note_failure(a, Failure("server", f"{a.name}: 500"))
    assert told == ["server"]
    pool._note_failure(a, Failure("not_found", f"{a.name}: 404"))  # not all wrong: told
    assert told == ["server", "not_found"]


def test_the_fail_fast_verdict_wakes_every_waiter():
    async def main():
        a = endpoint()
        pool = Pool([a], max_in_flight=1, fail_fast=1)
        await pool._acquire(None, 0, None)
        waiting = [asyncio.create_task(pool._acquire(None, 0, None)) for _ in range(2)]
        await settle()
        assert len(pool._waiters) == 2
        pool._note_failure(a, Failure("not_found", f"{a.name}: 404"))
        await settle()
        done = [t.done() for t in waiting]
        for t in waiting:
            t.cancel()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        return done, results

    done, results = asyncio.run(main())
    assert done == [True, True]
    assert all(isinstance(r, FatalSummaryError) for r in results)


def test_a_woken_waiter_that_finds_no_room_keeps_its_place_in_line():
    async def main():
        a = endpoint()
        pool = Pool([a], max_in_flight=1)
        first = await pool._acquire(None, 0, None)
        w1 = asyncio.create_task(pool._acquire(None, 0, None))
        await settle()
        w2 = asyncio.create_task(pool._acquire(None, 0, None))
        await settle()
        pool._wake_one()  # w1 wakes with every slot still taken
        await settle()
        w1_took = w1.done()
        in_flight = pool.in_flight
        pool._release(first, None, 0)  # one slot: the first in line gets it
        done, _ = await asyncio.wait([w1, w2], timeout=WAIT,
                                     return_when=asyncio.FIRST_COMPLETED)
        order = [w1 in done, w2 in done]
        for t in (w1, w2):
            t.cancel()
        await asyncio.gather(w1, w2, return_exceptions=True)
        return w1_took, in_flight, order

    w1_took, in_flight, order = asyncio.run(main())
    assert not w1_took and in_flight == 1
    assert order == [True, False]


def test_a_cooldown_ending_wakes_the_waiter_which_leaves_no_trace_in_line():
    async def main():
        breaker = CircuitBreaker(threshold=1, cooldown=0.05)
        breaker.record_failure(time.monotonic())  # open for 50 ms
        a = endpoint(breaker=breaker)
        pool = Pool([a], max_in_flight=1)
        got = await asyncio.wait_for(pool._acquire(None, 0, None), WAIT)
        return got is a, len(pool._waiters)

    assert asyncio.run(main()) == (True, 0)


def test_a_cancelled_waiter_leaves_the_line():
    async def main():
        pool = Pool([endpoint()], max_in_flight=1)
        await pool._acquire(None, 0, None)
        waiting = asyncio.create_task(pool._acquire(None, 0, None))
        await settle()
        queued = len(pool._waiters)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return queued, len(pool._waiters)

    assert asyncio.run(main()) == (1, 0)


def test_a_rate_limit_with_budget_left_sets_no_timer():
    # The endpoint is full (max_concurrency 1) but its rate limit has budget: nothing
    # time-based will make room, so the waiter sleeps until a request finishes.
    async def main():
        a = endpoint(max_concurrency=1, rpm=6000)
        pool = Pool([a])
        first = await pool._acquire(None, 0, None)
        waiting = asyncio.create_task(pool._acquire(None, 0, None))
        await settle()
        lined_up = list(pool._waiters)
        await asyncio.sleep(0.02)
        await settle()
        same = list(pool._waiters) == lined_up and len(lined_up) == 1
        pool._release(first, None, 0)
        await asyncio.wait_for(waiting, WAIT)
        return same

    assert asyncio.run(main())


def test_a_rate_limited_probe_frees_the_probe_slot():
    async def main():
        a = endpoint()
        pool = Pool([a])
        a.breaker.state = "half_open"
        probe = await pool._acquire(None, 0, None)
        assert not a.admits(time.monotonic())  # one probe at a time
        pool._release(probe, Failure("rate_limited", "429"), 0)
        return a.admits(time.monotonic()), a.breaker.state

    assert asyncio.run(main()) == (True, "half_open")


def test_a_rejected_key_counts_against_the_endpoint_only_when_falling_back():
    for allow, failures in ((False, 0), (True, 1)):
        a = endpoint()
        pool = Pool([a], allow_fallback=allow)
        pool._take(a, 0, time.monotonic())
        pool._release(a, Failure("auth", "401", status=401), 0)
        assert (a.failures, a.breaker.failures) == (failures, failures), allow


def test_a_reply_reporting_only_prompt_tokens_corrects_the_token_budget():
    a = endpoint(tpm=600)  # 10 tokens a second, a burst of 100
    pool = Pool([a])
    now = time.monotonic()
    pool._take(a, 80, now)  # estimated 80 tokens
    pool._release(a, Completion("ok", "fake-model", prompt_tokens=20), 80)
    # 60 tokens were refunded: the balance is back near 100 - 20, not 100 - 80.
    assert a.tpm is not None and a.tpm.balance > 70


def test_a_context_error_shrinks_by_the_factor_its_message_gives():
    asked: list[float] = []

    def shrink(factor: float) -> ChatRequest | None:
        asked.append(factor)
        return None  # cannot shrink: an ordinary failed attempt

    async def main():
        async with FakeLLMServer(context_limit=100) as server:
            pool = Pool([endpoint(server.url)], max_retries=1, retry_delay=0.0)
            await pool.start()
            try:
                with pytest.raises(PoolFailure):
                    await asyncio.wait_for(pool.complete(request(shrink)), WAIT)
            finally:
                await pool.aclose()

    asyncio.run(main())
    # The fake server asks for 2,000 characters / 4 + 1 = 501 tokens, the limit is 100:
    # shrink to 90 % of the ratio (chat.py's `_shrink_factor`).
    assert len(asked) == 1 and asked[0] == pytest.approx(0.9 * 100 / 501, rel=0.02)


def test_cancelling_a_queued_request_disturbs_no_other_waiter():
    async def main():
        pool = Pool([endpoint()], max_in_flight=1)
        await pool._acquire(None, 0, None)
        waiting = []
        for _ in range(3):
            waiting.append(asyncio.create_task(pool._acquire(None, 0, None)))
            await settle()
        lined_up = list(pool._waiters)
        waiting[1].cancel()
        await asyncio.gather(waiting[1], return_exceptions=True)
        await settle()
        now_waiting = list(pool._waiters)
        pending = [not f.done() for f in now_waiting]
        for t in waiting:
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return lined_up, now_waiting, pending

    lined_up, now_waiting, pending = asyncio.run(main())
    assert len(lined_up) == 3
    assert now_waiting == [lined_up[0], lined_up[2]]  # the same wake-ups, not re-made
    assert pending == [True, True]


def test_a_waiter_that_finds_room_wakes_the_next_one_too():
    # A request estimated at 3,000 tokens overdraws a 6,000 TPM budget (1,000 at most)
    # for 20 s, so two more requests queue; its reply used 1 token, the refund makes room
    # for both: the one woken passes the wake-up on instead of leaving the other to its
    # 20-second timer.
    async def main():
        a = endpoint(tpm=6000)
        pool = Pool([a], max_in_flight=10)
        big = await pool._acquire(None, 3000, None)
        waiting = []
        for _ in range(2):
            waiting.append(asyncio.create_task(pool._acquire(None, 0, None)))
            await settle()
        queued = len(pool._waiters)
        pool._release(big, Completion("ok", "fake-model", prompt_tokens=1), 3000)
        got = await asyncio.wait_for(asyncio.gather(*waiting), WAIT)
        return queued, got, a

    queued, got, a = asyncio.run(main())
    assert queued == 2 and got == [a, a]


def test_an_endpoint_whose_cooldown_ends_now_can_take_the_retry(monkeypatch):
    # As in choosing (a cooldown until 10 is over at 10), an endpoint cooled down until
    # this very instant can serve: the retry need not wait for Retry-After.
    monkeypatch.setattr(pool_module.time, "monotonic", lambda: 100.0)
    a, b = endpoint(), endpoint("http://127.0.0.1:10/v1")
    b.cool_until = 100.0
    pool = Pool([a, b], retry_delay=1.0)
    delay = pool._delay(1, a, Failure("rate_limited", "429", retry_after=30.0))
    assert 1.0 <= delay <= 2.0


def test_waiters_keep_their_order_when_an_endpoint_comes_back():
    # The circuit closes with room for one: the first in line gets it, and the next
    # finished request serves the second, not the last (FIFO).
    async def main():
        a = endpoint(max_concurrency=1)
        pool = Pool([a], max_in_flight=10)
        a.breaker.state = "half_open"
        probe = await pool._acquire(None, 0, None)
        waiting = []
        for _ in range(3):
            waiting.append(asyncio.create_task(pool._acquire(None, 0, None)))
            await settle()
        served = []
        pool._release(probe, Completion("ok", "fake-model"), 0)  # the circuit closes
        for _ in range(2):
            left = [t for t in waiting if not t.done()]
            done, _ = await asyncio.wait(left, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
            served += [waiting.index(t) for t in done]
            await settle()
            pool._release(a, Completion("ok", "fake-model"), 0)
        await asyncio.wait_for(asyncio.gather(*waiting), WAIT)
        return served, a.breaker.state

    assert asyncio.run(main()) == ([0, 1], "closed")
