"""Who writes the handoff: the summarizer the caller gave, behind one sync interface.

- ``None``: `ExtractiveHandoff`, offline and deterministic.
- a plain callable ``prompt -> str``: called with the handoff prompt; it raises (or
  returns nothing) on failure. A coroutine function works too.
- a backend of the project's async `Summarizer` interface (HTTP pool, extractive, local):
  asked for a summary of the middle as ShareGPT turns, the earlier summary first, within
  the budget. Such backends write their own prompt, so a focus topic does not reach them.

`ContextCompressor.compress` is sync, and may be called from a thread whose event loop is
running (an async agent calling it directly); awaiting there is impossible and
``asyncio.run`` refuses. Async work therefore runs on a private event loop in a worker
thread, started and closed around the one call.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from ..core.conversation import SUMMARY_PREFIX as BATCH_SUMMARY_PREFIX
from ..core.summary import Summarizer, SummaryRequest
from ..dialects.openai import openai_to_sharegpt
from .extractive_handoff import ExtractiveHandoff
from .handoff import HandoffRequest, build_prompt
from .markers import summary_body

T = TypeVar("T")

SummarizerArg = Summarizer | Callable[[str], Any] | None


class HandoffFailed(Exception):
    """The summarizer gave no usable summary; the compressor falls back to the static marker."""


class HandoffWriter(Protocol):
    def write(self, request: HandoffRequest) -> str:
        """The summary body for ``request``; raises when none could be had."""
        ...


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on a private loop in a worker thread."""

    async def main() -> T:
        return await make()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-summary") as pool:
        return pool.submit(asyncio.run, main()).result()


class PromptWriter:
    """A plain callable ``prompt -> str`` given the handoff prompt."""

    def __init__(self, summarize: Callable[[str], Any]) -> None:
        self._summarize = summarize

    def write(self, request: HandoffRequest) -> str:
        result = self._summarize(build_prompt(request))
        if inspect.isawaitable(result):
            awaitable = result
            result = run_sync(lambda: awaitable)
        if not isinstance(result, str) or not result.strip():
            raise HandoffFailed(f"the summarizer returned {type(result).__name__}, no text")
        return result


class BackendWriter:
    """A backend of the `Summarizer` interface, run on its own loop for each call."""

    def __init__(self, summarizer: Summarizer) -> None:
        self._summarizer = summarizer

    def write(self, request: HandoffRequest) -> str:
        turns = openai_to_sharegpt(request.messages)
        first = request.first_index
        if request.previous_summary:
            # The earlier summary rides as the batch format's summary turn, ahead of the rest.
            turns = [{"from": "human",
                      "value": f"{BATCH_SUMMARY_PREFIX} {request.previous_summary}"}, *turns]
            first -= 1
        summary_request = SummaryRequest(turns, max(first, 0), request.budget)

        async def once() -> str:
            async with self._summarizer:
                summary = await self._summarizer.summarize(summary_request)
            return summary.text

        text = summary_body(run_sync(once))
        if not text:
            raise HandoffFailed("the summarizer returned an empty summary")
        return text


def make_writer(summarizer: SummarizerArg, count_tokens: Callable[[str], int]) -> HandoffWriter:
    """The writer for what the caller passed as ``summarizer``."""
    if summarizer is None:
        return ExtractiveHandoff(count_tokens)
    if isinstance(summarizer, Summarizer):
        return BackendWriter(summarizer)
    if callable(summarizer):
        return PromptWriter(summarizer)
    raise TypeError(
        "summarizer must be None, a Summarizer backend, or a callable prompt -> str; "
        f"got {type(summarizer).__name__}"
    )
