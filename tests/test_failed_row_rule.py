"""`analyze` and `compress` agree on a row that fails (issue 36).

`compress` wrote such a row unchanged, flagged failed; `analyze` let the same error stop
the whole command. Both now go through `TrajectoryCompressor.compress_or_fail`. The
failure is real Python raised by a summarizer with a bug (a value its code never
expected), the one seam that makes a row fail for no reason a row can show."""

from __future__ import annotations

import asyncio

from tests.fixtures_runs import HAND_CONFIG, write_jsonl
from tests.fixtures_runs import row as sized_row
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import Summarizer, Summary, SummaryRequest
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.projection import CountedRow
from trajectory_compressor.inspect.analyze import _outcomes
from trajectory_compressor.inspect.estimate import WorkClock

ERROR = "compression failed: KeyError: 'choices'"


class Buggy(Summarizer):
    """A summarizer whose code meets a reply it never expected."""

    name = "buggy"

    async def summarize(self, request: SummaryRequest) -> Summary:
        return {}["choices"]  # type: ignore[no-any-return]


ROWS = [sized_row("fits", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]),
        sized_row("short", "SHGTHG", [10, 5, 5, 5, 5, 5]),
        sized_row("fits2", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])]


def test_compress_writes_the_row_unchanged_and_failed(tmp_path, capsys):
    config = CompressionConfig(**HAND_CONFIG)
    src = write_jsonl(tmp_path / "in.jsonl", ROWS)
    result = compress_dataset(str(src), str(tmp_path / "out.jsonl"), config,
                              summarizer=Buggy(), quiet=True)
    assert result.exit_code == 1
    m = result.metrics
    assert (m.total_trajectories, m.trajectories_failed, m.trajectories_compressed) == (3, 2, 0)
    assert f"in.jsonl:1: {ERROR}" in capsys.readouterr().err


def test_analyze_counts_the_same_row_failed_by_the_same_rule():
    config = CompressionConfig(**HAND_CONFIG)
    counter = TokenCounter.load()
    row = ROWS[0]
    turns = row["conversations"]

    async def go():
        async with TrajectoryCompressor(config, Buggy(), counter) as compressor:
            one = CountedRow(row, turns, counter.count_many([t["value"] for t in turns]),
                             SHAREGPT)
            return await _outcomes(compressor, one, WorkClock(1), 0)

    exact, llm = asyncio.run(go())
    assert exact.metrics.error == ERROR and exact.metrics.failed
    assert llm is exact
    # Unchanged, as compress writes it: the turns as they were, the metrics added.
    assert exact.row["conversations"] == turns
    assert exact.row["compression_metrics"]["error"] == ERROR
