"""Distill rules (§18, `core.distill`, `core.distill_row`): each rule on hand-written
outputs, the Hermes wrapper, references, and the properties (idempotent, never grows,
`safe` keeps every identifier and number of what the terminal showed)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import SAMPLES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.distill import (
    blobs,
    compact_json,
    control,
    distill_text,
    keeps_items,
    long_lines,
    missing_items,
    redraws,
    rendered,
    repeats,
    table,
)
from trajectory_compressor.core.distill_row import DistillStats, distill_turns
from trajectory_compressor.core.errors import ConfigError


def final(text: str, level: str = "safe") -> str:
    stages = distill_text(text, level)
    return stages[-1][1] if stages else text


# rules, by hand


def test_control_removes_colours_cursor_moves_and_titles():
    text = "\x1b[1m\x1b[31mFAILED\x1b[0m tests/test_api.py::test_get\x1b[K\n\x1b]0;title\x07ok\x00"
    assert control(text) == "FAILED tests/test_api.py::test_get\nok"


def test_control_resolves_backspace_overstrikes():
    assert control("N\bNA\bAM\bME\bE") == "NAME"  # man-page bold


def test_redraws_keep_what_the_terminal_shows_last():
    assert redraws("10%\r50%\r100%\nnext") == "100%\nnext"
    # a shorter redraw only covers the start of the line
    assert redraws("abcdef\rxy") == "xycdef"
    assert redraws("one\r\ntwo\r\n") == "one\ntwo\n"  # CRLF is a line end


def test_json_is_compacted_with_numbers_keys_and_escapes_as_written():
    text = '{\n    "b": 1.50,\n    "a": [1e5, -0.0, 12345678901234567890],\n' \
           '    "s": "caf\\u00e9 \\"q\\"  x",\n    "b": null\n}'
    assert compact_json(text) == \
        '{"b":1.50,"a":[1e5,-0.0,12345678901234567890],"s":"caf\\u00e9 \\"q\\"  x","b":null}'


def test_json_on_one_line_json_lines_and_non_json_are_left_alone():
    # Dropping the space after ':' and ',' would rewrite the turn for almost no tokens.
    assert compact_json('{"a": 1, "b": [1, 2]}') == '{"a": 1, "b": [1, 2]}'
    assert compact_json('{"a": 1}\n{"a": 2}\n') == '{"a": 1}\n{"a": 2}\n'
    assert compact_json("{not json} and words") == "{not json} and words"
    assert compact_json('{"a":\n 1') == '{"a":\n 1'  # laid out, but not JSON
    # Laid out over lines, even only once: compacted.
    assert compact_json('{"a": 1,\n "b": 2}') == '{"a":1,"b":2}'
    assert distill_text('{"a": 1, "b": 2}', "safe") == []


def test_identical_runs_fold_to_first_and_last_with_a_count():
    line = "Waiting for deployment \"api\" rollout to finish: 1 of 3 updated replicas..."
    text = "start\n" + "\n".join([line] * 6) + "\ndone"
    assert repeats(text) == f"start\n{line}\n[… 4 identical lines …]\n{line}\ndone"


def test_counter_only_runs_fold_when_no_item_is_lost():
    polling = "\n".join(f"attempt {k}/60: Connection refused on localhost" for k in range(1, 9))
    assert repeats(polling) == ("attempt 1/60: Connection refused on localhost\n"
                                "[… 6 similar lines …]\n"
                                "attempt 8/60: Connection refused on localhost")
    # each line has its own ID (a timestamp, a request id): nothing may go
    ids = "\n".join(f"2024-11-23T10:15:{k:02d}Z request req_{k}a9 done" for k in range(8))
    assert repeats(ids) == ids


def test_short_runs_stay():
    assert repeats("ok\nok\nok") == "ok\nok\nok"  # the marker would be longer


def test_table_turns_same_keyed_objects_into_columns_and_rows():
    text = json.dumps({"items": [{"name": "web-1", "cpu": 0.50, "ready": True},
                                 {"name": "web-2", "cpu": 1.25, "ready": False},
                                 {"name": "web-3", "cpu": 2, "ready": True}]})
    assert table(text) == ('{"items":{"columns":["name","cpu","ready"],"rows":'
                           '[["web-1",0.5,true],["web-2",1.25,false],["web-3",2,true]]}}')
    assert table('[{"a": 1}, {"b": 2}]') == '[{"a": 1}, {"b": 2}]'  # not uniform


def test_table_keeps_numbers_as_written():
    assert table('[{"v": 1.50}, {"v": 1e3}]') == '{"columns":["v"],"rows":[[1.50],[1e3]]}'


def test_blobs_become_length_and_hash():
    blob = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA" * 2
    out = blobs(f"image: {blob} end")
    assert re.fullmatch(r"image: \[blob 144 chars sha256:[0-9a-f]{8}\] end", out)
    assert blobs("-" * 100) == "-" * 100  # a rule line is no blob


def test_long_lines_are_cut_in_the_middle():
    line = "a" * 500 + "b" * 600 + "c" * 500
    out = long_lines(line)
    assert out == "a" * 400 + "[… 800 chars cut …]" + "c" * 400


def test_safe_never_runs_lossy_rules():
    text = "x" * 2000
    assert final(text, "safe") == text
    assert final(text, "all") != text


# the row stage


def counts(texts: list[str]) -> list[int]:
    return [len(t) // 4 + 1 for t in texts]


def hermes(content: str, call_id: str = "call_1") -> str:
    return ("<tool_response>\n" + json.dumps({"tool_call_id": call_id, "name": "terminal",
                                              "content": content}) + "\n</tool_response>")


def test_hermes_wrapper_is_kept_and_only_the_content_rewritten():
    # "done" covers the first four characters of "step 1": a terminal shows "done 1"
    text = hermes("\x1b[32mPASSED\x1b[0m tests/test_a.py\n" + "step 1\r" * 3 + "done")
    out, stats = distill_turns([text], "safe", counts)
    assert out[0] == ('<tool_response>\n{"tool_call_id": "call_1", "name": "terminal", '
                      '"content": "PASSED tests/test_a.py\\ndone 1"}\n</tool_response>')
    assert stats.turns == 1 and set(stats.rules) == {"control", "redraws"}


def test_a_json_body_without_content_is_compacted_inside_the_tags():
    text = '<tool_response>\n{\n  "status": "ok",\n  "port": 8080\n}\n</tool_response>'
    out, _ = distill_turns([text], "safe", counts)
    assert out[0] == '<tool_response>\n{"status":"ok","port":8080}\n</tool_response>'


def test_an_output_seen_before_becomes_a_reference():
    body = "def handle(request):\n    return request.app.state.pool.fetch(key)\n" * 3
    out, stats = distill_turns([hermes(body, "c1"), None, hermes(body, "c2")], "safe", counts)
    assert out[0] == hermes(body, "c1")
    assert out[1] is None
    assert out[2] == hermes("[same output as tool output #1 above]", "c2")
    assert stats.rules["same_output"].turns == 1


def test_rule_tokens_add_up_to_the_turn_totals():
    text = "\x1b[31mE\x1b[0m " + "\n".join(["same line here, long enough"] * 10)
    out, stats = distill_turns([text, None], "safe", counts)
    assert stats.tokens_before == counts([text])[0]
    assert stats.tokens_after == counts([out[0] or ""])[0]
    steps = sum(s.tokens_before - s.tokens_after for s in stats.rules.values())
    assert steps == stats.saved > 0
    again = DistillStats.from_dict(json.loads(json.dumps(stats.to_dict())))
    assert again == stats


def test_a_turn_that_would_count_more_tokens_is_left_alone():
    text = "\x1b[31mx\x1b[0m"
    out, stats = distill_turns([text], "safe", lambda ts: [10 - len(t) for t in ts])
    assert out == [text] and stats.turns == 0


def test_off_changes_nothing():
    text = "\x1b[31mx\x1b[0m"
    assert distill_turns([text], "off", counts) == ([text], DistillStats("off"))


def test_config_names_the_valid_levels():
    with pytest.raises(ConfigError, match=r"compression\.distill must be one of off, safe, all"):
        CompressionConfig().replace(distill="lossless")
    assert CompressionConfig.from_dict({"compression": {"distill": False}}).distill == "off"
    assert CompressionConfig.from_dict({"compression": {"distill": "all"}}).distill == "all"


# properties

FRAGMENTS = st.sampled_from([
    "\x1b[32m", "\x1b[0m", "\x1b[2K", "\x1b]0;t\x07", "\r", "\n", "\r\n", "\b", "\t", " ",
    "ok", "FAILED", "tests/test_api.py", "::", "KeyError: 'user_id'", "42", "3.14", "99%",
    "512 MB", "req_8f2k", "v1.2.3", "10.0.0.7:8080", "https://example.org/a?b=1", "{", "}",
    '"k": ', "[", "]", ",", "━━━━", "attempt 3/60", "deadbeef" * 9, "x" * 300,
])
TEXTS = st.lists(FRAGMENTS, max_size=60).map("".join) | st.text(max_size=300)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS, st.sampled_from(["safe", "all"]))
def test_rules_are_idempotent_and_never_lengthen(text, level):
    once = final(text, level)
    assert len(once) <= len(text)
    assert final(once, level) == once


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_safe_keeps_every_item_the_terminal_showed(text):
    assert missing_items(rendered(text), final(text)) == []


LINES = st.sampled_from([
    "tick 12:00:03", "step 1 of 9", "GET /api/v1/users/42 200 12ms", "", "ok",
    "tests/test_api.py:12", "KeyError: 'user_3'", "<tool_response>", "</tool_response>",
    "<tool_call>", "progress 45% eta 0:00:07", "build #123 done", "a3f9c2e1 --flag=3",
    '<tool_response>{"job_7": 1,', '"n": 2}</tool_response>',
]) | st.integers(0, 99).map(lambda n: f"worker job_{n} started")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINES, min_size=1, max_size=45), st.lists(LINES, max_size=3))
# A JSON key is no item, but the first line alone does not know it is one.
@example(['<tool_response>{"job_7": 1,', '"n": 2}</tool_response>', "ok"], [])
# An item only in the second chunk of 20 lines.
@example(["ok"] * 21 + ["worker job_5 started"], [])
def test_keeps_items_answers_as_missing_items_does(lines, kept):
    # `keeps_items` stops early (the first line, then chunk by chunk); `missing_items`
    # looks at everything: the answers must agree, tool tags and 20-line chunks included.
    original = "\n".join(lines)
    for distilled in ("\n".join(kept), original, "\n".join(lines[:1] + kept),
                      "\n".join(lines[:20])):
        assert keeps_items(original, distilled) == (missing_items(original, distilled) == [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXTS, min_size=1, max_size=4), st.sampled_from(["safe", "all"]))
def test_turns_never_grow_in_tokens_and_settle_after_one_pass(counter, texts, level):
    wrapped = [hermes(t, f"c{i}") if i % 2 else t for i, t in enumerate(texts)]
    out, _stats = distill_turns(wrapped, level, counter.count_many)
    for before, after in zip(wrapped, out, strict=True):
        assert counter.count(after or "") <= counter.count(before)
    again, _ = distill_turns(out, level, counter.count_many)
    assert again == out


# realistic logs


def tool_turns(path):
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [[t["value"] for t in row["conversations"] if t["from"] == "tool"] for row in rows]


REFERENCE = re.compile(r"\[same output as tool output #(\d+) above\]")


def content(text: str) -> str:
    body = text.split("<tool_response>", 1)[1].rsplit("</tool_response>", 1)[0]
    return json.loads(body)["content"]


def test_safe_keeps_every_item_of_the_realistic_terminal_logs(counter):
    checked = saved = 0
    for texts in tool_turns(SAMPLES / "terminal_hermes.jsonl"):
        out, stats = distill_turns(texts, "safe", counter.count_many)
        saved += stats.saved
        outputs: list[str] = []  # the row's distilled outputs, by number
        for before, after in zip(texts, out, strict=True):
            kept = content(after or "")
            reference = REFERENCE.fullmatch(kept)
            if reference:
                kept = outputs[int(reference[1]) - 1]
            outputs.append(kept)
            assert missing_items(rendered(content(before)), kept) == []
            checked += 1
    assert checked > 100 and saved > 0


def test_a_turns_saving_is_shared_by_characters_removed():
    from trajectory_compressor.core.distill_row import _shares

    assert _shares(10, [3, 1]) == [8, 2]  # 7.5 and 2.5: the tie goes to the first
    assert _shares(7, [1, 1, 1]) == [3, 2, 2]
    assert _shares(0, [5, 5]) == [0, 0]
    assert _shares(4, [0, 0]) == [4, 0]


def test_a_fold_must_save_at_least_one_character():
    # Three identical lines fold to first, marker, last: the marker replaces the middle
    # line and its line break. Equal lengths save nothing, so the lines stay.
    marker = "[… 1 identical lines …]"
    same = "a" * (len(marker) - 1)  # the middle line + its "\n" is as long as the marker
    assert repeats("\n".join([same] * 3)) == "\n".join([same] * 3)
    longer = "a" * len(marker)  # one character more: folding saves one
    assert repeats("\n".join([longer] * 3)) == f"{longer}\n{marker}\n{longer}"
