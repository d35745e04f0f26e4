"""`ContextCompressor` through its public API: the guarantees a chat agent relies on."""

from __future__ import annotations

import asyncio
import copy

import pytest
from conversations import (
    content,
    conversation,
    conversations,
    latest_user,
    orphans,
    summary_indices,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.conversation import SUMMARY_PREFIX as LEGACY_PREFIX
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.live import (
    COMPACTION_NOTE,
    SECTIONS,
    SUMMARY_PREFIX,
    ContextCompressor,
)
from trajectory_compressor.live.placement import settle

SENTINEL = "SUMMARY-TEXT-7f3a"


class Recorder:
    """A working summarizer that keeps the prompts it was given."""

    def __init__(self, reply: str = f"## Active Task\n{SENTINEL}") -> None:
        self.prompts: list[str] = []
        self.reply = reply

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.reply


def failing(prompt: str) -> str:
    raise ConnectionError("summarizer endpoint is down")


def pushed_head(messages, first_n=3):
    """Where the protected head ends: the first ``first_n`` messages, past tool results."""
    while messages[first_n]["role"] == "tool":
        first_n += 1
    return first_n


def check_chat_invariants(before, after, *, summary_text: str | None, shorter=True) -> None:
    """The guarantees of the hidden check: shape, pairing, roles, system and latest user."""
    if shorter:
        assert len(after) < len(before)
    assert orphans(after) == (set(), set())
    system_in, system_out = before[0], after[0]
    assert system_out["role"] == "system"
    assert system_out["content"].startswith(system_in["content"])
    assert system_out["content"].count(COMPACTION_NOTE) == 1
    assert latest_user(before) in after
    found = summary_indices(after)
    assert len(found) == 1
    i = found[0]
    role = after[i]["role"]
    assert after[i - 1]["role"] != role
    assert i + 1 == len(after) or after[i + 1]["role"] != role
    assert content(after[i]).count(SUMMARY_PREFIX) == 1
    if summary_text is None:
        assert "Summary unavailable" in content(after[i])
        assert SENTINEL not in str(after)
    else:
        assert sum(content(m).count(summary_text) for m in after) == 1


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("context_length", [8_000, 32_000])
def test_working_summarizer_keeps_every_guarantee(seed, context_length):
    before = conversation(seed, rounds=4)
    snapshot = copy.deepcopy(before)
    after = ContextCompressor(context_length=context_length, summarizer=Recorder()).compress(
        before)
    assert before == snapshot
    check_chat_invariants(before, after, summary_text=SENTINEL)


@pytest.mark.parametrize("seed", range(6))
def test_failing_summarizer_inserts_the_static_marker_and_no_summary(seed):
    before = conversation(seed, rounds=4)
    snapshot = copy.deepcopy(before)
    compressor = ContextCompressor(context_length=16_000, summarizer=failing)
    after = compressor.compress(before)
    assert before == snapshot
    check_chat_invariants(before, after, summary_text=None)
    assert compressor.last_feedback["summary"] == "failed"
    assert "ConnectionError" in compressor.last_feedback["error"]
    # Every message but the marker is an input message (the system one with the note).
    marker = summary_indices(after)[0]
    assert all(m in before for i, m in enumerate(after) if i not in (0, marker))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=conversations(), context_length=st.sampled_from([4_000, 16_000, 64_000]),
       works=st.booleans())
def test_guarantees_hold_on_generated_conversations(before, context_length, works):
    snapshot = copy.deepcopy(before)
    compressor = ContextCompressor(context_length=context_length,
                                   summarizer=Recorder() if works else failing)
    after, feedback = compressor.compress_with_feedback(before)
    assert before == snapshot
    assert after is not before
    tokens = compressor.tokens.count_messages(before)
    settled = settle(before, tokens, compressor.protect_first_n, compressor.tail_token_budget)
    if settled is None:
        assert feedback["noop"] and after == before
        return
    head, placement = settled
    # One message replaced by one summary cannot shorten the list; two or more must.
    check_chat_invariants(before, after, summary_text=SENTINEL if works else None,
                          shorter=placement.merge or placement.tail_start - head >= 2)


