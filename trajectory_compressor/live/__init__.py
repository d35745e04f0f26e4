"""The live-chat context compressor core, on OpenAI-format message lists (§10).

    from trajectory_compressor.live import ContextCompressor

    compressor = ContextCompressor(context_length=128_000, summarizer=my_llm_call)
    if compressor.should_compress(usage.prompt_tokens):
        messages = compressor.compress(messages)
"""

from __future__ import annotations

from .assembly import STUB_RESULT
from .compressor import ContextCompressor, Feedback
from .handoff import SECTIONS, summary_budget
from .markers import COMPACTION_NOTE, LEGACY_PREFIXES, SUMMARY_PREFIX, is_summary_text
from .messages import estimate_tokens
from .writers import HandoffFailed

__all__ = [
    "COMPACTION_NOTE",
    "LEGACY_PREFIXES",
    "SECTIONS",
    "STUB_RESULT",
    "SUMMARY_PREFIX",
    "ContextCompressor",
    "Feedback",
    "HandoffFailed",
    "estimate_tokens",
    "is_summary_text",
    "summary_budget",
]
