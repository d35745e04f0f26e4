"""Tests written to kill mutants left by the sixteenth coverage-guided pass (issue 40,
item 8) over modules no run had reached on their current code: the output lock, the
windows planner, bounded sidecar reads, fidelity's items, run_fixes, json_text's depth
checks, the container registry, distill's thresholds (blocks, file views, runs, shared
columns, blobs), invented quantities, validate's contradictions and counts, and the times
a run records. All in process (the run goes through the CLI in this process), on
hand-made input.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import re
import stat
import string
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli
from tests.fixtures_runs import long_hermes_row, row, write_jsonl
from trajectory_compressor.core import json_text
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.distill import (
    RULES,
    SAFE_RULES,
    RowMemory,
    blobs,
    distill_output,
    rules_for,
    table,
)
from trajectory_compressor.core.fidelity import _items_of_text, extract_items, mentions
from trajectory_compressor.core.invented import InventedCheck
from trajectory_compressor.core.plan import ALTERNATING, ANY_BUT_TOOL, Plan, Region
from trajectory_compressor.core.reasons import WINDOW_OVER
from trajectory_compressor.core.windows import (
    Window,
    WindowLimits,
    _group_start,
    essential_head,
    head_end,
    is_assistant,
    overlap_start,
    plan_windows,
    trailing_outputs,
    window_turns,
    windowed_plan,
)
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.engine.lock import LockLost, check_held, lost, output_lock
from trajectory_compressor.formats import bounded
from trajectory_compressor.formats.base import InputFile, Location
from trajectory_compressor.formats.bounded import (
    CHECKPOINT_CAP,
    LINE_CAP,
    METRICS_CAP,
    SidecarUnreadable,
    _too_big,
    bounded_lines,
    file_kind,
    read_bounded,
)
from trajectory_compressor.formats.registry import file_format, open_sink
from trajectory_compressor.inspect.run_fixes import Flagged
from trajectory_compressor.inspect.validate import Validation, _contradictions, validate_output

# --- engine/lock.py -----------------------------------------------------------------


def test_a_lock_deleted_under_its_run_is_lost(tmp_path: Path) -> None:
    lock, out = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    with output_lock(lock, out):
        lock.unlink()  # no file there at all: not this run's any more
        assert lost(lock)
        with pytest.raises(LockLost, match="deleted or replaced"):
            check_held(lock, out)
    assert not lock.exists()  # leaving the block created nothing


# --- core/windows.py ----------------------------------------------------------------


def _window(**fields: object) -> Window:
    return Window(**{"number": 1, "head": 0, "summarized": None, "context": 0,
                     "train": Region(0, 1), "tokens": 5, **fields})  # type: ignore[arg-type]


def test_a_window_and_its_limits_are_frozen_with_empty_defaults() -> None:
    window = _window()
    assert (window.trained_assistant_tokens, window.summarized_tokens,
            window.summary_tokens, window.shrunk, window.over) == (0, 0, 0, False, "")
    with pytest.raises(FrozenInstanceError):
        window.tokens = 6  # type: ignore[misc]
    limits = WindowLimits(target=1000, summary=10)
    with pytest.raises(FrozenInstanceError):
        limits.target = 5  # type: ignore[misc]
    assert limits.tail_budget == 200  # the live tail: a fifth of the target


def test_the_requested_summary_is_shorter_than_what_it_replaces() -> None:
    assert _window(summary_tokens=100, summarized_tokens=2).requested_tokens == 1
    assert _window(summary_tokens=100, summarized_tokens=1).requested_tokens == 1
    assert _window(summary_tokens=7, summarized_tokens=50).requested_tokens == 7
    assert _window(summary_tokens=100, summarized_tokens=50).requested_tokens == 49


def test_is_assistant() -> None:
    assert is_assistant({"from": "gpt", "value": "x"}) is True
    assert is_assistant({"from": "human", "value": "x"}) is False


def test_the_head_is_pushed_past_tool_turns_to_the_row_end() -> None:
    assert head_end(["system", "human", "gpt", "tool"], 3) == 4
    assert head_end(["system", "human", "gpt", "tool", "tool", "gpt"], 3) == 5
    assert head_end(["system", "human", "gpt"], 2) == 2


def test_a_group_start_stays_within_its_bounds() -> None:
    # At the low bound on a tool turn: not moved below it.
    assert _group_start(["human", "tool", "tool"], 1, 1, 3) == 1
    # At the stop on a tool turn: not moved either.
    assert _group_start(["gpt", "tool", "tool"], 2, 0, 2) == 2
    # Between them: back onto the call.
    assert _group_start(["gpt", "tool", "tool"], 2, 0, 3) == 0


def test_a_tail_that_reaches_the_head_keeps_the_last_turns() -> None:
    roles = ["system", "human", "gpt", "human", "gpt", "human"]
    # A budget larger than everything walks back to the head; the tail is then the
    # last MIN_TAIL_TURNS turns.
    assert overlap_start(roles, [1] * 6, 2, 6, 1000) == 3


def test_trailing_outputs_stop_at_the_region_start() -> None:
    assert trailing_outputs(["tool", "tool", "tool"], Region(1, 3)) == [1, 2]
    assert trailing_outputs(["gpt", "tool", "gpt"], Region(0, 2)) == [1]
    assert trailing_outputs(["gpt", "tool", "gpt"], Region(0, 3)) == []


def test_the_essential_head_is_the_opening_system_and_task_turns() -> None:
    assert essential_head(["tool", "gpt"], 2) == 0
    assert essential_head(["system", "human"], 1) == 1
    assert essential_head(["system", "gpt", "human"], 3) == 1
    assert essential_head(["system", "human", "human", "gpt"], 4) == 3


def test_a_first_window_of_exactly_the_target_is_not_masked() -> None:
    roles = ["system", "human", "gpt", "tool", "gpt"]
    tokens = [10, 10, 10, 70, 50]
    windows = plan_windows(roles, tokens, 2, WindowLimits(target=100, summary=5),
                           ANY_BUT_TOOL, masked_tokens=lambda i: 5)
    first = windows[0]
    assert first.train == Region(0, 4) and first.tokens == 100  # exact: no offset
    assert first.masked == () and first.masked_saving == 0 and not first.over
    assert first.trained_assistant_tokens == 10  # the one gpt turn's, nothing else's
    assert [w.trained_assistant_tokens for w in windows[1:]] == [50]


def test_the_least_heads_tokens_in_an_over_message_are_of_the_unmasked_window() -> None:
    # Window 2 is over the target every way (whole head or the least, masked or not):
    # the message's "it would hold" is the least head's window without masking, as it is
    # when nothing may be masked at all.
    roles = ["system", "human", "gpt", "tool", "gpt", "tool", "gpt"]
    tokens = [10, 10, 10, 10, 5, 200, 5]
    limits = WindowLimits(target=100, summary=5)
    masked = plan_windows(roles, tokens, 4, limits, ANY_BUT_TOOL, least_head=2,
                          masked_tokens=lambda i: 150 if i == 5 else None)
    plain = plan_windows(roles, tokens, 4, limits, ANY_BUT_TOOL, least_head=2)
    assert "keeping only turns 0-1 of the head" in masked[1].over
    assert masked[1].over == plain[1].over


def test_a_turn_of_exactly_the_target_is_not_named_as_over_it() -> None:
    roles = ["system", "human", "gpt", "human", "gpt"]
    tokens = [10, 10, 100, 10, 10]
    windows = plan_windows(roles, tokens, 2, WindowLimits(target=100, summary=5),
                           ANY_BUT_TOOL)
    over = [w for w in windows if w.over]
    assert over, windows
    assert all("alone holds" not in w.over for w in over)
    tokens[2] = 101
    windows = plan_windows(roles, tokens, 2, WindowLimits(target=100, summary=5),
                           ANY_BUT_TOOL)
    assert any("turn 2 alone holds 101 tokens" in w.over for w in windows)


def test_window_turns_without_a_summarized_region_have_no_summary_turn() -> None:
    turns = [{"from": "system", "value": "s"}, {"from": "human", "value": "h"},
             {"from": "gpt", "value": "g"}]
    window = _window(head=2, context=2, train=Region(2, 3))
    out, summary_at, flags = window_turns(turns, window, "a summary", "")
    assert summary_at is None
    assert [t["value"] for t in out] == ["s", "h", "g"] and flags == [False, False, True]


def test_a_row_windows_cannot_help_keeps_its_plan() -> None:
    plan = Plan(action="over_limit", total_tokens=30, middle=Region(2, 3))
    roles = ["system", "human", "gpt"]
    got = windowed_plan(plan, roles, [10, 10, 10], 2, WindowLimits(target=100, summary=5),
                        ANY_BUT_TOOL)
    assert got is plan


def test_a_row_windows_help_becomes_a_windows_plan() -> None:
    plan = Plan(action="compress", total_tokens=60, middle=Region(2, 5), reason="x")
    roles = ["system", "human", "gpt", "human", "gpt", "human", "gpt"]
    limits = WindowLimits(target=40, summary=5)
    got = windowed_plan(plan, roles, [5, 5, 10, 10, 10, 10, 10], 2, limits, ANY_BUT_TOOL)
    assert got.action == "compress" and got.windows is not None and len(got.windows) >= 2
    assert got.reason == ""  # every window fits
    assert all(not w.over for w in got.windows)
    big = windowed_plan(plan, roles, [5, 5, 10, 10, 50, 10, 10], 2, limits, ANY_BUT_TOOL)
    assert big.windows is not None and any(w.over for w in big.windows)
    assert big.reason == WINDOW_OVER.text


LIMITS = WindowLimits(target=100, summary=5)


def test_roles_and_tokens_must_pair_up() -> None:
    with pytest.raises(ValueError):
        plan_windows(["system", "human", "gpt"], [10, 10], 2, LIMITS, ANY_BUT_TOOL)


def test_the_tail_walk_stops_at_its_budget_and_below_its_ceiling() -> None:
    roles = ["human", "gpt"] * 5
    # Three turns taken (3 tokens), a fourth reaches the budget of 4 exactly: stop there.
    assert overlap_start(roles, [1] * 10, 0, 10, 4) == 6
    # Three turns (3 tokens), then one of 3 makes 6, the ceiling (1.5 x 4) itself: taken.
    assert overlap_start(roles[:5], [1, 3, 1, 1, 1], 0, 5, 4) == 1


def test_a_first_window_over_by_one_token_is_over() -> None:
    windows = plan_windows(["system", "human", "gpt"], [50, 51, 10], 2, LIMITS,
                           ANY_BUT_TOOL)
    first = windows[0]
    assert first.number == 1 and first.tokens == 101 and first.masked == ()
    assert first.over == ("turns 0-1 (the protected head and the first group after it) "
                          "hold 101 tokens, over the target 100")


def test_a_first_window_may_end_after_a_head_of_one_turn() -> None:
    for head in (0, 1):
        windows = plan_windows(["human", "gpt"], [60, 60], head, LIMITS, ANY_BUT_TOOL)
        assert [w.train for w in windows] == [Region(0, 1), Region(1, 2)]
        assert not windows[0].over


def test_a_first_window_masked_to_exactly_the_target_fits() -> None:
    roles = ["system", "human", "gpt", "tool", "gpt"]
    windows = plan_windows(roles, [10, 10, 10, 80, 10], 4, LIMITS, ANY_BUT_TOOL,
                           masked_tokens=lambda i: 70 if i == 3 else None)
    first = windows[0]
    assert (first.tokens, first.masked, first.masked_saving, first.over) == (100, (3,), 10, "")


def test_a_least_head_equal_to_the_head_is_not_tried_again() -> None:
    roles = ["system", "human", "gpt", "human", "gpt"]
    windows = plan_windows(roles, [10, 10, 101, 10, 10], 2, LIMITS, ANY_BUT_TOOL,
                           least_head=2)
    over = [w.over for w in windows if w.over]
    assert over and all("keeping only" not in text for text in over)


def test_without_masking_a_later_window_trains_every_group_that_fits() -> None:
    roles = ["system", "human", "gpt", "human", "gpt", "human", "gpt", "human", "gpt"]
    tokens = [5, 5, 10, 10, 10, 10, 10, 5, 5]
    windows = plan_windows(roles, tokens, 2, WindowLimits(target=50, summary=5),
                           ANY_BUT_TOOL)
    # Window 2: the head (10), a summary (5), turns 4-5 as context (20), then turns 6
    # and 7 (15): 50, the target; turn 8 would pass it.
    assert [w.train for w in windows] == [Region(0, 6), Region(6, 8), Region(8, 9)]
    assert windows[1].tokens == 50


def test_the_longest_context_that_fits_exactly_is_kept() -> None:
    roles = ["system", "human", "gpt", "human", "gpt", "human", "gpt", "human", "gpt"]
    tokens = [5, 5, 10, 10, 10, 10, 15, 5, 5]
    windows = plan_windows(roles, tokens, 2, WindowLimits(target=50, summary=5),
                           ANY_BUT_TOOL)
    # Window 2: the head (10), a summary (5), turns 4-5 (20) and the new turn 6 (15)
    # make 50, the target itself: that context, not a shorter one with more new turns.
    second = windows[1]
    assert (second.context, second.train, second.tokens) == (4, Region(6, 7), 50)


def test_a_context_may_start_right_after_the_head() -> None:
    roles = ["system", "human", "gpt", "human", "gpt", "human", "gpt", "human"]
    tokens = [10, 5, 20, 5, 20, 20, 5, 20]
    windows = plan_windows(roles, tokens, 2, WindowLimits(target=50, summary=5),
                           ANY_BUT_TOOL)
    # Window 2: the head (15), a summary of turn 2 alone (5), turn 3 (5), turn 4 (20).
    second = windows[1]
    assert (second.summarized, second.context, second.train, second.tokens) == (
        Region(2, 3), 3, Region(4, 5), 45)


def test_a_window_without_a_summary_counts_neither_it_nor_its_extra() -> None:
    limits = WindowLimits(target=100, summary=5, extra=3)
    windows = plan_windows(["system", "human", "gpt", "human"], [10, 10, 90, 5], 2, limits,
                           ANY_BUT_TOOL)
    second = windows[1]
    assert second.summarized is None and second.context == second.train.start == 2
    assert second.summarized_tokens == second.summary_tokens == 0
    assert second.tokens == 110  # the head's 20 and turn 2's 90
    assert "make 110, over the target 100" in second.over


def test_an_over_message_names_the_head_the_context_and_the_room() -> None:
    roles = ["system", "human", "gpt", "human", "gpt", "human", "gpt", "human", "gpt"]
    tokens = [10, 10, 20, 20, 20, 20, 20, 60, 20]
    windows = plan_windows(roles, tokens, 2, LIMITS, ALTERNATING)
    last = windows[-1]
    assert last.over == (
        "turns 7-8 (80 tokens) after the protected head (turns 0-1, 20 tokens), the "
        "context (turns 6-6, 20 tokens) and a summary of 5 tokens make 125, over the "
        "target 100 (room for a summary: 0 tokens)")


def test_an_output_masking_does_not_shorten_is_not_masked() -> None:
    roles = ["system", "human", "gpt", "tool", "tool", "gpt"]
    tokens = [10, 10, 10, 60, 20, 10]
    after = {3: 10, 4: 20}  # output 4 masked is no shorter
    windows = plan_windows(roles, tokens, 2, LIMITS, ANY_BUT_TOOL,
                           masked_tokens=after.get)
    second = windows[1]
    assert second.masked == (3,) and second.masked_saving == 50 and not second.over


# --- formats/bounded.py -------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def test_the_caps_are_the_ones_the_guarantees_promise() -> None:
    text = " ".join((ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8").split())
    found = re.search(r"a metrics file (\d+) MiB, a checkpoint (\d+) MiB, one line of an "
                      r"over-limit or rejects file (\d+) GiB", text)
    assert found, "the caps' sentence moved: docs/guarantees.md, 'Sidecars are read bounded'"
    metrics, checkpoint, line = map(int, found.groups())
    caps = (METRICS_CAP, CHECKPOINT_CAP, LINE_CAP)
    assert caps == (metrics << 20, checkpoint << 20, line << 30)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_file_over_its_cap_is_refused_by_its_size_and_closed(tmp_path: Path) -> None:
    path = tmp_path / "out_metrics.json"
    path.write_bytes(b"x" * 3000)
    before = _open_fds()
    with pytest.raises(SidecarUnreadable) as caught:
        read_bounded(path, "metrics file", 1000)
    assert str(caught.value) == (f"the metrics file {path} holds 2.9 KiB, over the cap of "
                                 "1000 bytes for a metrics file; it is not one compress wrote")
    assert read_bounded(path, "metrics file", 3000) == b"x" * 3000
    assert _open_fds() == before  # every descriptor closed, refused or read


def test_sizes_in_words() -> None:
    path = Path("/tmp/m.json")
    for size, words in (((3 << 20) + (1 << 19), "3.5 MiB"), (2 << 30, "2 GiB"),
                        (1024, "1 KiB"), (1023, "1023 bytes")):
        assert f"holds {words}, over" in _too_big(path, "metrics file", size, 10)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="Linux /proc only")
def test_a_file_that_grows_past_its_cap_while_read_is_refused() -> None:
    # /proc files say they hold 0 bytes and read as more: like a file growing under the
    # reader.
    with pytest.raises(SidecarUnreadable, match="holds 11 bytes, over the cap of 10 bytes"):
        read_bounded(Path("/proc/self/maps"), "metrics file", 10)


def test_a_file_grown_since_its_size_was_read_is_read_no_further_than_its_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The size read at open says 0 bytes (the file grew after): reading stops one byte
    # past the cap, over two reads here (the first of 1 MiB).
    path = tmp_path / "out_metrics.json"
    path.write_bytes(b"z" * (3 << 20))
    real = os.fstat

    def stale(fd: int) -> os.stat_result:
        st = real(fd)
        return os.stat_result((st.st_mode, *st[1:6], 0, *st[7:10]))

    monkeypatch.setattr(bounded.os, "fstat", stale)
    cap = (1 << 20) + (1 << 19)
    with pytest.raises(SidecarUnreadable, match=re.escape("holds 1.5 MiB, over the cap")):
        read_bounded(path, "metrics file", cap)


def test_a_line_over_a_small_cap_names_it_in_bytes(tmp_path: Path) -> None:
    path = tmp_path / "out_rejects.jsonl"
    path.write_bytes(b"short\n" + b"y" * 50 + b"\n")
    lines = bounded_lines(path, "rejects file", 10)
    assert next(lines) == (1, b"short\n")
    with pytest.raises(SidecarUnreadable, match=re.escape(f"{path}:2: a line of the rejects "
                                                          "file is over 10 bytes")):
        next(lines)


def test_a_folder_is_refused_as_a_folder(tmp_path: Path) -> None:
    assert file_kind(stat.S_IFDIR | 0o755) == "a folder"
    assert file_kind(stat.S_IFIFO | 0o644) == "a FIFO (named pipe)"
    before = _open_fds()
    with pytest.raises(SidecarUnreadable, match="is a folder, not a regular file"):
        read_bounded(tmp_path, "checkpoint", CHECKPOINT_CAP)
    assert _open_fds() == before  # the refused folder's descriptor closed


# --- core/fidelity.py ---------------------------------------------------------------


def test_an_item_that_normalizes_to_nothing_is_never_mentioned() -> None:
    assert mentions("", "abc") is False
    assert mentions("  \t", "a b c") is False
    assert mentions("src/app.py", "x src/app.py y") is True


def test_an_unclosed_tool_call_is_read_once_to_the_end() -> None:
    text = 'see <tool_call>{"name": "run", "arguments": {"path": "src/app.py"}}'
    # Its items are its body's, as if it were closed: the body is not read again as
    # free text after it (islice: a reader stuck at the opener would never end).
    items = list(itertools.islice(_items_of_text(text), 50))
    assert items == list(_items_of_text(text + "</tool_call>"))
    assert extract_items([text]) == ["run", "src/app.py"]


def test_a_url_that_opens_an_error_message_comes_before_the_message() -> None:
    assert list(_items_of_text("Error: https://example.com/a is down")) == [
        "https://example.com/a", "https://example.com/a is down"]


def test_an_error_message_of_one_quoted_character_is_no_item() -> None:
    assert list(_items_of_text("KeyError: 'x'")) == ["KeyError"]


def test_a_call_name_is_an_item_when_it_has_one_to_80_characters() -> None:
    def call(name: str) -> str:
        return f'<tool_call>{{"name": "{name}", "arguments": {{"n": 1}}}}</tool_call>'

    assert list(_items_of_text(call(""))) == []
    assert list(_items_of_text(call("x"))) == ["x"]
    assert list(_items_of_text(call("y" * 80))) == ["y" * 80]
    assert list(_items_of_text(call("y" * 81))) == []


def test_single_characters_are_no_items() -> None:
    assert list(_items_of_text("a b 7 % x _ /")) == []


# --- inspect/run_fixes.py -----------------------------------------------------------


def test_a_row_with_one_masked_turn_is_rewritten() -> None:
    def flagged(**metrics: object) -> Flagged:
        return Flagged(Location("in.jsonl", 3), "r1", "over", dict(metrics))

    assert flagged(masked_turns=1).rewritten
    assert not flagged(masked_turns=0).rewritten and not flagged().rewritten
    assert flagged(compression_region={"start_idx": 0}).summarized
    assert not flagged(compression_region={"end_idx": 4}).summarized


# --- core/json_text.py --------------------------------------------------------------


def test_too_deep_counts_from_the_top_and_skips_escaped_quotes() -> None:
    # Three levels, then a sibling: four opening brackets, never four deep.
    assert json_text.too_deep("[[[]]][]", limit=3) is False
    assert json_text.too_deep("[[[[]]]]", limit=3) is True
    assert json_text.too_deep("[[]]", limit=3) is False  # fewer brackets than the limit
    assert json_text.too_deep('{"a":' * 5, limit=3) is True  # objects count as arrays do
    assert json_text.too_deep("[][[[", limit=3) is False  # a close goes back to 0 ...
    assert json_text.too_deep("[[[][[", limit=3) is True  # ... one level at a time
    # An escaped quote does not end the string: the brackets after it are data.
    assert json_text.too_deep('"\\"[[[[[', limit=3) is False
    assert json_text.too_deep('"\\\\"[[[[[', limit=3) is True  # an escaped backslash does end it


def _siblings(count: int, deep: str) -> str:
    return "[" + "[]," * count + deep + "]"


def test_loads_measures_depth_after_siblings() -> None:
    # More than 128 opening brackets in all, 101 levels at most: parsed.
    lists = _siblings(30, "[" * 100 + "]" * 100)
    assert json_text.loads(lists)[-1] is not None
    objects = _siblings(30, '{"a":' * 100 + "1" + "}" * 100)
    assert json_text.loads(objects)[0] == []
    # 128 levels, with a string holding a bracket (so the quick count says 129): parsed.
    at_limit = _siblings(0, '["[", ' + "[" * 126 + "]" * 127)
    assert json_text.loads(at_limit)[0][0] == "["
    # 129 levels after 50 siblings that each close what they open: refused.
    deep = _siblings(50, "[" * 128 + "]" * 128)
    with pytest.raises(json.JSONDecodeError) as caught:
        json_text.loads(deep)
    assert str(caught.value) == "nested more than 128 levels deep: line 1 column 1 (char 0)"
    # The same after siblings that are objects, and for 129 levels of objects.
    with pytest.raises(json.JSONDecodeError, match="nested more than 128 levels deep"):
        json_text.loads("[" + "{}," * 50 + "[" * 128 + "]" * 128 + "]")
    with pytest.raises(json.JSONDecodeError, match="nested more than 128 levels deep"):
        json_text.loads('{"a":' * 129 + "1" + "}" * 129)
    # Far past the parser's own recursion limit: the same error, at the same place.
    with pytest.raises(json.JSONDecodeError) as caught:
        json_text.loads("[" * 100_000)
    assert str(caught.value) == "nested more than 128 levels deep: line 1 column 1 (char 0)"


# --- formats/registry.py ------------------------------------------------------------


def test_a_gzip_file_named_jsonl_is_read_as_gzip(tmp_path: Path) -> None:
    packed = tmp_path / "rows.jsonl"
    packed.write_bytes(gzip.compress(b'{"n": 1}\n'))
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"n": 1}\n', encoding="utf-8")
    assert (file_format(packed), file_format(plain)) == ("jsonl.gz", "jsonl")


def test_a_parquet_output_holds_training_marks_only_when_asked(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "in.parquet"
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    pq.write_table(pa.table({"conversations": pa.array(
        [[{"from": "human", "value": "hi"}]], pa.list_(turn))}), source)
    row = {"conversations": [{"from": "human", "value": "hi"}]}
    for marks, name in ((None, "plain"), (True, "marked")):
        final = tmp_path / f"{name}.parquet"
        sink = (open_sink("parquet", final, InputFile(source, "parquet")) if marks is None
                else open_sink("parquet", final, InputFile(source, "parquet"), marks=True))
        sink.write_row(row)
        sink.finish()
        sink.commit()
        fields = {f.name for f in pq.read_schema(final).field("conversations").type.value_type}
        assert ("train" in fields) is bool(marks), (name, fields)


# --- core/distill.py ----------------------------------------------------------------


def _second_output(first: str, second: str) -> list[tuple[str, str]]:
    memory = RowMemory()
    distill_output(first, "safe", memory)
    return distill_output(second, "safe", memory)


def test_a_block_of_three_lines_is_referenced_when_it_saves_more_than_24_characters() -> None:
    # The reference "⟪lines 2-4 of tool output #1⟫" is 29 characters; the block with its
    # two line breaks must be longer than 29 + 24 = 53.
    for extra, referenced in ((5, True), (4, False)):
        block = ["alpha line here", "bravo words there", "charlie says hi" + "x" * extra]
        assert sum(map(len, block)) + 2 == 49 + extra
        got = _second_output("\n".join(["intro", *block, "end one"]),
                             "\n".join(["other start", *block, "other end"]))
        expected = [("blocks", "other start\n⟪lines 2-4 of tool output #1⟫\nother end")]
        assert got == (expected if referenced else []), extra


def test_a_block_may_start_on_a_line_of_four_characters() -> None:
    block = ["abcd", "bravo words there and more", "charlie says hi and more"]
    got = _second_output("\n".join(["intro", *block, "end one"]),
                         "\n".join(["other start", *block, "other end"]))
    assert got == [("blocks", "other start\n⟪lines 2-4 of tool output #1⟫\nother end")]


def test_a_line_remembers_its_last_eight_places() -> None:
    anchor = "shared anchor line"
    block = [anchor, "bravo words there and more", "charlie says hi and more"]
    for later, referenced in ((7, True), (8, False)):
        memory = RowMemory()
        distill_output("\n".join(block), "safe", memory)
        for j in range(later):  # the anchor again, each time before other lines
            distill_output(f"pre {j}\n{anchor}\ntail {j} unique", "safe", memory)
        got = distill_output("\n".join(["new", *block]), "safe", memory)
        assert got == ([("blocks", "new\n⟪lines 1-3 of tool output #1⟫")] if referenced
                       else []), later


def test_a_run_is_folded_when_it_saves_16_characters() -> None:
    for width, folded in ((17, True), (16, False)):
        lines = [f"item {i} " + "w" * width for i in (1, 2)]
        got = distill_output("\n".join(lines), "safe")
        assert got == ([("repeats", "⟪×2⟫ item {1,2} " + "w" * width)] if folded else [])


def test_blobs_at_their_edges() -> None:
    blob = "QUJD" * 15 + "QUJ1"  # 64 characters, letters and a digit: a blob
    assert blobs(blob).startswith("[blob 64 chars sha256:")
    assert blobs(blob + "==x") == blob + "==x"  # part of a longer word
    digest = hashlib.sha512(b"x").hexdigest()  # 128 hex digits used as a name
    assert blobs(f"digest sha512:{digest} ok") == f"digest sha512:{digest} ok"
    assert blobs(f"digest {digest} ok").startswith("digest [blob 128 chars sha256:")


def test_the_rules_of_each_level() -> None:
    assert (rules_for("safe"), rules_for("all"), rules_for("off")) == (SAFE_RULES, RULES, ())


def test_text_that_opens_like_json_but_is_not_gets_the_line_rules() -> None:
    text = "{ not json at all\n" + "\n".join(f"item {i} " + "w" * 20 for i in (1, 2))
    assert distill_output(text, "all") == [
        ("repeats", "{ not json at all\n⟪×2⟫ item {1,2} " + "w" * 20)]


def test_row_memory_numbers_and_indexes_what_may_be_referenced() -> None:
    memory = RowMemory()
    assert memory.add("x" * 64, None) == 1
    assert memory.lines == [["x" * 64]] and memory.whole == {"x" * 64: 1}
    assert memory.add("y" * 64, None, referable=False) == 2
    assert "y" * 64 not in memory.whole and memory.lines[1] == ["y" * 64]
    assert memory.add("ab\nbbbb\ncccc", ["ab", "bbbb", "cccc"]) == 3
    assert memory.index == {"bbbb": [(3, 1)], "cccc": [(3, 2)]}  # "ab": too short


def test_a_notation_mark_inside_a_line_leaves_the_output_referable() -> None:
    view = "see ⟪this⟫ here " + "z" * 60
    assert _second_output(view, view) == [("same_output", "⟪same as tool output #1 above⟫")]


def test_a_redraw_without_inert_escapes_is_one_stage() -> None:
    assert distill_output("50%\r100%\ndone line here", "safe") == [
        ("redraws", "100%\ndone line here")]


FILE_VIEW = ["[File: src/app.py (40 lines total)]", "(10 more lines above)",
             *(f"{n}:    value_{n} = compute({n})" for n in range(11, 17))]


@pytest.mark.parametrize(("second", "expected"), [
    # The block opens on the header: the header as it is, the numbered lines as file lines.
    (["again:", *FILE_VIEW], "again:\n[File: src/app.py (40 lines total)]\n"
     "(10 more lines above)\n⟪file lines 11-16 as in tool output #1⟫"),
    (["again:", *FILE_VIEW[1:6]],
     "again:\n(10 more lines above)\n⟪file lines 11-14 as in tool output #1⟫"),
    (["again:", *FILE_VIEW[2:7], "after"],
     "again:\n⟪file lines 11-15 as in tool output #1⟫\nafter"),
])
def test_a_block_holding_a_file_view_refers_to_its_file_lines(second: list[str],
                                                             expected: str) -> None:
    assert _second_output("\n".join(FILE_VIEW), "\n".join(second)) == [
        ("file_views", expected)]


def test_numbered_lines_late_in_a_block_or_with_a_gap_are_a_plain_block() -> None:
    late = [*FILE_VIEW[:2], "# the settings of this module follow", *FILE_VIEW[2:]]
    assert _second_output("\n".join(late), "\n".join(["again:", *late])) == [
        ("blocks", "again:\n⟪lines 1-9 of tool output #1⟫")]
    gap = [*FILE_VIEW[:2], *(f"{n}:    value_{n} = compute({n})"
                             for n in (11, 12, 14, 15, 16, 17))]
    assert _second_output("\n".join(gap), "\n".join(["again:", *gap])) == [
        ("blocks", "again:\n⟪lines 1-8 of tool output #1⟫")]


def _named_rows(count: int, line: Callable[[str, str], str]) -> list[str]:
    """``count`` lines ``line(name, letter)``: names ax, ay, az, bx, ...; letters a, b, ..."""
    names = [a + b for a in "abcdefghijkl" for b in "xyz"]
    return [line(names[i], string.ascii_lowercase[i]) for i in range(count)]


def _table_rows(count: int, column: str, width: int = 8) -> list[str]:
    return _named_rows(count, lambda name, c: f"{name:{width}} {column} t{c}")


def _column_note(count: int, column: str) -> str:
    return f'⟪next {count} lines have " {column}" at column 8⟫'


def test_a_shared_column_of_four_lines_is_noted_when_the_note_is_short_enough() -> None:
    rows = _table_rows(4, "a" * 25)  # the note (60) + 16 < 3 x 26
    got = distill_output("\n".join(rows), "safe")
    assert got == [("columns", "\n".join([_column_note(4, "a" * 25),
                                          *(row[:8] + row[34:] for row in rows)]))]
    assert distill_output("\n".join(_table_rows(4, "a" * 24)), "safe") == []  # 75 < 75: no
    # Three lines are not a table, however long their shared column.
    three = [*_table_rows(3, "a" * 60), "a different last line here"]
    assert distill_output("\n".join(three), "safe") == []


def test_a_shared_column_has_eight_characters_or_more() -> None:
    rows = _table_rows(12, "abcdefg")  # " abcdefg": 8 characters
    got = distill_output("\n".join(rows), "safe")
    assert got and got[0][0] == "columns" and got[0][1].split("\n")[0] == _column_note(
        12, "abcdefg")
    assert distill_output("\n".join(_table_rows(12, "abcdef")), "safe") == []


def test_a_block_two_earlier_outputs_hold_refers_to_the_first() -> None:
    block = ["alpha line here is long", "bravo words there long", "charlie says hi long one"]
    memory = RowMemory()
    for name in ("one", "two"):
        distill_output("\n".join([name, *block]), "safe", memory)
    assert distill_output("\n".join(["three", *block]), "safe", memory) == [
        ("blocks", "three\n⟪lines 2-4 of tool output #1⟫")]


def test_table_leaves_text_that_is_no_json_document() -> None:
    assert table("not json") == "not json"
    assert table("[1, 2") == "[1, 2"


def test_long_lines_are_cut_in_the_text_blobs_left() -> None:
    text = "x" * 1500 + "\ndata " + "QUJD" * 16 + "QUJ1 end"
    stages = distill_output(text, "all")
    assert [rule for rule, _ in stages] == ["blobs", "long_lines"]
    marker = re.escape("[blob 68 chars sha256:") + r"[0-9a-f]{8}\] end"
    assert all(re.search(marker + "$", after) for _, after in stages)
    assert len(stages[1][1]) < len(stages[0][1])


def test_three_numbered_lines_are_a_file_view_part() -> None:
    view = [*FILE_VIEW[:2], *FILE_VIEW[2:5], "# that is all the view shows"]
    assert _second_output("\n".join(view), "\n".join(["again:", *view])) == [
        ("file_views", "again:\n[File: src/app.py (40 lines total)]\n(10 more lines "
         "above)\n⟪file lines 11-13 as in tool output #1⟫\n# that is all the view shows")]


def test_runs_of_a_few_groups_are_counted_per_group() -> None:
    lines = ["step 1 of 3 waiting for the build"] * 2 + ["step 2 of 3 waiting for the build"] * 2
    assert distill_output("\n".join(lines), "safe") == [
        ("repeats", "⟪×2⟫ step 1 of 3 waiting for the build\n"
                    "⟪×2⟫ step 2 of 3 waiting for the build")]


def test_a_column_note_must_save_more_than_16_characters() -> None:
    def rows(width: int) -> str:
        return "\n".join(_table_rows(4, "a" * width, width=10))

    # Column 10: the note is 61 characters; 61 + 16 < 3 x 26 but not 3 x 25.
    got = distill_output(rows(25), "safe")
    assert got and got[0][1].startswith('⟪next 4 lines have " ' + "a" * 25 + '" at column 10⟫')
    assert distill_output(rows(24), "safe") == []


@pytest.mark.parametrize("second", [12, 30])
def test_of_two_shared_columns_the_longest_and_then_the_first_is_noted(second: int) -> None:
    rows = _named_rows(5, lambda name, c: f"{name:8} {'a' * 30} u{c} {'b' * second} t{c}")
    got = distill_output("\n".join(rows), "safe")
    assert got[0][1].split("\n")[0] == '⟪next 5 lines have " ' + "a" * 30 + '" at column 8⟫'


@pytest.mark.parametrize("column", ["⟪" + "a" * 30 + "⟫", "⟪" + "a" * 30, "a" * 30 + "⟫"])
def test_a_shared_column_holding_the_notation_is_not_noted(column: str) -> None:
    rows = _table_rows(5, column)
    assert all(rule != "columns" for rule, _ in distill_output("\n".join(rows), "safe"))


def test_a_shared_column_may_open_the_line() -> None:
    rows = _named_rows(5, lambda name, c: f" {'s' * 20} {'r' * 10} {name} t{c}")
    note = '⟪next 5 lines have " ' + "s" * 20 + " " + "r" * 10 + '" at column 0⟫'
    assert distill_output("\n".join(rows), "safe") == [
        ("columns", "\n".join([note, " ax ta", " ay tb", " az tc", " bx td", " by te"]))]


def test_numbering_that_breaks_after_its_first_line_is_no_file_view() -> None:
    view = ["11:    value_11 = compute(11)", "99:    value_99 = other()",
            "13:    value_13 = compute(13)", "14:    value_14 = compute(14)",
            "# that is all the view shows"]
    assert _second_output("\n".join(view), "\n".join(["again:", *view])) == [
        ("blocks", "again:\n⟪lines 1-5 of tool output #1⟫")]


# --- core/invented.py ---------------------------------------------------------------


def test_a_quantity_more_than_a_quarter_off_is_invented_even_within_its_rounding() -> None:
    # "1 GB" rounds anything from 0.5 to 1.5 GB, but 700 MB is 30% off: not what it says.
    assert InventedCheck(["the file holds 700 MB of logs"]).invented("it holds 1 GB") == [
        "1 GB"]
    assert InventedCheck(["the file holds 900 MB of logs"]).invented("it holds 1 GB") == []


def test_a_zero_quantity_is_stated_by_a_zero_in_another_unit() -> None:
    assert InventedCheck(["waited 0 seconds"]).invented("waited 0 s") == []


# --- inspect/validate.py ------------------------------------------------------------

PLAIN = [{"from": "human", "value": "fix it"}, {"from": "gpt", "value": "done"}]
SUMMARIZED = [{"from": "human", "value": SUMMARY_PREFIX + " what happened"}, *PLAIN]


@pytest.mark.parametrize(("metrics", "turns", "said"), [
    ({"was_compressed": True, "strategy_used": "summarize"}, PLAIN,
     ["its metrics mark it compressed, but it holds no summary turn"]),
    ({"was_compressed": True, "strategy_used": "mask"}, PLAIN, []),
    ({"was_compressed": True, "strategy_used": "mask"}, SUMMARIZED,
     ["its metrics say it was masked only, but it holds a summary turn"]),
    ({"was_compressed": True, "strategy_used": "mask+summarize"}, SUMMARIZED, []),
    ({"was_compressed": False, "skipped_under_target": True}, SUMMARIZED,
     ["its metrics mark it skipped (under the target), but it holds a summary turn"]),
    ({"was_compressed": False, "skipped_under_target": False}, SUMMARIZED, []),
    ({"was_compressed": False, "skipped_under_target": True}, PLAIN, []),
])
def test_metrics_that_contradict_the_turns(metrics: dict[str, object], turns: list[dict[str, str]],
                                           said: list[str]) -> None:
    assert list(_contradictions(metrics, turns)) == said


def test_a_validation_starts_at_zero() -> None:
    found = Validation()
    assert (found.rows, found.problems, found.over_limit, found.flagged, found.failed,
            found.unreadable, found.fallbacks, found.summaries) == (0,) * 8


def test_validate_counts_summaries_fallbacks_and_flags_and_reads_each_rows_metrics(
        tmp_path: Path, counter: TokenCounter) -> None:
    rows = [
        {**row("a", "SHG", [10, 10, 10]),
         "compression_metrics": {"summary_source": "llm", "still_over_limit": True}},
        {**row("b", "SHG", [5, 5, 5]), "compression_metrics": {"summary_source": "fallback"}},
        {**row("c", "SHG", [5, 5, 5]), "compression_metrics": {
            "summary_source": "cache", "was_compressed": True, "strategy_used": "summarize"}},
        {**row("d", "SHG", [5, 5, 5]), "compression_metrics": ["not", "a", "record"]},
        {**row("e", "SHG", [5, 5, 5]),
         "compression_metrics": {"summary_source": "none", "compressed_tokens": True}},
        {**row("f", "SHG", [5, 5, 5]), "compression_metrics": {"compressed_tokens": 99}},
    ]
    out = write_jsonl(tmp_path / "out.jsonl", rows)
    found = Validation()
    config = CompressionConfig(target_max_tokens=20, summary_target_tokens=10)
    problems = list(validate_output(str(out), config, found, counter, own_counting=True))
    assert (found.rows, found.over_limit, found.flagged, found.summaries,
            found.fallbacks) == (6, 1, 1, 3, 1)
    assert [(p.location.rsplit(":", 1)[1], p.kind) for p in problems] == [
        ("1", "over_target"), ("3", "metrics"), ("6", "metrics")], problems
    assert "metrics say 99 tokens but it counts 15" in problems[2].message


# --- engine/local.py ----------------------------------------------------------------


def test_a_run_records_its_times_and_the_remedies_of_its_rows_over_the_target(
        tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [long_hermes_row(f"r{i}") for i in range(3)])
    out = tmp_path / "out.jsonl"
    run = invoke_cli("compress", str(source), "-o", str(out), "--target-max-tokens", "40",
                     "--summary-target-tokens", "10", "--summarizer", "extractive", "--quiet")
    assert run.returncode == 0, run.stderr
    metrics = json.loads((tmp_path / "out_metrics.json").read_text(encoding="utf-8"))
    times = metrics["processing"]
    assert times["start_time"] and times["end_time"] and times["end_time"] >= times["start_time"]
    assert isinstance(times["duration_seconds"], (int, float)) and times["duration_seconds"] >= 0
    assert metrics["over_limit"] and "remedies" in metrics  # searched for rows still over
    assert sum(1 for _ in out.open(encoding="utf-8")) == 3
