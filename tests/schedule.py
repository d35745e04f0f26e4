"""The order in which pytest-xdist hands out the tests: the longest first.

With `--dist loadgroup --no-loadscope-reorder`, xdist gives a worker that runs short of
work the next unit (one test, or all the tests of an `xdist_group`) in collection order. A
45-second test collected last starts when the others are nearly done, and the run then
waits for it alone; started first, it runs beside the short ones. Most of the slow tests
wait (on a process, a rate limit, Ray, llama.cpp) more than they compute, so they also
overlap well with the others.

The durations come from an earlier run: `tests/durations.json` (seconds per test id, the
tests that took at least `KEPT_SECONDS`), rewritten by a run with `TC_RECORD_DURATIONS=1`
(`TC_RECORD_DURATIONS=1 bash scripts/test.sh`). A test missing from it (new, or fast)
counts as `UNKNOWN_HEAVY` or `UNKNOWN_QUICK` seconds, after its tier. The order changes
only which tests start first, never what a test sees: a group's tests stay together and
in file order, and a run without workers keeps pytest's order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().with_name("durations.json")
RECORD_ENV = "TC_RECORD_DURATIONS"
KEPT_SECONDS = 0.5
UNKNOWN_HEAVY = 2.0  # a new test that starts a process, Ray or a browser
UNKNOWN_QUICK = 0.05


def recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _unit(item: pytest.Item) -> str:
    group = item.get_closest_marker("xdist_group")
    return f"group {group.args[0]}" if group and group.args else item.nodeid


def longest_first(items: list[pytest.Item], durations: Mapping[str, float]) -> None:
    """Reorder ``items`` in place: units of work by their total duration, longest first
    (a stable sort: ties keep the collection order), each unit's tests in their order."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(_unit(item), []).append(item)

    def seconds(item: pytest.Item) -> float:
        known = durations.get(item.nodeid)
        if known is not None:
            return known
        return UNKNOWN_HEAVY if item.get_closest_marker("heavy") else UNKNOWN_QUICK

    ordered = sorted(units.values(), key=lambda unit: -sum(map(seconds, unit)))
    items[:] = [item for unit in ordered for item in unit]


def record(durations: Mapping[str, float], ran: Iterable[str]) -> None:
    """Merge this run's durations into the file: the tests that ran take their new figure
    (or leave the file if now under `KEPT_SECONDS`); the others keep theirs."""
    ran = set(ran)
    kept = {k: v for k, v in recorded().items() if k not in ran}
    kept.update({k: round(v, 1) for k, v in durations.items() if v >= KEPT_SECONDS})
    DURATIONS.write_text(json.dumps(dict(sorted(kept.items())), indent=0) + "\n",
                         encoding="utf-8")


def recording() -> bool:
    return os.environ.get(RECORD_ENV, "") not in ("", "0")
