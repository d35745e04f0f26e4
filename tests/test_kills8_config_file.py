"""`app/config_file.config_keys`: the ``section.key`` names a config file sets, which
`validate --config` uses to keep the run's counting mode and template unless the file sets
them (issue 40 items 1 and 8). A file that cannot be read as a mapping sets none."""

from __future__ import annotations

import dataclasses

import pytest

from trajectory_compressor.app.config_file import choose_config, config_keys


def test_config_keys_names_each_key_of_each_section(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("compression:\n  target_max_tokens: 3000\n  summary_target_tokens: 200\n"
                    "tokenizer:\n  counting: turns\nsummarization: null\n"
                    "protected_turns: [1, 2]\n", encoding="utf-8")
    assert config_keys(path) == frozenset({"compression.target_max_tokens",
                                           "compression.summary_target_tokens",
                                           "tokenizer.counting"})


def test_config_keys_of_a_file_that_is_no_mapping_are_none(tmp_path):
    path = tmp_path / "c.yaml"
    for text in ("", "- a\n- b\n", "just text\n", "a: [unclosed\n"):
        path.write_text(text, encoding="utf-8")
        assert config_keys(path) == frozenset(), text
    assert config_keys(tmp_path / "missing.yaml") == frozenset()
    path.write_bytes(b"compression:\n  target_max_tokens: \xff\n")
    assert config_keys(path) == frozenset()


def test_a_config_choice_is_frozen():
    choice = choose_config(None, no_config=True, environ={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.origin = "elsewhere"  # type: ignore[misc]
