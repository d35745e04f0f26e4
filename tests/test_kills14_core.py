"""Tests written to kill mutants left by the coverage-guided pass over modules whose code
changed since their last whole run (issue 40, item 8): the strict YAML loader, symbolic
link loops, and the others named in each section. In process, on hand-made input.
"""

from __future__ import annotations

import errno
import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.plan import (
    ALTERNATING,
    MIDDLE_EXHAUSTED,
    NO_CLEAN_CUT,
    NO_MIDDLE,
    PROTECTED_HEAD,
    PROTECTED_TAIL,
    Region,
    plan_trajectory,
    snap_boundary,
)
from trajectory_compressor.core.yaml_strict import load_config_yaml
from trajectory_compressor.formats import links

ROLE = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}


def _roles(spec: str) -> list[str]:
    return [ROLE[c] for c in spec]


# --- core/plan.py: the edges of each reason ----------------------------------------------

def test_a_middle_of_tool_turns_before_a_tool_turn_has_no_clean_cut_for_alternating_rows():
    """Middle [3, 7) is all tool turns and the protected turn after it is a tool turn too:
    no gpt turn to start at, so no cut (not a region of nothing)."""
    config = CompressionConfig(target_max_tokens=500, summary_target_tokens=50,
                               protect_first_tool=False, protect_last_n_turns=1)
    plan = plan_trajectory(_roles("SHGTTTTT"), [100] * 8, config, ALTERNATING)
    assert (plan.action, plan.reason, plan.region, plan.region_tokens) == (
        "over_limit", NO_CLEAN_CUT, None, 0)


def test_a_middle_that_snaps_to_the_end_of_the_row_is_no_middle():
    """Nothing protected at the end: the middle runs to the row's end, and a start snapped
    forward to the end leaves nothing (the end itself is not a turn to look at)."""
    config = CompressionConfig(target_max_tokens=500, summary_target_tokens=50,
                               protect_first_tool=False, protect_last_n_turns=0)
    plan = plan_trajectory(_roles("SHGTTTTT"), [100] * 8, config, ALTERNATING)
    assert (plan.action, plan.reason, plan.middle) == ("over_limit", NO_MIDDLE, Region(3, 8))


def test_a_region_that_snaps_back_to_its_start_is_no_clean_cut_not_a_small_region():
    config = CompressionConfig(target_max_tokens=500, summary_target_tokens=50,
                               protect_first_tool=False, protect_last_n_turns=1)
    plan = plan_trajectory(_roles("SHGGTTTT"), [100] * 8, config, ALTERNATING)
    assert (plan.action, plan.reason, plan.region_tokens) == ("over_limit", NO_CLEAN_CUT, 0)


def test_a_projection_exactly_at_the_target_fits():
    """Needed 300 = 1,200 - 1,000 + 100, reached at turn 5 (a clean cut before turn 6):
    1,200 - 300 + 100 = 1,000 tokens, the target itself."""
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100)
    tokens = [100] * 4 + [50, 250, 100, 100] + [75] * 4
    plan = plan_trajectory(_roles("SHGTGTGTGTGT"), tokens, config)
    assert (plan.action, plan.region, plan.reason) == ("compress", Region(4, 6), "")
    assert plan.projected_tokens(100) == 1000


def _short_region(head: int, tail: int, middle: list[int], summary: int):
    """Middle [4, 8) is G T G T and the first protected tail turn a tool turn: a region
    that would run to the middle's end snaps back to turn 6."""
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=summary)
    tokens = [head // 4] * 4 + middle + [tail // 4] * 4
    return plan_trajectory(_roles("SHGTGTGTTGTG"), tokens, config)


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
    assert snap_boundary(_roles("GTTT"), 2, 1, 3) == 1


def test_the_assistant_share_kept_without_a_region_or_a_count():
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100)
    skip = plan_trajectory(_roles("SHG"), [10, 10, 10], config)
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
