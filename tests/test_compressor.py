"""`TrajectoryCompressor` end to end on one row: assembly, metrics, fields, fallback."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.engine.compressor import TrajectoryCompressor

WORDS = ["alpha", "beta", "gamma", "delta", "résumé", "数据", "tool", "file.py", "{", "}"]


class FailingSummarizer(Summarizer):
    """A real backend that always fails after two attempts."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        raise SummaryFailed("down", SummaryUsage(api_calls=2, errors=2, retries=1))


class SlowSummarizer(Summarizer):
    async def summarize(self, request: SummaryRequest) -> Summary:
        await asyncio.sleep(5)
        raise AssertionError("unreachable")


def compressor(counter, summarizer=None, **cfg):
    config = CompressionConfig(summarizer="extractive", **cfg)
    return TrajectoryCompressor(config, summarizer=summarizer, counter=counter)


@st.composite
def rows(draw):
    turns = [{"from": "system", "value": "You are an agent. " * draw(st.integers(1, 20))},
             {"from": "human", "value": " ".join(draw(st.lists(st.sampled_from(WORDS),
                                                                min_size=1, max_size=30)))}]
    for i in range(draw(st.integers(2, 18))):
        turns.append({"from": "gpt", "value": f"<tool_call>{{\"name\": \"t{i}\"}}</tool_call> "
                      + " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=60))),
                      "weight": i % 2})
        for _ in range(draw(st.integers(0, 2))):
            turns.append({"from": "tool", "value": "<tool_response>" + " ".join(
                draw(st.lists(st.sampled_from(WORDS), max_size=300))) + "</tool_response>"})
    return {"id": draw(st.integers()), "conversations": turns, "reward": 0.5,
            "meta": {"k": [1, 2]}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(), st.integers(150, 1500))
def test_compressed_row_invariants(counter, row, target):
    original = copy.deepcopy(row)
    comp = compressor(counter, target_max_tokens=target, summary_target_tokens=60)
    result = asyncio.run(comp.compress_row(row))
    assert row == original, "the input row must not be mutated"
    out = result.row
    assert {k: v for k, v in out.items() if k not in ("conversations", "compression_metrics")} \
        == {k: v for k, v in original.items() if k != "conversations"}
    m = result.metrics
    turns = original["conversations"]
    new = out["conversations"]
    recount = sum(counter.count_many([t["value"] for t in new]))
    assert m.compressed_tokens == recount
    if result.plan.action == "skip":
        assert out is row and "compression_metrics" not in out
        return
    assert out["compression_metrics"] == m.to_dict()
    summaries = [t for t in new if t["value"].startswith(SUMMARY_PREFIX)]
    if result.plan.region is None:
        assert new == turns and not summaries
        return
    region = result.plan.region
    assert len(summaries) == 1
    # A summary is context, never a training target: weight 0 where turns carry weights.
    weighted = {"weight": 0} if any("weight" in t for t in turns) else {}
    assert new[region.start] == {"from": "human", "value": summaries[0]["value"], **weighted}
    assert summaries[0]["value"].count(SUMMARY_PREFIX) == 1
    assert new[region.start + 1:] == turns[region.end:], "tail must be unchanged"
    for i in range(region.start):
        if turns[i]["from"] == "system" and i == 0:
            assert new[i]["value"] == turns[i]["value"] + comp.config.summary_notice_text
        else:
            assert new[i] == turns[i]
    assert m.turns_removed == region.turns - 1
    assert m.summary_source == "extractive"
    assert counter.count(summaries[0]["value"]) <= 60
    # The extractive summary's budget leaves room for the notice: tokens never grow.
    assert m.compressed_tokens < m.original_tokens


def test_failed_summary_falls_back_and_keeps_the_row(counter, sample_jsonl):
    row = json.loads(sample_jsonl.read_text().splitlines()[1])
    comp = compressor(counter, summarizer=FailingSummarizer())
    result = asyncio.run(comp.compress_row(row))
    m = result.metrics
    assert m.was_compressed and m.summary_source == "fallback"
    assert m.summarization_errors == 2 and m.summarization_api_calls == 2
    assert result.row["id"] == row["id"]
    assert any(t["value"].startswith(SUMMARY_PREFIX) for t in result.row["conversations"])


def test_deadline_leaves_the_row_unchanged_and_flagged(counter, sample_jsonl):
    row = json.loads(sample_jsonl.read_text().splitlines()[1])
    comp = compressor(counter, summarizer=SlowSummarizer(), per_trajectory_timeout=0.2)
    result = asyncio.run(comp.compress_row(row))
    assert result.row["conversations"] == row["conversations"]
    assert result.metrics.failed and "deadline" in result.metrics.error
    assert result.row["compression_metrics"]["error"] == result.metrics.error


def test_sync_api_on_a_sample(counter, sample_jsonl):
    row = json.loads(sample_jsonl.read_text().splitlines()[1])
    comp = TrajectoryCompressor(CompressionConfig(), ExtractiveSummarizer(counter.count), counter)
    turns, metrics = comp.compress_trajectory(row["conversations"])
    assert metrics.was_compressed
    assert metrics.compressed_tokens == sum(counter.count_many([t["value"] for t in turns]))
    assert metrics.compressed_tokens < metrics.original_tokens


def test_metrics_key_order_matches_the_reference():
    from trajectory_compressor.core.metrics import TrajectoryMetrics

    keys = list(TrajectoryMetrics().to_dict())
    assert keys[:13] == [
        "original_tokens", "compressed_tokens", "tokens_saved", "compression_ratio",
        "original_turns", "compressed_turns", "turns_removed", "compression_region",
        "was_compressed", "still_over_limit", "skipped_under_target",
        "summarization_api_calls", "summarization_errors"]
    assert keys[13] == "summary_source"


@pytest.mark.parametrize("notice", [True, False])
def test_summary_notice_switch(counter, sample_jsonl, notice):
    row = json.loads(sample_jsonl.read_text().splitlines()[1])
    comp = compressor(counter, add_summary_notice=notice)
    result = asyncio.run(comp.compress_row(row))
    system = result.row["conversations"][0]["value"]
    assert system.endswith(comp.config.summary_notice_text) == notice
