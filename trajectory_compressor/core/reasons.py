"""Why a row stays over the limit or failed: one table of codes, sentences and labels.

The planner and the compressor give a row's reason as its sentence (the over-limit file
records it); `code_of` maps a sentence back to its code, and the app layer renders codes
as short labels. Every reason this package gives is listed here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One reason: a stable code, the sentence a row records, a short label for tables."""

    code: str
    text: str
    label: str


NO_MIDDLE = Reason(
    "nothing_compressible",
    "no compressible middle: the protected head and tail cover the trajectory",
    "no compressible middle")
NO_CLEAN_CUT = Reason(
    "no_clean_cut",
    "the middle cannot be cut without splitting a tool call from its tool answers",
    "no cut that keeps tool pairs")
SMALL_REGION = Reason(
    "region_too_small",
    "the compressible middle is too small to save tokens with a summary",
    "middle too small to help")
PROTECTED_TOO_BIG = Reason(
    "protected_over_target",
    "the protected head and tail alone exceed the target",
    "head+tail alone > target")
MIDDLE_EXHAUSTED = Reason(
    "budget_not_reached",
    "the whole middle was summarized and the rest still exceeds the target",
    "middle used up, still over")
# The planner expected the row to fit with a summary of ``summary_target_tokens``; the
# summary, or the notice appended to the system turn, made it longer than that.
SUMMARY_OVERRAN = Reason(
    "summary_too_long",
    "the summary and notice came out longer than the planner allowed for",
    "summary+notice overran")
DEADLINE = Reason(
    "deadline_exceeded",
    "summarization exceeded the per-trajectory deadline",
    "failed: deadline exceeded")
# The summary (within its tolerance) plus the notice outweighed the turns it replaces: the
# row would have grown, so it is written as it was.
SUMMARY_GREW = Reason(
    "summary_not_shorter",
    "the summary and notice would make the row longer than the original",
    "failed: summary longer than middle")

# In the order reports list them; failures (free text) come after.
OVER_LIMIT = (NO_MIDDLE, NO_CLEAN_CUT, SMALL_REGION, PROTECTED_TOO_BIG, MIDDLE_EXHAUSTED,
              SUMMARY_OVERRAN)
_BY_TEXT = {r.text: r for r in OVER_LIMIT}


def deadline_error(seconds: float) -> str:
    """The error a row cut by the per-trajectory deadline records."""
    return f"{DEADLINE.text} of {seconds:g}s; row left unchanged"


def grew_error(compressed_tokens: int, original_tokens: int) -> str:
    """The error a row records when its summary would have made it longer."""
    return (f"{SUMMARY_GREW.text} ({compressed_tokens:,} > {original_tokens:,} tokens); "
            "row left unchanged")


def reason_of(text: str) -> Reason | None:
    """The reason whose sentence ``text`` is (or starts with, for failures), if any."""
    if text in _BY_TEXT:
        return _BY_TEXT[text]
    for failure in (DEADLINE, SUMMARY_GREW):
        if text.startswith(failure.text):
            return failure
    return None
