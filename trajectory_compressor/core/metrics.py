"""Per-trajectory and aggregate metrics, with the reference's key names and order (§8)."""

from __future__ import annotations

import bisect
import dataclasses
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .distill_row import DistillStats
from .fidelity import Fidelity

SUMMARY_SOURCES = ("llm", "cache", "extractive", "fallback")

# The row key (and Parquet column) holding a row's `TrajectoryMetrics`.
METRICS_KEY = "compression_metrics"
# Fidelity ratios are kept as whole basis points in a `Distribution`.
FIDELITY_SCALE = 10_000
# The sums of per-row ratios behind the means are merged from parts (a sharded run's
# shards, a resumed run's checkpoint), and must not depend on how the rows were grouped:
# a float addition that rounds is not associative, and a mean on a rounding boundary
# would then differ between a sharded or resumed run and a one-piece run. Each ratio is
# added as a multiple of 2**-20 (within 5e-7 of it), so no addition rounds while a sum
# stays under 2**33 (exact in a double's 53 bits): the sums are the same in any order.
RATIO_QUANTUM = 2 ** 20


def _exact(ratio: float) -> float:
    """``ratio`` as the nearest multiple of 1/`RATIO_QUANTUM` (see there)."""
    return round(ratio * RATIO_QUANTUM) / RATIO_QUANTUM


# A window's `compression_metrics` keys (§20), after the others: its number, how many
# windows its row became, the assistant tokens it trains, the row's id (null without
# one), the turns of the row it trains ({start_idx, end_idx}) and, on a window over the
# target only, why (which turns, how many tokens).
WINDOW_KEYS = ("window", "windows", "trained_assistant_tokens", "source_id", "trained_turns",
               "window_over")
# What a windowed row adds to the aggregate: windows written, summaries made (and by
# source), assistant tokens of the row and those trained over its windows; its windows
# over the target, and the assistant tokens the others train (a trainer that drops rows
# over its context learns those).
WINDOWED_KEYS = ("windows", "summaries", "summaries_by_source", "assistant_tokens",
                 "trained_assistant_tokens", "windows_over", "trained_within_target")


