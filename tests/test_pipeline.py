"""The streaming pipeline: input order under concurrency, and memory that stays flat."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys

from tests.cli_helpers import ROOT, read_jsonl
from tests.datagen import write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryRequest,
    SummaryUsage,
    finish_summary_text,
)
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.layout import plan_layout
from trajectory_compressor.engine.local import RunOptions, run_pipeline
from trajectory_compressor.formats.registry import discover_inputs


class JitterSummarizer(Summarizer):
    """A real backend whose answers take a random time: later rows often finish first."""

    name = "jitter"

    def __init__(self, seed: int, gate_at: int = 11) -> None:
        self.rng = random.Random(seed)
        self.calls = 0
        self.finished: list[str] = []  # summaries in the order they were done
        self.most_in_flight = 0
        self._in_flight = 0
        # The first answers wait until ``gate_at`` requests are in flight together (or a
        # generous timeout passes): concurrency is then shown by events, not by how fast
        # a loaded machine happens to spawn tasks within a few milliseconds.
        self._gate = asyncio.Event()
        self._gate_at = gate_at

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        self._in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self._in_flight)
        if self._in_flight >= self._gate_at:
            self._gate.set()
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._gate.wait(), 10)
            await asyncio.sleep(self.rng.random() * 0.03)
        finally:
            self._in_flight -= 1
        first = request.turns[0]["value"].split("\n")[0][:40]
        text = finish_summary_text(f"from turn {request.first_index}: {first}")
        self.finished.append(text)
        return Summary(text, "llm", SummaryUsage(api_calls=1))


def _run(tmp_path, src, name: str, seed: int, counter) -> tuple[JitterSummarizer, bytes]:
    config = CompressionConfig(summarizer="extractive", target_max_tokens=500,
                               summary_target_tokens=60, batch_rows=16, window_rows=48,
                               summary_references="off")
    summarizer = JitterSummarizer(seed)
    compressor = TrajectoryCompressor(config, summarizer=summarizer, counter=counter)
    inputs = discover_inputs(str(src))
    layout = plan_layout(str(src), inputs, str(tmp_path / name), config, single_file=True)
    result = run_pipeline(compressor, inputs, layout, RunOptions(quiet=True))
    assert result.exit_code == 0
    return summarizer, (tmp_path / name).read_bytes()


def test_rows_are_written_in_input_order_whatever_the_latencies(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", 300)
    first, out_a = _run(tmp_path, src, "a.jsonl", seed=1, counter=counter)
    _, out_b = _run(tmp_path, src, "b.jsonl", seed=2, counter=counter)
    assert out_a == out_b
    assert first.calls == 100 and first.most_in_flight > 10  # truly concurrent
    rows_in = read_jsonl(src)
    rows_out = read_jsonl(tmp_path / "a.jsonl")
    assert [r["id"] for r in rows_out] == [r["id"] for r in rows_in]
    written = [t["value"] for r in rows_out for t in r["conversations"]
               if t["value"].startswith("[CONTEXT SUMMARY]")]
    assert sorted(written) == sorted(first.finished) and written != first.finished
    for before, after in zip(rows_in, rows_out, strict=True):
        m = after.get("compression_metrics")
        if not (m and m["was_compressed"]):
            continue
        start = m["compression_region"]["start_idx"]
        summary = after["conversations"][start]["value"]
        # Each row got the summary of its own region, not a neighbour's.
        expected = before["conversations"][start]["value"].split("\n")[0][:40]
        assert summary == finish_summary_text(f"from turn {start}: {expected}")


_MEASURE = """
import resource, sys
from trajectory_compressor.app.cli import main
sys.argv = ["trajectory-compressor", "compress", *sys.argv[1:]]
try:
    main()
except SystemExit as exit:
    print(exit.code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _peak_rss_kb(src, out) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(src), "-o", str(out),
                           "--summarizer", "extractive", "--target-max-tokens", "500",
                           "--summary-target-tokens", "60", "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300)
    code, rss = proc.stdout.split()
    assert code == "0", proc.stderr
    return int(rss)


def test_peak_memory_does_not_follow_the_number_of_rows(tmp_path):
    small = write_jsonl(tmp_path / "small.jsonl", 300)
    large = write_jsonl(tmp_path / "large.jsonl", 3000)
    small_rss = _peak_rss_kb(small, tmp_path / "small_out.jsonl")
    large_rss = _peak_rss_kb(large, tmp_path / "large_out.jsonl")
    # Ten times the rows; the process holds the tokenizer and a bounded window either way.
    assert large_rss < small_rss * 1.3, (small_rss, large_rss)
