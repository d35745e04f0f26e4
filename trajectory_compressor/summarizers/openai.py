"""`OpenAISummarizer`: the `openai` backend — prompt, cache, then the endpoint pool (§5, §6)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping

from ..core.config import CompressionConfig, EndpointConfig
from ..core.summary import Summarizer, Summary, SummaryFailed, SummaryRequest, finish_summary_text
from .cache import SummaryCache, cache_key
from .chat import ChatRequest
from .endpoint import resolve_endpoints
from .pool import Pool, PoolFailure
from .prompt import FULL, PromptStyle, build_prompt


class OpenAISummarizer(Summarizer):
    """Summaries from OpenAI-compatible chat-completions endpoints.

    A cached summary is returned without a request (source ``cache``); so is the summary
    of a region identical to one already being summarized. Otherwise the pool retries
    and fails over; when every attempt failed it raises `SummaryFailed` and the caller
    falls back to the extractive summary. ``style`` words the prompt (`FULL` by default;
    `COMPACT` for tiny models).
    """

    name = "openai"

    def __init__(
        self,
        config: CompressionConfig,
        endpoints: list[EndpointConfig] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        breaker_threshold: int = 5,
        breaker_cooldown: float = 5.0,
        style: PromptStyle = FULL,
    ) -> None:
        self.config = config
        self.style = style
        resolved = resolve_endpoints(
            endpoints if endpoints is not None else config.summarization_endpoints(),
            time.monotonic(), environ, breaker_threshold, breaker_cooldown,
        )
        self.pool = Pool(
            resolved,
            max_in_flight=config.max_concurrent_requests,
            max_retries=config.max_retries,
            retry_delay=config.retry_delay,
            request_timeout=config.request_timeout,
        )
        self.models = list(dict.fromkeys(e.model for e in resolved))
        self.cache_path = config.cache_path if config.cache_enabled else None
        self.cache: SummaryCache | None = None
        # Regions being summarized right now, by cache key: a duplicate waits for them.
        self._pending: dict[str, asyncio.Future[str | None]] = {}

    def live_counters(self) -> dict[str, int]:
        """HTTP requests sent so far and in flight now (for the progress bar)."""
        return {"api_calls": self.pool.calls, "requests": self.pool.in_flight}

    async def start(self) -> None:
        """Open the cache (if any) and the pool's HTTP session."""
        if self.cache_path is not None and self.cache is None:
            self.cache = SummaryCache(self.cache_path)
        await self.pool.start()

    async def aclose(self) -> None:
        """Close the session and commit the cache."""
        try:
            await self.pool.aclose()
        finally:
            cache, self.cache = self.cache, None
            if cache is not None:
                cache.close()

    async def summarize(self, request: SummaryRequest) -> Summary:
        """A summary from the cache, a duplicate in flight, or the endpoints."""
        prompt = build_prompt(request, self.config.max_input_tokens, self.config.temperature,
                              self.style)
        keys = {m: cache_key(m, prompt.messages, prompt.max_tokens, prompt.temperature,
                             self.style.options)
                for m in self.models}
        if self.cache is not None:
            for key in keys.values():
                text = self.cache.get(key)
                if text is not None:
                    return Summary(finish_summary_text(text), "cache")
        lead_key = next(iter(keys.values()))
        twin = self._pending.get(lead_key)
        if twin is not None:
            # The twin's own deadline bounds this wait; it may still be queued itself.
            waiting = request.deadline.paused() if request.deadline else contextlib.nullcontext()
            with waiting:
                text = await asyncio.shield(twin)
            if text is not None:
                return Summary(text, "cache")
            # The twin failed: try on our own.
        return await self._request(prompt.chat_request(), keys, lead_key, request)

    async def _request(
        self, chat: ChatRequest, keys: dict[str, str], lead_key: str, request: SummaryRequest
    ) -> Summary:
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        owner = lead_key not in self._pending
        if owner:
            self._pending[lead_key] = done
        text: str | None = None
        try:
            result = await self.pool.complete(chat, request.deadline)
            text = finish_summary_text(result.completion.text)
            if self.cache is not None:
                self.cache.put(keys[result.completion.model], result.completion.model, text)
            return Summary(text, "llm", result.usage)
        except PoolFailure as failure:
            raise SummaryFailed(failure.reason, failure.usage) from None
        finally:
            if owner:
                del self._pending[lead_key]
                done.set_result(text)
