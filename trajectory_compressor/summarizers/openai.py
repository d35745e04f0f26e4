"""`OpenAISummarizer`: the `openai` backend — prompt, cache, then the endpoint pool (§5, §6)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping

from ..core.config import CompressionConfig, EndpointConfig
from ..core.redact import Scrubber
from ..core.summary import (
    MAX_CHARS_PER_TOKEN,
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    bound_summary,
    finish_summary_text,
    summary_limit,
)
from ..core.terminal import inert
from ..counting.identity import tokenizer_identity
from .cache import SummaryCache, cache_key, origin_digest
from .chat import ChatRequest, Failure
from .endpoint import Endpoint, resolve_endpoints
from .pool import Pool, PoolFailure
from .prompt import FULL, PromptStyle, build_prompt

Finish = Callable[[str], tuple[str, bool] | None]


def _warn(message: str) -> None:
    print(inert(f"warning: {message}"), file=sys.stderr, flush=True)


def _under_a_bar(config: CompressionConfig) -> bool:
    """A fidelity bar is set (`min_fidelity` or `max_invented`, §15): the cache then
    holds only the summaries rows accept, so its writes wait for the row's verdict."""
    return config.min_fidelity is not None or config.max_invented is not None


class OpenAISummarizer(Summarizer):
    """Summaries from OpenAI-compatible chat-completions endpoints.

    A cached summary is returned without a request (source ``cache``); so is the summary
    of a region identical to one already being summarized. Otherwise the pool retries
    and fails over; when every attempt failed it raises `SummaryFailed` and the caller
    falls back to the extractive summary. ``style`` words the prompt (`FULL` by default;
    `COMPACT` for tiny models).

    Every reply is scrubbed of the run's configured key values, redacted, and bounded:
    with ``count_tokens``, a summary over its target x ``summary_tolerance`` tokens is
    cut at the last sentence end within the target, and one that cannot be cut so is a
    failed attempt (kind ``too_long``), retried. Only a bounded prefix of a reply is
    looked at: ``summary_limit`` x `MAX_CHARS_PER_TOKEN` + 1 characters, one more than
    any summary within its limit can hold; without ``count_tokens`` that prefix is the
    only bound (a longer reply is clipped to it and marked truncated). The first
    failure of each kind from each endpoint goes to `notify` (stderr by default).
    """

    name = "openai"

    def __init__(
        self,
        config: CompressionConfig,
        endpoints: list[EndpointConfig] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        breaker_threshold: int | None = None,
        breaker_cooldown: float | None = None,
        style: PromptStyle = FULL,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.config = config
        self.style = style
        self.count_tokens = count_tokens
        configs = endpoints if endpoints is not None else config.summarization_endpoints()
        env = os.environ if environ is None else environ
        secrets = [*config.secret_values(env), *config.secret_values(),
                   *(env.get(e.api_key_env, "") for e in configs if e.api_key_env)]
        self.scrubber = Scrubber(secrets)
        # The circuit breaker: the config's keys unless given here.
        threshold = config.breaker_failures if breaker_threshold is None else breaker_threshold
        cooldown = config.breaker_cooldown if breaker_cooldown is None else breaker_cooldown
        resolved = resolve_endpoints(configs, time.monotonic(), environ, threshold, cooldown,
                                     config.allow_insecure_http)
        self.pool = Pool(
            resolved,
            max_in_flight=config.max_concurrent_requests,
            max_retries=config.max_retries,
            retry_delay=config.retry_delay,
            request_timeout=config.request_timeout,
            allow_fallback=config.allow_fallback,
            on_failure=self._on_failure,
            scrub=self.scrubber,
        )
        self.models = list(dict.fromkeys(e.model for e in resolved))
        self.cache_path = config.cache_path if config.cache_enabled else None
        self.cache: SummaryCache | None = None
        # Regions being summarized right now, by cache key: a duplicate waits for them.
        self._pending: dict[str, asyncio.Future[tuple[str, bool] | None]] = {}

    def live_counters(self) -> dict[str, int]:
        """HTTP requests sent so far and in flight now (for the progress bar)."""
        return {"api_calls": self.pool.calls, "requests": self.pool.in_flight}

    async def start(self) -> None:
        """Open the cache (if any) and the pool's HTTP session."""
        if self.cache_path is not None and self.cache is None:
            self.cache = SummaryCache(self.cache_path, tokenizer_identity(self.config))
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
        finish = self._finisher(request.target_tokens)
        # Off the event loop: rendering and scrubbing a long region (tens of ms) while the
        # window starts many requests would starve the replies in flight past their timeout.
        prompt = await asyncio.to_thread(build_prompt, request, self.config.max_input_tokens,
                                         self.config.temperature, self.style, finish,
                                         scrub=self.scrubber)
        if request.repair is not None:
            # A repair is asked once for one row: neither cached nor shared with twins.
            return await self._repair(prompt.chat_request(), request)
        keys = {m: cache_key(m, prompt.messages, prompt.max_tokens, prompt.temperature,
                             self.style.options)
                for m in self.models}
        if self.cache is not None:
            for model, key in keys.items():
                cached = self._from_cache(key, request, finish, model)
                if cached is not None:
                    return cached
        lead_key = next(iter(keys.values()))
        twin = self._pending.get(lead_key)
        if twin is not None:
            # The twin's own deadline bounds this wait; it may still be queued itself.
            waiting = request.deadline.paused() if request.deadline else contextlib.nullcontext()
            with waiting:
                done = await asyncio.shield(twin)
            if done is not None:
                return Summary(done[0], "cache", request.usage, done[1])
            # The twin failed: try on our own.
        return await self._request(prompt.chat_request(), keys, lead_key, request)

    def _from_cache(self, key: str, request: SummaryRequest, finish: Finish,
                    model: str = "") -> Summary | None:
        """The cached summary under ``key``, reported as obtained: a summary this very row
        paid for before its run was interrupted counts as the call it was."""
        assert self.cache is not None
        entry = self.cache.get_entry(key)
        if entry is None:
            return None
        done = finish(entry.text)  # entries written before summaries were bounded
        if done is None:
            return None
        text, cut = done
        truncated = cut or entry.truncated
        if (request.origin is not None and entry.usage is not None
                and entry.origin == origin_digest(request.origin)):
            request.usage.add(entry.usage)
            return Summary(text, "llm", request.usage, truncated)
        summary = Summary(text, "cache", request.usage, truncated)
        if _under_a_bar(self.config):
            # An entry from a run without the bar may be below it: a repaired summary
            # that passes replaces it.
            origin = origin_digest(request.origin) if request.origin is not None else None

            def commit(kept: Summary) -> None:
                if self.cache is not None:
                    self.cache.put(key, model, kept.text, origin=origin,
                                   usage=kept.usage, truncated=kept.truncated)

            summary.commit = commit
        return summary

    async def _request(
        self, chat: ChatRequest, keys: dict[str, str], lead_key: str, request: SummaryRequest
    ) -> Summary:
        done: asyncio.Future[tuple[str, bool] | None] = (
            asyncio.get_running_loop().create_future())
        owner = lead_key not in self._pending
        if owner:
            self._pending[lead_key] = done
        outcome: tuple[str, bool] | None = None
        try:
            result = await self.pool.complete(chat, request.deadline, request.usage)
            completion = result.completion
            outcome = (completion.text, completion.truncated)
            origin = origin_digest(request.origin) if request.origin is not None else None
            key = keys[completion.model]

            def commit(kept: Summary) -> None:
                if self.cache is not None:
                    self.cache.put(key, completion.model, kept.text, origin=origin,
                                   usage=kept.usage, truncated=kept.truncated)

            summary = Summary(completion.text, "llm", result.usage, completion.truncated)
            if not _under_a_bar(self.config):
                commit(summary)
            else:  # under a fidelity bar only the summary a row accepts is cached (§15)
                summary.commit = commit
            return summary
        except PoolFailure as failure:
            raise SummaryFailed(failure.reason, failure.usage) from None
        finally:
            if owner:
                del self._pending[lead_key]
                done.set_result(outcome)

    async def _repair(self, chat: ChatRequest, request: SummaryRequest) -> Summary:
        try:
            result = await self.pool.complete(chat, request.deadline, request.usage)
        except PoolFailure as failure:
            raise SummaryFailed(failure.reason, failure.usage) from None
        completion = result.completion
        return Summary(completion.text, "llm", result.usage, completion.truncated)

    def _finisher(self, target_tokens: int) -> Finish:
        """What turns a reply into the summary kept: the key values scrubbed from all of
        it, then a bounded prefix trimmed, redacted, prefixed and cut to its budget."""
        tolerance = self.config.summary_tolerance
        # Nothing past this can survive the cut; the rest is not even redacted.
        cap = summary_limit(target_tokens, tolerance) * MAX_CHARS_PER_TOKEN + 1

        def finish(raw: str) -> tuple[str, bool] | None:
            clean = self.scrubber.literal(raw)
            clipped = len(clean) > cap
            text = finish_summary_text(clean[:cap], self.scrubber)
            if self.count_tokens is None:
                return text, clipped
            bounded = bound_summary(text, target_tokens, tolerance, self.count_tokens)
            if bounded is None:
                return None
            return bounded[0], bounded[1] or clipped

        return finish

    def _on_failure(self, endpoint: Endpoint, failure: Failure) -> None:
        """An endpoint's first failure of a kind: said once, with its reason."""
        message = self.scrubber.literal(
            f"{failure.reason} (the first '{failure.kind}' failure from this endpoint; "
            "later ones are counted in the metrics file under summarization.errors_by_kind)")
        (self.notify or _warn)(message)
