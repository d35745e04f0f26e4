"""`Deadline`: a time budget that stands still while paused, and cancels work past it.

Time is a `FakeClock` the tests move; `Deadline.run` rechecks it on every lap of its
event-loop wait (a lap lasts the time left, in real seconds), so what the tests assert
does not depend on how fast the machine is, only how long they take does.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from trajectory_compressor.core.deadline import Deadline


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


async def guarded(awaitable, limit: float = 30.0):
    """``awaitable``'s result (or exception), failing the test instead of hanging."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait([task], timeout=limit)
    if not done:
        task.cancel()
        raise AssertionError("still running: the deadline never fired")
    return task.result()


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
        d = Deadline(5, FakeClock())  # a clock that never moves: never late
        return await d.run(asyncio.sleep(0, result="done"))

    assert asyncio.run(main()) == "done"


def test_run_cancels_the_work_past_the_deadline():
    cancelled = []

    clock = FakeClock()

    async def work():
        clock.now += 1  # a second of work: past the 0.05 s budget
        try:
            await asyncio.Event().wait()  # then it never finishes
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await guarded(Deadline(0.05, clock).run(work()))

    asyncio.run(main())
    assert cancelled == [True]


def test_work_that_waits_paused_is_not_timed_out():
    clock = FakeClock()
    served = asyncio.Event()

    async def work(d: Deadline):
        with d.paused():
            clock.now += 30  # queued: far longer than the whole budget
            await asyncio.sleep(0)
        clock.now += 0.05  # served: well within it
        await served.wait()
        return "served"

    async def main():
        d = Deadline(0.2, clock)
        task = asyncio.ensure_future(d.run(work(d)))
        # Let `run` look at the clock on a few laps after the pause (each lap reads it),
        # then let the work finish.
        reads = clock.reads
        while clock.reads < reads + 3:
            await asyncio.sleep(0.01)
        served.set()
        return await guarded(task), d.remaining()

    result, left = asyncio.run(main())
    assert result == "served" and left == pytest.approx(0.15)


def test_the_clock_runs_again_after_the_pause():
    clock = FakeClock()

    async def work(d: Deadline):
        with d.paused():
            clock.now += 30  # not counted
            await asyncio.sleep(0)
        clock.now += 0.25  # counted: past the 0.2 s budget
        await asyncio.Event().wait()

    async def main():
        d = Deadline(0.2, clock)
        with pytest.raises(asyncio.TimeoutError):
            await guarded(d.run(work(d)))
        return d.remaining()

    assert asyncio.run(main()) == pytest.approx(-0.05)


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


def test_a_run_started_while_paused_waits_for_the_resume_then_times_out():
    # Work queued before it starts: `run` begins with the clock stopped, sleeps until the
    # resume wakes it, then enforces the budget from there.
    clock = FakeClock()

    async def work(d: Deadline):
        await asyncio.sleep(0.05)
        clock.now += 30  # still queued: not counted
        d.resume()
        clock.now += 0.25  # counted: past the 0.2 s budget
        await asyncio.Event().wait()

    async def main():
        d = Deadline(0.2, clock)
        d.pause()
        with pytest.raises(asyncio.TimeoutError):
            await guarded(d.run(work(d)), limit=10)
        return d.remaining()

    assert asyncio.run(main()) == pytest.approx(-0.05)


def test_work_done_while_paused_leaves_no_task_behind():
    clock = FakeClock()

    async def work():
        clock.now += 30
        return "done"

    async def main():
        d = Deadline(0.2, clock)
        d.pause()
        result = await guarded(d.run(work()), limit=10)
        await asyncio.sleep(0)  # let a cancelled waiter finish
        return result, asyncio.all_tasks() - {asyncio.current_task()}, d.remaining()

    result, left_over, remaining = asyncio.run(main())
    assert result == "done" and left_over == set() and remaining == pytest.approx(0.2)
