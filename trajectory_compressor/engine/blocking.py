"""Run a coroutine to completion from sync code, even where an event loop already runs.

`asyncio.run` refuses to start in a thread whose loop is running: a Jupyter cell, or code
called from inside another library's loop (Playwright's sync API keeps one running between
calls). There the coroutine runs on a fresh loop in a helper thread and this thread waits
for it; anywhere else it is plain `asyncio.run`, so signals and Ctrl-C behave as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_blocking(start: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine that ``start()`` makes; its result or its exception comes back."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(start())
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = asyncio.run(start())
        except BaseException as exc:  # handed to the waiting thread below
            outcome["error"] = exc

    helper = threading.Thread(target=work, name="trajectory-compressor-run")
    helper.start()
    helper.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
