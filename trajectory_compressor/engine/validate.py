"""`validate`: check every row of a compressed output against its dialect's rules and the
target, for CI (§14).

A row passes when its dialect reads it (roles known, every tool result after the call it
answers, tool arguments that are JSON, LLaMA-Factory turns alternating), it holds at most
one summary, its metrics (when present) do not say it grew, and its count in the
configured mode is within the target unless its metrics flag it as still over the limit
(it is then in the run's over-limit file).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from ..core.config import CompressionConfig
from ..core.conversation import SUMMARY_PREFIX
from ..core.errors import one_line_error
from ..core.metrics import METRICS_KEY
from ..counting.tokens import TokenCounter
from ..dialects import detect
from ..dialects.sharegpt import ShareGPTVariant, alternates
from ..formats.registry import discover_inputs
from .count import RowCounter
from .stream import RowStream


@dataclass(frozen=True)
class Problem:
    """One violation: where (file and line or row) and what."""

    location: str
    message: str


@dataclass
class Validation:
    """What `validate_output` found: rows, problems, and what the CI gates count (rows
    over the target, rows whose metrics record an error, rows it cannot read)."""

    rows: int = 0
    problems: int = 0
    over_limit: int = 0
    failed: int = 0
    unreadable: int = 0
    fallbacks: int = 0  # rows whose summary is a fallback (every request failed)
    summaries: int = 0  # rows whose summary was asked of an LLM (llm, cache, fallback)


def validate_output(output: str, config: CompressionConfig, found: Validation,
                    counter: TokenCounter | None = None) -> Iterator[Problem]:
    """The problems of every row of ``output`` (a file or a folder of outputs), in order;
    ``found`` is filled with the counts as they go."""
    counter = counter or TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    rows = RowCounter(config, counter)
    stream = RowStream(partial(detect, config=config), batch_rows=config.batch_rows)
    for source in discover_inputs(output):
        dialect = stream.detect(source)
        for batch in stream.batches(source):
            for entry in batch:
                found.rows += 1
                where = str(entry.record.location)
                if entry.reject is not None or entry.turns is None:
                    found.problems += 1
                    found.unreadable += 1
                    yield Problem(where, entry.reject or "unreadable row")
                    continue
                for message in _row_problems(entry.record.row, entry.turns, dialect, rows,
                                             config, found):
                    found.problems += 1
                    yield Problem(where, message)


def _row_problems(row: dict, turns: list, dialect: object, rows: RowCounter,
                  config: CompressionConfig, found: Validation) -> Iterator[str]:
    summaries = sum(t["value"].count(SUMMARY_PREFIX) for t in turns)
    if summaries > 1:
        yield f"{summaries} summaries in one row (a compressed row has one)"
    if isinstance(dialect, ShareGPTVariant) and not alternates(turns):
        yield "user-side and assistant-side turns do not alternate (LLaMA-Factory drops it)"
    metrics = row.get(METRICS_KEY)
    flagged = isinstance(metrics, dict) and bool(metrics.get("still_over_limit"))
    found.failed += isinstance(metrics, dict) and bool(metrics.get("error"))
    source = metrics.get("summary_source") if isinstance(metrics, dict) else None
    found.summaries += source in ("llm", "cache", "fallback")
    found.fallbacks += source == "fallback"
    if isinstance(metrics, dict) and isinstance(metrics.get("compressed_tokens"), int) \
            and isinstance(metrics.get("original_tokens"), int) \
            and metrics["compressed_tokens"] > metrics["original_tokens"]:
        yield (f"compression made the row longer ({metrics['original_tokens']} -> "
               f"{metrics['compressed_tokens']} tokens)")
    try:
        total = rows.total(dialect, row)  # type: ignore[arg-type]
    except Exception as exc:  # a template that cannot render it
        yield f"cannot count the row: {one_line_error(exc)}"
        return
    found.over_limit += total > config.target_max_tokens
    if total > config.target_max_tokens and not flagged:
        yield (f"{total} tokens ({rows.mode}) is over the target {config.target_max_tokens} "
               "and the row is not flagged as still over the limit")
