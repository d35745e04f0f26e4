"""The small modules of `live/` one function at a time (issue 40 item 8: `live/` entered the
mutation tool's scope). Expected values come from the docstrings and SPEC §10: the
trigger's threshold and its guard against passes that save under 10%, the fixed texts of a
compaction and how they are recognised, and the message helpers and token estimate.
"""

from __future__ import annotations

import pytest

from trajectory_compressor.counting.tokens import TokenCounter, load_bundled_backend
from trajectory_compressor.live.markers import (
    COMPACTION_NOTE,
    LEGACY_PREFIXES,
    MERGE_SEPARATOR,
    PREVIOUS_SUMMARY_HEADING,
    SUMMARY_PREFIX,
    failure_marker,
    finish_summary,
    is_summary_text,
    split_merged,
    strip_prefixes,
    summary_body,
)
from trajectory_compressor.live.messages import (
    MESSAGE_OVERHEAD,
    MessageTokens,
    call_arguments,
    call_name,
    countable_text,
    estimate_tokens,
    role_of,
    text_of,
    tool_calls_of,
    with_content,
)
from trajectory_compressor.live.trigger import MAX_INEFFECTIVE_PASSES, MIN_SAVINGS, Trigger

# -- trigger ------------------------------------------------------------------------------


def test_the_guard_constants_are_the_documented_ones():
    assert (MIN_SAVINGS, MAX_INEFFECTIVE_PASSES) == (0.10, 2)


def test_compress_at_the_threshold_not_below():
    trigger = Trigger(1000)
    assert trigger.should_compress(1000) is True
    assert trigger.should_compress(1001) is True
    assert trigger.should_compress(999) is False


@pytest.mark.parametrize("before, after, ineffective", [
    (1000, 900, 0),  # exactly 10% saved: it helped
    (1000, 901, 1),  # 9.9%: it did not
    (1000, 1000, 1),
    (1000, 1200, 1),  # grew
    (1000, 100, 0),
    (0, 0, 1),  # nothing to save from: no savings
    (1, 0, 0),  # one token, all of it saved
])
def test_record_pass_counts_passes_that_saved_under_a_tenth(before, after, ineffective):
    trigger = Trigger(500)
    trigger.record_pass(before, after)
    assert trigger.ineffective_passes == ineffective


def test_two_vain_passes_in_a_row_stop_compression_and_a_good_one_resets():
    trigger = Trigger(500)
    trigger.record_pass(1000, 950)
    assert trigger.ineffective_passes == 1 and not trigger.thrashing
    assert trigger.should_compress(2000) is True
    trigger.record_pass(1000, 980)
    assert trigger.ineffective_passes == 2 and trigger.thrashing
    assert trigger.should_compress(2000) is False
    trigger.record_pass(1000, 500)
    assert trigger.ineffective_passes == 0 and not trigger.thrashing
    assert trigger.should_compress(2000) is True
    # A vain pass after a good one starts the count again at one.
    trigger.record_pass(1000, 990)
    assert trigger.ineffective_passes == 1


# -- markers ------------------------------------------------------------------------------


def test_failure_marker_says_how_many_were_removed():
    one = failure_marker(1)
    assert one == (f"{SUMMARY_PREFIX}\nSummary unavailable: 1 earlier message was removed to "
                   "free context space and could not be summarized. Continue from the "
                   "messages below and the current state of files and tools.")
    assert "3 earlier messages were removed" in failure_marker(3)
    assert "0 earlier messages were removed" in failure_marker(0)
    kept = failure_marker(2, "the old summary")
    assert kept.endswith(f"tools.\n\n{PREVIOUS_SUMMARY_HEADING}\nthe old summary")
    assert PREVIOUS_SUMMARY_HEADING not in failure_marker(2, "")


def test_is_summary_text():
    assert is_summary_text(f"{SUMMARY_PREFIX}\nbody")
    assert is_summary_text("  \n[CONTEXT COMPACTION v0] other wording\nbody")
    assert is_summary_text("[context summary]: lower case, the batch tool's")
    assert is_summary_text(f"  {LEGACY_PREFIXES[0]} body")
    assert not is_summary_text("a user message about [CONTEXT COMPACTION")
    assert not is_summary_text("")


def test_strip_prefixes_current_legacy_repeated_and_other_wordings():
    assert strip_prefixes(f"{SUMMARY_PREFIX}\nbody") == "body"
    assert strip_prefixes(f"  {SUMMARY_PREFIX}\n{SUMMARY_PREFIX}\n body \n") == "body"
    assert strip_prefixes("[context summary]:   body") == "body"
    assert strip_prefixes(f"{SUMMARY_PREFIX}\n[CONTEXT SUMMARY]: body") == "body"
    assert strip_prefixes("[CONTEXT COMPACTION (old)] one line\n\nbody\nmore") == "body\nmore"
    assert strip_prefixes("[CONTEXT COMPACTION only a heading") == ""
    assert strip_prefixes("plain text") == "plain text"


def test_split_merged():
    text = f"{SUMMARY_PREFIX}\nsum\n\n{MERGE_SEPARATOR}\n\noriginal\n\nmore"
    assert split_merged(text) == (f"{SUMMARY_PREFIX}\nsum", "original\n\nmore")
    assert split_merged(f"sum\n\n{MERGE_SEPARATOR}") == ("sum", "")
    assert split_merged("just a summary") == ("just a summary", None)


