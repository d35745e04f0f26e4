"""`validate`: check every row of a compressed output against its dialect's rules, the
target and the run's own record of what it wrote, for CI (§14).

A row passes when its dialect reads it (roles known, every tool result after the call it
answers, tool arguments that are JSON, LLaMA-Factory turns alternating), every tool call
has its result (`dialects.tool_pairs`), it holds at most one summary, it repeats no other
row, its metrics (when present) agree with it and do not say it grew, and its count in
the configured mode is within the target. A row over the target is a problem of its own
kind (``over_target``) whether or not its run flagged it: the command decides whether
that kind fails the check (``--allow-over-limit``, a ``--max-over-limit`` gate). After the
rows, the output is checked against its metrics file (`engine.committed`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig
from ..core.conversation import SUMMARY_PREFIX
from ..core.errors import one_line_error
from ..core.metrics import METRICS_KEY
from ..counting.tokens import TokenCounter
from ..dialects import detect
from ..dialects.base import row_id
from ..dialects.sharegpt import ShareGPTVariant, alternates
from ..dialects.tool_pairs import unanswered_calls
from ..engine.committed import row_count_disagreement, sidecar_disagreements
from ..engine.count import RowCounter
from ..engine.stream import RowStream
from ..formats import jsonio
from ..formats.registry import discover_inputs

# Kinds of problem, in the order the closing line names them, with their plural noun.
KINDS: dict[str, str] = {
    "over_target": "rows over the target",
    "unreadable": "unreadable rows",
    "unanswered_call": "rows with a tool call no result answers",
    "summaries": "rows with more than one summary",
    "alternation": "rows whose turns do not alternate",
    "duplicate": "duplicated rows",
    "metrics": "rows whose metrics contradict the row",
    "grew": "rows compression made longer",
    "uncountable": "rows that cannot be counted",
    "sidecar": "disagreements with the run's metrics file",
    "empty": "empty outputs",
}


@dataclass(frozen=True)
class Problem:
    """One violation: where (file and line or row), what, and of which kind (`KINDS`)."""

    location: str
    message: str
    kind: str = "row"

    def to_dict(self) -> dict[str, str]:
        return {"location": self.location, "kind": self.kind, "message": self.message}


@dataclass
class Validation:
    """What `validate_output` found: rows, problems by kind, and what the CI gates count
    (rows over the target, rows whose metrics record an error, rows it cannot read)."""

    rows: int = 0
    problems: int = 0
    over_limit: int = 0  # rows over the target
    flagged: int = 0  # of those, rows their run flagged still_over_limit
    failed: int = 0
    unreadable: int = 0
    fallbacks: int = 0  # rows whose summary is a fallback (every request failed)
    summaries: int = 0  # rows whose summary was asked of an LLM (llm, cache, fallback)
    kinds: Counter[str] = field(default_factory=Counter)

    def add(self, problem: Problem) -> Problem:
        self.problems += 1
        self.kinds[problem.kind] += 1
        return problem


@dataclass
class _Seen:
    """Rows already read, to tell a repeated one: by id, else by content."""

    ids: dict[Any, str] = field(default_factory=dict)
    digests: dict[bytes, str] = field(default_factory=dict)

    def repeat(self, row: Any, where: str) -> str | None:
        key = row_id(row)
        if key is not None:
            first = self.ids.setdefault(key, where)
            return None if first == where else f"repeats the id {key!r} of the row at {first}"
        digest = hashlib.sha256(jsonio.dumps(row)).digest()
        first = self.digests.setdefault(digest, where)
        return None if first == where else f"repeats the row at {first} (same content)"


def validate_output(output: str, config: CompressionConfig, found: Validation,
                    counter: TokenCounter | None = None, *,
                    metrics: dict[str, Any] | None = None,
                    metrics_path: Path | None = None,
                    own_counting: bool = False) -> Iterator[Problem]:
    """The problems of every row of ``output`` (a file or a folder of outputs), in order,
    then those of the output against its run's ``metrics`` (read from ``metrics_path``);
    ``found`` is filled with the counts as they go. With ``own_counting`` (the settings
    count as the run did), a row's recorded ``compressed_tokens`` must be its count."""
    counter = counter or TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    rows = RowCounter(config, counter)
    stream = RowStream(partial(detect, config=config), batch_rows=config.batch_rows)
    seen = _Seen()
    for source in discover_inputs(output):
        dialect = stream.detect(source)
        for batch in stream.batches(source):
            for entry in batch:
                found.rows += 1
                where = str(entry.record.location)
                if entry.reject is not None or entry.turns is None:
                    found.unreadable += 1
                    yield found.add(Problem(where, entry.reject or "unreadable row",
                                            "unreadable"))
                    continue
                repeat = seen.repeat(entry.record.row, where)
                if repeat is not None:
                    yield found.add(Problem(where, repeat, "duplicate"))
                for kind, message in _row_problems(entry.record.row, entry.turns, dialect,
                                                   rows, config, found, own_counting):
                    yield found.add(Problem(where, message, kind))
    if metrics is not None and metrics_path is not None:
        for message in sidecar_disagreements(Path(output), metrics, metrics_path):
            yield found.add(Problem(output, message, "sidecar"))
        if found.rows:
            count = row_count_disagreement(found.rows, metrics, metrics_path)
            if count is not None:
                yield found.add(Problem(output, count, "sidecar"))


