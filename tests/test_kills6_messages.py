"""Round 6 of the mutation kills (issue 26, item 5) in `dialects/messages.py`, the OpenAI /
LLaMA-Factory ``messages`` dialect.

From the module's docstring, SPEC §14 and README "Dialects" (the table's OpenAI and
LLaMA-Factory ``messages`` rows), and OpenAI's chat format: content is a string, null or
a list of parts (``{"type": "text", "text": ...}``; LLaMA-Factory spells ``"value"``);
only text parts are counted, other parts (images) are kept but not counted; a tool
message answers a call of the assistant message before it by ``tool_call_id`` or, when
the calls carry no ids, by position, each call once; a summary message is written in the
row's own content spelling (a string where the row's messages hold strings); a system
message that grows a suffix, or a tool message whose text changed, keeps its content's
spelling and its other parts. A part holding both ``text`` and ``value`` is read by its
``text`` (`_content_text`), so that is the spelling written back.
"""

from __future__ import annotations

import pytest

from trajectory_compressor.core.errors import RowError
from trajectory_compressor.dialects.messages import Messages

SUMMARY = "[CONTEXT SUMMARY]: Listed the files."
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}


def _call(call_id: str | None = None, name: str = "ls") -> dict:
    call: dict = {"type": "function", "function": {"name": name, "arguments": "{}"}}
    if call_id is not None:
        call["id"] = call_id
    return call


# -- reading --------------------------------------------------------------------------------


def test_a_tool_message_without_an_id_answers_an_id_call_by_position():
    row = {"messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "tool", "content": "a.txt"},
        {"role": "assistant", "content": "One file."}]}
    assert [t["from"] for t in Messages().turns(row)] == ["human", "gpt", "tool", "gpt"]


def test_an_id_answers_calls_without_ids_by_position():
    # LLaMA-Factory tool_call parts carry no ids: a tool_call_id cannot name one of them.
    row = {"messages": [
        {"role": "user", "content": [{"type": "text", "value": "list"}]},
        {"role": "assistant", "content": [
            {"type": "tool_call", "value": '{"name": "ls", "arguments": {}}'}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "value": "a"}]}]}
    assert [t["value"] for t in Messages().turns(row)][2] == "a"
    row["messages"][1] = {"role": "assistant", "content": None, "tool_calls": [_call()]}
    assert len(Messages().turns(row)) == 3


@pytest.mark.parametrize("assistant", [
    {"role": "assistant", "content": None, "tool_calls": [_call()]},
    {"role": "assistant", "content": [
        {"type": "tool_call", "value": '{"name": "ls", "arguments": {}}'}]},
], ids=["openai", "llamafactory"])
def test_a_call_answered_by_position_is_answered_once(assistant):
    row = {"messages": [{"role": "user", "content": "list"}, assistant,
                        {"role": "tool", "content": "a.txt"},
                        {"role": "tool", "content": "b.txt"}]}
    with pytest.raises(RowError, match=r"messages\[3\] is a tool result with no assistant "
                                       "tool call before it"):
        Messages().turns(row)


def test_a_tool_call_part_that_is_not_json_says_so():
    row = {"messages": [{"role": "assistant", "content": [
        {"type": "tool_call", "value": '{"name": "ls", '}]}]}
    with pytest.raises(RowError, match=r"messages\[0\]\.content\[0\] is a tool_call whose "
                                       "value is not JSON"):
        Messages().turns(row)


def test_parts_that_are_not_text_are_kept_but_not_counted():
    content = [{"type": "text", "text": "Look at this."}, IMAGE,
               {"type": "image", "value": "img-0.png"},
               {"image_url": {"url": "https://example.com/b.png"}}]
    row = {"messages": [{"role": "user", "content": content}]}
    [turn] = Messages().turns(row)
    assert turn["value"] == "Look at this."


# -- writing --------------------------------------------------------------------------------


