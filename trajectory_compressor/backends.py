"""Choosing the summarizer backend named by the configuration (§5)."""

from __future__ import annotations

from .config import CompressionConfig
from .errors import ConfigError
from .extractive import ExtractiveSummarizer
from .summary import Summarizer
from .tokens import TokenCounter


def make_summarizer(config: CompressionConfig, counter: TokenCounter) -> Summarizer:
    """The backend for ``config.summarizer``: `extractive`, `openai` or `local`."""
    if config.summarizer == "extractive":
        return ExtractiveSummarizer(counter.count)
    if config.summarizer == "openai":
        from .llm import OpenAISummarizer

        return OpenAISummarizer(config)
    if config.summarizer == "local":
        from .llm.local import LocalSummarizer

        return LocalSummarizer(config)
    raise ConfigError(
        f"unknown summarizer '{config.summarizer}'; use openai, extractive or local"
    )
