"""What the HTML report shows, gathered in one streaming pass over a finished run (§16).

The page must stay small on runs of any size, so this keeps numbers, not rows: histogram
counts of tokens per row (before and after), of compression ratios and of fidelity, and
the timelines of the at most ``max_rows`` worst flagged rows, the ones the page lists.

Tokens per row come from each row's metrics; a row without them was left as it was
(under the target), so its turns are counted here. The token bins are fixed before the
pass from the exact maximum the metrics file records, so the counts are exact and the
memory is that of the bins; without that maximum the values go through a bounded
`Distribution` instead (exact up to its cap).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import reasons
from ..core.config import CompressionConfig
from ..core.conversation import Trajectory
from ..core.errors import RowError
from ..core.metrics import METRICS_KEY, Distribution, TrajectoryMetrics, nice_edges
from ..counting.tokens import TokenCounter
from ..dialects import row_turns
from ..dialects.base import row_id
from ..engine.replan import WhatWouldFix
from .report import FlaggedRow, RunReport, _same_metrics, output_rows
from .textfmt import clip, first_line, short_reason
from .timeline import build_timeline

DEFAULT_MAX_ROWS = 200
TOKEN_BINS = 30
UNIT_BINS = 20  # ratios and fidelity: bins of 0.05 over [0, 1]
TURN_TEXT = 100  # characters of a turn's first line kept in the page
_COUNT_BATCH_TURNS = 4096


@dataclass
class Histogram:
    """Counts in ``[edges[i], edges[i+1])``, the last bin closed; values outside go to the
    nearest end bin."""

    edges: list[float]
    counts: list[int]

    @classmethod
    def empty(cls, edges: list[float]) -> Histogram:
        return cls(edges, [0] * (len(edges) - 1))

    def add(self, value: float) -> None:
        # Bins are equal: an index computed, not searched, keeps the pass linear.
        low, high = self.edges[0], self.edges[-1]
        i = int((value - low) / (high - low) * len(self.counts)) if high > low else 0
        self.counts[min(max(i, 0), len(self.counts) - 1)] += 1

    @property
    def total(self) -> int:
        return sum(self.counts)


def unit_edges() -> list[float]:
    return [round(i / UNIT_BINS, 4) for i in range(UNIT_BINS + 1)]


@dataclass
class ShownRow:
    """One flagged row the page lists, with its timeline when its turns could be read."""

    location: str
    id: Any
    reason: str
    label: str
    code: str
    failed: bool
    before: int
    after: int
    turns_before: int
    turns_after: int
    timeline: dict[str, Any] | None = None
    note: str = ""
    detail: str = ""  # the numbers behind the reason, one line (`core.explain`)
    # `--output-mode windows` (§20): the source row's windows found in the output, in
    # order, each ``{"window", "windows", "tokens", "over", "timeline"}``
    windows: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ReportData:
    """Everything the HTML page shows; bounded by the bins and ``max_rows``."""

    output: str
    metrics: dict[str, Any] | None
    target: int
    rows: int
    compressed: int
    skipped: int
    over_limit: int
    failed: int
    tokens_before: Histogram
    tokens_after: Histogram
    over_before: int  # rows over the target before compression, as counted in the pass
    over_after: int
    ratios: Histogram
    fidelity: Histogram | None
    sources: dict[str, int]
    flagged_total: int
    shown: list[ShownRow]
    notes: list[str] = field(default_factory=list)
    fixes: WhatWouldFix | None = None  # what would fix the rows still over the limit
    fixes_source: str = ""  # "stored" (by compress), or why and how long it was re-planned


class _Tokens:
    """Tokens per row before and after: fixed bins when the maximum is known, else values
    in a bounded `Distribution` binned at the end."""

    def __init__(self, high: int | None, target: int) -> None:
        self.edges: list[float] | None = None
        if high is not None:
            self.edges = [float(e) for e in nice_edges(0, max(high, target, 1), TOKEN_BINS)]
            self.before, self.after = Histogram.empty(self.edges), Histogram.empty(self.edges)
        self.target = target
        self.values = (Distribution(), Distribution())
        self.over = [0, 0]  # rows over the target before, after

    def add(self, before: int, after: int) -> None:
        self.over[0] += before > self.target
        self.over[1] += after > self.target
        if self.edges is not None:
            self.before.add(before)
            self.after.add(after)
        else:
            self.values[0].add(before)
            self.values[1].add(after)

    def histograms(self) -> tuple[Histogram, Histogram]:
        if self.edges is not None:
            return self.before, self.after
        high = max(self.values[0].max or 0, self.values[1].max or 0, self.target, 1)
        edges = nice_edges(0, high, TOKEN_BINS)

        def binned(d: Distribution) -> Histogram:
            counts = d.histogram(edges) if d.count else [0] * (len(edges) - 1)
            return Histogram([float(e) for e in edges], counts)

        return binned(self.values[0]), binned(self.values[1])


def collect_report_data(report: RunReport, config: CompressionConfig, counter: TokenCounter,
                        max_rows: int = DEFAULT_MAX_ROWS) -> ReportData:
    """Read ``report``'s output once: histograms, sources, and the shown rows' timelines."""
    metrics = report.metrics or {}
    target = config.target_max_tokens
    recorded_max = ((metrics.get("distributions") or {}).get("tokens_before") or {}).get("max")
    tokens = _Tokens(recorded_max if isinstance(recorded_max, int) else None, target)
    ratios = Histogram.empty(unit_edges())
    fidelity = Histogram.empty(unit_edges())
    sources: dict[str, int] = {}
    counts = {"rows": 0, "compressed": 0, "skipped": 0, "over": 0, "failed": 0}
    shown = [_shown(f) for f in report.rows[:max_rows]]
    flagged = report.rows[:max_rows]
    # Rows the over-limit file does not hold are found in the output by id and metrics;
    # a windowed row's windows by their source id (§20).
    wanted: dict[Any, list[int]] = {}
    windows_of = {str(f.id): i for i, f in enumerate(flagged) if f.id is not None}
    for i, f in enumerate(flagged):
        if f.row is not None:
            _attach(shown[i], f.row, f.metrics, config, counter)
        else:
            wanted.setdefault(f.id, []).append(i)
    unmetered: list[Trajectory] = []
    unmetered_turns = 0
    odd_rows = 0

    def count_unmetered() -> None:
        nonlocal unmetered_turns
        for turn_tokens in counter.count_trajectories(unmetered):
            total = sum(turn_tokens)
            tokens.add(total, total)
        unmetered.clear()
        unmetered_turns = 0

    for _location, row in output_rows(report.output):
        counts["rows"] += 1
        raw = row.get(METRICS_KEY)
        m = TrajectoryMetrics.from_dict(raw) if isinstance(raw, dict) else None
        source = raw.get("source_id") if isinstance(raw, dict) and "window" in raw else None
        if source is not None and source in windows_of and isinstance(raw, dict):
            _attach_window(shown[windows_of[source]], row, raw, config, counter)
        waiting = wanted.get(row_id(row))
        if waiting:
            for k, i in enumerate(waiting):
                if _same_metrics(raw, flagged[i].metrics_dict) or (
                        raw is None and flagged[i].id is not None):
                    _attach(shown[i], row, flagged[i].metrics, config, counter)
                    del waiting[k]
                    break
        if m is None:
            counts["skipped"] += 1
            try:
                turns = row_turns(row, config)
            except RowError:
                odd_rows += 1
                continue
            unmetered.append(turns)
            unmetered_turns += len(turns)
            if unmetered_turns >= _COUNT_BATCH_TURNS:
                count_unmetered()
            continue
        tokens.add(m.original_tokens, m.compressed_tokens)
        counts["failed"] += m.failed
        counts["over"] += m.still_over_limit and not m.failed
        counts["skipped"] += m.skipped_under_target
        if m.was_compressed and not m.failed:
            counts["compressed"] += 1
            ratios.add(m.compression_ratio)
            if m.summary_source:
                sources[m.summary_source] = sources.get(m.summary_source, 0) + 1
        # Of the summaries written, as the metrics file's section: a summary refused under
        # on_low_fidelity: uncompressed keeps its record in the row but is in no row.
        ratio = _fidelity_ratio(raw)
        written = m.was_compressed and m.turns_compressed_start_idx >= 0 and not m.failed
        if ratio is not None and written:
            fidelity.add(ratio)
    count_unmetered()
    for i in (i for waiting in wanted.values() for i in waiting):
        if not shown[i].windows:
            shown[i].note = "this row was not found in the output; no timeline"
    before, after = tokens.histograms()
    summary = metrics.get("summary") or {}
    recorded_sources = (metrics.get("summarization") or {}).get("summaries_by_source")
    notes = []
    if odd_rows:
        notes.append(f"{odd_rows:,} output rows without a readable conversation are left out "
                     "of the token charts.")
    return ReportData(
        output=str(report.output), metrics=report.metrics, target=target,
        rows=summary.get("total_trajectories", counts["rows"]),
        compressed=summary.get("trajectories_compressed", counts["compressed"]),
        skipped=summary.get("trajectories_skipped_under_target", counts["skipped"]),
        over_limit=summary.get("trajectories_still_over_limit", counts["over"]),
        failed=summary.get("trajectories_failed", counts["failed"]),
        tokens_before=before, tokens_after=after, over_before=tokens.over[0],
        over_after=tokens.over[1], ratios=ratios,
        fidelity=fidelity if fidelity.total or "fidelity" in metrics else None,
        sources=recorded_sources if isinstance(recorded_sources, dict) else sources,
        flagged_total=len(report.rows), shown=shown, notes=notes, fixes=report.fixes,
        fixes_source=report.fixes_source)


def _shown(f: FlaggedRow) -> ShownRow:
    text = f.reason if isinstance(f.reason, str) else str(f.reason)
    known = reasons.reason_of(f.code or text)
    code = known.code if known is not None else ("failed" if f.failed else "")
    return ShownRow(f.short_location, f.id, text, short_reason(text), code, f.failed,
                    f.metrics.original_tokens, f.metrics.compressed_tokens,
                    f.metrics.original_turns, f.metrics.compressed_turns,
                    detail=reason_detail(code, f.numbers))


def reason_detail(code: str, numbers: dict[str, int]) -> str:
    """``code · head N · middle N · tail N · region N · summary N · target N``."""
    names = (("head_tokens", "head"), ("middle_tokens", "middle"), ("tail_tokens", "tail"),
             ("region_tokens", "region"), ("summary_tokens", "summary"),
             ("target", "target"), ("summary_target", "summary target"))
    bits = [f"{label} {numbers[key]:,}" for key, label in names
            if isinstance(numbers.get(key), int)]
    return " \u00b7 ".join([code, *bits]) if code and bits else code


def _attach_window(shown: ShownRow, row: Any, raw: dict[str, Any],
                   config: CompressionConfig, counter: TokenCounter) -> None:
    """One window of ``shown``'s source row, with its own timeline, in window order."""
    try:
        timeline = _timeline(row_turns(row, config), TrajectoryMetrics.from_dict(raw),
                             config, counter)
    except RowError:
        timeline = None
    shown.windows.append({
        "window": raw.get("window"), "windows": raw.get("windows"),
        "tokens": raw.get("compressed_tokens"), "over": raw.get("window_over") or "",
        "trained_turns": raw.get("trained_turns"), "timeline": timeline})
    shown.windows.sort(key=lambda w: w["window"] if isinstance(w["window"], int) else 0)


