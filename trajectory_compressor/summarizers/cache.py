"""`SummaryCache`: finished summaries in an SQLite file, keyed by what produced them (§6).

The key is a hash of the model, the exact messages and the generation parameters, so a
rerun, or a duplicate region, costs no request, and a change of prompt, model or
settings misses. Only finished summaries are stored (already trimmed, prefixed,
scrubbed of the run's keys and redacted, cut to their budget); never a prompt, a header,
a URL or a key. Beside each summary, ``info`` records how it was obtained (its usage,
whether it was cut, and a digest naming the row and run that asked for it), so that a
resumed run reports a summary its interrupted part obtained as an uninterrupted run would.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..core.errors import ConfigError
from ..core.summary import SummaryUsage
from .temperature import request_temperature

SCHEMA_VERSION = 1
COMMIT_EVERY = 64
COMMIT_SECONDS = 2.0


def cache_key(
    model: str,
    messages: Sequence[dict[str, str]],
    max_tokens: int,
    temperature: float | None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The cache key of one summarization request (independent of the endpoint's URL).

    ``options`` (further request fields such as stop sequences) count when given; without
    them the key is what it always was, so existing cache files stay valid. The
    temperature counts as sent: none for a model that takes none.
    """
    parts: list[Any] = [SCHEMA_VERSION, model, list(messages), max_tokens,
                        request_temperature(model, temperature)]
    if options:
        parts.append(dict(sorted(options.items())))
    payload = orjson.dumps(parts)
    return hashlib.blake2b(payload, digest_size=20).hexdigest()


def origin_digest(origin: str) -> str:
    """What the cache stores of a request's ``origin`` (no paths in the file)."""
    return hashlib.blake2b(origin.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass
class CacheEntry:
    """A stored summary and how it was obtained (empty for entries of older versions)."""

    text: str
    origin: str | None = None  # `origin_digest` of the request that paid for it
    usage: SummaryUsage | None = None
    truncated: bool = False


class SummaryCache:
    """A persistent ``key -> summary`` map; writes are batched into few transactions."""

    def __init__(self, path: str | Path, identity: dict[str, Any] | None = None) -> None:
        """Open (or create) the cache at ``path``. ``identity`` is the tokenizer a run
        counts with (`counting.identity`): a cache filled under another one is refused,
        since its summaries were cut to budgets counted differently."""
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self._pending = 0
        self._last_commit = time.monotonic()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level="DEFERRED")
            self._check_ours()
            # WAL with synchronous=NORMAL makes a commit cheap; losing the last few
            # entries in a power cut only costs a few repeated requests.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS summaries (key TEXT PRIMARY KEY, model TEXT NOT "
                "NULL, summary TEXT NOT NULL, created REAL NOT NULL) WITHOUT ROWID"
            )
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(summaries)")}
            if "info" not in columns:  # a file from before `info` existed
                self._db.execute("ALTER TABLE summaries ADD COLUMN info TEXT")
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, "
                             "value TEXT NOT NULL) WITHOUT ROWID")
            if identity is not None:
                self._check_identity(identity)
            self._db.commit()
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError(
                f"cannot use the summary cache {self.path}: {exc}; choose another file with "
                "--cache-path or turn the cache off with --no-cache"
            ) from None

    def _check_ours(self) -> None:
        """`ConfigError` when the file is another program's SQLite database (tables, none
        of them ``summaries``): a cache is never written into it (issue 36)."""
        tables = [r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 6")]
        if tables and "summaries" not in tables:
            self._db.close()
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise ConfigError(f"the summary cache {self.path} is an SQLite database of "
                              f"something else (tables {shown}); nothing was written to it; "
                              "choose another file with --cache-path or turn the cache off "
                              "with --no-cache")

    def _check_identity(self, identity: dict[str, Any]) -> None:
        mine = json.dumps(identity, sort_keys=True)
        row = self._db.execute("SELECT value FROM meta WHERE name = 'tokenizer'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('tokenizer', ?)", (mine,))
            return
        if row[0] != mine:
            theirs = json.loads(row[0])
            raise ConfigError(
                f"the summary cache {self.path} was filled by a run counting with "
                f"{_describe(theirs)}; this run counts with {_describe(identity)}. Give "
                "this run its own --cache-path, or --no-cache")

    def get(self, key: str) -> str | None:
        """The summary stored under ``key``, if any."""
        row = self._db.execute("SELECT summary FROM summaries WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return str(row[0])

    def get_entry(self, key: str) -> CacheEntry | None:
        """The entry stored under ``key``, with how it was obtained, if any."""
        row = self._db.execute("SELECT summary, info FROM summaries WHERE key = ?",
                               (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        entry = CacheEntry(str(row[0]))
        try:
            info = orjson.loads(row[1]) if row[1] else {}
        except orjson.JSONDecodeError:
            info = {}
        if isinstance(info, dict):
            entry.origin = info.get("origin") if isinstance(info.get("origin"), str) else None
            usage = info.get("usage")
            entry.usage = SummaryUsage.from_dict(usage) if isinstance(usage, dict) else None
            entry.truncated = info.get("truncated") is True
        return entry

    def put(
        self,
        key: str,
        model: str,
        summary: str,
        *,
        origin: str | None = None,
        usage: SummaryUsage | None = None,
        truncated: bool = False,
    ) -> None:
        """Store a finished summary (committed in batches, and on `close`) with how it was
        obtained: the `origin_digest` of the request, its usage, whether it was cut."""
        info = orjson.dumps({"origin": origin, "truncated": truncated,
                             "usage": usage.to_dict() if usage is not None else None})
        self._db.execute(
            "INSERT OR REPLACE INTO summaries (key, model, summary, created, info) "
            "VALUES (?, ?, ?, ?, ?)",
            (key, model, summary, time.time(), info.decode()),
        )
        self._pending += 1
        now = time.monotonic()
        if self._pending >= COMMIT_EVERY or now - self._last_commit >= COMMIT_SECONDS:
            self.commit()

    def commit(self) -> None:
        """Make the stored summaries durable."""
        if self._pending:
            self._db.commit()
            self._pending = 0
        self._last_commit = time.monotonic()

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM summaries").fetchone()[0])

    def close(self) -> None:
        """Commit and close the file."""
        try:
            self.commit()
        finally:
            self._db.close()


def _describe(identity: dict[str, Any]) -> str:
    text = f"tokenizer {identity.get('name')!r} (files {identity.get('files_sha256')}), " \
           f"counting {identity.get('counting')}"
    if identity.get("template_sha256"):
        text += f", template {identity['template_sha256']}"
    return text
