"""The larger modules of `live/` against the mutation tool (issue 40 item 8, ninth round):
the writers behind the one sync interface, the handoff prompt and its budget, the
assembly of head + summary + tail with tool pairs repaired, and where the summary goes.
Expected values come from the docstrings and SPEC §10.
"""

from __future__ import annotations

import asyncio
import dataclasses

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
