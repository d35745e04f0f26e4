"""Windows output (§20): summarize and assemble the windows `core.windows` planned.

Each window after the first gets one summary of the turns between the protected head and
its context, through the compressor's own summarizer path (cache, pool, fidelity bar,
repair, fallback, scrubbing), all of a row's summaries at once: every one reads the
original turns, so none waits for another (and batch export sees them all in one pass).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ..core import reasons
from ..core.assemble import base_metrics
from ..core.conversation import Row, Trajectory, call_view
from ..core.deadline import Deadline
from ..core.distill_refs import resolve_references, tool_text
from ..core.invented import SummaryCheck
from ..core.mask import Masker
from ..core.metrics import METRICS_KEY, TrajectoryMetrics
from ..core.plan import Plan
from ..core.summary import Summary, SummaryRequest, finish_summary_text
from ..core.windows import Window, WindowLimits, is_assistant, window_turns
from ..dialects.base import Dialect, row_id
from ..dialects.training import not_trained, window_id
from .chosen import Chosen, add_fidelity, add_usage, total_usage
from .summarizer_rows import summarizer_row


@dataclasses.dataclass
class Windowed:
    """A row's windows as rows, each one's metrics and the source row's; or ``failed``:
    the source row's metrics when it is written unchanged (a summary past the deadline)."""

    rows: list[Row] = dataclasses.field(default_factory=list)
    window_metrics: list[TrajectoryMetrics] = dataclasses.field(default_factory=list)
    metrics: TrajectoryMetrics = dataclasses.field(default_factory=TrajectoryMetrics)
    summarizer_rows: list[Row] = dataclasses.field(default_factory=list)
    failed: TrajectoryMetrics | None = None


# Tokens a summary message adds beyond its text under a chat template (role markers).
TEMPLATE_MARGIN = 8
# A window's summary may not run past its budget (`core.summary.bound_summary`).
WINDOW_TOLERANCE = 1.0
# A window's summary budget may be cut down to summary_target_tokens / this.
MIN_SUMMARY_SHARE = 4


