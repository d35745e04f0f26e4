"""The sharded engine's driver and worker in this process, without Ray (issue 26, item 5).

`engine/shard.py`, `engine/shard_cache.py` and `engine/sharded.py` ran only inside Ray
workers (tests/test_ray_engine.py), where no in-process coverage map sees them. Here the
run is driven as `engine/ray.py` drives it — `ShardedRun.prepare()`, `job()`, then
`shard.run_shard` for each pending shard (one after another, one worker's summarizer kept
open over them), `record()` each result, `commit()` — and what it writes is compared with
what the local engine writes for the same input.

Expected results: SPEC §13 and README "On a Ray cluster": every output row byte for byte
what the local engine writes, and the over-limit, rejects and metrics files those of a
local run (but for its timings and output paths); a plain JSONL file is cut into ranges of
lines, other containers are one shard per file; `--resume` skips finished shards; a shard
is written whole or not at all (an attempt starts from scratch); a shard whose worker died
3 times stops the run; each worker holds its share of the limits (concurrency divided, at
least 1; rpm and tpm divided exactly); each shard writes its summaries to its own cache
file and looks them up there, then in the run's cache read-only, and the driver merges the
shards' files into the run's cache, so a rerun makes no request.
"""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import sys
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import ROOT, read_jsonl
from tests.datagen import write_jsonl
from tests.engine_runs import broken_line_corpus, metrics_of
from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError, OutputError, ResumeError
from trajectory_compressor.core.summary import SummaryRequest
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects import detect
from trajectory_compressor.engine import shard as shard_mod
from trajectory_compressor.engine import sharded
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.layout import plan_layout
from trajectory_compressor.engine.local import RunResult
from trajectory_compressor.engine.options import RunOptions
from trajectory_compressor.engine.shard import (
    ShardResult,
    ShardSummarizer,
    run_shard,
    worker_config,
)
from trajectory_compressor.engine.shard_cache import ShardCache, merge_into
from trajectory_compressor.formats.registry import discover_inputs
from trajectory_compressor.summarizers import make_summarizer, resolve_summarizer
from trajectory_compressor.summarizers.cache import SummaryCache
from trajectory_compressor.summarizers.openai import OpenAISummarizer

SAMPLES = ROOT / "data_samples"
SMALL = {"target_max_tokens": 500, "summary_target_tokens": 60}
MATRIX = {"target_max_tokens": 4000, "summary_target_tokens": 200}


# driving a sharded run in this process, as engine/ray.py does on Ray


def worker(config: CompressionConfig, workers: int = 1) -> TrajectoryCompressor:
    """What one `ray.ShardWorker` builds: its share of the limits, a `ShardSummarizer`."""
    config = worker_config(config, workers)
    counter = TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    return TrajectoryCompressor(config, ShardSummarizer(make_summarizer(config, counter)),
                                counter)


def prepared(src: Path, out: Path, config: CompressionConfig,
             options: RunOptions | None = None, block_lines: int | None = None
             ) -> tuple[sharded.ShardedRun, CompressionConfig]:
    """The run `compress_dataset` would hand the Ray engine (its cache path settled)."""
    config = resolve_summarizer(config)
    inputs = discover_inputs(str(src))
    layout = plan_layout(str(src), inputs, str(out), config,
                         single_file=src.is_file() and inputs[0].stream is None)
    if config.cache_enabled and config.cache_path is None:
        config = config.replace(cache_path=str(layout.summary_cache))
    return sharded.ShardedRun(inputs, layout, config, options or RunOptions(),
                              block_lines=block_lines), config


def run_pending(run: sharded.ShardedRun, config: CompressionConfig, workers: int = 1,
                limit: int | None = None) -> list[ShardResult]:
    """`prepare` the run and run its pending shards (the first ``limit`` of them) one after
    another in one worker, recording each; the results as they came back."""
    pending = run.prepare()[:limit]
    job = run.job(workers=workers)
    compressor = worker(config, workers)
    dialect = partial(detect, config=config)
    loop = asyncio.new_event_loop()
    results = []
    try:
        for shard in pending:
            result = loop.run_until_complete(run_shard(compressor, job, shard, dialect))
            results.append(result)
            if result.error is None:
                run.record(result)
        summarizer = compressor.summarizer
        assert isinstance(summarizer, ShardSummarizer)
        loop.run_until_complete(summarizer.shutdown())
    finally:
        loop.close()
    return results


def sharded_run(src: Path, out: Path, config: CompressionConfig,
                options: RunOptions | None = None, block_lines: int | None = None,
                workers: int = 1) -> RunResult:
    run, config = prepared(src, out, config, options, block_lines)
    results = run_pending(run, config, workers)
    assert [r.error for r in results] == [None] * len(results)
    return run.commit()


def local_run(src: Path, out: Path, config: CompressionConfig,
              options: RunOptions | None = None) -> RunResult:
    return compress_dataset(str(src), str(out), config.replace(engine="local"),
                            options=options or RunOptions())


def extractive(**settings: Any) -> CompressionConfig:
    return CompressionConfig().replace(summarizer="extractive", **settings)


