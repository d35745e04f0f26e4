"""trajectory-compressor: shrink long agent trajectories to fit a training context window.

The public API is small: `CompressionConfig`, `TrajectoryCompressor`, `TrajectoryMetrics`,
the summarizer interface, and the pieces of the pure core (`plan_trajectory`, `assemble`).
Heavy modules load on first use so that ``import trajectory_compressor`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CompressionConfig": "config",
    "EndpointConfig": "config",
    "TrajectoryCompressor": "compressor",
    "RowResult": "compressor",
    "TrajectoryMetrics": "metrics",
    "AggregateMetrics": "metrics",
    "TokenCounter": "tokens",
    "Plan": "plan",
    "Region": "plan",
    "plan_trajectory": "plan",
    "assemble": "assemble",
    "Summarizer": "summary",
    "Summary": "summary",
    "SummaryRequest": "summary",
    "SummaryFailed": "summary",
    "ExtractiveSummarizer": "extractive",
    "ContextCompressor": "live",
    "sharegpt_to_openai": "convert",
    "openai_to_sharegpt": "convert",
    "CompressorError": "errors",
    "ConfigError": "errors",
    "InputError": "errors",
    "RowError": "errors",
}

__all__ = [
    "AggregateMetrics",
    "CompressionConfig",
    "CompressorError",
    "ConfigError",
    "ContextCompressor",
    "EndpointConfig",
    "ExtractiveSummarizer",
    "InputError",
    "Plan",
    "Region",
    "RowError",
    "RowResult",
    "Summarizer",
    "Summary",
    "SummaryFailed",
    "SummaryRequest",
    "TokenCounter",
    "TrajectoryCompressor",
    "TrajectoryMetrics",
    "assemble",
    "openai_to_sharegpt",
    "plan_trajectory",
    "sharegpt_to_openai",
]

if TYPE_CHECKING:
    from .assemble import assemble
    from .compressor import RowResult, TrajectoryCompressor
    from .config import CompressionConfig, EndpointConfig
    from .convert import openai_to_sharegpt, sharegpt_to_openai
    from .errors import CompressorError, ConfigError, InputError, RowError
    from .extractive import ExtractiveSummarizer
    from .live import ContextCompressor
    from .metrics import AggregateMetrics, TrajectoryMetrics
    from .plan import Plan, Region, plan_trajectory
    from .summary import Summarizer, Summary, SummaryFailed, SummaryRequest
    from .tokens import TokenCounter


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trajectory_compressor' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
