"""The larger modules of `live/` against the mutation tool (issue 40 item 8, ninth round):
the writers behind the one sync interface, the handoff prompt and its budget, the
assembly of head + summary + tail with tool pairs repaired, and where the summary goes.
Expected values come from the docstrings and SPEC §10.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from trajectory_compressor.core.conversation import SUMMARY_PREFIX as BATCH_SUMMARY_PREFIX
from trajectory_compressor.core.summary import (
    LONG_TURN_CHARS,
    Summarizer,
    Summary,
    SummaryRequest,
    elide_middle,
)
from trajectory_compressor.live.assembly import (
    STUB_RESULT,
    assemble,
    merged,
    repair_tool_pairs,
    with_note,
)
from trajectory_compressor.live.boundaries import (
    MIN_MIDDLE,
    MIN_TAIL_MESSAGES,
    TAIL_SOFT_CEILING,
    boundaries,
    candidates,
    group_start,
    head_end,
    is_summary,
    latest_user_index,
    tail_start,
)
from trajectory_compressor.live.extractive_handoff import ExtractiveHandoff
from trajectory_compressor.live.handoff import (
    FOCUS_SHARE,
    MAX_CONTEXT_SHARE,
    MAX_INPUT_CHARS,
    MAX_SUMMARY_TOKENS,
    MIN_SUMMARY_TOKENS,
    SECTIONS,
    SUMMARY_RATIO,
    HandoffRequest,
    build_prompt,
    render_messages,
    summary_budget,
)
from trajectory_compressor.live.markers import COMPACTION_NOTE, MERGE_SEPARATOR, SUMMARY_PREFIX
from trajectory_compressor.live.placement import (
    MIN_MIDDLE_AFTER_SHIFT,
    Placement,
    _role_between,
    place_summary,
)
from trajectory_compressor.live.pruning import (
    ARGUMENT_MAX_CHARS,
    DEDUPE_MIN_CHARS,
    DUPLICATE_TAG,
    PRUNE_MIN_CHARS,
    PRUNED_TAG,
    PruneStats,
    _truncate_calls,
    call_label,
    describe_result,
    is_pruned,
    key_argument,
    outcome_of,
    prune,
    truncate_arguments,
)
from trajectory_compressor.live.writers import (
    BackendWriter,
    HandoffFailed,
    PromptWriter,
    make_writer,
)

MIDDLE = [
    {"role": "user", "content": "list the files"},
    {"role": "assistant", "content": "here they are: a.py b.py"},
]

# -- writers ------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, kind", [("", "str"), ("  \n", "str"), (None, "NoneType"),
                                         (42, "int")])
def test_a_prompt_writer_without_text_fails_naming_what_it_got(reply, kind):
    writer = PromptWriter(lambda prompt: reply)
    with pytest.raises(HandoffFailed, match=f"returned {kind}, no text"):
        writer.write(HandoffRequest(MIDDLE, 1, 500))


def test_a_prompt_writer_gets_the_prompt_and_its_text_back_as_is():
    prompts: list[str] = []

    async def summarize(prompt: str) -> str:
        prompts.append(prompt)
        await asyncio.sleep(0)
        return " the note "

    request = HandoffRequest(MIDDLE, 1, 500)
    assert PromptWriter(summarize).write(request) == " the note "
    assert prompts == [build_prompt(request)]


class Backend(Summarizer):
    """Records its requests and answers with a fixed text."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.requests.append(request)
        return Summary(self.reply, "llm")


def test_a_backend_gets_the_middle_as_turns_and_its_body_comes_back():
    backend = Backend(f"{BATCH_SUMMARY_PREFIX} the body")
    assert BackendWriter(backend).write(HandoffRequest(MIDDLE, 3, 700)) == "the body"
    (request,) = backend.requests
    assert request.turns == [{"from": "human", "value": "list the files"},
                             {"from": "gpt", "value": "here they are: a.py b.py"}]
    assert (request.first_index, request.target_tokens) == (3, 700)


