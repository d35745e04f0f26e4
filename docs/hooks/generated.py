"""MkDocs hook: the pages generated from the code at build time, so they cannot drift.

A page holding the line ``<!-- generated: cli -->`` (alone on its line) gets, in its
place, every command and option of the command line (from the typer app);
``<!-- generated: config -->``, every configuration key (from `core/config.py`).
See `trajectory_compressor/app/manual.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # a build from the clone without the package installed
    sys.path.insert(0, str(ROOT))

MARKS = {"<!-- generated: cli -->": "cli", "<!-- generated: config -->": "config"}


def generated(kind: str) -> str:
    """The markdown of one generated reference."""
    import typer

    from trajectory_compressor.app.cli import app
    from trajectory_compressor.app.manual import cli_reference, config_reference

    group = typer.main.get_command(app)
    return cli_reference(group) if kind == "cli" else config_reference(group)  # type: ignore[arg-type]


def on_page_markdown(markdown: str, **_: Any) -> str:
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.strip() in MARKS:
            lines[i] = generated(MARKS[line.strip()])
    return "\n".join(lines)