def assert_same(a: RunResult, b: RunResult) -> None:
    """The two runs wrote the same bytes, file for file, and the same metrics."""
    assert list(a.layout.outputs) == list(b.layout.outputs)  # the same inputs, in order
    for out, other in zip(a.layout.outputs.values(), b.layout.outputs.values(), strict=True):
        assert out.read_bytes() == other.read_bytes(), f"{out.name} differs"
    assert a.layout.over_limit.read_bytes() == b.layout.over_limit.read_bytes()
    assert a.layout.rejects.read_bytes() == b.layout.rejects.read_bytes()
    assert metrics_of(a) == metrics_of(b)
    assert a.exit_code == b.exit_code
    assert a.warnings == b.warnings
    # A summary cache beside the output only where the run could ask a model for one.
    assert a.layout.summary_cache.exists() == b.layout.summary_cache.exists()


def no_leftovers(result: RunResult) -> None:
    assert not result.layout.checkpoint.exists()
    assert not sharded.parts_folder(result.layout).exists()


# the plan: one shard per file, plain JSONL cut into ranges of lines


def plan_of(run: sharded.ShardedRun) -> list[tuple[int, int, int | None]]:
    return [(s.file, s.start, s.stop) for s in run.shards]


def test_a_jsonl_file_is_cut_into_ranges_of_block_lines(tmp_path, monkeypatch):
    # 7 lines in ranges of 3: after lines 3 and 6 (a range is `start` exclusive to `stop`
    # inclusive); the default size is the module's BLOCK_LINES (README: 20,000).
    src = write_jsonl(tmp_path / "in.jsonl", 7)
    run, _ = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL), block_lines=3)
    assert run.prepare() == run.shards
    assert plan_of(run) == [(0, 0, 3), (0, 3, 6), (0, 6, None)]
    assert [s.index for s in run.shards] == [0, 1, 2]
    monkeypatch.setattr(sharded, "BLOCK_LINES", 4)
    run, _ = prepared(src, tmp_path / "again.jsonl", extractive(**SMALL))
    run.prepare()
    assert plan_of(run) == [(0, 0, 4), (0, 4, None)]


def test_a_jsonl_file_written_in_another_container_is_one_shard(tmp_path):
    # Ranges only when the output is JSONL too (README): a Parquet output is one file.
    src = write_jsonl(tmp_path / "in.jsonl", 7)
    config = extractive(**SMALL).replace(output_format="parquet")
    run, _ = prepared(src, tmp_path / "out", config, block_lines=3)
    run.prepare()
    assert plan_of(run) == [(0, 0, None)]
    local = local_run(src, tmp_path / "local", config)
    ours = sharded_run(src, tmp_path / "out", config, block_lines=3)
    assert local.metrics.total_trajectories == 7
    assert_same(local, ours)


def test_ranges_with_sampling_and_bad_lines_write_what_the_local_engine_writes(tmp_path):
    # Each range starts from the sampler's draws before it (README "On a Ray cluster"), so
    # the sampled rows are the local run's; a broken line is a reject in its range.
    src = write_jsonl(tmp_path / "one.jsonl", 23, seed=3)
    with src.open("ab") as f:
        f.write(b"\n{broken\n")
    for sample in (None, 40.0):
        options = RunOptions(sample_percent=sample, seed=5)
        local = local_run(src, tmp_path / f"local{sample}.jsonl", extractive(**SMALL), options)
        ours = sharded_run(src, tmp_path / f"ours{sample}.jsonl", extractive(**SMALL),
                           options, block_lines=5)
        assert_same(local, ours)
        no_leftovers(ours)
    assert 0 < ours.metrics.total_trajectories < 23
    assert local.metrics.rows_rejected == 1


def test_an_output_in_a_folder_not_made_yet(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 4)
    out = tmp_path / "new" / "deeper" / "out.jsonl"
    ours = sharded_run(src, out, extractive(**SMALL), block_lines=2)
    local = local_run(src, tmp_path / "local.jsonl", extractive(**SMALL))
    assert_same(local, ours)
    no_leftovers(ours)


# resuming: the manifest at the checkpoint path, finished shards skipped


corpus = partial(broken_line_corpus, rows=9)


def interrupted(src: Path, out: Path, config: CompressionConfig, done: int,
                block_lines: int | None = None) -> sharded.ShardedRun:
    """A run whose driver stopped after ``done`` shards finished (its manifest kept)."""
    run, config = prepared(src, out, config, block_lines=block_lines)
    results = run_pending(run, config, limit=done)
    assert len(results) == done and all(r.error is None for r in results)
    return run


def test_resume_skips_the_finished_shards_and_ends_as_an_uninterrupted_run(tmp_path):
    src = corpus(tmp_path)
    config = extractive(**SMALL)
    first = interrupted(src, tmp_path / "out", config, done=2, block_lines=5)
    assert len(first.shards) == 6  # 9 lines and 10 lines in ranges of 5, and 9 lines
    assert first.layout.checkpoint.is_file()
    finished_before = {s.index: (sharded.shard_dir(first.parts, s) / "done.json").read_bytes()
                       for s in first.shards[:2]}
    again, config = prepared(src, tmp_path / "out", config, RunOptions(resume=True),
                             block_lines=5)
    pending = again.prepare()
    assert again.resumed and [s.index for s in pending] == [2, 3, 4, 5]
    assert again.started == first.started  # the rows keep their names (summary cache)
    assert again.progress.total_trajectories == sum(
        ShardResult.from_json(b).rows for b in finished_before.values())
    results = run_pending(again, config)
    assert [r.index for r in results] == [2, 3, 4, 5]
    for index, record in finished_before.items():  # not run again
        assert (sharded.shard_dir(again.parts, again.shards[index]) / "done.json"
                ).read_bytes() == record
    ours = again.commit()
    assert ours.resumed
    local = local_run(src, tmp_path / "local", config)
    assert_same(local, ours)
    no_leftovers(ours)


