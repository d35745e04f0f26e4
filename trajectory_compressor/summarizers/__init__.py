"""Summarizer backends behind the `Summarizer` interface (§5), and choosing one.

`extractive` lives in the pure core (`core.extractive`). The `openai` backend is an async
pool of OpenAI-compatible endpoints (§6), in modules of one concept each: `endpoint` (an
endpoint's key, limits and health), `breaker` (circuit breaker), `ratelimit` (requests and
tokens per minute), `chat` (one chat-completions attempt and what its reply means), `pool`
(choosing, bounding, retrying, failing over), `prompt` (the §4 instructions and input
bound), `cache` (SQLite cache of finished summaries) and `openai` (`OpenAISummarizer`,
tying them up). `local` (`LocalSummarizer`) puts the pool in front of llama.cpp servers
that `local_server` starts on this machine. Backends load on first use: choosing the
extractive one imports no HTTP client.
"""

from __future__ import annotations

from ..core.config import CompressionConfig
from ..core.errors import ConfigError
from ..core.extractive import ExtractiveSummarizer
from ..core.summary import Summarizer
from ..counting.tokens import TokenCounter


def make_summarizer(config: CompressionConfig, counter: TokenCounter) -> Summarizer:
    """The backend for ``config.summarizer``: `extractive`, `openai` or `local`."""
    if config.summarizer == "extractive":
        return ExtractiveSummarizer(counter.count)
    if config.summarizer == "openai":
        from .openai import OpenAISummarizer

        return OpenAISummarizer(config, count_tokens=counter.count)
    if config.summarizer == "local":
        from .local import LocalSummarizer

        return LocalSummarizer(config, count_tokens=counter.count)
    raise ConfigError(
        f"unknown summarizer '{config.summarizer}'; use openai, extractive or local"
    )