def test_a_backend_gets_the_earlier_summary_as_the_first_turn():
    backend = Backend(f"{SUMMARY_PREFIX}\nnew body")
    request = HandoffRequest(MIDDLE, 3, 700, previous_summary="old body")
    assert BackendWriter(backend).write(request) == "new body"
    (sent,) = backend.requests
    assert sent.turns[0] == {"from": "human", "value": f"{BATCH_SUMMARY_PREFIX} old body"}
    assert sent.turns[1:] == [{"from": "human", "value": "list the files"},
                              {"from": "gpt", "value": "here they are: a.py b.py"}]
    assert sent.first_index == 2
    # The earlier summary at index 0 cannot move the first index below 0.
    backend.requests.clear()
    BackendWriter(backend).write(HandoffRequest(MIDDLE, 0, 700, previous_summary="old"))
    assert backend.requests[0].first_index == 0


@pytest.mark.parametrize("reply", ["", SUMMARY_PREFIX, f"{BATCH_SUMMARY_PREFIX}  "])
def test_a_backend_without_a_body_fails(reply):
    with pytest.raises(HandoffFailed, match="empty summary"):
        BackendWriter(Backend(reply)).write(HandoffRequest(MIDDLE, 1, 500))


def test_make_writer_by_kind():
    assert isinstance(make_writer(None, len), ExtractiveHandoff)
    assert isinstance(make_writer(Backend("x"), len), BackendWriter)
    assert isinstance(make_writer(lambda prompt: "x", len), PromptWriter)
    with pytest.raises(TypeError, match="got str"):
        make_writer("gpt-4", len)  # type: ignore[arg-type]

# -- placement ----------------------------------------------------------------------------