def _attach(shown: ShownRow, row: Any, metrics: TrajectoryMetrics, config: CompressionConfig,
            counter: TokenCounter) -> None:
    try:
        turns = row_turns(row, config)
    except RowError as exc:
        shown.note = f"its turns cannot be read: {exc.reason}"
        return
    shown.timeline = _timeline(turns, metrics, config, counter)


def _timeline(turns: Trajectory, metrics: TrajectoryMetrics, config: CompressionConfig,
              counter: TokenCounter) -> dict[str, Any]:
    timeline = build_timeline(turns, counter.count_many([t["value"] for t in turns]),
                              metrics, config)
    return {
        "target": timeline.target, "compressed": timeline.compressed,
        "total": timeline.total, "parts": timeline.tokens_by_part(),
        # [index, original start, original end, role, tokens, part, first line]
        "turns": [[t.index, t.start, t.end, t.role, t.tokens, t.part,
                   clip(first_line(t.text), TURN_TEXT)] for t in timeline.turns],
    }


def _fidelity_ratio(raw: Any) -> float | None:
    """A row's fidelity share (``fidelity.ratio``, or a bare number), if it has one."""
    value = raw.get("fidelity") if isinstance(raw, dict) else None
    if isinstance(value, dict):
        value = value.get("ratio")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
