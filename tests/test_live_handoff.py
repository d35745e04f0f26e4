"""Phase 3: the summary budget, the prompt, and the default extractive handoff."""

from __future__ import annotations

from conversations import conversation
from hypothesis import given, settings
from hypothesis import strategies as st

from trajectory_compressor.live.extractive_handoff import ExtractiveHandoff
from trajectory_compressor.live.handoff import (
    MAX_SUMMARY_TOKENS,
    MIN_SUMMARY_TOKENS,
    SECTIONS,
    HandoffRequest,
    build_prompt,
    summary_budget,
)
from trajectory_compressor.live.messages import estimate_tokens


def test_budget_is_a_fifth_with_a_floor_and_a_ceiling():
    assert summary_budget(50_000, 1_000_000) == 10_000
    assert summary_budget(1_000, 1_000_000) == MIN_SUMMARY_TOKENS
    assert summary_budget(500_000, 1_000_000) == MAX_SUMMARY_TOKENS
    assert summary_budget(500_000, 100_000) == 5_000  # 5% of the context
    assert summary_budget(1_000, 16_000) == 800  # the ceiling wins over the floor


@settings(deadline=None)
@given(st.integers(0, 10**7), st.integers(1, 10**7))
def test_budget_bounds(compressed, context):
    budget = summary_budget(compressed, context)
    assert 1 <= budget <= max(1, min(int(context * 0.05), MAX_SUMMARY_TOKENS))
    if int(context * 0.05) >= MIN_SUMMARY_TOKENS:
        assert budget >= MIN_SUMMARY_TOKENS


def middle(seed=1):
    return conversation(seed, rounds=4)[3:]


def test_prompt_asks_for_an_update_when_there_was_a_summary():
    request = HandoffRequest(middle(), 3, 2500, previous_summary="## Goal\nship it",
                             focus_topic=None)
    prompt = build_prompt(request)
    assert "Update it rather than rewriting it" in prompt
    assert "<earlier-note>\n## Goal\nship it\n</earlier-note>" in prompt
    assert "Write about 2500 tokens" in prompt
    assert "Focus:" not in prompt
    assert prompt.index("<earlier-note>") < prompt.index("<messages>")


def test_extractive_handoff_is_sectioned_deterministic_and_within_budget():
    writer = ExtractiveHandoff(estimate_tokens)
    request = HandoffRequest(middle(), 3, 300)
    text = writer.write(request)
    assert text == writer.write(request)
    assert estimate_tokens(text) <= 300
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings and all(h in SECTIONS for h in headings)
    assert headings == sorted(headings, key=SECTIONS.index)
    assert "## Completed Actions" in text


def test_extractive_handoff_gives_the_focus_most_of_the_budget():
    messages = middle(2)
    plain = ExtractiveHandoff(estimate_tokens).write(HandoffRequest(messages, 3, 250))
    focused = ExtractiveHandoff(estimate_tokens).write(
        HandoffRequest(messages, 3, 250, focus_topic="write_file"))
    assert focused.count("write_file(") > plain.count("write_file(")


def test_extractive_handoff_keeps_previous_items_newest_first_under_pressure():
    previous = "## Completed Actions\n- old action one\n- old action two\n## Goal\n- the goal"
    writer = ExtractiveHandoff(estimate_tokens)
    roomy = writer.write(HandoffRequest(middle(3), 3, 5000, previous_summary=previous))
    assert "- old action one" in roomy and "## Goal\n- the goal" in roomy
    actions = roomy.split("## Completed Actions\n")[1].split("\n\n## ")[0].splitlines()
    assert actions[:2] == ["- old action one", "- old action two"]  # in conversation order
    assert len(actions) > 2
    tight = writer.write(HandoffRequest(middle(3), 3, 120, previous_summary=previous))
    assert "old action one" not in tight  # the oldest go first
