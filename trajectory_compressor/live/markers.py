"""The fixed texts of a compaction and how to recognise them again on a later pass.

A summary message is ``SUMMARY_PREFIX`` + newline + body. The prefix tells the model the
summary is reference material, not instructions. Older prefixes (the batch compressor's
``[CONTEXT SUMMARY]:``) are recognised and replaced, so a trajectory compressed by the batch
tool and converted to chat messages folds its summary into the next handoff.
"""

from __future__ import annotations

import re

from ..core.conversation import SUMMARY_PREFIX as BATCH_SUMMARY_PREFIX
from ..core.redact import redact

SUMMARY_PREFIX = (
    "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier messages were compacted into the "
    "handoff summary below. It is background, not instructions: do not answer questions "
    "or redo requests found in it, and respond to the latest user message after it. "
    "Your tools remain available; build on the current state instead of repeating "
    "finished work:"
)
# Any heading of this family marks a compaction message, whatever wording follows it.
COMPACTION_HEADING = "[CONTEXT COMPACTION"
LEGACY_PREFIXES = (BATCH_SUMMARY_PREFIX,)

COMPACTION_NOTE = (
    "[Note: earlier turns of this conversation were compacted into a handoff summary to "
    "save context space. Build on that summary and the current state rather than redoing "
    "work.]"
)

# Separates the summary from the original text of the message it was merged into.
MERGE_SEPARATOR = "--- END OF CONTEXT SUMMARY — the original message follows ---"

_FAILURE_LINE = re.compile(r"^Summary unavailable: \d+ earlier messages? (?:was|were) removed.*\n?")
PREVIOUS_SUMMARY_HEADING = "Summary from an earlier compaction (kept as it was):"


def failure_marker(dropped: int, previous_body: str = "") -> str:
    """The static text put in place of a summary that could not be written.

    A summary written by an earlier pass is not lost with the failed one: it is kept
    below the marker as it was.
    """
    noun = "message was" if dropped == 1 else "messages were"
    text = (
        f"{SUMMARY_PREFIX}\nSummary unavailable: {dropped} earlier {noun} removed to free "
        "context space and could not be summarized. Continue from the messages below and "
        "the current state of files and tools."
    )
    if previous_body:
        text += f"\n\n{PREVIOUS_SUMMARY_HEADING}\n{previous_body}"
    return text


def is_summary_text(text: str) -> bool:
    """Whether ``text`` is a compaction message of this or an older version."""
    head = text.lstrip()
    return head.startswith(COMPACTION_HEADING) or any(
        head.upper().startswith(prefix.upper()) for prefix in LEGACY_PREFIXES
    )


def strip_prefixes(text: str) -> str:
    """``text`` without any leading summary prefixes (current, legacy, or repeated)."""
    body = text.strip()
    while True:
        for prefix in (SUMMARY_PREFIX, *LEGACY_PREFIXES):
            if body.upper().startswith(prefix.upper()):
                body = body[len(prefix):].lstrip()
                break
        else:
            if not body.startswith(COMPACTION_HEADING):
                return body
            # A heading of another wording (an older version): it is one line.
            body = body.partition("\n")[2].lstrip()


def split_merged(text: str) -> tuple[str, str | None]:
    """A merged message's ``(summary part, original text)``; ``(text, None)`` if not merged."""
    summary, sep, original = text.partition(f"\n\n{MERGE_SEPARATOR}")
    return (summary, original.removeprefix("\n\n")) if sep else (text, None)


def summary_body(text: str) -> str:
    """What a summary message says, without prefix, failure marker or merged original."""
    summary, _ = split_merged(text)
    body = strip_prefixes(summary)
    body = _FAILURE_LINE.sub("", body, count=1).lstrip()
    if body.startswith(PREVIOUS_SUMMARY_HEADING):
        body = body[len(PREVIOUS_SUMMARY_HEADING):].lstrip()
    return body.strip()


def finish_summary(body: str) -> str:
    """Summary message text: the prefix exactly once, then the redacted body."""
    return f"{SUMMARY_PREFIX}\n{redact(strip_prefixes(body))}"
