"""CI gates (§16): fail a build when too many rows are over the limit, failed or rejected.

``--max-over-limit``, ``--max-failed`` and ``--max-rejected`` take a number of rows
(``7``) or a share (``1%``, ``0.5%``). A gate fails when the count is greater than the
number, or its share greater than the percentage, of:

- the rows compressed, skipped, over the limit or failed (the run's
  ``total_trajectories``) for over-limit and failed rows (a failed row is written
  unchanged, hence also over the limit, and counts in both);
- every row read (those plus the rejected ones) for rejected rows;
- the summaries asked of the LLM (those it wrote, those from the cache, the fallbacks)
  for ``--max-fallback-share`` (also ``summarization.max_fallback_share``): the
  extractive fallbacks a failing endpoint leaves behind.

The command still writes everything; then one line per failed gate goes to stderr
(``gate failed: over-limit rows 7 (3.5%) > 1%``) and the exit code is `GATE_EXIT`, which
wins over 1 (rows failed or rejected): a pipeline tells "over a gate" from "some rows
failed but within the gates".
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from ..core.config import GATE_VALUE
from ..core.errors import ConfigError
from ..core.terminal import inert

GATE_EXIT = 3
# The summary sources of the summaries asked of an LLM (`core.metrics.SUMMARY_SOURCES`;
# ``extractive`` is the extractive summarizer's, or a policy's choice).
LLM_SOURCES = ("llm", "cache", "fallback")
PANEL = "CI gates (exit code 3 when exceeded; N rows or P% of the rows)"

MaxOverLimitOpt = Annotated[
    Optional[str],  # noqa: UP045 - typer needs Optional on 3.10
    typer.Option("--max-over-limit", metavar="N|P%", rich_help_panel=PANEL,
                 help="Most rows still over the target (failed rows included), e.g. 0, 25 "
                 "or 1%."),
]
MaxFailedOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--max-failed", metavar="N|P%", rich_help_panel=PANEL,
                 help="Most rows whose compression failed (written unchanged)."),
]
MaxFallbackShareOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--max-fallback-share", metavar="N|P%", rich_help_panel=PANEL,
                 help="Most summaries that are extractive fallbacks because every request "
                 "for them failed, e.g. 0 or 5% (a share of the summaries asked of the "
                 "LLM; YAML summarization.max_fallback_share)."),
]
MaxRejectedOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--max-rejected", metavar="N|P%", rich_help_panel=PANEL,
                 help="Most rows rejected as unreadable (a share of every row read)."),
]

_VALUE = GATE_VALUE


@dataclass(frozen=True)
class Gate:
    """One limit: on which count (``over_limit``, ``failed``, ``rejected``,
    ``fallback_share``), a number of rows (summaries) or a percentage."""

    what: str
    limit: float
    percent: bool

    @property
    def flag(self) -> str:
        return "--max-" + self.what.replace("_", "-")

    @property
    def shown_limit(self) -> str:
        value = f"{self.limit:g}"
        return value + "%" if self.percent else value

    @property
    def noun(self) -> str:
        return {"over_limit": "over-limit rows", "failed": "failed rows",
                "rejected": "rejected rows", "fallback_share": "fallback summaries"}[self.what]


@dataclass(frozen=True)
class Counts:
    """What the gates look at: the flagged rows and the totals their shares are of."""

    rows: int  # rows compressed, skipped, over the limit or failed
    over_limit: int
    failed: int
    rejected: int
    fallbacks: int = 0  # summaries that are fallbacks: every request for them failed
    summaries: int = 0  # summaries asked of the LLM: written by it, cached, fallbacks

    def of(self, what: str) -> tuple[int, int]:
        """``(count, total it is a share of)`` for one gate."""
        if what == "fallback_share":
            return self.fallbacks, self.summaries
        if what == "rejected":
            return self.rejected, self.rows + self.rejected
        return (self.over_limit if what == "over_limit" else self.failed), self.rows


@dataclass(frozen=True)
class GateResult:
    """One gate against one run."""

    gate: Gate
    count: int
    total: int

    @property
    def share(self) -> float:
        """The count as a percentage of its total (0 when there are no rows)."""
        return 100 * self.count / self.total if self.total else 0.0

    @property
    def passed(self) -> bool:
        return (self.share <= self.gate.limit if self.gate.percent
                else self.count <= self.gate.limit)

    def line(self) -> str:
        """``gate failed: over-limit rows 7 (3.5%) > 1%``."""
        return (f"gate failed: {self.gate.noun} {self.count:,} ({_percent(self.share)}) > "
                f"{self.gate.shown_limit}")

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate.flag.lstrip("-"), "limit": self.gate.shown_limit,
                "count": self.count, "total": self.total,
                "share_percent": round(self.share, 4), "passed": self.passed}


def parse_gate(what: str, value: str) -> Gate:
    """``N`` or ``P%`` for the gate on ``what``; `ConfigError` (exit 2) otherwise."""
    gate = Gate(what, 0, False)
    match = _VALUE.fullmatch(value)
    if match is None:
        raise ConfigError(f"{gate.flag} takes a number of rows (e.g. 10) or a percentage "
                          f"(e.g. 1%), got {value!r}")
    number, percent = float(match.group(1)), bool(match.group(2))
    if percent and number > 100:
        raise ConfigError(f"{gate.flag} {value}: a percentage is at most 100%")
    if not percent and not number.is_integer():
        raise ConfigError(f"{gate.flag} {value}: a number of rows is a whole number (or "
                          "add % for a share)")
    return Gate(what, number, percent)


def parse_gates(max_over_limit: str | None = None, max_failed: str | None = None,
                max_rejected: str | None = None,
                max_fallback_share: str | None = None) -> list[Gate]:
    """The gates given on the command line (None: not given)."""
    given = (("over_limit", max_over_limit), ("failed", max_failed),
             ("rejected", max_rejected), ("fallback_share", max_fallback_share))
    return [parse_gate(what, value) for what, value in given if value is not None]


def evaluate(gates: list[Gate], counts: Counts) -> list[GateResult]:
    return [GateResult(gate, *counts.of(gate.what)) for gate in gates]


def counts_of(metrics: dict[str, Any]) -> Counts:
    """The counts of a run from its metrics (`AggregateMetrics.to_dict`, or the metrics
    file)."""
    s = metrics.get("summary") or {}
    sources = (metrics.get("summarization") or {}).get("summaries_by_source") or {}
    asked = sum(int(sources.get(k, 0)) for k in LLM_SOURCES)
    return Counts(int(s.get("total_trajectories", 0)),
                  int(s.get("trajectories_still_over_limit", 0)),
                  int(s.get("trajectories_failed", 0)), int(s.get("rows_rejected", 0)),
                  int(sources.get("fallback", 0)), asked)


def finish(results: list[GateResult], code: int = 0) -> int:
    """Print a line on stderr for each gate that failed; the exit code: `GATE_EXIT` when
    one did, else ``code``."""
    failed = [r for r in results if not r.passed]
    sys.stdout.flush()  # the command's own output first
    for result in failed:
        sys.stderr.write(inert(result.line()) + "\n")
    sys.stderr.flush()
    return GATE_EXIT if failed else code


def apply_gates(gates: list[Gate], counts: Counts, code: int) -> int:
    """`finish` for ``gates`` against ``counts``."""
    return finish(evaluate(gates, counts), code)


def _percent(share: float) -> str:
    if share == 0:
        return "0%"
    return f"{share:.2f}%" if share < 0.1 else f"{share:.1f}%"
