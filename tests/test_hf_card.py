"""The dataset card written beside a Hugging Face dataset's output (`formats/hf_card.py`).

The expected header is the ``configs`` metadata of the Hugging Face Hub's dataset card
documentation ("Manual configuration"): ``configs: - config_name: default data_files:``
then one ``- split: NAME`` / ``path: GLOB`` pair per split, which `datasets` reads
before guessing splits from file names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.formats.hf_card import MARK, card_path, check_card, dataset_card

SHARDS = [Path("out/train-00000-of-00002.parquet"), Path("out/train-00001-of-00002.parquet"),
          Path("out/holdout-00000-of-00001.jsonl")]


def test_the_card_goes_in_the_one_folder_of_split_shards():
    assert card_path(SHARDS) == Path("out/README.md")
    assert card_path([]) is None
    assert card_path([*SHARDS, Path("elsewhere/test-00000-of-00001.parquet")]) is None
    assert card_path([*SHARDS, Path("out/notes.parquet")]) is None  # not a shard name


def test_the_card_lists_each_split_once_in_order_with_its_files():
    assert dataset_card(SHARDS).decode("utf-8") == (
        "---\n"
        "configs:\n"
        "- config_name: default\n"
        "  data_files:\n"
        "  - split: train\n"
        "    path: train-*-of-*\n"
        "  - split: holdout\n"
        "    path: holdout-*-of-*\n"
        "---\n"
        f"{MARK}\n")


def test_only_a_card_this_tool_wrote_is_replaced(tmp_path):
    card = tmp_path / "README.md"
    check_card(card)  # none yet
    card.write_bytes(dataset_card(SHARDS))
    check_card(card)  # ours
    card.write_text("# My dataset\n\nHand-written notes.\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="exists and was not written by trajectory-compressor"):
        check_card(card)
    card.unlink()
    card.mkdir()  # unreadable as a file: said, not a traceback
    with pytest.raises(ConfigError, match=f"cannot read {card}"):
        check_card(card)
