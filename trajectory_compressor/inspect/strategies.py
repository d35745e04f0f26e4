"""`analyze`'s side-by-side of the strategies (§19): what summarize, mask and hybrid would
each make of the rows over one target.

Each strategy's rows go through the very `TrajectoryCompressor` `compress` uses, with
the extractive summarizer (exact: the summaries are built) or, for an LLM backend, with
summaries projected at ``summary_target_tokens`` (`engine.projection.outcome`). Per
strategy: the rows it brings under the target, the rows it leaves over, the summaries it
makes (one LLM call each with an LLM summarizer; repair requests not counted), the
tokens of the rows after, and the share of their assistant tokens still in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.config import STRATEGIES
from ..core.counted import counted
from ..core.extractive import ExtractiveSummarizer
from ..engine.compressor import TrajectoryCompressor
from ..engine.projection import CountedRow, outcome


@dataclass
class StrategyFigures:
    """What one strategy makes of the rows over the target."""

    rows: int = 0  # rows over the target as read
    under: int = 0  # of them, under it after
    summaries: int = 0  # rows that get a summary (an LLM call each)
    tokens_before: int = 0
    tokens_after: int = 0
    assistant_before: int = 0
    assistant_after: int = 0

    @property
    def still_over(self) -> int:
        return self.rows - self.under

    @property
    def assistant_kept(self) -> float:
        """The share of the rows' assistant tokens still in them (1 with none)."""
        return self.assistant_after / self.assistant_before if self.assistant_before else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"rows_over_before": self.rows, "rows_under_after": self.under,
                "rows_still_over": self.still_over, "summaries": self.summaries,
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
                "assistant_tokens_before": self.assistant_before,
                "assistant_tokens_after": self.assistant_after,
                "assistant_tokens_kept": round(self.assistant_kept, 4)}


@dataclass
class StrategyComparison:
    """Summarize, mask and hybrid side by side at one target."""

    exact: bool
    figures: dict[str, StrategyFigures] = field(
        default_factory=lambda: {s: StrategyFigures() for s in STRATEGIES})
    _compressors: dict[str, TrajectoryCompressor] = field(default_factory=dict, repr=False)

    async def add(self, base: TrajectoryCompressor, row: CountedRow) -> None:
        """Each strategy's outcome for ``row`` (nothing for a row under the target, nor in
        windows output, which takes strategy summarize only)."""
        if row.total <= base.config.target_max_tokens or base.config.output_mode == "windows":
            return
        for strategy in STRATEGIES:
            compressor = self._compressor(base, strategy)
            result = await outcome(compressor, row, exact=self.exact)
            m = result.metrics
            f = self.figures[strategy]
            f.rows += 1
            f.under += not m.still_over_limit and not m.failed
            f.summaries += m.turns_compressed_start_idx >= 0
            f.tokens_before += m.original_tokens
            f.tokens_after += m.compressed_tokens
            f.assistant_before += m.assistant_tokens
            f.assistant_after += round(m.assistant_tokens * m.assistant_tokens_kept)

    def _compressor(self, base: TrajectoryCompressor, strategy: str) -> TrajectoryCompressor:
        if strategy not in self._compressors:
            compressor = base.with_config(base.config.replace(strategy=strategy))
            # Its own extractive summarizer: `analyze` times the configured one.
            compressor.summarizer = ExtractiveSummarizer(base.counter.count)
            self._compressors[strategy] = compressor
        return self._compressors[strategy]

    @property
    def rows(self) -> int:
        return self.figures[STRATEGIES[0]].rows

    def best(self) -> str | None:
        """The strategy that keeps the most training signal at the fewest calls: of those
        leaving the fewest rows over, the one keeping the largest share of assistant
        tokens, then the one making the fewest summaries (None: no row over)."""
        if not self.rows:
            return None
        fewest = min(f.still_over for f in self.figures.values())
        tied = [s for s in STRATEGIES if self.figures[s].still_over == fewest]
        return max(tied, key=lambda s: (round(self.figures[s].assistant_kept, 4),
                                        -self.figures[s].summaries))

    def verdict(self) -> str:
        """One sentence naming `best` and what it keeps, against the others."""
        best = self.best()
        if best is None:
            return "no row is over the target: no strategy has anything to do"
        f = self.figures[best]
        others = "; ".join(
            f"{s}: {self.figures[s].assistant_kept:.0%}, "
            f"{counted(self.figures[s].summaries, 'summary', 'summaries')}, "
            f"{self.figures[s].still_over:,} over"
            for s in STRATEGIES if s != best)
        return (f"{best} keeps the most training signal at the fewest calls: "
                f"{f.assistant_kept:.0%} of the assistant tokens, "
                f"{counted(f.summaries, 'summary', 'summaries')}, "
                f"{counted(f.still_over, 'row')} still over ({others})")

    def to_dict(self) -> dict[str, Any]:
        return {"rows_over": self.rows, "best": self.best(),
                **{s: self.figures[s].to_dict() for s in STRATEGIES}}
