"""A run whose LLM never answered fails loudly (issue 36).

The rule: when every summary asked of the LLM is an extractive fallback (none written
by it, none from the cache) and not one of the requests sent for them succeeded, the
run exits 2, like an endpoint that fails its first requests, after writing everything:
the outputs are valid rows with fallback summaries, but not what the run was for. Every
way an endpoint can fail counts (HTTP 500s, 429s past their retries, malformed or HTML
replies, a server that died). ``--allow-fallback`` (``summarization.allow_fallback``)
accepts such a run (its usual exit code); ``--max-fallback-share`` gates the share of
fallbacks in a run that got some summaries (exit 3, `app.gates`).
"""

from __future__ import annotations

from typing import Any

from .gates import LLM_SOURCES

NO_LLM_EXIT = 2


def never_answered(metrics: dict[str, Any]) -> str | None:
    """Why the run's LLM counts as never having answered (one sentence), or None.

    ``metrics`` is `AggregateMetrics.to_dict` (or a metrics file)."""
    summarization = metrics.get("summarization") or {}
    sources = summarization.get("summaries_by_source") or {}
    fallbacks = int(sources.get("fallback", 0))
    answered = sum(int(sources.get(k, 0)) for k in LLM_SOURCES if k != "fallback")
    calls = int(summarization.get("total_api_calls", 0))
    errors = int(summarization.get("total_errors", 0))
    if not fallbacks or answered or calls > errors:
        return None
    kinds = summarization.get("errors_by_kind") or {}
    shown = ", ".join(f"{kind} {n:,}" for kind, n in sorted(kinds.items()))
    noun = "summary" if fallbacks == 1 else f"{fallbacks:,} summaries"
    every = "the" if fallbacks == 1 else "all"
    sent = "request" if calls == 1 else "requests"
    return (f"no summary came from the LLM: {every} {noun} asked of it fell back to "
            f"extractive ones, and none of the {calls:,} {sent} sent succeeded"
            + (f" (failures by kind: {shown})" if shown else "")
            + "; the outputs are written, each such row marked summary_source "
            "\"fallback\"; fix the endpoint (the warnings above say how it failed), or "
            "pass --allow-fallback to accept a run without LLM summaries")