def test_a_finished_shard_is_not_run_again(tmp_path):
    # A retried task returns the record of a shard that finished (run_shard's contract).
    src = write_jsonl(tmp_path / "in.jsonl", 4)
    run, config = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL))
    [first] = run_pending(run, config)
    folder = sharded.shard_dir(run.parts, run.shards[0])
    output = folder / "out.jsonl"
    output.write_bytes(b"kept as it is\n")
    compressor = worker(config)
    again = asyncio.run(run_shard(compressor, run.job(), run.shards[0],
                                  partial(detect, config=config)))
    assert again == first
    assert output.read_bytes() == b"kept as it is\n"


def test_a_half_written_shard_is_written_again_from_scratch(tmp_path):
    # A worker that died mid-shard left part of its output and no done.json: the next
    # attempt deletes what it left (README: a shard is written whole or not at all).
    src = corpus(tmp_path)
    config = extractive(**SMALL)
    first = interrupted(src, tmp_path / "out", config, done=3)
    victim = first.shards[1]
    folder = sharded.shard_dir(first.parts, victim)
    (folder / "done.json").unlink()
    with (folder / "part1.jsonl").open("ab") as f:
        f.write(b'{"half": "a row"}\n')
    (folder / "stray").mkdir()
    (folder / "stray" / "file").write_bytes(b"x")
    (folder / "stray.txt").write_bytes(b"x")
    (folder / "attempts").write_text("3")  # the kill was the driver's: not counted
    again, config = prepared(src, tmp_path / "out", config, RunOptions(resume=True))
    assert [s.index for s in again.prepare()] == [1]
    [result] = run_pending(again, config)
    assert result.error is None
    assert sorted(p.name for p in folder.iterdir()) == [
        "done.json", "part1.jsonl", "part_over_limit.jsonl", "part_rejects.jsonl"]
    assert b'"half"' not in (folder / "part1.jsonl").read_bytes()
    ours = again.commit()
    assert_same(local_run(src, tmp_path / "local", config), ours)


def test_resume_before_any_shard_finished(tmp_path):
    src = corpus(tmp_path)
    config = extractive(**SMALL)
    first, _ = prepared(src, tmp_path / "out", config)
    first.prepare()  # planned, then the driver died
    assert first.parts.is_dir()
    again, config = prepared(src, tmp_path / "out", config, RunOptions(resume=True))
    assert len(again.prepare()) == 3 and again.resumed
    run_pending(again, config)
    assert_same(local_run(src, tmp_path / "local", config), again.commit())


def test_resume_without_a_checkpoint_starts_from_the_beginning(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 4)
    run, _ = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL),
                      RunOptions(resume=True))
    assert len(run.prepare()) == 1 and not run.resumed
    assert run.notes == [f"no checkpoint at {run.layout.checkpoint}; starting from the "
                         "beginning"]


def test_a_checkpoint_left_without_resume_is_discarded_with_a_note(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 4)
    config = extractive(**SMALL)
    interrupted(src, tmp_path / "out.jsonl", config, done=0, block_lines=2)
    run, _ = prepared(src, tmp_path / "out.jsonl", config)
    assert len(run.prepare()) == 1 and not run.resumed
    assert "is discarded; starting over" in run.notes[0]


@pytest.mark.parametrize("damage, message", [
    ("garbage", r"the checkpoint .* is unreadable"),
    ("local", r"was written by the local engine; resume with --engine local"),
    ("list", r"was written by the local engine"),
    ("no shards folder", r"the shards folder .* is missing"),
    ("other settings", r"the setting .* but was"),
])
def test_a_resume_that_cannot_continue_says_why(tmp_path, damage, message):
    src = write_jsonl(tmp_path / "in.jsonl", 4)
    config = extractive(**SMALL)
    first = interrupted(src, tmp_path / "out.jsonl", config, done=1, block_lines=2)
    path = first.layout.checkpoint
    manifest = json.loads(path.read_text())
    if damage == "garbage":
        path.write_bytes(b"\x00not json")
    elif damage == "local":  # a local run's checkpoint (engine/checkpoint.py, version 1)
        path.write_text(json.dumps({**manifest, "version": 1}))
    elif damage == "list":
        path.write_text(json.dumps([manifest]))
    elif damage == "no shards folder":
        import shutil

        shutil.rmtree(first.parts)
    else:
        config = config.replace(target_max_tokens=SMALL["target_max_tokens"] + 1)
    run, _ = prepared(src, tmp_path / "out.jsonl", config, RunOptions(resume=True))
    with pytest.raises(ResumeError, match=message):
        run.prepare()


# the summary cache: a file per shard over the run's, merged by the driver


@pytest.fixture(scope="module")
def server():
    with FakeLLMServer().in_thread() as s:
        yield s