def window_limits(compressor: Any, turns: Trajectory) -> WindowLimits:
    """What a window may hold: the target, and the most a summary turn adds (its largest
    accepted size, the notice on the first system turn, a chat template's markers)."""
    config = compressor.config
    extra = 0
    if config.add_summary_notice:
        system = next((t["value"] for t in turns if t.get("from") == "system"), None)
        if system is not None:
            with_notice, without = compressor.counter.count_many(
                [system + config.summary_notice_text, system])
            extra += max(with_notice - without, 0)
    if compressor.rows.template is not None:
        extra += TEMPLATE_MARGIN
    # A summary is held to its budget (`WINDOW_TOLERANCE`); cut to no less than a quarter
    # of it where only a shorter one lets a window fit.
    summary = config.summary_target_tokens
    return WindowLimits(config.target_max_tokens, summary, extra,
                        min_summary=max(1, summary // MIN_SUMMARY_SHARE))


class WindowMasks:
    """The masked text and tokens of a row's tool turns (`core.mask`'s placeholders), for
    windows that end on tool outputs and fit only with them masked; made when asked (most
    rows never ask)."""

    def __init__(self, compressor: Any, turns: Trajectory,
                 turn_tokens: list[int] | None = None) -> None:
        self._compressor = compressor
        self._turns = turns
        self._texts = [str(t.get("value", "")) for t in turns]
        self._turn_tokens = turn_tokens
        self._masker: Masker | None = None
        self._made: dict[int, str | None] = {}
        self._alone: dict[int, int] = {}

    def text(self, i: int) -> str | None:
        """Turn ``i`` with its outputs masked; None when none may be."""
        if i not in self._made:
            if self._masker is None:
                self._masker = Masker([str(t.get("from")) for t in self._turns], self._texts,
                                      self._compressor.config.mask_exclude_tools,
                                      self._compressor.counter.count_many)
            self._made[i] = self._masker.text(i, self._text_tokens(i))
        return self._made[i]

    def tokens(self, i: int) -> int | None:
        """The tokens turn ``i`` holds masked (as the plan counts turns); None: no mask."""
        masked = self.text(i)
        if masked is None or self._turn_tokens is None:
            return None
        return (self._turn_tokens[i] - self._text_tokens(i)
                + int(self._compressor.counter.count(masked)))

    def _text_tokens(self, i: int) -> int:
        """Turn ``i``'s text counted alone: its planned count, except where a chat
        template's own tokens are attributed to turns (or none was given)."""
        if self._turn_tokens is not None and self._compressor.rows.template is None:
            return self._turn_tokens[i]
        if i not in self._alone:
            self._alone[i] = int(self._compressor.counter.count(self._texts[i]))
        return self._alone[i]


@dataclasses.dataclass
class _Made:
    """One window's summary after the fidelity bar (None for window 1)."""

    summary: Summary | None
    chosen: Chosen | None
    request: SummaryRequest | None = None


async def compress_windows(compressor: Any, row: Row, turns: Trajectory,
                           plan: Plan, dialect: Dialect, origin: str | None) -> Windowed:
    """The windows of ``row`` (``plan.windows``) as rows, with their metrics; the row
    unchanged with an error when a summary runs past the per-trajectory deadline."""
    assert plan.windows is not None
    windows = plan.windows
    # Windows are planned for summaries of summary_target_tokens: a longer one is cut at
    # a sentence end to that size (or refused, and the fallback used), never let run over.
    compressor = compressor.with_config(dataclasses.replace(
        compressor.config, summary_tolerance=WINDOW_TOLERANCE))
    texts = [str(t.get("value", "")) for t in turns]
    requests: list[SummaryRequest] = []
    tasks = [asyncio.ensure_future(_summarize(compressor, turns, texts, w, origin, requests))
             for w in windows]
    try:
        made = await asyncio.gather(*tasks)
    except BaseException as exc:
        # The other windows' summaries stop with the row (none of them is written, and
        # none may go on calling the endpoint), and what each had asked is counted.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not isinstance(exc, asyncio.TimeoutError):
            raise
        metrics = base_metrics(plan, len(turns))
        add_usage(metrics, total_usage(requests))
        metrics.error = reasons.deadline_error(compressor.config.per_trajectory_timeout)
        return Windowed(failed=metrics)
    masks = WindowMasks(compressor, turns)
    masked = {i: masks.text(i) or texts[i] for w in windows for i in w.masked}
    result = _assemble(compressor, row, turns, plan, dialect,
                       list(zip(windows, made, strict=True)), masked)
    if compressor.rows.template is None and result.metrics.windowed is not None:
        # The row's assistant tokens, counted apart from the plan's sums.
        result.metrics.windowed["assistant_tokens"] = sum(compressor.counter.count_many(
            [t["value"] for t in turns if is_assistant(t)]))
    return result


async def _summarize(compressor: Any, turns: Trajectory, texts: list[str],
                     window: Window, origin: str | None,
                     requests: list[SummaryRequest]) -> _Made:
    region = window.summarized
    if region is None:
        return _Made(None, None)
    config = compressor.config
    deadline = Deadline(config.per_trajectory_timeout)
    probe = SummaryCheck(texts[:region.start], texts[region.start:region.end],
                         texts[region.end:window.train.end])
    request = SummaryRequest(
        call_view(turns[region.start:region.end]), region.start, window.requested_tokens,
        window.summarized_tokens,
        deadline, origin=None if origin is None else f"{origin} #w{window.number}",
        tail_items=tuple(probe.tail_items))
    own: list[SummaryRequest] = [request]
    try:
        chosen = await deadline.run(compressor._choose(request, probe, own))
    finally:
        requests.extend(own)
    summary = chosen.summary
    if summary is None:  # on_low_fidelity: uncompressed; a window needs a summary
        summary = await compressor._extractive.summarize(request)
        summary.text = finish_summary_text(compressor.scrubber.literal(summary.text),
                                           compressor.scrubber)
    summary.usage = chosen.usage
    return _Made(summary, chosen, request)


def _assemble(compressor: Any, row: Row, turns: Trajectory, plan: Plan,
              dialect: Dialect, made: list[tuple[Window, _Made]],
              masked: dict[int, str]) -> Windowed:
    config = compressor.config
    notice = config.summary_notice_text if config.add_summary_notice else ""
    total = plan.total_tokens
    count = len(made)
    # As text whatever the id's JSON type: one column type in every container.
    source_id = None if row_id(row) is None else str(row_id(row))
    rows: list[Row] = []
    metrics_of: list[TrajectoryMetrics] = []
    trainers: list[Row] = []
    for window, one in made:
        if (compressor.emit_summarizer_rows and one.summary is not None
                and one.request is not None):
            trainers.append(summarizer_row(one.request, one.summary.text, dialect,
                                           config.max_input_tokens, compressor.scrubber,
                                           source_id, window.number))
        text = one.summary.text if one.summary is not None else None
        new_turns, summary_at, trained = window_turns(turns, window, text, notice, masked)
        if plan.distill is not None and plan.distill.turns:
            new_turns = _resolved(turns, new_turns, window, summary_at)
        marked = [turn if keep or not is_assistant(turn)
                  else not_trained(dialect, row, turn)
                  for turn, keep in zip(new_turns, trained, strict=True)]
        new_row = dialect.with_turns(row, marked, summary_at)
        new_row.update(window_id(row, window.number))
        tokens = compressor.rows.total(dialect, new_row)
        written = len(dialect.turns(new_row))
        metrics = TrajectoryMetrics(
            original_tokens=total, compressed_tokens=tokens, tokens_saved=total - tokens,
            compression_ratio=tokens / max(total, 1), original_turns=len(turns),
            compressed_turns=written, turns_removed=len(turns) - written,
            still_over_limit=tokens > config.target_max_tokens, distill=plan.distill,
            masked_turns=len(window.masked), masked_tokens=window.masked_saving)
        if window.summarized is not None and one.summary is not None:
            metrics.was_compressed = True
            metrics.turns_compressed_start_idx = window.summarized.start
            metrics.turns_compressed_end_idx = window.summarized.end
            metrics.turns_in_compressed_region = window.summarized.turns
            metrics.summary_source = one.summary.source
            metrics.summary_truncated = one.summary.truncated
            add_usage(metrics, one.summary.usage)
            if one.chosen is not None:
                add_fidelity(metrics, one.chosen, compressor.scrubber)
        metrics.windowed = {
            "window": window.number, "windows": count,
            "trained_assistant_tokens": window.trained_assistant_tokens,
            "source_id": source_id,
            "trained_turns": {"start_idx": window.train.start, "end_idx": window.train.end},
        }
        if metrics.still_over_limit:  # why, located: planned over, or its summary ran long
            metrics.windowed["window_over"] = window.over or (
                f"{reasons.SUMMARY_OVERRAN.text}: the window holds {tokens} tokens, over "
                f"the target {config.target_max_tokens}")
        if config.metrics_per_trajectory:
            new_row[METRICS_KEY] = metrics.to_dict()
        rows.append(new_row)
        metrics_of.append(metrics)
    return Windowed(rows, metrics_of, _row_metrics(plan, len(turns), metrics_of), trainers)


def _resolved(turns: Trajectory, new_turns: Trajectory, window: Window,
              summary_at: int | None) -> Trajectory:
    """A window's turns with every distill reference resolved within the window
    (`core.distill_refs`); the window's count is taken after."""
    origin: list[int | None] = list(window.source_turns)
    if summary_at is not None:
        origin.insert(summary_at, None)
    texts = [tool_text(t) for t in new_turns]
    resolved = resolve_references([tool_text(t) for t in turns], texts, origin)
    return [turn if a == b else {**turn, "value": b}
            for turn, a, b in zip(new_turns, texts, resolved, strict=True)]


def _row_metrics(plan: Plan, turn_count: int, windows: list[TrajectoryMetrics]
                 ) -> TrajectoryMetrics:
    """The source row's metrics, for the aggregate and the over-limit file: its largest
    window as its size, every summary's usage, the weakest summary's fidelity."""
    largest = max(m.compressed_tokens for m in windows)
    summarized = [m for m in windows if m.was_compressed]
    metrics = dataclasses.replace(
        base_metrics(plan, turn_count), compressed_tokens=largest,
        tokens_saved=plan.total_tokens - largest,
        compression_ratio=largest / max(plan.total_tokens, 1),
        compressed_turns=max(m.compressed_turns for m in windows),
        was_compressed=bool(summarized), skipped_under_target=False,
        still_over_limit=any(m.still_over_limit for m in windows))
    metrics.turns_removed = turn_count - metrics.compressed_turns
    metrics.masked_turns = sum(m.masked_turns for m in windows)
    metrics.masked_tokens = sum(m.masked_tokens for m in windows)
    for m in summarized:
        metrics.summarization_api_calls += m.summarization_api_calls
        metrics.summarization_errors += m.summarization_errors
        metrics.retries += m.retries
        metrics.prompt_tokens += m.prompt_tokens
        metrics.completion_tokens += m.completion_tokens
        metrics.summary_truncated = metrics.summary_truncated or m.summary_truncated
        metrics.fidelity_repair = metrics.fidelity_repair or m.fidelity_repair
        metrics.low_fidelity = metrics.low_fidelity or m.low_fidelity
        for kind, n in m.errors_by_kind.items():
            metrics.errors_by_kind[kind] = metrics.errors_by_kind.get(kind, 0) + n
    if summarized:
        metrics.summary_source = summarized[-1].summary_source
        weakest = min(summarized, key=lambda m: m.fidelity.ratio if m.fidelity else 2.0)
        metrics.fidelity = weakest.fidelity
        first = summarized[0]
        metrics.turns_compressed_start_idx = first.turns_compressed_start_idx
        metrics.turns_compressed_end_idx = summarized[-1].turns_compressed_end_idx
        metrics.turns_in_compressed_region = (metrics.turns_compressed_end_idx
                                              - metrics.turns_compressed_start_idx)
    assistant = plan.windows or ()
    trained = sum(w.trained_assistant_tokens for w in assistant)
    by_source: dict[str, int] = {}
    for m in summarized:
        if m.summary_source is not None:
            by_source[m.summary_source] = by_source.get(m.summary_source, 0) + 1
    within = sum(m.windowed["trained_assistant_tokens"] for m in windows
                 if m.windowed is not None and not m.still_over_limit)
    metrics.windowed = {"windows": len(windows), "summaries": len(summarized),
                        "summaries_by_source": by_source,
                        "assistant_tokens": trained, "trained_assistant_tokens": trained,
                        "windows_over": sum(m.still_over_limit for m in windows),
                        "trained_within_target": within}
    return metrics

