"""Dialects, unit by unit (issue 26, item 5: mutants of dialects/ that the CLI-level tests
let through).

Expected values come from the dialects' own documentation: the OpenAI chat message schema
(roles system/developer/user/assistant/tool/function, content a string, null or a list of
``{"type": "text", "text": …}`` parts, ``tool_calls`` answered by ``tool_call_id``),
LLaMA-Factory's ``dataset_info`` conventions (``conversations`` of ``from``/``value``,
``user``/``assistant``/``function_call``/``observation`` tags, ``system`` and ``tools``
columns, parts spelled ``{"type": "text", "value": …}``) and SPEC §14 (every item the
compressor does not change is written back as read, extra keys included; a summary is
never a training target). Fast: no CLI, no tokenizer.
"""

from __future__ import annotations

import json

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import RowError
from trajectory_compressor.core.plan import ALTERNATING, ANY_BUT_TOOL
from trajectory_compressor.dialects import detect, dialect_for
from trajectory_compressor.dialects.base import SOURCE, parse_tools, row_id, summary_weights
from trajectory_compressor.dialects.messages import Messages
from trajectory_compressor.dialects.openai import openai_to_sharegpt, sharegpt_to_openai
from trajectory_compressor.dialects.sharegpt import (
    SHAREGPT,
    ShareGPTTags,
    ShareGPTVariant,
    alternates,
)

# The Hermes rendering of one call (dialects/openai.py docstring): a <tool_call> block
# holding {"name": …, "arguments": {…}} as JSON, each on its own line.
CALL_LS = '<tool_call>\n{"name": "ls", "arguments": {"path": "/tmp"}}\n</tool_call>'
CALL_CAT = '<tool_call>\n{"name": "cat", "arguments": {"file": "a.txt"}}\n</tool_call>'


def _roles(dialect, row) -> list[str]:
    return [t["from"] for t in dialect.turns(row)]


# -- OpenAI messages: reading -------------------------------------------------------------

def test_each_openai_role_reads_as_its_conversation_role():
    row = {"messages": [
        {"role": "system", "content": "s"}, {"role": "developer", "content": "d"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "ls", "arguments": "{\"path\": \"/tmp\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "assistant", "content": "a", "function_call": {"name": "cat",
                                                                 "arguments": "{}"}},
        {"role": "function", "name": "cat", "content": "y"},
    ]}
    assert _roles(Messages(), row) == ["system", "system", "human", "gpt", "tool", "gpt", "tool"]


def test_an_unknown_or_missing_role_is_a_row_error():
    for message in ({"role": "robot", "content": "x"}, {"content": "x"}, {"role": 3}):
        with pytest.raises(RowError, match=r"messages\[0\]\.role"):
            Messages().turns({"messages": [message]})


def test_content_text_parts_in_both_spellings_are_joined_by_newlines():
    row = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "one"},
                                     {"type": "image_url", "image_url": {"url": "u"}},
                                     {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "value": "think"},
                                          {"type": "text", "value": "say"}]},
        {"role": "user", "content": ["bare", {"text": "untyped"}]},
    ]}
    assert [t["value"] for t in Messages().turns(row)] == ["one\ntwo", "think\nsay",
                                                           "bare\nuntyped"]


def test_bad_content_is_a_row_error_naming_the_part():
    cases = [({"role": "user", "content": 5}, r"messages\[0\]\.content"),
             ({"role": "user", "content": [7]}, r"messages\[0\]\.content\[0\]"),
             ({"role": "user", "content": [{"type": "text", "text": 1}]},
              r"messages\[0\]\.content\[0\]")]
    for message, where in cases:
        with pytest.raises(RowError, match=where):
            Messages().turns({"messages": [message]})


def test_the_row_must_hold_a_messages_list_of_objects():
    with pytest.raises(RowError, match="object"):
        Messages().turns([1])
    with pytest.raises(RowError, match="no 'messages'"):
        Messages().turns({"conversations": []})
    with pytest.raises(RowError, match="expected a list"):
        Messages().turns({"messages": "hi"})
    with pytest.raises(RowError, match=r"messages\[1\]"):
        Messages().turns({"messages": [{"role": "user", "content": "a"}, "b"]})


def test_assistant_calls_are_rendered_as_hermes_blocks_after_the_text():
    row = {"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Looking.",
         "tool_calls": [{"id": "a", "function": {"name": "ls", "arguments": '{"path": "/tmp"}'}},
                        {"id": "b", "function": {"name": "cat",
                                                 "arguments": {"file": "a.txt"}}}]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "tool", "tool_call_id": "b", "content": "y"},
    ]}
    assert Messages().turns(row)[1]["value"] == f"Looking.\n{CALL_LS}\n{CALL_CAT}"


