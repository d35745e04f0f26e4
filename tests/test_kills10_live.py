"""The compressor core and the extractive handoff of `live/` against the mutation tool
(issue 40 item 8, tenth round): the arguments and their defaults, the room the summary
may take, the no-op reasons, the feedback, earlier summaries in the middle; the handoff's
header, sections, budget and focus. Expected values come from the docstrings and SPEC §10.
Token counts are `len` where a test works out a budget by hand (any ``text -> int`` is a
counter).
"""

from __future__ import annotations

import json
import logging

import pytest

from trajectory_compressor.live import COMPACTION_NOTE, SUMMARY_PREFIX, ContextCompressor
from trajectory_compressor.live.assembly import merged
from trajectory_compressor.live.compressor import _split_previous
from trajectory_compressor.live.extractive_handoff import (
    ExtractiveHandoff,
    _collect,
    _parse_previous,
)
from trajectory_compressor.live.handoff import SECTIONS, HandoffRequest
from trajectory_compressor.live.markers import MERGE_SEPARATOR, failure_marker
from trajectory_compressor.live.messages import MESSAGE_OVERHEAD

# -- compressor ---------------------------------------------------------------------------

def header(first: int, last: int) -> str:
    """The extractive handoff's first line."""
    return (f"Messages {first}-{last} were compacted (extractive summary: items are quoted or "
            "clipped from them).")


def small_chat(system: str | None, ask_chars: int) -> list[dict]:
    """Head (system?, user, assistant), a middle of three, a tail of three.

    With `len` counting, a threshold of 1% and a target ratio of 0.1 of a 100,000 context
    (a tail budget of 100 tokens), the tail is the last three messages: the middle's last
    message alone is over the budget.
    """
    messages = [{"role": "user", "content": "start"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "x" * ask_chars},
                {"role": "assistant", "content": "y"},
                {"role": "user", "content": "z" * 200},
                {"role": "assistant", "content": "working"},
                {"role": "user", "content": "more"},
                {"role": "assistant", "content": "done"}]
    return ([{"role": "system", "content": system}] if system is not None else []) + messages


def by_len(**kwargs) -> ContextCompressor:
    return ContextCompressor(context_length=100_000, threshold=0.01, target_ratio=0.1,
                             token_counter=len, **kwargs)


# The fixed cost of a compaction with `len` counting: the prefix, a message's framing and
# a margin of 8 (plus the note when the system message gets it).
FIXED = len(SUMMARY_PREFIX) + MESSAGE_OVERHEAD + 8


@pytest.mark.parametrize("system, ask_chars", [
    ("rules", 39 + FIXED + len(COMPACTION_NOTE) - 213),  # the note is added: it costs too
    (f"rules\n\n{COMPACTION_NOTE}", 39 + FIXED - 213),  # already there: no cost
    (None, 39 + FIXED - 213),  # no system message, no note
])
def test_the_summary_gets_the_middle_s_tokens_less_the_fixed_cost(system, ask_chars):
    # The middle costs (ask_chars + 4) + 5 + 204 = ask_chars + 213 tokens; less the fixed
    # cost, 39 are left: the extractive handoff cuts its header to 39 characters.
    assert (len(SUMMARY_PREFIX), len(COMPACTION_NOTE), FIXED) == (332, 173, 344)
    head = 3 if system is not None else 2
    messages = small_chat(system, ask_chars)
    out, feedback = by_len(protect_first_n=head).compress_with_feedback(messages)
    cut = header(head, head + 2)[:39]
    assert cut == f"Messages {head}-{head + 2} were compacted (extractive"
    assert [m["content"] for m in out[head:]] == [
        f"{SUMMARY_PREFIX}\n{cut}", "working", "more", "done"]
    assert out[head]["role"] == "user"
    assert feedback["summary"] == "written"