def llm(url: str, **settings: Any) -> CompressionConfig:
    return CompressionConfig().replace(summarizer="openai", api_key_env="", **settings
                                       ).with_endpoint_flags([url], "fake-model")


def test_llm_runs_write_what_the_local_engine_writes_and_fill_the_runs_cache(tmp_path,
                                                                            server):
    src = corpus(tmp_path)
    config = llm(server.url, **SMALL)
    calls = server.requests
    local = local_run(src, tmp_path / "local", config)
    local_calls = server.requests - calls
    calls = server.requests
    ours = sharded_run(src, tmp_path / "out", config, block_lines=5)
    compressed = ours.metrics.trajectories_compressed
    assert compressed > 0 and server.requests - calls == local_calls == compressed
    assert ours.metrics.summaries_by_source["llm"] == compressed
    assert_same(local, ours)
    no_leftovers(ours)
    # The shards' files were merged into the run's cache (README "The summary cache"):
    # a rerun into the same output asks nothing, each shard finding them read-only.
    cache = tmp_path / "out_summary_cache.sqlite"
    assert len(SummaryCache(cache)) == compressed
    calls = server.requests
    again = sharded_run(src, tmp_path / "out", config, block_lines=5)
    assert server.requests == calls
    assert again.metrics.total_summarization_calls == 0
    assert again.metrics.summaries_by_source["cache"] == compressed


def run_one(config: CompressionConfig, job: Any, shard: Any) -> ShardResult:
    """``shard`` run by a worker of its own, started and shut down around it."""
    compressor = worker(config)
    summarizer = compressor.summarizer
    assert isinstance(summarizer, ShardSummarizer)

    async def go() -> ShardResult:
        try:
            return await run_shard(compressor, job, shard, partial(detect, config=config))
        finally:
            await summarizer.shutdown()

    return asyncio.run(go())


def test_a_shard_cut_short_finds_what_it_paid_for(tmp_path, server):
    # Its cache file stays across attempts (README): the attempt after a worker died
    # after its summaries were obtained asks nothing, and reports them as obtained.
    src = write_jsonl(tmp_path / "in.jsonl", 9, seed=4)
    asked = llm(server.url, **SMALL)
    run, config = prepared(src, tmp_path / "out.jsonl", asked)
    [shard] = run.prepare()
    job = run.job()
    first = run_one(config, job, shard)
    assert first.error is None and first.metrics["summaries_by_source"]["llm"] > 0
    folder = sharded.shard_dir(run.parts, shard)
    assert (folder / "cache.sqlite").is_file()
    (folder / "done.json").unlink()  # the worker died before recording it
    calls = server.requests
    again = run_one(config, job, shard)  # a new worker
    assert server.requests == calls
    timings = ("processing_end_time", "processing_duration_seconds")
    assert {k: v for k, v in again.metrics.items() if k not in timings} == {
        k: v for k, v in first.metrics.items() if k not in timings}
    run.record(again)
    assert not (folder / "cache.sqlite").exists()  # merged into the run's
    assert_same(local_run(src, tmp_path / "local.jsonl", asked), run.commit())


def test_the_shard_cache_alone(tmp_path):
    # A shard's own file first, then the run's cache read-only (shard_cache's docstring).
    base = tmp_path / "run.sqlite"
    run_cache = SummaryCache(base)
    run_cache.put("k-base", "m", "from the run")
    run_cache.put("k-both", "m", "the run's older one")
    run_cache.close()
    cache = ShardCache(tmp_path / "shard.sqlite", base)
    cache.put("k-own", "m", "paid for by this shard", origin="row 3")
    cache.put("k-both", "m", "this shard's")
    assert cache.get("k-own") == "paid for by this shard"
    assert cache.get_entry("k-own").origin == "row 3"
    assert cache.get("k-base") == "from the run"
    assert cache.get_entry("k-base").text == "from the run"
    assert cache.get("k-both") == "this shard's"
    assert cache.get("k-none") is None and cache.get_entry("k-none") is None
    assert len(SummaryCache(base)) == 2  # the run's cache is never written by a shard
    cache.close()
    with pytest.raises(sqlite3.ProgrammingError):  # the run's file is closed with it
        cache.base.get_entry("k-base")


def test_a_shard_cache_without_the_runs_cache_only_misses(tmp_path):
    # A worker that cannot see the run's cache (README: --cache-path on a disk the
    # workers do not see): its lookups miss, and what it obtains still reaches the run.
    cache = ShardCache(tmp_path / "shard.sqlite", tmp_path / "elsewhere" / "run.sqlite")
    assert cache.base is None
    assert cache.get("k") is None
    cache.put("k", "m", "obtained here")
    assert cache.get("k") == "obtained here"
    cache.close()
    assert merge_into(tmp_path / "run.sqlite", tmp_path / "shard.sqlite") == 1
    assert SummaryCache(tmp_path / "run.sqlite").get("k") == "obtained here"


def test_a_runs_cache_that_is_no_cache_is_not_used(tmp_path):
    (tmp_path / "run.sqlite").write_bytes(b"not a database at all, but a file")
    cache = ShardCache(tmp_path / "shard.sqlite", tmp_path / "run.sqlite")
    assert cache.base is None and cache.get("k") is None
    cache.close()