def test_null_content_with_calls_is_only_the_blocks_and_empty_arguments_are_an_object():
    row = {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "function": {"name": "ls", "arguments": "  "}}]}]}
    assert Messages().turns(row)[0]["value"] == (
        '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>')


def test_llamafactory_tool_call_parts_are_rendered_and_answered_by_position():
    call = {"type": "tool_call", "value": json.dumps({"name": "ls",
                                                       "arguments": {"path": "/tmp"}})}
    row = {"messages": [{"role": "user", "content": [{"type": "text", "value": "go"}]},
                        {"role": "assistant", "content": [call]},
                        {"role": "tool", "content": [{"type": "text", "value": "x"}]}]}
    assert [t["value"] for t in Messages().turns(row)] == ["go", CALL_LS, "x"]
    with pytest.raises(RowError, match="tool_call"):
        Messages().turns({"messages": [{"role": "assistant", "content": [
            {"type": "tool_call", "value": "{not json"}]}]})
    with pytest.raises(RowError, match="name"):
        Messages().turns({"messages": [{"role": "assistant", "content": [
            {"type": "tool_call", "value": {"arguments": {}}}]}]})


def test_bad_tool_calls_are_row_errors():
    def row(calls):
        return {"messages": [{"role": "assistant", "content": None, "tool_calls": calls}]}

    with pytest.raises(RowError, match="expected a list"):
        Messages().turns(row({"id": "a"}))
    with pytest.raises(RowError, match=r"tool_calls\[0\] has no function name"):
        Messages().turns(row([{"id": "a", "function": {"arguments": "{}"}}]))
    with pytest.raises(RowError, match=r"tool_calls\[0\]\.function\.arguments"):
        Messages().turns(row([{"id": "a", "function": {"name": "ls", "arguments": "{x"}}]))


def test_tool_messages_answer_calls_by_id_in_any_order_and_only_once():
    def row(*answers):
        return {"messages": [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "a", "function": {"name": "ls", "arguments": "{}"}},
                {"id": "b", "function": {"name": "cat", "arguments": "{}"}}]},
            *[{"role": "tool", "tool_call_id": i, "content": "r"} for i in answers]]}

    assert len(Messages().turns(row("b", "a"))) == 3
    with pytest.raises(RowError, match="'z' answers no call"):
        Messages().turns(row("z"))
    with pytest.raises(RowError, match="'a' answers no call"):
        Messages().turns(row("a", "a"))
    with pytest.raises(RowError, match=r"messages\[3\] is a tool result with no"):
        Messages().turns(row("a", "b", "a"))


def test_a_tool_message_needs_an_assistant_call_right_before_it():
    with pytest.raises(RowError, match=r"messages\[0\] is a tool result"):
        Messages().turns({"messages": [{"role": "tool", "content": "r"}]})
    rows = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "user", "content": "interrupt"},
        {"role": "tool", "tool_call_id": "a", "content": "r"}]
    with pytest.raises(RowError, match=r"messages\[2\] is a tool result"):
        Messages().turns({"messages": rows})


def test_the_tools_column_is_a_list_or_the_same_as_a_json_string():
    base = [{"role": "user", "content": "u"}]
    for ok in ([{"type": "function"}], json.dumps([{"type": "function"}]), "", None):
        assert len(Messages().turns({"messages": base, "tools": ok})) == 1
    with pytest.raises(RowError, match="'tools' is not valid JSON"):
        Messages().turns({"messages": base, "tools": "[{"})
    with pytest.raises(RowError, match="'tools' is a JSON object"):
        Messages().turns({"messages": base, "tools": {"type": "function"}})
    # tools=None: the column is not read at all.
    assert len(Messages(tools=None).turns({"messages": base, "tools": "[{"})) == 1


def test_text_chars_counts_string_content_and_part_texts():
    row = {"messages": [{"role": "user", "content": "abcd"},
                        {"role": "assistant", "content": [{"type": "text", "text": "xy"},
                                                          {"type": "text", "value": "z"}]},
                        {"role": "assistant", "content": None}, "junk"]}
    assert Messages().text_chars(row) == 7
    assert Messages().text_chars({"messages": "no"}) == 0
    assert Messages().text_chars([1]) == 0


# -- OpenAI messages: writing -------------------------------------------------------------

def _summary_row(messages):
    dialect = Messages()
    row = {"id": 9, "messages": messages}
    turns = dialect.turns(row)
    new = [*turns[:1], {"from": "human", "value": "SUM"}, *turns[2:]]
    return dialect.with_turns(row, new, summary_at=1)


