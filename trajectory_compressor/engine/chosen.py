"""What a row's summary went through: the summary chosen after the fidelity bar (§15),
and how its usage and fidelity go into the row's metrics (shared by one-row compression
and windows output)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..core.fidelity import MISSING_SHOWN, Fidelity
from ..core.invented import INVENTED_SHOWN
from ..core.metrics import TrajectoryMetrics
from ..core.redact import Scrubber
from ..core.summary import Summary, SummaryRequest, SummaryUsage


@dataclass
class Chosen:
    """The summary a row gets after the fidelity bar (§15), or None: left uncompressed."""

    summary: Summary | None
    fidelity: Fidelity
    usage: SummaryUsage  # of every request made for the row
    repaired: bool = False  # a repair request was sent
    low: bool = False  # below the bar after it: on_low_fidelity applied
    why: str = ""  # what `low` failed: the fidelity bar, the invented cap, or both



def total_usage(requests: list[SummaryRequest]) -> SummaryUsage:
    total = SummaryUsage()
    for request in requests:
        total.add(request.usage)
    return total


def add_fidelity(metrics: TrajectoryMetrics, chosen: Chosen, scrubber: Scrubber) -> None:
    fidelity = chosen.fidelity
    # The row shows the missing items: the trajectory's own text, scrubbed like a summary.
    shown = tuple(scrubber(item) for item in fidelity.missing[:MISSING_SHOWN])
    invented = tuple(scrubber(item) for item in fidelity.invented_items[:INVENTED_SHOWN])
    metrics.fidelity = dataclasses.replace(fidelity, missing=shown, invented_items=invented)
    metrics.fidelity_repair = chosen.repaired
    metrics.low_fidelity = chosen.low
    metrics.low_fidelity_reason = scrubber(chosen.why) if chosen.low else ""


def add_usage(metrics: TrajectoryMetrics, usage: SummaryUsage) -> None:
    metrics.summarization_api_calls = usage.api_calls
    metrics.summarization_errors = usage.errors
    metrics.retries = usage.retries
    metrics.prompt_tokens = usage.prompt_tokens
    metrics.completion_tokens = usage.completion_tokens
    metrics.errors_by_kind = dict(usage.errors_by_kind)
