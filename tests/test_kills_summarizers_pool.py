"""The pool's queue and its limits, in the event loop (issue 26, item 5).

From summarizers/pool.py's documentation (SPEC §6): waiting requests queue in FIFO order
and a finished request wakes exactly one of them (a waiter that can no longer use its
wake-up passes it on), also when an endpoint comes back (the woken one wakes the next
while it finds room: tests/test_kills6_pool.py checks the order); a 401 is fatal and
every call raises `FatalSummaryError` from then on, a queued one without sending; a
context-length 400 shrinks the input and retries without using up an attempt, at most
`MAX_SHRINKS` times; rate limits and context-length errors say nothing about an
endpoint's health. tests/test_kills_pool.py covers the choices; these run the waits.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core.config import EndpointConfig
from trajectory_compressor.core.errors import FatalSummaryError
from trajectory_compressor.summarizers.chat import ChatRequest, Completion, Failure
from trajectory_compressor.summarizers.endpoint import Endpoint
from trajectory_compressor.summarizers.pool import MAX_SHRINKS, Pool, PoolFailure

WAIT = 5.0  # seconds a step that should happen at once may take on a loaded machine


def endpoint(url: str = "http://127.0.0.1:9/v1", max_concurrency: int | None = None,
             key: str | None = None) -> Endpoint:
    return Endpoint(EndpointConfig(url, "fake-model", max_concurrency=max_concurrency),
                    key, 0.0)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_woken_waiter_that_is_cancelled_passes_its_turn_on():
    async def main():
        a = endpoint()
        pool = Pool([a], max_in_flight=1)
        first = await pool._acquire(None, 0, None)
        second = asyncio.create_task(pool._acquire(None, 0, None))
        third = asyncio.create_task(pool._acquire(None, 0, None))
        await settle()
        assert len(pool._waiters) == 2
        pool._release(first, None, 0)  # wakes the second ...
        second.cancel()  # ... which is cancelled before it can run
        got = await asyncio.wait_for(third, WAIT)  # so the third gets the slot
        with pytest.raises(asyncio.CancelledError):
            await second
        return got, pool.in_flight

    got, in_flight = asyncio.run(main())
    assert got.name == "http://127.0.0.1:9/v1" and in_flight == 1


def test_an_endpoint_that_comes_back_serves_its_waiters_in_turn():
    async def main():
        a = endpoint(max_concurrency=1)
        pool = Pool([a], max_in_flight=10)
        a.breaker.state = "half_open"  # its probe goes out first
        probe = await pool._acquire(None, 0, None)
        waiting = [asyncio.create_task(pool._acquire(None, 0, None)) for _ in range(2)]
        await settle()
        assert len(pool._waiters) == 2 and not any(t.done() for t in waiting)
        pool._release(probe, Completion("ok", "fake-model"), 0)  # the circuit closes
        done, _ = await asyncio.wait(waiting, timeout=WAIT,
                                     return_when=asyncio.FIRST_COMPLETED)
        # One of them takes the free slot; the other, finding none, waits again in front.
        assert len(done) == 1
        await settle()
        assert len(pool._waiters) == 1 and pool.in_flight == 1
        pool._release(await next(iter(done)), Completion("ok", "fake-model"), 0)
        await asyncio.wait_for(asyncio.gather(*waiting), WAIT)
        return a.breaker.state

    assert asyncio.run(main()) == "closed"


def test_rate_limits_and_context_errors_say_nothing_about_health():
    async def main():
        a = endpoint()
        pool = Pool([a, endpoint("http://127.0.0.1:10/v1")])  # another, so it may open
        for kind in ("rate_limited", "context"):
            for _ in range(10):  # twice the breaker's threshold of 5
                assert await pool._acquire(None, 0, None) is a
                pool._release(a, Failure(kind, kind), 0)
        return a

    a = asyncio.run(main())
    assert a.failures == 0 and a.breaker.failures == 0 and a.breaker.state == "closed"


def test_a_request_released_without_an_outcome_is_neutral():
    # A cancelled request (no outcome) says nothing about the endpoint either.
    async def main():
        a = endpoint()
        pool = Pool([a])
        for _ in range(6):
            await pool._acquire(None, 0, None)
            pool._release(a, None, 0)
        return a

    a = asyncio.run(main())
    assert a.failures == 0 and a.breaker.state == "closed"


def request(shrink=None) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "word " * 400}], 50, 0.3, 600,
                       shrink=shrink)


def test_a_context_error_shrinks_at_most_max_shrinks_times_without_using_an_attempt():
    asked: list[float] = []

    def shrink(factor: float) -> ChatRequest:
        asked.append(factor)
        return request(shrink)  # never small enough for this server

    async def main():
        async with FakeLLMServer(context_limit=100) as server:  # 2,000 characters: 500
            pool = Pool([endpoint(server.url)], max_retries=1, retry_delay=0.01)
            await pool.start()
            try:
                with pytest.raises(PoolFailure) as caught:
                    await asyncio.wait_for(pool.complete(request(shrink)), 4 * WAIT)
            finally:
                await pool.aclose()
            return caught.value, server.requests

    failure, requests = asyncio.run(main())
    assert MAX_SHRINKS == 3
    assert requests == 1 + MAX_SHRINKS  # the first, three shrunk; the one attempt used last
    assert len(asked) == MAX_SHRINKS
    assert failure.reason.startswith("1 attempt failed")
    assert failure.usage.api_calls == 4


def test_a_queued_request_raises_without_sending_once_a_key_is_rejected():
    async def main():
        async with FakeLLMServer(script=["unauthorized", "ok", "ok"]) as server:
            pool = Pool([endpoint(server.url, key="wrong")], max_in_flight=1,
                        max_retries=3, retry_delay=0.01)
            await pool.start()
            try:
                calls = [asyncio.create_task(pool.complete(request())) for _ in range(3)]
                results = await asyncio.wait_for(
                    asyncio.gather(*calls, return_exceptions=True), 4 * WAIT)
            finally:
                await pool.aclose()
            return results, server.requests

    results, requests = asyncio.run(main())
    assert requests == 1  # the two queued requests were never sent
    assert all(isinstance(r, FatalSummaryError) for r in results)


def test_a_finished_request_wakes_exactly_one_waiter():
    async def main():
        a = endpoint()
        pool = Pool([a], max_in_flight=1)
        first = await pool._acquire(None, 0, None)
        waiting = [asyncio.create_task(pool._acquire(None, 0, None)) for _ in range(3)]
        await settle()
        lined_up = list(pool._waiters)  # each queued request's wake-up, in FIFO order
        assert len(lined_up) == 3
        pool._release(first, None, 0)
        got = await asyncio.wait_for(waiting[0], WAIT)  # the first in line got the slot
        await settle()
        woken = [f.done() and not f.cancelled() for f in lined_up]
        still_waiting = list(pool._waiters)
        for task in waiting[1:]:
            task.cancel()
        await asyncio.gather(*waiting[1:], return_exceptions=True)
        return got, woken, still_waiting == lined_up[1:]

    got, woken, in_place = asyncio.run(main())
    assert got.name == "http://127.0.0.1:9/v1"
    assert woken == [True, False, False]  # the others were not disturbed ...
    assert in_place  # ... and wait where they stood
