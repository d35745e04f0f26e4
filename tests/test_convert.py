"""ShareGPT ↔ OpenAI conversion: lossless on the samples, ids paired, extras carried."""

from __future__ import annotations

import copy
import json

from conversations import conversations, orphans
from hypothesis import given, settings

from trajectory_compressor.dialects.openai import (
    openai_to_sharegpt,
    render_tool_call,
    render_tool_response,
    sharegpt_to_openai,
)


def sample_rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def dumps(value):
    return json.dumps(value, ensure_ascii=False)


def test_every_sample_row_round_trips_exactly(sample_jsonl):
    rows = sample_rows(sample_jsonl)
    assert len(rows) == 50
    for row in rows:
        turns = row["conversations"]
        snapshot = copy.deepcopy(turns)
        messages = sharegpt_to_openai(turns)
        assert turns == snapshot
        assert dumps(openai_to_sharegpt(messages)) == dumps(turns)  # key order too


def test_sample_calls_and_results_are_paired_by_the_recorded_ids(sample_jsonl):
    for row in sample_rows(sample_jsonl):
        messages = sharegpt_to_openai(row["conversations"])
        assert orphans(messages) == (set(), set())
        for turn, message in zip(
            [t for t in row["conversations"] if t["from"] == "tool"],
            [m for m in messages if m["role"] == "tool"], strict=True,
        ):
            assert json.loads(turn["value"][len("<tool_response>"):-len("</tool_response>")]
                              )["tool_call_id"] == message["tool_call_id"]


def test_think_and_extra_keys_are_kept():
    turns = [{"from": "system", "value": "sys"},
             {"from": "human", "value": "hi", "weight": 0},
             {"from": "gpt", "value": "<think>\nplan\n</think>\n" +
              render_tool_call("read_file", {"path": "a.py"}), "weight": 1},
             {"from": "tool", "value": render_tool_response("call_x", "read_file", "text")},
             {"from": "gpt", "value": "<think>\nok\n</think>\nAll done.", "weight": 1}]
    messages = sharegpt_to_openai(turns)
    assert messages[1] == {"role": "user", "content": "hi", "weight": 0}
    assert messages[2]["content"] == "<think>\nplan\n</think>"
    assert messages[2]["weight"] == 1
    assert messages[2]["tool_calls"] == [{"id": "call_x", "type": "function", "function": {
        "name": "read_file", "arguments": '{"path": "a.py"}'}}]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_x", "name": "read_file",
                           "content": "text"}
    assert messages[4]["content"] == "<think>\nok\n</think>\nAll done."
    assert openai_to_sharegpt(messages) == turns


def test_parallel_results_are_matched_by_name_and_missing_ids_generated():
    calls = "\n".join([render_tool_call("a", {}), render_tool_call("b", {})])
    no_id = '<tool_response>\n{"name": "a", "content": "ra"}\n</tool_response>'
    turns = [{"from": "human", "value": "go"},
             {"from": "gpt", "value": calls},
             {"from": "tool", "value": render_tool_response("id_b", "b", "rb")},
             {"from": "tool", "value": no_id}]
    messages = sharegpt_to_openai(turns)
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_1_0", "id_b"]
    assert messages[1]["content"] is None
    assert [(m["tool_call_id"], m["name"]) for m in messages[2:]] == [("id_b", "b"),
                                                                      ("call_1_0", "a")]
    assert messages[3]["content"] == no_id  # not the Hermes rendering: kept verbatim
    assert orphans(messages) == (set(), set())
    assert openai_to_sharegpt(messages) == turns


def test_several_responses_in_one_turn_become_one_message_each():
    calls = "\n".join([render_tool_call("a", {}), render_tool_call("b", {})])
    both = render_tool_response("i1", "a", "ra") + "\n" + render_tool_response("i2", "b", "rb")
    messages = sharegpt_to_openai([{"from": "gpt", "value": calls},
                                   {"from": "tool", "value": both}])
    assert [(m["role"], m.get("content")) for m in messages] == [
        ("assistant", None), ("tool", "ra"), ("tool", "rb")]
    assert orphans(messages) == (set(), set())


def test_a_call_block_that_is_not_a_call_stays_text():
    value = "Use <tool_call>not json</tool_call> like this"
    (message,) = sharegpt_to_openai([{"from": "gpt", "value": value}])
    assert message == {"role": "assistant", "content": value}


def parsed_arguments(messages):
    """Messages with call arguments parsed: ShareGPT stores them as objects, so their JSON
    spelling (spacing, escapes) is re-serialized on the way back."""
    out = copy.deepcopy(messages)
    for message in out:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


@settings(deadline=None)
@given(conversations())
def test_openai_conversations_round_trip(messages):
    snapshot = copy.deepcopy(messages)
    turns = openai_to_sharegpt(messages)
    assert messages == snapshot
    assert [t["from"] for t in turns] == [
        {"system": "system", "user": "human", "assistant": "gpt", "tool": "tool"}[m["role"]]
        for m in messages]
    assert parsed_arguments(sharegpt_to_openai(turns)) == parsed_arguments(messages)