def test_merge_into(tmp_path):
    # Copies the entries (creating the run's cache), deletes the shard's file and its
    # side files, returns how many it held; safe to repeat.
    shard_file = tmp_path / "00000" / "cache.sqlite"
    cache = ShardCache(shard_file, tmp_path / "run.sqlite")
    cache.put("a", "m", "first", origin="o")
    cache.put("b", "m", "second")
    cache.close()
    (tmp_path / "00000" / "cache.sqlite-journal").write_bytes(b"")
    run = tmp_path / "run.sqlite"
    assert merge_into(run, shard_file) == 2
    assert sorted(p.name for p in (tmp_path / "00000").iterdir()) == []
    # Its connection to the run's cache is closed: SQLite folded its log into the file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000", "run.sqlite"]
    merged = SummaryCache(run)
    assert (merged.get("a"), merged.get("b"), merged.get_entry("a").origin) == (
        "first", "second", "o")
    merged.close()
    assert merge_into(run, shard_file) == 0  # again: nothing left to merge
    # An attempt that died before creating its table left an empty database file.
    sqlite3.connect(shard_file).close()
    assert shard_file.is_file()
    assert merge_into(run, shard_file) == 0
    assert not shard_file.exists()
    assert len(SummaryCache(run)) == 2
    # Nothing to merge (a shard merged before, its folder gone with the shards folder):
    # nothing happens, not even the run's cache file.
    assert merge_into(tmp_path / "other.sqlite", tmp_path / "gone" / "cache.sqlite") == 0
    assert not (tmp_path / "other.sqlite").exists() and not (tmp_path / "gone").exists()


# a worker's share of the limits (README: concurrency divided, at least 1; rates exactly)


def endpoint_config(**limits: Any) -> CompressionConfig:
    return CompressionConfig.from_dict({
        "summarization": {"backend": "openai", "endpoints": [
            {"base_url": "http://127.0.0.1:9/v1", "model": "m", **limits},
            {"base_url": "http://127.0.0.1:10/v1", "model": "m"}]},
        "processing": {"max_concurrent_requests": 5}}).replace(
            cache_path="/somewhere/cache.sqlite")


def test_worker_config_shares_the_limits():
    config = endpoint_config(max_concurrency=4, rpm=5, tpm=1000)
    assert config.cache_path == "/somewhere/cache.sqlite" and config.metrics_enabled
    two = worker_config(config, 2)
    assert two.max_concurrent_requests == 2
    first, second = two.endpoints
    assert (first.max_concurrency, first.rpm, first.tpm) == (2, 2.5, 500)
    assert (second.max_concurrency, second.rpm, second.tpm) == (None, None, None)
    # The summary cache is the shard's (ShardSummarizer), the metrics the driver's.
    assert two.cache_path is None and not two.metrics_enabled
    assert (first.base_url, first.model) == ("http://127.0.0.1:9/v1", "m")
    six = worker_config(config, 6)
    assert six.max_concurrent_requests == 1 and six.endpoints[0].max_concurrency == 1
    one = worker_config(config, 1)
    assert one.max_concurrent_requests == 5
    assert (one.endpoints[0].max_concurrency, one.endpoints[0].rpm) == (4, 5)
    assert type(one.endpoints[0].rpm) is int


# a worker's summarizer: started once, a cache attached per shard


def region(i: int) -> SummaryRequest:
    turns = [{"from": "gpt", "value": f"Step {i}: ran the build of module {i}."},
             {"from": "tool", "value": f"build {i} failed: missing file src/m{i}.py " * 8}]
    return SummaryRequest(turns, 2, 60)


def test_a_workers_summarizer_across_shards_and_its_shutdown(tmp_path, server, counter):
    config = worker_config(llm(server.url, **SMALL), 1)
    summarizer = ShardSummarizer(make_summarizer(config, counter))
    backend = summarizer.inner
    assert isinstance(backend, OpenAISummarizer) and summarizer.name == "openai"
    run_cache = tmp_path / "run.sqlite"

    async def shard(name: str, request: SummaryRequest) -> str | None:
        """One shard's use of the summarizer, as run_shard and the pipeline make it."""
        summarizer.cache = ShardCache(tmp_path / name, run_cache)
        await summarizer.start()
        assert backend.cache is summarizer.cache  # its summaries go to this shard's file
        summary = await summarizer.summarize(request)
        await summarizer.aclose()
        # Committed and detached; the worker (its HTTP session) stays up.
        assert backend.cache is None and summarizer.cache is None
        return summary.source

    async def go() -> None:
        calls = server.requests
        assert await shard("a.sqlite", region(1)) == "llm"
        assert SummaryCache(tmp_path / "a.sqlite").__len__() == 1
        assert server.requests == calls + 1
        assert await shard("b.sqlite", region(1)) == "llm"  # not in b's file nor the run's
        merge_into(run_cache, tmp_path / "a.sqlite")
        assert await shard("c.sqlite", region(1)) == "cache"  # the run's, read-only
        assert server.requests == calls + 2
        await summarizer.shutdown()  # the worker is done: its session is closed
        with pytest.raises(RuntimeError, match="not started"):
            await backend.summarize(region(2))
        assert server.requests == calls + 2
        await summarizer.start()  # started again, it opens a session again
        assert (await summarizer.summarize(region(2))).source == "llm"
        await summarizer.shutdown()

    asyncio.run(go())


