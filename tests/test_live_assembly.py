"""Phase 4 assembly, the compaction texts, and the trigger."""

from __future__ import annotations

import copy

from conversations import orphans

from trajectory_compressor.core.conversation import SUMMARY_PREFIX as LEGACY_PREFIX
from trajectory_compressor.live.assembly import STUB_RESULT, assemble, repair_tool_pairs
from trajectory_compressor.live.markers import (
    COMPACTION_NOTE,
    MERGE_SEPARATOR,
    SUMMARY_PREFIX,
    failure_marker,
    finish_summary,
    is_summary_text,
    summary_body,
)
from trajectory_compressor.live.placement import Placement
from trajectory_compressor.live.trigger import Trigger


def call(call_id):
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": "{}"}}


def test_orphan_results_go_and_orphan_calls_get_stubs():
    messages = [
        {"role": "tool", "tool_call_id": "gone", "content": "orphan result"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "result a"},
        {"role": "user", "content": "next"},
    ]
    repaired = repair_tool_pairs(messages)
    assert [m.get("tool_call_id") for m in repaired] == [None, "a", "b", None]
    assert repaired[2] == {"role": "tool", "tool_call_id": "b", "name": "t",
                           "content": STUB_RESULT}
    assert orphans(repaired) == (set(), set())


def test_assembly_notes_the_system_once_and_copies_deeply():
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "old"},
                {"role": "assistant", "content": "x", "tool_calls": [call("k")]},
                {"role": "tool", "tool_call_id": "k", "content": "r"},
                {"role": "user", "content": "latest"}]
    snapshot = copy.deepcopy(messages)
    out = assemble(messages, 3, Placement(4, "user"), "SUMMARY")
    assert messages == snapshot
    assert out[0]["content"] == f"rules\n\n{COMPACTION_NOTE}"
    assert out[3] == {"role": "user", "content": "SUMMARY"}
    assert out[4:] == messages[4:]
    out[4]["tool_calls"][0]["id"] = "changed"
    assert messages[4]["tool_calls"][0]["id"] == "k"
    again = assemble(out, 3, Placement(4, "user"), "SUMMARY 2")
    assert again[0]["content"].count(COMPACTION_NOTE) == 1


def test_merged_summary_comes_before_the_original_text():
    messages = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"},
                {"role": "user", "content": "mid"}, {"role": "user", "content": "latest ask"}]
    out = assemble(messages, 2, Placement(3, "user", merge=True), "SUMMARY")
    assert len(out) == 3
    assert out[2] == {"role": "user",
                      "content": f"SUMMARY\n\n{MERGE_SEPARATOR}\n\nlatest ask"}
    assert summary_body(f"{SUMMARY_PREFIX}\nbody\n\n{MERGE_SEPARATOR}\n\nlatest ask") == "body"


def test_prefix_is_set_once_and_legacy_prefixes_are_replaced():
    text = finish_summary(f"{LEGACY_PREFIX} {SUMMARY_PREFIX}\nthe body")
    assert text == f"{SUMMARY_PREFIX}\nthe body"
    for old in (f"{LEGACY_PREFIX} old body", "[CONTEXT COMPACTION — other wording]:\nold body"):
        assert is_summary_text(old)
        assert summary_body(old) == "old body"
    assert not is_summary_text("a user message about [CONTEXT COMPACTION]")


def test_failure_marker_has_no_summary_but_keeps_an_earlier_one():
    marker = failure_marker(12)
    assert marker.startswith(SUMMARY_PREFIX) and "12 earlier messages were removed" in marker
    assert summary_body(marker) == ""
    kept = failure_marker(1, "## Goal\n- earlier")
    assert "1 earlier message was removed" in kept
    assert summary_body(kept) == "## Goal\n- earlier"


def test_trigger_threshold_and_anti_thrashing():
    trigger = Trigger(threshold_tokens=1000)
    assert not trigger.should_compress(999) and trigger.should_compress(1000)
    trigger.record_pass(1000, 950)  # saved 5%
    assert trigger.should_compress(1000)
    trigger.record_pass(1000, 901)  # saved 9.9%
    assert not trigger.should_compress(5000)
    trigger.record_pass(1000, 500)  # a good pass resets the guard
    assert trigger.should_compress(1000)
