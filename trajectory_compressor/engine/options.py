"""`RunOptions`: how one run goes, beyond its compression config (which rows it reads, and
how it stops, resumes, replaces outputs and reports). One value carries them from the
command line or a library call to the engine that runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict

from ..core.errors import ConfigError

if TYPE_CHECKING:
    from typing_extensions import Unpack

# Data files of a Hugging Face dataset, as `datasets.load_dataset` takes them: one
# pattern, a list, or a mapping of split to patterns.
DataFiles = str | list[str] | dict[str, Any] | None


@dataclass(frozen=True)
class RunOptions:
    """How to run, beyond the compression config; the keyword arguments of
    `compress_dataset` are its fields."""

    sample_percent: float | None = None  # keep each row with this probability, in (0, 100]
    seed: int = 42  # the sample's seed: the same rows every run
    strict: bool = False  # stop at the first rejected or failed row; nothing is committed
    quiet: bool = True  # False: progress, notes and warnings on stderr
    resume: bool = False  # continue from the checkpoint beside the output, if any
    overwrite: bool = False  # replace outputs another input or other settings wrote
    split: str | None = None  # with data_files: the input is a Hugging Face dataset
    data_files: DataFiles = None
    # With `output.mode: windows`: where to write one summarizer training row per
    # summary made (`engine.summarizer_rows`); None: nowhere.
    summarizer_rows: str | None = None
    # The CI gates the run is judged by ((what, limit as given): ("over_limit", "5%")),
    # recorded in its metrics file for `validate` to apply as well.
    gates: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        share = self.sample_percent
        if share is not None and (math.isnan(share) or not 0 < share <= 100):
            raise ConfigError(f"sample_percent must be in (0, 100], got {share:g}")


class RunKeywords(TypedDict, total=False):
    """`RunOptions`' fields as keyword arguments (``compress_dataset(path, seed=7)``)."""

    sample_percent: float | None
    seed: int
    strict: bool
    quiet: bool
    resume: bool
    overwrite: bool
    split: str | None
    data_files: DataFiles
    summarizer_rows: str | None
    gates: tuple[tuple[str, str], ...]


def run_options(options: RunOptions | None = None, **keywords: Unpack[RunKeywords]
                ) -> RunOptions:
    """``options`` (default: `RunOptions()`) with ``keywords`` in place of its fields."""
    return replace(options or RunOptions(), **keywords)
