"""`Deadline`: a row's time budget for its summary, not spent while it waits in a queue.

The per-trajectory deadline (§6) guards against a summary that never finishes: a stalled
endpoint, retries that go on and on. Time a row spends queued behind other rows for a
free request slot says nothing about that, and with a slow backend (the local llama.cpp
server answers one request at a time, ~10 s each) a long queue would otherwise push rows
past the deadline without a single request having been sent for them. So the pool pauses
the clock while a request waits for a slot; requests in flight, backoff between
attempts and the summarizer's own work all count.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


class Deadline:
    """A budget of ``seconds`` that runs from creation except while `paused`."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._spent = 0.0
        self._since: float | None = clock()  # None while paused
        self._pauses = 0  # nested pauses (a retry may queue again)
        self._resumed: asyncio.Event | None = None

    @property
    def running(self) -> bool:
        """Whether the clock is running now."""
        return self._since is not None

    def remaining(self) -> float:
        """Seconds left (negative once past the deadline)."""
        spent = self._spent
        if self._since is not None:
            spent += self._clock() - self._since
        return self.seconds - spent

    def pause(self) -> None:
        """Stop the clock (while waiting in a queue); pauses nest."""
        self._pauses += 1
        if self._since is not None:
            self._spent += self._clock() - self._since
            self._since = None

    def resume(self) -> None:
        """Undo one `pause`; the clock runs again when none is left."""
        self._pauses = max(self._pauses - 1, 0)
        if self._pauses == 0 and self._since is None:
            self._since = self._clock()
            if self._resumed is not None:
                self._resumed.set()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The clock stands still inside the block."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    async def run(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``; cancel it and raise `asyncio.TimeoutError` when time is up."""
        task = asyncio.ensure_future(awaitable)
        try:
            while not task.done():
                if self._since is None:
                    self._resumed = asyncio.Event()
                    resumed = asyncio.ensure_future(self._resumed.wait())
                    try:
                        await asyncio.wait([task, resumed], return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        resumed.cancel()
                    continue
                left = self.remaining()
                if left <= 0:
                    raise asyncio.TimeoutError
                # A pause during this wait shows up as time left over on the next lap.
                await asyncio.wait([task], timeout=left)
            return task.result()
        finally:
            if not task.done():
                task.cancel()
                # Let the work clean up (release its pool slot) before the caller goes on.
                await asyncio.gather(task, return_exceptions=True)
            elif not task.cancelled():
                # Cancelled just as the work failed (a fatal error stops every row): its
                # exception is the caller's to report, not the event loop's.
                task.exception()
