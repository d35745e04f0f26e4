"""The progress bar: rows done with live counters; silent when not a TTY or with --quiet."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ..core.metrics import AggregateMetrics, TrajectoryMetrics
from ..core.terminal import inert


class Progress:
    """A tqdm bar over rows with counters for compressed/skipped/over-limit/failed rows."""

    REFRESH_SECONDS = 0.25

    def __init__(self, quiet: bool = False,
                 total: int | Callable[[], int | None] | None = None) -> None:
        """``total``: the rows to expect, or what counts them (called only when the bar is
        shown: counting a big .json array takes seconds a quiet run need not spend)."""
        self.counters = {"compressed": 0, "skipped": 0, "over_limit": 0, "failed": 0,
                         "rejected": 0, "api_calls": 0, "in_flight": 0}
        self._bar: Any = None
        self._live = False
        self._last = 0.0
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            # tqdm hides its bar in a terminal that reports no size (some ptys, CI
            # consoles); such a terminal gets 80 columns and 24 lines.
            try:
                sized = os.get_terminal_size(sys.stderr.fileno()).columns > 0
            except OSError:
                sized = False
            if callable(total):
                total = total()
            self._bar = tqdm(total=total, unit="row", file=sys.stderr, dynamic_ncols=sized,
                             ncols=None if sized else 80, nrows=None if sized else 24)

    def row(self, metrics: TrajectoryMetrics) -> None:
        c = self.counters
        c["compressed"] += metrics.was_compressed
        c["skipped"] += metrics.skipped_under_target
        c["over_limit"] += metrics.still_over_limit
        c["failed"] += metrics.failed
        if not self._live:
            c["api_calls"] += metrics.summarization_api_calls
        if self._bar is not None:
            self._bar.update(1)
            self._refresh()

    def restore(self, metrics: AggregateMetrics) -> None:
        """Start from the counts of an interrupted run being resumed."""
        c = self.counters
        c["compressed"] = metrics.trajectories_compressed
        c["skipped"] = metrics.trajectories_skipped_under_target
        c["over_limit"] = metrics.trajectories_still_over_limit
        c["failed"] = metrics.trajectories_failed
        c["rejected"] = metrics.rows_rejected
        c["api_calls"] = metrics.total_summarization_calls
        if self._bar is not None:
            self._bar.update(metrics.total_trajectories + metrics.rows_rejected)
            self._bar.set_postfix(c, refresh=False)

    def rejected(self) -> None:
        self.counters["rejected"] += 1
        if self._bar is not None:
            self._bar.update(1)
            self._refresh()

    def in_flight(self, n: int) -> None:
        self.counters["in_flight"] = n

    def live(self, counters: dict[str, int]) -> None:
        """Counters straight from the summarizer (they replace the per-row sums)."""
        if counters:
            self._live = True
            self.counters.update(counters)

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._last >= self.REFRESH_SECONDS:
            self._last = now
            self._bar.set_postfix(self.counters, refresh=False)

    def write(self, message: str) -> None:
        """A line on stderr that does not break the bar."""
        if self._bar is not None:
            self._bar.write(inert(message), file=sys.stderr)
        else:
            print(inert(message), file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix(self.counters, refresh=False)
            self._bar.close()
            self._bar = None