def test_the_summary_is_a_user_message_and_never_a_training_target():
    out = _summary_row([{"role": "system", "content": "s", "weight": 1},
                        {"role": "user", "content": "old", "weight": 0},
                        {"role": "assistant", "content": "a", "loss_weight": 1.0}])
    assert out["id"] == 9
    assert out["messages"][1] == {"role": "user", "content": "SUM", "weight": 0,
                                  "loss_weight": 0}
    assert out["messages"][2] == {"role": "assistant", "content": "a", "loss_weight": 1.0}


def test_the_summary_content_takes_the_row_s_own_spelling():
    parts = _summary_row([{"role": "system", "content": [{"type": "text", "value": "s"}]},
                          {"role": "user", "content": [{"type": "text", "value": "old"}]}])
    assert parts["messages"][1] == {"role": "user",
                                    "content": [{"type": "text", "value": "SUM"}]}
    openai = _summary_row([{"role": "system", "content": [{"type": "text", "text": "s"}]},
                           {"role": "user", "content": "old"}])
    assert openai["messages"][1]["content"] == [{"type": "text", "text": "SUM"}]
    plain = _summary_row([{"role": "system", "content": None}, {"role": "user",
                                                               "content": "old"}])
    assert plain["messages"][1]["content"] == "SUM"
    # No message with text content to copy the spelling from: a plain string.
    bare = _summary_row([{"role": "system", "content": None}, {"role": "user"}])
    assert bare["messages"][1]["content"] == "SUM"
    # An image part says nothing of how text is spelled: the text part after it does.
    mixed = _summary_row([{"role": "system", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}},
        {"type": "text", "value": "s"}]}, {"role": "user", "content": "old"}])
    assert mixed["messages"][1]["content"] == [{"type": "text", "value": "SUM"}]


def test_openai_regions_never_start_or_end_on_a_tool_message():
    assert Messages().boundaries([]) == ANY_BUT_TOOL


def test_unchanged_messages_are_the_objects_read_and_a_configured_summary_role_is_used():
    messages = [{"role": "system", "content": "s", "x-extra": [1]},
                {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
    dialect = Messages(summary_role="system")
    turns = dialect.turns({"messages": messages})
    out = dialect.with_turns({"messages": messages},
                             [turns[0], {"from": "system", "value": "S"}, turns[2]], 1)
    assert out["messages"][0] is messages[0] and out["messages"][2] is messages[2]
    assert out["messages"][1] == {"role": "system", "content": "S"}


def test_a_system_message_that_grew_a_notice_keeps_its_extra_keys():
    messages = [{"role": "system", "content": "Be brief.", "name": "policy", "weight": 0},
                {"role": "user", "content": "u"}]
    dialect = Messages()
    turns = dialect.turns({"messages": messages})
    grown = [{**turns[0], "value": "Be brief. NOTE"}, turns[1]]
    out = dialect.with_turns({"messages": messages}, grown)
    assert out["messages"][0] == {"role": "system", "content": "Be brief. NOTE",
                                  "name": "policy", "weight": 0}
    assert out["messages"][1] is messages[1]
    assert messages[0]["content"] == "Be brief."  # the input is untouched
    listed = [{"role": "system", "content": [{"type": "text", "value": "Be brief."}]}]
    turns = dialect.turns({"messages": listed})
    out = dialect.with_turns({"messages": listed}, [{**turns[0], "value": "Be brief. NOTE"}])
    assert out["messages"][0]["content"] == [{"type": "text", "value": "Be brief."},
                                             {"type": "text", "value": " NOTE"}]


def test_a_shortened_tool_output_keeps_its_id_name_extra_keys_and_non_text_parts():
    image = {"type": "image_url", "image_url": {"url": "u"}}
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "function": {"name": "ls", "arguments": "{}"}},
            {"id": "b", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "name": "ls", "weight": 1, "content": "long"},
        {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "value": "long"},
                                                          image]},
    ]
    dialect = Messages()
    turns = dialect.turns({"messages": messages})
    short = [turns[0], {**turns[1], "value": "sh"}, {**turns[2], "value": "sh"}]
    out = dialect.with_turns({"messages": messages}, short)["messages"]
    assert out[0] is messages[0]
    assert out[1] == {"role": "tool", "tool_call_id": "a", "name": "ls", "weight": 1,
                      "content": "sh"}
    assert out[2] == {"role": "tool", "tool_call_id": "b",
                      "content": [{"type": "text", "value": "sh"}, image]}