def test_a_merged_summary_is_charged_the_separator_not_a_message():
    # Head S U A, middle U A, tail U A U: the summary's neighbours are an assistant and a
    # user, and the middle has two messages: it is merged into the tail's first message.
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "start"},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "x" * 300},
                {"role": "assistant", "content": "y" * 300},
                {"role": "user", "content": "latest"},
                {"role": "assistant", "content": "working"}, {"role": "user", "content": "more"}]
    out, feedback = by_len().compress_with_feedback(messages)
    # The middle's 608 tokens less the prefix, the separator with its blank lines, the
    # margin and the note: 608 - (332 + 65 + 8 + 173) = 30 left for the summary text.
    separator = f"\n\n{MERGE_SEPARATOR}\n\n"
    assert len(separator) == 65
    cut = header(3, 4)[:30]
    assert cut == "Messages 3-4 were compacted (e"
    assert [m["content"] for m in out[3:]] == [
        f"{SUMMARY_PREFIX}\n{cut}{separator}latest", "working", "more"]
    assert feedback["tokens_after"] <= feedback["tokens_before"]
    assert feedback["note"] is None


@pytest.mark.parametrize("system", ["rules", None])
def test_with_room_for_its_text_the_summary_never_grows_the_prompt(counter, system):
    # The bundled tokenizer: x * n is about n / 8 tokens; from 1,000 on the middle is
    # larger than the compaction's fixed cost, whether merged (with the system note) or not.
    for ask_chars in range(1000, 3000, 100):
        compressor = ContextCompressor(context_length=100_000, threshold=0.01, target_ratio=0.1,
                                       token_counter=counter,
                                       protect_first_n=3 if system is not None else 2)
        _, feedback = compressor.compress_with_feedback(small_chat(system, ask_chars))
        assert feedback["summary"] == "written"
        assert feedback["tokens_after"] <= feedback["tokens_before"], ask_chars


def test_the_arguments_and_their_defaults():
    compressor = ContextCompressor(context_length=1)  # the smallest context there is
    assert (compressor.context_length, compressor.threshold, compressor.target_ratio) == (
        1, 0.5, 0.2)
    assert (compressor.protect_first_n, compressor.protect_last_n) == (3, 20)
    assert compressor.last_feedback is None and compressor.compression_count == 0
    edges = ContextCompressor(context_length=1000, threshold=1, target_ratio=1,
                              protect_first_n=0, protect_last_n=0)
    assert (edges.threshold_tokens, edges.tail_token_budget) == (1000, 1000)
    assert (edges.protect_first_n, edges.protect_last_n) == (0, 0)
    assert ContextCompressor(context_length=1000, threshold=0.25, target_ratio=0.5
                             ).tail_token_budget == 125