def test_should_compress_is_the_threshold():
    compressor = ContextCompressor(context_length=100_000, threshold=0.5)
    assert compressor.threshold_tokens == 50_000
    assert compressor.tail_token_budget == 10_000
    assert not compressor.should_compress(49_999)
    assert compressor.should_compress(50_000)


def test_two_ineffective_passes_stop_automatic_compression():
    compressor = ContextCompressor(context_length=10_000)
    short = conversation(1, rounds=1, steps=1)[:4]  # nothing to compress: every pass saves 0
    assert compressor.should_compress(6_000)
    compressor.compress(short)
    assert compressor.should_compress(6_000)
    compressor.compress(short)
    assert not compressor.should_compress(6_000)
    # An effective pass resets the guard.
    compressor.compress(conversation(3, rounds=4))
    assert compressor.should_compress(6_000)


def test_manual_compression_works_under_the_threshold():
    before = conversation(2, rounds=2, output_words=(10, 30))
    compressor = ContextCompressor(context_length=1_000_000, summarizer=Recorder())
    assert not compressor.should_compress(sum(len(content(m)) for m in before) // 4)
    after = compressor.compress(before)
    check_chat_invariants(before, after, summary_text=SENTINEL)


def test_feedback_reports_no_op_and_counts():
    compressor = ContextCompressor(context_length=50_000)
    tiny = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}]
    after, feedback = compressor.compress_with_feedback(tiny, current_tokens=12)
    assert after == tiny and after is not tiny
    assert feedback["noop"] and feedback["message"].startswith("No changes")
    assert feedback["prompt_tokens"] == 12

    before = conversation(4, rounds=4)
    after, feedback = compressor.compress_with_feedback(before)
    assert not feedback["noop"]
    assert feedback["message"] == f"Compressed: {len(before)} → {len(after)} messages"
    assert feedback["tokens_after"] < feedback["tokens_before"]
    assert feedback["note"] is None
    assert compressor.last_feedback is feedback
    assert compressor.compression_count == 1


def test_feedback_notes_when_tokens_rose():
    before = conversation(5, rounds=2, output_words=(5, 10))
    verbose = Recorder(reply="## Active Task\n" + "very long summary " * 2000)
    _, feedback = ContextCompressor(context_length=8_000, summarizer=verbose
                                        ).compress_with_feedback(before)
    assert feedback["tokens_after"] > feedback["tokens_before"]
    assert "rose" in feedback["note"]


def test_prompt_has_sections_budget_focus_and_the_messages():
    before = conversation(6, rounds=4)
    recorder = Recorder()
    ContextCompressor(context_length=200_000, summarizer=recorder).compress(
        before, focus_topic="the parser cache")
    (prompt,) = recorder.prompts
    for name in SECTIONS:
        assert f"## {name}" in prompt
    assert "Write about 2000 tokens" in prompt  # the floor: the middle is small
    assert '"the parser cache"' in prompt and "70%" in prompt
    assert "<earlier-note>" not in prompt
    head = pushed_head(before)
    assert f"[Message {head} - " in prompt and f"[Message {head - 1} - " not in prompt


def test_a_second_pass_updates_the_previous_summary():
    recorder = Recorder(reply="## Completed Actions\n- first pass item " + SENTINEL)
    compressor = ContextCompressor(context_length=16_000, summarizer=recorder)
    first = compressor.compress(conversation(7, rounds=3))
    grown = first + conversation(8, rounds=3)[1:]  # the chat goes on
    recorder.reply = "## Completed Actions\n- updated"
    second = compressor.compress(grown)
    assert "<earlier-note>\n## Completed Actions\n- first pass item" in recorder.prompts[1]
    assert SUMMARY_PREFIX not in recorder.prompts[1].split("<messages>")[1]
    assert len(summary_indices(second)) == 1
    assert SENTINEL not in str(second)
    assert second[0]["content"].count(COMPACTION_NOTE) == 1


def test_extractive_default_keeps_earlier_items_across_passes():
    compressor = ContextCompressor(context_length=100_000)
    first = compressor.compress(conversation(9, rounds=3))
    body = content(first[summary_indices(first)[0]])
    assert "## Completed Actions" in body
    earlier_item = body.split("## Completed Actions\n- ")[1].splitlines()[0]
    second = compressor.compress(first + conversation(10, rounds=3)[1:])
    (i,) = summary_indices(second)
    assert earlier_item in content(second[i])
    assert content(second[i]).count("were compacted (extractive") == 1


