"""Token counting: the bundled tokenizer offline, batching, the memo, clear failures."""

from __future__ import annotations

import pytest

from trajectory_compressor.core.errors import TokenizerError
from trajectory_compressor.counting.tokens import (
    TokenCounter,
    bundled_tokenizer_dir,
    load_tokenizer,
)


def test_counts_match_the_tokenizer_without_special_tokens(counter):
    texts = ["hello world", "", "你好，世界", "def f(x):\n    return x + 1\n", "hello world"]
    expected = [len(counter.tokenizer.encode(t, add_special_tokens=False)) if t else 0
                for t in texts]
    assert counter.count_many(texts) == expected
    assert expected[0] > 0 and expected[1] == 0


def test_bundled_counts_equal_the_transformers_tokenizer(counter, sample_jsonl):
    import json

    texts = [t["value"] for line in sample_jsonl.read_text().splitlines()[:3]
             for t in json.loads(line)["conversations"]]
    via_transformers = load_tokenizer()
    expected = [len(via_transformers.encode(t, add_special_tokens=False)) for t in texts]
    assert counter.count_many(texts) == expected


def test_memo_skips_texts_already_counted():
    c = TokenCounter(load_tokenizer(), memo_size=4)
    first = c.count_many(["a b c", "d e f", "a b c"])
    assert c.encoded_texts == 3  # both copies in one batch are new
    assert c.count_many(["a b c", "d e f"]) == first[:2]
    assert c.encoded_texts == 3 and c.memo_hits >= 2
    for i in range(20):
        c.count(f"text number {i}")
    assert c.memo_entries <= 2 * 4 + 1


def test_trajectory_batching_returns_per_turn_lists(counter):
    trajs = [[{"from": "human", "value": "one two"}], [],
             [{"from": "gpt", "value": "x"}, {"from": "tool", "value": "y z"}]]
    out = counter.count_trajectories(trajs)
    assert [len(x) for x in out] == [1, 0, 2]
    assert out[2] == counter.count_many(["x", "y z"])


def test_bundled_files_are_found_without_importing_the_package():
    assert (bundled_tokenizer_dir() / "tokenizer.json").exists()


def test_unknown_hub_name_fails_offline_with_the_choices(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(TokenizerError) as info:
        load_tokenizer("no-such-org/no-such-tokenizer")
    message = str(info.value)
    assert "offline" in message and "deepseek-v4" in message and "local folder" in message


def test_local_folder_tokenizer(tmp_path):
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(bundled_tokenizer_dir() / name, tmp_path / name)
    c = TokenCounter.load(str(tmp_path))
    assert c.count("hello world") == 2