def test_shutdown_commits_a_cache_still_attached(tmp_path, counter):
    # "The worker is done": whatever shard cache is still attached is committed and
    # closed (here with the extractive backend, which holds no cache itself).
    summarizer = ShardSummarizer(make_summarizer(extractive(), counter))
    cache = ShardCache(tmp_path / "a.sqlite", tmp_path / "run.sqlite")
    summarizer.cache = cache

    async def go() -> None:
        await summarizer.start()
        cache.put("k", "m", "kept")
        await summarizer.shutdown()

    asyncio.run(go())
    assert summarizer.cache is None
    other = SummaryCache(tmp_path / "a.sqlite")
    assert other.get("k") == "kept"
    other.close()


# errors come back in the result; a shard's attempts are counted


def strict_shard(tmp_path: Path) -> tuple[sharded.ShardedRun, CompressionConfig, Any]:
    src = corpus(tmp_path)
    run, config = prepared(src, tmp_path / "out", extractive(**SMALL), RunOptions(strict=True))
    run.prepare()
    return run, config, run.shards[1]  # part1.jsonl: its last line is broken


def test_a_strict_stop_comes_back_as_its_kind(tmp_path):
    run, config, shard = strict_shard(tmp_path)
    result = run_one(config, run.job(), shard)
    assert result.error is not None and result.error["kind"] == "strict"
    assert f"{run.inputs[1].path}:10: invalid JSON" in result.error["message"]
    assert not (sharded.shard_dir(run.parts, shard) / "done.json").exists()


def test_a_shard_tried_three_times_stops_the_run(tmp_path):
    # Each attempt is counted in the shard's folder until it finishes; the one after the
    # third is refused (README: a shard whose actor dies 3 times stops the run).
    run, config, shard = strict_shard(tmp_path)
    folder = sharded.shard_dir(run.parts, shard)
    for attempt in (1, 2, 3):
        assert run_one(config, run.job(), shard).error["kind"] == "strict"
        assert (folder / "attempts").read_text() == str(attempt)
    result = run_one(config, run.job(), shard)
    assert result.error == {"kind": "internal", "message": (
        f"shard 00001 of {run.inputs[1].path} was tried 3 times and its worker died each "
        "time; the run stopped")}


def test_a_shard_whose_worker_died_twice_runs_a_third_time(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 4)
    run, config = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL))
    [shard] = run.prepare()
    folder = sharded.shard_dir(run.parts, shard)
    folder.mkdir()
    (folder / "attempts").write_text("2")
    result = run_one(config, run.job(), shard)
    assert result.error is None and result.rows == 4
    assert not (folder / "attempts").exists()  # finished: nothing to count any more


def test_a_rejected_api_key_comes_back_as_fatal(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 6)
    with FakeLLMServer(api_key="the-right-key").in_thread() as guarded:
        run, config = prepared(src, tmp_path / "out.jsonl", llm(guarded.url, **SMALL))
        [shard] = run.prepare()
        result = run_one(config, run.job(), shard)
    assert result.error is not None and result.error["kind"] == "fatal"


def test_an_io_error_comes_back_as_output_with_its_file(tmp_path):
    # README exit codes: 4 for an I/O error; the message names the file.
    src = write_jsonl(tmp_path / "in.jsonl", 3)
    run, config = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL))
    [shard] = run.prepare()
    src.unlink()  # gone between planning and the shard
    assert run_one(config, run.job(), shard).error == {
        "kind": "output", "message": f"I/O error: {src}: No such file or directory"}


def test_an_unforeseen_error_comes_back_as_internal_and_the_cache_is_detached(
        tmp_path, monkeypatch, counter):
    # A bad kill-hook spec fails after the shard's cache was attached: the error comes
    # back (kind internal, exit code 4), and the worker's summarizer keeps no cache.
    monkeypatch.setenv(shard_mod.KILL_ENV, f"{tmp_path / 'marker'}:many")
    src = write_jsonl(tmp_path / "in.jsonl", 3)
    run, config = prepared(src, tmp_path / "out.jsonl", llm("http://127.0.0.1:9/v1", **SMALL))
    [shard] = run.prepare()
    compressor = worker(config)
    summarizer = compressor.summarizer
    assert isinstance(summarizer, ShardSummarizer)
    result = asyncio.run(run_shard(compressor, run.job(), shard,
                                   partial(detect, config=config)))
    assert result.error is not None and result.error["kind"] == "internal"
    assert "many" in result.error["message"]
    assert summarizer.cache is None
    cache = sharded.shard_dir(run.parts, shard) / "cache.sqlite"
    assert cache.is_file()  # created, then closed: it can be merged
    assert merge_into(tmp_path / "run.sqlite", cache) == 0


# what a shard reports, and what it does not print


