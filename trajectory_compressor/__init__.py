"""trajectory-compressor: shrink long agent trajectories to fit a training context window.

The public API is small: `compress_dataset` with its `RunOptions`, `CompressionConfig`,
`TrajectoryCompressor`, `TrajectoryMetrics`, the summarizer interface, and the pieces of
the pure core (`plan_trajectory`, `assemble`).
Heavy modules load on first use so that ``import trajectory_compressor`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "compress_dataset": "engine.job",
    "RunOptions": "engine.options",
    "RunResult": "engine.local",
    "CompressionConfig": "core.config",
    "EndpointConfig": "core.config",
    "TrajectoryCompressor": "engine.compressor",
    "RowResult": "engine.compressor",
    "TrajectoryMetrics": "core.metrics",
    "AggregateMetrics": "core.metrics",
    "TokenCounter": "counting.tokens",
    "Plan": "core.plan",
    "Region": "core.plan",
    "plan_trajectory": "core.plan",
    "assemble": "core.assemble",
    "Summarizer": "core.summary",
    "Summary": "core.summary",
    "SummaryRequest": "core.summary",
    "SummaryFailed": "core.summary",
    "ExtractiveSummarizer": "core.extractive",
    "ContextCompressor": "live",
    "sharegpt_to_openai": "dialects.openai",
    "openai_to_sharegpt": "dialects.openai",
    "CompressorError": "core.errors",
    "ConfigError": "core.errors",
    "InputError": "core.errors",
    "RowError": "core.errors",
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
    "RunOptions",
    "RunResult",
    "Summarizer",
    "Summary",
    "SummaryFailed",
    "SummaryRequest",
    "TokenCounter",
    "TrajectoryCompressor",
    "TrajectoryMetrics",
    "assemble",
    "compress_dataset",
    "openai_to_sharegpt",
    "plan_trajectory",
    "sharegpt_to_openai",
]

if TYPE_CHECKING:
    from .core.assemble import assemble
    from .core.config import CompressionConfig, EndpointConfig
    from .core.errors import CompressorError, ConfigError, InputError, RowError
    from .core.extractive import ExtractiveSummarizer
    from .core.metrics import AggregateMetrics, TrajectoryMetrics
    from .core.plan import Plan, Region, plan_trajectory
    from .core.summary import Summarizer, Summary, SummaryFailed, SummaryRequest
    from .counting.tokens import TokenCounter
    from .dialects.openai import openai_to_sharegpt, sharegpt_to_openai
    from .engine.compressor import RowResult, TrajectoryCompressor
    from .engine.job import compress_dataset
    from .engine.local import RunResult
    from .engine.options import RunOptions
    from .live import ContextCompressor


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trajectory_compressor' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
