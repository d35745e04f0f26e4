"""`Deadline`: a time budget that stands still while paused, and cancels work past it."""

from __future__ import annotations

import asyncio
import gc

import pytest

from trajectory_compressor.core.deadline import Deadline


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_paused_time_does_not_count_and_pauses_nest():
    clock = FakeClock()
    d = Deadline(10, clock)
    clock.now += 3
    assert d.remaining() == pytest.approx(7)
    d.pause()
    d.pause()
    clock.now += 50
    d.resume()
    assert not d.running
    clock.now += 50
    assert d.remaining() == pytest.approx(7)
    d.resume()
    assert d.running
    clock.now += 2
    assert d.remaining() == pytest.approx(5)


def test_run_returns_the_result_in_time():
    async def main():
        d = Deadline(5)
        return await d.run(asyncio.sleep(0.01, result="done"))

    assert asyncio.run(main()) == "done"


def test_run_cancels_the_work_past_the_deadline():
    cancelled = []

    async def work():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await Deadline(0.05).run(work())

    asyncio.run(main())
    assert cancelled == [True]


def test_work_that_waits_paused_is_not_timed_out():
    async def work(d: Deadline):
        with d.paused():
            await asyncio.sleep(0.3)  # queued: longer than the whole budget
        await asyncio.sleep(0.05)  # served: well within it
        return "served"

    async def main():
        d = Deadline(0.2)
        return await d.run(work(d))

    assert asyncio.run(main()) == "served"


def test_the_clock_runs_again_after_the_pause():
    async def work(d: Deadline):
        with d.paused():
            await asyncio.sleep(0.05)
        await asyncio.sleep(10)

    async def main():
        d = Deadline(0.2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await d.run(work(d))
        return loop.time() - started

    elapsed = asyncio.run(main())
    assert 0.2 <= elapsed < 1.0


def test_work_failing_as_the_caller_is_cancelled_leaves_no_unretrieved_exception():
    reports: list[str] = []

    async def boom():
        raise RuntimeError("fatal")

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reports.append(context["message"]))
        outer = asyncio.create_task(Deadline(5).run(boom()))
        await asyncio.sleep(0)  # the caller starts the work and waits
        await asyncio.sleep(0)  # the work fails
        outer.cancel()  # the caller is cancelled before it sees the failure
        with pytest.raises(asyncio.CancelledError):
            await outer
        del outer
        gc.collect()

    asyncio.run(main())
    assert reports == []