def test_template_messages_speak_the_chat_template_schema():
    row = {"messages": [
        {"role": "developer", "content": "d"},
        {"role": "assistant", "content": "c", "tool_calls": [
            {"id": "a", "type": "function",
             "function": {"name": "ls", "arguments": '{"path": "/tmp"}'}}]},
        {"role": "tool", "tool_call_id": "a", "name": "ls", "content": "r"},
        {"role": "assistant", "content": None, "function_call": {"name": "f"}},
        {"role": "function", "name": "f", "content": "q"},
    ], "tools": json.dumps([{"type": "function", "function": {"name": "ls"}}])}
    dialect = Messages()
    turns = dialect.turns(row)
    messages, tools = dialect.template_messages(row, turns)
    assert messages == [
        {"role": "system", "content": "d"},
        {"role": "assistant", "content": "c", "tool_calls": [
            {"id": "a", "type": "function",
             "function": {"name": "ls", "arguments": {"path": "/tmp"}}}]},
        {"role": "tool", "content": "r", "tool_call_id": "a", "name": "ls"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "q", "name": "f"},
    ]
    assert tools == [{"type": "function", "function": {"name": "ls"}}]
    summary, _ = dialect.template_messages(row, [{"from": "human", "value": "S"}])
    assert summary == [{"role": "user", "content": "S"}]
    assert Messages(tools=None).template_messages(row, turns)[1] is None


# -- Hermes ShareGPT ----------------------------------------------------------------------

def test_hermes_rows_are_validated_turn_by_turn():
    cases = [("x", "object"), ({"messages": []}, "no 'conversations'"),
             ({"conversations": {}}, "expected a list"),
             ({"conversations": ["t"]}, "turn 0 is a JSON string"),
             ({"conversations": [{"from": "user", "value": "v"}]}, "turn 0 has unknown role"),
             ({"conversations": [{"from": "gpt", "value": 1}]}, "turn 0 has a non-string")]
    for row, message in cases:
        with pytest.raises(RowError, match=message):
            SHAREGPT.turns(row)


def test_hermes_summary_gets_weight_zero_only_where_rows_carry_weights():
    row = {"conversations": [{"from": "human", "value": "a", "weight": 1},
                             {"from": "gpt", "value": "b", "weight": 1}]}
    out = SHAREGPT.with_turns(row, [{"from": "human", "value": "S"}, row["conversations"][1]],
                              summary_at=0)
    assert out["conversations"][0] == {"from": "human", "value": "S", "weight": 0}
    plain = {"conversations": [{"from": "human", "value": "a"}]}
    out = SHAREGPT.with_turns(plain, [{"from": "human", "value": "S"}], summary_at=0)
    assert out["conversations"] == [{"from": "human", "value": "S"}]
    assert SHAREGPT.boundaries([]) == ANY_BUT_TOOL


def test_hermes_text_chars_and_template_messages():
    row = {"conversations": [{"from": "system", "value": "abc"}, {"from": "human", "value": "de"},
                             {"from": "gpt", "value": None}, "junk"]}
    assert SHAREGPT.text_chars(row) == 5
    assert SHAREGPT.text_chars({"conversations": "x"}) == 0
    turns = [{"from": "system", "value": "s"}, {"from": "human", "value": "h"},
             {"from": "gpt", "value": "g"}, {"from": "tool", "value": "t"}]
    assert SHAREGPT.template_messages({}, turns) == (
        [{"role": "system", "content": "s"}, {"role": "user", "content": "h"},
         {"role": "assistant", "content": "g"}, {"role": "tool", "content": "t"}], None)


# -- ShareGPT variants (LLaMA-Factory) ----------------------------------------------------

LF_ROW = {
    "conversations": [
        {"from": "human", "value": "q1"},
        {"from": "function_call", "value": '{"name": "ls", "arguments": {}}'},
        {"from": "observation", "value": "files"},
        {"from": "gpt", "value": "a1", "loss_weight": 1},
        {"from": "human", "value": "q2"},
        {"from": "gpt", "value": "a2"},
    ],
    "system": "You are helpful.",
    "tools": json.dumps([{"name": "ls"}]),
}


def test_llamafactory_tags_read_as_conversation_roles():
    variant = ShareGPTVariant()
    assert _roles(variant, LF_ROW) == ["system", "human", "gpt", "tool", "gpt", "human", "gpt"]
    aliases = {"conversations": [{"from": "user", "value": "u"},
                                 {"from": "assistant", "value": "a"},
                                 {"from": "tool", "value": "t"},
                                 {"from": "system", "value": "s"}]}
    assert _roles(variant, aliases) == ["human", "gpt", "tool", "system"]
    turns = variant.turns(LF_ROW)
    assert turns[0]["value"] == "You are helpful."


