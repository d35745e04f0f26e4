"""The exception hierarchy: callers catch by kind, the CLI maps kinds to exit codes."""

from __future__ import annotations


class CompressorError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(CompressorError):
    """A configuration value, flag or file is invalid (exit code 2)."""


class TokenizerError(ConfigError):
    """The tokenizer cannot be loaded (offline, missing files)."""


class InputError(CompressorError):
    """An input path cannot be read at all (missing, unsupported format)."""


class RowError(CompressorError):
    """One row cannot be used; it goes to the rejects file with its location."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SummaryError(CompressorError):
    """One summarization attempt failed; retried, then replaced by the fallback."""


class FatalSummaryError(CompressorError):
    """A summarizer failure that every row would hit (bad API key): the run stops."""


class ResumeError(ConfigError):
    """`--resume` cannot continue: the checkpoint is for another input or other settings."""
