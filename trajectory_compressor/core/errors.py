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


class OutputError(CompressorError):
    """An output cannot be written (an unwritable folder, a full disk): exit code 4."""


def one_line_error(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` of an unexpected exception, on one line, for a located report."""
    text = " ".join(str(exc).split()) or "(no message)"
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}"