def test_a_legacy_summary_is_recognised_and_replaced():
    before = conversation(11, rounds=4)
    head = pushed_head(before)
    before.insert(head, {"role": "user", "content": f"{LEGACY_PREFIX} old work on db.py"})
    recorder = Recorder()
    after = ContextCompressor(context_length=16_000, summarizer=recorder).compress(before)
    assert "<earlier-note>\nold work on db.py\n</earlier-note>" in recorder.prompts[0]
    assert LEGACY_PREFIX not in str(after)
    assert len(summary_indices(after)) == 1


def test_summarizer_backends_run_even_inside_a_running_event_loop():
    before = conversation(12, rounds=4)

    async def agent_loop():  # an async agent calling the sync API directly
        compressor = ContextCompressor(context_length=16_000,
                                       summarizer=ExtractiveSummarizer(len))
        return compressor.compress(before)

    after = asyncio.run(agent_loop())
    (i,) = summary_indices(after)
    assert content(after[i]).startswith(SUMMARY_PREFIX)
    assert "Tool calls:" in content(after[i])  # the batch extractive backend's wording
    assert LEGACY_PREFIX not in content(after[i])


class DownBackend(Summarizer):
    async def summarize(self, request: SummaryRequest) -> Summary:
        raise SummaryFailed("all endpoints down", SummaryUsage(errors=3))


def test_a_failing_backend_gives_the_marker():
    before = conversation(13, rounds=4)
    after = ContextCompressor(context_length=16_000, summarizer=DownBackend()).compress(before)
    check_chat_invariants(before, after, summary_text=None)


def test_coroutine_summarizers_are_awaited():
    async def summarize(prompt: str) -> str:
        await asyncio.sleep(0)
        return SENTINEL

    before = conversation(14, rounds=4)
    after = ContextCompressor(context_length=16_000, summarizer=summarize).compress(before)
    check_chat_invariants(before, after, summary_text=SENTINEL)


def test_token_counter_choices(counter):
    before = conversation(15, rounds=4)
    estimates = [ContextCompressor(context_length=16_000, token_counter=tc)
                 .compress_with_feedback(before)[1]["tokens_before"]
                 for tc in (None, counter, lambda text: len(text))]
    assert estimates[2] > estimates[0] > 0  # characters > bytes / 4
    assert estimates[1] > 0 and estimates[1] != estimates[0]


def test_summaries_are_redacted_and_prefixed_once():
    leaky = Recorder(reply=f"{SUMMARY_PREFIX}\nkey sk-abcdefghijklmnopqrstuvwx used")
    after = ContextCompressor(context_length=16_000, summarizer=leaky).compress(
        conversation(16, rounds=4))
    text = content(after[summary_indices(after)[0]])
    assert text.count(SUMMARY_PREFIX) == 1
    assert "sk-abc" not in text and "[REDACTED]" in text


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError):
        ContextCompressor(context_length=0)
    with pytest.raises(ValueError):
        ContextCompressor(context_length=1000, threshold=1.5)
    with pytest.raises(TypeError):
        ContextCompressor(context_length=1000, summarizer="gpt-4")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ContextCompressor(context_length=1000).compress(["hello"])  # type: ignore[list-item]


def test_summary_merges_into_the_first_tail_message_when_both_roles_collide():
    before = [{"role": "system", "content": "rules"},
              {"role": "user", "content": "first ask"},
              {"role": "assistant", "content": "first answer"},
              {"role": "user", "content": "second ask"},
              {"role": "assistant", "content": "second answer"},
              {"role": "user", "content": "latest ask"},
              {"role": "assistant", "content": "working on it"},
              {"role": "assistant", "content": "done"}]
    after = ContextCompressor(context_length=50_000, summarizer=Recorder()).compress(before)
    assert [m["role"] for m in after] == ["system", "user", "assistant", "user", "assistant",
                                          "assistant"]
    (i,) = summary_indices(after)
    assert i == 3
    assert content(after[i]).startswith(SUMMARY_PREFIX)
    assert content(after[i]).endswith("\n\nlatest ask")
    assert content(after[i]).count(SENTINEL) == 1
    assert after[4:] == before[6:]
