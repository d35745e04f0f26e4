"""Summarizer backends behind the `Summarizer` interface (§5), and choosing one.

`extractive` lives in the pure core (`core.extractive`). The `openai` backend is an async
pool of OpenAI-compatible endpoints (§6), in modules of one concept each: `endpoint` (an
endpoint's key, limits and health), `breaker` (circuit breaker), `ratelimit` (requests and
tokens per minute), `chat` (one chat-completions attempt and what its reply means), `pool`
(choosing, bounding, retrying, failing over), `prompt` (the §4 instructions and input
bound), `cache` (SQLite cache of finished summaries) and `openai` (`OpenAISummarizer`,
tying them up). `local` (`LocalSummarizer`) puts the pool in front of llama.cpp servers
that `local_server` starts on this machine. `batch` (§17) writes the requests as OpenAI
Batch API files and later reads the provider's results (`batch`; `engine.batch` runs the
two phases). API keys come from the environment, or from `.env` files for variables it
leaves unset (`dotenv`). Backends load on first use: choosing the extractive one imports
no HTTP client.
"""

from __future__ import annotations

from ..core.config import CompressionConfig
from ..core.errors import ConfigError
from ..core.extractive import ExtractiveSummarizer
from ..core.summary import Summarizer
from ..counting.tokens import TokenCounter
from .choice import AUTO, default_summarizer, local_extra_installed, resolve_summarizer

__all__ = ["AUTO", "default_summarizer", "local_extra_installed", "make_summarizer",
           "resolve_summarizer"]


def make_summarizer(config: CompressionConfig, counter: TokenCounter) -> Summarizer:
    """The backend for ``config.summarizer``: `extractive`, `openai` or `local` (`batch`
    needs its batch folder: `engine.batch.export_batch` / `finish_batch`); `auto` as
    `default_summarizer` decides."""
    config = resolve_summarizer(config)
    if config.summarizer == "extractive":
        return ExtractiveSummarizer(counter.count)
    if config.summarizer == "openai":
        from .dotenv import key_environ
        from .openai import OpenAISummarizer

        return OpenAISummarizer(config, environ=key_environ(), count_tokens=counter.count)
    if config.summarizer == "local":
        from .local import LocalSummarizer

        return LocalSummarizer(config, count_tokens=counter.count)
    if config.summarizer == "batch":
        raise ConfigError("the batch summarizer runs in two phases, each given its batch "
                          "folder: compress --summarizer batch --batch-dir DIR (then again "
                          "with --batch-results FILE), or engine.batch.export_batch / "
                          "finish_batch")
    raise ConfigError(
        f"unknown summarizer '{config.summarizer}'; use openai, extractive, local or batch"
    )
