"""The sync entry points work where an event loop already runs (a Jupyter cell, Playwright's
sync API): the library's run goes to a helper thread instead of failing in `asyncio.run`."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from trajectory_compressor import CompressionConfig, ExtractiveSummarizer, TrajectoryCompressor
from trajectory_compressor.engine.blocking import run_blocking
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.inspect.analyze import analyze


def inside_a_loop(call):
    """What ``call()`` returns when made from a coroutine, as in a notebook cell."""

    async def cell():
        return call()

    return asyncio.run(cell())


def test_without_a_loop_the_coroutine_runs_in_this_thread():
    async def where():
        return threading.current_thread()

    assert run_blocking(where) is threading.current_thread()


def test_inside_a_loop_it_runs_elsewhere_and_gives_back_result_and_error():
    async def where():
        return threading.current_thread()

    async def fails():
        raise KeyError("from the helper thread")

    assert inside_a_loop(lambda: run_blocking(where)) is not threading.current_thread()
    with pytest.raises(KeyError, match="from the helper thread"):
        inside_a_loop(lambda: run_blocking(fails))


def test_the_library_compresses_and_analyzes_from_inside_a_running_loop(
        tmp_path, counter, sample_jsonl):
    # The sample's first three rows: one under the 2,000-token target, two far over it.
    src = tmp_path / "in.jsonl"
    src.write_text("".join(sample_jsonl.read_text().splitlines(keepends=True)[:3]))
    out = tmp_path / "out.jsonl"
    config = CompressionConfig(target_max_tokens=2000)
    result = inside_a_loop(lambda: compress_dataset(
        str(src), str(out), config, summarizer=ExtractiveSummarizer(counter.count)))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3
    assert result.metrics.trajectories_compressed > 0

    projected = inside_a_loop(lambda: analyze(str(src), config, counter=counter))
    assert projected.targets[0].extractive.trajectories_compressed == \
        result.metrics.trajectories_compressed

    row = rows[0]
    comp = TrajectoryCompressor(config, ExtractiveSummarizer(counter.count), counter)
    turns, metrics = inside_a_loop(lambda: comp.compress_trajectory(row["conversations"]))
    assert metrics.compressed_tokens == sum(counter.count_many([t["value"] for t in turns]))