@dataclass
class TrajectoryMetrics:
    """What happened to one trajectory."""

    original_tokens: int = 0
    compressed_tokens: int = 0
    tokens_saved: int = 0
    compression_ratio: float = 1.0
    original_turns: int = 0
    compressed_turns: int = 0
    turns_removed: int = 0
    turns_compressed_start_idx: int = -1
    turns_compressed_end_idx: int = -1
    turns_in_compressed_region: int = 0
    was_compressed: bool = False
    still_over_limit: bool = False
    skipped_under_target: bool = False
    summarization_api_calls: int = 0
    summarization_errors: int = 0
    summary_source: str | None = None
    error: str | None = None
    summary_truncated: bool = False  # the summary was cut to fit its budget
    fidelity: Fidelity | None = None  # what the summary kept of the region's facts (§15)
    fidelity_repair: bool = False  # a repair request was sent for a summary below the bar
    low_fidelity: bool = False  # below the bar after the repair: on_low_fidelity applied
    low_fidelity_reason: str = ""  # which bar it failed (min_fidelity, max_invented)
    # Tool outputs the second pass shortened (`core.elide`): {turn, tokens_before, after}.
    elisions: list[dict[str, int]] = field(default_factory=list)
    # What distilling its tool outputs did before planning (§18; `core.distill_row`).
    distill: DistillStats | None = None
    # `output.mode: windows` (§20, `core.windows`): on a window, its `WINDOW_KEYS`; on the
    # row it came from (aggregate-only), `WINDOWED_KEYS`.
    windowed: dict[str, Any] | None = None
    # What the strategy did (§19): none, mask, summarize or mask+summarize; the tool
    # turns masked and the tokens that took off; the share of the input's assistant
    # tokens still in the row.
    strategy_used: str = "none"
    masked_turns: int = 0
    masked_tokens: int = 0
    assistant_tokens_kept: float = 1.0
    # Not part of the row's `compression_metrics`: aggregate-only bookkeeping.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    assistant_tokens: int = 0  # the input's assistant tokens (for the pooled share)

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        """The `compression_metrics` object written on the row, in the reference's order."""
        d: dict[str, Any] = {
            "original_tokens": self.original_tokens,
            "compressed_tokens": self.compressed_tokens,
            "tokens_saved": self.tokens_saved,
            "compression_ratio": round(self.compression_ratio, 4),
            "original_turns": self.original_turns,
            "compressed_turns": self.compressed_turns,
            "turns_removed": self.turns_removed,
            "compression_region": {
                "start_idx": self.turns_compressed_start_idx,
                "end_idx": self.turns_compressed_end_idx,
                "turns_count": self.turns_in_compressed_region,
            },
            "was_compressed": self.was_compressed,
            "still_over_limit": self.still_over_limit,
            "skipped_under_target": self.skipped_under_target,
            "summarization_api_calls": self.summarization_api_calls,
            "summarization_errors": self.summarization_errors,
            "summary_source": self.summary_source,
        }
        if self.error is not None:
            d["error"] = self.error
        if self.summary_truncated:
            d["summary_truncated"] = True
        if self.fidelity is not None:
            d["fidelity"] = self.fidelity.to_dict()
        if self.fidelity_repair:
            d["fidelity_repair"] = True
        if self.low_fidelity:
            d["low_fidelity"] = True
            if self.low_fidelity_reason:
                d["low_fidelity_reason"] = self.low_fidelity_reason
        if self.elisions:
            d["elisions"] = [dict(e) for e in self.elisions]
        if self.distill is not None:
            d["distill"] = self.distill.to_dict()
        d.update(self.strategy_dict())
        if self.windowed is not None and "window" in self.windowed:
            d.update(self.windowed)
        return d

    def strategy_dict(self) -> dict[str, Any]:
        """The row's strategy keys (§19), written after the others."""
        return {"strategy_used": self.strategy_used, "masked_turns": self.masked_turns,
                "masked_tokens": self.masked_tokens,
                "assistant_tokens_kept": round(self.assistant_tokens_kept, 4)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrajectoryMetrics:
        """Inverse of `to_dict` (for reading a finished run back)."""
        region = d.get("compression_region") or {}
        return cls(
            original_tokens=d.get("original_tokens", 0),
            compressed_tokens=d.get("compressed_tokens", 0),
            tokens_saved=d.get("tokens_saved", 0),
            compression_ratio=d.get("compression_ratio", 1.0),
            original_turns=d.get("original_turns", 0),
            compressed_turns=d.get("compressed_turns", 0),
            turns_removed=d.get("turns_removed", 0),
            turns_compressed_start_idx=region.get("start_idx", -1),
            turns_compressed_end_idx=region.get("end_idx", -1),
            turns_in_compressed_region=region.get("turns_count", 0),
            was_compressed=d.get("was_compressed", False),
            still_over_limit=d.get("still_over_limit", False),
            skipped_under_target=d.get("skipped_under_target", False),
            summarization_api_calls=d.get("summarization_api_calls", 0),
            summarization_errors=d.get("summarization_errors", 0),
            summary_source=d.get("summary_source"),
            error=d.get("error"),
            summary_truncated=d.get("summary_truncated", False),
            fidelity=Fidelity.from_dict(d.get("fidelity")),
            fidelity_repair=bool(d.get("fidelity_repair", False)),
            low_fidelity=bool(d.get("low_fidelity", False)),
            low_fidelity_reason=str(d.get("low_fidelity_reason") or ""),
            elisions=[dict(e) for e in d.get("elisions") or [] if isinstance(e, dict)],
            distill=DistillStats.from_dict(d.get("distill")),
            windowed={k: d[k] for k in WINDOW_KEYS if k in d} or None,
            strategy_used=str(d.get("strategy_used") or _strategy_of(d)),
            masked_turns=_count(d.get("masked_turns")),
            masked_tokens=_count(d.get("masked_tokens")),
            assistant_tokens_kept=_share(d.get("assistant_tokens_kept")),
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _share(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    return float(value) if ok else 1.0


def _strategy_of(d: dict[str, Any]) -> str:
    """What a row written before strategies existed had done: a summary or nothing."""
    region = d.get("compression_region")
    start = region.get("start_idx") if isinstance(region, dict) else None
    summarized = isinstance(start, int) and start >= 0
    return "summarize" if d.get("was_compressed") and summarized else "none"


class Distribution:
    """Min/median/p90/p99/max of integer values: exact up to a cap, then log buckets (±1%).

    Memory stays bounded on datasets of any size.
    """

    EXACT_CAP = 200_000
    _BASE = math.log(1.01)

    def __init__(self) -> None:
        self.count = 0
        self.min: int | None = None
        self.max: int | None = None
        self._exact: array[int] | None = array("q")
        self._buckets: dict[int, int] = {}

    def add(self, value: int) -> None:
        self.count += 1
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)
        if self._exact is not None:
            self._exact.append(value)
            if len(self._exact) > self.EXACT_CAP:
                for v in self._exact:
                    self._bucket_add(v)
                self._exact = None
        else:
            self._bucket_add(value)

    def _bucket_add(self, value: int) -> None:
        key = -1 if value <= 0 else int(math.log(value) / self._BASE)
        self._buckets[key] = self._buckets.get(key, 0) + 1

    def quantile(self, q: float) -> int | None:
        """The value at rank ``ceil(q * count)`` (nearest-rank; past the values held: max)."""
        if self.count == 0:
            return None
        rank = max(1, math.ceil(q * self.count))
        if self._exact is not None:
            return sorted(self._exact)[rank - 1]
        seen = 0
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen >= rank:
                value = 0 if key < 0 else round(math.exp((key + 0.5) * self._BASE))
                assert self.min is not None and self.max is not None
                return min(max(value, self.min), self.max)
        return self.max

    def summary(self) -> dict[str, int | None]:
        return {"min": self.min, "median": self.quantile(0.5), "p90": self.quantile(0.9),
                "p99": self.quantile(0.99), "max": self.max}

    def histogram(self, edges: list[int]) -> list[int]:
        """Counts in ``[edges[i], edges[i+1])`` (the last bin closed); ±1% past the cap."""
        if self._exact is not None:
            return histogram(sorted(self._exact), edges)
        assert self.min is not None and self.max is not None
        counts = [0] * (len(edges) - 1)
        for key, n in self._buckets.items():
            value = 0 if key < 0 else round(math.exp((key + 0.5) * self._BASE))
            value = min(max(value, self.min), self.max)
            i = bisect.bisect_right(edges, value) - 1
            if 0 <= i < len(counts):
                counts[i] += n
            elif value == edges[-1]:
                counts[-1] += n
        return counts

    def merge(self, other: Distribution) -> None:
        """Add every value ``other`` holds (exactly while both are exact and under the cap)."""
        if other.count == 0:
            return
        if other._exact is not None:
            for value in other._exact:
                self.add(value)
            return
        if self._exact is not None:
            for value in self._exact:
                self._bucket_add(value)
            self._exact = None
        for key, n in other._buckets.items():
            self._buckets[key] = self._buckets.get(key, 0) + n
        self.count += other.count
        assert other.min is not None and other.max is not None
        self.min = other.min if self.min is None else min(self.min, other.min)
        self.max = other.max if self.max is None else max(self.max, other.max)

    def state(self) -> dict[str, Any]:
        """A JSON-able snapshot (for resume checkpoints)."""
        return {"count": self.count, "min": self.min, "max": self.max,
                "exact": None if self._exact is None else list(self._exact),
                "buckets": {str(k): v for k, v in self._buckets.items()}}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Distribution:
        d = cls()
        d.count, d.min, d.max = state["count"], state["min"], state["max"]
        d._exact = None if state["exact"] is None else array("q", state["exact"])
        d._buckets = {int(k): v for k, v in state["buckets"].items()}
        return d


def histogram(values_sorted: list[int], edges: list[int]) -> list[int]:
    """Counts of sorted values in ``[edges[i], edges[i+1])`` (the last bin is closed)."""
    counts = []
    for i in range(len(edges) - 1):
        lo = bisect.bisect_left(values_sorted, edges[i])
        last = i == len(edges) - 2
        hi = (bisect.bisect_right if last else bisect.bisect_left)(values_sorted, edges[i + 1])
        counts.append(hi - lo)
    return counts


@dataclass
class AggregateMetrics:
    """Totals over a run; `to_dict` gives the `_metrics.json` sections."""

    total_trajectories: int = 0
    trajectories_compressed: int = 0
    trajectories_skipped_under_target: int = 0
    trajectories_still_over_limit: int = 0
    trajectories_failed: int = 0
    rows_rejected: int = 0
    total_tokens_before: int = 0
    total_tokens_after: int = 0
    total_tokens_saved: int = 0
    total_turns_before: int = 0
    total_turns_after: int = 0
    total_turns_removed: int = 0
    total_summarization_calls: int = 0
    total_summarization_errors: int = 0
    total_retries: int = 0
    summaries_by_source: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(SUMMARY_SOURCES, 0)
    )
    summaries_truncated: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ratio_sum: float = 0.0
    saved_sum: int = 0
    removed_sum: int = 0
    tokens_before: Distribution = field(default_factory=Distribution)
    tokens_after: Distribution = field(default_factory=Distribution)
    # Fidelity of the summaries written (§15): per-row ratios in basis points, their sums
    # for the means, the pooled item counts, and the rows the bar acted on.
    fidelity_ratios: Distribution = field(default_factory=Distribution)
    fidelity_ratio_sum: float = 0.0
    fidelity_tail_rows: int = 0
    fidelity_tail_ratio_sum: float = 0.0
    fidelity_items: int = 0
    fidelity_kept: int = 0
    fidelity_tail_items: int = 0
    fidelity_tail_kept: int = 0
    fidelity_repairs: int = 0
    low_fidelity_rows: int = 0
    # Written summaries stating facts their row does not (issue 23), and the sum of the
    # summarizers' own recall (no references line) for its mean.
    invented_rows: int = 0
    invented_items: int = 0
    model_ratio_sum: float = 0.0
    # Still-over-limit and failed rows by reason code (`core.reasons`), and the second
    # pass's work (`over_limit_strategy: elide_tool_outputs`).
    reasons: dict[str, int] = field(default_factory=dict)
    rows_elided: int = 0
    tool_outputs_elided: int = 0
    tokens_elided: int = 0
    # Distill (§18): rows and tool turns it changed, their tokens, tokens saved by rule.
    distill_rows: int = 0
    distill_turns: int = 0
    distill_tokens_before: int = 0
    distill_tokens_after: int = 0
    distill_saved_by_rule: dict[str, int] = field(default_factory=dict)
    distill_verify_failed: int = 0  # rows written undistilled by --verify-distill
    # Windows output (§20): rows made windows, windows written, summaries made, and the
    # assistant tokens of those rows and trained over their windows.
    windowed_rows: int = 0
    windows_written: int = 0
    window_summaries: int = 0
    window_assistant_tokens: int = 0
    window_trained_tokens: int = 0
    windows_over: int = 0
    window_trained_within: int = 0
    # Strategies (§19), over the rows that were over the target: rows by what was done,
    # the masking, and the assistant tokens of the input and of the rows as written.
    rows_by_strategy: dict[str, int] = field(default_factory=dict)
    masked_rows: int = 0
    masked_turns: int = 0
    masked_tokens: int = 0
    assistant_tokens_before: int = 0
    assistant_tokens_after: int = 0
    processing_start_time: str = ""
    processing_end_time: str = ""
    processing_duration_seconds: float = 0.0

    def add(self, m: TrajectoryMetrics, reason: str | None = None) -> None:
        """Fold one trajectory's metrics, and the code of its reason (if it is still over
        the limit or failed), into the totals."""
        if reason:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if m.elisions:
            self.rows_elided += 1
            self.tool_outputs_elided += len(m.elisions)
            self.tokens_elided += sum(e["tokens_before"] - e["tokens_after"]
                                      for e in m.elisions)
        self.total_trajectories += 1
        self.total_tokens_before += m.original_tokens
        self.total_tokens_after += m.compressed_tokens
        self.total_tokens_saved += m.tokens_saved
        self.total_turns_before += m.original_turns
        self.total_turns_after += m.compressed_turns
        self.total_turns_removed += m.turns_removed
        self.total_summarization_calls += m.summarization_api_calls
        self.total_summarization_errors += m.summarization_errors
        self.total_retries += m.retries
        self.prompt_tokens += m.prompt_tokens
        self.completion_tokens += m.completion_tokens
        made = (m.windowed or {}).get("summaries_by_source")
        if made is not None and "window" not in (m.windowed or {}):
            for source, n in made.items():  # a windowed row: one summary per window (§20)
                self.summaries_by_source[source] = self.summaries_by_source.get(source, 0) + n
        elif m.summary_source in self.summaries_by_source:
            self.summaries_by_source[m.summary_source] += 1
        self.summaries_truncated += m.summary_truncated
        for kind, n in m.errors_by_kind.items():
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + n
        if m.was_compressed:
            self.trajectories_compressed += 1
            self.ratio_sum += _exact(m.compression_ratio)
            self.saved_sum += m.tokens_saved
            self.removed_sum += m.turns_removed
        self.trajectories_skipped_under_target += m.skipped_under_target
        self.trajectories_still_over_limit += m.still_over_limit
        self.trajectories_failed += m.failed
        self.tokens_before.add(m.original_tokens)
        self.tokens_after.add(m.compressed_tokens)
        if m.distill is not None and m.distill.verify_failed:
            self.distill_verify_failed += 1
        if m.distill is not None and m.distill.turns:
            self.distill_rows += 1
            self.distill_turns += m.distill.turns
            self.distill_tokens_before += m.distill.tokens_before
            self.distill_tokens_after += m.distill.tokens_after
            for rule, saving in m.distill.rules.items():
                self.distill_saved_by_rule[rule] = (self.distill_saved_by_rule.get(rule, 0)
                                                    + saving.tokens_before - saving.tokens_after)
        if m.windowed is not None and "window" not in m.windowed:
            self.windowed_rows += 1
            self.windows_written += m.windowed["windows"]
            self.window_summaries += m.windowed["summaries"]
            self.window_assistant_tokens += m.windowed["assistant_tokens"]
            self.window_trained_tokens += m.windowed["trained_assistant_tokens"]
            self.windows_over += m.windowed.get("windows_over", 0)
            self.window_trained_within += m.windowed.get(
                "trained_within_target", m.windowed["trained_assistant_tokens"])
        self._add_strategy(m)
        self.fidelity_repairs += m.fidelity_repair
        self.low_fidelity_rows += m.low_fidelity
        f = m.fidelity
        # The section is of the summaries written: a refused one (on_low_fidelity:
        # uncompressed) stays out, even when the second pass then brought its row under.
        written = m.was_compressed and m.turns_compressed_start_idx >= 0
        if f is not None and written and not m.failed:
            self.fidelity_ratios.add(round(f.ratio * FIDELITY_SCALE))
            self.fidelity_ratio_sum += _exact(f.ratio)
            self.fidelity_items += f.items
            self.fidelity_kept += f.kept
            self.fidelity_tail_items += f.tail_items
            self.fidelity_tail_kept += f.tail_kept
            self.invented_rows += f.invented > 0
            self.invented_items += f.invented
            self.model_ratio_sum += _exact(f.model_ratio)
            if f.tail_items:
                self.fidelity_tail_rows += 1
                self.fidelity_tail_ratio_sum += _exact(f.tail_kept / f.tail_items)

    def _add_strategy(self, m: TrajectoryMetrics) -> None:
        if m.skipped_under_target:
            return
        used = m.strategy_used
        self.rows_by_strategy[used] = self.rows_by_strategy.get(used, 0) + 1
        self.masked_rows += m.masked_turns > 0
        self.masked_turns += m.masked_turns
        self.masked_tokens += m.masked_tokens
        self.assistant_tokens_before += m.assistant_tokens
        self.assistant_tokens_after += round(m.assistant_tokens * m.assistant_tokens_kept)

    def strategy_summary(self) -> dict[str, Any]:
        """The metrics file's ``strategy`` section (§19): rows over the target by what was
        done to them, the masking, and the share of their assistant tokens kept."""
        before = self.assistant_tokens_before
        return {
            "rows_by_strategy": dict(sorted(self.rows_by_strategy.items())),
            "masked_rows": self.masked_rows,
            "masked_turns": self.masked_turns,
            "masked_tokens": self.masked_tokens,
            "assistant_tokens_before": before,
            "assistant_tokens_after": self.assistant_tokens_after,
            "assistant_tokens_kept": round(self.assistant_tokens_after / before, 4)
            if before else 1.0,
        }

    def merge(self, other: AggregateMetrics) -> None:
        """Add ``other``'s totals (a shard or a file of the same run) to these.

        Counters and distributions add up; the processing times stay this object's.
        """
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, Distribution):
                mine.merge(theirs)
            elif isinstance(mine, dict):
                for key, n in theirs.items():
                    mine[key] = mine.get(key, 0) + n
            elif isinstance(mine, (int, float)) and f.name != "processing_duration_seconds":
                setattr(self, f.name, mine + theirs)

    def to_dict(self) -> dict[str, Any]:
        """The aggregate metrics file: the reference's sections, then this project's."""
        total = self.total_trajectories
        compressed = self.trajectories_compressed
        calls = self.total_summarization_calls
        return {
            "summary": {
                "total_trajectories": total,
                "trajectories_compressed": compressed,
                "trajectories_skipped_under_target": self.trajectories_skipped_under_target,
                "trajectories_still_over_limit": self.trajectories_still_over_limit,
                "trajectories_failed": self.trajectories_failed,
                "compression_rate": round(compressed / max(total, 1), 4),
                "rows_rejected": self.rows_rejected,
            },
            "tokens": {
                "total_before": self.total_tokens_before,
                "total_after": self.total_tokens_after,
                "total_saved": self.total_tokens_saved,
                "overall_compression_ratio": round(
                    self.total_tokens_after / max(self.total_tokens_before, 1), 4
                ),
            },
            "turns": {
                "total_before": self.total_turns_before,
                "total_after": self.total_turns_after,
                "total_removed": self.total_turns_removed,
            },
            "averages": {
                "avg_compression_ratio": round(self.ratio_sum / compressed, 4) if compressed
                else 1.0,
                "avg_tokens_saved_per_compressed": round(self.saved_sum / compressed, 1)
                if compressed else 0,
                "avg_turns_removed_per_compressed": round(self.removed_sum / compressed, 2)
                if compressed else 0,
            },
            "summarization": {
                "total_api_calls": calls,
                "total_errors": self.total_summarization_errors,
                "success_rate": round(1 - self.total_summarization_errors / max(calls, 1), 4),
                "retries": self.total_retries,
                "summaries_by_source": dict(self.summaries_by_source),
                "summaries_truncated": self.summaries_truncated,
                "errors_by_kind": dict(sorted(self.errors_by_kind.items())),
            },
            "processing": {
                "start_time": self.processing_start_time,
                "end_time": self.processing_end_time,
                "duration_seconds": round(self.processing_duration_seconds, 2),
            },
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            },
            "distributions": {
                "tokens_before": self.tokens_before.summary(),
                "tokens_after": self.tokens_after.summary(),
            },
            **({"fidelity": self.fidelity_summary()} if self.fidelity_ratios.count
               or self.fidelity_repairs or self.low_fidelity_rows else {}),
            "over_limit": {
                "reasons": dict(sorted(self.reasons.items())),
                "rows_elided": self.rows_elided,
                "tool_outputs_elided": self.tool_outputs_elided,
                "tokens_elided": self.tokens_elided,
            },
            **({"distill": self.distill_summary()}
               if self.distill_rows or self.distill_verify_failed else {}),
            "strategy": self.strategy_summary(),
            **({"windows": self.windows_summary()} if self.windowed_rows else {}),
        }

    @property
    def rows_out(self) -> int:
        """Rows written for the rows read: each windowed row's windows (§20), one row for
        every other."""
        return self.total_trajectories - self.windowed_rows + self.windows_written

    def windows_summary(self) -> dict[str, Any]:
        """The metrics file's ``windows`` section (§20): rows in and out, windows and
        summaries made, and the share of the windowed rows' assistant tokens trained."""
        rows_out = self.rows_out
        return {
            "windowed_rows": self.windowed_rows,
            "windows": self.windows_written,
            "rows_out": rows_out,
            "summaries": self.window_summaries,
            "assistant_tokens": self.window_assistant_tokens,
            "trained_assistant_tokens": self.window_trained_tokens,
            "trained_share": round(self.window_trained_tokens
                                   / max(self.window_assistant_tokens, 1), 4),
            "windows_over": self.windows_over,
            "trained_within_target": self.window_trained_within,
            "trained_within_target_share": round(self.window_trained_within
                                                 / max(self.window_assistant_tokens, 1), 4),
        }

    def distill_summary(self) -> dict[str, Any]:
        """The metrics file's ``distill`` section (§18): the tool turns distilling changed,
        their tokens before and after, and the tokens each rule saved."""
        return {
            "rows": self.distill_rows,
            "turns": self.distill_turns,
            "tokens_before": self.distill_tokens_before,
            "tokens_after": self.distill_tokens_after,
            "tokens_saved": self.distill_tokens_before - self.distill_tokens_after,
            "saved_by_rule": dict(sorted(self.distill_saved_by_rule.items())),
            **({"verify_failed_rows": self.distill_verify_failed}
               if self.distill_verify_failed else {}),
        }

    def fidelity_summary(self) -> dict[str, Any]:
        """The metrics file's ``fidelity`` section: the distribution of the written
        summaries' ratios (nearest-rank quantiles; ±1% past `Distribution.EXACT_CAP`
        rows), the item counts pooled over rows, and the rows the bar acted on."""
        d = self.fidelity_ratios
        n = d.count

        def share(value: int | None) -> float | None:
            return None if value is None else round(value / FIDELITY_SCALE, 4)

        tail = self.fidelity_tail_rows
        return {
            "count": n,
            "mean_ratio": round(self.fidelity_ratio_sum / n, 4) if n else None,
            "min_ratio": share(d.min),
            "p10_ratio": share(d.quantile(0.1)),
            "median_ratio": share(d.quantile(0.5)),
            "tail_rows": tail,
            "mean_tail_ratio": round(self.fidelity_tail_ratio_sum / tail, 4) if tail else None,
            "items": self.fidelity_items,
            "kept": self.fidelity_kept,
            "tail_items": self.fidelity_tail_items,
            "tail_kept": self.fidelity_tail_kept,
            "repair_requests": self.fidelity_repairs,
            "low_fidelity_rows": self.low_fidelity_rows,
            "mean_model_ratio": round(self.model_ratio_sum / n, 4) if n else None,
            "invented_rows": self.invented_rows,
            "invented_share": round(self.invented_rows / n, 4) if n else None,
            "invented_items": self.invented_items,
        }


