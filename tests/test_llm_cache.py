"""`SummaryCache`: persistence, keys, and a clear error for an unusable file."""

from __future__ import annotations

import sqlite3

import pytest

from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.summary import SummaryUsage
from trajectory_compressor.summarizers.cache import (
    COMMIT_EVERY,
    CacheEntry,
    SummaryCache,
    cache_key,
    origin_digest,
)

MESSAGES = [{"role": "system", "content": "rules"}, {"role": "user", "content": "turns"}]


def test_summaries_survive_a_reopen(tmp_path):
    path = tmp_path / "sub" / "c.sqlite"
    cache = SummaryCache(path)
    for i in range(COMMIT_EVERY + 3):
        cache.put(f"k{i}", "m", f"summary {i}")
    cache.close()
    again = SummaryCache(path)
    assert again.get("k0") == "summary 0" and again.get(f"k{COMMIT_EVERY + 2}") is not None
    assert again.get("nope") is None and (again.hits, again.misses) == (2, 1)
    assert len(again) == COMMIT_EVERY + 3
    again.close()
    columns = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(summaries)")]
    assert columns == ["key", "model", "summary", "created", "info"]


def test_an_entry_keeps_how_it_was_obtained_and_an_old_file_is_upgraded(tmp_path):
    path = tmp_path / "c.sqlite"
    old = sqlite3.connect(path)  # the layout before `info`, with one entry
    old.execute("CREATE TABLE summaries (key TEXT PRIMARY KEY, model TEXT NOT NULL, summary "
                "TEXT NOT NULL, created REAL NOT NULL) WITHOUT ROWID")
    old.execute("INSERT INTO summaries VALUES ('old', 'm', 'an old summary', 0)")
    old.commit()
    old.close()
    cache = SummaryCache(path)
    entry = cache.get_entry("old")
    assert entry == CacheEntry("an old summary", origin=None, usage=None, truncated=False)
    usage = SummaryUsage(api_calls=2, errors=1, retries=1, prompt_tokens=300,
                         completion_tokens=40, errors_by_kind={"http": 1})
    cache.put("new", "m", "a new summary", origin=origin_digest("run row 7"), usage=usage,
              truncated=True)
    cache.close()
    again = SummaryCache(path)
    new = again.get_entry("new")
    assert new == CacheEntry("a new summary", origin_digest("run row 7"), usage, True)
    assert "run row 7" not in path.read_bytes().decode("latin-1")  # only its digest
    assert again.get("old") == "an old summary"
    again.close()


def test_keys_depend_on_model_prompt_and_parameters_only():
    base = cache_key("m", MESSAGES, 600, 0.3)
    assert base == cache_key("m", [dict(m) for m in MESSAGES], 600, 0.3)
    changed = [cache_key("m2", MESSAGES, 600, 0.3), cache_key("m", MESSAGES, 601, 0.3),
               cache_key("m", MESSAGES, 600, 0.4),
               cache_key("m", [MESSAGES[0], {"role": "user", "content": "turns!"}], 600, 0.3)]
    assert base not in changed and len(set(changed)) == 4


@pytest.mark.parametrize("kind", ["not a database", "a folder"])
def test_an_unusable_file_is_one_clear_error(tmp_path, kind):
    path = tmp_path / "c.sqlite"
    if kind == "a folder":
        path.mkdir()
    else:
        path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match=r"cannot use the summary cache .*--no-cache"):
        SummaryCache(path)


def test_a_cache_filled_with_another_tokenizer_or_counting_mode_is_refused(tmp_path):
    from trajectory_compressor.core.errors import ConfigError

    path = tmp_path / "c.sqlite"
    turns = {"name": "deepseek-v4", "files_sha256": "aaaa", "counting": "turns"}
    template = {**turns, "counting": "chat_template", "template_sha256": "bbbb"}
    cache = SummaryCache(path, turns)
    cache.put("k", "m", "[CONTEXT SUMMARY]: s")
    cache.close()
    again = SummaryCache(path, turns)  # the same identity: reopened, entries kept
    assert again.get("k") == "[CONTEXT SUMMARY]: s"
    again.close()
    with pytest.raises(ConfigError) as info:
        SummaryCache(path, template)
    message = str(info.value)
    assert "counting turns" in message and "counting chat_template" in message
    assert "--cache-path" in message


def test_summaries_are_committed_every_commit_every_puts(tmp_path):
    # Durable in batches (README: a killed run keeps what the cache committed): another
    # connection sees nothing until the batch is full, then the whole batch.
    path = tmp_path / "c.sqlite"
    cache = SummaryCache(path)

    def committed() -> int:
        with sqlite3.connect(path) as other:
            return int(other.execute("SELECT COUNT(*) FROM summaries").fetchone()[0])

    for i in range(COMMIT_EVERY - 1):
        cache.put(f"k{i}", "m", f"summary {i}")
    assert committed() == 0
    cache.put("last", "m", "summary")
    assert committed() == COMMIT_EVERY
    cache.put("next", "m", "summary")
    assert committed() == COMMIT_EVERY  # a new batch begins
    assert cache.get_entry("nope") is None and (cache.hits, cache.misses) == (0, 1)
    cache.close()
    assert committed() == COMMIT_EVERY + 1
