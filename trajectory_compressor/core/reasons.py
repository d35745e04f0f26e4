"""Why a row stays over the limit or failed: one table of codes, sentences and labels.

The planner and the compressor give a row's reason as its sentence; `reason_of` maps a
sentence (or a code) back to its `Reason`. The over-limit file records the code, the
sentence and the numbers behind it (`core.explain`); the app layer renders codes as short
labels. Every reason this package gives is listed here.
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
# The turns before the compressible middle alone exceed the target: nothing the middle,
# the tail or the summary size can do brings the row under; only a smaller protected head
# (a first turn left unprotected) or a larger target can. Given whenever it holds, before
# any other reason (a row with no middle, or whose summary overran, included).
HEAD_ALONE = Reason(
    "protected_head_alone_over_target",
    "the protected head alone exceeds the target: no summary of the middle can bring the "
    "row under",
    "protected head alone > target")
# The protected head and tail plus a summary of ``summary_target_tokens`` exceed the
# target, so no summary of the middle can bring the row under. The code names the larger
# side (the head when ``head_tokens >= tail_tokens``); the numbers say whether that side
# alone is over.
PROTECTED_HEAD = Reason(
    "protected_head_over_target",
    "the protected head and tail with a summary exceed the target; the head is the larger",
    "head+tail > target (head)")
PROTECTED_TAIL = Reason(
    "protected_tail_over_target",
    "the protected head and tail with a summary exceed the target; the tail is the larger",
    "head+tail > target (tail)")
# What runs before the split wrote; read back, never given.
PROTECTED_TOO_BIG = Reason(
    "protected_over_target",
    "the protected head and tail alone exceed the target",
    "head+tail alone > target")
MIDDLE_EXHAUSTED = Reason(
    "budget_not_reached",
    "summarizing the middle up to its last clean cut still leaves the row over the "
    "target",
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
    "summary_grew",
    "the summary and notice would make the row longer than the original",
    "failed: summary longer than middle")
# `summarization.on_low_fidelity: uncompressed`: the summary kept too few of the region's
# facts even after a repair request (§15), so the row is written as it was.
LOW_FIDELITY = Reason(
    "low_fidelity",
    "the summary kept too few of the region's facts (below summarization.min_fidelity, "
    "after a repair request); on_low_fidelity: uncompressed left the row as it was",
    "summary fidelity too low")
# `compression.strategy: mask` (§19): every tool output masking may touch is masked (or
# none could be) and the row is still over; that strategy never summarizes.
MASK_EXHAUSTED = Reason(
    "mask_not_enough",
    "masking every tool output outside the protected turns (and the last "
    "compression.mask_keep_last) still leaves the row over the target; strategy mask "
    "writes no summary (hybrid would)",
    "masking not enough")

# An error while summarizing or assembling the row (a bug, a value nobody foresaw): the
# row is written unchanged; its error is this sentence, a colon and what went wrong.
SUMMARY_FAILED = Reason(
    "summary_failed",
    "compression failed",
    "failed: error")
# Any other failure (an error text this table does not know, e.g. from another version).
FAILED = Reason("failed", "the row failed", "failed")
# Over the target for a reason this table does not know (a plan made by hand).
OVER_TARGET = Reason("over_target", "over the target", "over the target")
# `output.mode: windows` (§20): a window holds more than the target, because one group
# of turns with the protected head and the summary does not fit (the over-limit entry
# names the window and its turns).
WINDOW_OVER = Reason(
    "window_over_target",
    "a window is over the target: one group of turns with the protected head and the "
    "summary does not fit",
    "window over target")

# In the order reports list them; failures come after, in this order.
OVER_LIMIT = (HEAD_ALONE, NO_MIDDLE, NO_CLEAN_CUT, SMALL_REGION, PROTECTED_HEAD,
              PROTECTED_TAIL, MIDDLE_EXHAUSTED, SUMMARY_OVERRAN, LOW_FIDELITY, WINDOW_OVER,
              MASK_EXHAUSTED)
FAILURES = (DEADLINE, SUMMARY_GREW, SUMMARY_FAILED, FAILED)
ALL = (*OVER_LIMIT, OVER_TARGET, *FAILURES)
_BY_TEXT = {r.text: r for r in (*OVER_LIMIT, PROTECTED_TOO_BIG)}
_BY_CODE = {r.code: r for r in (*ALL, PROTECTED_TOO_BIG)}


def deadline_error(seconds: float) -> str:
    """The error a row cut by the per-trajectory deadline records."""
    return f"{DEADLINE.text} of {seconds:g}s; row left unchanged"


def grew_error(compressed_tokens: int, original_tokens: int) -> str:
    """The error a row records when its summary would have made it longer."""
    return (f"{SUMMARY_GREW.text} ({compressed_tokens:,} > {original_tokens:,} tokens); "
            "row left unchanged")


def reason_of(text: str) -> Reason | None:
    """The reason whose code or sentence ``text`` is (or starts with, for failures)."""
    if text in _BY_CODE:
        return _BY_CODE[text]
    if text in _BY_TEXT:
        return _BY_TEXT[text]
    for failure in (DEADLINE, SUMMARY_GREW, SUMMARY_FAILED):
        if text.startswith(failure.text):
            return failure
    return None
