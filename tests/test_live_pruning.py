"""Phase 1: tool results described, duplicates pointed at, big arguments cut."""

from __future__ import annotations

import copy
import json

from trajectory_compressor.live.pruning import (
    ARGUMENT_MAX_CHARS,
    PRUNE_MIN_CHARS,
    describe_result,
    prune,
    truncate_arguments,
)


def call(call_id, name, **args):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def test_describes_tool_tool_argument_outcome_and_size():
    output = json.dumps({"stdout": "collected 3 items\n" + "x\n" * 300 +
                         "AssertionError: expected 2", "exit_code": 1})
    line = describe_result("terminal", call("c1", "terminal", command="pytest -q"), output)
    assert line.startswith("[tool result pruned] terminal(command=pytest -q) → exit 1: ")
    assert "AssertionError: expected 2" in line
    assert f"[{len(output):,} chars, 302 lines]" in line
    assert "\n" not in line

    ok = describe_result("read_file", call("c2", "read_file", path="src/app.py"),
                         "import os\n" * 100)
    assert "read_file(path=src/app.py) → ok: import os" in ok


def test_prunes_only_the_given_range_and_never_the_input():
    big = "line of output\n" * 100
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call("a", "read_file", path="x.py")]},
        {"role": "tool", "tool_call_id": "a", "content": big + "first"},
        {"role": "assistant", "content": None, "tool_calls": [call("b", "read_file", path="y.py")]},
        {"role": "tool", "tool_call_id": "b", "content": big + "second"},
    ]
    snapshot = copy.deepcopy(messages)
    pruned, stats = prune(messages, 0, 2)
    assert messages == snapshot
    assert len(pruned) == 2 and stats.described == 1
    assert pruned[1]["content"].startswith("[tool result pruned] read_file(path=x.py)")
    assert pruned[1]["tool_call_id"] == "a"
    assert pruned[0] is messages[0]  # unchanged messages are not copied needlessly


def test_small_results_stay_as_they_are():
    messages = [{"role": "tool", "tool_call_id": "a", "content": "x" * (PRUNE_MIN_CHARS - 1)}]
    assert prune(messages, 0, 1)[0] == messages


def test_only_the_newest_copy_of_identical_results_is_kept():
    same = "identical output\n" * 20
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call("a", "web_search", query="q")]},
        {"role": "tool", "tool_call_id": "a", "content": same},
        {"role": "assistant", "content": None, "tool_calls": [call("b", "web_search", query="q")]},
        {"role": "tool", "tool_call_id": "b", "content": same},
    ]
    pruned, stats = prune(messages, 0, 2)  # the newer copy is in the protected tail
    assert stats.deduplicated == 1
    assert pruned[1]["content"] == ("[duplicate tool result: same output as the newer "
                                    "web_search result in message 3]")


def test_large_arguments_are_cut_and_stay_valid_json():
    content = "y" * 5000
    messages = [{"role": "assistant", "content": "writing",
                 "tool_calls": [call("w", "write_file", path="big.txt", content=content)]}]
    pruned, stats = prune(messages, 0, 1)
    assert stats.truncated_calls == 1
    args = json.loads(pruned[0]["tool_calls"][0]["function"]["arguments"])
    assert args["path"] == "big.txt"
    assert args["content"].startswith("y" * ARGUMENT_MAX_CHARS + "…[4500 characters cut]")
    assert json.loads(messages[0]["tool_calls"][0]["function"]["arguments"])["content"] == content


def test_unparseable_arguments_are_cut_as_text():
    assert truncate_arguments("{" * 900, 10) == "{" * 10 + "…[890 characters cut]"
