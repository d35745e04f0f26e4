"""`Pool`: sends chat requests to a set of endpoints, bounded, balanced, retried (§6).

- Least-loaded first: among the endpoints that admit a request (capacity, rate limits,
  circuit), the one with the fewest in-flight requests per unit of weight; a retry
  prefers another endpoint than the one that just failed.
- Bounded: at most ``max_in_flight`` requests over all endpoints, plus each endpoint's
  own ``max_concurrency``; waiting requests queue in FIFO order and a finished request
  wakes exactly one of them, so the cost per request does not grow with the queue.
- Retries: exponential backoff, jittered above ``retry_delay``; ``Retry-After`` on 429/503
  is honoured (the retry goes elsewhere at once when another endpoint can take it). A
  context-length 400 shrinks the input and retries without using up an attempt.
- 401/403 is fatal: the pool remembers it, wakes every waiter, and every call raises
  `FatalSummaryError` from then on. So is an endpoint whose first `FAIL_FAST_REPLIES`
  replies all say it is set up wrong (404, a redirect, cannot connect): every row would
  fall back. ``allow_fallback`` turns both into ordinary failed attempts.
- Loud: the first failure of each kind from each endpoint goes to ``on_failure`` (the
  summarizer prints it); the rest are counted by kind in the usage.
- A row's `Deadline` is paused while its request waits for a slot: queueing behind
  other rows is not the row's fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from ..core.counted import counted
from ..core.deadline import Deadline
from ..core.errors import FatalSummaryError
from ..core.redact import redact
from ..core.summary import SummaryUsage
from .chat import CONFIG_KINDS, ChatRequest, Completion, Failure, send
from .endpoint import Endpoint

MAX_SHRINKS = 3
MAX_BACKOFF = 60.0
FAIL_FAST_REPLIES = 3
# Failure kinds that say nothing about the endpoint's health.
_NEUTRAL = frozenset({"rate_limited", "context"})


class PoolFailure(Exception):
    """Every attempt failed; ``usage`` says what they cost."""

    def __init__(self, reason: str, usage: SummaryUsage) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage


@dataclass
class PoolResult:
    """A completion and what obtaining it cost."""

    completion: Completion
    usage: SummaryUsage = field(default_factory=SummaryUsage)


class Pool:
    """Chat requests over one `aiohttp.ClientSession` and several `Endpoint` objects."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        *,
        max_in_flight: int = 50,
        max_retries: int = 3,
        retry_delay: float = 2.0,
        request_timeout: float = 120.0,
        rng: random.Random | None = None,
        allow_fallback: bool = False,
        fail_fast: int = FAIL_FAST_REPLIES,
        on_failure: Callable[[Endpoint, Failure], None] | None = None,
        scrub: Callable[[str], str] = redact,
    ) -> None:
        if not endpoints:
            raise ValueError("a pool needs at least one endpoint")
        self.allow_fallback = allow_fallback
        self.fail_fast = fail_fast
        self.on_failure = on_failure
        self.scrub = scrub
        self.endpoints = endpoints
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.request_timeout = request_timeout
        self.in_flight = 0
        self.calls = 0  # HTTP requests sent (live counter for progress displays)
        self._rng = rng or random.Random()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._session: aiohttp.ClientSession | None = None
        self._fatal: str | None = None  # why every request would fail (a rejected key)
        # Each endpoint's first failures of a kind not shown yet (see `_note_failure`).
        self._held: dict[Endpoint, list[Failure]] = {e: [] for e in endpoints}

    async def start(self) -> None:
        """Open the run's HTTP session (keep-alive, sized to the concurrency)."""
        if self._session is not None:
            return
        connector = aiohttp.TCPConnector(limit=self.max_in_flight, limit_per_host=0,
                                         ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            # Faster, and nothing in a reply needs cookies.
            cookie_jar=aiohttp.DummyCookieJar(),
            raise_for_status=False,
        )

    async def aclose(self) -> None:
        """Close the session and its connections; say what is still to be said."""
        for endpoint in self.endpoints:
            self._tell(endpoint)
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def complete(
        self,
        request: ChatRequest,
        deadline: Deadline | None = None,
        usage: SummaryUsage | None = None,
    ) -> PoolResult:
        """A completion for ``request``; raises `PoolFailure` or `FatalSummaryError`.

        ``deadline`` (the row's) is paused while the request waits for a free slot.
        ``usage`` is filled in as the attempts go: a caller that gives up (a deadline)
        still knows what was sent.
        """
        if self._session is None:
            raise RuntimeError("the pool is not started; use `async with` on its summarizer")
        usage = SummaryUsage() if usage is None else usage
        attempts = shrinks = 0
        avoid: Endpoint | None = None
        while True:
            endpoint = await self._acquire(avoid, request.estimated_tokens, deadline)
            outcome: Completion | Failure | None = None
            usage.api_calls += 1  # sent, whether or not a reply comes back
            usage.retries = usage.api_calls - 1
            try:
                outcome = await send(self._session, endpoint, request, self.request_timeout,
                                     self.scrub)
            finally:
                self._release(endpoint, outcome, request.estimated_tokens)
            usage.prompt_tokens += outcome.prompt_tokens
            usage.completion_tokens += outcome.completion_tokens
            if isinstance(outcome, Completion):
                endpoint.early_replies += 1
                self._tell(endpoint)
                return PoolResult(outcome, usage)
            usage.failed(outcome.kind)
            self._note_failure(endpoint, outcome)
            if outcome.kind == "auth" and not self.allow_fallback:
                raise self._fail_fatally(endpoint, outcome)
            if self._fatal is not None:
                raise FatalSummaryError(self._fatal)
            if outcome.kind == "context" and shrinks < MAX_SHRINKS and request.shrink:
                smaller = request.shrink(outcome.shrink_factor or 0.5)
                if smaller is not None:
                    shrinks += 1
                    request = smaller
                    continue
            attempts += 1
            if attempts >= self.max_retries:
                raise PoolFailure(f"{counted(attempts, 'attempt')} failed; last: "
                                  f"{outcome.reason}", usage)
            await asyncio.sleep(self._delay(attempts, endpoint, outcome))
            avoid = endpoint

    # -- choosing an endpoint ---------------------------------------------------------

    def _pick(self, avoid: Endpoint | None, now: float) -> Endpoint | None:
        best: Endpoint | None = None
        best_key: tuple[bool, bool, float] | None = None
        for endpoint in self.endpoints:
            if not endpoint.admits(now):
                continue
            key = (endpoint is avoid, endpoint.cool_until > now, endpoint.load())
            if best_key is None or key < best_key:
                best, best_key = endpoint, key
        return best

    async def _acquire(
        self, avoid: Endpoint | None, estimated_tokens: int, deadline: Deadline | None
    ) -> Endpoint:
        if self._fatal is not None:
            raise FatalSummaryError(self._fatal)
        if not self._waiters and self.in_flight < self.max_in_flight:
            now = time.monotonic()
            endpoint = self._pick(avoid, now)
            if endpoint is not None:
                return self._take(endpoint, estimated_tokens, now)
        if deadline is None:
            return await self._wait_for_endpoint(avoid, estimated_tokens)
        with deadline.paused():
            return await self._wait_for_endpoint(avoid, estimated_tokens)

    async def _wait_for_endpoint(self, avoid: Endpoint | None, estimated_tokens: int) -> Endpoint:
        loop = asyncio.get_running_loop()
        front = False  # a woken waiter that still finds nothing keeps its place in line
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            if front:
                self._waiters.appendleft(waiter)
            else:
                self._waiters.append(waiter)
            now = time.monotonic()
            # Besides a finished request, a rate limit refilling or a circuit's cooldown
            # ending can make room: wake up for the earliest of those too.
            later = [t for e in self.endpoints if (t := e.next_ready(now)) > now]
            timeout = min(later) - now if later else None
            try:
                if timeout is None:
                    await waiter
                else:
                    await asyncio.wait([waiter], timeout=timeout)
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass on the wake-up this task can no longer use
                raise
            finally:
                if not waiter.done() or waiter.cancelled():
                    # Not woken (timer, or cancelled): leave the line. A woken waiter
                    # was already taken off it by `_wake_one`.
                    waiter.cancel()
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
            if self._fatal is not None:
                raise FatalSummaryError(self._fatal)
            if self.in_flight < self.max_in_flight:
                now = time.monotonic()
                endpoint = self._pick(avoid, now)
                if endpoint is not None:
                    taken = self._take(endpoint, estimated_tokens, now)
                    if self._waiters and self.in_flight < self.max_in_flight:
                        self._wake_one()  # there may be room for the next one too
                    return taken
            front = True

    def _take(self, endpoint: Endpoint, estimated_tokens: int, now: float) -> Endpoint:
        self.in_flight += 1
        self.calls += 1
        endpoint.send(estimated_tokens, now)
        return endpoint

    def _release(
        self, endpoint: Endpoint, outcome: Completion | Failure | None, estimated_tokens: int
    ) -> None:
        self.in_flight -= 1
        endpoint.in_flight -= 1
        now = time.monotonic()
        breaker = endpoint.breaker
        if isinstance(outcome, Completion):
            if endpoint.tpm is not None and (outcome.prompt_tokens or outcome.completion_tokens):
                actual = outcome.prompt_tokens + outcome.completion_tokens
                endpoint.tpm.take(actual - estimated_tokens, now)
            # An endpoint that came back has room for more than this slot: the waiter
            # woken below wakes the next while it finds room (waking them all at once
            # would put those that find none back in line in reverse order).
            breaker.record_success()
        elif outcome is None or outcome.kind in _NEUTRAL or (
                outcome.kind == "auth" and not self.allow_fallback):
            breaker.record_neutral()  # cancelled, rate limited, too long, bad key (fatal)
            if outcome is not None and outcome.retry_after:
                endpoint.cool_until = max(endpoint.cool_until, now + outcome.retry_after)
        else:
            endpoint.failures += 1
            if outcome.retry_after:
                endpoint.cool_until = max(endpoint.cool_until, now + outcome.retry_after)
            others_closed = any(e.breaker.closed for e in self.endpoints if e is not endpoint)
            breaker.record_failure(now, may_open=others_closed)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # -- retries ----------------------------------------------------------------------

    def _delay(self, attempts: int, failed: Endpoint, failure: Failure) -> float:
        """Jittered backoff: retry k waits between ``retry_delay`` (never less, as in the
        reference) and ``retry_delay * 2**k`` (at most `MAX_BACKOFF`), and at least
        ``Retry-After`` unless another endpoint can serve."""
        ceiling = max(self.retry_delay, min(MAX_BACKOFF, self.retry_delay * 2 ** attempts))
        delay = self._rng.uniform(self.retry_delay, ceiling)
        if failure.retry_after:
            now = time.monotonic()
            elsewhere = any(
                e is not failed and e.cool_until <= now and e.breaker.available(now)
                for e in self.endpoints
            )
            if not elsewhere:
                delay = max(delay, failure.retry_after)
        return delay

    # -- failures a person should know about --------------------------------------------

    def _note_failure(self, endpoint: Endpoint, failure: Failure) -> None:
        """Report the endpoint's first failure of this kind; stop the run when its first
        replies all say it is set up wrong (unless falling back is allowed).

        While an endpoint's first replies are all of that sort, its notices wait for the
        verdict: the run's error says it all when the endpoint stops the run.
        """
        if failure.kind not in _NEUTRAL and endpoint.early_replies < self.fail_fast:
            endpoint.early_replies += 1
            endpoint.early_config_failures += failure.kind in CONFIG_KINDS
        if (endpoint.early_config_failures == self.fail_fast and not self.allow_fallback
                and self._fatal is None):
            noun = "request" if self.fail_fast == 1 else f"{self.fail_fast} requests"
            self._fatal = (f"the endpoint {endpoint.name} failed its first {noun} (last: "
                           f"{failure.reason.removeprefix(endpoint.name + ': ')}); check its "
                           "URL and model, or pass --allow-fallback to use extractive "
                           "summaries instead")
            self._wake_all()
        if failure.kind not in endpoint.reported:
            endpoint.reported.add(failure.kind)
            if failure.kind != "auth" or self.allow_fallback:  # else fatal: its error says it
                self._held[endpoint].append(failure)
        if not (not self.allow_fallback and endpoint.early_replies < self.fail_fast
                and endpoint.early_config_failures == endpoint.early_replies):
            self._tell(endpoint)

    def _tell(self, endpoint: Endpoint) -> None:
        """Pass on the endpoint's held notices (none once the run is stopping)."""
        held, self._held[endpoint] = self._held[endpoint], []
        if self._fatal is None and self.on_failure is not None:
            for failure in held:
                self.on_failure(endpoint, failure)

    def _fail_fatally(self, endpoint: Endpoint, failure: Failure) -> FatalSummaryError:
        if self._fatal is None:
            status = failure.status
            if endpoint.key_env is None:
                message = (f"the endpoint {endpoint.name} refused the request (HTTP {status}) "
                           "and no API key was sent; name the variable holding the key with "
                           "--api-key-env or summarization.api_key_env")
            else:
                message = (f"the endpoint {endpoint.name} rejected the API key from "
                           f"${endpoint.key_env} (HTTP {status}); check the key and the "
                           "endpoint's URL")
            self._fatal = message
            self._wake_all()
        return FatalSummaryError(self._fatal)
