"""Phase 2 boundaries and the summary's placement (pure functions over messages)."""

from __future__ import annotations

from conversations import conversations
from hypothesis import given, settings
from hypothesis import strategies as st

from trajectory_compressor.live.boundaries import (
    MIN_TAIL_MESSAGES,
    boundaries,
    head_end,
    latest_user_index,
    tail_start,
)
from trajectory_compressor.live.markers import SUMMARY_PREFIX
from trajectory_compressor.live.messages import MessageTokens
from trajectory_compressor.live.placement import Placement, place_summary, settle

ROLES = {"S": "system", "U": "user", "A": "assistant", "T": "tool"}


def chat(spec: str) -> list[dict]:
    """Messages from a role string; each A followed by T's calls that many tools."""
    messages: list[dict] = []
    for i, c in enumerate(spec):
        message = {"role": ROLES[c], "content": f"{ROLES[c]} {i}"}
        if c == "T":
            owner = max(j for j, m in enumerate(messages) if m["role"] == "assistant")
            call_id = f"c{i}"
            messages[owner].setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": "t", "arguments": "{}"}})
            message["tool_call_id"] = call_id
        messages.append(message)
    return messages


def test_head_is_pushed_past_tool_results():
    assert head_end(chat("SUATTTAU"), 3) == 6
    assert head_end(chat("SUAUAU"), 3) == 3
    assert head_end(chat("SU"), 3) == 2


def test_an_earlier_summary_is_never_in_the_head():
    messages = chat("SUATAU")
    messages[1]["content"] = f"{SUMMARY_PREFIX}\nold"
    assert head_end(messages, 3) == 1


def test_tail_takes_the_budget_with_a_soft_ceiling():
    messages = chat("SU" + "AT" * 10)
    tokens = [10] * len(messages)
    # budget 40: four messages; the fifth would pass the budget, so it stops there
    assert tail_start(messages, tokens, 2, 40) == len(messages) - 4
    # one big message that fits under 1.5x the budget is taken whole
    tokens[-5] = 15
    assert tail_start(messages, tokens, 2, 40) == len(messages) - 4
    tokens = [10] * len(messages)
    tokens[-3] = 100  # bigger than 1.5x: the tail stops before it, at three messages anyway
    assert tail_start(messages, tokens, 2, 20) == len(messages) - 4  # aligned off the tool


def test_tail_has_three_messages_and_starts_on_a_group():
    messages = chat("SUAAATTT")
    tokens = [1000] * len(messages)
    start = tail_start(messages, tokens, 3, 10)
    assert start == 4  # the last three are tools: back to their assistant
    assert len(messages) - start >= MIN_TAIL_MESSAGES


def test_tail_reaches_back_to_the_latest_user_message():
    messages = chat("SUAUA" + "U" + "AT" * 8)
    tokens = [10] * len(messages)
    assert tail_start(messages, tokens, 3, 30) == len(messages) - 4
    assert latest_user_index(messages) == 5
    assert boundaries(messages, tokens, 3, 30) == (3, 5)


def test_a_follow_up_right_after_the_head_closes_the_head_instead():
    # Reaching back to the user message at 3 would leave nothing to compress: it stays,
    # with the head, and the agent's work after it is compressed.
    messages = chat("SUA" + "U" + "AT" * 8)
    tokens = [10] * len(messages)
    assert boundaries(messages, tokens, 3, 30) == (4, len(messages) - 4)
    # ... but never past an earlier summary, which must stay in the middle
    messages[3:3] = [{"role": "assistant", "content": f"{SUMMARY_PREFIX}\nold"}]
    assert boundaries(messages, [10] * len(messages), 3, 30) == (3, 4)


def test_everything_fitting_the_budget_falls_back_to_the_minimal_tail():
    messages = chat("SUAUAUAUA")
    assert tail_start(messages, [1] * len(messages), 3, 10_000) == 6


@settings(deadline=None)
@given(conversations(), st.integers(0, 5), st.integers(0, 4000))
def test_boundaries_never_split_a_tool_group_nor_drop_the_latest_ask(messages, first_n,
                                                                     budget):
    tokens = MessageTokens().count_messages(messages)
    head, tail = boundaries(messages, tokens, first_n, budget)
    assert head_end(messages, first_n) <= head <= tail <= len(messages)
    for cut in (head, tail):
        assert cut == len(messages) or messages[cut]["role"] != "tool"
    if tail > head:
        assert len(messages) - tail >= min(MIN_TAIL_MESSAGES, len(messages) - head)
        user = latest_user_index(messages)
        assert user is None or user < head or user >= tail
        if head > head_end(messages, first_n):  # the head was extended through the ask
            assert head == user + 1


def test_summary_role_differs_from_both_neighbours():
    # head ends on tool results, tail starts with a user message: the summary is assistant
    p = place_summary(chat("SUATTAUAT"), 5, 6)
    assert (p.role, p.merge, p.tail_start) == ("assistant", False, 6)
    # head ends on an assistant message, tail starts with a user one: both roles collide;
    # the tail moves back one group so a user summary sits between assistant messages and
    # the latest user message is left as it was
    messages = chat("SUAUATAUA")
    p = place_summary(messages, 3, 7)
    assert (p.role, p.merge, p.tail_start) == ("user", False, 6)


def test_summary_merges_when_no_move_leaves_a_middle():
    messages = chat("SUAUAUA")
    p = place_summary(messages, 3, 5)  # head ends assistant, middle [U, A], tail starts U
    assert p.merge and p.tail_start == 5 and p.role == "user"


def test_a_single_message_middle_is_widened_into_the_tail():
    messages = chat("SUAUAUAU")
    tokens = [10] * len(messages)
    assert tail_start(messages, tokens, 3, 35) == 4  # the budget leaves only message 3
    assert boundaries(messages, tokens, 3, 35) == (3, 5)  # the tail keeps 3 and the ask


def test_the_latest_user_message_is_never_the_merge_target_when_avoidable():
    messages = chat("SUAUAUATATA")
    tokens = [10] * len(messages)
    # Reaching back to the ask at 5 would merge the summary into it; the layout with the
    # ask closing the head merges it into the assistant message after the middle instead.
    assert place_summary(messages, 3, 5).merge
    assert settle(messages, tokens, 3, 10_000) == (6, Placement(8, "assistant", merge=True))