def _summaries(turns: list) -> Iterator[str]:
    """A sentence for more than one summary in a turn, or in the row."""
    per_turn = [(i, t["value"].count(SUMMARY_PREFIX)) for i, t in enumerate(turns)]
    holding = [(i, n) for i, n in per_turn if n]
    total = sum(n for _, n in holding)
    if total <= 1:
        return
    doubled = [(i, n) for i, n in holding if n > 1]
    if doubled:
        turn, n = doubled[0]
        yield f"{total} summaries in one row, {n} of them in turn {turn} (a compressed row has one)"
    else:
        shown = ", ".join(str(i) for i, _ in holding)
        yield f"{total} summaries in one row, in turns {shown} (a compressed row has one)"


def _row_problems(row: dict, turns: list, dialect: object, rows: RowCounter,
                  config: CompressionConfig, found: Validation,
                  own_counting: bool) -> Iterator[tuple[str, str]]:
    for message in _summaries(turns):
        yield "summaries", message
    for unanswered in unanswered_calls(turns):
        yield "unanswered_call", unanswered.message()
    if isinstance(dialect, ShareGPTVariant) and not alternates(turns):
        yield ("alternation", "user-side and assistant-side turns do not alternate "
               "(LLaMA-Factory drops it)")
    metrics = row.get(METRICS_KEY)
    metrics = metrics if isinstance(metrics, dict) else None
    flagged = metrics is not None and bool(metrics.get("still_over_limit"))
    found.failed += metrics is not None and bool(metrics.get("error"))
    source = metrics.get("summary_source") if metrics is not None else None
    found.summaries += source in ("llm", "cache", "fallback")
    found.fallbacks += source == "fallback"
    if metrics is not None:
        for message in _contradictions(metrics, turns):
            yield "metrics", message
        if isinstance(metrics.get("compressed_tokens"), int) \
                and isinstance(metrics.get("original_tokens"), int) \
                and metrics["compressed_tokens"] > metrics["original_tokens"]:
            yield ("grew", f"compression made the row longer ({metrics['original_tokens']} "
                   f"-> {metrics['compressed_tokens']} tokens)")
    try:
        total = rows.total(dialect, row)  # type: ignore[arg-type]
    except Exception as exc:  # a template that cannot render it
        yield "uncountable", f"cannot count the row: {one_line_error(exc)}"
        return
    recorded = metrics.get("compressed_tokens") if metrics is not None else None
    if own_counting and isinstance(recorded, int) and not isinstance(recorded, bool) \
            and recorded != total:
        yield ("metrics", f"its metrics say {recorded:,} tokens but it counts {total:,} "
               f"({rows.mode}, as its run counted): the row was changed after its run")
    if total > config.target_max_tokens:
        found.over_limit += 1
        found.flagged += flagged
        how = ("flagged still_over_limit by the run" if flagged else
               "and its run did not flag it as still over the limit")
        yield ("over_target", f"{total:,} tokens ({rows.mode}) is over the target "
               f"{config.target_max_tokens:,}, {how}")


def _contradictions(metrics: dict[str, Any], turns: list) -> Iterator[str]:
    """Where a row's own metrics say something its turns do not show."""
    has_summary = any(SUMMARY_PREFIX in str(t.get("value", "")) for t in turns)
    # A row compressed by masking alone (§19) holds placeholders, not a summary; rows of
    # runs before strategies existed carry no strategy_used.
    summarized = "summarize" in str(metrics.get("strategy_used", "summarize"))
    if metrics.get("was_compressed") is True and summarized and not has_summary:
        yield "its metrics mark it compressed, but it holds no summary turn"
    if metrics.get("strategy_used") == "mask" and has_summary:
        yield "its metrics say it was masked only, but it holds a summary turn"
    if metrics.get("was_compressed") is False and has_summary \
            and metrics.get("skipped_under_target") is True:
        yield "its metrics mark it skipped (under the target), but it holds a summary turn"