def test_a_shard_reports_its_rows_and_times(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 5)
    with src.open("ab") as f:
        f.write(b"[1]\n")
    run, config = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL))
    [shard] = run.prepare()
    result = run_one(config, run.job(), shard)
    assert result.error is None
    assert result.rows == 6  # written, over the limit or rejected: every row read
    assert result.metrics["rows_rejected"] == 1 and len(result.warnings) == 1
    assert result.metrics["processing_start_time"] == run.started
    assert result.seconds > 0
    # CPU seconds of this shard: no more than this process has spent in all.
    assert 0 < result.cpu_seconds <= time.process_time()


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (where a progress bar would be drawn)."""

    def isatty(self) -> bool:
        return True


def test_a_shard_prints_nothing_the_driver_reports(tmp_path, monkeypatch):
    # The driver shows progress and notes (README): a shard is silent, on a terminal and
    # when the run is not --quiet or is a --resume.
    src = write_jsonl(tmp_path / "in.jsonl", 6)
    run, config = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL),
                           RunOptions(quiet=False, resume=True))
    run.prepare()
    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    result = run_one(config, run.job(), run.shards[0])
    assert result.error is None and result.rows == 6
    assert stderr.getvalue() == ""


def test_the_kill_hook_disarmed_changes_nothing(tmp_path, monkeypatch):
    # The test hook (README "Development") fires once: while its marker file exists, a
    # worker reads on past the record count it names.
    marker = tmp_path / "fired"
    marker.write_text("worker 1 exited at somewhere\n")
    monkeypatch.setenv(shard_mod.KILL_ENV, f"{marker}:2")
    src = write_jsonl(tmp_path / "in.jsonl", 5)
    ours = sharded_run(src, tmp_path / "out.jsonl", extractive(**SMALL), block_lines=3)
    assert marker.read_text() == "worker 1 exited at somewhere\n"
    assert_same(local_run(src, tmp_path / "local.jsonl", extractive(**SMALL)), ours)


# the driver's own checks and records


def test_the_default_block_is_20000_lines(tmp_path):
    # README "On a Ray cluster": a plain .jsonl file is cut into ranges of 20,000 lines.
    # (The planner counts lines only: these need not be rows.)
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"{}\n" * 20_001)
    run, _ = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL))
    run.prepare()
    assert plan_of(run) == [(0, 0, 20_000), (0, 20_000, None)]
    src.write_bytes(b"{}\n" * 20_000)
    run, _ = prepared(src, tmp_path / "again.jsonl", extractive(**SMALL))
    run.prepare()
    assert plan_of(run) == [(0, 0, None)]


def test_an_input_inside_the_shards_folder_is_refused_before_anything_is_deleted(tmp_path):
    # The shards folder is deleted by a fresh run and at the end: an input in it would go.
    folder = tmp_path / ".out.shards"
    folder.mkdir()
    src = write_jsonl(folder / "in.jsonl", 3)
    run, _ = prepared(src, tmp_path / "out.jsonl", extractive(**SMALL))
    with pytest.raises(ConfigError, match=r"lies in .*\.out\.shards \(the shards folder\)"):
        run.prepare()
    assert src.is_file() and len(read_jsonl(src)) == 3


def test_the_metrics_file_records_the_runs_times(tmp_path):
    # Its "processing" section (the one the comparisons leave out): the run's start, its
    # end, and the seconds of processing, those of the interrupted run included.
    src = corpus(tmp_path)
    config = extractive(**SMALL)
    first = interrupted(src, tmp_path / "out", config, done=2)
    spent = sum(first.results[i].seconds for i in (0, 1))
    manifest = json.loads(first.layout.checkpoint.read_text())
    assert manifest["elapsed"] >= spent > 0  # the manifest notes the time spent
    manifest["elapsed"] = 1000.0  # as if the interrupted run had taken that long
    first.layout.checkpoint.write_text(json.dumps(manifest))
    again, config = prepared(src, tmp_path / "out", config, RunOptions(resume=True))
    before = datetime.now()
    run_pending(again, config)
    ours = again.commit()
    after = datetime.now()
    processing = json.loads(ours.layout.metrics.read_text())["processing"]
    assert processing["start_time"] == first.started == ours.metrics.processing_start_time
    assert datetime.fromisoformat(first.started) <= before
    assert before <= datetime.fromisoformat(processing["end_time"]) <= after
    assert 1000 < ours.metrics.processing_duration_seconds < 1000 + (
        after - before).total_seconds() + 1
    assert processing["duration_seconds"] == round(ours.metrics.processing_duration_seconds, 2)


def test_commit_is_safe_to_repeat_after_a_crash_part_way(tmp_path):
    # commit() (its docstring): a commit cut short is simply done again. The first stops
    # when a shard's record is missing (after the outputs were renamed in); once it is
    # back, and with the manifest already dropped by a later crash, commit ends the run.
    src = corpus(tmp_path)
    config = extractive(**SMALL)
    run, config = prepared(src, tmp_path / "out", config)
    run_pending(run, config)
    done = sharded.shard_dir(run.parts, run.shards[2]) / "done.json"
    record = done.read_bytes()
    done.unlink()
    with pytest.raises(OutputError, match=r"the shard .*00002 lost its record; run without "
                                          r"--resume to start over"):
        run.commit()
    assert (tmp_path / "out" / "part0.jsonl").is_file()  # renamed in before it stopped
    done.write_bytes(record)
    run.layout.checkpoint.unlink()
    ours = run.commit()
    assert_same(local_run(src, tmp_path / "local", extractive(**SMALL)), ours)
    no_leftovers(ours)


def test_a_rerun_replaces_the_outputs_of_the_last_run(tmp_path):
    src = corpus(tmp_path)
    sharded_run(src, tmp_path / "out", extractive(**SMALL))
    for path in src.iterdir():  # new rows, and half as many
        write_jsonl(path, 4, seed=9)
    config = extractive(**SMALL)
    ours = sharded_run(src, tmp_path / "out", config)  # one shard per file: renamed in
    assert_same(local_run(src, tmp_path / "local", config), ours)
    assert ours.metrics.total_trajectories == 12
    ranges = sharded_run(src, tmp_path / "ranges", config, block_lines=3)
    for path in src.iterdir():
        write_jsonl(path, 5, seed=11)
    ranges = sharded_run(src, tmp_path / "ranges", config, block_lines=3)  # concatenated
    assert_same(local_run(src, tmp_path / "local2", config), ranges)


def test_resume_merges_the_cache_of_a_shard_no_driver_recorded(tmp_path, server):
    # The driver died after a shard finished and before it recorded it: the resumed run
    # finds the shard finished, and its summaries still join the run's cache.
    src = corpus(tmp_path)
    config = llm(server.url, **SMALL)
    run, config = prepared(src, tmp_path / "out", config)
    [first, *_] = run.prepare()
    result = run_one(config, run.job(), first)  # finished, never recorded
    paid = result.metrics["summaries_by_source"]["llm"]
    assert paid > 0
    again, config = prepared(src, tmp_path / "out", llm(server.url, **SMALL),
                             RunOptions(resume=True))
    assert [s.index for s in again.prepare()] == [1, 2]
    assert not (sharded.shard_dir(again.parts, first) / "cache.sqlite").exists()
    assert len(SummaryCache(again.cache)) == paid


def test_the_summarizers_notes_come_back_in_the_result(tmp_path, capsys):
    # The first failure of each kind from an endpoint is a note (openai.py's docstring):
    # a shard collects them for the driver to show instead of printing them.
    src = write_jsonl(tmp_path / "in.jsonl", 9, seed=4)
    with FakeLLMServer(faults={"not_json": 0.5}, seed=3).in_thread() as flaky:
        run, config = prepared(src, tmp_path / "out.jsonl",
                               llm(flaky.url, retry_delay=0.01, **SMALL))
        [shard] = run.prepare()
        capsys.readouterr()
        result = run_one(config, run.job(), shard)
    assert result.error is None
    assert result.notes and any("not_json" in n or "JSON" in n for n in result.notes)
    assert capsys.readouterr().err == ""


# every dialect in every container


def sample_rows(name: str) -> list[dict]:
    path = SAMPLES / name
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return read_jsonl(path)


def flat_parts(rows: list[dict]) -> list[dict]:
    """OpenAI rows with every list of text parts joined into one string: Parquet holds no
    field that is a string in one message and a list in another (LLaMA-Factory's
    `messages` contents are always lists of parts, kept)."""
    if not any(isinstance(m.get("content"), str) for r in rows for m in r.get("messages", [])):
        return rows
    for row in rows:
        for message in row.get("messages", []):
            content = message.get("content")
            if isinstance(content, list):
                message["content"] = "\n".join(p.get("text") or p.get("value") or ""
                                               for p in content)
    return rows


def write_rows(path: Path, rows: list[dict]) -> None:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(flat_parts(rows)), path)
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                        encoding="utf-8")


DIALECTS = {"hermes": "trajectories.jsonl", "openai": "openai_messages.jsonl",
            "lf_messages": "llamafactory_messages.jsonl",
            "lf_sharegpt": "llamafactory_sharegpt.json"}


@pytest.mark.parametrize("container", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_a_sharded_run_writes_what_the_local_engine_writes(tmp_path, dialect, container):
    # Two files (two shards at least; a JSONL file also cut into ranges of 2 lines): the
    # outputs, over-limit, rejects and metrics files are the local engine's, byte for byte.
    rows = sample_rows(DIALECTS[dialect])[:6]
    src = tmp_path / "in"
    src.mkdir()
    write_rows(src / f"a.{container}", rows[:4])
    write_rows(src / f"b.{container}", rows[4:])
    config = extractive(**MATRIX)
    local = local_run(src, tmp_path / "local", config)
    ours = sharded_run(src, tmp_path / "sharded", config, block_lines=2)
    assert local.metrics.total_trajectories == 6
    assert ours.metrics.trajectories_compressed > 0
    assert_same(local, ours)
    no_leftovers(ours)


def test_a_saved_hugging_face_dataset_writes_what_the_local_engine_writes(tmp_path):
    # A `save_to_disk` folder of 3 Arrow shards: one shard of the run per Arrow file.
    import datasets

    rows = read_jsonl(write_jsonl(tmp_path / "rows.jsonl", 12, seed=5))
    src = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(src), num_shards=3)
    config = extractive(**SMALL)
    run, _ = prepared(src, tmp_path / "ours", config)
    assert len(run.prepare()) == 3
    local = local_run(src, tmp_path / "local", config)
    ours = sharded_run(src, tmp_path / "ours", config)
    assert local.metrics.total_trajectories == 12 and local.metrics.trajectories_compressed
    assert_same(local, ours)
    no_leftovers(ours)
    # README "Outputs": a dataset card beside the Parquet shards names each split's files,
    # so that load_dataset(output) gives back every split by its name.
    card = (tmp_path / "ours" / "README.md").read_text(encoding="utf-8")
    assert "  - split: train\n    path: train-*-of-*\n" in card
    assert card == (tmp_path / "local" / "README.md").read_text(encoding="utf-8")
