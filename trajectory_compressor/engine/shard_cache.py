"""The summary cache of a sharded run: one writer per file (§6, §13).

SQLite takes one writer at a time and its locks are unreliable on network file systems,
so workers never write the run's cache. Each shard writes its new summaries to its own
file in its folder (kept across attempts: what a killed attempt paid for is found again),
and looks summaries up there first, then in the run's cache opened read-only. The driver
alone writes the run's cache: it merges each finished shard's file into it
(`merge_into`), so later shards, reruns and resumes find those summaries.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from ..summarizers.cache import CacheEntry, SummaryCache

_SIDE_FILES = ("-wal", "-shm", "-journal")


class _ReadOnly(SummaryCache):
    """A `SummaryCache` file opened read-only (lookups only)."""

    def __init__(self, path: Path) -> None:  # no super().__init__: it would write the file
        self.path = path
        self.hits = self.misses = self._pending = 0
        self._last_commit = time.monotonic()
        self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        self._db.execute("SELECT key, summary, info FROM summaries LIMIT 1").fetchall()


class ShardCache(SummaryCache):
    """A shard's own cache file over the run's cache ``base`` (read-only; absent on a
    worker that cannot see it, which then only misses)."""

    def __init__(self, path: Path, base: Path) -> None:
        super().__init__(path)
        self.base: SummaryCache | None = None
        if base.is_file():
            with contextlib.suppress(sqlite3.Error, OSError):
                self.base = _ReadOnly(base)

    def get(self, key: str) -> str | None:
        entry = self.get_entry(key)
        return None if entry is None else entry.text

    def get_entry(self, key: str) -> CacheEntry | None:
        entry = super().get_entry(key)
        if entry is None and self.base is not None:
            try:
                entry = self.base.get_entry(key)
            except sqlite3.Error:  # the driver is merging: a miss costs one request
                entry = None
        return entry

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.base is not None:
                self.base.close()


def merge_into(cache: Path, shard_file: Path) -> int:
    """Copy the entries of ``shard_file`` into the run's ``cache`` (creating it) and delete
    the shard's file; returns how many entries it held. Safe to repeat."""
    if not shard_file.is_file():
        return 0
    SummaryCache(cache).close()  # the table exists, in the current schema
    db = sqlite3.connect(cache, timeout=60)
    try:
        db.execute("ATTACH DATABASE ? AS shard", (str(shard_file),))
        try:
            n = db.execute("SELECT COUNT(*) FROM shard.summaries").fetchone()[0]
            db.execute("INSERT OR REPLACE INTO main.summaries (key, model, summary, created, "
                       "info) SELECT key, model, summary, created, info FROM shard.summaries")
            db.commit()
        except sqlite3.OperationalError:  # an attempt that died before creating its table
            n = 0
        db.execute("DETACH DATABASE shard")
    finally:
        db.close()
    for side in ("", *_SIDE_FILES):
        shard_file.with_name(shard_file.name + side).unlink(missing_ok=True)
    return int(n)