def test_custom_dataset_info_tags_are_honoured():
    # dataset_info: "tags": {"role_tag": "role", "content_tag": "content",
    #  "user_tag": "user", "assistant_tag": "assistant", ...}, "columns": {"messages": ...}
    tags = ShareGPTTags(messages="msgs", role_tag="role", content_tag="content",
                        user_tag=("me",), assistant_tag=("bot",), observation_tag=("out",),
                        function_tag=("call",), system_tag=("sys",), system="prompt",
                        tools=None)
    row = {"msgs": [{"role": "sys", "content": "s"}, {"role": "me", "content": "u"},
                    {"role": "call", "content": "c"}, {"role": "out", "content": "o"},
                    {"role": "bot", "content": "b"}], "prompt": "P", "tools": 5}
    variant = ShareGPTVariant(tags)
    assert _roles(variant, row) == ["system", "system", "human", "gpt", "tool", "gpt"]
    with pytest.raises(RowError, match=r"msgs\[0\]\.role is 'human'"):
        variant.turns({"msgs": [{"role": "human", "content": "u"}]})
    with pytest.raises(RowError, match=r"msgs\[0\]\.content"):
        variant.turns({"msgs": [{"role": "me", "value": "u"}]})


def test_variant_rows_are_validated():
    variant = ShareGPTVariant()
    cases = [(["x"], "object"), ({"messages": []}, "no list in 'conversations'"),
             ({"conversations": "x"}, "expected a list"),
             ({"conversations": [3]}, r"conversations\[0\] is a JSON"),
             ({"conversations": [], "system": 3}, "column 'system'"),
             ({"conversations": [], "tools": "[{"}, "column 'tools' is not valid JSON"),
             ({"conversations": [], "tools": 7}, "column 'tools' is a JSON")]
    for row, message in cases:
        with pytest.raises(RowError, match=message):
            variant.turns(row)
    for ok in ({"conversations": [], "tools": ""}, {"conversations": [], "tools": None},
               {"conversations": [], "tools": {"name": "ls"}},
               {"conversations": [], "system": None}):
        assert variant.turns(ok) == []


def test_variant_rewrites_keep_the_item_s_extra_keys_and_the_system_column():
    variant = ShareGPTVariant()
    turns = variant.turns(LF_ROW)
    changed = [{**turns[0], "value": "You are helpful. NOTE"}, *turns[1:4],
               {**turns[4], "value": "A1"}, *turns[5:]]
    out = variant.with_turns(LF_ROW, changed)
    assert out["system"] == "You are helpful. NOTE"
    assert out["tools"] == LF_ROW["tools"]
    items = out["conversations"]
    assert items[3] == {"from": "gpt", "value": "A1", "loss_weight": 1}
    assert all(items[i] is LF_ROW["conversations"][i] for i in (0, 1, 2, 4, 5))


def test_variant_summary_joins_the_user_turn_before_the_region():
    # Region = turns 2..4 (function_call, observation, gpt) replaced by one summary turn
    # at 2: the summary goes after "q1" with a blank line, so the row still alternates.
    variant = ShareGPTVariant()
    turns = variant.turns(LF_ROW)
    new = [turns[0], turns[1], {"from": "human", "value": "SUM"}, turns[5], turns[6]]
    out = variant.with_turns(LF_ROW, new, summary_at=2)
    assert out["conversations"] == [{"from": "human", "value": "q1\n\nSUM"},
                                    {"from": "human", "value": "q2"},
                                    {"from": "gpt", "value": "a2"}]
    assert out["system"] == "You are helpful."


def test_variant_summary_at_the_start_is_its_own_user_turn_in_the_row_s_spelling():
    variant = ShareGPTVariant()
    row = {"conversations": [{"from": "gpt", "value": "hello", "weight": 1},
                             {"from": "user", "value": "q"},
                             {"from": "assistant", "value": "a", "weight": 1}]}
    turns = variant.turns(row)
    out = variant.with_turns(row, [{"from": "human", "value": "S"}, *turns[1:]], summary_at=0)
    assert out["conversations"][0] == {"from": "user", "value": "S", "weight": 0}
    assert out["conversations"][1] is row["conversations"][1]
    none = {"conversations": [{"from": "gpt", "value": "x"}]}
    out = variant.with_turns(none, [{"from": "human", "value": "S"}], summary_at=0)
    assert out["conversations"] == [{"from": "human", "value": "S"}]


def test_alternation_decides_the_variant_boundaries():
    alternating = [{"from": "system", "value": ""}, {"from": "human", "value": ""},
                   {"from": "gpt", "value": ""}, {"from": "tool", "value": ""},
                   {"from": "gpt", "value": ""}]
    assert alternates(alternating)
    assert ShareGPTVariant().boundaries(alternating) == ALTERNATING
    broken = [{"from": "human", "value": ""}, {"from": "human", "value": ""}]
    assert not alternates(broken)
    assert not alternates([{"from": "gpt", "value": ""}])
    assert ShareGPTVariant().boundaries(broken) == ANY_BUT_TOOL


