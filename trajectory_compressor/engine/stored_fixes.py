""""What would fix it", computed once by `compress` and stored with the run (issue 40 item
2): `report` and `report --html` read it back instead of re-planning every row over the
limit (which cost several times the run itself).

`compress` keeps the first `STORED_ROWS` rows still over the limit as it planned
them (`OverRows`), and at the end of the run searches the remedies for them once
(`find_fixes`, bounded as `analyze` is). The table goes into the metrics file's
``remedies`` section with the settings it was computed under and the seconds it took.
A stored table is for reading: its rows keep their figures, not their turns.
"""

from __future__ import annotations

import time
from typing import Any

from ..core.config import CompressionConfig
from ..core.extractive import ExtractiveSummarizer
from ..core.remedies import Entry, Fixes, Remedy
from ..dialects import SHAREGPT
from .compressor import TrajectoryCompressor
from .projection import CountedRow
from .replan import OverRow, OverRows, WhatWouldFix, find_fixes

VERSION = 1
# Rows a run keeps for its table: the first ones over the limit, in input order (fewer than
# `report` re-plans, `replan.MAX_ROWS`: the search costs about a second of CPU a row, and
# every run pays it).
STORED_ROWS = 20
# The rows of a stored table: their figures only (see the module's docstring).
_NO_ROW = CountedRow({}, [], [], SHAREGPT)


async def compute_fixes(compressor: TrajectoryCompressor, over: OverRows) -> dict[str, Any]:
    """The metrics file's ``remedies`` section for ``over`` (rows a run left over the
    limit), searched with the run's settings: extractive summaries built (exact) when the
    run was extractive, else projected, as `report` would."""
    config = compressor.config
    started = time.process_time()
    replanner = TrajectoryCompressor(config, ExtractiveSummarizer(compressor.counter.count),
                                     compressor.counter, compressor.dialect)
    async with replanner:
        fixes = await find_fixes(replanner, over, exact=config.summarizer == "extractive")
    return {"version": VERSION, "settings": config.run_settings(),
            "cpu_seconds": round(time.process_time() - started, 3),
            "table": to_stored(fixes)}


def stored_fixes(metrics: dict[str, Any] | None,
                 config: CompressionConfig) -> tuple[WhatWouldFix | None, str]:
    """The table the run stored, when it was computed under ``config``'s settings, and
    otherwise None with why (a sentence for the report)."""
    section = (metrics or {}).get("remedies")
    if not isinstance(section, dict):
        return None, "this run stored no table (an older version, the Ray engine or a resumed run)"
    if section.get("version") != VERSION:
        return None, "its stored table is of another version"
    if section.get("settings") != config.run_settings():
        return None, "the settings differ from those the run stored its table under"
    try:
        return from_stored(section["table"]), ""
    except (KeyError, TypeError, ValueError, AttributeError):
        return None, "its stored table is damaged"


def _remedy(r: Remedy) -> dict[str, Any]:
    return {"family": r.family, "flags": list(r.flags),
            "changes": [[name, value] for name, value in r.changes]}


def _entry(e: Entry | None) -> dict[str, Any] | None:
    return None if e is None else {"remedies": [_remedy(r) for r in e.remedies],
                                   "fixed": sorted(e.fixed)}


def to_stored(w: WhatWouldFix) -> dict[str, Any]:
    """``w`` as JSON data `from_stored` reads back."""
    over, fixes = w.over, w.fixes
    return {
        "exact": w.exact, "summary_target": w.summary_target, "target": w.target,
        "over": {"limit": over.limit, "over": over.over, "failed": over.failed,
                 "rows": [{"location": r.location, "id": r.id, "code": r.code,
                           "tokens_after": r.tokens_after} for r in over.rows],
                 "not_examined": [list(pair) for pair in over.not_examined]},
        "fixes": {"rows": fixes.rows, "alone": [_entry(e) for e in fixes.alone],
                  "best": _entry(fixes.best), "together": _entry(fixes.together),
                  "searched": fixes.searched},
        "head_help": {str(i): [_remedy(r) for r in remedies]
                      for i, remedies in w.head_help.items()},
    }


def _read_remedy(d: dict[str, Any]) -> Remedy:
    return Remedy(str(d["family"]), tuple(str(f) for f in d["flags"]),
                  tuple((str(name), value) for name, value in d["changes"]))


def _read_entry(d: Any) -> Entry | None:
    if d is None:
        return None
    return Entry(tuple(_read_remedy(r) for r in d["remedies"]),
                 frozenset(int(i) for i in d["fixed"]))


def from_stored(d: dict[str, Any]) -> WhatWouldFix:
    """The table `to_stored` wrote (its rows without their turns)."""
    o, f = d["over"], d["fixes"]
    over = OverRows(limit=int(o["limit"]), over=int(o["over"]), failed=int(o["failed"]),
                    rows=[OverRow(str(r["location"]), r["id"], str(r["code"]),
                                  int(r["tokens_after"]), _NO_ROW) for r in o["rows"]],
                    not_examined=[(str(a), str(b)) for a, b in o["not_examined"]])
    alone = [e for e in (_read_entry(x) for x in f["alone"]) if e is not None]
    fixes = Fixes(int(f["rows"]), alone, _read_entry(f["best"]), _read_entry(f["together"]),
                  int(f["searched"]))
    head_help = {int(i): [_read_remedy(r) for r in remedies]
                 for i, remedies in d["head_help"].items()}
    return WhatWouldFix(over, fixes, bool(d["exact"]), int(d["summary_target"]),
                        int(d["target"]), head_help)
