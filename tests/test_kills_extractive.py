"""The extractive summarizer, line by line (issue 26, item 5).

What it must write comes from its documentation (core/extractive.py, README "--summarizer
extractive", SPEC §5): the identifiers the later turns mention again first, in up to half
of the budget; the tools called with their key arguments; files and paths; errors and
exit codes; the first and last lines of long outputs; within ``summary_target_tokens``;
``[CONTEXT SUMMARY]:`` exactly once. Tokens are counted as characters here, so every
budget below is worked out by hand.
"""

from __future__ import annotations

import asyncio
import json

from trajectory_compressor.core.extractive import (
    ExtractiveSummarizer,
    clip,
    extractive_text,
    response_text,
    truncate_to_tokens,
)
from trajectory_compressor.core.summary import SummaryRequest

PREFIX = "[CONTEXT SUMMARY]:"


def chars(text: str) -> int:
    return len(text)


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def response(payload: object) -> str:
    body = payload if isinstance(payload, str) else json.dumps(payload)
    return f"<tool_response>\n{body}\n</tool_response>"


REGION = [
    {"from": "human", "value": "Please fix the failing test."},
    {"from": "gpt", "value": "<think>secret plan</think>I will read it.\n"
                             + call("read_file", path="/src/app/main.py", content="x" * 50)},
    {"from": "tool", "value": response({"stdout": "one\ntwo\nthree\nfour\nfive",
                                        "exit_code": 2})},
    {"from": "gpt", "value": call("run", command="pytest -q")},
    {"from": "tool", "value": response("Traceback (most recent call last):\n  File x\n"
                                       "ValueError: bad input\nexit code 0")},
]


def summary(turns=REGION, first=3, target=2000, tail=()) -> str:
    request = SummaryRequest(turns=turns, first_index=first, target_tokens=target,
                             tail_items=tuple(tail))
    return extractive_text(request, chars)


def test_every_documented_section_in_order_with_turn_numbers():
    text = summary()
    assert text.startswith(PREFIX + " Turns 3-7 (5 turns) were condensed; what they did:\n")
    assert text.count(PREFIX) == 1
    sections = ["Tool calls:", "Errors:", "Files and paths:", "Outputs:", "Messages:"]
    positions = [text.index(s) for s in sections]
    assert positions == sorted(positions)
    assert "- turn 4: read_file(path=/src/app/main.py, content=<length 50>)" in text
    assert "- turn 6: run(command=pytest -q)" in text
    assert "- turn 5: exit code 2" in text
    assert "- turn 7: ValueError: bad input" in text  # the last error line of a traceback
    assert "exit code 0" not in text.split("Errors:")[1].split("Files")[0]
    assert "- /src/app/main.py" in text
    assert "- turn 5: one … (3 more lines) … five" in text
    assert "- turn 3 (user): Please fix the failing test." in text
    assert "- turn 4 (assistant): I will read it." in text
    assert "secret plan" not in text  # a <think> block is not what the assistant did


def test_short_outputs_are_shown_whole_and_text_exit_codes_are_errors():
    turns = [{"from": "tool", "value": "first line\n\nsecond line"},
             {"from": "tool", "value": "bash: foo: command not found\nexit status 127"}]
    text = summary(turns, first=0)
    assert "- turn 0: first line | second line" in text
    assert "- turn 1: exit code 127" in text
    assert "- turn 1: bash: foo: command not found" in text


def test_a_call_without_key_arguments_shows_its_first_two_other_arguments():
    turns = [{"from": "gpt", "value": call("search", alpha=1, beta=2, gamma=3, text="t")},
             {"from": "gpt", "value": "<tool_call>\nnot json\n</tool_call>"},
             {"from": "gpt", "value": call("a", path="p1", file="f1", command="c", url="u")}]
    text = summary(turns, first=0)
    assert "- turn 0: search(alpha=1, beta=2, text=<length 1>)" in text
    assert "- turn 1: not json" in text
    assert "- turn 2: a(path=p1, file=f1, command=c)" in text
    # OpenAI-style arguments are a JSON string; text that is not JSON is the input itself.
    strings = [{"from": "gpt", "value": "<tool_call>" + json.dumps(
        {"name": "ls", "arguments": json.dumps({"path": "/a/b"})}) + "</tool_call>"},
        {"from": "gpt", "value": "<tool_call>" + json.dumps(
            {"name": "sh", "arguments": "echo hi"}) + "</tool_call>"}]
    text = summary(strings, first=0)
    assert "- turn 0: ls(path=/a/b)" in text
    assert "- turn 1: sh(input=echo hi)" in text


