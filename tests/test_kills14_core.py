"""Tests written to kill mutants left by the coverage-guided pass over modules whose code
changed since their last whole run (issue 40, item 8): the strict YAML loader, symbolic
link loops, and the others named in each section. In process, on hand-made input.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import re
import sqlite3
import time
from contextlib import closing
from dataclasses import FrozenInstanceError, astuple, replace
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
import yaml

from tests.cli_helpers import invoke_cli
from tests.test_kills13_commands import _rows
from tests.test_plan import roles  # the planner tests' role letters
from trajectory_compressor.core import extractive, reasons
from trajectory_compressor.core.actions import ActionCheck, _noun_forms, action_claims
from trajectory_compressor.core.assemble import base_metrics, compressed_metrics
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.conversation import CALL_TURN, call_view
from trajectory_compressor.core.distill_row import RuleSaving
from trajectory_compressor.core.errors import ConfigError, FatalSummaryError, OutputError, RowError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.plan import (
    ALTERNATING,
    MIDDLE_EXHAUSTED,
    NO_CLEAN_CUT,
    NO_MIDDLE,
    PROTECTED_HEAD,
    PROTECTED_TAIL,
    Plan,
    Region,
    plan_trajectory,
    snap_boundary,
)
from trajectory_compressor.core.redact import Scrubber, looks_like_key, masked, scrub_literals
from trajectory_compressor.core.summary import (
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
    add_references,
)
from trajectory_compressor.core.yaml_strict import load_config_yaml
from trajectory_compressor.counting import pieces
from trajectory_compressor.dialects import ShareGPT, detect, dialect_for, row_kind
from trajectory_compressor.dialects.base import SOURCE
from trajectory_compressor.dialects.openai import (
    _arguments,
    _take_call,
    render_tool_call,
    sharegpt_to_openai,
)
from trajectory_compressor.dialects.sharegpt import ShareGPTTags
from trajectory_compressor.dialects.tool_pairs import Unanswered, calls_in, unanswered_calls
from trajectory_compressor.dialects.training import (
    instruction_row,
    is_marked,
    not_trained,
    window_id,
)
from trajectory_compressor.engine import summarizer_rows
from trajectory_compressor.engine.checkpoint import Checkpoint
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.job import check_summarizer_rows, compress_dataset
from trajectory_compressor.engine.layout import plan_layout
from trajectory_compressor.engine.options import RunOptions
from trajectory_compressor.engine.ours import (
    HTML_MARKER,
    MANIFEST_FORMAT,
    is_analysis,
    is_manifest,
    is_report_page,
    manifest_files,
    read_head,
)
from trajectory_compressor.engine.projection import CountedRow
from trajectory_compressor.engine.ray import ShardWorker
from trajectory_compressor.engine.replan import OverRows
from trajectory_compressor.engine.shard import ShardJob
from trajectory_compressor.engine.stored_fixes import compute_fixes, stored_fixes
from trajectory_compressor.engine.stream import RowStream
from trajectory_compressor.engine.summarizer_rows import summarizer_row
from trajectory_compressor.formats import links
from trajectory_compressor.formats.base import (
    InputFile,
    create_exclusive,
    unique_temp_path,
    write_atomic,
)
from trajectory_compressor.inspect.distill_preview import DistillPreview
from trajectory_compressor.inspect.strategies import StrategyComparison, StrategyFigures
from trajectory_compressor.summarizers import cache, local
from trajectory_compressor.summarizers.cache import SummaryCache, cache_key
from trajectory_compressor.summarizers.local_server import LocalServerError

# --- core/plan.py: the edges of each reason ----------------------------------------------

def test_a_middle_of_tool_turns_before_a_tool_turn_has_no_clean_cut_for_alternating_rows():
    """Middle [3, 7) is all tool turns and the protected turn after it is a tool turn too:
    no gpt turn to start at, so no cut (not a region of nothing)."""
    config = CompressionConfig(target_max_tokens=500, summary_target_tokens=50,
                               protect_first_tool=False, protect_last_n_turns=1)
    plan = plan_trajectory(roles("SHGTTTTT"), [100] * 8, config, ALTERNATING)
    assert (plan.action, plan.reason, plan.region, plan.region_tokens) == (
        "over_limit", NO_CLEAN_CUT, None, 0)


def test_a_middle_that_snaps_to_the_end_of_the_row_is_no_middle():
    """Nothing protected at the end: the middle runs to the row's end, and a start snapped
    forward to the end leaves nothing (the end itself is not a turn to look at)."""
    config = CompressionConfig(target_max_tokens=500, summary_target_tokens=50,
                               protect_first_tool=False, protect_last_n_turns=0)
    plan = plan_trajectory(roles("SHGTTTTT"), [100] * 8, config, ALTERNATING)
    assert (plan.action, plan.reason, plan.middle) == ("over_limit", NO_MIDDLE, Region(3, 8))


def test_a_region_that_snaps_back_to_its_start_is_no_clean_cut_not_a_small_region():
    config = CompressionConfig(target_max_tokens=500, summary_target_tokens=50,
                               protect_first_tool=False, protect_last_n_turns=1)
    plan = plan_trajectory(roles("SHGGTTTT"), [100] * 8, config, ALTERNATING)
    assert (plan.action, plan.reason, plan.region_tokens) == ("over_limit", NO_CLEAN_CUT, 0)


def test_a_projection_exactly_at_the_target_fits():
    """Needed 300 = 1,200 - 1,000 + 100, reached at turn 5 (a clean cut before turn 6):
    1,200 - 300 + 100 = 1,000 tokens, the target itself."""
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100)
    tokens = [100] * 4 + [50, 250, 100, 100] + [75] * 4
    plan = plan_trajectory(roles("SHGTGTGTGTGT"), tokens, config)
    assert (plan.action, plan.region, plan.reason) == ("compress", Region(4, 6), "")
    assert plan.projected_tokens(100) == 1000


def _short_region(head: int, tail: int, middle: list[int], summary: int):
    """Middle [4, 8) is G T G T and the first protected tail turn a tool turn: a region
    that would run to the middle's end snaps back to turn 6."""
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=summary)
    tokens = [head // 4] * 4 + middle + [tail // 4] * 4
    return plan_trajectory(roles("SHGTGTGTTGTG"), tokens, config)


def test_protected_turns_and_summary_exactly_at_the_target_leave_the_middle_exhausted():
    plan = _short_region(400, 500, [100] * 4, 100)
    assert (plan.region, plan.projected_tokens(100)) == (Region(4, 6), 1200)
    assert plan.reason == MIDDLE_EXHAUSTED


def test_a_head_as_large_as_the_tail_is_named_as_the_protected_head():
    plan = _short_region(400, 400, [100, 400, 100, 100], 300)
    assert (plan.region, plan.region_tokens) == (Region(4, 6), 500)
    assert plan.reason == PROTECTED_HEAD
    assert _short_region(400, 440, [100, 400, 100, 100], 300).reason == PROTECTED_TAIL


def test_a_boundary_moved_back_stops_at_the_lowest_turn_allowed():
    assert snap_boundary(roles("GTTT"), 2, 1, 3) == 1


def test_the_assistant_share_kept_without_a_region_or_a_count():
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100)
    skip = plan_trajectory(roles("SHG"), [10, 10, 10], config)
    assert skip.region is None and skip.assistant_kept == 1.0
    plan = _short_region(400, 500, [100] * 4, 100)
    assert replace(plan, assistant_tokens=100).assistant_kept == 1.0
    assert replace(plan, assistant_tokens=100, region_assistant_tokens=30).assistant_kept == 0.7