def chat(spec: str) -> list[dict]:
    """Messages from a role string (S, U, A, T); each T answers the latest A's new call."""
    roles = {"S": "system", "U": "user", "A": "assistant", "T": "tool"}
    messages: list[dict] = []
    for i, c in enumerate(spec):
        message: dict = {"role": roles[c], "content": f"{roles[c]} {i}"}
        if c == "T":
            owner = max(j for j, m in enumerate(messages) if m["role"] == "assistant")
            messages[owner].setdefault("tool_calls", []).append(
                {"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}})
            message["tool_call_id"] = f"c{i}"
        messages.append(message)
    return messages


def test_a_placement_is_frozen():
    placement = Placement(3, "user")
    assert placement.merge is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        placement.tail_start = 4  # type: ignore[misc]


@pytest.mark.parametrize("before, after, role", [
    ("assistant", None, "user"),
    ("tool", None, "user"),  # after a tool result the user speaks next
    ("tool", "user", "assistant"),
    ("system", None, "assistant"),
    (None, None, "assistant"),
    ("user", "user", "assistant"),
    ("user", "assistant", None),
    ("assistant", "user", None),
])
def test_the_summary_role_differs_from_both_neighbours(before, after, role):
    assert _role_between(before, after) == role


def test_the_shift_needs_two_messages_left_in_the_middle():
    assert MIN_MIDDLE_AFTER_SHIFT == 2
    # Head U, tail starts on A: both roles collide. Moving the tail back to the U at 3
    # leaves two messages (A and its T) in the middle: allowed.
    assert place_summary(chat("UATUA"), 1, 4) == Placement(3, "assistant")
    # One message would be left: the summary merges into the tail's first message.
    assert place_summary(chat("UAUA"), 1, 3) == Placement(3, "assistant", merge=True)
    assert place_summary(chat("AUAUAU"), 1, 3) == Placement(3, "user", merge=True)


def test_with_no_head_the_summary_role_ignores_the_last_message():
    # head_end 0: no message before the summary (not the last one of the list).
    assert place_summary(chat("UA"), 0, 2) == Placement(2, "assistant")
    assert place_summary(chat("UA"), 0, 1) == Placement(1, "user")

# -- handoff ------------------------------------------------------------------------------


def test_the_budget_constants_and_edges():
    assert (SUMMARY_RATIO, MIN_SUMMARY_TOKENS, MAX_SUMMARY_TOKENS, MAX_CONTEXT_SHARE) == (
        0.20, 2000, 12000, 0.05)
    assert (FOCUS_SHARE, MAX_INPUT_CHARS) == (0.7, 160_000)
    assert summary_budget(20_004, 1_000_000) == 4_000  # a fifth, rounded down
    assert summary_budget(9_999, 1_000_000) == 2_000  # the floor
    assert summary_budget(100_000, 240_000) == 12_000  # 5% is 12,000: either ceiling
    assert summary_budget(100_000, 240_039) == 12_000  # 5% rounded down: 12,001
    assert summary_budget(100_000, 200_019) == 10_000  # 5% of the context, rounded down
    assert summary_budget(100_000, 19) == 1  # 5% rounds to 0: one token still
    assert summary_budget(0, 40) == 2


def test_a_handoff_request_is_frozen():
    request = HandoffRequest(MIDDLE, 1, 500)
    assert (request.previous_summary, request.focus_topic, request.max_tokens) == ("", None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.budget = 600  # type: ignore[misc]


def tool_turns() -> list[dict]:
    return [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "read", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "x = 1"},
        {"role": "tool", "tool_call_id": "c2", "content": "orphan"},
    ]


def test_rendered_messages_word_for_word():
    text = render_messages(HandoffRequest(tool_turns(), 5, 100))
    assert text == (
        "[Message 5 - USER]:\nfix it\n\n"
        "[Message 6 - ASSISTANT]:\n-> call read({\"path\": \"a.py\"}) [id c1]\n\n"
        "[Message 7 - TOOL result for read [id c1]]:\nx = 1\n\n"
        "[Message 8 - TOOL result for call [id c2]]:\norphan"
    )


def test_long_texts_and_arguments_are_elided_at_their_limits():
    limit = LONG_TURN_CHARS
    kept = render_messages(HandoffRequest([{"role": "user", "content": "a" * limit}], 0, 9))
    assert kept == "[Message 0 - USER]:\n" + "a" * limit
    cut = render_messages(HandoffRequest([{"role": "user", "content": "a" * (limit + 1)}], 0, 9))
    assert cut == "[Message 0 - USER]:\n" + elide_middle("a" * (limit + 1))
    arguments = "b" * 801
    call = {"role": "assistant", "content": "go", "tool_calls": [
        {"id": 7, "function": {"name": "run", "arguments": arguments}}]}
    text = render_messages(HandoffRequest([call], 0, 9))
    assert text == ("[Message 0 - ASSISTANT]:\ngo\n"
                    f"-> call run({elide_middle(arguments, 600, 200)}) [id 7]")
    assert "[1 characters omitted]" in text
    assert render_messages(HandoffRequest([{**call, "tool_calls": [
        {"id": 7, "function": {"name": "run", "arguments": "b" * 800}}]}], 0, 9)).count("b") == 800


def test_the_rendered_middle_is_bounded():
    request = HandoffRequest([{"role": "user", "content": "m" * 2000}] * 4, 0, 9)
    whole = render_messages(request)
    assert render_messages(request, max_chars=len(whole)) == whole
    bounded = render_messages(request, max_chars=1000)
    assert bounded == elide_middle(whole, 750, 250)


def test_the_prompt_word_for_word_in_its_parts():
    request = HandoffRequest(MIDDLE, 1, 321, focus_topic="the parser")
    prompt = build_prompt(request)
    assert prompt.startswith("You are writing a handoff note. Another assistant")
    assert "\n".join(f"## {name}" for name in SECTIONS) in prompt
    assert "## Active Task\n## Goal\n" in prompt and "## Critical Context\n\nWrite" in prompt
    assert "Write about 321 tokens, no more." in prompt
    assert ('the user asked to keep what concerns "the parser". Give about 70% of the length'
            in prompt)
    assert "earlier-note" not in prompt
    assert prompt.endswith("\n\n<messages>\n" + render_messages(request) + "\n</messages>")
    assert "Focus:" not in build_prompt(HandoffRequest(MIDDLE, 1, 321, focus_topic=""))

# -- assembly -----------------------------------------------------------------------------


@pytest.mark.parametrize("content, noted", [
    ("rules", f"rules\n\n{COMPACTION_NOTE}"),
    ("", COMPACTION_NOTE),
    (None, COMPACTION_NOTE),
    ([{"type": "text", "text": "rules"}],
     [{"type": "text", "text": "rules"}, {"type": "text", "text": COMPACTION_NOTE}]),
])
def test_the_note_is_added_to_any_kind_of_system_content(content, noted):
    message = {"role": "system", "content": content, "name": "s"}
    assert with_note(message) == {"role": "system", "content": noted, "name": "s"}
    assert message["content"] == content  # a new message, the given one untouched
    already = with_note(message)
    assert with_note(already) is already


@pytest.mark.parametrize("content, result", [
    ("ask", f"S\n\n{MERGE_SEPARATOR}\n\nask"),
    ("", f"S\n\n{MERGE_SEPARATOR}"),
    (None, f"S\n\n{MERGE_SEPARATOR}"),
    ([{"type": "text", "text": "ask"}],
     [{"type": "text", "text": f"S\n\n{MERGE_SEPARATOR}\n\n"}, {"type": "text", "text": "ask"}]),
])
def test_a_merged_summary_leads_any_kind_of_content(content, result):
    message = {"role": "user", "content": content, "name": "u"}
    assert merged(message, "S") == {"role": "user", "content": result, "name": "u"}
    assert message["content"] == content


def test_only_the_first_system_message_of_the_head_gets_the_note():
    messages = [{"role": "user", "content": "u"}, {"role": "system", "content": "one"},
                {"role": "system", "content": "two"}, {"role": "assistant", "content": "a"},
                {"role": "user", "content": "mid"}, {"role": "assistant", "content": "end"}]
    out = assemble(messages, 3, Placement(5, "user"), "SUM")
    assert [m["content"] for m in out] == [
        "u", f"one\n\n{COMPACTION_NOTE}", "two", "SUM", "end"]
    # A system message after the head is not the head's.
    out = assemble(messages[:1] + messages[3:], 1, Placement(2, "assistant"), "SUM")
    assert [m["content"] for m in out] == ["u", "SUM", "mid", "end"]


def test_a_merge_with_no_tail_gives_a_summary_message():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"}]
    out = assemble(messages, 1, Placement(3, "user", merge=True), "SUM")
    assert out == [{"role": "system", "content": f"s\n\n{COMPACTION_NOTE}"},
                   {"role": "user", "content": "SUM"}]


def test_stubs_follow_the_results_that_are_there_and_are_made_once():
    def call(call_id, name="t"):
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}

    messages = [
        {"role": "assistant", "content": "", "tool_calls": [call(1), call(2, "b"), call(3)]},
        {"role": "tool", "tool_call_id": 3, "content": "three"},
        {"role": "tool", "tool_call_id": "9", "content": "orphan"},
        {"role": "assistant", "content": "", "tool_calls": [call(2, "b")]},  # the same id again
        {"role": "user", "content": "next"},
    ]
    out = repair_tool_pairs(messages)
    assert out == [
        messages[0],
        {"role": "tool", "tool_call_id": 3, "content": "three"},  # ids compared as text
        {"role": "tool", "tool_call_id": 1, "name": "t", "content": STUB_RESULT},
        {"role": "tool", "tool_call_id": 2, "name": "b", "content": STUB_RESULT},
        messages[3],
        messages[4],
    ]
    assert repair_tool_pairs([]) == []
    assert repair_tool_pairs(messages[:1]) == [
        messages[0], *({"role": "tool", "tool_call_id": i, "name": n, "content": STUB_RESULT}
                       for i, n in ((1, "t"), (2, "b"), (3, "t")))]

# -- pruning ------------------------------------------------------------------------------


def prune_call(call_id, name, **args):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def test_the_pruning_constants_are_the_documented_ones():
    assert (PRUNE_MIN_CHARS, DEDUPE_MIN_CHARS, ARGUMENT_MAX_CHARS) == (400, 100, 500)
    assert (PRUNED_TAG, DUPLICATE_TAG) == ("[tool result pruned]", "[duplicate tool result:")
    assert PruneStats() == PruneStats(0, 0, 0)


def test_a_result_is_described_from_400_characters_on():
    call = prune_call("a", "read_file", path="x.py")
    for size, described in ((PRUNE_MIN_CHARS - 1, False), (PRUNE_MIN_CHARS, True)):
        content = "z" * size
        messages = [{"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "a", "content": content}]
        pruned, stats = prune(messages, 0, 2)
        assert stats == PruneStats(described=int(described))
        expected = (f"[tool result pruned] read_file(path=x.py) → ok: {'z' * 119}… "
                    f"[{size:,} chars, 1 lines]") if described else content
        assert pruned[1]["content"] == expected
        assert pruned[1]["tool_call_id"] == "a"


def test_a_duplicate_points_at_the_newer_copy_from_100_characters_on():
    for size, pointed in ((DEDUPE_MIN_CHARS - 1, False), (DEDUPE_MIN_CHARS, True)):
        same = "q" * size
        messages = [{"role": "tool", "tool_call_id": "gone", "name": "grep", "content": same},
                    {"role": "user", "content": "again"},
                    {"role": "tool", "tool_call_id": "gone2", "content": same}]
        pruned, stats = prune(messages, 0, 3)
        assert stats == PruneStats(deduplicated=int(pointed))
        assert pruned[0]["content"] == (
            "[duplicate tool result: same output as the newer grep result in message 2]"
            if pointed else same)
        assert pruned[2]["content"] == same  # the newest copy stays


def test_a_described_result_without_its_call_is_named_by_its_own_name_or_tool():
    big = "w" * 1200
    messages = [{"role": "tool", "tool_call_id": "x", "name": "shell", "content": big},
                {"role": "tool", "tool_call_id": "y", "content": big + "!"},
                {"role": "tool", "tool_call_id": "z", "content": [{"type": "text", "text": big}]}]
    pruned, stats = prune(messages, 0, 3)
    assert stats == PruneStats(described=2)
    assert pruned[0]["content"].startswith("[tool result pruned] shell() → ok: ")
    assert pruned[0]["content"].endswith(" [1,200 chars, 1 lines]")
    assert pruned[1]["content"].startswith("[tool result pruned] tool() → ok: ")
    assert pruned[2] is messages[2]  # not text: left alone
    assert [is_pruned(m) for m in pruned] == [True, True, False]
    assert not is_pruned({"role": "tool", "content": "plain"})


@pytest.mark.parametrize("content, outcome, failed", [
    (json.dumps({"stdout": "done\nall good", "exit_code": 0}), "ok (exit 0): done", False),
    ("\n  \nfirst line\nsecond", "ok: first line", False),
    ("", "ok", False),
    (json.dumps({"stdout": "ran\nValueError: bad", "exit_code": 2}), "exit 2: ValueError: bad",
     True),
    (json.dumps({"stdout": "ran quietly", "exit_code": 3}), "exit 3", True),
    ("one\nTypeError: first\nKeyError: last", "error: KeyError: last", True),
    ("E" * 130 + "Error: x", "error: " + ("E" * 130 + "Error: x")[:119] + "…", True),
])
def test_outcomes(content, outcome, failed):
    assert outcome_of(content) == (outcome, failed)


@pytest.mark.parametrize("arguments, shown", [
    ("", ""),
    ("{}", ""),
    ('{"b": 1, "a": 2}', "b=1"),
    ('{"content": "x", "query": "q", "path": "p"}', "path=p"),
    ('{"name": "n", "url": "u"}', "url=u"),
    ('{"path": "' + "p" * 90 + '"}', "path=" + "p" * 79 + "…"),
    ("[1, 2]", "[1, 2]"),
    ("not json " * 12, ("not json " * 12)[:79] + "…"),
])
def test_the_key_argument(arguments, shown):
    assert key_argument(arguments) == shown


def test_call_labels():
    assert call_label("t", None) == "t()"
    assert call_label("t", prune_call("i", "t", command="ls -l")) == "t(command=ls -l)"


def test_the_description_counts_the_output_s_own_lines():
    content = json.dumps({"stdout": "a\nb\nc", "exit_code": 0}) + " " * 1000
    line = describe_result("run", None, content)  # the JSON text is one line; its output 3
    assert line == f"[tool result pruned] run() → ok (exit 0): a [{len(content):,} chars, 3 lines]"
    wrapped = json.dumps({"stdout": "a\nb\nc" + "\nd" * 500, "exit_code": 0})
    assert describe_result("run", None, wrapped).endswith(
        f"[{len(wrapped):,} chars, 503 lines]")


def test_only_arguments_over_500_characters_are_cut():
    keep = prune_call("k", "write", path="p", content="c" * (ARGUMENT_MAX_CHARS - 30))
    assert len(keep["function"]["arguments"]) <= ARGUMENT_MAX_CHARS
    message = {"role": "assistant", "content": "w", "name": "me", "tool_calls": [keep]}
    assert _truncate_calls(message) == (message, 0)
    assert _truncate_calls(message)[0] is message
    edge = {"id": "e", "function": {"name": "f", "arguments": "x" * ARGUMENT_MAX_CHARS}}
    over = {"id": "o", "type": "function",
            "function": {"name": "f", "arguments": "x" * (ARGUMENT_MAX_CHARS + 1)}}
    cut, count = _truncate_calls({**message, "tool_calls": [keep, "odd", edge, over]})
    assert count == 1
    assert cut == {**message, "tool_calls": [
        keep, "odd", edge,
        {"id": "o", "type": "function",
         "function": {"name": "f", "arguments": "x" * 500 + "…[1 characters cut]"}}]}
    assert message["tool_calls"] == [keep]
    pruned, stats = prune([{**message, "tool_calls": [over, over]}], 0, 1)
    assert len(pruned[0]["tool_calls"]) == 2
    assert stats == PruneStats(truncated_calls=2)


def test_truncated_arguments_keep_nesting_and_non_ascii():
    arguments = json.dumps({"a": ["é" * 12, {"b": "ü" * 3, "n": 7}], "t": True})
    assert json.loads(truncate_arguments(arguments, 10)) == {
        "a": ["é" * 10 + "…[2 characters cut]", {"b": "ü" * 3, "n": 7}], "t": True}
    assert "é" in truncate_arguments(arguments, 10)
    assert truncate_arguments('"' + "s" * 20 + '"', 5) == '"sssss…[15 characters cut]"'


def test_only_tool_results_count_as_newer_copies():
    same = "r" * 150
    messages = [{"role": "tool", "tool_call_id": "a", "name": "grep", "content": same},
                {"role": "user", "content": same},
                {"role": "assistant", "content": same}]
    pruned, stats = prune(messages, 0, 1)
    assert stats == PruneStats()
    assert pruned == messages[:1]


def test_a_string_of_exactly_the_limit_is_not_cut():
    arguments = json.dumps({"a": "x" * 10, "b": ["y" * 10, "z" * 11]})
    assert json.loads(truncate_arguments(arguments, 10)) == {
        "a": "x" * 10, "b": ["y" * 10, "z" * 10 + "…[1 characters cut]"]}

# -- boundaries ---------------------------------------------------------------------------


def test_the_boundary_constants_are_the_documented_ones():
    assert (MIN_TAIL_MESSAGES, MIN_MIDDLE, TAIL_SOFT_CEILING) == (3, 2, 1.5)


def test_only_user_and_assistant_messages_are_summaries():
    text = f"{SUMMARY_PREFIX}\nold"
    assert [is_summary({"role": role, "content": text})
            for role in ("user", "assistant", "system", "tool")] == [True, True, False, False]
    assert not is_summary({"role": "user", "content": "a question"})


def test_the_head_end_by_hand():
    assert head_end(chat("SUATTAU"), 3) == 5  # pushed past both results
    assert head_end(chat("SUAT"), 3) == 4  # to the end
    assert head_end(chat("SU"), 5) == 2
    assert head_end(chat("SUAU"), 0) == 0
    messages = chat("SUAUA")
    messages[2]["content"] = f"{SUMMARY_PREFIX}\nold"
    assert head_end(messages, 4) == 2  # the summary at 2 starts the middle
    messages = chat("SUAUA")
    messages[3]["content"] = f"{SUMMARY_PREFIX}\nold"
    assert head_end(messages, 3) == 3  # a summary right after the head is not in it


def test_group_start_stops_at_its_low_bound_and_past_the_end():
    messages = chat("UATTT")
    assert group_start(messages, 4, 0) == 1
    assert group_start(messages, 4, 3) == 3
    assert group_start(messages, 5, 0) == 5  # past the end: as given
    assert group_start(messages, 1, 0) == 1


def test_the_latest_user_message_skips_summaries():
    messages = chat("SUAUA")
    assert latest_user_index(messages) == 3
    messages[3]["content"] = f"{SUMMARY_PREFIX}\nold"
    assert latest_user_index(messages) == 1
    assert latest_user_index(chat("SA")) is None
    assert latest_user_index(chat("U")) == 0


def test_the_tail_by_hand():
    messages = chat("SU" + "AU" * 5)  # 12 messages, no tools
    tokens = [10] * 12
    assert tail_start(messages, tokens, 2, 30) == 9  # exactly the budget: stop
    assert tail_start(messages, tokens, 2, 31) == 8
    tokens[8] = 30  # 30 taken + 30 = 60: exactly 1.5 x 40, taken
    assert tail_start(messages, tokens, 2, 40) == 8
    tokens[8] = 31  # 61: over the ceiling
    assert tail_start(messages, tokens, 2, 40) == 9
    assert tail_start(messages, [1000] * 12, 2, 10) == 9  # three messages at least
    assert tail_start(messages, [1] * 12, 2, 10_000) == 9  # all fit: the minimal tail
    assert tail_start(chat("SUAU"), [1] * 4, 2, 10_000) == 2
    assert tail_start(chat("SUATT"), [1] * 5, 1, 10_000) == 2  # onto the results' call


def test_layouts_by_hand():
    messages = chat("SUAUAUAUA")
    tokens = [10] * len(messages)
    # The latest ask (7) is in the tail of three: one layout.
    assert candidates(messages, tokens, 2, 20) == [(2, 6)]
    # The ask at 5 is in the middle, two messages after the head of 3: the tail reaching
    # back to it comes first, the head closing through it second.
    messages = chat("SUAUA" + "U" + "AT" * 8)
    tokens = [10] * len(messages)
    assert candidates(messages, tokens, 3, 30) == [(3, 5), (6, 18)]
    # The ask right after the head: reaching back to it leaves nothing; the head closes.
    messages = chat("SUA" + "U" + "AT" * 8)
    assert candidates(messages, [10] * len(messages), 3, 30) == [(4, 16)]
    messages = chat("SUAUAAAAAA")
    tokens = [10] * len(messages)
    assert candidates(messages, tokens, 3, 20) == [(4, 7)]
    assert boundaries(messages, tokens, 3, 20) == (4, 7)
    assert boundaries(chat("SU"), [1, 1], 1, 10) == (1, 1)  # nothing to compress
    assert candidates(chat("SU"), [1, 1], 1, 10) == []


def test_a_single_message_middle_by_hand():
    # The tail (4 on) gives up its first group, the call at 4 and its one result.
    messages = chat("SUAAATAAAA")
    assert candidates(messages, [10] * 10, 3, 60) == [(3, 6)]
    # The latest ask at 5 right after the tail's first message: widening keeps it in the tail.
    assert candidates(chat("SUAAAUAA"), [10] * 8, 3, 40) == [(3, 5)]
    # The tail's first group runs to the end: nothing to give up.
    assert boundaries(chat("SUAAATTT"), [1000] * 8, 3, 10) == (3, 4)


def test_an_ask_starting_the_tail_gives_one_layout():
    messages = chat("SUAUA" + "U" + "A" * 6)
    assert tail_start(messages, [10] * 12, 2, 70) == 5
    assert candidates(messages, [10] * 12, 2, 70) == [(2, 5)]


def test_an_ask_one_message_after_the_head_puts_the_closed_head_first():
    messages = chat("SUAAU" + "AT" * 8)
    assert candidates(messages, [10] * len(messages), 3, 30) == [(5, 17), (3, 4)]