@pytest.mark.parametrize("kwargs, match", [
    ({"context_length": 0}, "context_length must be positive, got 0"),
    ({"context_length": -5}, "got -5"),
    ({"threshold": 0}, r"threshold and target_ratio must be in \(0, 1\]"),
    ({"threshold": 1.01}, "must be in"),
    ({"target_ratio": 0}, "must be in"),
    ({"target_ratio": 1.01}, "must be in"),
    ({"protect_first_n": -1}, "protect_first_n and protect_last_n must not be negative"),
    ({"protect_last_n": -1}, "must not be negative"),
])
def test_bad_arguments_name_what_is_wrong(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ContextCompressor(**{"context_length": 1000, **kwargs})


def test_a_tuple_of_messages_is_compressed_like_a_list():
    messages = small_chat("rules", 400)
    from_list = by_len().compress_with_feedback(messages)
    assert by_len().compress_with_feedback(tuple(messages)) == from_list
    assert not from_list[1]["noop"]


def test_the_no_op_reasons_and_their_feedback():
    compressor = by_len()
    tiny = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    out, feedback = compressor.compress_with_feedback(tiny, current_tokens=7)
    assert out == tiny
    assert feedback == {
        "noop": True,
        "message": "No changes: nothing between the protected head and tail to compress "
                   "(2 messages)",
        "messages_before": 2, "messages_after": 2, "tokens_before": 11, "tokens_after": 11,
        "tokens_estimate": "~11 → ~11 tokens", "prompt_tokens": 7, "summary": None,
        "error": None, "pruned": None, "note": None}
    assert compressor.compression_count == 0 and compressor.last_feedback is feedback
    # A second pass right after the first: its middle is the summary alone.
    once = compressor.compress(small_chat("rules", 400))
    assert compressor.compression_count == 1
    again, feedback = compressor.compress_with_feedback(once)
    assert again == once and again is not once
    assert feedback["message"] == (
        f"No changes: nothing new since the last summary ({len(once)} messages)")
    assert compressor.compression_count == 1


def test_the_feedback_of_a_pass_word_for_word():
    compressor = by_len()
    messages = small_chat("rules", 400)
    out, feedback = compressor.compress_with_feedback(messages, current_tokens=1234)
    before = sum(len(m["content"]) + MESSAGE_OVERHEAD for m in messages)
    after = sum(len(m["content"]) + MESSAGE_OVERHEAD for m in out)
    assert (before, len(out)) == (9 + 9 + 6 + 404 + 5 + 204 + 11 + 8 + 8, 7)
    assert feedback == {
        "noop": False, "message": "Compressed: 9 → 7 messages",
        "messages_before": 9, "messages_after": 7,
        "tokens_before": before, "tokens_after": after,
        "tokens_estimate": f"~{before:,} → ~{after:,} tokens", "prompt_tokens": 1234,
        "summary": "written", "error": None,
        "pruned": {"described": 0, "deduplicated": 0, "truncated_calls": 0}, "note": None}
    assert compressor.compression_count == 1


def test_the_note_only_when_the_estimate_rose():
    messages = small_chat("rules", 400)

    def run(reply_chars: int) -> dict:
        return by_len(summarizer=lambda prompt: "a" * reply_chars).compress_with_feedback(
            messages)[1]

    first = run(1)
    assert first["tokens_after"] < first["tokens_before"]
    even = 1 + first["tokens_before"] - first["tokens_after"]  # one token per character
    assert run(even)["tokens_after"] == run(even)["tokens_before"]
    assert run(even)["note"] is None
    assert run(even + 1)["note"] == (
        "The token estimate rose: the summary is longer than the messages it replaced.")


def test_a_failed_summary_counts_the_removed_messages_and_is_logged(caplog):
    def down(prompt: str) -> str:
        raise ConnectionError("endpoint down")

    messages = small_chat("rules", 400)
    with caplog.at_level(logging.WARNING, logger="trajectory_compressor.live.compressor"):
        out, feedback = by_len(summarizer=down).compress_with_feedback(messages)
    assert out[3]["content"] == failure_marker(3)
    assert "3 earlier messages were removed" in out[3]["content"]
    assert (feedback["summary"], feedback["error"]) == ("failed", "ConnectionError: endpoint down")
    assert [r.getMessage() for r in caplog.records] == [
        "context summary failed (ConnectionError: endpoint down); inserting the static marker"]


def test_the_last_protect_last_n_messages_are_not_pruned():
    big = "line of output\n" * 40  # 600 characters: described when pruned
    messages = small_chat("rules", 10)
    messages[4:5] = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "assistant", "content": "y"}]
    pruned = {"described": 1, "deduplicated": 0, "truncated_calls": 0}
    kept = {"described": 0, "deduplicated": 0, "truncated_calls": 0}
    # 11 messages, the middle 3 to 7, the result at 5: the last n are protected. The
    # default 20 protect them all, 6 and 7 the result too; 5 and 0 leave it to phase 1.
    for last_n, stats in ((20, kept), (0, pruned), (5, pruned), (6, kept), (7, kept)):
        _, feedback = by_len(protect_last_n=last_n).compress_with_feedback(messages)
        assert feedback["pruned"] == stats, last_n


# -- earlier summaries in the middle ---------------------------------------------------------