def aggregate_state(metrics: AggregateMetrics) -> dict[str, Any]:
    """A JSON-able snapshot of ``metrics`` (for resume checkpoints)."""
    state: dict[str, Any] = {}
    for name in AggregateMetrics.__dataclass_fields__:
        value = getattr(metrics, name)
        if isinstance(value, Distribution):
            value = value.state()
        elif isinstance(value, dict):
            value = dict(value)
        state[name] = value
    return state


def aggregate_from_state(state: dict[str, Any]) -> AggregateMetrics:
    """Inverse of `aggregate_state`."""
    metrics = AggregateMetrics()
    for name in AggregateMetrics.__dataclass_fields__:
        if name not in state:
            continue
        value = state[name]
        if isinstance(getattr(metrics, name), Distribution):
            value = Distribution.from_state(value)
        setattr(metrics, name, value)
    return metrics


def nice_edges(low: int, high: int, bins: int = 10) -> list[int]:
    """Round bin edges covering ``[low, high]`` in at most ``bins`` equal steps."""
    if high <= low:
        return [low, low + 1]
    raw = (high - low) / bins
    magnitude = 10 ** math.floor(math.log10(raw))
    # Under a step of 1 (more bins than units) no candidate is a whole number: 1.
    step = next((int(m * magnitude) for m in (1, 2, 2.5, 5, 10)
                 if m * magnitude >= raw and float(m * magnitude).is_integer()), 1)
    edges = [low // step * step]
    while edges[-1] < high:
        edges.append(edges[-1] + step)
    return edges


def bin_of(edges: Sequence[int], value: int) -> int | None:
    """The index of the bin holding ``value`` (the last bin is closed), or None."""
    for i in range(len(edges) - 1):
        last = i == len(edges) - 2
        if edges[i] <= value < edges[i + 1] or (last and value == edges[i + 1]):
            return i
    return None