# --- core/yaml_strict.py: PyYAML's safe loader, duplicate keys aside ---------------------


def test_merge_keys_and_nested_values_load_as_the_safe_loader_loads_them():
    text = ("base: &b {x: 1, y: [1, {z: 2}]}\n"
            "use:\n  <<: *b\n  y: 3\n"
            "more:\n  <<: [*b]\n  w: 4\n")
    assert load_config_yaml(text, "c.yaml") == yaml.safe_load(text) == {
        "base": {"x": 1, "y": [1, {"z": 2}]}, "use": {"x": 1, "y": 3},
        "more": {"x": 1, "y": [1, {"z": 2}], "w": 4}}


def test_a_list_that_holds_itself_loads_as_with_the_safe_loader():
    """The safe loader builds nested values lazily, so a list anchored and aliased inside
    itself is a list holding itself, not an error."""
    loaded = load_config_yaml("a: &L [1, *L]\n", "c.yaml")
    assert loaded["a"][0] == 1 and loaded["a"][1] is loaded["a"]


def test_a_key_given_twice_names_both_lines():
    with pytest.raises(ConfigError) as err:
        load_config_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", "c.yaml")
    assert str(err.value) == ("config file c.yaml: the key 'c' is given twice, on line 3 "
                              "and on line 4; keep one")


# --- formats/links.py --------------------------------------------------------------------

def test_a_plain_file_or_a_missing_one_is_no_loop(tmp_path):
    (tmp_path / "f").write_text("x")
    assert links.is_link_loop(tmp_path / "f") is False
    assert links.is_link_loop(tmp_path / "missing") is False
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert links.is_link_loop(tmp_path / "a") is True
    with pytest.raises(ConfigError, match="is a symbolic link loop"):
        links.resolve(tmp_path / "a", "the input")


