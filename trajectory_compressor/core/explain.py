"""Why a row is still over the limit or failed, with the numbers behind it (pure, §16).

`explain` reads a row's `Plan` and `TrajectoryMetrics` and gives a `RowReason`: the
stable code of `core.reasons`, the sentence, and the token counts that explain it. The
over-limit file, the metrics file (counts per code), `report` and its HTML page all show
this one answer.

The numbers (all token counts, in the run's counting mode):

- ``tokens_before``, ``tokens_after``: the row as read and as written;
- ``target``, ``summary_target``: `target_max_tokens` and `summary_target_tokens`;
- ``head_tokens``, ``tail_tokens``: the turns before and after the compressible middle
  (the protected head and tail; with none protected on a side, 0);
- ``middle_tokens``: the compressible middle (``tokens_before - head - tail``);
- ``region_tokens``: the turns planned for the summary (for ``region_too_small``, the
  ones that would have been; 0 when there were none);
- ``summary_tokens``: only for a row whose summary was written: what the summary turn and
  the system notice added (``tokens_after - tokens_before + region_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import reasons
from .metrics import TrajectoryMetrics
from .plan import Plan


@dataclass(frozen=True)
class RowReason:
    """Why one row is over the limit or failed: code, sentence, numbers."""

    code: str
    text: str
    numbers: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(self.code == r.code for r in reasons.FAILURES)

    def to_entry(self) -> dict[str, Any]:
        """The keys an over-limit entry carries: ``reason`` (the code), ``reason_text``
        (the sentence, or the row's error) and ``reason_numbers``."""
        return {"reason": self.code, "reason_text": self.text,
                "reason_numbers": dict(self.numbers)}


def reason_numbers(plan: Plan, metrics: TrajectoryMetrics) -> dict[str, int]:
    """The token counts behind a row's reason (see the module's docstring)."""
    numbers = {
        "tokens_before": metrics.original_tokens,
        "tokens_after": metrics.compressed_tokens,
        "target": plan.target,
        "summary_target": plan.summary_target,
        "head_tokens": plan.head_tokens,
        "tail_tokens": plan.tail_tokens,
        "middle_tokens": plan.middle_tokens,
        "region_tokens": plan.region_tokens,
    }
    if plan.region is not None and metrics.turns_compressed_start_idx >= 0:
        # Of the row as planned: masked outputs (§19) are no part of the summary's cost.
        numbers["summary_tokens"] = (metrics.compressed_tokens - plan.total_tokens
                                     + plan.region_tokens)
    return numbers


def explain(plan: Plan, metrics: TrajectoryMetrics) -> RowReason | None:
    """Why the row failed or is still over the limit; None when it is neither."""
    if metrics.error is not None:
        failure = reasons.reason_of(metrics.error)
        code = failure.code if failure in reasons.FAILURES else reasons.FAILED.code
        return RowReason(code, metrics.error, reason_numbers(plan, metrics))
    if not metrics.still_over_limit:
        return None
    if metrics.low_fidelity and not metrics.was_compressed and plan.reason != \
            reasons.HEAD_ALONE.text:
        known: reasons.Reason | None = reasons.LOW_FIDELITY
        text = reasons.LOW_FIDELITY.text
    elif plan.reason:
        known, text = reasons.reason_of(plan.reason), plan.reason
    else:
        known, text = reasons.SUMMARY_OVERRAN, reasons.SUMMARY_OVERRAN.text
    code = (known or reasons.OVER_TARGET).code
    return RowReason(code, text, reason_numbers(plan, metrics))
