"""The `openai` summarizer backend: an async pool of OpenAI-compatible endpoints (§6).

Modules, one concept each: `endpoint` (an endpoint's key, limits and health),
`breaker` (circuit breaker), `ratelimit` (requests/tokens per minute), `chat` (one
chat-completions attempt and what its reply means), `pool` (choosing, bounding,
retrying, failing over), `prompt` (the §4 instructions and input bound), `cache`
(SQLite cache of finished summaries) and `backend` (`OpenAISummarizer`, tying them up);
`local` (`LocalSummarizer`) puts the pool in front of llama.cpp servers it starts itself.
"""

from __future__ import annotations

from .backend import OpenAISummarizer
from .cache import SummaryCache, cache_key
from .chat import ChatRequest, Completion, Failure
from .endpoint import Endpoint, resolve_endpoints
from .local import LocalSummarizer
from .pool import Pool, PoolFailure, PoolResult
from .prompt import Prompt, build_prompt

__all__ = [
    "ChatRequest",
    "Completion",
    "Endpoint",
    "Failure",
    "LocalSummarizer",
    "OpenAISummarizer",
    "Pool",
    "PoolFailure",
    "PoolResult",
    "Prompt",
    "SummaryCache",
    "build_prompt",
    "cache_key",
    "resolve_endpoints",
]