def _with_system_suffix(content: list) -> list:
    row = {"messages": [{"role": "system", "content": content},
                        {"role": "user", "content": "hi"}]}
    dialect = Messages()
    turns = dialect.turns(row)
    grown = {**turns[0], "value": turns[0]["value"] + "\n\nNOTE"}
    out = dialect.with_turns(row, [grown, turns[1]])
    assert out["messages"][1] is row["messages"][1]
    return out["messages"][0]["content"]


def test_a_system_suffix_is_a_text_part_in_the_row_s_spelling():
    # No part of type "text" to copy: OpenAI's spelling.
    only_input_text = [{"type": "input_text", "text": "You help."}]
    assert _with_system_suffix(only_input_text) == [
        *only_input_text, {"type": "text", "text": "\n\nNOTE"}]
    # LLaMA-Factory's "value" spelling; an image after it changes nothing.
    lf = [{"type": "text", "value": "You help."}, IMAGE]
    assert _with_system_suffix(lf) == [*lf, {"type": "text", "value": "\n\nNOTE"}]
    # A part with both keys is read by its "text".
    both = [{"type": "text", "text": "You help.", "value": "You help."}]
    assert _with_system_suffix(both) == [*both, {"type": "text", "text": "\n\nNOTE"}]


def _summary_content(messages: list, summary_at: int | None) -> object:
    row = {"messages": messages}
    dialect = Messages()
    turns = dialect.turns(row)
    summary = {"from": "human", "value": SUMMARY}
    out = dialect.with_turns(row, [turns[0], summary, turns[-1]], summary_at)
    assert out["messages"][0] is messages[0] and out["messages"][2] is messages[-1]
    assert out["messages"][1]["role"] == "user"
    return out["messages"][1]["content"]


def test_a_summary_without_a_source_turn_is_written_even_without_summary_at():
    messages = [{"role": "system", "content": "You help."},
                {"role": "user", "content": "list"},
                {"role": "assistant", "content": "Done."}]
    assert _summary_content(messages, None) == SUMMARY
    assert _summary_content(messages, 1) == SUMMARY


def test_the_summary_spells_its_content_as_the_row_s_first_content():
    # The row's messages hold a string first (the system prompt), parts later (an image):
    # the summary is a string, as the README's OpenAI summary turn.
    messages = [{"role": "system", "content": "You help."},
                {"role": "user", "content": [{"type": "text", "text": "What is it?"}, IMAGE]},
                {"role": "assistant", "content": "A cat."}]
    assert _summary_content(messages, 1) == SUMMARY
    # A text part with both keys is read by its "text": so is the summary spelled.
    both = [{"role": "user", "content": [{"type": "text", "text": "Go.", "value": "Go."}]},
            {"role": "assistant", "content": "Went."},
            {"role": "user", "content": [{"type": "text", "text": "Ok.", "value": "Ok."}]}]
    assert _summary_content(both, 1) == [{"type": "text", "text": SUMMARY}]


def _shortened_tool_content(content: list) -> list:
    row = {"messages": [
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": content}]}
    dialect = Messages()
    turns = dialect.turns(row)
    shorter = {**turns[1], "value": "short"}
    out = dialect.with_turns(row, [turns[0], shorter])
    tool = out["messages"][1]
    assert tool["tool_call_id"] == "c1" and tool["role"] == "tool"
    return tool["content"]


def test_a_shortened_tool_output_keeps_its_spelling_and_its_other_parts():
    untyped_image = {"image_url": {"url": "https://example.com/b.png"}}
    assert _shortened_tool_content([{"type": "text", "text": "a long output"},
                                    untyped_image]) == [
        {"type": "text", "text": "short"}, untyped_image]
    typed_image = {"type": "image", "value": "img-0.png"}
    assert _shortened_tool_content([{"type": "text", "value": "a long output"},
                                    typed_image]) == [
        {"type": "text", "value": "short"}, typed_image]
    # An untyped text part is text: replaced, not kept beside the new text.
    assert _shortened_tool_content([{"text": "a long output"}]) == [
        {"type": "text", "text": "short"}]
    assert _shortened_tool_content([{"type": "text", "text": "a long output",
                                     "value": "a long output"}]) == [
        {"type": "text", "text": "short"}]