def test_summary_body():
    assert summary_body(f"{SUMMARY_PREFIX}\nthe body\n") == "the body"
    assert summary_body(failure_marker(3)) == ""  # the failure line is the whole text
    merged = f"{failure_marker(1, 'kept one')}\n\n{MERGE_SEPARATOR}\n\nthe user's text"
    assert summary_body(merged) == "kept one"
    assert summary_body(failure_marker(2, "older\nsummary")) == "older\nsummary"
    # Only a failure line at the start is taken off.
    text = f"{SUMMARY_PREFIX}\nfacts\nSummary unavailable: 2 earlier messages were removed"
    assert summary_body(text).endswith("were removed")


def test_the_failure_line_alone_is_taken_off():
    body = summary_body(failure_marker(5))
    assert "Summary unavailable" not in body and "5 earlier" not in body


def test_finish_summary_puts_the_prefix_once_and_redacts():
    secret = "ghp_" + "a" * 36
    text = finish_summary(f"{SUMMARY_PREFIX}\n{SUMMARY_PREFIX}\nuse token {secret}")
    assert text.startswith(f"{SUMMARY_PREFIX}\nuse token ")
    assert text.count("[CONTEXT COMPACTION") == 1
    assert secret not in text


def test_the_note_and_separator_texts():
    assert COMPACTION_NOTE.startswith("[Note: earlier turns")
    assert MERGE_SEPARATOR.startswith("--- END OF CONTEXT SUMMARY")


# -- messages -----------------------------------------------------------------------------


def test_role_and_text():
    assert role_of({}) == "" and role_of({"role": "user"}) == "user"
    assert text_of({"content": None}) == "" and text_of({}) == ""
    assert text_of({"content": 12}) == "12"
    parts = [{"type": "text", "text": "a"}, "loose", {"type": "image"}, {"text": 5}]
    assert text_of({"content": parts}) == "a5"


def test_tool_calls_only_of_an_assistant_and_only_dicts():
    call = {"id": "c1", "function": {"name": "grep", "arguments": '{"q": 1}'}}
    assert tool_calls_of({"role": "assistant", "tool_calls": [call, "bad", None]}) == [call]
    assert tool_calls_of({"role": "user", "tool_calls": [call]}) == []
    assert tool_calls_of({"role": "assistant", "tool_calls": {"0": call}}) == []
    assert tool_calls_of({"role": "assistant"}) == []
    assert call_name(call) == "grep" and call_arguments(call) == '{"q": 1}'
    assert call_name({}) == "tool" and call_name({"function": {}}) == "tool"
    assert call_name({"function": "grep"}) == "tool"
    assert call_arguments({}) == "" and call_arguments({"function": "x"}) == ""
    assert call_arguments({"function": {"arguments": {"q": 1}}}) == "{'q': 1}"


def test_with_content_copies():
    message = {"role": "user", "content": "a", "extra": 1}
    changed = with_content(message, "b")
    assert changed == {"role": "user", "content": "b", "extra": 1}
    assert message["content"] == "a"


def test_countable_text_joins_text_and_calls():
    call = {"function": {"name": "grep", "arguments": "x"}}
    assert countable_text({"role": "assistant", "content": "hi", "tool_calls": [call]}) == \
        "hi\ngrep\nx"
    assert countable_text({"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "ls"}}]}) == "ls"
    assert countable_text({"role": "user", "content": ""}) == ""


@pytest.mark.parametrize("text, tokens", [
    ("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("abcdefgh", 2), ("é", 1),
    ("日本語", 3),  # 9 bytes
    ("日本語日", 3),  # 12 bytes
])
def test_estimate_is_utf8_bytes_over_four_rounded_up(text, tokens):
    assert estimate_tokens(text) == tokens


def test_message_tokens_from_the_estimate_a_callable_or_a_counter():
    messages = [{"role": "user", "content": "abcdefgh"}, {"role": "assistant", "content": ""}]
    estimate = MessageTokens()
    assert estimate.count("abcde") == 2
    assert estimate.count_texts(["abcde", ""]) == [2, 0]
    assert estimate.count_messages(messages) == [2 + MESSAGE_OVERHEAD, MESSAGE_OVERHEAD]
    assert MESSAGE_OVERHEAD == 4
    by_length = MessageTokens(len)
    assert by_length.count("abc") == 3 and by_length.count_texts(["abc", ""]) == [3, 0]
    counter = TokenCounter(backend=load_bundled_backend())
    real = MessageTokens(counter)
    assert real.count("hello world") == counter.count("hello world")
    assert real.count_texts(["hello world", ""]) == counter.count_many(["hello world", ""])
    assert real.count_messages(messages) == [counter.count("abcdefgh") + 4, 4]
    # The counter's batch call is used: texts it has seen are memo hits.
    hits = counter.memo_hits
    real.count_texts(["hello world"])
    assert counter.memo_hits == hits + 1


def test_a_counter_counts_the_texts_in_one_batch():
    # One count_many call: a text repeated in the batch is two copies not in the memo when
    # asked for (text by text, the second copy would be a memo hit).
    counter = TokenCounter(backend=load_bundled_backend())
    tokens = MessageTokens(counter)
    assert tokens.count_texts(["same text", "same text"]) == [counter.count("same text")] * 2
    assert (counter.encoded_texts, counter.memo_hits) == (2, 1)