def test_earlier_summaries_give_their_bodies_and_merged_originals():
    ask = {"role": "user", "content": "the ask", "name": "u"}
    middle = [
        {"role": "assistant", "content": f"{SUMMARY_PREFIX}\nfirst body"},
        merged(ask, f"{SUMMARY_PREFIX}\nsecond body"),
        merged({"role": "user", "content": ""}, f"{SUMMARY_PREFIX}\nthird body"),
        {"role": "assistant", "content": "fresh"},
        {"role": "user", "content": failure_marker(4)},  # no body
    ]
    previous, fresh = _split_previous(middle)
    assert previous == "first body\n\nsecond body\n\nthird body"
    assert fresh == [{"role": "user", "content": "the ask", "name": "u"},
                     {"role": "user", "content": None},
                     {"role": "assistant", "content": "fresh"}]
    assert _split_previous([]) == ("", [])


# -- the extractive handoff ------------------------------------------------------------------


def call(call_id, name, **args):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def middle_messages() -> list[dict]:
    return [
        {"role": "user", "content": "first ask: fix config.yaml <think>not src/hidden.py</think>"},
        {"role": "assistant",
         "content": "<think>plan it in secret.py</think> I will read src/app/main.py first",
         "tool_calls": [call("c1", "read_file", path="src/app/main.py"),
                        call(2, "terminal", command="make test")]},
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1\ny = 2"},
        {"role": "tool", "tool_call_id": "c9", "name": "shell",
         "content": "Traceback\nValueError: boom"},
        {"role": "tool", "tool_call_id": "c8", "name": "grep",
         "content": "[duplicate tool result: same output as the newer grep result in message 9]"},
        {"role": "tool", "tool_call_id": "c7", "content":
            "[tool result pruned] run(command=make) → exit 2: Error: x [1,000 chars, 3 lines]"},
        {"role": "tool", "tool_call_id": "c6",
         "content": "[tool result pruned] run() → error: KeyError: k [500 chars, 1 lines]"},
        {"role": "tool", "tool_call_id": "c5",
         "content": "[tool result pruned] run() → ok: fine [400 chars, 1 lines]"},
        {"role": "user", "content": "second   ask\nplease"},
        {"role": "assistant", "content": "<think>only thoughts</think>"},
        {"role": "user", "content": "first ask: fix config.yaml"},
        {"role": "user", "content": "the latest ask " + "w" * 300},
    ]


def test_the_items_of_the_middle_word_for_word():
    expected = {name: [] for name in SECTIONS}
    expected.update({
        "Active Task": ["the latest ask " + "w" * 224 + "…"],  # clipped to 240 characters
        "Completed Actions": [
            "read_file(path=src/app/main.py) → ok: x = 1 [11 chars, 2 lines]",
            "shell() → error: ValueError: boom [26 chars, 2 lines]",
            "grep: same output as the newer grep result in message 9",
            "run(command=make) → exit 2: Error: x [1,000 chars, 3 lines]",
            "run() → error: KeyError: k [500 chars, 1 lines]",
            "run() → ok: fine [400 chars, 1 lines]"],
        "In Progress": ["terminal(command=make test): no result"],  # call 2 has no result
        "Blocked": [
            "shell() → error: ValueError: boom [26 chars, 2 lines]",
            "run(command=make) → exit 2: Error: x [1,000 chars, 3 lines]",
            "run() → error: KeyError: k [500 chars, 1 lines]"],
        "Key Decisions": ["I will read src/app/main.py first"],
        "Pending User Asks": ["first ask: fix config.yaml", "second ask please"],
        "Relevant Files": ["config.yaml", "src/app/main.py"],  # none from a think block
    })
    assert _collect(middle_messages()) == expected
    assert len(expected["Active Task"][0]) == 240
    assert _collect(iter(middle_messages())) == expected  # any iterable, read once