def test_variant_text_chars_and_template_messages_with_tools():
    variant = ShareGPTVariant()
    expected = len("You are helpful.") + sum(len(i["value"]) for i in LF_ROW["conversations"])
    assert variant.text_chars(LF_ROW) == expected
    assert variant.text_chars({"conversations": "x"}) == 0
    messages, tools = variant.template_messages(LF_ROW, variant.turns(LF_ROW))
    assert messages[0] == {"role": "system", "content": "You are helpful."}
    assert messages[2] == {"role": "assistant", "content": LF_ROW["conversations"][1]["value"]}
    assert tools == [{"name": "ls"}]
    no_tools = ShareGPTVariant(ShareGPTTags(tools=None))
    assert no_tools.template_messages(LF_ROW, [])[1] is None


# -- base helpers -------------------------------------------------------------------------

def test_row_id_summary_weights_and_parse_tools():
    assert row_id({"uuid": "u", "id": 1}) == 1
    assert row_id({"sample_id": 4}) == 4
    assert row_id({"id": [1], "trajectory_id": "t"}) == "t"
    assert row_id([1]) is None and row_id({"x": 1}) is None
    assert summary_weights([{"loss_weight": 1}, {"weight": 2}, "x"]) == {"weight": 0,
                                                                          "loss_weight": 0}
    assert summary_weights("x") == {} and summary_weights(None) == {}
    assert parse_tools('[{"a": 1}]') == [{"a": 1}]
    assert parse_tools(" ") is None and parse_tools("[") is None and parse_tools([]) is None
    assert parse_tools({"a": 1}) is None


# -- ShareGPT <-> OpenAI conversion -------------------------------------------------------

def test_conversion_maps_each_role_both_ways_and_keeps_extra_keys():
    turns = [{"from": "system", "value": "s"}, {"from": "human", "value": "h", "weight": 0},
             {"from": "gpt", "value": "g", "weight": 1}]
    messages = sharegpt_to_openai(turns)
    assert messages == [{"role": "system", "content": "s"},
                        {"role": "user", "content": "h", "weight": 0},
                        {"role": "assistant", "content": "g", "weight": 1}]
    assert openai_to_sharegpt(messages) == turns


def test_conversion_of_calls_and_responses():
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "x1", "type": "function", "function": {"name": "ls",
                                                      "arguments": '{"path": "/tmp"}'}}]},
        {"role": "tool", "tool_call_id": "x1", "content": "files"}]
    turns = openai_to_sharegpt(messages)
    assert turns == [
        {"from": "gpt", "value": CALL_LS},
        {"from": "tool", "value": '<tool_response>\n{"tool_call_id": "x1", "name": "ls", '
                                  '"content": "files"}\n</tool_response>'}]
    back = sharegpt_to_openai(turns)
    assert back == [{**messages[0]}, {"role": "tool", "tool_call_id": "x1", "name": "ls",
                                      "content": "files"}]


# -- detection ----------------------------------------------------------------------------

def test_detection_by_the_first_rows():
    config = CompressionConfig()
    assert detect([{"messages": [{"role": "user", "content": "x"}]}], config).name == "openai"
    assert detect([{"conversations": [{"from": "human", "value": "x"}]}],
                  config).name == SHAREGPT.name
    for tag in ("user", "assistant", "function_call", "observation"):
        assert detect([{"conversations": [{"from": tag, "value": "x"}]}],
                      config).name == "sharegpt-variant"
    assert detect([{"conversations": [], "system": "s"}], config).name == "sharegpt-variant"
    assert detect([{"conversations": [], "tools": "[]"}], config).name == "sharegpt-variant"
    assert detect([{"conversations": [], "system": None}], config).name == SHAREGPT.name
    assert detect(["x", {"messages": [{"role": "user"}]}], config).name == "openai"
    assert detect([{"messages": [{"content": "no role"}]}], config).name == SHAREGPT.name


def test_the_format_option_wins_over_detection():
    hermes = [{"conversations": [{"from": "human", "value": "x"}]}]
    assert detect(hermes, CompressionConfig(dataset_format="openai")).name == "openai"
    assert detect(hermes, CompressionConfig(dataset_format="sharegpt-variant")).name == \
        "sharegpt-variant"
    openai = [{"messages": [{"role": "user", "content": "x"}]}]
    assert detect(openai, CompressionConfig(dataset_format="sharegpt")) is SHAREGPT


