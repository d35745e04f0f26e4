"""One chat-completions attempt: the request body, the HTTP call, and what the reply means.

Every way an attempt can go wrong becomes a `Failure` with a kind the pool acts on; only
task cancellation escapes as an exception. Failure reasons are built from the status, the
endpoint's display name and the server's own error message, which goes through the run's
scrubber first (a server may echo the key back); never from headers. Redirects are not
followed: the request (the whole trajectory, and the key) goes to the configured address
or nowhere.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import orjson

from ..core.redact import redact
from .endpoint import Endpoint, display_url
from .temperature import request_temperature

FailureKind = Literal[
    "http",  # 5xx and unexpected statuses
    "rate_limited",  # 429
    "auth",  # 401/403: every request would fail
    "not_found",  # 404: a wrong model name or URL path
    "redirect",  # 3xx: not followed
    "context",  # 400 saying the input is too long for the model
    "timeout",
    "unreachable",  # cannot connect: refused, unknown host, no route
    "connection",  # reset, dropped mid-reply
    "invalid",  # not JSON, no choices, empty content, rejected text
    "truncated",  # finish_reason == "length"
    "too_long",  # a summary far over its budget with no sentence end to cut at
]
# Kinds that say the endpoint is set up wrong rather than having a bad moment.
CONFIG_KINDS = frozenset({"auth", "not_found", "redirect", "unreachable"})
MESSAGE_CHARS = 160

MAX_RETRY_AFTER = 120.0
_CONTEXT_HINTS = re.compile(
    rb"context[ _-]?(?:length|window)|maximum context|too many tokens|prompt is too long|"
    rb"reduce the length|input is too long|exceeds? the (?:model'?s? )?(?:maximum|limit)",
    re.IGNORECASE,
)
_CONTEXT_LIMIT = re.compile(rb"maximum context length is (\d+)", re.IGNORECASE)
_CONTEXT_ASKED = re.compile(rb"(?:requested|resulted in|you have|contains?) (\d+) tokens",
                            re.IGNORECASE)


@dataclass
class ChatRequest:
    """What to send: messages, generation limits, and how to shrink the input if asked.

    ``options`` are further body fields (stop sequences, sampler settings) for servers
    that take them; ``reject`` says why a reply's text is unusable (e.g. an echo of the
    prompt), or None; ``finish`` turns a usable text into the one to keep and says whether
    it was cut, or returns None when the text is too long to cut (a failed attempt).
    """

    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float | None  # None: send none (see `temperature`)
    estimated_tokens: int  # prompt + completion, for tokens-per-minute limits
    shrink: Callable[[float], ChatRequest | None] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    reject: Callable[[str], str | None] | None = None
    finish: Callable[[str], tuple[str, bool] | None] | None = None

    def body(self, model: str) -> bytes:
        """The JSON body for ``model``; without a temperature where the model takes none."""
        body = {**self.options, "model": model, "messages": self.messages,
                "max_tokens": self.max_tokens}
        temperature = request_temperature(model, self.temperature)
        if temperature is not None:
            body["temperature"] = temperature
        return orjson.dumps(body)


@dataclass
class Completion:
    """A usable reply."""

    text: str
    model: str  # the model of the endpoint that answered
    prompt_tokens: int = 0
    completion_tokens: int = 0
    truncated: bool = False  # `finish` cut the text to fit its budget


@dataclass
class Failure:
    """A failed attempt: its kind, a one-line reason, and what the server said to do."""

    kind: FailureKind
    reason: str
    retry_after: float | None = None
    status: int | None = None  # the HTTP status, when there was one
    shrink_factor: float | None = None  # for "context": how much smaller the input must be
    prompt_tokens: int = 0
    completion_tokens: int = 0


async def send(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    request: ChatRequest,
    timeout: float,
    scrub: Callable[[str], str] = redact,
) -> Completion | Failure:
    """POST ``request`` to ``endpoint`` once (the session's timeout bounds it).

    ``scrub`` cleans the server's error messages before they enter a reason.
    """
    body = request.body(endpoint.model)
    try:
        async with session.post(endpoint.url, data=body, headers=endpoint.headers,
                                allow_redirects=False) as response:
            raw = await response.read()
            status = response.status
            retry_after = response.headers.get("Retry-After")
            location = response.headers.get("Location")
            content_type = response.content_type
    except asyncio.TimeoutError:
        return Failure("timeout", f"{endpoint.name}: no reply within {timeout:g}s")
    except aiohttp.ClientConnectorError as exc:
        return Failure("unreachable", f"{endpoint.name}: {_describe(exc)}")
    except aiohttp.ClientError as exc:
        return Failure("connection", f"{endpoint.name}: {_describe(exc)}")
    outcome = parse_reply(endpoint, status, raw, content_type, retry_after, location, scrub)
    if not isinstance(outcome, Completion):
        return outcome
    if request.reject is not None:
        reason = request.reject(outcome.text)
        if reason:
            return Failure("invalid", f"{endpoint.name}: {reason}",
                           prompt_tokens=outcome.prompt_tokens,
                           completion_tokens=outcome.completion_tokens)
    if request.finish is not None:
        finished = request.finish(outcome.text)
        if finished is None:
            return Failure("too_long", f"{endpoint.name}: the summary is far longer than "
                           f"asked ({len(outcome.text):,} characters) and has no sentence end "
                           "to cut it at", prompt_tokens=outcome.prompt_tokens,
                           completion_tokens=outcome.completion_tokens)
        outcome.text, outcome.truncated = finished
    return outcome


def parse_reply(
    endpoint: Endpoint,
    status: int,
    raw: bytes,
    content_type: str = "application/json",
    retry_after: str | None = None,
    location: str | None = None,
    scrub: Callable[[str], str] = redact,
) -> Completion | Failure:
    """Classify one HTTP reply (pure, so every branch is easy to test)."""
    where = endpoint.name
    said = _server_message(raw, scrub) if not 200 <= status < 300 else ""
    if status in (401, 403):
        return Failure("auth", f"{where}: HTTP {status}{said}", status=status)
    if status == 429:
        return Failure("rate_limited", f"{where}: HTTP 429 (rate limited)",
                       retry_after=parse_retry_after(retry_after), status=status)
    if status in (400, 413, 422) and _CONTEXT_HINTS.search(raw[:4096]):
        return Failure("context", f"{where}: HTTP {status} (input too long for the model)",
                       shrink_factor=_shrink_factor(raw[:4096]), status=status)
    if status == 404:
        return Failure("not_found", f"{where}: HTTP 404{said}", status=status)
    if 300 <= status < 400:
        target = display_url(location) if location and "//" in location else None
        to = f" to {target}" if target else ""
        return Failure("redirect", f"{where}: HTTP {status} redirect{to} (not followed)",
                       status=status)
    if status >= 300 or status < 200:
        after = parse_retry_after(retry_after) if status == 503 else None
        return Failure("http", f"{where}: HTTP {status}{said}", retry_after=after,
                       status=status)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        kind = content_type or "unknown content type"
        return Failure("invalid", f"{where}: the reply is not JSON ({kind}, {len(raw)} bytes)")
    return _parse_completion(endpoint, data)


def _parse_completion(endpoint: Endpoint, data: Any) -> Completion | Failure:
    where = endpoint.name
    usage = data.get("usage") if isinstance(data, dict) else None
    prompt_tokens = completion_tokens = 0
    if isinstance(usage, dict):
        prompt_tokens = _int(usage.get("prompt_tokens"))
        completion_tokens = _int(usage.get("completion_tokens"))
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return Failure("invalid", f"{where}: the reply has no choices",
                       prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    choice = choices[0]
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if choice.get("finish_reason") == "length":
        return Failure("truncated", f"{where}: the summary was cut off (finish_reason length)",
                       prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    if not isinstance(content, str) or not content.strip():
        return Failure("invalid", f"{where}: the reply's content is empty",
                       prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    return Completion(content, endpoint.model, prompt_tokens, completion_tokens)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), capped."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _shrink_factor(body: bytes) -> float:
    """How much to scale the input after a context-length error (numbers when given)."""
    limit = _CONTEXT_LIMIT.search(body)
    asked = _CONTEXT_ASKED.search(body)
    if limit and asked:
        lim, req = int(limit.group(1)), int(asked.group(1))
        if 0 < lim < req:
            return max(0.1, min(0.9 * lim / req, 0.8))
    return 0.5


def _server_message(raw: bytes, scrub: Callable[[str], str]) -> str:
    """``": MESSAGE"`` from an error reply's JSON (``error.message``, ``error``, ``message``,
    ``detail``), scrubbed, on one line and clipped; empty when there is none."""
    try:
        data = orjson.loads(raw[:65536])
    except orjson.JSONDecodeError:
        return ""
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        if message is None:
            message = data.get("message", data.get("detail"))
    if not isinstance(message, str) or not message.strip():
        return ""
    text = scrub(" ".join(message.split()))
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS - 1] + "…"
    return f": {text}"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _describe(exc: aiohttp.ClientError) -> str:
    """A short description of a client error without URLs, headers or bodies."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the reply was cut off"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"bad HTTP reply (status {exc.status})"
    return f"connection error ({type(exc).__name__})"