def test_an_error_other_than_a_loop_is_raised_as_it_is(tmp_path, monkeypatch):
    """A relative path in a working folder that was deleted cannot be resolved: that is
    the system's own error, not a link loop."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    os.rmdir(gone)
    with pytest.raises(FileNotFoundError) as err:
        links.resolve(Path("rel.jsonl"))
    assert err.value.errno == errno.ENOENT


# --- core/reasons.py, core/conversation.py, core/summary.py ------------------------------

def test_a_reason_is_a_fixed_value():
    assert hash(reasons.NO_MIDDLE) == hash(reasons.Reason(*astuple(reasons.NO_MIDDLE)))
    with pytest.raises(FrozenInstanceError):
        reasons.NO_MIDDLE.code = "other"  # type: ignore[misc]


def test_a_call_turn_is_shown_as_one_block_per_call_in_its_own_characters():
    turns = [{"from": "gpt", "value": '[{"name": "café", "arguments": {}}, {"name": "b"}]',
              CALL_TURN: True},
             {"from": "gpt", "value": "[]", CALL_TURN: True},
             {"from": "tool", "value": "[]"}]
    assert [t["value"] for t in call_view(turns)] == [
        '<tool_call>\n{"name": "café", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b"}\n</tool_call>',
        "<tool_call>\n[]\n</tool_call>",
        "[]"]


def _words(text: str) -> int:
    return len(text.split())


def test_a_summary_that_leaves_no_room_for_references_is_cut_for_them():
    """Budget 4 words: references may take a quarter, at least 1 word, so a 3-word summary
    is left as it is (the line does not fit), while a 4-word one is cut to 3 words or less
    at a sentence end."""
    assert add_references("One. Two three.", ["x"], 4, _words) == ("One. Two three.", False)
    assert add_references("One two. Three four.", ["x"], 4, _words) == (
        "One two.\nReferences: x", True)


# --- dialects/__init__.py: the vote ------------------------------------------------------

HERMES_ROW = {"conversations": [{"from": "human", "value": "hi"},
                                {"from": "gpt", "value": "yo"}]}
OPENAI_ROW = {"messages": [{"role": "user", "content": "hi"}]}


def test_the_first_32_rows_of_a_known_dialect_decide_a_tie_by_the_first():
    config = CompressionConfig()
    rows = [HERMES_ROW] * 16 + [OPENAI_ROW] * 16
    assert detect(rows + [OPENAI_ROW] * 5, config).name != "openai"
    assert detect([OPENAI_ROW, *rows], config).name == "openai"


def test_row_kinds_at_the_edges():
    assert row_kind({"conversations": [{"from": "tool", "value": "x"}]}) == "sharegpt"
    # Messages beside a conversation: a messages row, unless the list is empty.
    both = {"messages": [{"role": "user", "content": "x"}], **HERMES_ROW}
    assert row_kind(both) == "openai"
    assert row_kind({"messages": [], **HERMES_ROW}) == "sharegpt-plain"
    assert row_kind({"messages": []}) == "openai"


def test_the_vote_reads_only_the_first_10000_lines(tmp_path):
    """Ten thousand lines of no dialect, then OpenAI rows: nothing voted, so the file is
    read as Hermes ShareGPT (and its rows rejected), as `detect` documents."""
    path = tmp_path / "late.jsonl"
    path.write_text('{"x": 1}\n' * 10_000 + (json.dumps(OPENAI_ROW) + "\n") * 3)
    early = tmp_path / "early.jsonl"
    early.write_text('{"x": 1}\n' * 9_999 + (json.dumps(OPENAI_ROW) + "\n") * 3)
    config = CompressionConfig()
    names = []
    for source in (path, early):
        reader = RowStream(partial(detect, config=config))
        names.append(reader.detect(InputFile(source, "jsonl")).name)
    assert names[0] != "openai" and names[1] == "openai"


# --- engine/checkpoint.py, engine/summarizer_rows.py -------------------------------------

def test_a_checkpoint_without_summarizer_rows_has_no_offset(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"inputs": [], "settings": {}, "version": 1}))
    assert Checkpoint.load(path).summarizer_rows == 0


def test_a_summarizer_row_marks_the_turns_it_summarizes():
    turns = [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"},
             {"from": "tool", "value": "c"}]
    request = SummaryRequest(turns, first_index=4, target_tokens=50)
    row = summarizer_row(request, "[CONTEXT SUMMARY]: done", ShareGPT(), 1000, None,
                         "r1", 2)
    assert row["id"] == "r1#w2-summary"
    assert row[summarizer_rows.MARK] == {"source_id": "r1", "window": 2,
                                         "turns": {"start_idx": 4, "end_idx": 7}}


def test_the_summarizer_rows_file_must_be_a_file_of_its_own(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match="is not a regular file"):
        summarizer_rows.check_target(tmp_path / "d", False, False)
    other = tmp_path / "other.jsonl"
    other.write_text("not json\n")
    with pytest.raises(ConfigError, match="exists and was not written by"):
        summarizer_rows.check_target(other, False, False)
    summarizer_rows.check_target(other, True, False)  # --overwrite
    own = tmp_path / "own.jsonl"
    own.write_text(json.dumps({summarizer_rows.MARK: {}}) + "\n")
    summarizer_rows.check_target(own, False, False)


# --- engine/ray.py (without Ray: the worker's own set-up), counting/pieces.py -------------

def test_a_worker_takes_the_drivers_keys_only_for_variables_it_lacks(monkeypatch):
    monkeypatch.setenv("TC_KILLS14_SET", "mine")
    monkeypatch.setenv("TC_KILLS14_EMPTY", "")
    monkeypatch.setenv("TC_KILLS14_UNSET", "")  # recorded, so that teardown removes it
    monkeypatch.delenv("TC_KILLS14_UNSET")
    job = ShardJob(config=CompressionConfig(), inputs=[], layout=None,  # type: ignore[arg-type]
                   parts=Path("parts"), started="now")
    keys = {"TC_KILLS14_SET": "driver", "TC_KILLS14_EMPTY": "driver-e",
            "TC_KILLS14_UNSET": "driver-u"}
    ShardWorker(job, keys)
    assert [os.environ[k] for k in keys] == ["mine", "driver-e", "driver-u"]


def test_a_pattern_finds_any_word_by_its_shortest_prefix_in_the_list():
    assert pieces._any_of([]) == ""
    assert pieces._any_of(["x.y"]) == "x\\.y"
    assert pieces._any_of(["ab", "abc", "b"]) == "(?:ab|b)"
    assert pieces._any_of(["cd", "ca"]) == "c(?:a|d)"


# --- core/assemble.py: the metrics of a masked row ---------------------------------------

MASKED = SimpleNamespace(turns=(3, 5), saved=300)  # a `core.mask.Masking`'s two counts


def test_a_masked_row_without_a_summary_counts_what_masking_saved():
    plan = Plan("mask", total_tokens=700, middle=Region(2, 6), mask=MASKED)
    m = base_metrics(plan, 8)
    assert (m.original_tokens, m.compressed_tokens, m.tokens_saved) == (1000, 700, 300)
    assert (m.masked_turns, m.masked_tokens, m.compression_ratio) == (2, 300, 0.7)
    assert (m.strategy_used, m.was_compressed, m.still_over_limit) == ("mask", True, False)
    unmasked = base_metrics(Plan("skip", total_tokens=700, middle=Region(2, 6)), 8)
    assert (unmasked.was_compressed, unmasked.strategy_used) == (False, "none")
    # A ratio is after / before for any row of one token or more.
    one = SimpleNamespace(turns=(1,), saved=0)
    assert base_metrics(Plan("mask", total_tokens=1, middle=Region(0, 1), mask=one),
                        1).compression_ratio == 1.0


def test_a_masked_and_summarized_row_counts_both():
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100)
    plan = Plan("compress", total_tokens=1500, middle=Region(2, 6), region=Region(2, 5),
                region_tokens=800, mask=MASKED)
    m = compressed_metrics(plan, 8, 100, 0, config)
    assert (m.original_tokens, m.compressed_tokens, m.tokens_saved) == (1800, 800, 1000)
    assert (m.masked_turns, m.masked_tokens, m.strategy_used) == (2, 300, "mask+summarize")
    assert m.compression_ratio == 800 / 1800
    tiny = Plan("compress", total_tokens=1, middle=Region(0, 1), region=Region(0, 1),
                region_tokens=1)
    assert compressed_metrics(tiny, 1, 1, 0, config).compression_ratio == 1.0


# --- engine/stored_fixes.py: the stored table's own checks -------------------------------

def test_a_stored_table_is_read_only_in_its_own_version_and_settings(counter):
    config = CompressionConfig(summarizer="extractive")
    compressor = TrajectoryCompressor(config, summarizer=ExtractiveSummarizer(counter.count),
                                      counter=counter)
    before = time.process_time()
    section = asyncio.run(compute_fixes(compressor, OverRows()))
    spent = time.process_time() - before
    assert section["version"] == 1 and section["settings"] == config.run_settings()
    assert 0 <= section["cpu_seconds"] <= round(spent, 3) + 0.001
    assert section["cpu_seconds"] == round(section["cpu_seconds"], 3)
    assert section["table"]["exact"] is True
    table, why = stored_fixes({"remedies": section}, config)
    assert table is not None and why == ""
    for version in (0, 2, None):
        assert stored_fixes({"remedies": {**section, "version": version}}, config) == (
            None, "its stored table is of another version")


# --- dialects/training.py: the marks and rows of windows output --------------------------

def test_an_instruction_row_in_each_dialects_spelling():
    config = CompressionConfig()
    assert instruction_row(dialect_for(config, "openai"), "S", "U", "A") == {"messages": [
        {"role": "system", "content": "S"}, {"role": "user", "content": "U"},
        {"role": "assistant", "content": "A"}]}
    assert instruction_row(dialect_for(config, "sharegpt-variant"), "S", "U", "A") == {
        "conversations": [{"from": "human", "value": "U"}, {"from": "gpt", "value": "A"}],
        "system": "S"}
    assert instruction_row(ShareGPT(), "S", "U", "A") == {"conversations": [
        {"from": "system", "value": "S"}, {"from": "human", "value": "U"},
        {"from": "gpt", "value": "A"}]}


def test_turns_not_read_from_a_row_item_are_left_unmarked():
    config = CompressionConfig()
    messages, variant = dialect_for(config, "openai"), dialect_for(config, "sharegpt-variant")
    plain = {"from": "gpt", "value": "x"}
    assert not_trained(messages, {}, plain) is plain
    assert not_trained(messages, {}, {**plain, SOURCE: "text"}) == {**plain, SOURCE: "text"}
    for source in (("summary", {"from": "gpt"}), ("item", "text")):
        turn = {**plain, SOURCE: source}
        assert not_trained(variant, {}, turn) is turn
    marked = not_trained(variant, {}, {**plain, SOURCE: ("item", {"from": "gpt"})})
    assert marked[SOURCE] == ("item", {"from": "gpt", "train": False})
    for item in ("text", None, ["x"]):
        assert is_marked(messages, item) is False and is_marked(variant, item) is False
    assert is_marked(messages, {"weight": 0}) is True
    assert is_marked(variant, {"train": False}) is True


def test_a_window_id_only_from_a_text_or_number_id():
    assert window_id({"id": ["x"]}, 1) == {}
    assert window_id({"id": ["x"], "uuid": 7}, 2) == {"uuid": "7#w2"}
    assert window_id({"uuid": None}, 1) == {}


# --- dialects/openai.py: calls and their answers ------------------------------------------

def test_an_answer_named_for_no_pending_call_takes_the_first_one():
    first = {"id": "c1", "function": {"name": "a"}}
    second = {"id": "c2", "function": {"name": "b"}}
    pending = [first, second]
    assert _take_call(pending, "z") is first and pending == [second]
    assert _take_call(pending, None) is second and _take_call(pending, "b") is None


def test_arguments_as_sharegpt_writes_them():
    assert _arguments('{"a": 1}') == {"a": 1}
    assert _arguments("not json") == "not json"
    assert _arguments(None) == {}
    assert _arguments({"b": 2}) == {"b": 2}
    assert render_tool_call("é", {"k": "ü"}) == (
        '<tool_call>\n{"name": "é", "arguments": {"k": "ü"}}\n</tool_call>')


def test_a_tool_answer_whose_name_is_not_text_takes_the_calls_name():
    turns = [{"from": "human", "value": "go"},
             {"from": "gpt", "value": render_tool_call("grep", {"p": "x"})},
             {"from": "tool",
              "value": '<tool_response>\n{"name": 5, "content": "hit"}\n</tool_response>'}]
    tool = sharegpt_to_openai(turns)[-1]
    assert tool["role"] == "tool" and tool["name"] == "grep"


# --- core/redact.py: base64 forms, key-like names, tuples --------------------------------

def test_a_configured_value_inside_base64_text_is_scrubbed_at_any_alignment():
    # "X" + the key + "tail", encoded: the key's first two bytes share a group with "X";
    # the characters its other nine bytes alone decide are Y2RlZmdoaWpr.
    assert scrub_literals("WGFiY2RlZmdoaWprbHRhaWw=", ["abcdefghijkl"]) == (
        "WGFi[REDACTED]bHRhaWw=")
    # URL-safe base64 of a value whose standard encoding has a slash (a2V5Pz8/a2V5Pz8/).
    assert scrub_literals("x a2V5Pz8_a2V5Pz8_ y", ["key???key???"]) == "x [REDACTED] y"
    # Eight characters of base64 (of six bytes) are enough to count.
    assert scrub_literals("token YWJjZGVm.", ["abcdef"]) == "token [REDACTED]."
    # Only the whole value counts: without its first three bytes, the text stays.
    assert scrub_literals("x ZGVmZ2hpamts y", ["abcdefghijkl"]) == "x ZGVmZ2hpamts y"


@pytest.mark.parametrize(("name", "key"), [
    ("OPENROUTER_API_KEY", False),
    ("Abcdefghij1_Abcdefghij2_Abcdefgh", True),  # 32 characters, upper, lower and digits
    ("Abcdefghij1_Abcdefghij2_Abcdefg", False),  # 31
    ("abcdefghij_abcdefghij_abcdefghijk", False),  # long, but one case and no digit
    ("Ab1", False),
    ("abcdefghijklmnopqrs1", True),  # a 20-character part with a digit
    ("abcdefghijklmnopqr1", False)])
def test_what_looks_like_a_key_where_a_variable_name_goes(name, key):
    assert looks_like_key(name) is key


def test_a_value_that_may_be_a_key_is_named_by_its_length_and_tuples_are_scrubbed():
    assert masked("abc") == "a value of 3 characters (not shown: it may be a key)"
    assert masked(12) == "a value of 2 characters (not shown: it may be a key)"
    assert masked([1]) == "a value of ? characters (not shown: it may be a key)"
    assert Scrubber(["secretvalue"]).scrub_value({"k": ("a secretvalue", ["secretvalue"])}) \
        == {"k": ("a [REDACTED]", ["[REDACTED]"])}


# --- summarizers/cache.py: the key and file format a cache keeps across versions ---------

def test_the_cache_key_and_schema_stay_those_of_existing_cache_files(tmp_path):
    messages = [{"role": "user", "content": "x"}]
    payload = orjson.dumps([1, "m", messages, 100, None])  # schema 1, no options
    assert cache_key("m", messages, 100, None) == hashlib.blake2b(
        payload, digest_size=20).hexdigest()
    store = SummaryCache(tmp_path / "c.sqlite")
    try:
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == 1
    finally:
        store.close()


def test_summaries_are_committed_every_64(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "COMMIT_SECONDS", 3600.0)
    path = tmp_path / "c.sqlite"
    store = SummaryCache(path)

    def committed() -> int:
        with closing(sqlite3.connect(path)) as other:
            return int(other.execute("SELECT COUNT(*) FROM summaries").fetchone()[0])

    try:
        for i in range(63):
            store.put(f"k{i}", "m", "s")
        assert committed() == 0
        store.put("k63", "m", "s")
        assert committed() == 64
    finally:
        store.close()


@pytest.mark.parametrize(("tables", "shown"), [
    (["a", "b", "c", "d", "e"], "a, b, c, d, e"),
    (["a", "b", "c", "d", "e", "f"], "a, b, c, d, e, ...")])
def test_another_programs_database_is_named_by_its_first_five_tables(tmp_path, tables, shown):
    path = tmp_path / "other.db"
    with closing(sqlite3.connect(path)) as db:
        for name in tables:
            db.execute(f"CREATE TABLE {name} (x)")
        db.commit()
    with pytest.raises(ConfigError) as err:
        SummaryCache(path)
    assert f"(tables {shown});" in str(err.value)


# --- formats/base.py: files of a run's own ------------------------------------------------

def test_a_temporary_name_keeps_200_bytes_of_the_name_then_pid_and_token():
    name = unique_temp_path(Path("out") / ("a" * 300)).name
    assert re.fullmatch(r"\.a{200}\.\d+-[0-9a-f]{8}\.partial", name), name


def test_a_new_file_is_readable_by_all_and_written_by_its_owner(tmp_path):
    old = os.umask(0o022)
    try:
        with create_exclusive(tmp_path / "f") as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644


def test_a_file_another_process_keeps_creating_is_given_up_after_20_tries(tmp_path,
                                                                        monkeypatch):
    tries = []

    def taken(*args: object) -> int:
        tries.append(args)
        raise FileExistsError

    monkeypatch.setattr(os, "open", taken)
    with pytest.raises(OutputError, match="another process keeps creating it"):
        create_exclusive(tmp_path / "f")
    assert len(tries) == 20


def test_a_small_file_written_at_once_leaves_other_runs_partial_files_alone(tmp_path):
    other = tmp_path / ".x.json.partial"  # what a run writing x.json in pieces uses
    other.write_text("theirs")
    write_atomic(tmp_path / "x.json", b"{}")
    assert (tmp_path / "x.json").read_bytes() == b"{}"
    assert other.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".x.json.partial", "x.json"]


# --- inspect/distill_preview.py ----------------------------------------------------------

def test_the_rules_line_wraps_within_78_columns():
    preview = DistillPreview(target=100)
    preview.levels["safe"].saved.rules = {
        "progress": RuleSaving(300, 100, 2), "repeats": RuleSaving(5000, 1000, 3),
        "blank_runs": RuleSaving(40, 30, 1), "tail_escapes_cut": RuleSaving(10, 9, 1),
        "zz_last_rule_name": RuleSaving(7, 0, 1)}
    # The first line is 76 columns; " 1," would make it 79.
    assert preview.lines()[-2:] == [
        "  safe by rule: blank_runs 10, progress 200, repeats 4,000, tail_escapes_cut",
        "    1, zz_last_rule_name 7"]


# --- summarizers/local.py: servers that die (stand-ins for llama.cpp processes) ----------
# The real servers are started by the heavy tests (tests/test_local_llm.py); these check
# what the summarizer makes of their deaths, with stand-ins that report them.

class _Server:
    """A server that is alive for ``polls`` calls of `alive`, then dead with ``story``."""

    def __init__(self, story: str | None, polls: int = 0) -> None:
        self.story, self.polls, self.seen = story, polls, 0

    def alive(self) -> bool:
        self.seen += 1
        return self.story is None or self.seen <= self.polls

    def death(self) -> LocalServerError | None:
        return None if self.alive() else LocalServerError(str(self.story))

    def stop(self) -> None:
        pass


class _Inner:
    async def summarize(self, request: SummaryRequest) -> None:
        raise SummaryFailed("connection dropped", SummaryUsage())


def _local(tmp_path, monkeypatch, servers: list[_Server], **config: object):
    monkeypatch.setattr(local, "find_model", lambda name: tmp_path / "m.gguf")
    summarizer = local.LocalSummarizer(CompressionConfig(**config), cpus=2)  # type: ignore[arg-type]
    summarizer.servers = servers  # type: ignore[assignment]
    summarizer.inner = _Inner()  # type: ignore[assignment]
    return summarizer


def test_the_servers_are_dead_only_when_every_one_is(tmp_path, monkeypatch):
    assert _local(tmp_path, monkeypatch, [])._dead() is None
    alive_one = _local(tmp_path, monkeypatch, [_Server("SIGILL; log"), _Server(None)])
    assert alive_one._dead() is None
    both = _local(tmp_path, monkeypatch, [_Server("first; a"), _Server("second; b")])
    assert str(both._dead()) == "first; a"


def test_dead_servers_stop_the_run_or_with_fallback_are_said_once(tmp_path, monkeypatch):
    strict = _local(tmp_path, monkeypatch, [_Server("killed by SIGILL; last lines")])
    with pytest.raises(FatalSummaryError, match=r"^killed by SIGILL; last lines$"):
        strict._check_alive()
    told: list[str] = []
    loose = _local(tmp_path, monkeypatch, [_Server("killed by SIGILL; last lines")],
                   allow_fallback=True)
    loose.notify = told.append
    for _ in range(2):
        with pytest.raises(SummaryFailed) as err:
            loose._check_alive()
        assert err.value.reason == "killed by SIGILL"
    assert told == ["killed by SIGILL; last lines\n(--allow-fallback: every row left gets "
                    "the extractive fallback)"]


def test_a_dropped_request_waits_for_the_server_to_be_seen_dead(tmp_path, monkeypatch):
    server = _Server("killed by SIGILL; log", polls=3)
    summarizer = _local(tmp_path, monkeypatch, [server])
    started = time.monotonic()
    asyncio.run(summarizer._settle(wait=30))
    assert time.monotonic() - started < 10 and server.seen == 4
    server = _Server("killed by SIGILL; log", polls=3)
    dying = _local(tmp_path, monkeypatch, [server])
    with pytest.raises(FatalSummaryError, match=r"^killed by SIGILL; log$"):
        asyncio.run(dying.summarize(SummaryRequest([], 0, 10)))
    living = _local(tmp_path, monkeypatch, [_Server(None)])
    with pytest.raises(SummaryFailed, match="connection dropped"):
        asyncio.run(living.summarize(SummaryRequest([], 0, 10)))


# --- dialects/tool_pairs.py --------------------------------------------------------------

def test_calls_counted_per_turn():
    assert calls_in({"from": "human", "value": "<tool_call>{}</tool_call>"}) == 0
    assert calls_in({"from": "gpt", "value": "[not json", CALL_TURN: True}) == 1
    assert calls_in({"from": "gpt", "value": '[{"a": 1}, {"b": 2}]', CALL_TURN: True}) == 2


def test_an_unanswered_call_says_whether_the_row_ends_with_its_results():
    call2 = {"from": "gpt", "value": "<tool_call>a</tool_call><tool_call>b</tool_call>"}
    tool = {"from": "tool", "value": "<tool_response>x</tool_response>"}
    human = {"from": "human", "value": "go"}
    assert list(unanswered_calls([human, call2, tool])) == [Unanswered(1, 2, 1, last=True)]
    found = list(unanswered_calls([human, call2, tool, human]))
    assert found == [Unanswered(1, 2, 1, last=False)]
    with pytest.raises(FrozenInstanceError):
        found[0].calls = 3  # type: ignore[misc]


# --- dialects/messages.py, dialects/sharegpt.py ------------------------------------------

def test_arguments_that_are_not_json_are_named_without_the_parsers_words():
    dialect = dialect_for(CompressionConfig(), "openai")
    row = {"messages": [{"role": "user", "content": "hi"},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": "c1", "type": "function",
                             "function": {"name": "f", "arguments": "{bad"}}]}]}
    with pytest.raises(RowError) as err:
        dialect.turns(row)
    assert str(err.value) == "messages[1].tool_calls[0].function.arguments is not valid JSON"


def test_variant_tags_hash_and_show_only_what_they_are_given():
    tags = ShareGPTTags()
    assert hash(tags) == hash(ShareGPTTags())
    assert "roles=" not in repr(tags)
    variant = dialect_for(CompressionConfig(), "sharegpt-variant")
    turns = {"conversations": [{"from": "user", "value": "abc"}]}
    assert variant.text_chars(turns) == 3
    assert variant.text_chars({**turns, "system": "xy"}) == 5


# --- core/actions.py ---------------------------------------------------------------------

def test_an_action_claims_object_is_four_words_after_its_articles():
    assert list(action_claims("Deleted the cache.")) == [
        ("Deleted the cache", "delete", "cache")]
    assert list(action_claims("Deleted all the old staging database copies now")) == [
        ("Deleted all the old staging database copies", "delete", "copies")]
    assert list(action_claims("Deleted the")) == []
    assert list(action_claims("Deleted cache and logs")) == [
        ("Deleted cache", "delete", "cache")]


def test_a_negation_counts_within_the_three_words_before_the_verb():
    assert list(action_claims("Not deleted the cache")) == []
    assert list(action_claims("Not a b c deleted the cache")) == [
        ("deleted the cache", "delete", "cache")]
    assert list(action_claims("we never quietly deleted the cache")) == []


def test_a_head_noun_is_matched_in_its_singular_and_plural():
    assert _noun_forms("databases") == {"databases", "databasess", "databaseses",
                                        "database", "databas"}
    assert _noun_forms("box") == {"box", "boxs", "boxes"}
    check = ActionCheck("rm -rf the old database")
    assert check.stated("delete", "databases") and not check.stated("delete", "tables")
    assert check.invented("Deleted the databases. Deleted the tables.") == [
        "Deleted the tables"]


# --- core/extractive.py ------------------------------------------------------------------

def test_tool_output_is_read_as_a_terminal_showed_it(counter):
    assert extractive.shown("abc\x1b[31mred\x1b[0m") == "abcred"
    assert extractive.shown("⟪not a notation") == "⟪not a notation"
    assert extractive.shown("⟪×3⟫ same\n") == "same\nsame\nsame\n"  # distilled, read back
    assert extractive._first_last_lines(" \n\t\n") == ""
    assert extractive._strings({"a": 1, "b": None, "c": ["x", 2.5]}, "raw") == [
        "1", "x", "2.5"]
    turns = [{"from": "human", "value": "build it"},
             {"from": "gpt", "value": "<tool_call>\n{\"name\": \"make\", \"arguments\": {}}"
                                      "\n</tool_call>"},
             {"from": "tool", "value": "<tool_response>\n\x1b[1msrc/native/image.c\x1b[0m: "
                                       "\x1b[35mwarning\x1b[0m: unused x\n</tool_response>"},
             {"from": "gpt", "value": "<tool_call>\n{\"name\": \"fetch\", \"arguments\": {}}"
                                      "\n</tool_call>"},
             {"from": "tool", "value": "<tool_response>\nget 10%\rget 50%\rget 100%\ndone\n"
                                       "</tool_response>"}]
    summary = asyncio.run(ExtractiveSummarizer(counter.count).summarize(
        SummaryRequest(turns, first_index=1, target_tokens=200)))
    assert "src/native/image.c" in summary.text
    assert "\x1b" not in summary.text and "1msrc" not in summary.text
    assert "35m" not in summary.text
    # A progress line redrawn with carriage returns is its last drawing.
    assert "turn 5: get 100% | done" in summary.text and "10%" not in summary.text


# --- engine/job.py: what a local run checks and builds before it starts ------------------

def _job_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(2)))
    return tmp_path


WINDOWS = ("--output-mode", "windows", "--target-max-tokens", "200",
           "--summary-target-tokens", "40", "--summarizer", "extractive", "-q", "--no-cache")


def test_summarizer_rows_never_go_to_an_input_nor_come_from_ray(tmp_path, monkeypatch):
    home = _job_home(tmp_path, monkeypatch)
    onto_input = invoke_cli("compress", "in.jsonl", "-o", "out.jsonl", *WINDOWS,
                            "--emit-summarizer-rows", "in.jsonl", cwd=home)
    assert onto_input.returncode == 2
    assert "--emit-summarizer-rows in.jsonl is an input or another output of this run; " \
           "name another file" in onto_input.stderr
    config = CompressionConfig(output_mode="windows", engine="ray")
    with pytest.raises(ConfigError, match="runs on the local engine"):
        inputs = [InputFile(home / "in.jsonl", "jsonl")]
        check_summarizer_rows(RunOptions(summarizer_rows=str(home / "s.jsonl")), config,
                              inputs, plan_layout("in.jsonl", inputs, str(home / "o.jsonl"),
                                                  config, single_file=True))


def test_a_local_run_builds_the_configured_summarizer(tmp_path, monkeypatch):
    home = _job_home(tmp_path, monkeypatch)
    run = invoke_cli("compress", "in.jsonl", "-o", "out.jsonl", *WINDOWS, cwd=home)
    assert run.returncode in (0, 1), run.stderr
    metrics = json.loads((home / "out_metrics.json").read_text())
    assert metrics["summarization"]["summaries_by_source"]["extractive"] == 4


def test_a_library_run_makes_its_own_summarizer_and_reads_hermes_rows(tmp_path):
    """`compress_dataset` without a summarizer or a dialect: the configured summarizer is
    made, and a named Hermes file is read as Hermes ShareGPT."""
    rows = [{"id": f"h{i}", "conversations": [
        {"from": "system", "value": "You are an agent."},
        {"from": "human", "value": f"Fix test {i}."},
        {"from": "gpt", "value": "Reading the test first. " * 5},
        *[{"from": "human" if k % 2 == 0 else "gpt",
           "value": f"step {k}: " + "FAILED t.py - assert 1 == 2 " * 20} for k in range(4)],
        *[{"from": "human" if k % 2 == 0 else "gpt", "value": f"end {k}"} for k in range(4)]]}
        for i in range(2)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = CompressionConfig(target_max_tokens=200, summary_target_tokens=40,
                               summarizer="extractive", cache_enabled=False,
                               dataset_format="sharegpt")
    compress_dataset(str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), config,
                     options=RunOptions(quiet=True))
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == ["h0", "h1"]
    assert all(r["compression_metrics"]["was_compressed"] for r in out)


# --- engine/ours.py: recognising the files this tool wrote --------------------------------

def test_a_files_head_is_read_to_the_byte(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(bytes(range(256)) * (9 << 10))  # 2.25 MiB
    assert read_head(big, (1 << 20) + 1) == big.read_bytes()[:(1 << 20) + 1]
    assert read_head(big) == big.read_bytes()
    assert read_head(tmp_path) is None and read_head(tmp_path / "missing") is None


def test_a_page_is_ours_when_its_marker_ends_within_4096_bytes(tmp_path):
    marker = HTML_MARKER.encode()
    page = tmp_path / "p.html"
    page.write_bytes(b" " * (4096 - len(marker)) + marker)
    assert is_report_page(page)
    page.write_bytes(b" " * (4097 - len(marker)) + marker)
    assert not is_report_page(page)


def _json_of_size(path: Path, data: dict, size: int) -> None:
    text = json.dumps(data).encode()
    path.write_bytes(text[:-1] + b" " * (size - len(text)) + b"}")


def test_analysis_and_manifest_files_are_read_whole_within_4_mib(tmp_path):
    keys = dict.fromkeys(["input", "summarizer", "rows", "rows_rejected", "tokens",
                          "histogram", "targets"], 0)
    analysis = tmp_path / "a.json"
    _json_of_size(analysis, keys, 4 << 20)
    assert is_analysis(analysis)
    _json_of_size(analysis, keys, (4 << 20) + 1)
    assert not is_analysis(analysis)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"format": MANIFEST_FORMAT,
                                    "files": ["name", {"name": "a.jsonl"}, {"x": 1}]}))
    assert is_manifest(manifest) and manifest_files(manifest) == {"a.jsonl"}


# --- inspect/strategies.py: the comparison analyze prints ---------------------------------

def test_with_no_row_over_there_is_no_best_strategy():
    comparison = StrategyComparison(exact=True)
    assert comparison.best() is None
    assert comparison.verdict() == "no row is over the target: no strategy has anything to do"
    assert "_compressors" not in repr(comparison)


def test_the_kept_share_counts_to_four_places_and_then_fewer_summaries_win():
    assert StrategyFigures(assistant_before=3, assistant_after=2).to_dict()[
        "assistant_tokens_kept"] == 0.6667
    comparison = StrategyComparison(exact=True)
    comparison.figures = {
        "summarize": StrategyFigures(rows=1, under=1, summaries=1, assistant_before=100_000,
                                     assistant_after=66_668),
        "mask": StrategyFigures(rows=1, under=1, summaries=0, assistant_before=100_000,
                                assistant_after=66_667),
        "hybrid": StrategyFigures(rows=1, under=0, summaries=0, assistant_before=1,
                                  assistant_after=1)}
    assert comparison.best() == "mask"


def test_a_row_exactly_at_the_target_is_not_compared(counter):
    config = CompressionConfig(target_max_tokens=200, summary_target_tokens=40)
    base = TrajectoryCompressor(config, summarizer=ExtractiveSummarizer(counter.count),
                                counter=counter)
    turns = [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]
    comparison = StrategyComparison(exact=True)
    asyncio.run(comparison.add(base, CountedRow({}, turns, [120, 80], ShareGPT())))
    assert comparison.rows == 0
