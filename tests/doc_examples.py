"""The manual's shell examples, run as written (tests/test_docs.py).

The convention, for a page's authors (docs/development.md, "Examples that run"):

- Only ```` ```console ```` blocks run. A line starting with ``$ `` is a command (a line
  ending in a backslash goes on on the next); the lines up to the next command are what
  it prints, stdout and stderr together, in the order printed.
- A line ``...`` alone stands for any number of lines (none included); a line ending in
  ``...`` matches any line that starts with what comes before it.
- A last line ``[exit N]`` says the command exits with N; without it, it must exit 0.
- Before comparing, both sides lose trailing spaces and have every duration
  (``29.3s``, ``0.47 s``, ``12 ms``), with the spaces before it, replaced by
  `` <time>`` and the date-time of a run by ``<when>``; the run's folder becomes ``.``.
- The blocks of a page run in order, in one fresh folder holding a copy of
  ``data_samples/``, with ``trajectory-compressor`` on PATH: a page's later commands see
  what its earlier ones wrote (compress, then report). A plain ``trajectory-compressor``
  command (no pipe, redirection or other shell syntax) runs in the test's process, the
  rest in bash.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A duration with the spaces before it (a right-aligned figure shifts with its width).
_DURATION = re.compile(r" *\b\d[\d,]*(?:\.\d+)? ?(?:ms|s|min)\b")
_WHEN = re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?\b")
_EXIT = re.compile(r"^\[exit (\d+)\]$")


@dataclass(frozen=True)
class Example:
    """One command of a page and what the page says it prints."""

    page: str
    line: int  # 1-based, of the command in the page
    command: str
    expected: list[str]
    exit_code: int


def console_blocks(text: str) -> list[tuple[int, list[str]]]:
    """Each ```console block of a page: (line of its first line, its lines)."""
    blocks: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```console":
            start, body = i + 2, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            blocks.append((start, body))
        i += 1
    return blocks


def examples(page: Path) -> list[Example]:
    """The commands of ``page``'s console blocks, in order."""
    found: list[Example] = []
    for start, body in console_blocks(page.read_text(encoding="utf-8")):
        i = 0
        while i < len(body):
            if not body[i].startswith("$ "):
                raise AssertionError(f"{page.name}:{start + i}: a console block starts with "
                                     "a '$ ' command")
            line, command = start + i, body[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + body[i].strip()
            i += 1
            expected: list[str] = []
            while i < len(body) and not body[i].startswith("$ "):
                expected.append(body[i])
                i += 1
            code = 0
            while expected and not expected[-1].strip():
                expected.pop()
            if expected and (match := _EXIT.match(expected[-1].strip())):
                code = int(match.group(1))
                expected.pop()
            found.append(Example(page.name, line, command, expected, code))
    return found


def normalise(text: str, folder: Path | None = None) -> list[str]:
    """``text``'s lines as compared: durations and date-times masked, the run's folder
    written as ``.``, trailing spaces dropped."""
    if folder is not None:
        text = text.replace(f"{folder}/", "").replace(str(folder), ".")
    text = _WHEN.sub("<when>", text)
    return [_DURATION.sub(" <time>", line).rstrip() for line in text.splitlines()]


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is what ``expected`` shows (``...`` lines and line ends)."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    if not actual:
        return False
    if head.endswith("...") and head != "...":
        ok = actual[0].startswith(head[:-3])
    else:
        ok = actual[0] == head
    return ok and matches(rest, actual[1:])


def workspace(folder: Path) -> dict[str, str]:
    """A fresh folder with the samples and ``trajectory-compressor`` on PATH; the
    environment the commands run in."""
    shutil.copytree(ROOT / "data_samples", folder / "data_samples",
                    ignore=shutil.ignore_patterns("*_compressed*"))
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "trajectory-compressor"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trajectory_compressor "$@"\n',
                    encoding="utf-8")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               COLUMNS="100", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


_SHELL = re.compile(r"[|&;<>()$`*?~]")


def run(example: Example, folder: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    """Run one example in ``folder``: its exit code and its output as compared. A plain
    ``trajectory-compressor ...`` command runs in this process (the same typer app the
    console script runs, stdout and stderr interleaved as printed, without starting
    Python and loading the tokenizer again); anything else runs in bash."""
    words = shlex.split(example.command) if not _SHELL.search(example.command) else []
    if words and words[0] == "trajectory-compressor":
        from typer.testing import CliRunner

        from trajectory_compressor.app.cli import app

        before = Path.cwd()
        os.chdir(folder)
        try:
            overrides: dict[str, str | None] = {
                k: None for k in os.environ if k.endswith("_API_KEY")}
            overrides.update(COLUMNS="100", HF_HUB_OFFLINE="1")
            result = CliRunner().invoke(app, words[1:], env=overrides,
                                        prog_name="trajectory-compressor")
        finally:
            os.chdir(before)
        return result.exit_code, normalise(result.output, folder)
    done = subprocess.run(["bash", "-c", example.command], cwd=folder, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    return done.returncode, normalise(done.stdout, folder)