def test_the_latest_ask_is_the_task_and_the_others_are_pending():
    messages = [{"role": "assistant", "content": "done with a.py"}]
    assert _collect(messages) == {
        **{name: [] for name in SECTIONS},
        "Key Decisions": ["done with a.py"], "Relevant Files": ["a.py"]}
    asks = [{"role": "user", "content": text} for text in ("one", "two", "three")]
    assert _collect(asks) == {**{name: [] for name in SECTIONS},
                              "Active Task": ["three"], "Pending User Asks": ["one", "two"]}


def test_an_earlier_summary_s_items_by_section():
    summary = "\n".join([
        "free text first",
        "Messages 0-4 were compacted (extractive summary: items are quoted or clipped "
        "from them).",
        "",
        "  ## Goal",
        "- ship it",
        "* star item",
        "   - indented",
        "none",
        "-  None",
        "### Made Up Heading",
        "- goes to critical",
        "#Blocked",
        "- b",
        "- b",
        "- ship it",
        "",
        "- last",
    ])
    assert _parse_previous(summary) == {
        "Critical Context": ["free text first", "goes to critical"],
        "Goal": ["ship it", "star item", "indented"],
        "Blocked": ["b", "ship it", "last"]}
    assert _parse_previous("") == {}


def test_an_item_fits_the_budget_to_the_token():
    # `len` counts: the header and its blank line, then "## Active Task\n" and one more
    # for the section, "- abc\n" for the item: 24 over the header; "## Key Decisions\n",
    # one, "- ok\n": 23 more.
    messages = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "abc"}]
    top = header(5, 6)
    whole = f"{top}\n\n## Active Task\n- abc\n\n## Key Decisions\n- ok"
    fits = f"{top}\n\n## Active Task\n- abc"
    write = ExtractiveHandoff(len).write
    assert write(HandoffRequest(messages, 5, len(top) + 24)) == fits
    assert write(HandoffRequest(messages, 5, len(top) + 23)) == top
    assert write(HandoffRequest(messages, 5, len(top) + 24 + 23)) == whole
    assert write(HandoffRequest(messages, 5, len(top) + 24 + 22)) == fits
    # max_tokens (the room the caller has) lowers the budget, never raises it.
    assert write(HandoffRequest(messages, 5, 10_000, max_tokens=len(top) + 24)) == fits
    assert write(HandoffRequest(messages, 5, len(top) + 24, max_tokens=10_000)) == fits
    assert write(HandoffRequest(messages, 5, 10_000, max_tokens=len(top) + 23)) == top
    # Under the header's own size the header is cut; with no room at all it stays whole.
    assert write(HandoffRequest(messages, 5, 10_000, max_tokens=10)) == "Messages 5"
    assert write(HandoffRequest(messages, 5, 10)) == "Messages 5"
    assert write(HandoffRequest(messages, 5, 10_000, max_tokens=0)) == top
    assert write(HandoffRequest(messages, 5, 10_000, max_tokens=-3)) == top


def test_the_header_names_the_first_and_last_message():
    write = ExtractiveHandoff(len).write
    assert write(HandoffRequest([{"role": "user", "content": "a"}], 0, 500)) == (
        f"{header(0, 0)}\n\n## Active Task\n- a")
    assert write(HandoffRequest([{"role": "user", "content": "a"}] * 3, 7, 500)).startswith(
        header(7, 9) + "\n\n")


def focus_messages() -> list[dict]:
    others = [{"role": "assistant", "content": f"other item {c}"} for c in "ABCDEFGHIJ"]
    return [*others[:5], {"role": "assistant", "content": "parser item A"}, *others[5:],
            {"role": "assistant", "content": "parser item B"}]


def decisions(text: str) -> list[str]:
    return text.split("## Key Decisions\n")[1].split("\n")