def test_the_summary_stays_within_its_budget_at_every_size():
    for target in (40, 80, 120, 160, 200, 260, 320, 400, 600):
        text = summary(target=target)
        assert len(text) <= target, target
    # A budget too small for any item keeps the header only (cut to fit).
    assert summary(target=40) == (PREFIX + " Turns 3-7 (5 turns) were condensed; what")[:40]


def test_a_long_list_of_one_kind_cannot_starve_the_others():
    calls = [{"from": "gpt", "value": call("run", command=f"step {i}")} for i in range(30)]
    turns = [*calls, {"from": "tool", "value": "ValueError: boom"}]
    text = summary(turns, first=0, target=400)
    assert "- turn 30: ValueError: boom" in text
    assert len(text) <= 400


def test_tail_items_come_first_within_half_the_budget():
    tail = ["/etc/app.conf", "ID-123", "  ", "deadbeef"]
    text = summary(tail=tail, target=2000)
    header_end = text.index("\n") + 1
    assert text[header_end:].startswith("Referenced later: /etc/app.conf; ID-123; deadbeef\n")
    # Half the budget: "Referenced later: " (18) + 95 = 113 characters for one item,
    # + "; " + 95 = 210 for two, 307 for three.
    a, b, c = "a" * 95, "b" * 95, "c" * 95
    assert "Referenced later" not in summary(tail=[a, b, c], target=224)  # 112 < 113
    one = summary(tail=[a, b, c], target=226)  # 113: exactly one
    assert f"Referenced later: {a}\n" in one
    two = summary(tail=[a, b, c], target=420)  # 210: exactly two
    assert f"Referenced later: {a}; {b}\n" in two
    assert f"Referenced later: {a}\n" in summary(tail=[a, b, c], target=418)  # 209
    assert len(one) <= 226 and len(two) <= 420


def test_response_text_unwraps_streams_nested_json_and_exit_codes():
    assert response_text('{"stdout": "out", "stderr": "err", "returncode": 1}') == (
        "out\nerr", 1)
    assert response_text('{"content": "{\\"output\\": \\"deep\\", \\"exit_code\\": 3}"}') == (
        "deep", 3)
    assert response_text('{"result": "r", "exit_code": 0}') == ("r", 0)
    assert response_text('{"exit_code": true, "stdout": "o"}') == ("o", None)
    assert response_text("plain") == ("plain", None)
    assert response_text('{"n": 1}') == ('{"n": 1}', None)


def test_clip_and_truncate():
    assert clip("a  b\n c", 10) == "a b c"
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefg", 6) == "abcde…"
    assert truncate_to_tokens("abcdef", 3, chars) == "abc"
    assert truncate_to_tokens("abcdef", 6, chars) == "abcdef"
    assert truncate_to_tokens("abcdef", 0, chars) == ""


def test_the_summarizer_returns_the_text_with_its_source():
    request = SummaryRequest(turns=REGION, first_index=3, target_tokens=300)
    result = asyncio.run(ExtractiveSummarizer(chars, source="fallback").summarize(request))
    assert result.text == extractive_text(request, chars)
    assert result.source == "fallback"


def test_paths_are_read_from_decoded_tool_json_not_from_its_escapes():
    # In a JSON tool response or call, a line break is the two characters `\n`; the path
    # after it is `tests/test_auth.py`, not `ntests/test_auth.py`.
    turns = [
        {"from": "gpt", "value": call("run", command="cat notes.txt\nls src/app/views.py")},
        {"from": "tool", "value": response({"name": "terminal", "content":
                                            "collected 3 items\ntests/test_auth.py F\n"
                                            "tests/test_cache.py .\nsee /var/log/app.log"})},
        {"from": "tool", "value": response({"output": json.dumps({"stdout":
                                            "wrote\nbuild/out/report.json"})})},
    ]
    files = summary(turns).split("Files and paths:\n")[1].split("\n\n")[0].split("Outputs:")[0]
    listed = [line[2:] for line in files.splitlines() if line.startswith("- ")]
    assert listed == ["notes.txt", "src/app/views.py", "tests/test_auth.py",
                      "tests/test_cache.py", "/var/log/app.log", "build/out/report.json"]
