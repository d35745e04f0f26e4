"""Parity: the batch and the live compressor keep the same guarantees (§10).

Both run on the same conversations — the bundled samples and generated ones, converted
with `trajectory_compressor.dialects.openai` — and both results are checked, as OpenAI messages,
by one function: head kept, tail kept, exactly one summary, no orphaned tool call or
result, tokens never grow, input never mutated, and on the summarizer's failure path
every surviving message intact.
"""

from __future__ import annotations

import copy
import json

import pytest
from conversations import content, conversations, orphans, summary_indices
from hypothesis import HealthCheck, given, settings

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.dialects.openai import openai_to_sharegpt, sharegpt_to_openai
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.live import COMPACTION_NOTE, SUMMARY_PREFIX, ContextCompressor
from trajectory_compressor.live.markers import failure_marker, split_merged
from trajectory_compressor.live.messages import MessageTokens

SAMPLE_ROWS = range(0, 50, 5)  # ten rows of every shape keep the run fast


class FailingBackend(Summarizer):
    """A batch backend whose every attempt fails: the batch path falls back (extractive)."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        raise SummaryFailed("endpoint down", SummaryUsage(api_calls=1, errors=1))


def failing_callable(prompt: str) -> str:
    raise TimeoutError("summarizer timed out")


def run_batch(counter, turns, failing=False):
    """The batch compressor with the extractive summarizer and a small target."""
    total = sum(counter.count_many([t["value"] for t in turns]))
    target = max(total // 3, 400)
    config = CompressionConfig(summarizer="extractive", target_max_tokens=target,
                               summary_target_tokens=min(300, target // 4))
    compressor = TrajectoryCompressor(config, counter=counter,
                                      summarizer=FailingBackend() if failing else None)
    out, metrics = compressor.compress_trajectory(turns)
    return out, metrics


def run_live(counter, messages, failing=False, context_length=None):
    total = sum(counter.count_many([content(m) for m in messages]))
    compressor = ContextCompressor(context_length=context_length or max(total, 4000),
                                   summarizer=failing_callable if failing else None,
                                   token_counter=counter)
    return compressor.compress_with_feedback(messages)


def check_shared_invariants(before, after, *, failing_live: bool = False) -> range:
    """The §10 guarantees on OpenAI messages; returns the input range the summary replaced."""
    assert orphans(after) == (set(), set())
    (s,) = summary_indices(after)
    # head kept (the first system message may have gained a notice at its end)
    for i in range(s):
        if i == 0 and before[0]["role"] == "system":
            assert after[0]["content"].startswith(before[0]["content"])
            assert {**after[0], "content": before[0]["content"]} == before[0]
        else:
            assert after[i] == before[i]
    # tail kept; a summary merged into the first tail message keeps that message's text
    summary, original = split_merged(content(after[s]))
    kept = after[s:] if original is not None else after[s + 1:]
    tail = before[len(before) - len(kept):]
    replaced = range(s, len(before) - len(kept))
    if original is not None:
        assert original == (tail[0].get("content") or "")
        assert {**kept[0], "content": tail[0].get("content")} == tail[0]
        kept, tail = kept[1:], tail[1:]
    assert kept == tail
    if failing_live:  # the static marker, and no summary text
        assert summary.strip() == failure_marker(len(replaced))
    return replaced


def sample_row(path, index):
    return json.loads(path.read_text(encoding="utf-8").splitlines()[index])


@pytest.mark.parametrize("index", SAMPLE_ROWS)
@pytest.mark.parametrize("failing", [False, True])
def test_both_compressors_keep_the_guarantees_on_the_samples(counter, sample_jsonl, index,
                                                            failing):
    turns = sample_row(sample_jsonl, index)["conversations"]
    snapshot = copy.deepcopy(turns)
    messages = sharegpt_to_openai(turns)
    messages_snapshot = copy.deepcopy(messages)

    batch_turns, metrics = run_batch(counter, turns, failing)
    live, feedback = run_live(counter, messages, failing)
    assert turns == snapshot and messages == messages_snapshot  # inputs never mutated

    if metrics.was_compressed:
        check_shared_invariants(messages, sharegpt_to_openai(batch_turns))
        assert metrics.compressed_tokens < metrics.original_tokens
        assert metrics.summary_source == ("fallback" if failing else "extractive")
    else:
        assert batch_turns == turns

    replaced = check_shared_invariants(messages, live, failing_live=failing)
    assert feedback["tokens_after"] < feedback["tokens_before"]
    assert content(live[replaced.start]).startswith(SUMMARY_PREFIX)
    assert live[0]["content"].endswith(COMPACTION_NOTE)
    # the live result converts back to a valid trajectory
    back = openai_to_sharegpt(live)
    assert [t["from"] for t in back][:2] == ["system", "human"]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(before=conversations())
def test_both_compressors_keep_the_guarantees_on_generated_conversations(counter, before):
    snapshot = copy.deepcopy(before)
    turns = openai_to_sharegpt(before)
    for failing in (False, True):
        batch_turns, metrics = run_batch(counter, turns, failing)
        if metrics.was_compressed:
            # compared after the same conversion: it re-spells call arguments
            check_shared_invariants(sharegpt_to_openai(turns), sharegpt_to_openai(batch_turns))
            assert metrics.compressed_tokens <= metrics.original_tokens

        live, feedback = run_live(counter, before, failing)
        assert before == snapshot
        if feedback["noop"]:
            assert live == before
            continue
        replaced = check_shared_invariants(before, live, failing_live=failing)
        # Tokens never grow once the replaced messages outweigh what a compaction must add
        # (prefix, marker or summary header, system note); below that, the feedback says
        # the estimate rose.
        removed = sum(MessageTokens(counter).count_messages(before[replaced.start:replaced.stop]))
        fixed = counter.count(failure_marker(len(replaced)) + COMPACTION_NOTE) + 32
        rose = feedback["tokens_after"] > feedback["tokens_before"]
        assert (feedback["note"] is not None) == rose
        if removed > fixed:
            assert not rose
