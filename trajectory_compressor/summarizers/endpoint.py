"""`Endpoint`: one OpenAI-compatible server of the pool, with its key, limits and health."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from yarl import URL

from ..core.config import EndpointConfig
from ..core.errors import ConfigError
from .breaker import CircuitBreaker
from .ratelimit import TokenBucket


def display_url(base_url: str) -> str:
    """``base_url`` safe to print: no user, password, query or fragment."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def chat_url(base_url: str) -> str:
    """The chat-completions URL of ``base_url``: ``/chat/completions`` after its path,
    its query kept after that (``https://h/v1?api-version=2`` ->
    ``https://h/v1/chat/completions?api-version=2``); a fragment is never sent."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/") + "/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class Endpoint:
    """Runtime state of one endpoint: request URL, headers, load, limits and circuit.

    The API key lives only in the prebuilt ``Authorization`` header; it is never part of
    `name` or of any message built from an endpoint.
    """

    def __init__(
        self,
        config: EndpointConfig,
        api_key: str | None,
        now: float,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.config = config
        self.model = config.model
        self.name = display_url(config.base_url)
        self.key_env = config.api_key_env if api_key is not None else None
        self.url = URL(chat_url(config.base_url))
        self.headers = {"Content-Type": "application/json"}
        if api_key is not None:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.weight = config.weight
        self.max_concurrency = config.max_concurrency or 1 << 30
        self.breaker = breaker or CircuitBreaker()
        self.rpm = TokenBucket(config.rpm, now) if config.rpm else None
        self.tpm = TokenBucket(config.tpm, now) if config.tpm else None
        self.in_flight = 0
        self.cool_until = 0.0  # a Retry-After received: prefer other endpoints until then
        self.requests = 0
        self.failures = 0
        # Its first replies: how many, and how many said it is set up wrong (fail fast).
        self.early_replies = 0
        self.early_config_failures = 0
        self.reported: set[str] = set()  # failure kinds already reported

    def __repr__(self) -> str:
        return f"Endpoint({self.name!r}, model={self.model!r}, in_flight={self.in_flight})"

    def admits(self, now: float) -> bool:
        """Whether a request may be sent here now (capacity, circuit, rate limits)."""
        if self.in_flight >= self.max_concurrency:
            return False
        if self.rpm is not None and not self.rpm.ready(now):
            return False
        if self.tpm is not None and not self.tpm.ready(now):
            return False
        return self.breaker.available(now)

    def next_ready(self, now: float) -> float:
        """When a time-based reason for refusing requests (rate limit, open circuit) ends."""
        at = self.breaker.ready_at()
        for bucket in (self.rpm, self.tpm):
            if bucket is not None:
                at = max(at, bucket.ready_at(now))
        return at

    def load(self) -> float:
        """In-flight requests relative to the endpoint's weight (lower is preferred)."""
        return self.in_flight / self.weight

    def send(self, estimated_tokens: int, now: float) -> None:
        """Account for a request about to be sent."""
        self.in_flight += 1
        self.requests += 1
        self.breaker.on_send()
        if self.rpm is not None:
            self.rpm.take(1, now)
        if self.tpm is not None:
            self.tpm.take(estimated_tokens, now)


def is_loopback(base_url: str) -> bool:
    """Whether ``base_url``'s host is this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_endpoints(
    configs: list[EndpointConfig],
    now: float,
    environ: Mapping[str, str] | None = None,
    breaker_threshold: int = 5,
    breaker_cooldown: float = 5.0,
    allow_insecure_http: bool = False,
) -> list[Endpoint]:
    """Endpoints with their keys read from the environment variables the config names.

    An endpoint without ``api_key_env`` (a local server) sends no ``Authorization``
    header; a named variable that is unset or empty is a `ConfigError`, and so is a key
    bound for a plain-http address other than this machine unless
    ``allow_insecure_http``: it would cross the network readable by anyone on the way.
    """
    env = os.environ if environ is None else environ
    if not configs:
        raise ConfigError("the openai summarizer needs at least one endpoint")
    endpoints = []
    for config in configs:
        if not config.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"summarization endpoint {config.base_url!r} is not an http(s) URL"
            )
        key = None
        if config.api_key_env:
            key = env.get(config.api_key_env)
            if not key:
                raise ConfigError(
                    f"the environment variable {config.api_key_env} (API key for "
                    f"{display_url(config.base_url)}) is not set; export it, name another "
                    "with --api-key-env, or use --summarizer extractive"
                )
            if urlsplit(config.base_url).username is not None:
                raise ConfigError(
                    f"the endpoint {display_url(config.base_url)} has credentials in its URL "
                    f"and an API key from ${config.api_key_env} as well; give one of them"
                )
            if (config.base_url.startswith("http://") and not is_loopback(config.base_url)
                    and not allow_insecure_http):
                raise ConfigError(
                    f"the endpoint {display_url(config.base_url)} uses plain http, so the API "
                    f"key from ${config.api_key_env} would cross the network unencrypted; "
                    "use https, or pass --allow-insecure-http "
                    "(summarization.allow_insecure_http) for a network you trust"
                )
        breaker = CircuitBreaker(breaker_threshold, breaker_cooldown)
        endpoints.append(Endpoint(config, key, now, breaker))
    return endpoints
