"""The 50-line baseline `--distill safe` is measured against (issue 38, BENCHMARKS.md
"Distill, round 2"): what anyone would write in an afternoon.

Per tool output: ANSI escapes stripped, each line's last carriage-return segment kept,
runs of exactly identical consecutive lines as one line plus ``[xN]``, a JSON document
minified (parse and dump), and an output identical to an earlier one of the row as
``[same as output #k]``. `baseline_outputs` does a row; `shown_by_baseline` is its first
two steps alone (what it claims a terminal showed).
"""

from __future__ import annotations

import json
import re

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")


def shown_by_baseline(text: str) -> str:
    """ANSI stripped, then the last CR segment of each line."""
    text = ANSI.sub("", text).replace("\r\n", "\n")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def _runs(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i
        while j + 1 < len(lines) and lines[j + 1] == lines[i]:
            j += 1
        n = j - i + 1
        out.append(lines[i] + (f" [x{n}]" if n > 1 else ""))
        i = j + 1
    return out


def _minified(text: str) -> str:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(stripped), separators=(",", ":"), ensure_ascii=False)
        except ValueError:
            pass
    return text


def baseline(text: str) -> str:
    """One output through every step but the row's de-duplication."""
    shown = shown_by_baseline(text)
    minified = _minified(shown)
    return minified if minified != shown else "\n".join(_runs(shown.split("\n")))


def baseline_outputs(outputs: list[str]) -> list[str]:
    """A row's tool outputs, each through `baseline`, repeats by reference."""
    seen: dict[str, int] = {}
    out = []
    for k, text in enumerate(outputs, 1):
        done = baseline(text)
        out.append(f"[same as output #{seen[done]}]" if done in seen else done)
        seen.setdefault(done, k)
    return out