def test_dialect_for_puts_a_configured_tag_first_and_keeps_the_defaults():
    config = CompressionConfig(dataset_user_tag="me", dataset_assistant_tag="bot")
    dialect = dialect_for(config, "sharegpt")
    assert isinstance(dialect, ShareGPTVariant)
    assert dialect.tags.user_tag == ("me", "human", "user")
    assert dialect.tags.assistant_tag == ("bot", "gpt", "assistant")
    assert dialect.tags.observation_tag == ("observation", "tool")
    again = dialect_for(CompressionConfig(dataset_user_tag="user"), "sharegpt-variant")
    assert again.tags.user_tag == ("user", "human")
    assert isinstance(detect([{"conversations": []}], config), ShareGPTVariant)
    # Tags not configured keep LLaMA-Factory's defaults.
    t = dialect.tags
    assert (t.messages, t.role_tag, t.content_tag, t.system, t.tools) == (
        "conversations", "from", "value", "system", "tools")
    custom = dialect_for(CompressionConfig(dataset_role_tag="role", dataset_system="sys",
                                           dataset_tools="fns", dataset_messages="msgs",
                                           dataset_content_tag="text"), "sharegpt")
    t = custom.tags
    assert (t.messages, t.role_tag, t.content_tag, t.system, t.tools) == (
        "msgs", "role", "text", "sys", "fns")
    assert dialect_for(CompressionConfig(), "sharegpt") is SHAREGPT
    openai = dialect_for(CompressionConfig(summary_role="system"), "openai")
    assert isinstance(openai, Messages) and openai.summary_role == "system"
    assert openai.column == "messages" and openai.tools == "tools"


def test_turns_remember_their_source_items():
    row = {"messages": [{"role": "user", "content": "x"}]}
    assert Messages().turns(row)[0][SOURCE] is row["messages"][0]


# -- more survivors: conversion edge cases, variant rewrites --------------------------------

def test_assistant_text_before_its_calls_is_the_content():
    # The Hermes rendering: TEXT + "\n" + the blocks; the text is the message's content.
    messages = sharegpt_to_openai([{"from": "gpt", "value": "Looking.\n" + CALL_LS}])
    assert messages[0]["content"] == "Looking."
    assert [c["function"]["name"] for c in messages[0]["tool_calls"]] == ["ls"]
    assert openai_to_sharegpt(messages) == [{"from": "gpt", "value": "Looking.\n" + CALL_LS}]


def test_a_call_block_that_is_not_a_call_object_stays_text():
    value = "<tool_call>\n[1, 2]\n</tool_call>"
    assert sharegpt_to_openai([{"from": "gpt", "value": value}]) == [
        {"role": "assistant", "content": value}]


def test_a_response_id_is_given_to_one_call_only():
    # Two calls of the same tool; both responses claim the id "x": the first call takes
    # it, the second keeps its generated id call_<turn>_<k>.
    calls = "\n".join([CALL_LS, CALL_LS])
    responses = "\n".join(
        '<tool_response>\n' + json.dumps({"tool_call_id": "x", "name": "ls", "content": c})
        + '\n</tool_response>' for c in ("a", "b"))
    messages = sharegpt_to_openai([{"from": "gpt", "value": calls},
                                   {"from": "tool", "value": responses}])
    assert [c["id"] for c in messages[0]["tool_calls"]] == ["x", "call_0_1"]
    assert [(m["tool_call_id"], m["name"]) for m in messages[1:]] == [("x", "ls"),
                                                                     ("call_0_1", "ls")]


def test_a_tool_turn_answering_no_call_has_no_name():
    (message,) = sharegpt_to_openai([{"from": "tool", "value": "plain output"}])
    assert message["role"] == "tool" and message["content"] == "plain output"
    assert "name" not in message and isinstance(message["tool_call_id"], str)