def test_the_focus_is_served_first_and_the_rest_gets_at_most_its_share():
    write = ExtractiveHandoff(len).write
    everything = [f"- {m['content']}" for m in focus_messages()]
    # 400 tokens hold everything without a focus (an unknown topic is no focus).
    for topic in (None, "zzz", "pa", ""):
        text = write(HandoffRequest(focus_messages(), 5, 400, focus_topic=topic))
        assert text.startswith(header(5, 16))
        assert decisions(text) == everything, topic
    # With one: the two focused items take 18 + 2 x 16 = 50 over the header's 89 + 2, the
    # rest gets int(400 x 0.3) = 120 more, 8 items of 15, the newest: 261 in all.
    text = write(HandoffRequest(focus_messages(), 5, 400, focus_topic="a Parser!"))
    assert decisions(text) == [
        "- other item C", "- other item D", "- other item E", "- parser item A",
        "- other item F", "- other item G", "- other item H", "- other item I",
        "- other item J", "- parser item B"]
    assert len(text) == 261 - 2
    # A short budget: the focused items first, even the oldest.
    text = write(HandoffRequest(focus_messages(), 5, 89 + 2 + 50, focus_topic="parser"))
    assert decisions(text) == ["- parser item A", "- parser item B"]
    text = write(HandoffRequest(focus_messages(), 5, 89 + 2 + 50))
    assert decisions(text) == ["- other item J", "- parser item B"]


def test_the_sections_take_turns_newest_first():
    # Round robin over the sections, the newest item of each first. A section whose next
    # item does not fit takes no older one, even a shorter one; the others go on.
    messages = [{"role": "user", "content": "ask one"},
                {"role": "assistant", "content": "d"},
                {"role": "user", "content": "a much longer second ask " * 2},
                {"role": "assistant", "content": "e"},
                {"role": "user", "content": "the ask"}]
    write = ExtractiveHandoff(len).write
    top = f"{header(0, 4)}\n\n## Active Task\n- the ask\n\n## Key Decisions\n"
    longer = "\n\n## Pending User Asks\n- a much longer second ask a much longer second ask"
    roomy = write(HandoffRequest(messages, 0, 1000))
    assert roomy == (f"{top}- d\n- e\n\n## Pending User Asks\n- ask one\n"
                     "- a much longer second ask a much longer second ask")
    assert write(HandoffRequest(messages, 0, len(roomy) + 2)) == roomy
    assert write(HandoffRequest(messages, 0, len(roomy) + 1)) == f"{top}- d\n- e{longer}"
    assert write(HandoffRequest(messages, 0, len(roomy) - 8)) == f"{top}- d\n- e{longer}"
    assert write(HandoffRequest(messages, 0, len(roomy) - 9)) == f"{top}- e{longer}"
    assert write(HandoffRequest(messages, 0, len(roomy) - 12)) == f"{top}- e{longer}"
    assert write(HandoffRequest(messages, 0, len(roomy) - 13)) == f"{top}- d\n- e"
    assert write(HandoffRequest(messages, 0, 200)) == f"{top}- d\n- e"


class WordTokens:
    """A toy tokenizer, as real ones are: a known word is one token, an unknown one (a
    word cut short) one token per character."""

    def __init__(self, text: str) -> None:
        self.known = set(text.split())

    def __call__(self, text: str) -> int:
        return sum(1 if word in self.known else len(word) for word in text.split())


def test_a_text_within_the_budget_is_never_cut():
    messages = [{"role": "user", "content": "abc"}]
    top = header(2, 2)
    count = WordTokens(top + " ## Active Task - abc")
    assert count(top) == 13 and count(top[:-1]) == 12 + len("them)")
    # The header alone, exactly the budget: whole, though a shorter prefix costs more.
    assert ExtractiveHandoff(count).write(HandoffRequest(messages, 2, 13)) == top
    assert ExtractiveHandoff(count).write(HandoffRequest(messages, 2, 20)) == top
    assert ExtractiveHandoff(count).write(HandoffRequest(messages, 2, 21)) == (
        f"{top}\n\n## Active Task\n- abc")
    # Over the budget it is cut where the tokens fit: 11 known words and an "f".
    cut = ExtractiveHandoff(count).write(HandoffRequest(messages, 2, 12))
    assert cut == top.removesuffix("rom them).") and count(cut) == 12