def test_tool_messages_take_their_name_from_the_message_or_the_call_they_answer():
    messages = [{"role": "assistant", "content": [{"type": "text", "text": "Two."}],
                 "tool_calls": [
                     {"id": "x1", "function": {"name": "ls", "arguments": "{}"}},
                     {"id": "x2", "function": {"name": "cat", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "x1", "content": "r1"},
                {"role": "tool", "tool_call_id": "x2", "name": "cat", "content": "r2"}]
    turns = openai_to_sharegpt(messages)
    assert turns[0]["value"].startswith("Two.\n<tool_call>")
    assert turns[1] == {"from": "tool", "value": '<tool_response>\n{"tool_call_id": "x1", '
                        '"name": "ls", "content": "r1"}\n</tool_response>'}
    assert turns[2] == {"from": "tool", "value": '<tool_response>\n{"tool_call_id": "x2", '
                        '"name": "cat", "content": "r2"}\n</tool_response>'}


def test_hermes_helpers():
    from trajectory_compressor.dialects.sharegpt import is_hermes

    assert is_hermes({"from": "gpt", "value": "x"})
    assert not is_hermes({"from": "assistant", "value": "x"})
    assert not is_hermes({"from": "gpt", "value": None})
    assert SHAREGPT.text_chars({"other": 1}) == 0
    turns = [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b", "weight": 1}]
    row = {"conversations": turns}
    out = SHAREGPT.with_turns(row, turns, summary_at=0)
    # The summary gets weight 0 in the new row; the turns given are left as they were.
    assert out["conversations"][0] == {"from": "human", "value": "a", "weight": 0}
    assert turns == [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b", "weight": 1}]


def test_tags_are_a_frozen_hashable_value():
    import dataclasses

    assert hash(ShareGPTTags()) == hash(ShareGPTTags())
    assert ShareGPTTags(user_tag=("me",)) != ShareGPTTags()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ShareGPTTags().messages = "x"  # type: ignore[misc]


def test_variant_summary_after_several_pairs_keeps_every_turn_before_it():
    variant = ShareGPTVariant()
    items = [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"},
             {"from": "human", "value": "q2"}, {"from": "function_call", "value": "c"},
             {"from": "observation", "value": "o"}, {"from": "gpt", "value": "a2"},
             {"from": "human", "value": "q3"}, {"from": "gpt", "value": "a3"}]
    row = {"conversations": items}
    turns = variant.turns(row)
    new = [*turns[:3], {"from": "human", "value": "SUM"}, *turns[6:]]
    out = variant.with_turns(row, new, summary_at=3)
    assert out["conversations"] == [items[0], items[1], {"from": "human", "value": "q2\n\nSUM"},
                                    items[6], items[7]]


def test_a_variant_summary_built_from_a_replaced_turn_is_still_a_user_turn():
    variant = ShareGPTVariant()
    row = {"conversations": [{"from": "gpt", "value": "hello", "weight": 1},
                             {"from": "human", "value": "q"}]}
    turns = variant.turns(row)
    out = variant.with_turns(row, [{**turns[0], "value": "S"}, turns[1]], summary_at=0)
    assert out["conversations"][0] == {"from": "human", "value": "S", "weight": 0}


def test_a_custom_system_column_is_written_back_under_its_own_name():
    variant = ShareGPTVariant(ShareGPTTags(system="prompt"))
    row = {"conversations": [{"from": "human", "value": "q"}], "prompt": "P"}
    turns = variant.turns(row)
    out = variant.with_turns(row, [{**turns[0], "value": "P2"}, turns[1]])
    assert out["prompt"] == "P2" and "system" not in out


def test_a_tool_turn_in_another_shape_answers_the_pending_call_verbatim():
    messages = sharegpt_to_openai([{"from": "gpt", "value": CALL_LS},
                                   {"from": "tool", "value": "plain output"}])
    assert messages[1] == {"role": "tool", "tool_call_id": messages[0]["tool_calls"][0]["id"],
                           "name": "ls", "content": "plain output"}


def test_assistant_text_without_calls_is_kept_exactly_and_text_after_calls_is_kept():
    assert sharegpt_to_openai([{"from": "gpt", "value": "Hello\n"}]) == [
        {"role": "assistant", "content": "Hello\n"}]
    (message,) = sharegpt_to_openai([{"from": "gpt", "value": "Text\n" + CALL_LS + "\nAfter"}])
    # Not exact (documented): text after the blocks moves before them, but is kept.
    assert message["content"].startswith("Text") and message["content"].endswith("After")
    assert len(message["tool_calls"]) == 1


@pytest.mark.parametrize("before, after", [("Result:\n", "\n"), ("", "\n  \n"), ("\n", "")])
def test_one_response_block_with_anything_around_it_is_the_whole_turn(before, after):
    # One block with anything around it (text or white space) is not the canonical
    # rendering: the tool message's content is the turn as read (SPEC §14), not the
    # block cut out of it.
    value = (f'{before}<tool_response>\n{{"name": "ls", "content": "a.txt"}}\n'
             f'</tool_response>{after}')
    messages = sharegpt_to_openai([{"from": "gpt", "value": CALL_LS},
                                   {"from": "tool", "value": value}])
    assert messages[1]["role"] == "tool" and messages[1]["name"] == "ls"
    assert messages[1]["content"] == value
    assert messages[1]["tool_call_id"] == messages[0]["tool_calls"][0]["id"]


def test_calls_without_text_read_back_as_the_calls_alone():
    # OpenAI: an assistant message that only calls tools has content null.
    messages = sharegpt_to_openai([{"from": "gpt", "value": CALL_LS}])
    assert messages[0]["content"] is None
    assert openai_to_sharegpt(messages) == [{"from": "gpt", "value": CALL_LS}]
    assert openai_to_sharegpt([{"role": "user", "content": None}]) == [
        {"from": "human", "value": ""}]
